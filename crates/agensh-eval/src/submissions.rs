//! `agensh eval`'s work: one submission scored in the sandbox (or on the official image),
//! or every submission of a run directory with ProgramBench's headline over them.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use agensh_domain::programbench as pb;
use serde::Serialize;

use crate::env::TestEnv;
use crate::evaluate::{self, Options, Outcome, Submission};
use crate::run::Error;
use crate::sandbox::Sandbox;
use crate::task::Task;

/// How submissions are evaluated (`agensh eval`'s flags).
#[derive(Debug, Clone)]
pub struct Settings {
    /// `PYTEST_XDIST_AUTO_NUM_WORKERS`.
    pub cpus: usize,
    pub compile_timeout: Duration,
    pub tests_timeout: Duration,
    /// Keep the workspaces.
    pub keep: bool,
    /// Host directories the submission must not see.
    pub hide: Vec<PathBuf>,
}

/// A new directory for one evaluation's workspaces under the data directory.
pub fn work_dir(data: &Path, task: &Task) -> PathBuf {
    data.join("eval-work").join(format!(
        "{}-{}-{}",
        task.instance_id,
        std::process::id(),
        agensh_domain::time::unix_ms(std::time::SystemTime::now())
    ))
}

/// Scores `submission` against `task` in agensh's own sandbox; `on_step` hears each step,
/// as `<task id>: <step>`.
pub async fn score(
    task: &Task,
    submission: &Submission,
    env: TestEnv,
    work_dir: &Path,
    settings: &Settings,
    on_step: &mut (dyn FnMut(&str) + Send),
) -> Result<Outcome, Error> {
    let sandbox = Sandbox::this_program().map_err(|source| Error::Context {
        what: "cannot find the agensh binary to start the sandbox".into(),
        source,
    })?;
    let mut opts = Options::new(sandbox, env, work_dir.to_path_buf());
    opts.cpus = settings.cpus;
    opts.compile_timeout = settings.compile_timeout;
    opts.tests_timeout = settings.tests_timeout;
    opts.keep = settings.keep;
    opts.hide = settings.hide.clone();
    let id = task.instance_id.clone();
    let mut step = |s: &str| on_step(&format!("{id}: {s}"));
    Ok(evaluate::evaluate(task, submission, &opts, &mut step).await?)
}

/// Scores `submission` with `programbench eval` on the task's official image (Docker);
/// `work_dir` is removed afterwards unless `keep`.
pub async fn score_on_image(
    env: &TestEnv,
    task: &Task,
    submission: &Submission,
    blobs: Option<&Path>,
    work_dir: &Path,
    keep: bool,
) -> Result<Outcome, Error> {
    let started = Instant::now();
    let made = crate::docker::evaluate(env, task, submission, blobs, work_dir).await;
    if !keep {
        let _ = std::fs::remove_dir_all(work_dir);
    }
    let evaluation = made?;
    Ok(Outcome {
        instance_id: task.instance_id.clone(),
        scores: evaluate::Scores::of(&evaluation, task),
        evaluation,
        wall_time: started.elapsed().as_secs_f64(),
    })
}

/// One task's line of a run directory's evaluation.
#[derive(Debug, Clone, Serialize)]
pub struct InstanceLine {
    pub instance_id: String,
    pub kept: f64,
    pub eval: f64,
    pub raw: f64,
    pub tests_passed: usize,
    pub tests: usize,
    pub error_code: Option<String>,
    pub evaluation: PathBuf,
}

/// A run directory's evaluation: each task's line and the headline.
#[derive(Debug, Clone, Serialize)]
pub struct RunScores {
    pub instances: Vec<InstanceLine>,
    pub headline: pb::Headline,
    /// The mean over the attempted tasks.
    pub mean_attempted: f64,
}

/// Every `run/<id>/submission.tar.gz` of a task the package knows, each evaluation written
/// beside it as `<id>.eval.json` (or under `output/<id>/`), and the headline as
/// ProgramBench's `aggregate` computes it over `total` tasks (default: the package's,
/// test tasks left out).
#[allow(clippy::too_many_arguments)]
pub async fn score_run(
    run: &Path,
    output: Option<&Path>,
    total: Option<usize>,
    blobs: Option<&Path>,
    data: &Path,
    env: &TestEnv,
    settings: &Settings,
    on_step: &mut (dyn FnMut(&str) + Send),
) -> Result<RunScores, Error> {
    if !run.is_dir() {
        return Err(Error::Refused(format!(
            "{} is not a run directory — give --task for a single submission, or a directory holding <task id>/submission.tar.gz",
            run.display()
        )));
    }
    let package_tasks = env.package_dir.join("data").join("tasks");
    let mut found = Vec::new();
    let entries = std::fs::read_dir(run).map_err(|source| Error::Context {
        what: format!("cannot read {}", run.display()),
        source,
    })?;
    for e in entries {
        let e = e?;
        let id = e.file_name().to_string_lossy().into_owned();
        if e.path().join("submission.tar.gz").is_file() && env.task_dir(&id).is_some() {
            found.push(id);
        }
    }
    found.sort();
    if found.is_empty() {
        return Err(Error::Refused(format!(
            "{} holds no <task id>/submission.tar.gz of a task the programbench package knows",
            run.display()
        )));
    }
    let total = total.unwrap_or_else(|| {
        env.task_ids()
            .iter()
            .filter(|id| !id.starts_with("testorg__"))
            .count()
    });
    let mut lines = Vec::new();
    for id in &found {
        let task = Task::load(id, Some(&package_tasks), blobs)?;
        let submission = Submission::at(&run.join(id).join("submission.tar.gz"))?;
        let outcome = score(
            &task,
            &submission,
            env.clone(),
            &work_dir(data, &task),
            settings,
            on_step,
        )
        .await?;
        let out_dir = output.unwrap_or(run).join(id);
        std::fs::create_dir_all(&out_dir)?;
        let path = out_dir.join(format!("{id}.eval.json"));
        std::fs::write(&path, serde_json::to_vec_pretty(&outcome.evaluation)?).map_err(
            |source| Error::Context {
                what: format!("cannot write {}", path.display()),
                source,
            },
        )?;
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
    let kept: Vec<f64> = lines.iter().map(|l| l.kept).collect();
    Ok(RunScores {
        headline: pb::aggregate(&kept, total)?,
        mean_attempted: pb::mean_attempted(&kept),
        instances: lines,
    })
}
