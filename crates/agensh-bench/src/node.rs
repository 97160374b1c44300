//! The node benchmark: the harness's own cost per worker when one `agensh node` process
//! runs 1,024 scripted workers, each driving its own agent process.
//!
//! 1. **memory per worker** — the node process's VmRSS (and VmHWM) once every worker is
//!    idle, minus the same node running one worker, divided by N − 1 (agent processes are
//!    separate and not counted; their total is shown apart). A minimal Node.js process
//!    (`node -e "setInterval(() => {}, 1000)"`) is measured in the same run: the reference
//!    system runs one such sidecar per worker;
//! 2. **turn-dispatch latency** — `#general` posts, one at a time; for every worker and
//!    post, the time from the event's creation at the hub to the prompt that carries it
//!    being sent to the agent (`started` − `created_at` in the worker's turn log), and the
//!    CPU the node, the hub and the agents spent per post (the machine's cores are shared
//!    by all of them). By default every agent turn ends at once, the worst case: workers
//!    that finish compete with the dispatch to the others; `--turn-ms` makes turns last.
//!
//! Everything runs as separate processes (`agensh hub`, `agensh node`, the agents), each
//! in its own process group; the benchmark is their subreaper, so it can verify that
//! nothing is left when it ends.

use std::collections::{BTreeSet, HashMap};
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use agensh_client::Client;
use agensh_domain::config::{AgentCpu, Config};
use agensh_domain::message::NewMessage;
use agensh_domain::worker::WorkerStatus;
use agensh_process::resources::{self, Limit};
use agensh_process::ProcessGroup;
use anyhow::{anyhow, bail, Context, Result};
use serde_json::{json, Value};

use crate::stats::{ms, percentile};

#[derive(clap::Args)]
pub struct Args {
    /// Workers the measured node runs (each with its own scripted agent process).
    #[arg(long, default_value_t = 1024)]
    workers: usize,
    /// `#general` posts whose dispatch to every worker is timed.
    #[arg(long, default_value_t = 20)]
    posts: usize,
    /// Seconds between the last worker's turn for one post and the next post.
    #[arg(long, default_value_t = 2.0)]
    gap_secs: f64,
    /// Milliseconds each agent turn takes (0: every turn ends at once, so workers that
    /// finish compete for the CPU with the dispatch to the others — the worst case).
    #[arg(long, default_value_t = 0)]
    turn_ms: u64,
    /// How the agents share the CPU with the node (`run.agent_cpu`): background (the
    /// default), low or normal.
    #[arg(long, default_value = "background", value_parser = parse_agent_cpu)]
    agent_cpu: AgentCpu,
    /// Seconds to let the node settle once every worker is idle, before reading memory.
    #[arg(long, default_value_t = 3.0)]
    settle_secs: f64,
    /// Longest wait for every worker to finish its launch turn, in seconds.
    #[arg(long, default_value_t = 1800)]
    start_timeout_secs: u64,
    /// Organization directory to create (must not exist; default: a temporary one under
    /// $TMPDIR). Removed at the end unless --keep.
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Keep the organization directory (turn logs, agent logs) for inspection.
    #[arg(long)]
    keep: bool,
    /// The Node.js binary for the reference sidecar.
    #[arg(long, default_value = "node")]
    nodejs: String,
    #[command(flatten)]
    common: crate::stats::Common,
}

fn parse_agent_cpu(s: &str) -> std::result::Result<AgentCpu, String> {
    match s {
        "background" => Ok(AgentCpu::Background),
        "low" => Ok(AgentCpu::Low),
        "normal" => Ok(AgentCpu::Normal),
        _ => Err("use background, low or normal".into()),
    }
}

/// The agents' scenario. With `turn_ms` 0 every turn ends at once (the agents cost
/// nothing but their process); else each of the first `turns` turns first sleeps that
/// long, so workers finishing a turn do not compete with the dispatch of the others.
pub(crate) fn scenario(turn_ms: u64, turns: usize) -> String {
    let mut s = String::from("# agensh-bench node\n");
    if turn_ms > 0 {
        for _ in 0..turns {
            s.push_str(&format!(
                "[[step]]\naction = \"sleep\"\nms = {turn_ms}\n[[step]]\naction = \"end_turn\"\n"
            ));
        }
    } else {
        s.push_str("[[step]]\naction = \"end_turn\"\n");
    }
    s
}

/// Open files the node needs per worker (agent stdin/stdout, the hub connection, the
/// turn log, slack), and for itself.
const FILES_PER_WORKER: u64 = 8;
const FILES_FIXED: u64 = 256;

const MIB: f64 = 1_048_576.0;

pub(crate) fn mib(b: u64) -> f64 {
    (b as f64 / MIB * 100.0).round() / 100.0
}

// ---------------------------------------------------------------------------------------
// Processes

/// `(state, ppid, pgrp)` of a process, from `/proc/<pid>/stat`.
pub(crate) fn proc_stat(pid: u32) -> Option<(char, u32, i32)> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &s[s.rfind(')')? + 2..];
    let mut f = rest.split_whitespace();
    let state = f.next()?.chars().next()?;
    let ppid = f.next()?.parse().ok()?;
    let pgrp = f.next()?.parse().ok()?;
    Some((state, ppid, pgrp))
}

/// Every process on the machine: `(pid, state, ppid, pgrp)`.
pub(crate) fn all_processes() -> Vec<(u32, char, u32, i32)> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| proc_stat(pid).map(|(s, pp, pg)| (pid, s, pp, pg)))
        .collect()
}

/// The direct children of `pid`.
pub(crate) fn children_of(pid: u32) -> Vec<u32> {
    all_processes()
        .into_iter()
        .filter(|p| p.2 == pid)
        .map(|p| p.0)
        .collect()
}

/// Processes still in any of `groups` (zombies included).
pub(crate) fn left_in(groups: &BTreeSet<i32>) -> Vec<(u32, char)> {
    all_processes()
        .into_iter()
        .filter(|p| groups.contains(&p.3))
        .map(|p| (p.0, p.1))
        .collect()
}

/// Kills every process of `groups`, reaps the ones that became ours (the benchmark is a
/// subreaper), and waits up to `within` for the groups to be empty.
pub(crate) fn kill_groups(groups: &BTreeSet<i32>, within: Duration) -> Vec<(u32, char)> {
    let deadline = Instant::now() + within;
    loop {
        for group in groups
            .iter()
            .filter_map(|&g| ProcessGroup::from_id(u32::try_from(g).ok()?))
        {
            group.kill();
            group.reap_exited();
        }
        let left = left_in(groups);
        if left.is_empty() || Instant::now() > deadline {
            return left;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A child in its own process group. Dropping it kills its group and the groups of its
/// direct children (agents run in groups of their own).
pub(crate) struct Proc {
    child: Option<Child>,
    pub(crate) pid: u32,
    /// Groups seen under this process (its children's), killed with it.
    pub(crate) groups: BTreeSet<i32>,
}

impl Proc {
    pub(crate) fn spawn(cmd: &mut Command, what: &str) -> Result<Proc> {
        let child = cmd
            .process_group(0)
            .stdin(Stdio::null())
            .spawn()
            .with_context(|| format!("cannot start {what}"))?;
        let pid = child.id();
        Ok(Proc {
            child: Some(child),
            pid,
            groups: BTreeSet::from([pid as i32]),
        })
    }

    pub(crate) fn running(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    /// Notes the process groups of the current children (the agents of a node).
    pub(crate) fn note_child_groups(&mut self) -> Vec<u32> {
        let kids = children_of(self.pid);
        for &k in &kids {
            if let Some((_, _, g)) = proc_stat(k) {
                self.groups.insert(g);
            }
        }
        kids
    }

    /// SIGTERM, then up to `grace` for it to exit by itself; then everything left in its
    /// groups is killed. How long it took to exit, if it did by itself.
    pub(crate) async fn stop(&mut self, grace: Duration) -> Option<Duration> {
        let by_itself = self.terminate(grace).await;
        self.kill();
        by_itself
    }

    /// SIGTERM, then up to `grace` for it to exit by itself (reaped); nothing is killed.
    /// How long it took to exit, if it did.
    pub(crate) async fn terminate(&mut self, grace: Duration) -> Option<Duration> {
        self.note_child_groups();
        let t = Instant::now();
        agensh_process::group::terminate_process(self.pid);
        while t.elapsed() < grace {
            if !self.running() {
                return Some(t.elapsed());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        None
    }

    /// `kill -9` of this process alone (its children are left as they are, noted in
    /// `groups` for the final clean-up), and reaps it.
    pub(crate) fn kill_9(&mut self) {
        self.note_child_groups();
        if let Some(c) = self.child.as_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    pub(crate) fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            self.note_child_groups_of(c.id());
            let _ = c.kill();
            let _ = c.wait();
        }
        kill_groups(&self.groups, Duration::from_secs(10));
    }

    fn note_child_groups_of(&mut self, pid: u32) {
        for k in children_of(pid) {
            if let Some((_, _, g)) = proc_stat(k) {
                self.groups.insert(g);
            }
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
    }
}

/// (VmRSS, VmHWM) of a process, in bytes.
pub(crate) fn memory_of(pid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    (kib_field(&status, "VmRSS:"), kib_field(&status, "VmHWM:"))
}

/// Proportional set size: shared pages (the binary, libraries) split between sharers.
fn pss_of(pid: u32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).unwrap_or_default();
    kib_field(&s, "Pss:")
}

fn kib_field(text: &str, name: &str) -> u64 {
    text.lines()
        .find(|l| l.starts_with(name))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(0)
        * 1024
}

/// CPU time a process's live threads have used so far, in nanoseconds from the
/// scheduler (`/proc/<pid>/task/*/schedstat`), not in 10 ms clock ticks: an agent's share
/// of one post is far below a tick.
pub(crate) fn cpu_of(pid: u32) -> Duration {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Duration::ZERO;
    };
    let ns: u64 = tasks
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .sum();
    Duration::from_nanos(ns)
}

/// CPU used so far by the node, the hub, the agents together, and the benchmark.
fn cpu_snapshot(node: u32, hub: u32, agents: &[u32]) -> [Duration; 4] {
    [
        cpu_of(node),
        cpu_of(hub),
        agents.iter().map(|&p| cpu_of(p)).sum(),
        resources::cpu_time(),
    ]
}

fn open_files(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count())
}

fn threads(pid: u32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    kib_field(&s, "Threads:") / 1024
}

fn mem_available() -> u64 {
    kib_field(
        &std::fs::read_to_string("/proc/meminfo").unwrap_or_default(),
        "MemAvailable:",
    )
}

// ---------------------------------------------------------------------------------------
// Turn logs

/// One turn from `.agensh/logs/<id>/turns.jsonl`.
pub(crate) struct Turn {
    pub(crate) started: i64,
    /// (event seq, created_at) of the events the turn's prompt carried.
    pub(crate) carried: Vec<(i64, i64)>,
}

/// Reads the turn logs of many workers incrementally.
pub(crate) struct TurnLogs {
    logs: Vec<LogFile>,
}

struct LogFile {
    path: PathBuf,
    offset: u64,
    partial: Vec<u8>,
    turns: usize,
}

impl TurnLogs {
    pub(crate) fn new(org: &Path, ids: &[String]) -> Self {
        TurnLogs {
            logs: ids
                .iter()
                .map(|id| LogFile {
                    path: org.join(".agensh/logs").join(id).join("turns.jsonl"),
                    offset: 0,
                    partial: Vec::new(),
                    turns: 0,
                })
                .collect(),
        }
    }

    /// Turns worker `i` logged since the last call.
    pub(crate) fn read_new(&mut self, i: usize) -> Result<Vec<Turn>> {
        let log = &mut self.logs[i];
        let Ok(mut f) = std::fs::File::open(&log.path) else {
            return Ok(Vec::new());
        };
        f.seek(SeekFrom::Start(log.offset))?;
        let mut buf = Vec::new();
        f.read_to_end(&mut buf)?;
        log.offset += buf.len() as u64;
        log.partial.extend_from_slice(&buf);
        let Some(end) = log.partial.iter().rposition(|b| *b == b'\n') else {
            return Ok(Vec::new());
        };
        let complete: Vec<u8> = log.partial.drain(..=end).collect();
        let mut turns = Vec::new();
        for line in complete.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
            let v: Value = serde_json::from_slice(line)
                .with_context(|| format!("a line of {} is not JSON", log.path.display()))?;
            if let Some(e) = v.get("error") {
                bail!("a turn failed ({}): {e}", log.path.display());
            }
            if v.get("turn").is_none() {
                // Not a turn: a prompt handed over (`carrying`; its turn's entry follows), the
                // worker parked, a turn interrupted, a restart.
                continue;
            }
            let started = v["started"]
                .as_i64()
                .ok_or_else(|| anyhow!("a turn without `started` in {}", log.path.display()))?;
            let carried = v["carried"]
                .as_array()
                .ok_or_else(|| {
                    anyhow!(
                        "a turn without `carried` in {} — is the node built from this tree?",
                        log.path.display()
                    )
                })?
                .iter()
                .map(|c| {
                    (
                        c["seq"].as_i64().unwrap_or(0),
                        c["created_at"].as_i64().unwrap_or(0),
                    )
                })
                .collect();
            turns.push(Turn { started, carried });
        }
        log.turns += turns.len();
        Ok(turns)
    }
}

// ---------------------------------------------------------------------------------------
// The organization

pub(crate) fn agensh_cmd(agensh: &Path) -> Command {
    let mut c = Command::new(agensh);
    c.env("AGENSH_LOG", "warn")
        .env_remove("AGENSH_DIR")
        .env_remove("AGENSH_HUB")
        .env_remove("AGENSH_TOKEN")
        .env_remove("AGENSH_LISTEN");
    c
}

/// A log for a process's output, appended to (a restarted process goes on in it).
pub(crate) fn log_file(path: &Path) -> Result<std::fs::File> {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .with_context(|| format!("cannot create {}", path.display()))
}

/// `agensh init`, then `[run]` set for the benchmark: no stagger, no deadline, no idle
/// prompts during the run; then `adjust` changes what else the benchmark needs.
pub(crate) fn init_org(
    agensh: &Path,
    dir: &Path,
    goal: &str,
    scenario: &Path,
    workers: usize,
    adjust: impl FnOnce(&mut Config),
) -> Result<()> {
    let out = agensh_cmd(agensh)
        .arg("init")
        .arg(dir)
        .args(["--goal", goal])
        .output()
        .context("cannot run agensh init")?;
    if !out.status.success() {
        bail!(
            "agensh init failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let path = dir.join("agensh.toml");
    let mut config = Config::parse(&std::fs::read_to_string(&path)?)?;
    config.run.workers = workers;
    config.run.agent = "script".into();
    config.run.scenario = scenario.to_string_lossy().to_string();
    config.run.stagger_secs = 0.0;
    config.run.idle_timeout_secs = 3600;
    config.run.hours = 0.0;
    config.run.notices_minutes = vec![0.001];
    adjust(&mut config);
    config.validate()?;
    std::fs::write(&path, config.template())?;
    Ok(())
}

/// Where a benchmark's organization goes: the given directory (which must not exist yet)
/// or `org` in a new one under $TMPDIR. Removed by [`BenchDir::finish`] unless kept.
pub(crate) struct BenchDir {
    pub(crate) path: PathBuf,
    tmp: tempfile::TempDir,
    given: bool,
    keep: bool,
}

impl BenchDir {
    pub(crate) fn new(prefix: &str, given: Option<&Path>, keep: bool) -> Result<BenchDir> {
        let tmp = tempfile::Builder::new().prefix(prefix).tempdir()?;
        let path = match given {
            Some(d) if d.exists() => bail!(
                "{} exists — give --dir a path that does not exist yet",
                d.display()
            ),
            Some(d) => std::path::absolute(d)?,
            None => tmp.path().join("org"),
        };
        Ok(BenchDir {
            path,
            tmp,
            given: given.is_some(),
            keep,
        })
    }

    /// Removes the directory, or says where it is kept.
    pub(crate) fn finish(self) {
        if self.keep {
            eprintln!("kept the organization in {}", self.path.display());
            if !self.given {
                let _ = self.tmp.keep();
            }
        } else if self.given {
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}

/// Runs `work` until it ends or Ctrl-C or SIGTERM comes; then it is dropped, and with it
/// every process it started (their groups do not get the terminal's signal).
pub(crate) async fn until_signal<T>(
    work: impl std::future::Future<Output = Result<T>>,
) -> Result<T> {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        r = work => r,
        _ = tokio::signal::ctrl_c() => Err(anyhow!("interrupted; stopped every process it started")),
        _ = term.recv() => Err(anyhow!("terminated; stopped every process it started")),
    }
}

/// Prints a benchmark's result: one JSON document, or its table.
pub(crate) fn print_result(json: bool, result: &Value, table: fn(&Value)) -> Result<()> {
    if json {
        println!("{}", serde_json::to_string_pretty(result)?);
    } else {
        table(result);
    }
    Ok(())
}

/// Stops the node (SIGTERM, its exit awaited up to 120 s) and then the hub, and lists the
/// processes still alive in their groups or reparented to the benchmark (it is their
/// subreaper), killing those: how long the node took to exit, and what was left.
pub(crate) async fn stop_all(mut node: Proc, mut hub: Hub) -> (Option<Duration>, Vec<(u32, char)>) {
    let node_stop = node.stop(Duration::from_secs(120)).await;
    let mut groups = node.groups.clone();
    drop(node);
    hub.proc.stop(Duration::from_secs(30)).await;
    groups.extend(hub.proc.groups.iter().copied());
    drop(hub);
    let mut left = left_in(&groups);
    let me = std::process::id();
    left.extend(
        all_processes()
            .into_iter()
            .filter(|p| p.2 == me)
            .map(|p| (p.0, p.1)),
    );
    if !left.is_empty() {
        eprintln!("warning: {} processes were left; killing them", left.len());
        kill_groups(&groups, Duration::from_secs(10));
    }
    (node_stop, left)
}

pub(crate) struct Hub {
    pub(crate) proc: Proc,
    pub(crate) url: String,
    pub(crate) admin_token: String,
}

/// Starts `agensh hub` on `listen` (`127.0.0.1:0`: any free port) and waits until it
/// serves.
pub(crate) fn start_hub(agensh: &Path, dir: &Path, listen: &str) -> Result<Hub> {
    let mut proc = Proc::spawn(
        agensh_cmd(agensh)
            .arg("hub")
            .arg(dir)
            .args(["--listen", listen])
            .stdout(Stdio::null())
            .stderr(log_file(&dir.join(".agensh/bench-hub.log"))?),
        "agensh hub",
    )?;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok(info) = agensh_hub::read_hub_info(dir) {
            if info.pid == proc.pid {
                return Ok(Hub {
                    proc,
                    url: info.url,
                    admin_token: info.admin_token,
                });
            }
        }
        if !proc.running() {
            bail!(
                "the hub exited while starting. Its log:\n{}",
                tail(&dir.join(".agensh/bench-hub.log"), 20)
            );
        }
        if Instant::now() > deadline {
            bail!("the hub did not start within 60 s (see .agensh/bench-hub.log)");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Starts `agensh node` for exactly `ids`.
fn start_node(agensh: &Path, dir: &Path, scenario: &Path, ids: &[String]) -> Result<Proc> {
    Proc::spawn(
        &mut node_command(agensh, dir, scenario, ids)?,
        "agensh node",
    )
}

/// The command of `agensh node` with scripted agents for exactly `ids`, its output to
/// `.agensh/bench-node-<N>.log`.
pub(crate) fn node_command(
    agensh: &Path,
    dir: &Path,
    scenario: &Path,
    ids: &[String],
) -> Result<Command> {
    let log = dir.join(format!(".agensh/bench-node-{}.log", ids.len()));
    let mut cmd = agensh_cmd(agensh);
    cmd.arg("--dir")
        .arg(dir)
        .args(["node", "--workers", &ids.len().to_string()])
        .args(["--agent", "script", "--scenario"])
        .arg(scenario)
        .stdout(Stdio::null())
        .stderr(log_file(&log)?);
    for id in ids {
        cmd.args(["--id", id]);
    }
    Ok(cmd)
}

pub(crate) fn tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// Waits until every worker of `ids` has logged a turn and is idle at the hub.
async fn wait_all_idle(
    admin: &Client,
    node: &mut Proc,
    logs: &mut TurnLogs,
    ids: &[String],
    dir: &Path,
    timeout: Duration,
    what: &str,
) -> Result<Duration> {
    let started = Instant::now();
    let progress = crate::hub::bar(ids.len() as u64, what);
    let wanted: HashMap<&str, usize> = ids
        .iter()
        .enumerate()
        .map(|(i, id)| (id.as_str(), i))
        .collect();
    loop {
        for i in 0..ids.len() {
            if logs.logs[i].turns == 0 {
                logs.read_new(i)?;
            }
        }
        let mut ready = 0;
        for w in admin.workers().await? {
            let Some(&i) = wanted.get(w.id.as_str()) else {
                continue;
            };
            if w.status == WorkerStatus::Dead {
                let agent_log = dir
                    .join(".agensh/logs")
                    .join(&w.id)
                    .join("agent.stderr.log");
                bail!(
                    "worker {} died while starting. Node log:\n{}\nAgent log ({}):\n{}",
                    w.id,
                    tail(
                        &dir.join(format!(".agensh/bench-node-{}.log", ids.len())),
                        20
                    ),
                    agent_log.display(),
                    tail(&agent_log, 20)
                );
            }
            if w.status == WorkerStatus::Idle && logs.logs[i].turns > 0 {
                ready += 1;
            }
        }
        progress.set_position(ready as u64);
        if ready == ids.len() {
            progress.finish();
            return Ok(started.elapsed());
        }
        if !node.running() {
            bail!(
                "the node exited while its workers were starting ({ready} of {} idle). Its log:\n{}",
                ids.len(),
                tail(
                    &dir.join(format!(".agensh/bench-node-{}.log", ids.len())),
                    30
                )
            );
        }
        if started.elapsed() > timeout {
            bail!(
                "only {ready} of {} workers were idle after {} s",
                ids.len(),
                timeout.as_secs()
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// RSS of a minimal Node.js process after 1 s, and its version.
async fn nodejs_reference(bin: &str) -> std::result::Result<(u64, String), String> {
    let version = Command::new(bin)
        .arg("--version")
        .output()
        .map_err(|e| format!("Node.js ({bin}) is not installed here: {e}"))?;
    let version = String::from_utf8_lossy(&version.stdout).trim().to_string();
    let mut p = Proc::spawn(
        Command::new(bin)
            .args(["-e", "setInterval(() => {}, 1000)"])
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
        "node",
    )
    .map_err(|e| format!("{e:#}"))?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (rss, _) = memory_of(p.pid);
    p.kill();
    if rss == 0 {
        return Err("the Node.js process exited before its memory could be read".into());
    }
    Ok((rss, version))
}

// ---------------------------------------------------------------------------------------
// The benchmark

pub async fn run(a: Args) -> Result<()> {
    if a.workers < 2 {
        bail!("--workers must be at least 2 (one worker is the baseline)");
    }
    let agensh = crate::stats::agensh_binary(a.common.agensh.as_deref())?;
    // Agents whose node died are still ours to kill and reap (and to count as left over).
    agensh_process::group::become_subreaper()
        .context("cannot make the benchmark the reaper of its orphaned processes")?;
    // Children inherit the raised limit; if it cannot be raised, the limit as it is.
    let Limit {
        soft: files,
        hard: files_max,
    } = agensh_process::raise_open_file_limit()
        .or_else(|_| resources::open_file_limit())
        .unwrap_or(Limit { soft: 0, hard: 0 });
    let files_needed = a.workers as u64 * FILES_PER_WORKER + FILES_FIXED;
    if files < files_needed {
        bail!(
            "this machine allows {files} open files per process (hard limit {files_max}); a node with {} workers needs about {files_needed} — raise the hard limit (ulimit -Hn, or nofile in /etc/security/limits.conf) or pass fewer --workers",
            a.workers
        );
    }
    let nproc = resources::process_limit().map_or(0, |l| l.soft);

    let dir = BenchDir::new("agensh-bench-node-", a.dir.as_deref(), a.keep)?;
    let scenario = dir.path.join(".agensh/bench-scenario.toml");
    let outcome = until_signal(async {
        init_org(
            &agensh,
            &dir.path,
            "agensh-bench node: harness overhead per worker",
            &scenario,
            a.workers,
            |c| c.run.agent_cpu = a.agent_cpu,
        )?;
        // Turns: the launch turn and one per post, with some to spare.
        std::fs::write(&scenario, self::scenario(a.turn_ms, a.posts + 8))?;
        measure(&a, &agensh, &dir.path, &scenario, nproc).await
    })
    .await;
    dir.finish();
    print_result(a.common.json, &outcome?, print_table)?;
    Ok(())
}

async fn measure(
    a: &Args,
    agensh: &Path,
    dir: &Path,
    scenario: &Path,
    nproc: u64,
) -> Result<Value> {
    let n = a.workers;
    let hub = start_hub(agensh, dir, "127.0.0.1:0")?;
    let admin = Client::new(&hub.url, &hub.admin_token);
    let mut ids: Vec<String> = admin
        .add_workers(n + 1)
        .await?
        .into_iter()
        .map(|w| w.id)
        .collect();
    ids.sort();
    // The last worker is the baseline's; the measured node runs the first N.
    let baseline_id = ids.pop().expect("n + 1 workers");
    let settle = Duration::from_secs_f64(a.settle_secs);
    let start_timeout = Duration::from_secs(a.start_timeout_secs);

    // The fixed cost: the same node with one worker.
    let one = std::slice::from_ref(&baseline_id);
    let mut node1 = start_node(agensh, dir, scenario, one)?;
    let mut logs1 = TurnLogs::new(dir, one);
    wait_all_idle(
        &admin,
        &mut node1,
        &mut logs1,
        one,
        dir,
        start_timeout,
        "baseline",
    )
    .await?;
    tokio::time::sleep(settle).await;
    let (rss1, hwm1) = memory_of(node1.pid);
    let agent1: Vec<u32> = node1.note_child_groups();
    let agent1_rss: u64 = agent1.iter().map(|&p| memory_of(p).0).sum();
    node1.stop(Duration::from_secs(30)).await;
    drop(node1);

    let available = mem_available();
    if agent1_rss * n as u64 > available {
        eprintln!(
            "warning: {n} agents of {:.1} MiB RSS each may not fit in the {:.0} MiB available (shared pages make it less)",
            mib(agent1_rss),
            mib(available)
        );
    }
    if nproc < n as u64 * 6 {
        eprintln!(
            "warning: the process limit (ulimit -u) is {nproc}; {n} agents with their threads need about {}",
            n * 6
        );
    }

    let nodejs = nodejs_reference(&a.nodejs).await;

    // The measured node.
    let mut node = start_node(agensh, dir, scenario, &ids)?;
    let mut logs = TurnLogs::new(dir, &ids);
    let activation = wait_all_idle(
        &admin,
        &mut node,
        &mut logs,
        &ids,
        dir,
        start_timeout,
        "starting",
    )
    .await?;
    tokio::time::sleep(settle).await;
    let (rss, hwm) = memory_of(node.pid);
    let node_files = open_files(node.pid);
    let node_threads = threads(node.pid);
    let agents = node.note_child_groups();
    let agents_rss: u64 = agents.iter().map(|&p| memory_of(p).0).sum();
    let agents_pss: u64 = agents.iter().map(|&p| pss_of(p)).sum();
    let node_pss = pss_of(node.pid);
    if agents.len() != n {
        eprintln!(
            "warning: the node has {} child processes, expected {n} agents",
            agents.len()
        );
    }

    // Dispatch latency.
    let cpu_before = cpu_snapshot(node.pid, hub.proc.pid, &agents);
    let progress = crate::hub::bar(a.posts as u64, "posts");
    let mut samples: Vec<Duration> = Vec::new();
    let mut per_post_max: Vec<Duration> = Vec::new();
    let mut per_post_min: Vec<Duration> = Vec::new();
    for p in 0..a.posts {
        let msg = admin
            .send_message(&NewMessage {
                to: "#general".into(),
                text: format!("benchmark post {p}: nothing to do"),
                thread: None,
            })
            .await?;
        let mut pending: Vec<usize> = (0..n).collect();
        let mut this: Vec<Duration> = Vec::with_capacity(n);
        let deadline = Instant::now() + Duration::from_secs(300);
        while !pending.is_empty() {
            tokio::time::sleep(Duration::from_millis(200)).await;
            let mut still = Vec::with_capacity(pending.len());
            for &i in &pending {
                let found = logs.read_new(i)?.into_iter().find_map(|t| {
                    t.carried
                        .iter()
                        .find(|c| c.1 == msg.created_at)
                        .map(|c| t.started - c.1)
                });
                match found {
                    Some(d) => this.push(Duration::from_millis(d.max(0) as u64)),
                    None => still.push(i),
                }
            }
            pending = still;
            if !pending.is_empty() && (Instant::now() > deadline || !node.running()) {
                bail!(
                    "post {p}: {} of {n} workers never logged a turn carrying it (first: {}); node log:\n{}",
                    pending.len(),
                    ids[pending[0]],
                    tail(&dir.join(format!(".agensh/bench-node-{n}.log")), 20)
                );
            }
        }
        per_post_max.push(this.iter().copied().max().unwrap_or_default());
        per_post_min.push(this.iter().copied().min().unwrap_or_default());
        samples.extend(this);
        progress.inc(1);
        tokio::time::sleep(Duration::from_secs_f64(a.gap_secs)).await;
    }
    progress.finish();
    let cpu_after = cpu_snapshot(node.pid, hub.proc.pid, &agents);
    let cpu_per_post: Vec<f64> = (0..4)
        .map(|i| ms(cpu_after[i].saturating_sub(cpu_before[i]) / a.posts.max(1) as u32))
        .collect();
    let cores = std::thread::available_parallelism().map_or(1, |c| c.get());
    let (rss_after, hwm_after) = memory_of(node.pid);

    // Stop everything and check nothing is left.
    let (node_stop, left) = stop_all(node, hub).await;

    let per_worker = rss.saturating_sub(rss1) / (n as u64 - 1);
    let per_worker_hwm = hwm.saturating_sub(hwm1) / (n as u64 - 1);
    // After every worker has taken a turn per post (allocator pools and buffers warm).
    let per_worker_after = rss_after.saturating_sub(rss1) / (n as u64 - 1);
    let nodejs_json = match &nodejs {
        Ok((njs, version)) => json!({
            "version": version,
            "rss_mib": mib(*njs),
            "ratio_to_agensh_per_worker": (*njs as f64 / per_worker.max(1) as f64 * 10.0).round() / 10.0,
        }),
        Err(e) => json!({ "missing": e }),
    };
    let dms = |v: &[Duration], p: f64| ms(percentile(v, p));
    Ok(json!({
        "workers": n,
        "posts": a.posts,
        "turn_ms": a.turn_ms,
        "agent_cpu": a.agent_cpu.as_str(),
        "activation": {
            "seconds": (activation.as_secs_f64() * 10.0).round() / 10.0,
            "agents": agents.len(),
        },
        "memory": {
            "per_worker_rss_mib": mib(per_worker),
            "per_worker_rss_kib": per_worker / 1024,
            "per_worker_hwm_mib": mib(per_worker_hwm),
            "per_worker_rss_after_posts_kib": per_worker_after / 1024,
            "node_rss_mib": mib(rss),
            "node_hwm_mib": mib(hwm),
            "node_pss_mib": mib(node_pss),
            "node_rss_after_posts_mib": mib(rss_after),
            "node_hwm_after_posts_mib": mib(hwm_after),
            "baseline_rss_mib": mib(rss1),
            "baseline_hwm_mib": mib(hwm1),
            "node_open_files": node_files,
            "node_threads": node_threads,
            "agents_rss_total_mib": mib(agents_rss),
            "agents_pss_total_mib": mib(agents_pss),
            "agent_rss_each_mib": mib(agents_rss / agents.len().max(1) as u64),
            "agent_pss_each_mib": mib(agents_pss / agents.len().max(1) as u64),
            "target_per_worker_mib": 4,
        },
        "nodejs": nodejs_json,
        "latency": {
            "samples": samples.len(),
            "p50_ms": dms(&samples, 50.0),
            "p99_ms": dms(&samples, 99.0),
            "max_ms": dms(&samples, 100.0),
            "per_post_max_p50_ms": dms(&per_post_max, 50.0),
            "per_post_max_p99_ms": dms(&per_post_max, 99.0),
            "per_post_min_p50_ms": dms(&per_post_min, 50.0),
            "target_p99_ms": 100,
        },
        "cpu_per_post_ms": {
            "node": cpu_per_post[0],
            "hub": cpu_per_post[1],
            "agents": cpu_per_post[2],
            "benchmark": cpu_per_post[3],
            "cores": cores,
        },
        "cleanup": {
            "node_exit_on_sigterm_secs": node_stop.map(|d| (d.as_secs_f64() * 100.0).round() / 100.0),
            "processes_left": left.len(),
        },
    }))
}

fn print_table(r: &Value) {
    let mark = |ok: bool| if ok { "meets target" } else { "MISSES target" };
    let m = &r["memory"];
    let l = &r["latency"];
    let js = &r["nodejs"];
    let c = &r["cleanup"];
    let turns = match r["turn_ms"].as_u64().unwrap_or(0) {
        0 => "turns end at once".to_string(),
        t => format!("turns take {t} ms"),
    };
    println!(
        "node benchmark: {} scripted workers in one node process, {} posts, {turns}, agents' CPU {}",
        r["workers"], r["posts"], r["agent_cpu"].as_str().unwrap_or("?")
    );
    println!(
        "activation     {} workers launched and idle after {} s ({} agent processes)",
        r["workers"], r["activation"]["seconds"], r["activation"]["agents"]
    );
    println!(
        "memory/worker  {} MiB RSS ({} KiB; peak {} MiB; {} KiB after the posts), agents excluded   target <= 4 MiB: {}",
        m["per_worker_rss_mib"],
        m["per_worker_rss_kib"],
        m["per_worker_hwm_mib"],
        m["per_worker_rss_after_posts_kib"],
        mark(m["per_worker_rss_mib"].as_f64().unwrap_or(f64::MAX) <= 4.0)
    );
    println!(
        "    node RSS {} MiB (peak {} MiB, PSS {} MiB) with {} workers idle; {} MiB (peak {} MiB) after the posts",
        m["node_rss_mib"], m["node_hwm_mib"], m["node_pss_mib"], r["workers"], m["node_rss_after_posts_mib"], m["node_hwm_after_posts_mib"]
    );
    println!(
        "    baseline: the same node with 1 worker {} MiB RSS (peak {} MiB); node holds {} open files, {} threads",
        m["baseline_rss_mib"], m["baseline_hwm_mib"], m["node_open_files"], m["node_threads"]
    );
    println!(
        "    agents (not counted): {} MiB RSS in total, {} MiB PSS ({} MiB RSS, {} MiB PSS each)",
        m["agents_rss_total_mib"],
        m["agents_pss_total_mib"],
        m["agent_rss_each_mib"],
        m["agent_pss_each_mib"]
    );
    match js.get("missing") {
        Some(why) => println!("Node.js        not measured: {}", why.as_str().unwrap_or("")),
        None => println!(
            "Node.js        a minimal sidecar (node {} -e \"setInterval(() => {{}}, 1000)\") {} MiB RSS after 1 s = {}x agensh's per-worker cost",
            js["version"].as_str().unwrap_or(""), js["rss_mib"], js["ratio_to_agensh_per_worker"]
        ),
    }
    println!(
        "dispatch       p50 {} ms, p99 {} ms, max {} ms from event to prompt over {} samples   target p99 <= 100 ms: {}",
        l["p50_ms"],
        l["p99_ms"],
        l["max_ms"],
        l["samples"],
        mark(l["p99_ms"].as_f64().unwrap_or(f64::MAX) <= 100.0)
    );
    println!(
        "    slowest worker of each post: p50 {} ms, p99 {} ms (fastest worker: p50 {} ms)",
        l["per_post_max_p50_ms"], l["per_post_max_p99_ms"], l["per_post_min_p50_ms"]
    );
    let cpu = &r["cpu_per_post_ms"];
    println!(
        "    CPU per post (all {} cores shared): node {} ms, hub {} ms, agents {} ms together, benchmark {} ms",
        cpu["cores"], cpu["node"], cpu["hub"], cpu["agents"], cpu["benchmark"]
    );
    println!(
        "cleanup        node exited {} after SIGTERM; processes left: {}",
        c["node_exit_on_sigterm_secs"]
            .as_f64()
            .map_or("only when killed".to_string(), |s| format!("in {s} s")),
        c["processes_left"]
    );
}
