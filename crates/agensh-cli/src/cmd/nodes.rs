//! `agensh nodes add|list|revoke`: the operator's node tokens (DESIGN §8).

use agensh_client::{show, Client};
use anyhow::Result;

use crate::cli::{NodesArgs, NodesCommand};
use crate::output::{json, json_or, now_ms};

/// Runs the command against the organization's hub (served here for the command when none
/// runs: see `connect::with_hub`).
pub async fn run(c: &Client, a: NodesArgs) -> Result<()> {
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
            json_or(as_json, &nodes, |n| show::org::nodes(n, now_ms()));
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
