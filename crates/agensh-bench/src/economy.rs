//! The organization's economy (issue 33): does a run stop when its goal is met, and do
//! idle workers stop spending? Real `agensh run` processes of scripted workers (one
//! scripted ACP agent process each, real git, HTTP and MCP), measured from what they leave:
//! the store (the goal's state) and every worker's turn log.
//!
//! 1. **Done**: `--workers` workers on a goal of `--parts` parts, `organization.done_when` a
//!    command that passes once every part is on `main`. Reported: when the goal was met,
//!    how long the run went on after it (target ≤ 10 s), and the turns started after it
//!    (target 0: no worker gets a continue prompt after the goal).
//! 2. **Parking**: `--parking-workers` workers and half as many parts, each part taking
//!    `--part-secs` (a sleep in its turn), so half the workers find nothing to claim and
//!    look again at every continue prompt (`run.idle_timeout_secs` = `--idle-secs`). Run
//!    twice, parking off (`run.park_idle = false`, as before parking) and on: the idle
//!    half's turns (target: ≥ 90 % fewer) and the busy half's merges per minute (target:
//!    within noise), measured over the same window.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use agensh_domain::config::Config;
use anyhow::{bail, Context, Result};
use serde::Serialize;
use serde_json::Value;

use crate::node::{agensh_cmd, init_org};

#[derive(clap::Args)]
pub struct Args {
    /// Workers of the done run.
    #[arg(long, default_value_t = 64)]
    workers: usize,
    /// Parts of the done run's goal.
    #[arg(long, default_value_t = 128)]
    parts: usize,
    /// Workers of each parking run (half of them find nothing to claim).
    #[arg(long, default_value_t = 16)]
    parking_workers: usize,
    /// How long one part takes in the parking runs, in seconds: the window measured.
    #[arg(long, default_value_t = 120)]
    part_secs: u64,
    /// `run.idle_timeout_secs` of the parking runs.
    #[arg(long, default_value_t = 5)]
    idle_secs: u64,
    /// Skip the done run.
    #[arg(long)]
    no_done: bool,
    /// Skip the parking runs.
    #[arg(long)]
    no_parking: bool,
    /// Keep the organizations and print where.
    #[arg(long)]
    keep: bool,
    #[command(flatten)]
    common: crate::stats::Common,
}

/// What the done run showed.
#[derive(Debug, Serialize)]
struct Done {
    workers: usize,
    parts: usize,
    parts_merged: u64,
    /// Seconds from the start to the goal met (none: never met).
    goal_met_after_secs: Option<f64>,
    /// Seconds from the goal met to the end of `agensh run`.
    ended_after_goal_secs: Option<f64>,
    /// Turns that started after the goal was met (a second's slack for the clocks).
    turns_after_goal: usize,
    exit_code: Option<i32>,
}

/// What one parking run showed.
#[derive(Debug, Serialize)]
struct Parking {
    park_idle: bool,
    workers: usize,
    parts: usize,
    window_secs: f64,
    /// Turns of the workers that held no part, within the window.
    idle_half_turns: usize,
    /// Turns of the workers that held one.
    busy_half_turns: usize,
    /// Merges into `main` over the whole run (the window and the ships after it), per
    /// minute.
    merges_per_min: f64,
}

pub async fn run(a: Args) -> Result<()> {
    let agensh = crate::stats::agensh_binary(a.common.agensh.as_deref())?;
    let mut out = serde_json::Map::new();
    if !a.no_done {
        let d = done_run(&a, &agensh).await?;
        eprintln!(
            "done: {} of {} parts merged; goal met after {}; the run ended {} later; {} turn(s) after the goal",
            d.parts_merged,
            d.parts,
            secs(d.goal_met_after_secs),
            secs(d.ended_after_goal_secs),
            d.turns_after_goal
        );
        out.insert("done".into(), serde_json::to_value(&d)?);
    }
    if !a.no_parking {
        let mut runs = Vec::new();
        for park in [false, true] {
            let p = parking_run(&a, &agensh, park).await?;
            eprintln!(
                "parking {}: idle half {} turn(s), busy half {} turn(s), {:.2} merges/min over {:.0} s",
                if park { "on " } else { "off" },
                p.idle_half_turns,
                p.busy_half_turns,
                p.merges_per_min,
                p.window_secs
            );
            runs.push(p);
        }
        let (off, on) = (&runs[0], &runs[1]);
        let fewer = if off.idle_half_turns == 0 {
            0.0
        } else {
            1.0 - on.idle_half_turns as f64 / off.idle_half_turns as f64
        };
        eprintln!(
            "parking: the idle half's turns {:.0} % fewer (target ≥ 90 %); merges/min {:.2} against {:.2}",
            fewer * 100.0,
            on.merges_per_min,
            off.merges_per_min
        );
        out.insert("parking".into(), serde_json::to_value(&runs)?);
        out.insert("idle_turns_fewer".into(), fewer.into());
    }
    if a.common.json {
        println!("{}", serde_json::to_string_pretty(&Value::Object(out))?);
    }
    Ok(())
}

fn secs(s: Option<f64>) -> String {
    s.map_or("—".into(), |s| format!("{s:.1} s"))
}

fn unix_secs(t: SystemTime) -> f64 {
    t.duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs_f64()
}

/// `n` part names, `p001`…
fn part_names(n: usize) -> Vec<String> {
    let width = n.to_string().len().max(3);
    (1..=n).map(|i| format!("p{i:0width$}")).collect()
}

/// A scenario of `rounds` rounds: claim a free part (looking again at the next prompt
/// when none is free but some are undone), optionally sleep, write it, ship it, release
/// the claim (a no-op when `ship` did) — `faults`' round without its post.
fn scenario(parts: &[String], rounds: usize, sleep_ms: u64) -> String {
    let list: Vec<String> = parts.iter().map(|p| format!("\"{p}\"")).collect();
    let mut s = format!(
        "# agensh-bench economy\nparts = [{}]\n[templates]\npart = \"def {{part}}():\\n    return '{{part}}'\\n\"\n",
        list.join(", ")
    );
    // The claim outlives the part's work: an expired claim's part is free to take.
    let lease = 60 + sleep_ms / 1000;
    let sleep = if sleep_ms > 0 {
        format!("[[step]]\naction = \"sleep\"\nms = {sleep_ms}\n")
    } else {
        String::new()
    };
    let round = format!(
        r#"
[[step]]
action = "claim_free_part"
lease_secs = {lease}
wait = true
{sleep}[[step]]
action = "write_part"
[[step]]
action = "call"
tool = "ship"
args = {{ title = "Part {{part}}", summary = "part {{part}} by {{worker}}", claim = "{{claim}}", label = "part-{{part}}" }}
[[step]]
action = "release"
[[step]]
action = "end_turn"
"#
    );
    for _ in 0..rounds {
        s.push_str(&round);
    }
    s
}

/// A fresh organization under a temporary directory: its dir and the directory holder.
fn org(
    agensh: &Path,
    name: &str,
    scenario_text: &str,
    workers: usize,
    adjust: impl FnOnce(&mut Config),
) -> Result<(tempfile::TempDir, PathBuf)> {
    let tmp = tempfile::Builder::new()
        .prefix(&format!("agensh-economy-{name}-"))
        .tempdir()?;
    let scenario = tmp.path().join("scenario.toml");
    std::fs::write(&scenario, scenario_text)?;
    let dir = tmp.path().join("org");
    init_org(agensh, &dir, "write every part", &scenario, workers, adjust)?;
    Ok((tmp, dir))
}

/// Runs `agensh run DIR` to its end, with its output in `DIR/../run.log`; its exit code
/// and when it ended (Unix seconds).
fn run_to_end(agensh: &Path, dir: &Path, limit: Duration) -> Result<(Option<i32>, f64)> {
    let log = std::fs::File::create(dir.with_file_name("run.log"))?;
    let mut child = agensh_cmd(agensh)
        .arg("run")
        .arg(dir)
        .args(["--listen", "127.0.0.1:0", "--json"])
        .stdin(std::process::Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()
        .context("cannot start agensh run")?;
    let started = Instant::now();
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok((status.code(), unix_secs(SystemTime::now())));
        }
        if started.elapsed() > limit {
            let _ = child.kill();
            bail!(
                "agensh run did not end within {limit:?}; its log: {}",
                dir.with_file_name("run.log").display()
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Every worker's completed turns: (worker, started at Unix seconds).
fn turns(dir: &Path) -> Result<Vec<(String, f64)>> {
    let mut out = Vec::new();
    let logs = dir.join(".agensh/logs");
    for entry in std::fs::read_dir(&logs).with_context(|| format!("no {}", logs.display()))? {
        let entry = entry?;
        let worker = entry.file_name().to_string_lossy().to_string();
        let text = std::fs::read_to_string(entry.path().join("turns.jsonl")).unwrap_or_default();
        for line in text.lines() {
            let Ok(v) = serde_json::from_str::<Value>(line) else {
                continue;
            };
            if v.get("turn").is_none() {
                continue;
            }
            let started = v["started"].as_i64().unwrap_or(0) as f64 / 1000.0;
            out.push((worker.clone(), started));
        }
    }
    Ok(out)
}

async fn done_run(a: &Args, agensh: &Path) -> Result<Done> {
    let parts = part_names(a.parts);
    // As many rounds as parts (as `faults` does): a round whose ship lost a race is done
    // again, and no worker runs out of rounds while parts are left.
    let rounds = a.parts;
    let check = format!(
        "command: test \"$(ls parts/*.py 2>/dev/null | wc -l)\" -ge {}",
        a.parts
    );
    let (tmp, dir) = org(
        agensh,
        "done",
        &scenario(&parts, rounds, 0),
        a.workers,
        |c| {
            c.organization.done_when = vec![check.clone()];
            c.run.idle_timeout_secs = 5;
            c.run.hours = 0.25;
            c.run.notices_minutes = Vec::new();
        },
    )?;
    let started = unix_secs(SystemTime::now());
    let (exit_code, ended) = run_to_end(agensh, &dir, Duration::from_secs(20 * 60))?;
    let config = Config::parse(&std::fs::read_to_string(dir.join("agensh.toml"))?)?;
    let store =
        agensh_store::open_store(&dir.join(".agensh/store.sqlite").display().to_string()).await?;
    let goal = agensh_hub::goal::stored(&*store, &config)
        .await?
        .unwrap_or_default();
    let met = goal.met_at.map(|ms| ms as f64 / 1000.0);
    let turns_after_goal = match met {
        Some(m) => turns(&dir)?.iter().filter(|t| t.1 > m + 1.0).count(),
        None => 0,
    };
    let d = Done {
        workers: a.workers,
        parts: a.parts,
        parts_merged: store.stats().await?.prs_merged,
        goal_met_after_secs: met.map(|m| m - started),
        ended_after_goal_secs: met.map(|m| ended - m),
        turns_after_goal,
        exit_code,
    };
    keep(a, tmp);
    Ok(d)
}

/// What a parking run lasts beyond its window: time for the busy half's ships.
const SHIP_SECS: u64 = 120;

async fn parking_run(a: &Args, agensh: &Path, park: bool) -> Result<Parking> {
    let busy = a.parking_workers / 2;
    let parts = part_names(busy);
    let (tmp, dir) = org(
        agensh,
        if park { "parked" } else { "unparked" },
        &scenario(&parts, 1, a.part_secs * 1000),
        a.parking_workers,
        |c| {
            c.run.idle_timeout_secs = a.idle_secs;
            c.run.park_idle = park;
            // The window (every part's sleep) and two minutes for the ships, however
            // loaded the machine.
            c.run.hours = (a.part_secs + SHIP_SECS) as f64 / 3600.0;
            c.run.notices_minutes = Vec::new();
        },
    )?;
    let started = unix_secs(SystemTime::now());
    run_to_end(agensh, &dir, Duration::from_secs(a.part_secs + 600))?;
    let window_end = started + a.part_secs as f64;
    // The busy half: the workers that merged a part; the others found nothing to claim.
    let busy_ones = busy_workers(&dir)?;
    let (mut idle_turns, mut busy_turns) = (0, 0);
    for t in turns(&dir)?.iter().filter(|t| t.1 <= window_end) {
        if busy_ones.contains(&t.0) {
            busy_turns += 1;
        } else {
            idle_turns += 1;
        }
    }
    // One merge commit on main per merged part, each naming its author.
    let merges = busy_ones.len();
    let p = Parking {
        park_idle: park,
        workers: a.parking_workers,
        parts: busy,
        window_secs: a.part_secs as f64,
        idle_half_turns: idle_turns,
        busy_half_turns: busy_turns,
        merges_per_min: merges as f64 / ((a.part_secs + SHIP_SECS) as f64 / 60.0),
    };
    keep(a, tmp);
    Ok(p)
}

/// The author of each merge commit on `main` (one per part merged, in that order).
fn busy_workers(dir: &Path) -> Result<Vec<String>> {
    let out = std::process::Command::new("git")
        .args(["--git-dir"])
        .arg(dir.join(".agensh/workspace.git"))
        .args([
            "log",
            "--first-parent",
            "--min-parents=2",
            "--format=%b",
            "main",
        ])
        .output()?;
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.strip_prefix("Author: "))
        .map(|s| s.trim().to_string())
        .collect())
}

fn keep(a: &Args, tmp: tempfile::TempDir) {
    if a.keep {
        eprintln!("kept in {}", tmp.keep().display());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_scenario_has_one_block_per_round_and_the_sleep_when_asked() {
        let s = scenario(&part_names(3), 2, 5000);
        assert_eq!(s.matches("action = \"claim_free_part\"").count(), 2);
        assert_eq!(s.matches("ms = 5000").count(), 2);
        assert!(s.contains("parts = [\"p001\", \"p002\", \"p003\"]"));
        assert!(!scenario(&part_names(1), 1, 0).contains("sleep"));
    }
}
