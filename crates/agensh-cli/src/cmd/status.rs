//! `agensh status`: the organization's workers, goal, cost and counts, from anywhere.

use agensh_client::show;
use anyhow::Result;

use crate::cli::{Global, StatusArgs};
use crate::output::{json, lines, now_ms};

pub async fn status(g: &Global, a: StatusArgs) -> Result<()> {
    let conn = crate::connect::connect(g).await?;
    let c = &conn.client;
    let (workers, stats, usage) = (c.workers().await, c.stats().await, c.usage().await);
    let goal = c.goal().await;
    conn.close().await;
    let (workers, stats, usage, goal) = (workers?, stats?, usage?, goal?);
    if a.json {
        json(
            &serde_json::json!({ "workers": workers, "stats": stats, "usage": usage, "goal": goal }),
        );
        return Ok(());
    }
    lines(show::org::status(&workers, &stats, &usage, &goal, now_ms()));
    Ok(())
}
