//! `agensh eval` and `agensh bench install`: ProgramBench's evaluation in agensh's own
//! sandbox (agensh-eval does the work; this file parses, reports progress and prints).

use std::io::IsTerminal;
use std::path::Path;
use std::time::Duration;

use agensh_eval::env::{self, TestEnv};
use agensh_eval::evaluate::Submission;
use agensh_eval::show;
use agensh_eval::submissions::{self, Settings};
use agensh_eval::task::Task;
use anyhow::{bail, Context, Result};
use indicatif::{ProgressBar, ProgressStyle};

use crate::cli::EvalArgs;
use crate::output::{json, json_or, lines};

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
    let work_dir = submissions::work_dir(&data, &task);
    let outcome = if a.docker {
        spinner.set_message(format!(
            "{}: programbench eval on the official image",
            task.instance_id
        ));
        submissions::score_on_image(
            &env,
            &task,
            &submission,
            a.blobs.as_deref(),
            &work_dir,
            a.keep,
        )
        .await
        .map_err(lib)?
    } else {
        let mut on_step = |s: &str| spinner.set_message(s.to_string());
        submissions::score(
            &task,
            &submission,
            env,
            &work_dir,
            &settings(&a),
            &mut on_step,
        )
        .await
        .map_err(lib)?
    };
    spinner.finish_and_clear();
    if let Some(path) = &a.output {
        let text = serde_json::to_string_pretty(&outcome.evaluation)?;
        std::fs::write(path, text).with_context(|| format!("cannot write {}", path.display()))?;
    }
    if a.json {
        json(&outcome);
    } else {
        lines(show::outcome(&outcome, &task));
        if a.keep {
            outln!("workspaces kept in {}", work_dir.display());
        }
        if let Some(path) = &a.output {
            outln!("evaluation written to {}", path.display());
        }
    }
    Ok(())
}

fn settings(a: &EvalArgs) -> Settings {
    Settings {
        cpus: a.cpus,
        compile_timeout: Duration::from_secs(a.compile_timeout),
        tests_timeout: Duration::from_secs(a.tests_timeout),
        keep: a.keep,
        hide: a.hide.clone(),
    }
}

/// agensh-eval's error as the command line reports it: the domain's own errors keep their
/// exit code.
pub fn lib(e: agensh_eval::run::Error) -> anyhow::Error {
    match e {
        agensh_eval::run::Error::Domain(d) => d.into(),
        e => e.into(),
    }
}

/// `agensh eval RUN` without `--task`: every `RUN/<id>/submission.tar.gz` of a known task
/// scored (agensh-eval's `score_run`), and the headline with the mean over attempted tasks.
async fn run_dir(a: &EvalArgs, data: &Path, env: TestEnv, spinner: &ProgressBar) -> Result<()> {
    let mut on_step = |s: &str| spinner.set_message(s.to_string());
    let scores = submissions::score_run(
        &a.submission,
        a.output.as_deref(),
        a.total,
        a.blobs.as_deref(),
        data,
        &env,
        &settings(a),
        &mut on_step,
    )
    .await
    .map_err(lib)?;
    spinner.finish_and_clear();
    json_or(a.json, &scores, show::scores);
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
