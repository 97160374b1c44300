//! `agensh-bench agents`: what one worker of each real agent CLI costs — the figures a user
//! needs to size a node. Per installed preset, one worker against a real hub (an `agensh
//! hub` process) and the replay model server (`agensh model replay`, another process, so
//! its work is not counted as the harness's): time from start to the first prompt (the
//! process started, `initialize` and `session/new` answered), memory of the idle agent's
//! whole process tree (every process with its mark), and per turn (a shell command, a
//! `board_write`, then text) the wall time, the CPU the agent's tree used and the CPU the
//! harness used (this process — the adapter — and the hub).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use agensh_client::Client;
use agensh_domain::agents::{preset, Endpoint, PRESETS};
use agensh_node::adapters::acp::PresetRun;
use agensh_node::adapters::AgentContext;
use agensh_node::install;
use agensh_node::node::AgentKind;
use anyhow::{bail, Context, Result};
use serde_json::json;

use crate::gateway::Replay;

#[derive(clap::Args)]
pub struct Args {
    /// The presets to measure (default: every one installed).
    #[arg(long, value_delimiter = ',')]
    agents: Vec<String>,
    /// Turns per agent.
    #[arg(long, default_value_t = 10)]
    turns: usize,
    /// Seconds the agent idles after its start before its memory is read.
    #[arg(long, default_value_t = 5)]
    idle_secs: u64,
    /// The agensh binary (default: next to this one).
    #[arg(long)]
    agensh: Option<PathBuf>,
    /// Print the results as JSON.
    #[arg(long)]
    json: bool,
}

/// The memory a node may give agents, for "how many fit".
const NODE_BYTES: u64 = 24 << 30;

pub async fn run(a: Args) -> Result<()> {
    let agensh = crate::stats::agensh_binary(a.agensh.as_deref())?;
    let data = agensh_model::data_dir()?;
    let names: Vec<&str> = if a.agents.is_empty() {
        PRESETS
            .iter()
            .filter(|p| install::installed(&data, p).is_some())
            .map(|p| p.name)
            .collect()
    } else {
        a.agents.iter().map(String::as_str).collect()
    };
    if names.is_empty() {
        bail!("no agent CLI is installed — run `agensh agents install` first");
    }
    let mut rows = Vec::new();
    for name in names {
        eprintln!("measuring {name}…");
        match one(&agensh, &data, name, &a).await {
            Ok(r) => rows.push(r),
            Err(e) => rows.push(json!({ "agent": name, "error": format!("{e:#}") })),
        }
    }
    if a.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&json!({ "agents": rows }))?
        );
        return Ok(());
    }
    println!(
        "{:<8} {:>11} {:>11} {:>6} {:>11} {:>12} {:>13} {:>9} {:>8}",
        "agent",
        "to prompt",
        "idle MiB",
        "procs",
        "peak MiB",
        "turn wall",
        "agent CPU",
        "harness",
        "share"
    );
    for r in &rows {
        if let Some(e) = r["error"].as_str() {
            println!("{:<8} failed: {e}", r["agent"].as_str().unwrap_or("?"));
            continue;
        }
        println!(
            "{:<8} {:>9.1} s {:>11.0} {:>6} {:>11.0} {:>10.2} s {:>10.2} s {:>6.0} ms {:>7.1}%   ({} fit in 24 GiB)",
            r["agent"].as_str().unwrap_or("?"),
            r["start_to_prompt_secs"].as_f64().unwrap_or(0.0),
            r["idle_tree_mib"].as_f64().unwrap_or(0.0),
            r["idle_processes"].as_u64().unwrap_or(0),
            r["peak_tree_mib"].as_f64().unwrap_or(0.0),
            r["turn_wall_secs_median"].as_f64().unwrap_or(0.0),
            r["agent_cpu_secs_per_turn"].as_f64().unwrap_or(0.0),
            r["harness_cpu_ms_per_turn"].as_f64().unwrap_or(0.0),
            r["harness_share_pct"].as_f64().unwrap_or(0.0),
            r["workers_per_24_gib"].as_u64().unwrap_or(0),
        );
    }
    println!("turn: a shell command, a board_write over MCP, then text, against the replay server; share = harness CPU / (harness + agent CPU)");
    Ok(())
}

/// An organization of `workers` workers served by an `agensh hub` process, with the first
/// worker's checkout and the context its agent gets.
pub(crate) struct Bed {
    /// Holds the organization's directory.
    pub(crate) tmp: tempfile::TempDir,
    pub(crate) hub: crate::hub::HubProc,
    pub(crate) admin: Client,
    pub(crate) workers: Vec<agensh_domain::worker::NewWorker>,
    pub(crate) ctx: AgentContext,
}

pub(crate) async fn bed(agensh: &Path, workers: usize) -> Result<Bed> {
    let tmp = tempfile::tempdir()?;
    let org = tmp.path().join("org");
    let status = Command::new(agensh)
        .args([
            "init",
            org.to_str().expect("utf-8 path"),
            "--goal",
            "benchmark",
        ])
        .stdout(Stdio::null())
        .status()?;
    if !status.success() {
        bail!("agensh init failed");
    }
    let hub = crate::hub::start_hub(agensh, &org)?;
    let admin = Client::new(&hub.url, &hub.admin_token);
    let workers = admin.add_workers(workers).await?;
    let w = &workers[0];
    let ws =
        agensh_workspace::Workspace::open(&org.join(".agensh").join(agensh_workspace::REPO_DIR))?;
    let checkout = agensh_workspace::checkout::checkout_dir(&org, &w.id);
    agensh_workspace::checkout::create(&ws, &w.id, &checkout).await?;
    let ctx = AgentContext {
        worker: w.id.clone(),
        checkout,
        hub_url: hub.url.clone(),
        token: w.token.clone(),
        mcp_proxy: None,
        state_dir: org.join(".agensh/logs").join(&w.id),
        agent_home: org.join(".agensh/agents").join(&w.id),
        agensh: agensh.to_path_buf(),
        heartbeat: Default::default(),
        interrupt: Default::default(),
    };
    Ok(Bed {
        tmp,
        hub,
        admin,
        workers,
        ctx,
    })
}

/// The agent `name` (an installed preset, or `builtin`) on the model server at `url`.
pub(crate) fn agent_of(
    agensh: &Path,
    data: &Path,
    name: &str,
    url: &str,
) -> Result<Box<dyn agensh_node::adapters::Agent>> {
    if name == "builtin" {
        let cfg = agensh_node::adapters::builtin::BuiltinConfig {
            base_url: format!("{}/v1", url.trim_end_matches('/')),
            model: "replay-model".into(),
            style: agensh_node::adapters::builtin::ToolStyle::Tools,
            command_timeout: Duration::from_secs(900),
            ..Default::default()
        };
        return Ok(Box::new(agensh_node::adapters::builtin::BuiltinAgent::new(
            cfg,
        )));
    }
    let preset = preset(name).with_context(|| format!("{name} is not a preset"))?;
    if install::installed(data, preset).is_none() {
        bail!("not installed — agensh agents install {name}");
    }
    let run = PresetRun {
        preset,
        prefix: install::prefix(data, preset),
        endpoint: Endpoint {
            url: url.to_string(),
            model: "replay-model".into(),
            api_key: None,
        },
        gateway: false,
    };
    Ok(AgentKind::Preset {
        run,
        command: Vec::new(),
    }
    .build(agensh, Default::default(), Default::default(), None))
}

async fn one(agensh: &Path, data: &Path, name: &str, a: &Args) -> Result<serde_json::Value> {
    let preset = preset(name).with_context(|| format!("{name} is not a preset"))?;
    let bed = bed(agensh, 1).await?;
    let (hub, admin, ctx) = (&bed.hub, &bed.admin, &bed.ctx);
    let replay = start_replay(agensh, bed.tmp.path(), a.turns)?;
    let mut agent = agent_of(agensh, data, name, &replay.url)?;
    let started = Instant::now();
    agent.start(ctx).await?;
    let to_prompt = started.elapsed().as_secs_f64();
    tokio::time::sleep(Duration::from_secs(a.idle_secs)).await;
    let idle = tree(&agent.processes());
    let mut peak = idle.rss;
    let (mut walls, mut agent_cpu, mut harness_cpu) = (Vec::new(), 0.0, 0.0);
    for t in 0..a.turns {
        let pids = agent.processes();
        let before = (
            tree(&pids).cpu,
            crate::stats::cpu_secs("self") + crate::stats::cpu_secs(&hub.child.id().to_string()),
        );
        let t0 = Instant::now();
        let out = agent
            .turn(&format!("Turn {}: follow the plan.", t + 1))
            .await?;
        walls.push(t0.elapsed().as_secs_f64());
        // The processes of this turn (a shell command's included, through their parents'
        // counts of waited-for children).
        let after_tree = tree(&agent.processes());
        peak = peak.max(after_tree.rss);
        agent_cpu += (after_tree.cpu - before.0).max(0.0);
        harness_cpu += crate::stats::cpu_secs("self")
            + crate::stats::cpu_secs(&hub.child.id().to_string())
            - before.1;
        if out.stop_reason != "end_turn" {
            bail!("turn {} ended {}", t + 1, out.stop_reason);
        }
    }
    agent.stop().await;
    drop(replay);
    // The turns did their work: a line per shell command, a record per board_write.
    let lines = std::fs::read_to_string(ctx.checkout.join("bench.txt"))
        .unwrap_or_default()
        .lines()
        .count();
    let records = admin.stats().await?.records;
    if lines < a.turns || (records as usize) < a.turns {
        bail!(
            "the turns did not do their work: {lines} shell command(s) and {records} record(s) for {} turn(s)",
            a.turns
        );
    }
    walls.sort_by(f64::total_cmp);
    let turns = a.turns.max(1) as f64;
    let mib = |b: u64| b as f64 / (1 << 20) as f64;
    Ok(json!({
        "agent": name,
        "version": preset.version,
        "start_to_prompt_secs": to_prompt,
        "idle_tree_mib": mib(idle.rss),
        "idle_processes": idle.processes,
        "peak_tree_mib": mib(peak),
        "turn_wall_secs_median": walls.get(walls.len() / 2).copied().unwrap_or(0.0),
        "agent_cpu_secs_per_turn": agent_cpu / turns,
        "harness_cpu_ms_per_turn": harness_cpu * 1000.0 / turns,
        "harness_share_pct": 100.0 * harness_cpu / (harness_cpu + agent_cpu).max(1e-9),
        "workers_per_24_gib": NODE_BYTES.checked_div(peak).unwrap_or(0),
    }))
}

/// The replay server as a process of its own, on a free port, with `turns` turns of
/// three steps each.
fn start_replay(agensh: &Path, dir: &Path, turns: usize) -> Result<Replay> {
    let shell = r#"{ any = [
{ name = "Bash", args = { command = "echo bench >> bench.txt", description = "bench" } },
{ name = "run_shell_command", args = { command = "echo bench >> bench.txt", description = "bench" } },
{ name = "exec_command", args = { cmd = "echo bench >> bench.txt" } },
{ name = "shell_command", args = { command = "echo bench >> bench.txt" } },
{ name = "shell", args = { command = ["bash", "-lc", "echo bench >> bench.txt"] } },
{ name = "bash", args = { command = "echo bench >> bench.txt", description = "bench", mode = "sync", initial_wait = 10 } },
  ] }"#;
    let mut text = String::from("side_text = \"ok\"\nfinal_text = \"Done.\"\n");
    for t in 0..turns {
        text.push_str(&format!(
            "\n[[step]]\ntext = \"Running.\"\ntool_calls = [ {shell} ]\nusage = {{ input = 1000, output = 10 }}\n\
             \n[[step]]\ntext = \"Posting.\"\ntool_calls = [ {{ name = \"board_write\", args = {{ kind = \"FACT\", text = \"bench turn {}\" }} }} ]\nusage = {{ input = 1100, output = 10 }}\n\
             \n[[step]]\ntext = \"Turn done.\"\nusage = {{ input = 1200, output = 10 }}\n",
            t + 1
        ));
    }
    crate::gateway::start_replay(agensh, dir, "scenario", &text)
}

/// Resident memory and CPU seconds of a set of processes.
struct Tree {
    rss: u64,
    cpu: f64,
    processes: usize,
}

fn tree(pids: &[u32]) -> Tree {
    let mut t = Tree {
        rss: 0,
        cpu: 0.0,
        processes: 0,
    };
    for pid in pids {
        let (rss, _) = crate::hub::memory_of(*pid);
        if rss == 0 {
            continue;
        }
        t.rss += rss;
        t.cpu += crate::stats::cpu_secs(&pid.to_string());
        t.processes += 1;
    }
    t
}
