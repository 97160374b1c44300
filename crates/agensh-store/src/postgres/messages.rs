//! Channel posts and direct messages.

use agensh_domain::ids::ADMIN;
use agensh_domain::message::{Message, NewMessage, Target};
use agensh_domain::Result;
use tokio_postgres::types::ToSql;

use super::db::{Conn, WriteCtx};
use super::workers;
use crate::common::messages::{posted, unknown_thread};
use crate::common::rows::{self, MESSAGE_COLUMNS};
use crate::MessageQuery;

pub async fn post(ctx: &mut WriteCtx<'_>, from: &str, m: NewMessage, now: i64) -> Result<Message> {
    let target = m.validate()?;
    ctx.lock().await?;
    let conn = &mut ctx.conn;
    if let Target::Worker(id) = &target {
        workers::ensure_exists(conn, id).await?;
    }
    if let Some(t) = m.thread {
        if conn
            .query_opt("SELECT 1 FROM messages WHERE seq = $1", &[&t])
            .await?
            .is_none()
        {
            return Err(unknown_thread(t));
        }
    }
    let seq: i64 = conn
        .query_one(
            "INSERT INTO messages(seq, sender, target, text, thread, created_at) \
             SELECT coalesce(max(seq), 0) + 1, $1, $2, $3, $4, $5 FROM messages RETURNING seq",
            &[&from, &target.as_str(), &m.text, &m.thread, &now],
        )
        .await?
        .get(0);
    let (msg, event) = posted(seq, from, &target, m.text, m.thread, now);
    ctx.emit(&event, now).await?;
    Ok(msg)
}

/// Messages visible to `reader`, oldest first; with `unread`, only new ones, marked read.
pub async fn read(conn: &mut Conn, reader: &str, q: &MessageQuery) -> Result<Vec<Message>> {
    let admin = reader == ADMIN;
    let cursor: i64 = if q.unread && !admin {
        conn.query_opt("SELECT msg_cursor FROM workers WHERE id = $1", &[&reader])
            .await?
            .map(|r| r.get(0))
            .ok_or_else(|| agensh_domain::worker::unknown_worker(reader))?
    } else {
        0
    };
    let limit = q.limit as i64;
    let mut params: Vec<&(dyn ToSql + Sync)> = vec![&reader, &limit];
    let mut filter = String::from("TRUE");
    if !admin {
        filter.push_str(" AND (left(target, 1) = '#' OR target = $1 OR sender = $1)");
    }
    if q.unread {
        params.push(&cursor);
        filter.push_str(&format!(" AND seq > ${} AND sender != $1", params.len()));
    }
    if let Some(before) = &q.before {
        params.push(before);
        filter.push_str(&format!(" AND seq < ${}", params.len()));
    }
    if let Some(with) = &q.with {
        params.push(with);
        let w = format!("${}", params.len());
        if with.starts_with('#') {
            filter.push_str(&format!(" AND target = {w}"));
        } else if admin {
            filter.push_str(&format!(" AND (target = {w} OR sender = {w})"));
        } else {
            filter.push_str(&format!(
                " AND ((target = {w} AND sender = $1) OR (target = $1 AND sender = {w}))"
            ));
        }
    }
    if admin {
        // $1 is still bound: name it once so its type is known.
        filter.push_str(" AND $1::text IS NOT NULL");
    }
    let order = if q.unread { "ASC" } else { "DESC" };
    let sql = format!(
        "SELECT {MESSAGE_COLUMNS} FROM messages WHERE {filter} ORDER BY seq {order} LIMIT $2"
    );
    let found = conn.query(&sql, &params).await?;
    let mut out: Vec<Message> = found.iter().map(rows::message).collect::<Result<_>>()?;
    if !q.unread {
        out.reverse();
    } else if let (Some(last), false) = (out.last(), admin) {
        conn.execute(
            "UPDATE workers SET msg_cursor = greatest(msg_cursor, $2) WHERE id = $1",
            &[&reader, &last.seq],
        )
        .await?;
    }
    Ok(out)
}
