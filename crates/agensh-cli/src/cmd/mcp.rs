//! `agensh mcp`: a stdio bridge to the hub's MCP endpoint, for agents that only take
//! stdio MCP servers (`agensh_node::mcp_bridge` does the bridging; here the hub and the
//! token are found as every command finds them). It reads newline-delimited JSON-RPC messages on stdin, POSTs each to
//! `<hub>/mcp` with the token (keeping the session id the hub hands out), and writes every
//! answer as one line on stdout; notifications get no line. It ends cleanly on EOF.
//! Logs go to stderr only: stdout carries nothing but protocol messages.
//!
//! Requests run concurrently (a merge with a gate may take minutes; a ping must not wait for
//! it), except `initialize`, which is answered before the next line is read.
//!
//! A `tools/call` of `ship` gets the same local pre-step as through the node's MCP proxy
//! (`agensh_node::mcp_proxy`), in the bridge's working directory (the agent's checkout):
//! what is left is committed and pushed as the worker before the call goes to the hub.

use std::time::Duration;

use agensh_node::mcp_bridge::{self, Hub};
use anyhow::{anyhow, Result};

use crate::cli::{Global, McpArgs};
use crate::connect::client;

pub async fn run(g: &Global, a: McpArgs) -> Result<()> {
    // The same resolution as every other command: --hub/AGENSH_HUB or .agensh/hub.json,
    // --token/AGENSH_TOKEN or the admin token from hub.json.
    let url = client(g)?.base().to_string();
    let token = match &g.token {
        Some(t) => t.clone(),
        None => {
            agensh_hub::read_hub_info(&g.dir)
                .map_err(|_| anyhow!("no token: set AGENSH_TOKEN or --token to a worker's token"))?
                .admin_token
        }
    };
    mcp_bridge::run(Hub {
        url,
        token,
        as_worker: g.as_worker.clone(),
        hub_wait: Duration::from_secs(a.hub_wait),
    })
    .await?;
    Ok(())
}
