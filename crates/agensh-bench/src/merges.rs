//! The merge-throughput benchmark (issue 17): N workers, each with a disjoint branch (one
//! new file) and an open PR, all ask a real `agensh hub` process to merge at once, over
//! HTTP, every request in flight together — as N real workers finishing at the same moment
//! would. Measured from this process:
//!
//! - merges per second: N / the wall time from the first request to the last answer;
//! - p50/p99 time to merge (each request's own time to its answer);
//! - PRs lost: every PR must end merged and its file be in `main`'s tree; refusals are
//!   counted by error code;
//! - the hub's CPU (its own and its git children's) over the merges.
//!
//! With `--gate-secs S` every merge goes through a gate that sleeps S seconds and fails the
//! PRs marked to fail (`--fail-rate F`: they add a file under `fails/`). The benchmark then
//! runs twice, each on a fresh organization: with `merge.gate_batch` (batches gated once,
//! bisected on failure) and with `gate_batch = 1` (each PR gated alone, the serial queue),
//! and reports the time until every PR was decided, gate runs per PR, whether any failing PR
//! merged or passing PR did not, and every position `main` took replayed through the gate.
//!
//! Setup is not measured: the organization comes from `agensh init`, the N workers are
//! added to its store before the hub starts, and their branches are written into the
//! bare repository in one `git fast-import` (the same objects a push would bring, without
//! 1,024 pushes of setup); each worker opens its PR over HTTP with its own token.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Instant;

use agensh_client::Client;
use agensh_domain::pr::NewPr;
use agensh_store::{SqliteStore, Store};
use anyhow::{bail, Context, Result};
use serde_json::{json, Value};

use crate::hub::{bar, start_hub};
use crate::node::{agensh_cmd, print_result, until_signal, BenchDir};
use crate::stats::{cpu_secs, ms, percentile};

#[derive(clap::Args)]
pub struct Args {
    /// Workers, each merging one disjoint PR; all merges are asked for at once.
    #[arg(long, default_value_t = 1024)]
    workers: usize,
    /// Organization directory (must not exist yet; default: a temporary one).
    #[arg(long)]
    dir: Option<std::path::PathBuf>,
    /// Keep the organization afterwards.
    #[arg(long)]
    keep: bool,
    #[command(flatten)]
    common: crate::stats::Common,
    /// Seconds the merge gate sleeps on each run; 0: no gate.
    #[arg(long, default_value_t = 0.0)]
    gate_secs: f64,
    /// Share of the PRs marked to fail the gate (0 to 1), spread evenly.
    #[arg(long, default_value_t = 0.0)]
    fail_rate: f64,
    /// `merge.gate_batch` of the batched run.
    #[arg(long, default_value_t = 32)]
    gate_batch: usize,
    /// `merge.gate_jobs` of the batched run (0: one per core); the serial run has 1.
    #[arg(long, default_value_t = 0)]
    gate_jobs: usize,
    /// With a gate, skip the serial run (`gate_batch = 1`; it takes PRs × the gate's time).
    #[arg(long)]
    no_serial: bool,
}

/// The gate of a gated run: it sleeps, then fails when the tree has anything under `fails/`.
#[derive(Debug, Clone, Copy)]
struct GateSpec {
    secs: f64,
    batch: usize,
    jobs: usize,
}

impl GateSpec {
    fn command(&self) -> String {
        format!(
            "sleep {}; if [ -d fails ]; then echo \"refused: $(ls fails)\"; exit 1; fi",
            self.secs
        )
    }
}

/// Whether PR `i` of `n` is marked to fail at `rate`: evenly spread, exactly round(n·rate).
fn marked(i: usize, rate: f64) -> bool {
    let at = |k: usize| (k as f64 * rate).floor() as u64;
    at(i + 1) > at(i)
}

/// The target of issue 17.
const TARGET_MERGES_PER_SEC: f64 = 50.0;

pub async fn run(a: Args) -> Result<()> {
    if a.workers == 0 {
        bail!("--workers must be at least 1");
    }
    let agensh = crate::stats::agensh_binary(a.common.agensh.as_deref())?;
    let files = agensh_process::raise_open_file_limit()
        .or_else(|_| agensh_process::resources::open_file_limit())
        .map(|l| l.soft)
        .unwrap_or(0);
    let needed = a.workers as u64 * 2 + 256;
    if files < needed {
        bail!(
            "this machine allows {files} open files per process; {} connections need about {needed} — raise the limit or pass fewer --workers",
            a.workers
        );
    }
    if a.gate_secs <= 0.0 {
        let dir = BenchDir::new("agensh-bench-merges-", a.dir.as_deref(), a.keep)?;
        let outcome = until_signal(measure(&a, &agensh, &dir.path, None)).await;
        dir.finish();
        return print_result(a.common.json, &outcome?, print_table);
    }
    if !(0.0..=1.0).contains(&a.fail_rate) || a.gate_batch == 0 {
        bail!("--fail-rate is a share from 0 to 1 and --gate-batch at least 1");
    }
    let mut runs = vec![("batched", a.gate_batch, a.gate_jobs)];
    if !a.no_serial {
        runs.push(("serial", 1, 1));
    }
    let mut out = serde_json::Map::new();
    for (name, batch, jobs) in runs {
        let dir = BenchDir::new(&format!("agensh-bench-merges-{name}-"), None, a.keep)?;
        let gate = GateSpec {
            secs: a.gate_secs,
            batch,
            jobs,
        };
        eprintln!(
            "{name}: {} PRs, gate of {} s, gate_batch {batch}, gate_jobs {jobs}",
            a.workers, a.gate_secs
        );
        let outcome = until_signal(measure(&a, &agensh, &dir.path, Some(gate))).await;
        dir.finish();
        out.insert(name.to_string(), outcome?);
    }
    let wall = |k: &str| out.get(k).and_then(|r| r["wall_secs"].as_f64());
    if let (Some(b), Some(s)) = (wall("batched"), wall("serial")) {
        out.insert(
            "speedup".into(),
            json!((s / b.max(1e-9) * 10.0).round() / 10.0),
        );
    }
    print_result(a.common.json, &Value::Object(out), print_gated)
}

/// `agensh init DIR` and the workers in its store; the workers' ids.
async fn init(agensh: &Path, dir: &Path, workers: usize) -> Result<Vec<String>> {
    let out = agensh_cmd(agensh)
        .arg("init")
        .arg(dir)
        .args(["--goal", "agensh-bench merges: every worker merges at once"])
        .output()
        .context("cannot run agensh init")?;
    if !out.status.success() {
        bail!(
            "agensh init failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let store = SqliteStore::open(&agensh_hub::state_dir(dir).join(agensh_hub::STORE_FILE))?;
    let now = agensh_domain::time::unix_ms(std::time::SystemTime::now());
    Ok(store
        .add_workers(workers, now)
        .await?
        .into_iter()
        .map(|w| w.id)
        .collect())
}

/// The file worker `id`'s branch adds.
fn file_of(id: &str) -> String {
    format!("merges/{id}.txt")
}

/// Writes branch `<id>/merge` for every worker, each one commit on `main` adding
/// [`file_of`] (and `fails/<id>` for the ids in `failing`) — one `git fast-import` into the
/// bare repository.
fn write_branches(
    git_dir: &Path,
    ids: &[String],
    failing: &std::collections::HashSet<String>,
) -> Result<()> {
    let main = git(git_dir, &["rev-parse", "refs/heads/main"])?;
    let mut stream = String::new();
    for id in ids {
        let msg = format!("{id}: add {}\n", file_of(id));
        let text = format!("written by {id}\n");
        stream.push_str(&format!(
            "commit refs/heads/{id}/merge\ncommitter {id} <{id}@agensh.invalid> 1700000000 +0000\ndata {}\n{msg}from {main}\nM 100644 inline {}\ndata {}\n{text}\n",
            msg.len(),
            file_of(id),
            text.len()
        ));
        if failing.contains(id) {
            stream.push_str(&format!("M 100644 inline fails/{id}\ndata 5\nfail\n\n"));
        }
    }
    let mut child = Command::new("git")
        .arg("--git-dir")
        .arg(git_dir)
        .args(["fast-import", "--quiet"])
        .stdin(Stdio::piped())
        .spawn()
        .context("cannot run git fast-import")?;
    child
        .stdin
        .take()
        .expect("piped")
        .write_all(stream.as_bytes())?;
    if !child.wait()?.success() {
        bail!("git fast-import failed");
    }
    Ok(())
}

fn git(git_dir: &Path, args: &[&str]) -> Result<String> {
    let out = Command::new("git")
        .arg("--git-dir")
        .arg(git_dir)
        .args(args)
        .output()
        .context("cannot run git")?;
    if !out.status.success() {
        bail!(
            "git {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// Runs `jobs` of `f` at a time over `items`, in order of completion.
async fn each<T: Send + 'static, R: Send + 'static, F>(
    items: Vec<T>,
    jobs: usize,
    what: &str,
    f: F,
) -> Result<Vec<R>>
where
    F: Fn(T) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<R>> + Send>>
        + Send
        + Sync
        + 'static,
{
    let progress = bar(items.len() as u64, what);
    let limit = Arc::new(tokio::sync::Semaphore::new(jobs));
    let f = Arc::new(f);
    let mut set = tokio::task::JoinSet::new();
    for item in items {
        let (limit, f, progress) = (limit.clone(), f.clone(), progress.clone());
        set.spawn(async move {
            let _slot = limit.acquire_owned().await;
            let r = f(item).await;
            progress.inc(1);
            r
        });
    }
    let mut out = Vec::new();
    while let Some(r) = set.join_next().await {
        out.push(r??);
    }
    progress.finish_and_clear();
    Ok(out)
}

/// Sets `[merge]`'s gate in the organization's agensh.toml.
fn set_gate(dir: &Path, gate: &GateSpec) -> Result<()> {
    let path = dir.join("agensh.toml");
    let text = std::fs::read_to_string(&path)?;
    let mut out = String::new();
    for line in text.lines() {
        let key = line.split('=').next().unwrap_or("").trim();
        let line = match key {
            "gate" => format!("gate = {}", toml_string(&gate.command())),
            "gate_batch" => format!("gate_batch = {}", gate.batch),
            "gate_jobs" => format!("gate_jobs = {}", gate.jobs),
            "gate_timeout_secs" => format!(
                "gate_timeout_secs = {}",
                (gate.secs * 10.0).ceil().max(60.0)
            ),
            _ => line.to_string(),
        };
        out.push_str(&line);
        out.push('\n');
    }
    std::fs::write(&path, out)?;
    Ok(())
}

/// `s` as a TOML basic string.
fn toml_string(s: &str) -> String {
    serde_json::to_string(s).expect("a string serializes")
}

async fn measure(a: &Args, agensh: &Path, dir: &Path, gate: Option<GateSpec>) -> Result<Value> {
    let ids = init(agensh, dir, a.workers).await?;
    let git_dir = agensh_hub::state_dir(dir).join(agensh_workspace::REPO_DIR);
    let failing: std::collections::HashSet<String> = match gate {
        Some(g) => {
            set_gate(dir, &g)?;
            ids.iter()
                .enumerate()
                .filter(|(i, _)| marked(*i, a.fail_rate))
                .map(|(_, id)| id.clone())
                .collect()
        }
        None => Default::default(),
    };
    write_branches(&git_dir, &ids, &failing)?;
    let main_before = git(&git_dir, &["rev-parse", "refs/heads/main"])?;

    let hub = start_hub(agensh, dir)?;
    let admin = Client::new(&hub.url, &hub.admin_token);
    let url = hub.url.clone();
    let tokens = each(ids.clone(), 16, "tokens", move |id: String| {
        let admin = admin.clone();
        Box::pin(async move { Ok((id.clone(), admin.worker_token(&id).await?.token)) })
    })
    .await?;
    let prs = each(
        tokens,
        16,
        "open PRs",
        move |(id, token): (String, String)| {
            let url = url.clone();
            Box::pin(async move {
                let c = Client::new(&url, &token);
                let pr = c
                    .open_pr(&NewPr {
                        branch: format!("{id}/merge"),
                        title: format!("{id}: add {}", file_of(&id)),
                        body: None,
                    })
                    .await?;
                Ok((id, token, pr.number))
            })
        },
    )
    .await?;

    let opened: Vec<(String, i64)> = prs.iter().map(|(id, _, n)| (id.clone(), *n)).collect();
    // Every worker's own client (its own connection), connected before the start.
    let mut workers = Vec::new();
    for (id, token, number) in prs {
        let c = Client::new(&hub.url, &token);
        c.stats().await?;
        workers.push((id, c, number));
    }
    let start = Arc::new(tokio::sync::Barrier::new(workers.len() + 1));
    let mut tasks = Vec::new();
    for (id, c, number) in workers {
        let start = start.clone();
        tasks.push(tokio::spawn(async move {
            start.wait().await;
            let t = Instant::now();
            let answer = c.merge_pr(number).await;
            (id, number, t.elapsed(), Instant::now(), answer)
        }));
    }
    let hub_pid = hub.child.id().to_string();
    let cpu_before = cpu_secs(&hub_pid);
    start.wait().await;
    let t0 = Instant::now();
    let progress = bar(tasks.len() as u64, "merges");
    let mut latencies = Vec::new();
    let mut last = t0;
    let mut errors: BTreeMap<String, u64> = BTreeMap::new();
    let mut merged = Vec::new();
    let mut attempts_max = 0;
    for t in tasks {
        let (id, number, took, at, answer) = t.await?;
        last = last.max(at);
        latencies.push(took);
        match answer {
            Ok(v) if v["outcome"] == "merged" || v["outcome"] == "up_to_date" => {
                attempts_max = attempts_max.max(v["attempts"].as_u64().unwrap_or(0));
                merged.push((id, number));
            }
            Ok(v) => {
                *errors
                    .entry(format!("answer {}", v["outcome"]))
                    .or_default() += 1
            }
            Err(e) => *errors.entry(e.code.clone()).or_default() += 1,
        }
        progress.inc(1);
    }
    progress.finish_and_clear();
    let wall = last.saturating_duration_since(t0);
    let cpu = cpu_secs(&hub_pid) - cpu_before;

    // None lost: every PR merged in the store, every file in main's tree.
    let admin = Client::new(&hub.url, &hub.admin_token);
    let states = each(opened, 16, "checking", move |(id, n): (String, i64)| {
        let admin = admin.clone();
        Box::pin(async move {
            let pr = admin.view_pr(n).await?;
            Ok((id, pr["state"].as_str().unwrap_or("").to_string()))
        })
    })
    .await?;
    let not_merged = states
        .iter()
        .filter(|(id, s)| s != "merged" && !failing.contains(id))
        .count();
    let failing_merged = states
        .iter()
        .filter(|(id, s)| s == "merged" && failing.contains(id))
        .count();
    let tree = git(
        &git_dir,
        &["ls-tree", "-r", "--name-only", "refs/heads/main", "merges/"],
    )?;
    let in_main: std::collections::HashSet<&str> = tree.lines().collect();
    let missing = ids
        .iter()
        .filter(|id| !failing.contains(*id) && !in_main.contains(file_of(id).as_str()))
        .count();
    // Every position main took, replayed through the gate (it fails on anything in fails/).
    let positions = git(
        &git_dir,
        &[
            "rev-list",
            "--first-parent",
            &format!("{main_before}..refs/heads/main"),
        ],
    )?;
    let mut failing_positions = 0;
    for commit in positions.lines() {
        if !git(&git_dir, &["ls-tree", "--name-only", commit, "fails/"])?.is_empty() {
            failing_positions += 1;
        }
    }
    let gates = gate_stats(&hub.url).await;
    let merge_commits: u64 = git(
        &git_dir,
        &[
            "rev-list",
            "--merges",
            "--count",
            &format!("{main_before}..refs/heads/main"),
        ],
    )?
    .parse()
    .unwrap_or(0);
    let moves = main_moves(&hub.url).await;
    let fsck = Command::new("git")
        .arg("--git-dir")
        .arg(&git_dir)
        .args(["fsck", "--no-progress"])
        .output()?;
    drop(hub);

    let n = a.workers as f64;
    let per_sec = n / wall.as_secs_f64().max(1e-9);
    Ok(json!({
        "workers": a.workers,
        "wall_secs": (wall.as_secs_f64() * 1000.0).round() / 1000.0,
        "merges_per_sec": (per_sec * 10.0).round() / 10.0,
        "p50_ms": ms(percentile(&latencies, 50.0)),
        "p99_ms": ms(percentile(&latencies, 99.0)),
        "max_ms": ms(percentile(&latencies, 100.0)),
        "merged_answers": merged.len(),
        "errors": errors,
        "prs_not_merged": not_merged,
        "files_missing_from_main": missing,
        "lost": not_merged.max(missing),
        "merge_commits_on_main": merge_commits,
        "main_moves": moves,
        "max_attempts": attempts_max,
        "hub_cpu_secs": (cpu * 100.0).round() / 100.0,
        "hub_cpu_pct_of_one_core": (cpu / wall.as_secs_f64().max(1e-9) * 1000.0).round() / 10.0,
        "hub_cpu_ms_per_merge": (cpu * 1000.0 / n * 10.0).round() / 10.0,
        "fsck_clean": fsck.status.success(),
        "target_merges_per_sec": TARGET_MERGES_PER_SEC,
        "gate_secs": gate.map(|g| g.secs),
        "gate_batch": gate.map(|g| g.batch),
        "gate_jobs": gate.map(|g| g.jobs),
        "prs_marked_to_fail": failing.len(),
        "failing_prs_merged": failing_merged,
        "main_positions_failing_the_gate": failing_positions,
        "gate_runs": gates.0,
        "gate_runs_per_pr": gates.0.map(|r| (r as f64 / n * 100.0).round() / 100.0),
        "bisections": gates.1,
    }))
}

/// The gate's runs and bisections (`/metrics`), when the hub says.
async fn gate_stats(url: &str) -> (Option<u64>, Option<u64>) {
    let Some(text) = metrics(url).await else {
        return (None, None);
    };
    let read = |name: &str| {
        text.lines()
            .find(|l| l.starts_with(name) && l.as_bytes().get(name.len()) == Some(&b' '))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
    };
    (
        read("agensh_gate_runs_total"),
        read("agensh_gate_bisections_total"),
    )
}

async fn metrics(url: &str) -> Option<String> {
    reqwest::get(format!("{url}/metrics"))
        .await
        .ok()?
        .text()
        .await
        .ok()
}

fn print_gated(r: &Value) {
    for name in ["batched", "serial"] {
        let Some(g) = r.get(name) else { continue };
        let ok = g["lost"].as_u64() == Some(0)
            && g["failing_prs_merged"].as_u64() == Some(0)
            && g["main_positions_failing_the_gate"].as_u64() == Some(0);
        println!(
            "{name}: {} PRs ({} marked to fail), gate {} s, gate_batch {}, gate_jobs {}",
            g["workers"], g["prs_marked_to_fail"], g["gate_secs"], g["gate_batch"], g["gate_jobs"]
        );
        println!(
            "  all decided in {} s; time to decide p50 {} ms, p99 {} ms",
            g["wall_secs"], g["p50_ms"], g["p99_ms"]
        );
        println!(
            "  gate runs {} ({} per PR), bisections {}, moves of main {}",
            g["gate_runs"], g["gate_runs_per_pr"], g["bisections"], g["main_moves"]
        );
        println!(
            "  passing PRs not merged {}, failing PRs merged {}, positions of main failing the gate {}, refusals {}: {}",
            g["lost"], g["failing_prs_merged"], g["main_positions_failing_the_gate"], g["errors"],
            if ok { "correct" } else { "WRONG" }
        );
    }
    if let Some(x) = r.get("speedup") {
        println!("batched against serial: {x}× faster (target ≥ 8×)");
    }
}

/// How often the hub moved `main` (`agensh_main_moves_total` in `/metrics`), if it says.
async fn main_moves(url: &str) -> Option<u64> {
    let text = metrics(url).await?;
    text.lines()
        .find(|l| l.starts_with("agensh_main_moves_total "))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
}

fn print_table(r: &Value) {
    let ok = r["merges_per_sec"].as_f64().unwrap_or(0.0) >= TARGET_MERGES_PER_SEC
        && r["lost"].as_u64() == Some(0);
    println!(
        "{} workers merging disjoint PRs at once through the hub",
        r["workers"]
    );
    println!(
        "  {} merges/s ({} s from the first request to the last answer)   target >= {} merges/s, none lost: {}",
        r["merges_per_sec"],
        r["wall_secs"],
        TARGET_MERGES_PER_SEC,
        if ok { "meets target" } else { "MISSES target" }
    );
    println!(
        "  time to merge p50 {} ms, p99 {} ms, max {} ms",
        r["p50_ms"], r["p99_ms"], r["max_ms"]
    );
    println!(
        "  merged answers {}, refusals {}, PRs not merged {}, files missing from main {}, git fsck clean: {}",
        r["merged_answers"], r["errors"], r["prs_not_merged"], r["files_missing_from_main"], r["fsck_clean"]
    );
    println!(
        "  merge commits on main {}, moves of main {}, most attempts of one merge {}",
        r["merge_commits_on_main"], r["main_moves"], r["max_attempts"]
    );
    println!(
        "  hub CPU {} s ({}% of one core, {} ms per merge; git children included)",
        r["hub_cpu_secs"], r["hub_cpu_pct_of_one_core"], r["hub_cpu_ms_per_merge"]
    );
}
