//! `agensh eval` and `agensh bench install`: ProgramBench's evaluation in agensh's own
//! sandbox (agensh-eval does the work; this file parses, reports progress and prints).

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::time::Duration;

use agensh_domain::programbench as pb;
use agensh_eval::env::{self, TestEnv};
use agensh_eval::evaluate::{self, Options, Outcome, Submission};
use agensh_eval::sandbox::Sandbox;
use agensh_eval::task::Task;
use anyhow::{bail, Context, Result};
use indicatif::{ProgressBar, ProgressStyle};

use crate::cli::EvalArgs;
use crate::output::{json, now_ms};

pub async fn run(a: EvalArgs) -> Result<()> {
    let data = agensh_model::data_dir()?;
    let spinner = spinner(a.json);
    let env = test_env(&data, &spinner).await?;
    let Some(task) = a.task.clone() else {
        if a.docker {
            bail!("--docker scores one submission: give --task too");
        }
        return run_dir(&a, &data, env, &spinner).await;
    };
    let submission = Submission::at(&a.submission)?;
    let package_tasks = env.package_dir.join("data").join("tasks");
    let task = Task::load(&task, Some(&package_tasks), a.blobs.as_deref())?;
    let work_dir = work_dir(&data, &task);
    let outcome = if a.docker {
        spinner.set_message(format!(
            "{}: programbench eval on the official image",
            task.instance_id
        ));
        let started = std::time::Instant::now();
        let made =
            agensh_eval::docker::evaluate(&env, &task, &submission, a.blobs.as_deref(), &work_dir)
                .await;
        if !a.keep {
            let _ = std::fs::remove_dir_all(&work_dir);
        }
        let evaluation = made?;
        Outcome {
            instance_id: task.instance_id.clone(),
            scores: evaluate::Scores::of(&evaluation, &task),
            evaluation,
            wall_time: started.elapsed().as_secs_f64(),
        }
    } else {
        score(&a, &task, &submission, env, &work_dir, &spinner).await?
    };
    spinner.finish_and_clear();
    if let Some(path) = &a.output {
        let text = serde_json::to_string_pretty(&outcome.evaluation)?;
        std::fs::write(path, text).with_context(|| format!("cannot write {}", path.display()))?;
    }
    if a.json {
        json(&outcome);
    } else {
        print_outcome(&outcome, &task);
        if a.keep {
            outln!("workspaces kept in {}", work_dir.display());
        }
        if let Some(path) = &a.output {
            outln!("evaluation written to {}", path.display());
        }
    }
    Ok(())
}

fn work_dir(data: &Path, task: &Task) -> PathBuf {
    data.join("eval-work").join(format!(
        "{}-{}-{}",
        task.instance_id,
        std::process::id(),
        now_ms()
    ))
}

async fn score(
    a: &EvalArgs,
    task: &Task,
    submission: &Submission,
    env: TestEnv,
    work_dir: &Path,
    spinner: &ProgressBar,
) -> Result<Outcome> {
    let mut opts = Options::new(
        Sandbox::this_program().context("cannot find the agensh binary to start the sandbox")?,
        env,
        work_dir.to_path_buf(),
    );
    opts.cpus = a.cpus;
    opts.compile_timeout = Duration::from_secs(a.compile_timeout);
    opts.tests_timeout = Duration::from_secs(a.tests_timeout);
    opts.keep = a.keep;
    opts.hide = a.hide.clone();
    let id = task.instance_id.clone();
    let mut on_step = |s: &str| spinner.set_message(format!("{id}: {s}"));
    Ok(evaluate::evaluate(task, submission, &opts, &mut on_step).await?)
}

/// One task's line of a run directory's evaluation.
#[derive(serde::Serialize)]
struct InstanceLine {
    instance_id: String,
    kept: f64,
    eval: f64,
    raw: f64,
    tests_passed: usize,
    tests: usize,
    error_code: Option<String>,
    evaluation: PathBuf,
}

/// `agensh eval RUN` without `--task`: every `RUN/<id>/submission.tar.gz` of a known task,
/// each evaluation written beside it as `<id>.eval.json` (or under `--output DIR`), and the
/// headline as ProgramBench's `aggregate` computes it, with the mean over attempted tasks.
async fn run_dir(a: &EvalArgs, data: &Path, env: TestEnv, spinner: &ProgressBar) -> Result<()> {
    let run = &a.submission;
    if !run.is_dir() {
        bail!(
            "{} is not a run directory — give --task for a single submission, or a directory holding <task id>/submission.tar.gz",
            run.display()
        );
    }
    let package_tasks = env.package_dir.join("data").join("tasks");
    let mut found = Vec::new();
    for e in std::fs::read_dir(run).with_context(|| format!("cannot read {}", run.display()))? {
        let e = e?;
        let id = e.file_name().to_string_lossy().into_owned();
        if e.path().join("submission.tar.gz").is_file() && env.task_dir(&id).is_some() {
            found.push(id);
        }
    }
    found.sort();
    if found.is_empty() {
        bail!(
            "{} holds no <task id>/submission.tar.gz of a task the programbench package knows",
            run.display()
        );
    }
    let total = a.total.unwrap_or_else(|| {
        env.task_ids()
            .iter()
            .filter(|id| !id.starts_with("testorg__"))
            .count()
    });
    let mut lines = Vec::new();
    for id in &found {
        let task = Task::load(id, Some(&package_tasks), a.blobs.as_deref())?;
        let submission = Submission::at(&run.join(id).join("submission.tar.gz"))?;
        let outcome = score(
            a,
            &task,
            &submission,
            env.clone(),
            &work_dir(data, &task),
            spinner,
        )
        .await?;
        let out_dir = a.output.clone().unwrap_or_else(|| run.clone()).join(id);
        std::fs::create_dir_all(&out_dir)?;
        let path = out_dir.join(format!("{id}.eval.json"));
        std::fs::write(&path, serde_json::to_vec_pretty(&outcome.evaluation)?)
            .with_context(|| format!("cannot write {}", path.display()))?;
        lines.push(InstanceLine {
            instance_id: id.clone(),
            kept: outcome.scores.kept,
            eval: outcome.scores.eval,
            raw: outcome.scores.raw,
            tests_passed: outcome.scores.passed,
            tests: outcome.scores.tests,
            error_code: outcome.evaluation.error_code.clone(),
            evaluation: path,
        });
    }
    spinner.finish_and_clear();
    let kept: Vec<f64> = lines.iter().map(|l| l.kept).collect();
    let headline = pb::aggregate(&kept, total)?;
    let mean = pb::mean_attempted(&kept);
    if a.json {
        json(&serde_json::json!({
            "instances": lines,
            "headline": headline,
            "mean_attempted": mean,
        }));
        return Ok(());
    }
    outln!(
        "{:<44}  {:>7}  {:>7}  {:>7}  {:>9}  NOTE",
        "TASK",
        "KEPT",
        "EVAL",
        "RAW",
        "TESTS"
    );
    for l in &lines {
        outln!(
            "{:<44}  {:>7.4}  {:>7.4}  {:>7.4}  {:>9}  {}",
            l.instance_id,
            l.kept,
            l.eval,
            l.raw,
            format!("{}/{}", l.tests_passed, l.tests),
            l.error_code.as_deref().unwrap_or("")
        );
    }
    outln!(
        "headline over {} task(s), {} attempted: mean {:.4}, resolved {:.1}%, near-resolved {:.1}%; mean over the attempted {:.4}",
        headline.n_instances_total,
        headline.n_instances_attempted,
        headline.mean_score,
        headline.resolved_pct,
        headline.near_resolved_pct,
        mean
    );
    Ok(())
}

pub fn spinner(quiet: bool) -> ProgressBar {
    if quiet || !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new_spinner();
    bar.set_style(
        ProgressStyle::with_template("{spinner} {elapsed:>4} {wide_msg}").expect("a template"),
    );
    bar.enable_steady_tick(Duration::from_millis(120));
    bar
}

pub async fn test_env(data: &std::path::Path, spinner: &ProgressBar) -> Result<TestEnv> {
    if let Some(e) = env::installed(data) {
        return Ok(e);
    }
    spinner.set_message("installing the ProgramBench test environment (once)");
    let e = env::ensure(data, |line| {
        let line = line.trim();
        if !line.is_empty() {
            spinner.set_message(format!("test environment: {line}"));
        }
    })
    .await
    .context("cannot install the ProgramBench test environment")?;
    Ok(e)
}

fn print_outcome(o: &Outcome, task: &Task) {
    let e = &o.evaluation;
    let s = &o.scores;
    match (&e.executable_hash, &e.error_code) {
        (Some(h), _) => outln!("{}: compiled (executable sha256 {h})", o.instance_id),
        (None, Some(code)) => {
            outln!("{}: {code}", o.instance_id);
            if let Some(d) = e.error_details.as_deref().filter(|d| !d.is_empty()) {
                for line in tail(d, 20) {
                    outln!("  | {line}");
                }
            }
        }
        (None, None) => outln!("{}: no active test branch", o.instance_id),
    }
    for b in &e.test_branches {
        let mine: Vec<_> = e.test_results.iter().filter(|r| &r.branch == b).collect();
        let passed = mine.iter().filter(|r| r.passed()).count();
        let not_run = mine
            .iter()
            .filter(|r| r.status == agensh_domain::programbench::Status::NotRun)
            .count();
        let failed = mine.len() - passed - not_run;
        let expected = task.expected(b).map_or(0, |t| t.len());
        outln!(
            "  branch {b}: {passed} passed, {failed} failed, {not_run} not run ({expected} expected)"
        );
        for err in e.test_branch_errors.get(b).into_iter().flatten() {
            outln!("    {}: {}", err.error_code, first_line(&err.error_details));
        }
    }
    if let Some(code) = e
        .error_code
        .as_ref()
        .filter(|_| e.executable_hash.is_some())
    {
        outln!(
            "  error: {code}: {}",
            e.error_details.as_deref().unwrap_or("")
        );
    }
    for w in &e.warnings {
        outln!("  warning: {w}");
    }
    outln!(
        "score: kept {:.4} ({}/{} tests passed), raw {:.4}, as `programbench eval` shows it {:.4} — in {:.1} s",
        s.kept,
        s.passed,
        s.tests,
        s.raw,
        s.eval,
        o.wall_time
    );
}

fn tail(text: &str, n: usize) -> Vec<&str> {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].to_vec()
}

fn first_line(text: &str) -> &str {
    text.lines().next().unwrap_or("")
}
