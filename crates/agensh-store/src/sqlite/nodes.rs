//! Nodes on other hosts: their tokens, how many workers each may run, and which workers
//! each was given.

use agensh_domain::node::{self, NewNode, NodeInfo};
use agensh_domain::worker::NewWorker;
use agensh_domain::Result;
use rusqlite::{params, Connection, OptionalExtension};

use super::conn::sql_err;
use super::workers;
use crate::common::new_token;
use crate::common::workers::node_exists;

pub fn add(conn: &Connection, name: &str, allowed: usize, now: i64) -> Result<NewNode> {
    node::validate_name(name)?;
    node::check_allowed(allowed)?;
    let exists: Option<i64> = conn
        .query_row("SELECT 1 FROM nodes WHERE name = ?1", [name], |r| r.get(0))
        .optional()
        .map_err(sql_err)?;
    if exists.is_some() {
        return Err(node_exists(name));
    }
    let token = new_token("agn_")?;
    conn.execute(
        "INSERT INTO nodes(name, token, workers, created_at) VALUES (?1, ?2, ?3, ?4)",
        params![name, token, allowed as i64, now],
    )
    .map_err(sql_err)?;
    Ok(NewNode {
        name: name.to_string(),
        token,
        workers: allowed,
    })
}

/// Every node's (name, token), for the hub's authentication cache.
pub fn tokens(conn: &Connection) -> Result<Vec<(String, String)>> {
    let mut stmt = conn
        .prepare_cached("SELECT name, token FROM nodes ORDER BY name")
        .map_err(sql_err)?;
    let rows = stmt
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .map_err(sql_err)?;
    rows.collect::<rusqlite::Result<_>>().map_err(sql_err)
}

/// The workers of `name` (id, token), in worker order.
fn assigned(conn: &Connection, name: &str) -> Result<Vec<NewWorker>> {
    let mut stmt = conn
        .prepare_cached(
            "SELECT w.id, w.token FROM node_workers n JOIN workers w ON w.id = n.worker \
             WHERE n.node = ?1 ORDER BY w.num",
        )
        .map_err(sql_err)?;
    let rows = stmt
        .query_map([name], |r| {
            Ok(NewWorker {
                id: r.get(0)?,
                token: r.get(1)?,
            })
        })
        .map_err(sql_err)?;
    rows.collect::<rusqlite::Result<_>>().map_err(sql_err)
}

pub fn list(conn: &Connection) -> Result<Vec<NodeInfo>> {
    let mut stmt = conn
        .prepare_cached("SELECT name, workers, created_at, registered_at FROM nodes ORDER BY name")
        .map_err(sql_err)?;
    let rows = stmt
        .query_map([], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, i64>(1)?,
                r.get::<_, i64>(2)?,
                r.get::<_, Option<i64>>(3)?,
            ))
        })
        .map_err(sql_err)?;
    let rows: Vec<_> = rows.collect::<rusqlite::Result<_>>().map_err(sql_err)?;
    let mut out = Vec::with_capacity(rows.len());
    for (name, workers, created_at, registered_at) in rows {
        out.push(NodeInfo {
            assigned: assigned(conn, &name)?.into_iter().map(|w| w.id).collect(),
            name,
            workers: workers as usize,
            created_at,
            registered_at,
        });
    }
    Ok(out)
}

/// The first `asked` workers of node `name`: those it was given before, then workers no
/// node has (oldest first), then new ones, never more than it may run.
pub fn register(conn: &Connection, name: &str, asked: usize, now: i64) -> Result<Vec<NewWorker>> {
    let allowed: i64 = conn
        .query_row("SELECT workers FROM nodes WHERE name = ?1", [name], |r| {
            r.get(0)
        })
        .optional()
        .map_err(sql_err)?
        .ok_or_else(|| node::unknown_node(name))?;
    node::check_register(name, asked, allowed as usize)?;
    let mut have = assigned(conn, name)?;
    if have.len() < asked {
        let missing = asked - have.len();
        let mut free: Vec<NewWorker> = {
            let mut stmt = conn
                .prepare_cached(
                    "SELECT id, token FROM workers WHERE id NOT IN (SELECT worker FROM node_workers) \
                     ORDER BY num LIMIT ?1",
                )
                .map_err(sql_err)?;
            let rows = stmt
                .query_map([missing as i64], |r| {
                    Ok(NewWorker {
                        id: r.get(0)?,
                        token: r.get(1)?,
                    })
                })
                .map_err(sql_err)?;
            rows.collect::<rusqlite::Result<_>>().map_err(sql_err)?
        };
        if free.len() < missing {
            free.extend(workers::add(conn, missing - free.len(), now)?);
        }
        let mut stmt = conn
            .prepare_cached("INSERT INTO node_workers(worker, node) VALUES (?1, ?2)")
            .map_err(sql_err)?;
        for w in &free {
            stmt.execute(params![w.id, name]).map_err(sql_err)?;
        }
        have = assigned(conn, name)?;
    }
    conn.execute(
        "UPDATE nodes SET registered_at = ?2 WHERE name = ?1",
        params![name, now],
    )
    .map_err(sql_err)?;
    have.truncate(asked);
    Ok(have)
}

/// Removes node `name` and its token; its workers are no node's any more and get new
/// tokens, so what the node was given stops working. Returns them with their new tokens.
pub fn revoke(conn: &Connection, name: &str) -> Result<Vec<NewWorker>> {
    let had = assigned(conn, name)?;
    conn.execute("DELETE FROM node_workers WHERE node = ?1", [name])
        .map_err(sql_err)?;
    let n = conn
        .execute("DELETE FROM nodes WHERE name = ?1", [name])
        .map_err(sql_err)?;
    if n == 0 {
        return Err(node::unknown_node(name));
    }
    let mut stmt = conn
        .prepare_cached("UPDATE workers SET token = ?2 WHERE id = ?1")
        .map_err(sql_err)?;
    let mut out = Vec::with_capacity(had.len());
    for w in had {
        let token = new_token("agw_")?;
        stmt.execute(params![w.id, token]).map_err(sql_err)?;
        out.push(NewWorker { id: w.id, token });
    }
    Ok(out)
}
