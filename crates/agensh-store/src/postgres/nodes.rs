//! Nodes on other hosts: their tokens, how many workers each may run, and which workers
//! each was given — the rules of `sqlite/nodes.rs`, in PostgreSQL.

use agensh_domain::node::{self, NewNode, NodeInfo};
use agensh_domain::worker::NewWorker;
use agensh_domain::Result;

use super::db::{Conn, WriteCtx};
use super::workers;
use crate::common::new_token;
use crate::common::workers::node_exists;

pub async fn add(ctx: &mut WriteCtx<'_>, name: &str, allowed: usize, now: i64) -> Result<NewNode> {
    node::validate_name(name)?;
    node::check_allowed(allowed)?;
    ctx.lock().await?;
    let conn = &mut ctx.conn;
    if conn
        .query_opt("SELECT 1 FROM nodes WHERE name = $1", &[&name])
        .await?
        .is_some()
    {
        return Err(node_exists(name));
    }
    let token = new_token("agn_")?;
    conn.execute(
        "INSERT INTO nodes(name, token, workers, created_at) VALUES ($1, $2, $3, $4)",
        &[&name, &token, &(allowed as i64), &now],
    )
    .await?;
    Ok(NewNode {
        name: name.to_string(),
        token,
        workers: allowed,
    })
}

pub async fn tokens(conn: &mut Conn) -> Result<Vec<(String, String)>> {
    let rows = conn
        .query(
            "SELECT name, token FROM nodes ORDER BY name COLLATE \"C\"",
            &[],
        )
        .await?;
    Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
}

async fn assigned(conn: &mut Conn, name: &str) -> Result<Vec<NewWorker>> {
    let rows = conn
        .query(
            "SELECT w.id, w.token FROM node_workers n JOIN workers w ON w.id = n.worker \
             WHERE n.node = $1 ORDER BY w.num",
            &[&name],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|r| NewWorker {
            id: r.get(0),
            token: r.get(1),
        })
        .collect())
}

pub async fn list(conn: &mut Conn) -> Result<Vec<NodeInfo>> {
    let rows = conn
        .query(
            "SELECT name, workers, created_at, registered_at FROM nodes ORDER BY name COLLATE \"C\"",
            &[],
        )
        .await?;
    let mut out = Vec::with_capacity(rows.len());
    for r in rows {
        let name: String = r.get(0);
        out.push(NodeInfo {
            assigned: assigned(conn, &name)
                .await?
                .into_iter()
                .map(|w| w.id)
                .collect(),
            workers: r.get::<_, i64>(1) as usize,
            created_at: r.get(2),
            registered_at: r.get(3),
            name,
        });
    }
    Ok(out)
}

pub async fn register(
    ctx: &mut WriteCtx<'_>,
    name: &str,
    asked: usize,
    now: i64,
) -> Result<Vec<NewWorker>> {
    ctx.lock().await?;
    let allowed: i64 = ctx
        .conn
        .query_opt("SELECT workers FROM nodes WHERE name = $1", &[&name])
        .await?
        .map(|r| r.get(0))
        .ok_or_else(|| node::unknown_node(name))?;
    node::check_register(name, asked, allowed as usize)?;
    let mut have = assigned(ctx.conn, name).await?;
    if have.len() < asked {
        let missing = asked - have.len();
        let rows = ctx
            .conn
            .query(
                "SELECT id, token FROM workers WHERE id NOT IN (SELECT worker FROM node_workers) \
                 ORDER BY num LIMIT $1",
                &[&(missing as i64)],
            )
            .await?;
        let mut free: Vec<NewWorker> = rows
            .iter()
            .map(|r| NewWorker {
                id: r.get(0),
                token: r.get(1),
            })
            .collect();
        if free.len() < missing {
            free.extend(workers::add(ctx, missing - free.len(), now).await?);
        }
        for w in &free {
            ctx.conn
                .execute(
                    "INSERT INTO node_workers(worker, node) VALUES ($1, $2)",
                    &[&w.id, &name],
                )
                .await?;
        }
        have = assigned(ctx.conn, name).await?;
    }
    ctx.conn
        .execute(
            "UPDATE nodes SET registered_at = $2 WHERE name = $1",
            &[&name, &now],
        )
        .await?;
    have.truncate(asked);
    Ok(have)
}

pub async fn revoke(ctx: &mut WriteCtx<'_>, name: &str) -> Result<Vec<NewWorker>> {
    ctx.lock().await?;
    let conn = &mut ctx.conn;
    let had = assigned(conn, name).await?;
    conn.execute("DELETE FROM node_workers WHERE node = $1", &[&name])
        .await?;
    let n = conn
        .execute("DELETE FROM nodes WHERE name = $1", &[&name])
        .await?;
    if n == 0 {
        return Err(node::unknown_node(name));
    }
    let mut out = Vec::with_capacity(had.len());
    for w in had {
        let token = new_token("agw_")?;
        conn.execute(
            "UPDATE workers SET token = $2 WHERE id = $1",
            &[&w.id, &token],
        )
        .await?;
        out.push(NewWorker { id: w.id, token });
    }
    Ok(out)
}
