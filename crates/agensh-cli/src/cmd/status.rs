//! `agensh status`: the organization's workers, goal, cost and counts, from anywhere.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::Result;

use crate::cli::{Global, StatusArgs};
use crate::output::{json, now_ms, one_line};
use crate::view::{clock, count, gateway_text, per_worker, truncate};

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
    if goal.defined() {
        outln!("goal ({}): {}", goal.conditions.join("; "), goal.line());
        for check in goal.checks.iter().filter(|c| !c.met) {
            let last = check.detail.trim().lines().last().unwrap_or("");
            outln!(
                "  {} on {}: {}",
                check.condition,
                agensh_domain::goal::short(&check.commit),
                one_line(last)
            );
        }
    }
    if let Some(e) = &goal.economy {
        outln!("cost: {}", e.line());
    }
    let used = per_worker(&usage);
    let now = now_ms();
    outln!(
        "{:<8} {:<9} {:<12} {:<44} {:<18} {:<20} CLAIM",
        "WORKER",
        "STATUS",
        "ACTIVE",
        "STEP",
        "TURN TOKENS",
        "MODEL USE"
    );
    for w in &workers {
        let active = w
            .last_activity
            .map(|t| agensh_domain::time::age(t, now))
            .unwrap_or_else(|| "never".into());
        let claim = w
            .claims
            .last()
            .map(|r| format!("{} {}", r.id, r.label.as_deref().unwrap_or(&r.text)))
            .unwrap_or_default();
        let (step, tokens) = match &w.progress {
            Some(p) => (
                format!(
                    "{} for {}",
                    p.step,
                    clock(Duration::from_millis((now - p.since).max(0) as u64))
                ),
                format!("{} {:.1} tok/s", count(p.tokens), p.tokens_per_sec),
            ),
            None => ("-".into(), "-".into()),
        };
        let model_use = used.get(&w.id).map_or("-".to_string(), |u| {
            format!(
                "{} ${:.2}",
                count(u.input_tokens + u.output_tokens),
                u.cost_usd
            )
        });
        outln!(
            "{:<8} {:<9} {:<12} {:<44} {:<18} {:<20} {}",
            w.id,
            w.status.as_str(),
            active,
            truncate(&step, 44),
            tokens,
            model_use,
            claim
        );
    }
    // Which agent each worker runs, one line per agent (and model).
    let mut agents: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for w in &workers {
        if let Some(a) = &w.agent {
            agents.entry(a).or_default().push(&w.id);
        }
    }
    for (agent, ids) in agents {
        outln!("agent {agent}: {}", ids.join(", "));
    }
    for w in &workers {
        if let Some(why) = &w.stopped_for {
            outln!("{} stopped: {why}", w.id);
        }
    }
    outln!(
        "PRs: {} open, {} merged, {} closed · board: {} records · messages: {}",
        stats.prs_open,
        stats.prs_merged,
        stats.prs_closed,
        stats.records,
        stats.messages
    );
    if let Some(g) = used.get("") {
        outln!("{}", gateway_text(g));
    }
    Ok(())
}
