//! Channel posts and direct messages.

use agensh_domain::event::{kinds, NewEvent, Priority};
use agensh_domain::ids::ADMIN;
use agensh_domain::message::{Message, NewMessage, Target};
use agensh_domain::{Error, Result};
use tokio_postgres::types::ToSql;
use tokio_postgres::Row;

use super::db::{Conn, WriteCtx};
use super::workers;
use crate::MessageQuery;

fn row_to_message(row: &Row) -> Message {
    Message {
        seq: row.get(0),
        from: row.get(1),
        to: row.get(2),
        text: row.get(3),
        thread: row.get(4),
        created_at: row.get(5),
    }
}

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
            return Err(Error::invalid(
                "unknown_thread",
                format!("there is no message M{t} to reply to — reply_to takes the id of a message you have read, like M12"),
            ));
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
    let msg = Message {
        seq,
        from: from.to_string(),
        to: target.as_str().to_string(),
        text: m.text,
        thread: m.thread,
        created_at: now,
    };
    let (kind, priority, to) = match &target {
        Target::Channel(_) => (kinds::CHANNEL_POST, Priority::Normal, None),
        Target::Worker(w) => (kinds::DIRECT_MESSAGE, Priority::Urgent, Some(w.clone())),
    };
    let event = NewEvent {
        kind: kind.into(),
        priority,
        payload: serde_json::to_value(&msg).expect("message serializes"),
        dedup_key: Some(format!("msg:M{}", msg.seq)),
        source: Some(from.to_string()),
        target: to,
        except: None,
    };
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
        "SELECT seq, sender, target, text, thread, created_at FROM messages WHERE {filter} ORDER BY seq {order} LIMIT $2"
    );
    let rows = conn.query(&sql, &params).await?;
    let mut out: Vec<Message> = rows.iter().map(row_to_message).collect();
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
