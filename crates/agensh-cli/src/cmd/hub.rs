//! `agensh hub DIR`: serves the organization until Ctrl-C or SIGTERM.

use std::sync::Arc;

use agensh_hub::{read_hub_info, state_dir, write_hub_info, HubInfo, STORE_FILE};
use agensh_store::SqliteStore;
use anyhow::{bail, Context, Result};

use crate::cli::HubArgs;
use crate::cmd::init::load_config;

pub async fn run(a: HubArgs) -> Result<()> {
    let config = load_config(&a.dir)?;
    raise_open_file_limit();
    if let Ok(info) = read_hub_info(&a.dir) {
        if process_alive(info.pid) && info.pid != std::process::id() {
            bail!(
                "a hub is already running for {} (pid {}, {}) — stop it first, or use it",
                a.dir.display(),
                info.pid,
                info.url
            );
        }
    }
    let listen = a.listen.unwrap_or_else(|| config.hub.listen.clone());
    let store = SqliteStore::open(&state_dir(&a.dir).join(STORE_FILE))?;
    let repo = state_dir(&a.dir).join(agensh_workspace::REPO_DIR);
    let workspace = if repo.exists() {
        Some(agensh_workspace::Workspace::open(&repo)?)
    } else {
        tracing::warn!(
            "{} has no git workspace (made by an older agensh init): pull requests and git over HTTP are off",
            a.dir.display()
        );
        None
    };
    let hub = agensh_hub::start_with_workspace(Arc::new(store), workspace, config, &listen).await?;
    let info = HubInfo {
        url: hub.url.clone(),
        admin_token: hub.admin_token.clone(),
        pid: std::process::id(),
    };
    write_hub_info(&a.dir, &info).context("cannot write .agensh/hub.json")?;
    println!("hub serving {} at {}", a.dir.display(), hub.url);
    wait_for_stop_signal().await;
    tracing::info!("stopping the hub");
    hub.shutdown().await;
    let _ = std::fs::remove_file(state_dir(&a.dir).join(agensh_hub::HUB_JSON));
    Ok(())
}

/// Resolves on Ctrl-C or SIGTERM.
pub async fn wait_for_stop_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .expect("SIGTERM handler installs");
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
}

fn process_alive(pid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}

/// Lifts the soft limit on open files to the hard limit: every waiting worker holds a
/// connection, and 1,024 workers need more than the common default of 1,024 files.
pub fn raise_open_file_limit() {
    if let Err(e) = agensh_process::raise_open_file_limit() {
        tracing::warn!("could not raise the open-file limit ({e}); more than about 1,000 connected workers may fail");
    }
}
