//! Channel posts and direct messages.

use agensh_domain::ids::ADMIN;
use agensh_domain::message::{Message, NewMessage, Target};
use agensh_domain::Result;
use rusqlite::{params, Connection, OptionalExtension};

use super::conn::{sql_err, WriteCtx};
use super::workers;
use crate::common::messages::{posted, unknown_thread};
use crate::common::rows::{self, MESSAGE_COLUMNS};
use crate::MessageQuery;

pub fn post(ctx: &mut WriteCtx<'_>, from: &str, m: NewMessage, now: i64) -> Result<Message> {
    let target = m.validate()?;
    let conn = ctx.conn;
    if let Target::Worker(id) = &target {
        workers::ensure_exists(conn, id)?;
    }
    if let Some(t) = m.thread {
        let found: Option<i64> = conn
            .query_row("SELECT 1 FROM messages WHERE seq = ?1", [t], |r| r.get(0))
            .optional()
            .map_err(sql_err)?;
        if found.is_none() {
            return Err(unknown_thread(t));
        }
    }
    conn.prepare_cached(
        "INSERT INTO messages(sender, target, text, thread, created_at) VALUES (?1, ?2, ?3, ?4, ?5)",
    )
    .and_then(|mut s| s.execute(params![from, target.as_str(), m.text, m.thread, now]))
    .map_err(sql_err)?;
    let (msg, event) = posted(
        conn.last_insert_rowid(),
        from,
        &target,
        m.text,
        m.thread,
        now,
    );
    ctx.emit(&event, now)?;
    Ok(msg)
}

/// Messages visible to `reader`, oldest first; with `unread`, only new ones, marked read.
pub fn read(conn: &Connection, reader: &str, q: &MessageQuery) -> Result<Vec<Message>> {
    let admin = reader == ADMIN;
    let cursor: i64 = if q.unread && !admin {
        conn.query_row(
            "SELECT msg_cursor FROM workers WHERE id = ?1",
            [reader],
            |r| r.get(0),
        )
        .optional()
        .map_err(sql_err)?
        .ok_or_else(|| agensh_domain::worker::unknown_worker(reader))?
    } else {
        0
    };
    let mut filter = String::from("1 = 1");
    if !admin {
        filter.push_str(" AND (substr(target, 1, 1) = '#' OR target = ?2 OR sender = ?2)");
    }
    if q.unread {
        filter.push_str(" AND seq > ?1 AND sender != ?2");
    }
    if q.before.is_some() {
        filter.push_str(" AND seq < ?5");
    }
    match &q.with {
        Some(w) if w.starts_with('#') => filter.push_str(" AND target = ?3"),
        Some(_) if admin => filter.push_str(" AND (target = ?3 OR sender = ?3)"),
        Some(_) => {
            filter.push_str(" AND ((target = ?3 AND sender = ?2) OR (target = ?2 AND sender = ?3))")
        }
        None => filter.push_str(" AND ?3 IS NULL"),
    }
    if q.before.is_none() {
        filter.push_str(" AND ?5 IS NULL");
    }
    // Unread: oldest first from the cursor. Otherwise: the newest `limit`, shown oldest first.
    let order = if q.unread { "ASC" } else { "DESC" };
    let sql = format!(
        "SELECT {MESSAGE_COLUMNS} FROM messages WHERE {filter} ORDER BY seq {order} LIMIT ?4"
    );
    let mut stmt = conn.prepare_cached(&sql).map_err(sql_err)?;
    let rows = stmt
        .query_map(
            params![cursor, reader, q.with, q.limit as i64, q.before],
            |r| rows::message(r),
        )
        .map_err(sql_err)?;
    let mut out: Vec<Message> = rows.collect::<rusqlite::Result<_>>().map_err(sql_err)?;
    if !q.unread {
        out.reverse();
    } else if let (Some(last), false) = (out.last(), admin) {
        conn.execute(
            "UPDATE workers SET msg_cursor = max(msg_cursor, ?2) WHERE id = ?1",
            params![reader, last.seq],
        )
        .map_err(sql_err)?;
    }
    Ok(out)
}
