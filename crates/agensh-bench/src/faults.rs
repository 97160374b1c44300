//! The fault-injection run (issue 15): N scripted workers build a goal of many parts, once
//! undisturbed (the baseline) and once while a seeded random driver
//!
//! - kills the hub with SIGKILL at random moments (`--hub-kills`), restarting it after a
//!   short random pause on the same port, so the node and the agents keep its URL;
//! - kills random scripted agent processes (children of the node, found in /proc by their
//!   command line `agensh agent script`; `--agent-kills`), which the node restarts with
//!   their session;
//! - kills the node with SIGKILL and starts it again (`--node-kills`, once by default).
//!
//! Each run ends when every part is on `main` (or at `--time-limit-secs`); then both are
//! checked the same way, each check reported with its numbers:
//!
//! 1. every part is merged on `main`, the same parts as the baseline;
//! 2. no acknowledged write is lost: every tool call the scripted agents logged
//!    (`AGENSH_SCRIPT_LOG`) as answered without error — claims, releases, PATCH_SUMMARYs and
//!    merges by `ship`, `#general` posts — is in the store (unfold, message history) and
//!    on `main` (`git rev-list main`) afterwards;
//! 3. no event is shown twice: in each worker's turn log (`.agensh/logs/<id>/turns.jsonl`)
//!    no event seq is in two prompts (a prompt's `carrying` entry and its completed turn's
//!    `carried` list are one);
//! 4. `git fsck --full --strict` of the bare repository is clean;
//! 5. no process is left once the node and the hub are stopped (by SIGTERM): nothing whose
//!    command line or working directory is in the organization, no child of ours.
//!
//! The scenario: each round of a worker claims the first free part (`claim_free_part`),
//! writes it, `ship`s it (commit, push, PR, merge, PATCH_SUMMARY, release), posts to
//! `#general`, releases its claim (a no-op when `ship` did) and ends the turn; there are
//! as many rounds as parts, so a round a fault broke is done again by the same worker. A
//! worker that finds no free part while some are not merged looks again at its next prompt
//! (`wait`): a claim stored by a hub killed before it answered is held by no one who
//! knows it, and its part is free again only when its lease (60 s) ends.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use agensh_client::{Client, MessageFilter};
use agensh_process::ProcessGroup;
use agensh_workspace::git::Git;
use anyhow::{anyhow, bail, Context, Result};
use serde_json::{json, Value};

use crate::node::{
    all_processes, children_of, init_org, kill_groups, node_command, print_result, proc_stat,
    start_hub, tail, until_signal, BenchDir, Hub, Proc,
};

#[derive(clap::Args)]
pub struct Args {
    /// Workers (each with its own scripted agent process) in one node.
    #[arg(long, default_value_t = 64)]
    workers: usize,
    /// Parts of the goal per worker (the goal has workers × this many parts).
    #[arg(long, default_value_t = 2)]
    parts_per_worker: usize,
    /// Times the hub is killed with SIGKILL during the faulted run.
    #[arg(long, default_value_t = 10)]
    hub_kills: usize,
    /// Scripted agent processes killed during the faulted run (default: half the workers).
    #[arg(long)]
    agent_kills: Option<usize>,
    /// Times the node is killed with SIGKILL and started again.
    #[arg(long, default_value_t = 1)]
    node_kills: usize,
    /// Seed of the fault driver (default: from the clock; printed, to run it again).
    #[arg(long)]
    seed: Option<u64>,
    /// Longest each run may take to merge every part, in seconds.
    #[arg(long, default_value_t = 1800)]
    time_limit_secs: u64,
    /// Directory for both organizations (must not exist; default: a temporary one under
    /// $TMPDIR). Removed at the end unless --keep.
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Keep the organizations (turn logs, script logs, hub and node logs) for inspection.
    #[arg(long)]
    keep: bool,
    #[command(flatten)]
    common: crate::stats::Common,
}

/// The scenario: `parts` parts, `rounds` rounds of claim, write, ship, post, release.
fn scenario(parts: &[String], rounds: usize) -> String {
    let mut s = String::from("# agensh-bench faults\nparts = [");
    s.push_str(
        &parts
            .iter()
            .map(|p| format!("\"{p}\""))
            .collect::<Vec<_>>()
            .join(", "),
    );
    s.push_str("]\n[templates]\n");
    s.push_str("part = \"def {part}():\\n    return '{part}'\\n\"\n");
    s.push_str("test = \"from parts.{part} import {part}\\n\\n\\ndef test_{part}():\\n    assert {part}() == '{part}'\\n\"\n");
    let round = r#"
[[step]]
action = "claim_free_part"
lease_secs = 60
wait = true
[[step]]
action = "write_part"
[[step]]
action = "call"
tool = "ship"
args = { title = "Part {part}", summary = "part {part} by {worker}: parts/{part}.py and its test", claim = "{claim}", label = "part-{part}" }
[[step]]
action = "msg_post"
text = "{worker} is done with part {part} (turn {turn})"
[[step]]
action = "release"
[[step]]
action = "end_turn"
"#;
    for _ in 0..rounds {
        s.push_str(round);
    }
    s
}

fn part_names(n: usize) -> Vec<String> {
    let width = n.to_string().len().max(3);
    (1..=n).map(|i| format!("p{i:0width$}")).collect()
}

/// A small deterministic generator (xorshift64), so a seed replays the same faults.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// Uniform in `[lo, hi)`.
    fn between(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (self.next() >> 11) as f64 / (1u64 << 53) as f64 * (hi - lo)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

#[derive(Clone, Copy, Debug)]
enum Fault {
    /// SIGKILL the hub; start it again after the pause.
    Hub { pause: Duration },
    /// SIGKILL one random agent (its process group).
    Agent,
    /// SIGKILL the node; start it again after the pause.
    Node { pause: Duration },
}

/// The faults of a run and when, from the node's start; spread over the first 70% of
/// `expected` (the baseline's time), so they all land while work goes on.
fn plan(rng: &mut Rng, a: &Args, expected: Duration) -> Vec<(Duration, Fault)> {
    let t = expected.as_secs_f64().max(10.0);
    let mut plan = Vec::new();
    for _ in 0..a.hub_kills {
        let pause = Duration::from_secs_f64(rng.between(0.2, 2.0));
        plan.push((rng.between(0.05, 0.7) * t, Fault::Hub { pause }));
    }
    for _ in 0..a.agent_kills.unwrap_or(a.workers / 2) {
        plan.push((rng.between(0.05, 0.7) * t, Fault::Agent));
    }
    for _ in 0..a.node_kills {
        let pause = Duration::from_secs_f64(rng.between(0.5, 3.0));
        plan.push((rng.between(0.2, 0.6) * t, Fault::Node { pause }));
    }
    plan.sort_by(|x, y| x.0.total_cmp(&y.0));
    plan.into_iter()
        .map(|(at, f)| (Duration::from_secs_f64(at), f))
        .collect()
}

/// What the benchmark knows of one run.
struct Setup<'a> {
    agensh: &'a Path,
    scenario: &'a Path,
    parts: &'a [String],
    workers: usize,
    limit: Duration,
}

pub async fn run(a: Args) -> Result<()> {
    if a.workers == 0 || a.parts_per_worker == 0 {
        bail!("--workers and --parts-per-worker must be at least 1");
    }
    let agensh = crate::stats::agensh_binary(a.common.agensh.as_deref())?;
    // Agents whose node was killed are ours to reap (and to count when left over).
    agensh_process::group::become_subreaper()
        .context("cannot make the benchmark the reaper of its orphaned processes")?;
    let _ = agensh_process::raise_open_file_limit();
    let seed = a.seed.unwrap_or_else(|| {
        SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64)
    });
    eprintln!("fault driver seed {seed} (run it again with --seed {seed})");

    let dir = BenchDir::new("agensh-bench-faults-", a.dir.as_deref(), a.keep)?;
    let outcome = until_signal(async {
        std::fs::create_dir_all(&dir.path)?;
        let parts = part_names(a.workers * a.parts_per_worker);
        let scenario = dir.path.join("scenario.toml");
        std::fs::write(&scenario, self::scenario(&parts, parts.len()))?;
        let setup = Setup {
            agensh: &agensh,
            scenario: &scenario,
            parts: &parts,
            workers: a.workers,
            limit: Duration::from_secs(a.time_limit_secs),
        };
        let baseline = one_run(&setup, &dir.path.join("baseline"), None).await?;
        let expected =
            Duration::from_secs_f64(baseline["seconds_to_all_merged"].as_f64().unwrap_or(60.0));
        let mut rng = Rng::new(seed);
        let plan = plan(&mut rng, &a, expected);
        let faulted = one_run(&setup, &dir.path.join("faulted"), Some((plan, rng))).await?;
        Ok(report(&a, seed, &parts, baseline, faulted))
    })
    .await;
    dir.finish();
    let result = outcome?;
    print_result(a.common.json, &result, print_table)?;
    let failed: Vec<&str> = result["checks"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|c| c["pass"] != json!(true))
        .filter_map(|c| c["name"].as_str())
        .collect();
    if !failed.is_empty() {
        bail!("{} check(s) failed: {}", failed.len(), failed.join("; "));
    }
    Ok(())
}

/// What a run that stopped merging looks like, for whoever reads the tier's output: each
/// worker's state, step and claims as the hub has them, and the last lines of the node's
/// and the hub's logs.
async fn stall_report(progress: &indicatif::ProgressBar, dir: &Path, hub: &Hub) {
    let admin = Client::new(&hub.url, &hub.admin_token);
    match admin.workers().await {
        Ok(workers) => {
            let now = agensh_domain::time::unix_ms(SystemTime::now());
            for w in workers {
                let claims: Vec<&str> = w.claims.iter().map(|r| r.text.as_str()).collect();
                say(
                    progress,
                    format!(
                        "  {} {:?}, step {:?}, last request {} s ago, claims {:?}",
                        w.id,
                        w.status,
                        w.progress.map(|p| p.step),
                        w.last_activity.map_or(-1, |t| (now - t) / 1000),
                        claims
                    ),
                );
            }
        }
        Err(e) => say(
            progress,
            format!("  the hub did not list its workers: {e:#}"),
        ),
    }
    let Ok(entries) = std::fs::read_dir(dir.join(".agensh")) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if name.starts_with("bench-node-") || name == "bench-hub.log" {
            say(
                progress,
                format!("  the end of {name}:\n{}", tail(&e.path(), 15)),
            );
        }
    }
}

/// A free port on 127.0.0.1 (the hub keeps it across restarts).
fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// The node of a run: its command (the same after a restart) and its process.
fn spawn_node(s: &Setup<'_>, dir: &Path, ids: &[String]) -> Result<Proc> {
    let mut cmd = node_command(s.agensh, dir, s.scenario, ids)?;
    cmd.env(SCRIPT_LOG_ENV, script_log(dir));
    Proc::spawn(&mut cmd, "agensh node")
}

/// Where the scripted agents log their tool calls (`agensh_script::LOG_ENV`; this crate
/// does not depend on the scripted agent).
const SCRIPT_LOG_ENV: &str = "AGENSH_SCRIPT_LOG";

fn script_log(dir: &Path) -> PathBuf {
    dir.join(".agensh/script.jsonl")
}

fn bare(dir: &Path) -> PathBuf {
    dir.join(".agensh/workspace.git")
}

/// Starts the hub on `listen`, trying again for a while when the port is not free yet.
async fn restart_hub(s: &Setup<'_>, dir: &Path, listen: &str) -> Result<Hub> {
    let mut tries = 0;
    loop {
        match start_hub(s.agensh, dir, listen) {
            Ok(h) => return Ok(h),
            Err(e) if tries < 10 => {
                tries += 1;
                eprintln!("the hub did not start again ({e:#}); trying again");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Err(e) => return Err(e),
        }
    }
}

/// The parts whose file is on `main`.
async fn parts_on_main(dir: &Path) -> BTreeSet<String> {
    let out = Git::bare(&bare(dir))
        .output(["ls-tree", "--name-only", "main", "parts/"])
        .await;
    out.map(|o| {
        o.stdout
            .lines()
            .filter_map(|l| l.strip_prefix("parts/")?.strip_suffix(".py"))
            .map(str::to_string)
            .collect()
    })
    .unwrap_or_default()
}

/// The scripted agents the node runs now: (pid, process group, worker id from its cwd).
fn agents_of(node: u32) -> Vec<(u32, i32, String)> {
    children_of(node)
        .into_iter()
        .filter(|&pid| {
            let cmd = cmdline(pid);
            cmd.windows(2).any(|w| w[0] == "agent" && w[1] == "script")
        })
        .filter_map(|pid| {
            let (_, _, group) = proc_stat(pid)?;
            let cwd = std::fs::read_link(format!("/proc/{pid}/cwd")).ok()?;
            let id = cwd.file_name()?.to_string_lossy().to_string();
            Some((pid, group, id))
        })
        .collect()
}

fn cmdline(pid: u32) -> Vec<String> {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .unwrap_or_default()
        .split(|b| *b == 0)
        .filter(|a| !a.is_empty())
        .map(|a| String::from_utf8_lossy(a).to_string())
        .collect()
}

/// Reaps exited orphans that became ours (their groups), but never `keep`'s groups: tokio
/// waits for those.
fn reap_orphans(keep: &[u32]) {
    let me = std::process::id();
    for (pid, state, ppid, group) in all_processes() {
        if ppid == me && state == 'Z' && !keep.contains(&pid) && !keep.contains(&(group as u32)) {
            if let Some(g) = ProcessGroup::from_id(group as u32) {
                g.reap_exited();
            }
        }
    }
}

/// Processes that belong to the run in `dir`: a command line or working directory in it,
/// or a child of this benchmark (which reaps the orphans). (pid, state, command line).
fn processes_of(dir: &Path) -> Vec<(u32, char, String)> {
    let me = std::process::id();
    let text = dir.to_string_lossy().to_string();
    all_processes()
        .into_iter()
        .filter(|p| p.0 != me)
        .filter(|&(pid, _, ppid, _)| {
            ppid == me
                || cmdline(pid).iter().any(|a| a.contains(&text))
                || std::fs::read_link(format!("/proc/{pid}/cwd")).is_ok_and(|c| c.starts_with(dir))
        })
        .map(|(pid, state, _, _)| (pid, state, cmdline(pid).join(" ")))
        .collect()
}

/// One run in `dir`: with `faults`, the driver injects them. Its figures and checks.
async fn one_run(
    s: &Setup<'_>,
    dir: &Path,
    faults: Option<(Vec<(Duration, Fault)>, Rng)>,
) -> Result<Value> {
    let what = if faults.is_some() {
        "faulted"
    } else {
        "baseline"
    };
    let n = s.workers;
    init_org(
        s.agensh,
        dir,
        "agensh-bench faults: every part written, shipped and merged",
        s.scenario,
        n,
        |c| {
            // A round that found no event to wait for starts again soon.
            c.run.idle_timeout_secs = 5;
            c.run.restart_backoff_secs = 0.5;
        },
    )?;
    let listen = format!("127.0.0.1:{}", free_port()?);
    let mut hub = start_hub(s.agensh, dir, &listen)?;
    let admin = Client::new(&hub.url, &hub.admin_token);
    let mut ids: Vec<String> = admin
        .add_workers(n)
        .await?
        .into_iter()
        .map(|w| w.id)
        .collect();
    ids.sort();
    // Processes killed (the hub, the node): their groups are cleaned up at the end.
    let mut killed: Vec<Proc> = Vec::new();
    let mut node = spawn_node(s, dir, &ids)?;
    let started = Instant::now();
    let progress = crate::hub::bar(s.parts.len() as u64, what);
    let faulted = faults.is_some();
    let (mut plan, mut rng) = faults.unwrap_or_else(|| (Vec::new(), Rng::new(1)));
    plan.reverse(); // popped from the end, earliest first
    let mut injected: Vec<Value> = Vec::new();
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    let mut hub_down = Duration::ZERO;
    // The hub or the node exiting by itself.
    let mut exits: Vec<Value> = Vec::new();
    let at = |t: Instant| (t.duration_since(started).as_secs_f64() * 100.0).round() / 100.0;
    let finished = loop {
        let merged = parts_on_main(dir).await;
        progress.set_position(merged.len() as u64);
        if merged.len() == s.parts.len() {
            break Some(started.elapsed());
        }
        if started.elapsed() > s.limit {
            say(
                &progress,
                format!(
                    "{what}: not every part merged within {} s",
                    s.limit.as_secs()
                ),
            );
            stall_report(&progress, dir, &hub).await;
            break None;
        }
        while plan.last().is_some_and(|(t, _)| *t <= started.elapsed()) {
            let (_, fault) = plan.pop().expect("a fault is due");
            let t0 = Instant::now();
            let entry = match fault {
                Fault::Hub { pause } => {
                    let pid = hub.proc.pid;
                    hub.proc.kill_9();
                    tokio::time::sleep(pause).await;
                    let new = restart_hub(s, dir, &listen).await?;
                    let down = t0.elapsed();
                    hub_down += down;
                    killed.push(std::mem::replace(&mut hub, new).proc);
                    *counts.entry("hub_kills").or_default() += 1;
                    json!({ "at_s": at(t0), "fault": "hub_kill", "pid": pid, "down_s": (down.as_secs_f64() * 100.0).round() / 100.0 })
                }
                Fault::Agent => {
                    let agents = agents_of(node.pid);
                    if agents.is_empty() {
                        // None running now (the node restarts): try again in a second.
                        plan.push((started.elapsed() + Duration::from_secs(1), fault));
                        continue;
                    }
                    let (pid, group, id) = agents[rng.below(agents.len())].clone();
                    node.groups.insert(group);
                    if let Some(g) = ProcessGroup::from_id(group as u32) {
                        g.kill();
                    }
                    *counts.entry("agent_kills").or_default() += 1;
                    json!({ "at_s": at(t0), "fault": "agent_kill", "pid": pid, "worker": id })
                }
                Fault::Node { pause } => {
                    let pid = node.pid;
                    let agents = agents_of(pid).len();
                    node.kill_9();
                    tokio::time::sleep(pause).await;
                    let new = spawn_node(s, dir, &ids)?;
                    killed.push(std::mem::replace(&mut node, new));
                    *counts.entry("node_kills").or_default() += 1;
                    json!({ "at_s": at(t0), "fault": "node_kill", "pid": pid, "agents": agents, "pause_s": (pause.as_secs_f64() * 100.0).round() / 100.0 })
                }
            };
            say(&progress, format!("{what}: {entry}"));
            injected.push(entry);
        }
        // A hub or node that exits by itself is a finding: noted, started again (as a
        // supervisor would), and a failed check at the end.
        if !hub.proc.running() {
            let log = tail(&dir.join(".agensh/bench-hub.log"), 1);
            let new = restart_hub(s, dir, &listen).await?;
            killed.push(std::mem::replace(&mut hub, new).proc);
            exits
                .push(json!({ "at_s": at(Instant::now()), "exited": "hub", "last_log_line": log }));
            say(
                &progress,
                format!("{what}: {}", exits.last().expect("pushed")),
            );
        }
        if !node.running() {
            let log = tail(&dir.join(format!(".agensh/bench-node-{n}.log")), 1);
            if exits.len() >= 20 {
                bail!("{what}: the node exited by itself again and again; the last time: {log}");
            }
            killed.push(std::mem::replace(&mut node, spawn_node(s, dir, &ids)?));
            exits.push(
                json!({ "at_s": at(Instant::now()), "exited": "node", "last_log_line": log }),
            );
            say(
                &progress,
                format!("{what}: {}", exits.last().expect("pushed")),
            );
        }
        reap_orphans(&[hub.proc.pid, node.pid]);
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    progress.finish();
    let not_injected = plan.len();

    // The node first: what it was doing ends; the hub stays up for the checks.
    let node_exit = node.terminate(Duration::from_secs(60)).await;
    let admin = Client::new(&hub.url, &hub.admin_token);
    let mut checks = Vec::new();
    let merged = parts_on_main(dir).await;
    let missing: Vec<&String> = s.parts.iter().filter(|p| !merged.contains(*p)).collect();
    checks.push(check(
        "every part merged on main",
        missing.is_empty(),
        format!(
            "{} of {} parts on main{}",
            s.parts.len() - missing.len(),
            s.parts.len(),
            if missing.is_empty() {
                String::new()
            } else {
                format!("; missing: {}", list(&missing))
            }
        ),
    ));
    let writes = acknowledged_writes(dir, &admin).await?;
    checks.push(writes.0);
    let turns = turns_shown(dir, &ids)?;
    checks.push(turns.0);
    let hub_exit = hub.proc.terminate(Duration::from_secs(30)).await;
    checks.push(fsck(dir).await);
    // Then nothing of the run may be left: wait up to 10 s for what is exiting.
    let deadline = Instant::now() + Duration::from_secs(10);
    let left = loop {
        reap_orphans(&[]);
        let left = processes_of(dir);
        if left.is_empty() || Instant::now() > deadline {
            break left;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    checks.push(check(
        "no orphan process",
        left.is_empty(),
        if left.is_empty() {
            format!(
                "none left; the node exited {} and the hub {} after SIGTERM",
                exited(node_exit),
                exited(hub_exit)
            )
        } else {
            format!(
                "{} left: {}",
                left.len(),
                list(
                    &left
                        .iter()
                        .take(5)
                        .map(|(p, st, c)| format!("{p} ({st}) {c}"))
                        .collect::<Vec<_>>()
                )
            )
        },
    ));
    // Clean up whatever is left (their groups, and any group of a process found above).
    let mut groups: BTreeSet<i32> = left
        .iter()
        .filter_map(|(p, ..)| Some(proc_stat(*p)?.2))
        .collect();
    for p in killed.iter().chain([&node, &hub.proc]) {
        groups.extend(p.groups.iter().copied());
    }
    drop(killed);
    drop(node);
    drop(hub);
    kill_groups(&groups, Duration::from_secs(10));
    reap_orphans(&[]);

    if faulted {
        checks.push(check(
            "every planned fault injected",
            not_injected == 0,
            format!(
                "{} hub kills, {} agent kills, {} node kills{}",
                counts.get("hub_kills").unwrap_or(&0),
                counts.get("agent_kills").unwrap_or(&0),
                counts.get("node_kills").unwrap_or(&0),
                match not_injected {
                    0 => String::new(),
                    k => format!(
                        "; {k} planned faults not injected (every part merged before their time)"
                    ),
                },
            ),
        ));
    }
    checks.push(check(
        "the hub and the node never exited by themselves",
        exits.is_empty(),
        if exits.is_empty() {
            "neither did".into()
        } else {
            format!("{} exits: {}", exits.len(), list(&exits))
        },
    ));
    let mains = Git::bare(&bare(dir))
        .run(["rev-list", "--count", "--merges", "main"])
        .await
        .map(|s| s.trim().parse::<u64>().unwrap_or(0))
        .unwrap_or(0);
    Ok(json!({
        "run": what,
        "seconds_to_all_merged": finished.map(|d| (d.as_secs_f64() * 10.0).round() / 10.0),
        "parts_merged": merged.len(),
        "merge_commits_on_main": mains,
        "hub_down_s": (hub_down.as_secs_f64() * 10.0).round() / 10.0,
        "injected": counts,
        "faults": injected,
        "exited_by_themselves": exits,
        "writes": writes.1,
        "turns": turns.1,
        "checks": checks,
        "merged_parts": merged,
    }))
}

/// A line on the terminal above the progress bar, or on stderr when there is no terminal.
fn say(progress: &indicatif::ProgressBar, line: String) {
    if progress.is_hidden() {
        eprintln!("{line}");
    } else {
        progress.println(line);
    }
}

fn exited(d: Option<Duration>) -> String {
    d.map_or("only when killed".into(), |d| {
        format!("in {:.2} s", d.as_secs_f64())
    })
}

fn check(name: &str, pass: bool, detail: String) -> Value {
    json!({ "name": name, "pass": pass, "detail": detail })
}

fn list<T: std::fmt::Display>(items: &[T]) -> String {
    let shown: Vec<String> = items.iter().take(10).map(|i| i.to_string()).collect();
    let more = items.len().saturating_sub(shown.len());
    if more > 0 {
        format!("{} and {more} more", shown.join(", "))
    } else {
        shown.join(", ")
    }
}

/// Check 2: every write the agents were answered for is there. The check and its counts.
async fn acknowledged_writes(dir: &Path, admin: &Client) -> Result<(Value, Value)> {
    let text = std::fs::read_to_string(script_log(dir)).unwrap_or_default();
    let mut unreadable = 0usize;
    let mut calls: BTreeMap<String, (usize, usize)> = BTreeMap::new(); // tool: (ok, error)
    let mut records: Vec<(String, &'static str)> = Vec::new(); // (id, what), released claims: "released"
    let mut commits: Vec<String> = Vec::new();
    let mut messages: Vec<(i64, String)> = Vec::new();
    for line in text.lines() {
        let Ok(v) = serde_json::from_str::<Value>(line) else {
            // A line cut short by a killed agent.
            unreadable += 1;
            continue;
        };
        if v["event"] != "tool" {
            continue;
        }
        let tool = v["tool"].as_str().unwrap_or("?").to_string();
        let is_error = v["is_error"] != json!(false);
        let c = calls.entry(tool.clone()).or_default();
        if is_error {
            c.1 += 1;
            continue;
        }
        c.0 += 1;
        let st = &v["structured"];
        let id = |x: &Value| x["id"].as_str().map(str::to_string);
        match tool.as_str() {
            "claim" => records.extend(id(&st["record"]).map(|i| (i, "claim"))),
            "release" => records.extend(id(&st["record"]).map(|i| (i, "released"))),
            "ship" => {
                records.extend(id(&st["summary"]).map(|i| (i, "summary")));
                for r in st["released"].as_array().into_iter().flatten() {
                    records.extend(id(r).map(|i| (i, "released")));
                }
                commits.extend(st["merge_commit"].as_str().map(str::to_string));
            }
            "msg_post" => {
                if let Some(seq) = st["seq"].as_i64() {
                    messages.push((seq, st["text"].as_str().unwrap_or("").to_string()));
                }
            }
            _ => {}
        }
    }
    let mut lost: Vec<String> = Vec::new();
    for (rid, what) in &records {
        match admin.unfold(rid).await {
            Ok(u)
                if *what == "released"
                    && u.record
                        .lease
                        .as_ref()
                        .is_none_or(|l| l.released_at.is_none()) =>
            {
                lost.push(format!("{rid} (released, but live again)"));
            }
            Ok(_) => {}
            Err(e) => lost.push(format!("{rid} ({what}: {e})")),
        }
    }
    let on_main: BTreeSet<String> = Git::bare(&bare(dir))
        .run(["rev-list", "main"])
        .await
        .map_err(|e| anyhow!("git rev-list main: {e}"))?
        .lines()
        .map(str::to_string)
        .collect();
    for c in &commits {
        if !on_main.contains(c) {
            lost.push(format!("merge {c} not on main"));
        }
    }
    let stored = general_history(admin).await?;
    for (seq, text) in &messages {
        if stored.get(seq) != Some(text) {
            lost.push(format!("message M{seq}"));
        }
    }
    let answered: usize = calls.values().map(|c| c.0).sum();
    let detail = format!(
        "{answered} tool calls answered without error: {} records, {} merges, {} #general posts checked, {} lost{}{}",
        records.len(),
        commits.len(),
        messages.len(),
        lost.len(),
        if lost.is_empty() { String::new() } else { format!(": {}", list(&lost)) },
        if unreadable > 0 { format!(" ({unreadable} log lines cut short by a kill)") } else { String::new() },
    );
    let counts = json!({
        "calls": calls.iter().map(|(t, (ok, err))| (t.clone(), json!({ "ok": ok, "error": err }))).collect::<serde_json::Map<_, _>>(),
        "records_checked": records.len(),
        "merges_checked": commits.len(),
        "messages_checked": messages.len(),
        "lost": lost,
        "unreadable_log_lines": unreadable,
    });
    Ok((
        check("no acknowledged write lost", lost.is_empty(), detail),
        counts,
    ))
}

/// Every `#general` message, by seq.
async fn general_history(admin: &Client) -> Result<HashMap<i64, String>> {
    let mut all = HashMap::new();
    let mut before = None;
    loop {
        let page = admin
            .message_history(&MessageFilter {
                with: Some("#general".into()),
                limit: Some(1_000),
                before,
            })
            .await?;
        let Some(oldest) = page.iter().map(|m| m.seq).min() else {
            return Ok(all);
        };
        all.extend(page.into_iter().map(|m| (m.seq, m.text)));
        before = Some(oldest);
    }
}

/// Check 3: no event seq shown by two prompts of one worker. A prompt's events are in its
/// `carrying` entry (written before the agent sees them) and in the `carried` list of the
/// turn when it completes; the two are one showing. A turn whose agent died is recapped in
/// the next prompt with news that came meanwhile (its own `carrying` entry): the completed
/// turn's `carried` lists both, still one showing of each. The check and its counts.
fn turns_shown(dir: &Path, ids: &[String]) -> Result<(Value, Value)> {
    let (mut turns, mut failed, mut carried, mut handed) = (0usize, 0usize, 0usize, 0usize);
    let mut twice: Vec<String> = Vec::new();
    for id in ids {
        let path = dir.join(".agensh/logs").join(id).join("turns.jsonl");
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        // seq → the showing (its first log line) that showed it first
        let mut shown: HashMap<i64, usize> = HashMap::new();
        let mut show = |seq: i64, showing: usize| {
            if let Some(first) = shown.insert(seq, showing) {
                if first != showing {
                    twice.push(format!(
                        "{id} event {seq} (log lines {} and {})",
                        first + 1,
                        showing + 1
                    ));
                }
            }
        };
        // The `carrying` entries since the last completed turn.
        let mut pending: BTreeSet<i64> = BTreeSet::new();
        for (line_no, line) in text.lines().enumerate() {
            let Ok(v) = serde_json::from_str::<Value>(line) else {
                continue;
            };
            let seqs = |list: &Value| -> BTreeSet<i64> {
                list.as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|c| c.as_i64().or_else(|| c["seq"].as_i64()))
                    .collect()
            };
            if v.get("carrying").is_some() {
                let set = seqs(&v["carrying"]);
                handed += 1;
                for &seq in &set {
                    show(seq, line_no);
                }
                pending.extend(set);
                continue;
            }
            if v.get("error").is_some() {
                failed += 1;
                continue;
            }
            if v.get("carried").is_none() {
                continue;
            }
            let set = seqs(&v["carried"]);
            turns += 1;
            carried += set.len();
            let handed = std::mem::take(&mut pending);
            if !set.is_subset(&handed) {
                for &seq in &set {
                    show(seq, line_no);
                }
            }
        }
    }
    let detail = format!(
        "{turns} turns ({failed} failed turns logged) carried {carried} events ({handed} prompts with events logged as handed over); {} shown twice{}",
        twice.len(),
        if twice.is_empty() { String::new() } else { format!(": {}", list(&twice)) }
    );
    let counts = json!({ "turns": turns, "failed_turns": failed, "events_carried": carried, "prompts_handed_over": handed, "shown_twice": twice.len() });
    Ok((
        check("no event shown twice", twice.is_empty(), detail),
        counts,
    ))
}

/// Check 4: `git fsck --full --strict` of the bare repository.
async fn fsck(dir: &Path) -> Value {
    let out = Git::bare(&bare(dir))
        .output([
            "fsck",
            "--full",
            "--strict",
            "--no-dangling",
            "--no-progress",
        ])
        .await;
    match out {
        Ok(o) => {
            let said: Vec<&str> = o.stdout.lines().chain(o.stderr.lines()).collect();
            let clean = o.success() && said.is_empty();
            check(
                "git fsck clean",
                clean,
                if clean {
                    "git fsck --full --strict: no error, nothing reported".into()
                } else {
                    format!("git fsck exit {:?}: {}", o.status, list(&said))
                },
            )
        }
        Err(e) => check(
            "git fsck clean",
            false,
            format!("git fsck could not run: {e}"),
        ),
    }
}

/// The one document of both runs: the runs and every check, named with its run.
fn report(a: &Args, seed: u64, parts: &[String], mut baseline: Value, mut faulted: Value) -> Value {
    let same = baseline["merged_parts"] == faulted["merged_parts"];
    let mut checks = Vec::new();
    for run in [&baseline, &faulted] {
        for c in run["checks"].as_array().into_iter().flatten() {
            let mut c = c.clone();
            c["name"] = json!(format!(
                "{}: {}",
                run["run"].as_str().unwrap_or("?"),
                c["name"].as_str().unwrap_or("?")
            ));
            checks.push(c);
        }
    }
    checks.push(check(
        "faulted: the same parts merged as in the baseline",
        same,
        format!(
            "{} parts in the baseline, {} with faults",
            baseline["parts_merged"], faulted["parts_merged"]
        ),
    ));
    let (ask_hub, ask_node) = (a.hub_kills, a.node_kills);
    let got = |k: &str| faulted["injected"][k].as_u64().unwrap_or(0) as usize;
    checks.push(check(
        "faulted: hub and node killed as often as asked",
        got("hub_kills") >= ask_hub && got("node_kills") >= ask_node,
        format!(
            "hub killed {} times (asked {ask_hub}), node {} (asked {ask_node}), agents {}",
            got("hub_kills"),
            got("node_kills"),
            got("agent_kills")
        ),
    ));
    for run in [&mut baseline, &mut faulted] {
        if let Some(o) = run.as_object_mut() {
            o.remove("checks");
            o.remove("merged_parts");
        }
    }
    json!({
        "seed": seed,
        "workers": a.workers,
        "parts": parts.len(),
        "parts_per_worker": a.parts_per_worker,
        "asked": { "hub_kills": a.hub_kills, "agent_kills": a.agent_kills.unwrap_or(a.workers / 2), "node_kills": a.node_kills },
        "baseline": baseline,
        "faulted": faulted,
        "checks": checks,
        "passed": checks.iter().all(|c| c["pass"] == json!(true)),
    })
}

fn print_table(r: &Value) {
    let (b, f) = (&r["baseline"], &r["faulted"]);
    println!(
        "faults: {} scripted workers, {} parts, seed {}",
        r["workers"], r["parts"], r["seed"]
    );
    let secs = |v: &Value| v.as_f64().map_or("never".to_string(), |s| format!("{s} s"));
    println!(
        "baseline       every part merged after {} ({} merge commits on main, {} turns)",
        secs(&b["seconds_to_all_merged"]),
        b["merge_commits_on_main"],
        b["turns"]["turns"]
    );
    println!(
        "with faults    every part merged after {} ({} merge commits, {} turns; hub killed {} times, down {} s in all; {} agents killed; node killed {} times)",
        secs(&f["seconds_to_all_merged"]),
        f["merge_commits_on_main"],
        f["turns"]["turns"],
        f["injected"]["hub_kills"].as_u64().unwrap_or(0),
        f["hub_down_s"],
        f["injected"]["agent_kills"].as_u64().unwrap_or(0),
        f["injected"]["node_kills"].as_u64().unwrap_or(0),
    );
    for c in r["checks"].as_array().into_iter().flatten() {
        println!(
            "{}  {}: {}",
            if c["pass"] == json!(true) {
                "PASS"
            } else {
                "FAIL"
            },
            c["name"].as_str().unwrap_or("?"),
            c["detail"].as_str().unwrap_or("")
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_prompt_logged_as_handed_over_and_as_carried_is_shown_once_and_a_second_prompt_is_twice() {
        let tmp = tempfile::tempdir().unwrap();
        let log = tmp.path().join(".agensh/logs/w01");
        std::fs::create_dir_all(&log).unwrap();
        let lines = [
            r#"{"carrying":[5,6],"at":1}"#,
            r#"{"turn":1,"carried":[{"seq":5,"created_at":0},{"seq":6,"created_at":0}]}"#,
            r#"{"carrying":[7],"at":2}"#,
            r#"{"error":"the agent was killed","started":3}"#,
            r#"{"turn":2,"carried":[{"seq":7,"created_at":0}]}"#,
            r#"{"turn":3,"carried":[]}"#,
            // A failed turn recapped with news folded in: one showing of each.
            r#"{"carrying":[9],"at":3}"#,
            r#"{"error":"the agent was killed","started":4}"#,
            r#"{"carrying":[10,11],"at":4}"#,
            r#"{"turn":4,"carried":[{"seq":9,"created_at":0},{"seq":10,"created_at":0},{"seq":11,"created_at":0}]}"#,
        ];
        std::fs::write(log.join("turns.jsonl"), lines.join("\n") + "\n").unwrap();
        let ids = ["w01".to_string()];
        let (ok, counts) = turns_shown(tmp.path(), &ids).unwrap();
        assert_eq!(ok["pass"], json!(true), "{ok}");
        assert_eq!(counts["turns"], 4);
        assert_eq!(counts["failed_turns"], 2);

        // Event 6 in a later prompt again (a node started again that did not know).
        let again = r#"{"carrying":[6,8],"at":4}"#;
        std::fs::write(
            log.join("turns.jsonl"),
            lines.join("\n") + "\n" + again + "\n",
        )
        .unwrap();
        let (twice, counts) = turns_shown(tmp.path(), &ids).unwrap();
        assert_eq!(twice["pass"], json!(false));
        assert_eq!(counts["shown_twice"], 1);
        assert!(
            twice["detail"].as_str().unwrap().contains("w01 event 6"),
            "{twice}"
        );
    }

    #[test]
    fn the_scenario_repeats_its_round_and_names_every_part() {
        let parts = part_names(12);
        assert_eq!(parts[0], "p001");
        let s = scenario(&parts, 3);
        assert_eq!(s.matches("action = \"claim_free_part\"").count(), 3);
        assert_eq!(s.matches("tool = \"ship\"").count(), 3);
        assert!(s.contains("\"p012\"]"));
        let parsed: toml::Value = toml::from_str(&s).unwrap();
        assert_eq!(parsed["step"].as_array().unwrap().len(), 18);
    }
}
