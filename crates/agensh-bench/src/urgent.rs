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
use std::path::{Path, PathBuf};
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
    /// Keep the organizations and print where.
    #[arg(long)]
    keep: bool,
    /// The `agensh` binary (default: next to this one).
    #[arg(long)]
    agensh: Option<PathBuf>,
    /// Print the results as JSON.
    #[arg(long)]
    json: bool,
}

pub async fn run(a: Args) -> Result<()> {
    let agensh = crate::stats::agensh_binary(a.agensh.as_deref())?;
    let mut out = serde_json::Map::new();
    if !a.no_storm {
        let s = storm(&a, &agensh).await?;
        if !a.json {
            print_storm(&s, &a);
        }
        out.insert("storm".into(), serde_json::to_value(&s)?);
    }
    if a.json {
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
    let q = |v: &mut Vec<f64>, p: f64| -> f64 {
        if v.is_empty() {
            return 0.0;
        }
        v.sort_by(f64::total_cmp);
        v[((v.len() as f64 * p).ceil() as usize).clamp(1, v.len()) - 1]
    };
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
}
