//! `agensh eval` and `agensh bench install`: ProgramBench's evaluation in agensh's own
//! sandbox (agensh-eval does the work; this file parses, reports progress and prints).

use std::io::IsTerminal;
use std::time::Duration;

use agensh_eval::env::{self, TestEnv};
use agensh_eval::evaluate::{self, Options, Outcome, Submission};
use agensh_eval::sandbox::Sandbox;
use agensh_eval::task::Task;
use anyhow::{Context, Result};
use indicatif::{ProgressBar, ProgressStyle};

use crate::cli::EvalArgs;
use crate::output::{json, now_ms};

pub async fn run(a: EvalArgs) -> Result<()> {
    let submission = Submission::at(&a.submission)?;
    let data = agensh_model::data_dir()?;
    let spinner = spinner(a.json);
    let env = test_env(&data, &spinner).await?;
    let package_tasks = env.package_dir.join("data").join("tasks");
    let task = Task::load(&a.task, Some(&package_tasks), a.blobs.as_deref())?;
    let work_dir = data.join("eval-work").join(format!(
        "{}-{}-{}",
        task.instance_id,
        std::process::id(),
        now_ms()
    ));
    let mut opts = Options::new(
        Sandbox::this_program().context("cannot find the agensh binary to start the sandbox")?,
        env,
        work_dir.clone(),
    );
    opts.cpus = a.cpus;
    opts.compile_timeout = Duration::from_secs(a.compile_timeout);
    opts.tests_timeout = Duration::from_secs(a.tests_timeout);
    opts.keep = a.keep;
    opts.hide = a.hide.clone();
    let id = task.instance_id.clone();
    let mut on_step = |s: &str| spinner.set_message(format!("{id}: {s}"));
    let outcome = evaluate::evaluate(&task, &submission, &opts, &mut on_step).await?;
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
