//! `agensh hub DIR`: serves the organization until Ctrl-C or SIGTERM.

use agensh_hub::org::{announce, open_state, refuse_if_running, retire, upstream_keys_set};
use anyhow::{Context, Result};

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
    announce(&dir, &hub)?;
    let signal = stop_signal()?;
    outln!("hub serving {} at {}", dir.display(), hub.url);
    let admin = agensh_client::Client::new(&hub.url, &hub.admin_token);
    agensh_node::view::dashboard_link(&admin).await;
    signal.await;
    tracing::info!("stopping the hub");
    hub.shutdown().await;
    retire(&dir);
    Ok(())
}

/// Resolves on Ctrl-C or SIGTERM.
pub fn stop_signal() -> Result<impl std::future::Future<Output = ()> + Send + 'static> {
    agensh_process::shutdown::signal().context(
        "cannot install the Ctrl-C and SIGTERM handlers — is this run inside a restricted sandbox?",
    )
}

/// Lifts the soft limit on open files to the hard limit: every waiting worker holds a
/// connection, and 1,024 workers need more than the common default of 1,024 files.
pub fn raise_open_file_limit() {
    if let Err(e) = agensh_process::raise_open_file_limit() {
        tracing::warn!("could not raise the open-file limit ({e}); more than about 1,000 connected workers may fail");
    }
}
