//! `agensh-bench urgent` (issue 36): does urgent news reach busy agents, each message shown
//! exactly once, within a bound?
//!
//! 1. **Storm**: a real `agensh run` of `--workers` scripted workers (one scripted ACP agent
//!    process each) whose turns mix organization tool calls (`workers` every 20 s for a
//!    minute: news rides on their results) with long silences (a 150 s sleep: news waits,
//!    and past `--interrupt-after` interrupts the turn). Every `--every-secs` for
//!    `--minutes`, each worker direct-messages `--peers` random peers (sent as that worker
//!    through the admin token). Then, from what the run leaves: every message's receipt
//!    (acknowledged, how it was presented, stored→presented p50/p99), and how many times
//!    each message was shown to its recipient — counted in every prompt of its turn log and
//!    every tool result's notices in the scripted agents' log. Targets: 0 lost, 0 shown
//!    twice, every receipt acknowledged.
//! 2. **Busy agents** (`--agents`): for the built-in agent and each named preset against the
//!    replay model server, one worker busy in a ten-minute shell command gets a DM; the time
//!    from the DM stored to the agent's next model request that carries it (target: p99 ≤
//!    `--interrupt-after` + 15 s), whether the command was stopped, and how the turn ended.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;
use std::time::{Duration, Instant};

use agensh_client::Client;
use agensh_domain::message::NewMessage;
use agensh_domain::receipt::ReceiptState;
use anyhow::{bail, Context, Result};
use serde::Serialize;
use serde_json::Value;

use crate::node::{agensh_cmd, init_org};

#[derive(clap::Args)]
pub struct Args {
    /// Workers of the storm.
    #[arg(long, default_value_t = 64)]
    workers: usize,
    /// How long the storm lasts, in minutes.
    #[arg(long, default_value_t = 10.0)]
    minutes: f64,
    /// Seconds between two rounds of DMs.
    #[arg(long, default_value_t = 30)]
    every_secs: u64,
    /// Peers each worker DMs per round.
    #[arg(long, default_value_t = 3)]
    peers: usize,
    /// `run.interrupt_after_secs`.
    #[arg(long, default_value_t = 120)]
    interrupt_after: u64,
    /// Longest wait, after the storm, for every receipt to be acknowledged, in seconds.
    #[arg(long, default_value_t = 300)]
    settle_secs: u64,
    /// Skip the storm.
    #[arg(long)]
    no_storm: bool,
    /// The agents to time busy in a long command: `builtin` and presets (`claude`, `codex`,
    /// `copilot`, `gemini`, `pi`); none: that part is skipped.
    #[arg(long, value_delimiter = ',')]
    agents: Vec<String>,
    /// DMs per agent, each to the agent busy in a fresh ten-minute command.
    #[arg(long, default_value_t = 3)]
    samples: usize,
    /// Keep the organizations and print where.
    #[arg(long)]
    keep: bool,
    #[command(flatten)]
    common: crate::stats::Common,
}

pub async fn run(a: Args) -> Result<()> {
    let agensh = crate::stats::agensh_binary(a.common.agensh.as_deref())?;
    let mut out = serde_json::Map::new();
    if !a.no_storm {
        let s = storm(&a, &agensh).await?;
        if !a.common.json {
            print_storm(&s, &a);
        }
        out.insert("storm".into(), serde_json::to_value(&s)?);
    }
    let mut rows = Vec::new();
    for name in &a.agents {
        eprintln!("timing {name} busy in a long command…");
        let row = match busy(&a, &agensh, name).await {
            Ok(b) => serde_json::to_value(&b)?,
            Err(e) => serde_json::json!({ "agent": name, "error": format!("{e:#}") }),
        };
        if !a.common.json {
            print_busy(&row, &a);
        }
        rows.push(row);
    }
    if !rows.is_empty() {
        out.insert("busy".into(), Value::Array(rows));
    }
    if a.common.json {
        println!("{}", serde_json::to_string_pretty(&Value::Object(out))?);
    }
    Ok(())
}

/// What the storm found.
#[derive(Debug, Serialize)]
struct Storm {
    workers: usize,
    messages: usize,
    /// Messages never shown to their recipient.
    lost: usize,
    /// Messages shown to their recipient more than once.
    shown_twice: usize,
    acknowledged: usize,
    /// Messages presented, by how (`tool_result`, `prompt`, `interruption`).
    presented_via: BTreeMap<String, usize>,
    /// Stored → presented, in seconds: all, and by how.
    p50_secs: f64,
    p99_secs: f64,
    via_p50_p99_secs: BTreeMap<String, (f64, f64)>,
    /// Turns interrupted for urgent news, and their agents' time to end them (p99, s).
    interrupted_turns: usize,
    cancel_p99_secs: f64,
    /// Seconds from the storm's end until every receipt was acknowledged (none: not within
    /// `--settle-secs`).
    settled_after_secs: Option<f64>,
    /// Examples of messages lost or shown twice, for a look.
    examples: Vec<String>,
}

fn print_storm(s: &Storm, a: &Args) {
    println!(
        "storm: {} workers, {} DMs over {} min (each worker to {} peers every {} s), interrupt after {} s",
        s.workers, s.messages, a.minutes, a.peers, a.every_secs, a.interrupt_after
    );
    println!(
        "  lost {}   shown twice {}   acknowledged {} of {}{}",
        s.lost,
        s.shown_twice,
        s.acknowledged,
        s.messages,
        match s.settled_after_secs {
            Some(t) => format!(" ({t:.0} s after the storm)"),
            None => format!(" (not all within {} s)", a.settle_secs),
        }
    );
    println!(
        "  stored→presented p50 {:.1} s, p99 {:.1} s",
        s.p50_secs, s.p99_secs
    );
    for (via, n) in &s.presented_via {
        let (p50, p99) = s.via_p50_p99_secs.get(via).copied().unwrap_or_default();
        println!("    via {via:<12} {n:>6}   p50 {p50:.1} s   p99 {p99:.1} s");
    }
    println!(
        "  turns interrupted {}   agent's time to end them p99 {:.2} s",
        s.interrupted_turns, s.cancel_p99_secs
    );
    for e in &s.examples {
        println!("  ! {e}");
    }
}

/// The scripted workers' turns: a minute of organization tool calls, then a silence longer
/// than the interrupt bound, `rounds` times.
fn storm_scenario(rounds: usize) -> String {
    let round = r#"
[[step]]
action = "poll"
tool = "workers"
every_ms = 20000
for_ms = 60000
[[step]]
action = "sleep"
ms = 150000
[[step]]
action = "end_turn"
"#;
    let mut s = String::from("# agensh-bench urgent: the storm\n");
    for _ in 0..rounds {
        s.push_str(round);
    }
    s
}

/// A message of the storm: its id, recipient, and the tag only its text carries.
struct Sent {
    id: String,
    to: String,
    tag: String,
}

/// A small deterministic generator (xorshift), so runs are comparable.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

async fn storm(a: &Args, agensh: &Path) -> Result<Storm> {
    if a.workers < a.peers + 1 {
        bail!("--workers must be more than --peers");
    }
    let tmp = tempfile::Builder::new()
        .prefix("agensh-urgent-storm-")
        .tempdir()?;
    let scenario = tmp.path().join("scenario.toml");
    let rounds = (a.minutes * 60.0 / 60.0).ceil() as usize + 10;
    std::fs::write(&scenario, storm_scenario(rounds))?;
    let dir = tmp.path().join("org");
    let interrupt_after = a.interrupt_after;
    init_org(
        agensh,
        &dir,
        "answer your messages",
        &scenario,
        a.workers,
        |c| {
            c.run.interrupt_after_secs = interrupt_after;
            c.run.idle_timeout_secs = 30;
            c.run.hours = 0.0;
            c.run.notices_minutes = Vec::new();
            c.run.stagger_secs = 0.05;
        },
    )?;
    let script_log = tmp.path().join("script.jsonl");
    let log = std::fs::File::create(tmp.path().join("run.log"))?;
    let mut child = agensh_cmd(agensh)
        .arg("run")
        .arg(&dir)
        .args(["--listen", "127.0.0.1:0", "--json"])
        .env("AGENSH_SCRIPT_LOG", &script_log)
        .stdin(std::process::Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()
        .context("cannot start agensh run")?;
    let result = storm_in(a, &dir, &script_log, child.id()).await;
    agensh_process::group::terminate_process(child.id());
    let deadline = Instant::now() + Duration::from_secs(60);
    while child.try_wait()?.is_none() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    if child.try_wait()?.is_none() {
        let _ = child.kill();
        let _ = child.wait();
    }
    if a.keep {
        let kept = tmp.keep();
        eprintln!("kept the storm's organization in {}", kept.display());
    }
    result
}

async fn storm_in(a: &Args, dir: &Path, script_log: &Path, run_pid: u32) -> Result<Storm> {
    // The run's hub, then every worker busy in its first turn.
    let started = Instant::now();
    let info = loop {
        if let Ok(info) = agensh_hub::read_hub_info(dir) {
            break info;
        }
        if started.elapsed() > Duration::from_secs(120) {
            bail!("agensh run (pid {run_pid}) wrote no hub.json within 2 min");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let admin = Client::new(&info.url, &info.admin_token);
    let ids: Vec<String> = loop {
        let workers = admin.workers().await.unwrap_or_default();
        let running = workers
            .iter()
            .filter(|w| w.status != agensh_domain::worker::WorkerStatus::Starting)
            .count();
        if workers.len() == a.workers && running == a.workers {
            break workers.into_iter().map(|w| w.id).collect();
        }
        if started.elapsed() > Duration::from_secs(300) {
            bail!("{running} of {} workers started within 5 min", a.workers);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    eprintln!(
        "{} workers running after {:.0} s; the storm begins",
        ids.len(),
        started.elapsed().as_secs_f64()
    );

    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut sent: Vec<Sent> = Vec::new();
    let storm_started = Instant::now();
    let rounds = ((a.minutes * 60.0) / a.every_secs as f64).round().max(1.0) as usize;
    for round in 0..rounds {
        let due = storm_started + Duration::from_secs(a.every_secs * round as u64);
        tokio::time::sleep_until(due.into()).await;
        for from in &ids {
            let mut to: HashSet<usize> = HashSet::new();
            while to.len() < a.peers {
                let i = rng.below(ids.len());
                if ids[i] != *from {
                    to.insert(i);
                }
            }
            let client = admin.clone().acting_as(Some(from.clone()));
            for i in to {
                let tag = format!("[u{}]", sent.len() + 1);
                let m = client
                    .send_message(&NewMessage {
                        to: ids[i].clone(),
                        text: format!("{tag} round {round}: can you look at my part?"),
                        thread: None,
                    })
                    .await
                    .with_context(|| format!("{from} could not DM {}", ids[i]))?;
                sent.push(Sent {
                    id: format!("M{}", m.seq),
                    to: ids[i].clone(),
                    tag,
                });
            }
        }
        eprintln!("round {}/{rounds}: {} DMs sent", round + 1, sent.len());
    }
    let storm_ended = Instant::now();
    tokio::time::sleep(Duration::from_secs(a.every_secs)).await;

    // Every receipt acknowledged, or the settle time is up.
    let mut statuses = Vec::new();
    let settled_after = loop {
        statuses.clear();
        for s in &sent {
            statuses.push(admin.message_status(&s.id).await?);
        }
        let acked = statuses
            .iter()
            .filter(|st| {
                st.receipts
                    .iter()
                    .all(|r| r.state == ReceiptState::Acknowledged)
            })
            .count();
        if acked == sent.len() {
            break Some(storm_ended.elapsed().as_secs_f64());
        }
        if storm_ended.elapsed() > Duration::from_secs(a.settle_secs) {
            eprintln!(
                "{acked} of {} acknowledged; the settle time is up",
                sent.len()
            );
            break None;
        }
        eprintln!("{acked} of {} acknowledged", sent.len());
        tokio::time::sleep(Duration::from_secs(15)).await;
    };

    // What each worker was shown: its prompts and its tool results' notices.
    let mut shown: HashMap<String, String> = HashMap::new();
    let mut interrupted = Vec::new();
    for id in &ids {
        let text = std::fs::read_to_string(dir.join(".agensh/logs").join(id).join("turns.jsonl"))
            .unwrap_or_default();
        let all = shown.entry(id.clone()).or_default();
        for line in text.lines() {
            let Ok(v) = serde_json::from_str::<Value>(line) else {
                continue;
            };
            if let Some(p) = v["prompt"].as_str() {
                all.push_str(p);
                all.push('\n');
            }
            if v["interrupted"].is_array() {
                interrupted.push(v["ended_in_ms"].as_f64().unwrap_or(0.0) / 1000.0);
            }
        }
    }
    for line in std::fs::read_to_string(script_log)
        .unwrap_or_default()
        .lines()
    {
        let Ok(v) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        if let (Some(w), Some(n)) = (v["worker"].as_str(), v["notices"].as_str()) {
            let all = shown.entry(w.to_string()).or_default();
            all.push_str(n);
            all.push('\n');
        }
    }
    let (mut lost, mut twice, mut examples) = (0, 0, Vec::new());
    for s in &sent {
        let n = shown.get(&s.to).map_or(0, |t| t.matches(&s.tag).count());
        if n == 0 {
            lost += 1;
        }
        if n > 1 {
            twice += 1;
        }
        if n != 1 && examples.len() < 5 {
            examples.push(format!("{} to {} shown {n} times", s.id, s.to));
        }
    }
    let mut via: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    let mut all = Vec::new();
    let mut acknowledged = 0;
    for st in &statuses {
        for r in &st.receipts {
            if r.state == ReceiptState::Acknowledged {
                acknowledged += 1;
            }
            if let (Some(w), Some(v)) = (r.wait_ms(), r.via) {
                let secs = w as f64 / 1000.0;
                via.entry(v.as_str().to_string()).or_default().push(secs);
                all.push(secs);
            }
        }
    }
    let q = |v: &mut Vec<f64>, p: f64| quantile(v, p);
    Ok(Storm {
        workers: ids.len(),
        messages: sent.len(),
        lost,
        shown_twice: twice,
        acknowledged,
        presented_via: via.iter().map(|(k, v)| (k.clone(), v.len())).collect(),
        p50_secs: q(&mut all, 0.50),
        p99_secs: q(&mut all, 0.99),
        via_p50_p99_secs: via
            .iter_mut()
            .map(|(k, v)| (k.clone(), (q(v, 0.50), q(v, 0.99))))
            .collect(),
        interrupted_turns: interrupted.len(),
        cancel_p99_secs: q(&mut interrupted, 0.99),
        settled_after_secs: settled_after,
        examples,
    })
}

/// One agent busy in long commands, DM'd once per command.
#[derive(Debug, Serialize)]
struct Busy {
    agent: String,
    samples: usize,
    /// From each DM stored to the agent's next model request that carries it, in seconds.
    to_request_secs: Vec<f64>,
    p50_secs: f64,
    p99_secs: f64,
    /// Commands still running when that request came (the agent's cancel left them).
    commands_left_running: usize,
    /// Turns the agent ended itself when interrupted, and those it had to be restarted for.
    cancelled: usize,
    forced: usize,
    /// From the interruption to the turn's end, in seconds (p99).
    cancel_p99_secs: f64,
}

fn print_busy(row: &Value, a: &Args) {
    let name = row["agent"].as_str().unwrap_or("?");
    if let Some(e) = row["error"].as_str() {
        println!("busy {name:<8} failed: {e}");
        return;
    }
    println!(
        "busy {name:<8} DM → next request p50 {:.1} s p99 {:.1} s (bound {} s + 15 s); commands left running {}/{}; turns ended by the agent {}, by a restart {}; cancel p99 {:.2} s",
        row["p50_secs"].as_f64().unwrap_or(0.0),
        row["p99_secs"].as_f64().unwrap_or(0.0),
        a.interrupt_after,
        row["commands_left_running"],
        row["samples"],
        row["cancelled"],
        row["forced"],
        row["cancel_p99_secs"].as_f64().unwrap_or(0.0),
    );
}

/// The replay scenario of the busy part: every step a ten-minute shell command, in the
/// shell tool of whichever agent asks (a long timeout where the tool takes one).
fn busy_scenario(steps: usize) -> String {
    let shell = r#"{ any = [
{ name = "run", args = { command = "sleep 600", timeout_secs = 900 } },
{ name = "Bash", args = { command = "sleep 600", description = "build", timeout = 600000 } },
{ name = "run_shell_command", args = { command = "sleep 600", description = "build" } },
{ name = "exec_command", args = { cmd = "sleep 600", yield_time_ms = 600000 } },
{ name = "shell_command", args = { command = "sleep 600", timeout_ms = 600000 } },
{ name = "shell", args = { command = ["bash", "-lc", "sleep 600"], timeout_ms = 600000 } },
{ name = "bash", args = { command = "sleep 600", description = "build", mode = "sync", initial_wait = 600, timeout = 900 } },
  ] }"#;
    let mut text = String::from("side_text = \"ok\"\nfinal_text = \"Done.\"\n");
    for _ in 0..steps {
        text.push_str(&format!(
            "\n[[step]]\ntext = \"Running the build.\"\ntool_calls = [ {shell} ]\nusage = {{ input = 1000, output = 10 }}\n"
        ));
    }
    text
}

/// The pids of `sleep 600` processes working in `dir`.
fn sleeps_in(dir: &Path) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let want = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            cmd == b"sleep\x00600\x00"
                && std::fs::read_link(format!("/proc/{pid}/cwd")).is_ok_and(|c| c == want)
        })
        .collect()
}

fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        let state = s[s.rfind(')').map_or(0, |i| i + 1)..]
            .split_whitespace()
            .next()
            .unwrap_or("");
        state != "Z" && state != "X"
    })
}

async fn busy(a: &Args, agensh: &Path, name: &str) -> Result<Busy> {
    use agensh_node::turn::{run_worker, NodeLink, WorkerPlan};
    let data = agensh_model::data_dir()?;
    let bed = crate::agents::bed(agensh, 2).await?;
    let record = bed.tmp.path().join("requests.jsonl");
    let replay = crate::gateway::start_replay_recording(
        agensh,
        bed.tmp.path(),
        "busy",
        &busy_scenario(a.samples + 2),
        Some(&record),
    )?;
    let agent = crate::agents::agent_of(agensh, &data, name, &replay.url)?;
    let ctx = bed.ctx.clone();
    let log_dir = ctx.state_dir.join("turns");
    let plan = WorkerPlan {
        ctx: ctx.clone(),
        launch_prompt: "Build the project, then report.".into(),
        idle_timeout: Duration::from_secs(3600),
        park_idle: false,
        ends_at: None,
        notices_before_end: Vec::new(),
        log_dir: log_dir.clone(),
        recovery: Default::default(),
        interrupt_after: Some(Duration::from_secs(a.interrupt_after)),
    };
    let worker_client = Client::new(&bed.hub.url, &ctx.token);
    let link = NodeLink::start(Client::new(&bed.hub.url, ""));
    let (stop, shutdown) = agensh_process::ShutdownTrigger::new();
    let (progress, mut progress_rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move { while progress_rx.recv().await.is_some() {} });
    let worker = tokio::spawn(run_worker(
        plan,
        agent,
        worker_client,
        link,
        shutdown,
        progress,
    ));
    let sender = Client::new(&bed.hub.url, &bed.workers[1].token);
    let mut waits = Vec::new();
    let mut left_running = 0;
    let mut seen: HashSet<u32> = HashSet::new();
    let result: Result<()> = async {
        for k in 0..a.samples {
            // The agent is in its command (a fresh one each time).
            let t0 = Instant::now();
            let pid = loop {
                if let Some(p) = sleeps_in(&ctx.checkout)
                    .into_iter()
                    .find(|p| !seen.contains(p))
                {
                    seen.insert(p);
                    break p;
                }
                if t0.elapsed() > Duration::from_secs(180) || worker.is_finished() {
                    bail!("{name} did not start the long command within 3 min (sample {k})");
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            };
            tokio::time::sleep(Duration::from_secs(2)).await;
            let tag = format!("[busy{k}]");
            let m = sender
                .send_message(&NewMessage {
                    to: ctx.worker.clone(),
                    text: format!("{tag} stop the build: main moved"),
                    thread: None,
                })
                .await?;
            let limit = Duration::from_secs(a.interrupt_after + 180);
            let sent = Instant::now();
            loop {
                let text = std::fs::read_to_string(&record).unwrap_or_default();
                if text.contains(&tag) {
                    break;
                }
                if sent.elapsed() > limit {
                    bail!("{name}: no model request carried the DM within {limit:?} (sample {k})");
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            let now_ms = agensh_domain::time::unix_ms(std::time::SystemTime::now());
            waits.push((now_ms - m.created_at).max(0) as f64 / 1000.0);
            if alive(pid) {
                left_running += 1;
            }
            eprintln!(
                "  sample {}: {:.1} s",
                k + 1,
                waits.last().copied().unwrap_or(0.0)
            );
        }
        Ok(())
    }
    .await;
    stop.fire();
    let _ = tokio::time::timeout(Duration::from_secs(30), worker).await;
    for pid in sleeps_in(&ctx.checkout) {
        agensh_process::group::terminate_process(pid);
    }
    drop(replay);
    result?;
    let (mut cancel, mut cancelled, mut forced) = (Vec::new(), 0, 0);
    let log = std::fs::read_to_string(log_dir.join("turns.jsonl")).unwrap_or_default();
    for line in log.lines() {
        let Ok(v) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        if v["interrupted"].is_array() {
            cancel.push(v["ended_in_ms"].as_f64().unwrap_or(0.0) / 1000.0);
            if v["forced"] == true {
                forced += 1;
            } else {
                cancelled += 1;
            }
        }
    }
    let mut sorted = waits.clone();
    Ok(Busy {
        agent: name.to_string(),
        samples: waits.len(),
        p50_secs: quantile(&mut sorted, 0.50),
        p99_secs: quantile(&mut sorted, 0.99),
        to_request_secs: waits,
        commands_left_running: left_running,
        cancelled,
        forced,
        cancel_p99_secs: quantile(&mut cancel, 0.99),
    })
}

/// The nearest-rank quantile `p` of `v` (sorted here); 0 for none.
fn quantile(v: &mut [f64], p: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    v[((v.len() as f64 * p).ceil() as usize).clamp(1, v.len()) - 1]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_storm_scenario_parses_and_has_one_block_per_round() {
        let text = storm_scenario(3);
        assert_eq!(text.matches("action = \"sleep\"").count(), 3);
        assert_eq!(text.matches("action = \"poll\"").count(), 3);
        let parsed: toml::Value = toml::from_str(&text).unwrap();
        assert_eq!(parsed["step"].as_array().unwrap().len(), 9);
    }

    #[test]
    fn the_busy_scenario_is_a_long_command_per_step_for_every_agent() {
        let parsed: toml::Value = toml::from_str(&busy_scenario(2)).unwrap();
        let steps = parsed["step"].as_array().unwrap();
        assert_eq!(steps.len(), 2);
        let any = steps[0]["tool_calls"][0]["any"].as_array().unwrap();
        for tool in ["run", "Bash", "run_shell_command", "exec_command", "bash"] {
            assert!(
                any.iter().any(|c| c["name"].as_str() == Some(tool)),
                "{tool}"
            );
        }
    }

    #[test]
    fn quantiles_are_nearest_rank() {
        assert_eq!(quantile(&mut [], 0.5), 0.0);
        assert_eq!(quantile(&mut [3.0, 1.0, 2.0], 0.5), 2.0);
        assert_eq!(quantile(&mut [3.0, 1.0, 2.0], 0.99), 3.0);
    }
}
