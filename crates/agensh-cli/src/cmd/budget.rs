//! `agensh budget` (what may be spent and what was) and `agensh budget set` (admin).

use agensh_domain::budget::{Dimension, Limits, LimitsChange, Spent};
use agensh_protocol::rest::BudgetView;
use anyhow::Result;

use crate::cli::{BudgetArgs, BudgetCommand, Global};
use crate::output::json;

pub async fn run(g: &Global, a: BudgetArgs) -> Result<()> {
    let conn = crate::connect::connect(g).await?;
    let c = &conn.client;
    let view = match a.command {
        None => c.budget().await,
        Some(BudgetCommand::Set {
            worker,
            organization,
            tokens,
            cost_usd,
            requests,
            hours,
        }) => {
            let change = LimitsChange {
                worker,
                organization,
                tokens,
                cost_usd,
                requests,
                hours,
            };
            c.set_budget(&change).await
        }
    };
    conn.close().await;
    let view = view?;
    if a.json {
        json(&view);
    } else {
        print(&view);
    }
    Ok(())
}

/// One budget: spent of limit, or spent alone when there is no limit.
fn cell(d: Dimension, limits: &Limits, spent: &Spent, now: i64) -> String {
    let (used, limit) = match d {
        Dimension::Tokens => (spent.tokens as f64, limits.tokens as f64),
        Dimension::Cost => (spent.cost_usd, limits.cost_usd),
        Dimension::Requests => (spent.requests as f64, limits.requests as f64),
        Dimension::Hours => (
            if spent.first_at == 0 {
                0.0
            } else {
                (now - spent.first_at).max(0) as f64 / 3_600_000.0
            },
            limits.hours,
        ),
    };
    let short = |x: f64| match d {
        Dimension::Cost => format!("${x:.2}"),
        Dimension::Hours => format!("{x:.2}h"),
        _ => crate::view::count(x as u64),
    };
    if limit > 0.0 {
        format!("{} / {}", short(used), short(limit))
    } else {
        short(used)
    }
}

fn print(v: &BudgetView) {
    let now = v.at;
    outln!(
        "{:<14} {:<18} {:<18} {:<16} {:<14} STOPPED",
        "SCOPE",
        "TOKENS",
        "COST",
        "REQUESTS",
        "HOURS"
    );
    let line = |scope: &str, limits: &Limits, spent: &Spent, stopped: Option<&str>| {
        let cells: Vec<String> = Dimension::ALL
            .iter()
            .map(|d| cell(*d, limits, spent, now))
            .collect();
        outln!(
            "{:<14} {:<18} {:<18} {:<16} {:<14} {}",
            scope,
            cells[0],
            cells[1],
            cells[2],
            cells[3],
            stopped.unwrap_or("-")
        );
    };
    line(
        "organization",
        &v.organization,
        &v.organization_spent,
        v.organization_stopped_for.as_deref(),
    );
    for w in &v.workers {
        line(&w.worker, &w.limits, &w.spent, w.stopped_for.as_deref());
    }
    outln!(
        "a notice goes out at {:.0}% of a budget; no limit shows the amount spent alone",
        v.notice_at * 100.0
    );
}
