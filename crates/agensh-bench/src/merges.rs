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
    /// The `agensh` binary (default: next to this one).
    #[arg(long)]
    agensh: Option<std::path::PathBuf>,
    /// Print the results as JSON.
    #[arg(long)]
    json: bool,
}

/// The target of issue 17.
const TARGET_MERGES_PER_SEC: f64 = 50.0;

pub async fn run(a: Args) -> Result<()> {
    if a.workers == 0 {
        bail!("--workers must be at least 1");
    }
    let agensh = crate::stats::agensh_binary(a.agensh.as_deref())?;
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
    let dir = BenchDir::new("agensh-bench-merges-", a.dir.as_deref(), a.keep)?;
    let outcome = until_signal(measure(&a, &agensh, &dir.path)).await;
    dir.finish();
    print_result(a.json, &outcome?, print_table)
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
/// [`file_of`] — one `git fast-import` into the bare repository.
fn write_branches(git_dir: &Path, ids: &[String]) -> Result<()> {
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

async fn measure(a: &Args, agensh: &Path, dir: &Path) -> Result<Value> {
    let ids = init(agensh, dir, a.workers).await?;
    let git_dir = agensh_hub::state_dir(dir).join(agensh_workspace::REPO_DIR);
    write_branches(&git_dir, &ids)?;
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
    let not_merged = states.iter().filter(|(_, s)| s != "merged").count();
    let tree = git(
        &git_dir,
        &["ls-tree", "-r", "--name-only", "refs/heads/main", "merges/"],
    )?;
    let in_main: std::collections::HashSet<&str> = tree.lines().collect();
    let missing = ids
        .iter()
        .filter(|id| !in_main.contains(file_of(id).as_str()))
        .count();
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
    }))
}

/// How often the hub moved `main` (`agensh_main_moves_total` in `/metrics`), if it says.
async fn main_moves(url: &str) -> Option<u64> {
    let text = reqwest::get(format!("{url}/metrics"))
        .await
        .ok()?
        .text()
        .await
        .ok()?;
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
