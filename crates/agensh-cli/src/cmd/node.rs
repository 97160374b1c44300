//! `agensh node`: a node's workers against a hub, on the hub's host (`.agensh/hub.json`)
//! or on another host (`--hub URL --node-token T`).

use std::collections::BTreeMap;
use std::path::Path;

use agensh_client::retry::read_until_reachable;
use agensh_client::Client;
use agensh_domain::config::Config;
use agensh_model::ModelServer;
use agensh_node::node::NodePlan;
use agensh_node::setup::{self, HubAt, Prepared, Workers};
use anyhow::{bail, Context, Result};

use crate::cli::{Global, NodeArgs};
use crate::cmd::config::{load, resolve};
use crate::cmd::hub::raise_open_file_limit;
use crate::connect::client;

/// What a node's `workers` run (the hub is elsewhere), its notes said on stderr.
async fn prepare(config: &Config, dir: &Path, workers: usize) -> Result<Prepared> {
    let prepared = setup::prepare(
        config,
        dir,
        Workers::Given(workers),
        HubAt::Elsewhere,
        crate::cmd::model::start_local,
    )
    .await?;
    for note in &prepared.notes {
        eprintln!("{note}");
    }
    Ok(prepared)
}

/// How long `agensh node` waits for a hub it cannot reach as it starts (a restart).
const NODE_START_HUB_WAIT: std::time::Duration = std::time::Duration::from_secs(15);

/// A read the node makes as it starts, sent again while the hub cannot be reached, for up
/// to [`NODE_START_HUB_WAIT`].
async fn read_at_start<T, F>(read: impl Fn() -> F) -> Result<T>
where
    F: std::future::Future<Output = agensh_domain::Result<T>>,
{
    Ok(read_until_reachable(NODE_START_HUB_WAIT, read).await?)
}

/// The hub's client for `agensh node`. A node started while its hub restarts waits for it,
/// as the node's own requests do, instead of exiting (`agensh-bench faults` found one that
/// did): when `.agensh/hub.json` is there but its hub is not running (killed, not stopped:
/// a stopped hub removes it), until a hub writes it again; its first reads are
/// [`read_at_start`].
async fn node_client(g: &Global) -> Result<agensh_client::Client> {
    let deadline = std::time::Instant::now() + NODE_START_HUB_WAIT;
    let hub_json = agensh_hub::state_dir(&g.dir).join(agensh_hub::HUB_JSON);
    loop {
        match client(g) {
            Ok(c) => return Ok(c),
            Err(e) if !hub_json.exists() || std::time::Instant::now() >= deadline => return Err(e),
            Err(_) => tokio::time::sleep(std::time::Duration::from_millis(200)).await,
        }
    }
}

pub async fn node(g: &Global, a: NodeArgs) -> Result<()> {
    if let Some(token) = a.node_token.clone().filter(|t| !t.trim().is_empty()) {
        return remote_node(g, a, token.trim().to_string()).await;
    }
    let config = load(&g.dir, &a.values())?;
    raise_open_file_limit();
    let admin = node_client(g).await?;
    let known = read_at_start(|| admin.workers()).await?;
    let mut workers = Vec::new();
    for id in a
        .ids
        .iter()
        .cloned()
        .chain(known.iter().map(|w| w.id.clone()))
        .take(a.workers)
    {
        let token = read_at_start(|| admin.worker_token(&id)).await?.token;
        workers.push((id.clone(), token));
    }
    if workers.len() < a.workers {
        bail!(
            "the hub has {} worker(s); add more with `agensh workers add N` first",
            known.len()
        );
    }
    let prepared = prepare(&config, &g.dir, a.workers).await?;
    let (plan, model_server) = setup::plan(
        &config,
        &g.dir,
        admin.base(),
        workers,
        known.len(),
        prepared,
    )?;
    drive_node(plan, model_server).await
}

/// Runs a node's workers until the run ends or a signal stops it, printing each turn's
/// end on stderr.
async fn drive_node(plan: NodePlan, model_server: Option<ModelServer>) -> Result<()> {
    let (stop, _) = crate::cmd::run::stop_on_signal()?;
    agensh_node::view::drive(plan, model_server, stop).await?;
    Ok(())
}

/// `agensh node --hub URL --node-token T` (DESIGN §8): a node on another host than the
/// hub's. It registers with its node token and runs the workers the hub gives it (the same
/// ones every time it starts), with nothing of the hub's directory: checkouts are cloned
/// and pushed over the hub's git smart HTTP (`agensh_workspace::remote`), and checkouts,
/// agent homes, logs and token files live in `--dir`, the node's own state directory. A
/// node killed and started again with the same token and directory resumes its workers:
/// their checkouts, and their turn logs, which say which events their agents were shown.
async fn remote_node(g: &Global, a: NodeArgs, token: String) -> Result<()> {
    if !a.ids.is_empty() {
        bail!(crate::output::Usage(
            "--id does not go with --node-token: the hub gives a node its workers (the same ones each time it registers)".into()
        ));
    }
    let Some(hub_url) = g.hub.clone().filter(|h| !h.trim().is_empty()) else {
        bail!(crate::output::Usage(
            "a node with --node-token needs the hub's address: give --hub URL (or set AGENSH_HUB)"
                .into()
        ));
    };
    let hub_url = hub_url.trim().trim_end_matches('/').to_string();
    let dir = std::path::absolute(&g.dir)?;
    std::fs::create_dir_all(&dir)
        .with_context(|| format!("cannot create the node's directory {}", dir.display()))?;
    raise_open_file_limit();
    let node = Client::new(&hub_url, &token);
    let registered = read_at_start(|| node.register_node(a.workers)).await?;
    let resolved = remote_config(&dir, &registered.goal, &a.values())?;
    let (config, own_hours, note) = setup::remote_config(resolved);
    note.into_iter().for_each(|n| eprintln!("{n}"));
    let prepared = prepare(&config, &dir, a.workers).await?;
    let (plan, model_server, line) =
        setup::remote_plan(&config, &dir, &hub_url, &registered, own_hours, prepared)?;
    eprintln!("{line}");
    drive_node(plan, model_server).await
}

/// A remote node's configuration: its directory's `agensh.toml` when it has one (its
/// `[run]` and `[model]`), else the defaults; flags and `AGENSH_*` over either. The goal,
/// the task pack, the run's end and the notice times come from the hub.
fn remote_config(
    dir: &Path,
    goal: &str,
    flags: &[agensh_domain::config::FlagValue],
) -> Result<agensh_domain::config::Resolved> {
    if dir.join(agensh_hub::org::CONFIG_FILE).exists() {
        return resolve(dir, flags);
    }
    let env: BTreeMap<String, String> = std::env::vars()
        .filter(|(k, _)| k.starts_with("AGENSH_"))
        .collect();
    let text = setup::goal_toml(goal)?;
    Ok(Config::resolve(&text, &env, flags).map_err(crate::output::Local)?)
}
