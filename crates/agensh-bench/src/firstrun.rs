//! The first-run benchmark: the README's first command, as a user runs it, measured by
//! what it leaves on `main`.
//!
//! Each run copies the example organization (its `agensh.toml` and `seed/`, nothing a
//! previous run left) into a temporary directory and starts the real binary there —
//! `agensh run DIR` plus any arguments after `--` — in its own process group, with no
//! terminal and nothing configured, exactly like the README's command. The run ends by
//! itself when its goal is met (`organization.done_when`) or at its `run.hours`; a run still
//! going 10 minutes after that is stopped and marked. From the run's store: when the goal
//! was met, how long the run went on after it, and the model requests made after it.
//!
//! Afterwards, from the organization's own repository: a **part** is one test module of
//! the seed (`tests/test_<part>.py`); it **merged** at the commit time of the first commit
//! on `main` that changed a file of that name outside `tests/` (`<package>/<part>.py`),
//! measured from the moment the command started; it **passes** when its tests pass on a
//! clone of the final `main` (`python3 -m unittest tests.test_<part>`). The tests on `main`
//! are compared with the seed's, so a run that "passed" by editing them shows it. The
//! target the README quotes: at least 4 parts merged and passing within 20 minutes, the
//! first within 10, in every run.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use agensh_domain::config::Config;
use agensh_process::group::spawn;
use agensh_process::Priority;
use agensh_workspace::git::Git;
use anyhow::{bail, Context, Result};
use serde::Serialize;
use tokio::process::Command;

/// How long past its deadline a run may go on before it is stopped.
const OVERTIME: Duration = Duration::from_secs(600);

/// How long one part's tests may run on the final `main`.
const TEST_TIMEOUT: Duration = Duration::from_secs(120);

#[derive(clap::Args)]
pub struct Args {
    /// The example organization to run (a directory with agensh.toml and its seed).
    #[arg(long, default_value = "examples/numkit")]
    example: PathBuf,
    /// How many runs, one after another, each from a fresh copy of the example.
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// The agensh binary (default: the release build next to this benchmark).
    #[arg(long)]
    agensh: Option<PathBuf>,
    /// Parts merged and passing that a run must reach to meet the target.
    #[arg(long, default_value_t = 4)]
    target_parts: usize,
    /// Minutes within which they must merge.
    #[arg(long, default_value_t = 20.0)]
    target_minutes: f64,
    /// Minutes within which the first part must merge.
    #[arg(long, default_value_t = 10.0)]
    first_within_minutes: f64,
    /// Keep each run's directory (its state, logs and checkouts) and print where.
    #[arg(long)]
    keep: bool,
    /// Print the results as JSON.
    #[arg(long)]
    json: bool,
    /// Arguments passed on to `agensh run DIR` (after `--`), e.g. `-- --workers 2`.
    #[arg(last = true)]
    run_args: Vec<String>,
}

/// One part of one run.
#[derive(Debug, Clone, Serialize)]
struct Part {
    name: String,
    /// Minutes from the command's start to the first `main` commit that changed it.
    merged_after_min: Option<f64>,
    /// Its tests pass on the final `main`.
    passes: bool,
}

/// One run's outcome.
#[derive(Debug, Clone, Serialize)]
struct RunResult {
    run: usize,
    /// Minutes the command ran.
    minutes: f64,
    exit_code: Option<i32>,
    /// Stopped by the benchmark because it ran past its deadline.
    stopped: bool,
    parts: Vec<Part>,
    /// Commits on `main` after the seed.
    main_commits: usize,
    /// Files under `tests/` on the final `main` that differ from the seed's.
    tests_changed: Vec<String>,
    /// Minutes to the first part merged (and passing at the end).
    first_merge_min: Option<f64>,
    /// Parts merged within the target minutes whose tests pass at the end.
    parts_in_target: usize,
    /// Whether this run meets the target.
    meets_target: bool,
    /// Where the run's directory was kept, with `--keep`.
    kept: Option<PathBuf>,
    /// The goal (`organization.done_when`) as the run's store kept it.
    goal: GoalOutcome,
}

/// When the run met its goal and what it spent before and after (from its store).
#[derive(Debug, Clone, Default, Serialize)]
struct GoalOutcome {
    /// Whether the example has a goal to meet (`organization.done_when`).
    defined: bool,
    /// Minutes from the command's start to the goal met.
    met_after_min: Option<f64>,
    /// Seconds from the goal met to the command's end.
    ended_after_goal_secs: Option<f64>,
    /// Model requests of the run, and those at or after the goal (or, with no goal met,
    /// after the last merge).
    requests: u64,
    requests_after: u64,
    /// `requests_after / requests`.
    share_after: f64,
}

pub async fn run(a: Args) -> Result<()> {
    if a.runs == 0 {
        bail!("--runs must be at least 1");
    }
    let example = std::path::absolute(&a.example)?;
    let config = std::fs::read_to_string(example.join("agensh.toml")).with_context(|| {
        format!(
            "no example organization at {} — give one with --example DIR (a directory with agensh.toml and its seed)",
            example.display()
        )
    })?;
    let hours = Config::parse(&config)?.run.hours;
    if hours <= 0.0 {
        bail!(
            "{}: run.hours is 0 (no limit), so a run would never end — give the example a length",
            example.join("agensh.toml").display()
        );
    }
    let agensh = crate::stats::agensh_binary(a.agensh.as_deref())?;
    let parts = parts_of(&example.join("seed"))?;
    if parts.is_empty() {
        bail!(
            "{} has no tests/test_*.py: the benchmark counts parts by their test modules",
            example.join("seed").display()
        );
    }
    let deadline = Duration::from_secs_f64(hours * 3600.0);
    eprintln!(
        "first-run benchmark: `agensh run {} {}`, {} run(s) of {:.1} min, parts: {}",
        example.file_name().unwrap_or_default().to_string_lossy(),
        a.run_args.join(" "),
        a.runs,
        deadline.as_secs_f64() / 60.0,
        parts.join(", ")
    );
    let mut results = Vec::new();
    for n in 1..=a.runs {
        let r = one_run(&a, n, &agensh, &example, &parts, deadline).await?;
        eprintln!(
            "run {n}: {} of {} parts merged and passing within {} min (first after {}), exit {:?}{}; {}",
            r.parts_in_target,
            parts.len(),
            a.target_minutes,
            r.first_merge_min
                .map_or("—".to_string(), |m| format!("{m:.1} min")),
            r.exit_code,
            if r.stopped {
                ", stopped past its deadline"
            } else {
                ""
            },
            goal_text(&r.goal)
        );
        results.push(r);
    }
    let met = results.iter().filter(|r| r.meets_target).count();
    if a.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "example": example,
                "run_args": a.run_args,
                "target": {
                    "parts": a.target_parts,
                    "minutes": a.target_minutes,
                    "first_within_minutes": a.first_within_minutes,
                },
                "runs": results,
                "runs_meeting_target": met,
            }))?
        );
    } else {
        print_table(&a, &parts, &results, met);
    }
    Ok(())
}

/// `goal met after 6.9 min, ended 41 s later; 6 of 132 model requests after it (5%)`.
fn goal_text(g: &GoalOutcome) -> String {
    let spent = format!(
        "{} of {} model requests after it ({:.0}%)",
        g.requests_after,
        g.requests,
        g.share_after * 100.0
    );
    match (g.defined, g.met_after_min, g.ended_after_goal_secs) {
        (false, ..) => format!("no goal to meet; {spent} (after the last merge)"),
        (true, Some(m), Some(e)) => {
            format!("goal met after {m:.1} min, the run ended {e:.0} s later; {spent}")
        }
        _ => format!("goal not met; {spent} (after the last merge)"),
    }
}

/// The parts of a seed: the `<part>` of each `tests/test_<part>.py`, sorted.
fn parts_of(seed: &Path) -> Result<Vec<String>> {
    let dir = seed.join("tests");
    let mut parts: Vec<String> = std::fs::read_dir(&dir)
        .with_context(|| format!("cannot read {}", dir.display()))?
        .filter_map(|e| {
            let name = e.ok()?.file_name().into_string().ok()?;
            Some(name.strip_prefix("test_")?.strip_suffix(".py")?.to_string())
        })
        .collect();
    parts.sort();
    Ok(parts)
}

async fn one_run(
    a: &Args,
    n: usize,
    agensh: &Path,
    example: &Path,
    parts: &[String],
    deadline: Duration,
) -> Result<RunResult> {
    let tmp = tempfile::Builder::new()
        .prefix("agensh-firstrun-")
        .tempdir()?;
    let name = example.file_name().unwrap_or_default();
    let org = tmp.path().join(name);
    copy_example(example, &org)?;
    let log = std::fs::File::create(tmp.path().join("run.log"))?;
    let mut cmd = Command::new(agensh);
    cmd.arg("run")
        .arg(&org)
        .args(&a.run_args)
        .current_dir(tmp.path())
        .stdin(std::process::Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log);
    let started = SystemTime::now();
    let t0 = Instant::now();
    let mut child = spawn(&mut cmd, Priority::Normal)
        .with_context(|| format!("cannot start {}", agensh.display()))?;
    // Ctrl-C or SIGTERM stops the run as a user's Ctrl-C would (agensh run ends its agents
    // and its model server), and the benchmark with it: its group does not get a signal
    // sent to this process alone.
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let waited = tokio::select! {
        w = child.wait_timeout(deadline + OVERTIME) => Some(w),
        _ = tokio::signal::ctrl_c() => None,
        _ = term.recv() => None,
    };
    let (status, stopped) = match waited {
        Some(Some(status)) => (status?, false),
        Some(None) => (child.stop(Duration::from_secs(30)).await?, true),
        None => {
            let _ = child.stop(Duration::from_secs(30)).await;
            child.group.kill();
            if a.keep {
                eprintln!("run {n}: kept in {}", tmp.keep().display());
            }
            bail!("interrupted: run {n} was stopped, and agensh run with it");
        }
    };
    // Whatever the run left running (it should be nothing) goes with its group.
    child.group.kill();
    let minutes = t0.elapsed().as_secs_f64() / 60.0;
    let start_secs = started.duration_since(UNIX_EPOCH)?.as_secs_f64();
    let goal = goal_outcome(&org, start_secs, start_secs + minutes * 60.0).await?;

    let bare = org.join(".agensh/workspace.git");
    let git = Git::bare(&bare);
    let first_seen = first_changes(&git, parts, start_secs).await?;
    let main_commits = git
        .run([
            "rev-list",
            "--count",
            "--first-parent",
            "--min-parents=1",
            "main",
        ])
        .await
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0);
    let final_main = tmp.path().join("final-main");
    Git::worktree(tmp.path())
        .run([
            "clone",
            "-q",
            "--branch",
            "main",
            &bare.display().to_string(),
            &final_main.display().to_string(),
        ])
        .await
        .context("cannot clone the final main")?;
    let mut out = Vec::new();
    for (part, merged) in parts.iter().zip(first_seen) {
        let passes = merged.is_some() && tests_pass(&final_main, part).await;
        out.push(Part {
            name: part.clone(),
            merged_after_min: merged,
            passes,
        });
    }
    let tests_changed = changed_tests(&example.join("seed/tests"), &final_main.join("tests"))?;
    let in_time = |p: &&Part| p.passes && p.merged_after_min.is_some_and(|m| m <= a.target_minutes);
    let parts_in_target = out.iter().filter(in_time).count();
    let first_merge_min = out
        .iter()
        .filter(|p| p.passes)
        .filter_map(|p| p.merged_after_min)
        .min_by(f64::total_cmp);
    let meets_target = parts_in_target >= a.target_parts
        && first_merge_min.is_some_and(|m| m <= a.first_within_minutes)
        && tests_changed.is_empty();
    let kept = if a.keep {
        let path = tmp.keep();
        eprintln!("run {n}: kept in {}", path.display());
        Some(path)
    } else {
        None
    };
    Ok(RunResult {
        run: n,
        minutes,
        exit_code: status.code(),
        stopped,
        parts: out,
        main_commits,
        tests_changed,
        first_merge_min,
        parts_in_target,
        meets_target,
        kept,
        goal,
    })
}

/// The goal of the run in `org` as its store kept it: when it was met (Unix seconds
/// against the command's start and end) and the model requests before and after.
async fn goal_outcome(org: &Path, start_secs: f64, end_secs: f64) -> Result<GoalOutcome> {
    let config = Config::parse(&std::fs::read_to_string(org.join("agensh.toml"))?)?;
    let path = org.join(".agensh/store.sqlite");
    let store = agensh_store::open_store(&path.display().to_string()).await?;
    let status = agensh_hub::goal::stored(&*store, &config)
        .await?
        .unwrap_or_default();
    let economy = agensh_hub::goal::economy(&*store, &status).await?;
    let met = status.met_at.map(|ms| ms as f64 / 1000.0);
    Ok(GoalOutcome {
        defined: !config.organization.done_when.is_empty(),
        met_after_min: met.map(|m| (m - start_secs) / 60.0),
        ended_after_goal_secs: met.map(|m| end_secs - m),
        requests: economy.total.requests,
        requests_after: economy.after.requests,
        share_after: economy.share_after,
    })
}

/// Copies the example's `agensh.toml` and everything else but the state a run leaves
/// (`.agensh/`, `workers/`) and Python caches.
fn copy_example(from: &Path, to: &Path) -> Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let name = entry.file_name();
        if [".agensh", "workers", "__pycache__"].contains(&name.to_str().unwrap_or_default()) {
            continue;
        }
        let (src, dst) = (entry.path(), to.join(&name));
        if entry.file_type()?.is_dir() {
            copy_example(&src, &dst)?;
        } else {
            std::fs::copy(&src, &dst).with_context(|| format!("cannot copy {}", src.display()))?;
        }
    }
    Ok(())
}

/// For each part, the minutes from `start_secs` to the first commit on `main` (first
/// parent, oldest first; not the seed, which has no parent) that changed `<part>.py`
/// outside `tests/`.
async fn first_changes(git: &Git, parts: &[String], start_secs: f64) -> Result<Vec<Option<f64>>> {
    let log = git
        .run([
            "log",
            "--first-parent",
            "--reverse",
            "--format=@%ct %P",
            "--name-only",
            "-m",
            "main",
        ])
        .await
        .context("cannot read main's history")?;
    let mut seen: Vec<Option<f64>> = vec![None; parts.len()];
    let mut time = None;
    for line in log.lines() {
        if let Some(head) = line.strip_prefix('@') {
            let mut fields = head.split_whitespace();
            let t = fields.next().and_then(|t| t.parse::<f64>().ok());
            // The seed (no parent) and what came before the run merged nothing.
            time = t.filter(|&t| fields.next().is_some() && t >= start_secs.floor());
            continue;
        }
        let (Some(t), path) = (time, line.trim()) else {
            continue;
        };
        if path.is_empty() || path.starts_with("tests/") {
            continue;
        }
        let file = Path::new(path);
        if file.extension().and_then(|e| e.to_str()) != Some("py") {
            continue;
        }
        let stem = file
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or_default();
        if let Some(i) = parts.iter().position(|p| p == stem) {
            if seen[i].is_none() {
                seen[i] = Some(((t - start_secs) / 60.0).max(0.0));
            }
        }
    }
    Ok(seen)
}

/// Whether `python3 -m unittest tests.test_<part>` passes in `dir`.
async fn tests_pass(dir: &Path, part: &str) -> bool {
    let mut cmd = Command::new("python3");
    cmd.args(["-m", "unittest", &format!("tests.test_{part}")])
        .current_dir(dir)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    let Ok(mut child) = spawn(&mut cmd, Priority::Normal) else {
        return false;
    };
    match child.wait_timeout(TEST_TIMEOUT).await {
        Some(Ok(status)) => status.success(),
        _ => {
            let _ = child.stop(Duration::from_secs(2)).await;
            false
        }
    }
}

/// The files of `seed` and `now` (both a `tests/` directory) that differ or exist in one only.
fn changed_tests(seed: &Path, now: &Path) -> Result<Vec<String>> {
    let list = |d: &Path| -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(d)
            .map(|r| {
                r.filter_map(|e| e.ok())
                    .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
                    .filter_map(|e| e.file_name().into_string().ok())
                    .filter(|n| n.ends_with(".py"))
                    .collect()
            })
            .unwrap_or_default();
        v.sort();
        v
    };
    let (a, b) = (list(seed), list(now));
    let mut changed: Vec<String> = a
        .iter()
        .chain(b.iter().filter(|n| !a.contains(n)))
        .filter(|n| std::fs::read(seed.join(n)).ok() != std::fs::read(now.join(n)).ok())
        .map(|n| format!("tests/{n}"))
        .collect();
    changed.dedup();
    Ok(changed)
}

fn print_table(a: &Args, parts: &[String], results: &[RunResult], met: usize) {
    println!(
        "first run: {} part(s) merged and passing within {} min, the first within {} min — {met} of {} run(s) meet it",
        a.target_parts,
        a.target_minutes,
        a.first_within_minutes,
        results.len()
    );
    print!("{:<5} {:>6} {:>6}", "run", "min", "first");
    for p in parts {
        print!(" {p:>9}");
    }
    println!(" {:>7} {:>6}", "in time", "target");
    for r in results {
        print!(
            "{:<5} {:>6.1} {:>6}",
            r.run,
            r.minutes,
            r.first_merge_min
                .map_or("—".to_string(), |m| format!("{m:.1}"))
        );
        for p in &r.parts {
            let cell = match (p.merged_after_min, p.passes) {
                (Some(m), true) => format!("{m:.1}"),
                (Some(m), false) => format!("{m:.1} fail"),
                (None, _) => "—".to_string(),
            };
            print!(" {cell:>9}");
        }
        println!(
            " {:>7} {:>6}",
            format!("{}/{}", r.parts_in_target, parts.len()),
            if r.meets_target { "yes" } else { "no" }
        );
        println!("      {}", goal_text(&r.goal));
        if !r.tests_changed.is_empty() {
            println!(
                "      tests changed on main: {}",
                r.tests_changed.join(", ")
            );
        }
    }
    println!("cells: minutes from the command's start to the part's first merge into main; `fail`: its tests fail on the final main");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_are_the_test_modules() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(d.path().join("tests")).unwrap();
        for f in ["test_b.py", "test_a.py", "helpers.py", "__init__.py"] {
            std::fs::write(d.path().join("tests").join(f), "").unwrap();
        }
        assert_eq!(parts_of(d.path()).unwrap(), vec!["a", "b"]);
    }

    #[test]
    fn changed_tests_finds_edits_additions_and_removals() {
        let d = tempfile::tempdir().unwrap();
        let (seed, now) = (d.path().join("seed"), d.path().join("now"));
        for dir in [&seed, &now] {
            std::fs::create_dir_all(dir).unwrap();
            std::fs::write(dir.join("test_same.py"), "x").unwrap();
        }
        std::fs::write(seed.join("test_edit.py"), "1").unwrap();
        std::fs::write(now.join("test_edit.py"), "2").unwrap();
        std::fs::write(seed.join("test_gone.py"), "1").unwrap();
        std::fs::write(now.join("test_new.py"), "1").unwrap();
        assert_eq!(
            changed_tests(&seed, &now).unwrap(),
            vec![
                "tests/test_edit.py",
                "tests/test_gone.py",
                "tests/test_new.py"
            ]
        );
    }

    #[tokio::test]
    async fn a_part_merges_at_the_first_commit_that_changes_its_module() {
        let d = tempfile::tempdir().unwrap();
        let w = Git::worktree(d.path());
        w.run(["init", "-q", "-b", "main"]).await.unwrap();
        let commit = |files: &'static [&'static str], when: u64| {
            let w = Git::worktree(d.path());
            let root = d.path().to_path_buf();
            async move {
                for f in files {
                    let p = root.join(f);
                    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
                    std::fs::write(&p, when.to_string()).unwrap();
                }
                w.run(["add", "-A"]).await.unwrap();
                let date = format!("@{when} +0000");
                let mut c = w.command([
                    "-c",
                    "user.name=t",
                    "-c",
                    "user.email=t@t",
                    "commit",
                    "-qm",
                    "c",
                    "--date",
                    &date,
                ]);
                c.env("GIT_COMMITTER_DATE", &date);
                assert!(c.status().await.unwrap().success());
            }
        };
        commit(&["pkg/a.py", "pkg/b.py", "tests/test_a.py"], 1_000).await;
        commit(&["tests/test_b.py"], 1_060).await;
        commit(&["pkg/b.py"], 1_120).await;
        commit(&["pkg/b.py", "pkg/a.py"], 1_300).await;
        let parts = vec!["a".to_string(), "b".to_string(), "c".to_string()];
        let git = Git::bare(&d.path().join(".git"));
        // The seed (the root commit) merged nothing; a test-only change neither.
        let seen = first_changes(&git, &parts, 1_000.0).await.unwrap();
        assert_eq!(seen, vec![Some(5.0), Some(2.0), None]);
        // A commit from before the run is no merge of the run.
        let seen = first_changes(&git, &parts, 1_200.0).await.unwrap();
        assert_eq!(seen, vec![Some(100.0 / 60.0), Some(100.0 / 60.0), None]);
    }
}
