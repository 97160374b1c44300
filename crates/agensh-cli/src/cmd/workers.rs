//! `agensh workers add|list|token`.

use anyhow::Result;

use crate::cli::{Global, WorkersArgs, WorkersCommand};
use crate::connect::client;
use crate::output::{json, now_ms};

pub async fn run(g: &Global, a: WorkersArgs) -> Result<()> {
    let c = client(g)?;
    match a.command {
        WorkersCommand::Add {
            count,
            json: as_json,
        } => {
            let added = c.add_workers(count).await?;
            if as_json {
                json(&added);
            } else {
                for w in added {
                    println!("{}", w.id);
                }
            }
        }
        WorkersCommand::List { json: as_json } => {
            let workers = c.workers().await?;
            if as_json {
                json(&workers);
            } else {
                let now = now_ms();
                println!("{:<8} {:<9} {:<14} CLAIMS", "ID", "STATUS", "LAST ACTIVITY");
                for w in workers {
                    let last = w
                        .last_activity
                        .map(|t| agensh_domain::time::age(t, now))
                        .unwrap_or_else(|| "never".into());
                    let claims: Vec<String> = w
                        .claims
                        .iter()
                        .map(|r| match &r.label {
                            Some(l) => format!("{} #{l}", r.id),
                            None => r.id.clone(),
                        })
                        .collect();
                    println!(
                        "{:<8} {:<9} {:<14} {}",
                        w.id,
                        w.status.as_str(),
                        last,
                        claims.join(", ")
                    );
                }
            }
        }
        WorkersCommand::Token { id } => {
            println!("{}", c.worker_token(&id).await?.token);
        }
    }
    Ok(())
}
