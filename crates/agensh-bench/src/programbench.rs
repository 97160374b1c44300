//! Scoring one checkpoint: agensh's evaluator (sandbox set-up, compile, every test branch,
//! ProgramBench's steps) against the floor — the same submission's `compile.sh` then each
//! branch's `eval/run.sh` in a plain temporary directory, with the same test environment on
//! `PATH` — alternating, in the same run, on the `programbench` package's fixture task and
//! its correct sample submission. Docker is not here, so `programbench eval` cannot be
//! timed beside them.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use agensh_eval::env;
use agensh_eval::evaluate::{self, Options, Submission};
use agensh_eval::sandbox::Sandbox;
use agensh_eval::task::{Task, TestFiles};
use anyhow::{bail, Context, Result};
use serde_json::json;

use crate::stats::{agensh_binary, ms, percentile};

#[derive(clap::Args)]
pub struct Args {
    /// Rounds (each times both sides once).
    #[arg(long, default_value_t = 15)]
    rounds: usize,
    /// The task (a directory or an id of the installed package).
    #[arg(long, default_value = "testorg__calculator.abc1234")]
    task: String,
    /// The submission (default: the package's correct sample for the fixture).
    #[arg(long)]
    submission: Option<PathBuf>,
    /// The agensh binary (its `__sandbox` is the launcher); default: next to this one.
    #[arg(long)]
    agensh: Option<PathBuf>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

pub async fn run(a: Args) -> Result<()> {
    let data = agensh_model::data_dir()?;
    let Some(env) = env::installed(&data) else {
        bail!(
            "the ProgramBench test environment is not installed: run `agensh bench install` first"
        );
    };
    let task = Task::load(
        &a.task,
        Some(&env.package_dir.join("data").join("tasks")),
        None,
    )?;
    let submission = match &a.submission {
        Some(s) => s.clone(),
        None => env
            .package_dir
            .join("data/test_runs/correct")
            .join(&task.instance_id)
            .join("submission.zip"),
    };
    let sub = Submission::at(&submission)?;
    let sandbox = Sandbox {
        program: agensh_binary(a.agensh.as_deref())?,
        args: vec!["__sandbox".into()],
    };
    let tmp = tempfile::tempdir_in(&data)?;
    // The submission unpacked once, for the floor.
    let unpacked = tmp.path().join("submission");
    std::fs::create_dir_all(&unpacked)?;
    match &sub {
        Submission::Zip(z) => sh(Command::new("unzip")
            .arg("-q")
            .arg(z)
            .arg("-d")
            .arg(&unpacked))?,
        Submission::TarGz(t) => sh(Command::new("tar")
            .arg("-xzf")
            .arg(t)
            .arg("-C")
            .arg(&unpacked))?,
        Submission::Dir(d) => evaluate::copy_tree(d, &unpacked)?,
    }
    let (mut ours, mut floor) = (Vec::new(), Vec::new());
    let mut kept = None;
    let bar = crate::hub::bar(a.rounds as u64, "rounds");
    for round in 0..a.rounds {
        // Alternate which side goes first, so neither always runs on a warm cache.
        for side in if round % 2 == 0 { [0, 1] } else { [1, 0] } {
            if side == 0 {
                let mut o = Options::new(
                    sandbox.clone(),
                    env.clone(),
                    tmp.path().join(format!("eval-{round}")),
                );
                o.cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
                let t = Instant::now();
                let out = evaluate::evaluate(&task, &sub, &o, &mut |_| {}).await?;
                ours.push(t.elapsed());
                kept = Some(out.scores.kept);
            } else {
                let t = Instant::now();
                plain(
                    &task,
                    &unpacked,
                    &tmp.path().join(format!("floor-{round}")),
                    &env,
                )?;
                floor.push(t.elapsed());
            }
        }
        bar.inc(1);
    }
    bar.finish_and_clear();
    let (o50, f50) = (percentile(&ours, 50.0), percentile(&floor, 50.0));
    let ratio = o50.as_secs_f64() / f50.as_secs_f64();
    if a.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&json!({
                "task": task.instance_id,
                "rounds": a.rounds,
                "agensh_ms": {"p50": ms(o50), "p90": ms(percentile(&ours, 90.0))},
                "floor_ms": {"p50": ms(f50), "p90": ms(percentile(&floor, 90.0))},
                "ratio_p50": ratio,
                "kept_score": kept,
            }))?
        );
    } else {
        println!(
            "scoring one checkpoint of {} ({} rounds, kept score {:?})",
            task.instance_id, a.rounds, kept
        );
        println!(
            "  agensh eval (sandbox, every step)   p50 {:>8.1} ms   p90 {:>8.1} ms",
            ms(o50),
            ms(percentile(&ours, 90.0))
        );
        println!(
            "  floor (compile.sh && run.sh)       p50 {:>8.1} ms   p90 {:>8.1} ms",
            ms(f50),
            ms(percentile(&floor, 90.0))
        );
        println!("  ratio (p50): {ratio:.2}x (target: at most 1.5x)");
    }
    Ok(())
}

/// The floor: a copy of the submission, `compile.sh`, then each branch's tests unpacked
/// and `eval/run.sh`, nothing else.
fn plain(task: &Task, submission: &Path, dir: &Path, env: &env::TestEnv) -> Result<()> {
    evaluate::copy_tree(submission, dir)?;
    let path = format!(
        "{}:{}",
        env.bin().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    sh(Command::new("bash")
        .arg("-c")
        .arg("chmod +x ./compile.sh && ./compile.sh")
        .current_dir(dir)
        .env("PATH", &path))?;
    for b in task.active_branches() {
        match task.test_files(&b)? {
            TestFiles::Archive(a) => sh(Command::new("tar").arg("-xzf").arg(a).arg("-C").arg(dir))?,
            TestFiles::Dir(d) => evaluate::copy_tree(&d, dir)?,
        }
        sh(Command::new("bash")
            .arg("-c")
            .arg("chmod +x ./eval/run.sh && ./eval/run.sh")
            .current_dir(dir)
            .env("PATH", &path))?;
        if !dir.join("eval/results.xml").is_file() {
            bail!(
                "the floor's run.sh wrote no eval/results.xml in {}",
                dir.display()
            );
        }
    }
    Ok(())
}

fn sh(c: &mut Command) -> Result<()> {
    let out = c
        .stdin(std::process::Stdio::null())
        .output()
        .with_context(|| format!("cannot run {c:?}"))?;
    if !out.status.success() {
        bail!(
            "{c:?} failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}
