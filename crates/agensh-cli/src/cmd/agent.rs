//! `agensh agent`: agents built into agensh that speak the Agent Client Protocol on stdio.

use anyhow::Context;

use crate::cli::{AgentArgs, AgentCommand};

pub async fn run(a: AgentArgs) -> anyhow::Result<()> {
    match a.command {
        AgentCommand::Script { scenario } => agensh_script::run_stdio(&scenario)
            .await
            .context("the scripted agent"),
    }
}
