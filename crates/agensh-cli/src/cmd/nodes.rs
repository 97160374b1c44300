//! `agensh nodes add|list|revoke`: the operator's node tokens (DESIGN §8).

use agensh_client::Client;
use anyhow::Result;

use crate::cli::{Global, NodesArgs, NodesCommand};
use crate::connect::connect;
use crate::output::{json, now_ms};

/// Runs the command against the organization's hub (served here for the command when none
/// runs: see `connect::connect`).
pub async fn run(g: &Global, a: NodesArgs) -> Result<()> {
    let conn = connect(g).await?;
    let result = run_on(&conn.client, a).await;
    conn.close().await;
    result
}

async fn run_on(c: &Client, a: NodesArgs) -> Result<()> {
    match a.command {
        NodesCommand::Add {
            name,
            workers,
            json: as_json,
        } => {
            let node = c.add_node(&name, workers).await?;
            if as_json {
                json(&node);
            } else {
                // The token alone on stdout, so `T=$(agensh nodes add …)` takes it.
                outln!("{}", node.token);
                eprintln!(
                    "node {} may run {} worker(s); start it on its host with `agensh node --hub URL --node-token TOKEN --workers {}` (or AGENSH_NODE_TOKEN); the token is shown only now",
                    node.name, node.workers, node.workers
                );
            }
        }
        NodesCommand::List { json: as_json } => {
            let nodes = c.nodes().await?;
            if as_json {
                json(&nodes);
            } else {
                let now = now_ms();
                outln!(
                    "{:<24} {:>7} {:<14} ASSIGNED",
                    "NAME",
                    "WORKERS",
                    "REGISTERED"
                );
                for n in nodes {
                    let seen = n
                        .registered_at
                        .map(|t| agensh_domain::time::age(t, now))
                        .unwrap_or_else(|| "never".into());
                    outln!(
                        "{:<24} {:>7} {:<14} {}",
                        n.name,
                        n.workers,
                        seen,
                        n.assigned.join(",")
                    );
                }
            }
        }
        NodesCommand::Revoke { name } => {
            let renewed = c.revoke_node(&name).await?;
            eprintln!(
                "node {name} revoked; its token and the tokens of its {} worker(s) no longer work",
                renewed.len()
            );
            for id in renewed {
                outln!("{id}");
            }
        }
    }
    Ok(())
}
