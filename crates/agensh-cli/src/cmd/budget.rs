//! `agensh budget` (what may be spent and what was) and `agensh budget set` (admin).

use agensh_client::show;
use agensh_domain::budget::LimitsChange;
use anyhow::Result;

use crate::cli::{BudgetArgs, BudgetCommand, Global};
use crate::output::json_or;

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
    json_or(a.json, &view?, show::org::budget);
    Ok(())
}
