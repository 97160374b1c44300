//! The workspace benchmark: merging disjoint pull requests in the bare repository
//! (`merge-tree` + compare-and-swap of `main`) against a forge-style merge in a temporary
//! clone (clone, merge, push), measured in the same run on the same repository; and the
//! time and disk to create 1,024 worker checkouts.

use std::path::Path;
use std::time::{Duration, Instant};

use agensh_workspace::checkout;
use agensh_workspace::merge::{MergeOutcome, MergeRequest};
use agensh_workspace::seed::{self, Source};
use agensh_workspace::{Git, Workspace};
use anyhow::{bail, Result};
use indicatif::ProgressBar;
use serde_json::json;

use crate::stats::{ms, percentile};

#[derive(clap::Args)]
pub struct Args {
    /// Files in the seeded repository.
    #[arg(long, default_value_t = 3000)]
    files: usize,
    /// Disjoint pull requests merged by each method.
    #[arg(long, default_value_t = 100)]
    prs: usize,
    /// Worker checkouts to create.
    #[arg(long, default_value_t = 1024)]
    checkouts: usize,
    /// Checkouts created at once.
    #[arg(long, default_value_t = 4)]
    jobs: usize,
    /// Before the checkouts, copy the seed's files this many times and delete the copies,
    /// to measure checkouts made right after a large delete (e.g. of a previous
    /// organization's checkouts): on ext4 without a journal that is much slower.
    #[arg(long, default_value_t = 0)]
    delete_first: usize,
    /// Where the organization (and so the checkouts) lives; default: a temporary directory.
    #[arg(long)]
    dir: Option<std::path::PathBuf>,
    /// Print the results as JSON.
    #[arg(long)]
    json: bool,
}

/// Writes `files` source-like files (about 1.5 KB each) into 100 directories.
fn write_tree(root: &Path, files: usize) -> Result<()> {
    for i in 0..files {
        let dir = root.join(format!("src/mod{:03}", i % 100));
        std::fs::create_dir_all(&dir)?;
        let mut text = String::with_capacity(1600);
        for line in 0..40 {
            text.push_str(&format!(
                "fn item_{i}_{line}(x: u64) -> u64 {{ x * {line} + {i} }}\n"
            ));
        }
        std::fs::write(dir.join(format!("file{i:05}.rs")), text)?;
    }
    Ok(())
}

/// Makes `count` branches `w0001/<name>N`..., each changing one different file (chosen
/// with `offset`), through one scratch worktree of the bare repository.
async fn make_branches(
    ws: &Workspace,
    scratch: &Path,
    (name, offset): (&str, usize),
    count: usize,
    files: usize,
    bar: &ProgressBar,
) -> Result<Vec<String>> {
    let s = scratch.to_string_lossy().to_string();
    ws.git()
        .run(["worktree", "add", "--quiet", "--detach", &s, "main"])
        .await?;
    let g = Git::worktree(scratch);
    let mut branches = Vec::new();
    for n in 0..count {
        let branch = format!("w{:04}/{name}{n}", n + 1);
        g.run(["checkout", "--quiet", "-B", &branch, "main"])
            .await?;
        let i = (n * 29 + offset) % files;
        let path = format!("src/mod{:03}/file{i:05}.rs", i % 100);
        let mut text = std::fs::read_to_string(scratch.join(&path))?;
        text.push_str(&format!("// changed by {name} {n}\n"));
        std::fs::write(scratch.join(&path), text)?;
        g.run([
            "-c",
            "user.name=bench",
            "-c",
            "user.email=bench@agensh.invalid",
            "commit",
            "--quiet",
            "-am",
            &format!("{name} {n}"),
        ])
        .await?;
        branches.push(branch);
        bar.inc(1);
    }
    ws.git().run(["worktree", "remove", "--force", &s]).await?;
    Ok(branches)
}

/// A forge's merge: clone into a temporary directory, merge there, push back.
async fn merge_in_temporary_clone(ws: &Workspace, tmp: &Path, branch: &str) -> Result<()> {
    let dir = tmp.join("clone");
    let d = dir.to_string_lossy().to_string();
    let parent = Git::worktree(tmp);
    parent
        .run([
            "clone",
            "--quiet",
            "--shared",
            "--branch",
            "main",
            &ws.git_dir().to_string_lossy(),
            &d,
        ])
        .await?;
    let g = Git::worktree(&dir);
    g.run([
        "fetch",
        "--quiet",
        "origin",
        &format!("refs/heads/{branch}:refs/remotes/origin/{branch}"),
    ])
    .await?;
    g.run([
        "-c",
        "user.name=forge",
        "-c",
        "user.email=forge@agensh.invalid",
        "merge",
        "--quiet",
        "--no-ff",
        "--no-edit",
        &format!("origin/{branch}"),
    ])
    .await?;
    let mut push = g.command(["push", "--quiet", "origin", "HEAD:main"]);
    push.env("AGENSH_PUSHER", "admin");
    let out = push.output().await?;
    if !out.status.success() {
        bail!(
            "baseline push failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}

fn du_bytes(path: &Path) -> u64 {
    let out = std::process::Command::new("du")
        .args(["-sb"])
        .arg(path)
        .output();
    out.ok()
        .and_then(|o| {
            String::from_utf8_lossy(&o.stdout)
                .split_whitespace()
                .next()
                .and_then(|n| n.parse().ok())
        })
        .unwrap_or(0)
}

fn disk_bytes(path: &Path) -> u64 {
    let out = std::process::Command::new("du")
        .args(["-sk"])
        .arg(path)
        .output();
    out.ok()
        .and_then(|o| {
            String::from_utf8_lossy(&o.stdout)
                .split_whitespace()
                .next()
                .and_then(|n| n.parse::<u64>().ok())
        })
        .unwrap_or(0)
        * 1024
}

/// Copies `from` to `into/0`, `into/1`, … `count` times with `cp -r`, `jobs` at a time.
async fn copy_tree_many(from: &Path, into: &Path, count: usize, jobs: usize) -> Result<()> {
    std::fs::create_dir_all(into)?;
    let mut copies = tokio::task::JoinSet::new();
    let limit = std::sync::Arc::new(tokio::sync::Semaphore::new(jobs.max(1)));
    for i in 0..count {
        let (from, to, limit) = (from.to_path_buf(), into.join(i.to_string()), limit.clone());
        copies.spawn(async move {
            let _p = limit.acquire_owned().await;
            tokio::process::Command::new("cp")
                .arg("-r")
                .arg(&from)
                .arg(&to)
                .status()
                .await
        });
    }
    while let Some(r) = copies.join_next().await {
        if !r??.success() {
            bail!("cp -r {} failed", from.display());
        }
    }
    Ok(())
}

pub async fn run(a: Args) -> Result<()> {
    let tmp = tempfile::tempdir()?;
    let src = tmp.path().join("src-tree");
    write_tree(&src, a.files)?;
    let org = match &a.dir {
        Some(d) => {
            if d.exists() {
                bail!(
                    "{} exists — give --dir a path that does not exist yet",
                    d.display()
                );
            }
            d.clone()
        }
        None => tmp.path().join("org"),
    };
    let ws = seed::create(
        &org.join(".agensh/workspace.git"),
        Source::Dir(&src),
        "benchmark",
    )
    .await?;
    agensh_workspace::hook::install_hooks(&ws).await?;
    let repo_bytes = disk_bytes(ws.git_dir());

    // Checkouts first, before anything deletes files: on ext4 without a journal, inodes
    // freed in the last 60-300 s are skipped by a linear scan when new ones are allocated,
    // so creating files right after deleting many is several times slower (see
    // docs/PERFORMANCE.md). The merges below delete 100 temporary clones.
    if a.delete_first > 0 {
        let doomed = org.join("doomed");
        copy_tree_many(&src.join("src"), &doomed, a.delete_first, a.jobs).await?;
        std::fs::remove_dir_all(&doomed)?;
    }
    let workers: Vec<String> = agensh_domain::ids::new_worker_ids(0, a.checkouts);
    let bar = crate::hub::bar(a.checkouts as u64, "checkouts");
    let t = Instant::now();
    checkout::create_many(&ws, &org, &workers, a.jobs, |_, _| bar.inc(1)).await?;
    let checkout_time = t.elapsed();
    bar.finish();
    let workers_dir = org.join("workers");
    let checkouts_disk = disk_bytes(&workers_dir);
    let checkouts_apparent = du_bytes(&workers_dir);
    let one_git = disk_bytes(&workers_dir.join(&workers[0]).join(".git"));

    // The floor: writing the same files with a plain copy, 4 at a time, 32 times.
    let sample = 32.min(a.checkouts);
    let floor_dir = org.join("floor");
    std::fs::create_dir_all(&floor_dir)?;
    let t = Instant::now();
    copy_tree_many(&src.join("src"), &floor_dir, sample, a.jobs).await?;
    let floor_per_copy = t.elapsed().as_secs_f64() / sample as f64;
    let floor_total = floor_per_copy * a.checkouts as f64;
    let _ = std::fs::remove_dir_all(&floor_dir);

    let bar = crate::hub::bar((2 * a.prs) as u64, "branches");
    let ours = make_branches(
        &ws,
        &tmp.path().join("scratch"),
        ("pr", 0),
        a.prs,
        a.files,
        &bar,
    )
    .await?;
    // Branches for the baseline: the same shape, other files.
    let forge_branches = make_branches(
        &ws,
        &tmp.path().join("scratch2"),
        ("forge", 13),
        a.prs,
        a.files,
        &bar,
    )
    .await?;
    bar.finish();

    // Interleave the two methods so both see the same machine and a growing main.
    let bar = crate::hub::bar((2 * a.prs) as u64, "merges");
    let theirs_tmp = tmp.path().join("forge");
    std::fs::create_dir_all(&theirs_tmp)?;
    let mut hub_lat = Vec::new();
    let mut forge_lat = Vec::new();
    for (mine, forge) in ours.iter().zip(&forge_branches) {
        let req = MergeRequest {
            branch: mine.clone(),
            head: None,
            message: format!("Merge {mine}"),
            gate: None,
        };
        let t = Instant::now();
        match ws.merge(&req).await? {
            MergeOutcome::Merged { .. } => {}
            other => bail!("benchmark merge of {mine} did not merge: {other:?}"),
        }
        hub_lat.push(t.elapsed());
        bar.inc(1);
        let t = Instant::now();
        merge_in_temporary_clone(&ws, &theirs_tmp, forge).await?;
        forge_lat.push(t.elapsed());
        bar.inc(1);
    }
    bar.finish();
    let fsck = ws.git().output(["fsck", "--no-progress"]).await?;
    if !fsck.success() {
        bail!("git fsck failed after the merges: {}", fsck.stderr);
    }

    let p50 = |v: &[Duration]| percentile(v, 50.0);
    let ratio = ms(p50(&forge_lat)) / ms(p50(&hub_lat)).max(0.001);
    let mib = |b: u64| (b as f64 / 1_048_576.0 * 10.0).round() / 10.0;
    let result = json!({
        "files": a.files,
        "repo_mib": mib(repo_bytes),
        "merge": {
            "prs": a.prs,
            "hub_p50_ms": ms(p50(&hub_lat)), "hub_p99_ms": ms(percentile(&hub_lat, 99.0)),
            "temporary_clone_p50_ms": ms(p50(&forge_lat)), "temporary_clone_p99_ms": ms(percentile(&forge_lat, 99.0)),
            "speedup_p50": (ratio * 10.0).round() / 10.0,
            "target_p50_ms": 50, "target_speedup": 10,
        },
        "checkouts": {
            "count": a.checkouts, "jobs": a.jobs,
            "seconds": (checkout_time.as_secs_f64() * 10.0).round() / 10.0,
            "disk_mib": mib(checkouts_disk), "apparent_mib": mib(checkouts_apparent),
            "per_checkout_git_dir_kib": one_git / 1024,
            "plain_copy_floor_seconds": (floor_total * 10.0).round() / 10.0,
            "ratio_to_floor": ((checkout_time.as_secs_f64() / floor_total) * 100.0).round() / 100.0,
            "target_seconds": 120,
            "after_deleting_copies": a.delete_first,
        },
    });
    if a.json {
        println!("{}", serde_json::to_string_pretty(&result)?);
    } else {
        let m = &result["merge"];
        let c = &result["checkouts"];
        let mark = |ok: bool| if ok { "meets target" } else { "MISSES target" };
        println!(
            "workspace benchmark: {} files ({} MiB repository)",
            a.files, result["repo_mib"]
        );
        println!(
            "merge (hub, in place)        p50 {} ms, p99 {} ms over {} disjoint PRs   target p50 <= 50 ms: {}",
            m["hub_p50_ms"], m["hub_p99_ms"], a.prs, mark(m["hub_p50_ms"].as_f64().unwrap_or(f64::MAX) <= 50.0)
        );
        println!(
            "merge (temporary clone)      p50 {} ms, p99 {} ms   hub is {}x faster at p50   target >= 10x: {}",
            m["temporary_clone_p50_ms"], m["temporary_clone_p99_ms"], m["speedup_p50"],
            mark(m["speedup_p50"].as_f64().unwrap_or(0.0) >= 10.0)
        );
        println!(
            "{} checkouts ({} at a time)  {} s, {} MiB on disk ({} MiB apparent; {} KiB of .git each)   target <= 120 s: {}",
            a.checkouts, a.jobs, c["seconds"], c["disk_mib"], c["apparent_mib"], c["per_checkout_git_dir_kib"],
            mark(c["seconds"].as_f64().unwrap_or(f64::MAX) <= 120.0)
        );
        println!(
            "    floor: copying the same files with cp -r ({} at a time) would take {} s for {}; checkouts cost {}x that",
            a.jobs, c["plain_copy_floor_seconds"], a.checkouts, c["ratio_to_floor"]
        );
        if a.delete_first > 0 {
            println!(
                "    (the checkouts were made right after deleting {} copies of the seed's files)",
                a.delete_first
            );
        }
    }
    if a.dir.is_some() {
        eprintln!("removing {} ...", org.display());
        let _ = std::fs::remove_dir_all(&org);
    }
    Ok(())
}
