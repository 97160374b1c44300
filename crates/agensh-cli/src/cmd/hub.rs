//! `agensh hub DIR`: serves the organization until Ctrl-C or SIGTERM.

use std::path::Path;
use std::sync::Arc;

use agensh_hub::{read_hub_info, state_dir, write_hub_info, HubInfo, STORE_FILE};
use agensh_store::Store;
use anyhow::{bail, Context, Result};

use crate::cli::{Global, HubArgs};

pub async fn run(g: &Global, a: HubArgs) -> Result<()> {
    let dir = g.org_dir(&a.dir);
    let mut config = crate::cmd::config::load(&dir, &a.values())?;
    if config.model.gateway {
        // The local model runs on each node, out of the hub's reach: only endpoints by URL
        // and vendors' keys become upstreams here.
        let shorthand =
            agensh_domain::gateway::shorthand(&config, None, &agensh_node::setup::env_set);
        config.gateway = config.gateway.with_shorthand(&shorthand);
        config.gateway.validate()?;
    }
    upstream_keys_set(&config)?;
    raise_open_file_limit();
    refuse_if_running(&dir)?;
    let listen = config.hub.listen.clone();
    let pack = agensh_node::setup::read_pack(&config, &dir)?;
    let hours = config.run.hours;
    let (store, workspace) = open_state(&dir, &config.hub.store).await?;
    let hub = agensh_hub::start_with_workspace(store, workspace, config, &listen).await?;
    // What nodes on other hosts are given when they register: the task pack, and the
    // run's end — `run.hours` from now (a hub started again starts the clock again, as
    // `agensh run` does).
    hub.set_pack(pack);
    hub.set_run_clock(agensh_protocol::dashboard::RunClock::from_now(hours));
    let info = HubInfo {
        url: hub.url.clone(),
        admin_token: hub.admin_token.clone(),
        pid: std::process::id(),
    };
    write_hub_info(&dir, &info).context("cannot write .agensh/hub.json")?;
    let signal = stop_signal()?;
    outln!("hub serving {} at {}", dir.display(), hub.url);
    let admin = agensh_client::Client::new(&hub.url, &hub.admin_token);
    agensh_node::view::dashboard_link(&admin).await;
    signal.await;
    tracing::info!("stopping the hub");
    hub.shutdown().await;
    let _ = std::fs::remove_file(state_dir(&dir).join(agensh_hub::HUB_JSON));
    Ok(())
}

/// Refuses to start an organization whose gateway upstreams' keys are not in this
/// environment (the hub would refuse every request to them), naming each variable.
pub fn upstream_keys_set(config: &agensh_domain::config::Config) -> Result<()> {
    let missing = agensh_hub::gateway::missing_keys(&config.gateway, |v| std::env::var(v).ok());
    if let Some((name, var)) = missing.first() {
        bail!(
            "the gateway upstream \"{name}\" reads its key from {var}, which is not set — export {var}=… (or set its api_key_env = \"\"){}",
            if missing.len() > 1 {
                format!("; {} more upstream(s) lack theirs", missing.len() - 1)
            } else {
                String::new()
            }
        );
    }
    Ok(())
}

/// The organization's store: the PostgreSQL database `configured` names (`hub.store`),
/// else the SQLite file in its state directory `state`.
pub async fn open_store(state: &Path, configured: &str) -> Result<Arc<dyn Store>> {
    if configured.is_empty() {
        let file = state.join(STORE_FILE);
        agensh_store::open_store(&file.to_string_lossy())
            .await
            .map_err(too_new_is_local)
            .with_context(|| format!("cannot open {}", file.display()))
    } else {
        let store = agensh_store::open_store(configured)
            .await
            .map_err(too_new_is_local)
            .context("cannot open the store hub.store names")?;
        tracing::info!(
            "store: PostgreSQL, {}",
            agensh_store::postgres::redact(configured)
        );
        Ok(store)
    }
}

/// A store a newer agensh wrote is this machine's to fix (install that agensh): exit 4.
fn too_new_is_local(e: agensh_domain::Error) -> anyhow::Error {
    if e.code == agensh_store::migrate::TOO_NEW {
        crate::output::Local(e).into()
    } else {
        e.into()
    }
}

/// The organization's store (`configured`: `hub.store`) and git workspace (none, with a
/// warning, for an organization made by an older `agensh init`).
pub async fn open_state(
    dir: &Path,
    configured: &str,
) -> Result<(Arc<dyn Store>, Option<agensh_workspace::Workspace>)> {
    let store = open_store(&state_dir(dir), configured).await?;
    let repo = state_dir(dir).join(agensh_workspace::REPO_DIR);
    let workspace = if repo.exists() {
        Some(agensh_workspace::Workspace::open(&repo)?)
    } else {
        tracing::warn!(
            "{} has no git workspace (made by an older agensh init): pull requests and git over HTTP are off",
            dir.display()
        );
        None
    };
    Ok((store, workspace))
}

/// What `.agensh/hub.json` of `dir` says, when the hub it names still runs (a hub that was
/// killed leaves the file behind).
pub fn running_hub(dir: &Path) -> Option<HubInfo> {
    read_hub_info(dir).ok().filter(|i| process_alive(i.pid))
}

/// Refuses to serve the organization in `dir` when another process serves it already.
pub fn refuse_if_running(dir: &Path) -> Result<()> {
    if let Some(info) = running_hub(dir) {
        if info.pid != std::process::id() {
            bail!(
                "a hub is already running for {} (pid {}, {}) — stop it first, or use it",
                dir.display(),
                info.pid,
                info.url
            );
        }
    }
    Ok(())
}

/// Resolves on Ctrl-C or SIGTERM.
pub fn stop_signal() -> Result<impl std::future::Future<Output = ()> + Send + 'static> {
    agensh_process::shutdown::signal().context(
        "cannot install the Ctrl-C and SIGTERM handlers — is this run inside a restricted sandbox?",
    )
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
