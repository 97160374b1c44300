//! The store move: `agensh store migrate`'s transfer of a SQLite store holding `records`
//! board records (each with its event) and `messages` channel messages by `workers` workers
//! into the empty PostgreSQL database `--to`: rows per second, and the time of the whole
//! move (one transaction, binary COPY, the grep token columns computed on the way).

use std::sync::Arc;
use std::time::Instant;

use agensh_domain::message::NewMessage;
use agensh_store::{SqliteStore, Store};
use anyhow::{bail, Result};
use serde_json::json;

use crate::hub::{bar, seed, vocabulary};

#[derive(clap::Args)]
pub struct Args {
    /// The PostgreSQL database to move into: a new, empty one (createdb NAME).
    #[arg(long, value_name = "URL")]
    to: String,
    /// Board records in the SQLite store (each also makes one event).
    #[arg(long, default_value_t = 200_000)]
    records: usize,
    /// Channel messages in the SQLite store (each also makes one event).
    #[arg(long, default_value_t = 50_000)]
    messages: usize,
    /// Workers (the records' and messages' authors).
    #[arg(long, default_value_t = 64)]
    workers: usize,
    /// Rows read and written at a time.
    #[arg(long, default_value_t = 1000)]
    batch: usize,
    /// Print the results as JSON.
    #[arg(long)]
    json: bool,
}

pub async fn run(a: Args) -> Result<()> {
    if !agensh_store::is_postgres_url(&a.to) {
        bail!("--to takes a PostgreSQL URL: postgres://USER:PASSWORD@HOST:PORT/DATABASE");
    }
    let tmp = tempfile::tempdir()?;
    let path = tmp.path().join("store.sqlite");
    let store = Arc::new(SqliteStore::open(&path)?);
    let now = agensh_domain::time::unix_ms(std::time::SystemTime::now());
    let workers: Vec<String> = store
        .add_workers(a.workers, now)
        .await?
        .into_iter()
        .map(|w| w.id)
        .collect();
    seed(store.clone(), &workers, a.records, Arc::new(vocabulary())).await?;
    let posting = bar(a.messages as u64, "messages");
    for i in 0..a.messages {
        store
            .post_message(
                &workers[i % workers.len()],
                NewMessage {
                    to: "#general".into(),
                    text: format!("message {i}: the lexer keeps line numbers"),
                    thread: None,
                },
                now,
            )
            .await?;
        posting.inc(1);
    }
    posting.finish_and_clear();
    drop(store);
    let bytes = std::fs::metadata(&path)?.len();

    let moving = bar(0, "moving");
    let started = Instant::now();
    let summary = agensh_store::transfer::sqlite_to_postgres(&path, &a.to, a.batch, |p| {
        moving.set_length(p.total);
        moving.set_position(p.done);
    })
    .await?;
    let secs = started.elapsed().as_secs_f64();
    moving.finish_and_clear();
    let rows_per_sec = summary.rows as f64 / secs;
    let r = json!({
        "records": a.records,
        "messages": a.messages,
        "workers": a.workers,
        "batch": a.batch,
        "sqlite_bytes": bytes,
        "rows": summary.rows,
        "tables": summary.tables.iter().map(|(t, n)| (t.clone(), json!(n))).collect::<serde_json::Map<_, _>>(),
        "seconds": secs,
        "rows_per_sec": rows_per_sec,
    });
    if a.json {
        println!("{}", serde_json::to_string_pretty(&r)?);
    } else {
        println!(
            "store move: {} rows ({} records, {} messages, {} events; SQLite file {:.1} MiB) into PostgreSQL in {:.1} s — {:.0} rows/s (batch {})",
            summary.rows,
            a.records,
            a.messages,
            summary.tables.iter().find(|(t, _)| t == "events").map_or(0, |(_, n)| *n),
            bytes as f64 / (1 << 20) as f64,
            secs,
            rows_per_sec,
            a.batch
        );
    }
    Ok(())
}
