//! `agensh bench install|programbench|report`: ProgramBench runs. An organization seeded
//! from a task runs as `agensh run` does, and beside it a checkpointer tags `main` on
//! schedule, exports it as a submission and scores it in the background (agensh-eval does
//! the scoring and keeps the report; this file wires it to the run).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agensh_domain::config::Config;
use agensh_domain::prompt::{render, PROGRAMBENCH_PACK_TEMPLATE};
use agensh_domain::worker::WorkerStatus;
use agensh_eval::bench::{self, Checkpoint, Report, Score, Setup};
use agensh_eval::env::TestEnv;
use agensh_eval::evaluate::{self, Options, Submission};
use agensh_eval::sandbox::Sandbox;
use agensh_eval::task::Task;
use agensh_hub::state_dir;
use anyhow::{bail, Context, Result};
use sha2::{Digest, Sha256};
use tokio::sync::mpsc;

use crate::cli::{BenchArgs, BenchCommand, Global, ProgrambenchArgs, RunArgs};
use crate::cmd::eval::{spinner, test_env};
use crate::cmd::run::{run_with, RunContext};
use crate::output::{json, now_ms};

const DEFAULT_WORKERS: usize = 8;
const DEFAULT_HOURS: f64 = 6.0;
const DEFAULT_CHECKPOINT_MINUTES: f64 = 30.0;
/// Scoring runs beside the workers at this niceness.
const SCORING_NICE: i32 = 10;
const PACK_FILE: &str = "programbench.md";

pub async fn run(g: &Global, a: BenchArgs) -> Result<()> {
    match a.command {
        BenchCommand::Install { json: as_json } => install(as_json).await,
        BenchCommand::Programbench(p) => programbench(g, *p).await,
        BenchCommand::Report {
            runs,
            threshold,
            out,
            json: as_json,
        } => report(&runs, threshold, &out, as_json),
    }
}

async fn install(as_json: bool) -> Result<()> {
    let data = agensh_model::data_dir()?;
    let spinner = spinner(as_json);
    let env = test_env(&data, &spinner).await?;
    spinner.finish_and_clear();
    if as_json {
        json(&env);
    } else {
        outln!(
            "the ProgramBench test environment is installed: {} ({})",
            env.venv.display(),
            env.packages.join(", ")
        );
        outln!("tasks of the package: {}", env.task_ids().len());
    }
    Ok(())
}

/// What the checkpointer and the scorer share.
#[derive(Clone)]
struct Bench {
    org: PathBuf,
    report: Arc<Mutex<Report>>,
    task: Arc<Task>,
    env: TestEnv,
    data: PathBuf,
    /// The running hub, as its admin: each scored checkpoint goes to the dashboard's curve.
    hub: Option<agensh_client::Client>,
}

impl Bench {
    fn save(&self) -> Result<()> {
        let r = self.report.lock().expect("report lock").clone();
        r.save(&self.org)?;
        Ok(())
    }
}

async fn programbench(g: &Global, a: ProgrambenchArgs) -> Result<()> {
    let data = agensh_model::data_dir()?;
    let spinner = spinner(a.json);
    let env = test_env(&data, &spinner).await?;
    spinner.finish_and_clear();
    let tasks = env.package_dir.join("data").join("tasks");
    let task = Task::load(&a.task, Some(&tasks), a.blobs.as_deref())?;
    if task.active_branches().is_empty() {
        bail!(
            "{} has no active test branch in tests.json: there is nothing to score it with",
            task.instance_id
        );
    }
    for b in task.active_branches() {
        task.test_files(&b)?;
    }
    let workers = a.flags.workers.unwrap_or(DEFAULT_WORKERS);
    let dir = a
        .run_dir
        .clone()
        .unwrap_or_else(|| PathBuf::from(format!("programbench-{}-{workers}w", task.instance_id)));
    let org = std::path::absolute(&dir)?;
    let report = match Report::load(&org)? {
        Some(r) => resumed(r, &a, &task)?,
        None => start(&org, &a, &task, workers).await?,
    };
    let setup = report.setup.clone();
    let bench = Bench {
        org: org.clone(),
        report: Arc::new(Mutex::new(report)),
        task: Arc::new(task),
        env,
        data,
        hub: None,
    };
    let elapsed_hours = (now_ms() - setup.started_at) as f64 / 3_600_000.0;
    let remaining = setup.hours - elapsed_hours;
    if remaining <= 0.0 {
        eprintln!(
            "the run's {} h are over: taking and scoring the checkpoints still missing",
            setup.hours
        );
        finish_without_workers(&bench).await?;
    } else {
        let mut flags = a.flags.clone();
        flags.workers = Some(setup.workers);
        flags.hours = Some(remaining);
        let run_args = RunArgs {
            dir: Some(org.clone()),
            flags,
            json: a.json,
        };
        let side = bench.clone();
        run_with(
            g,
            run_args,
            Some(Box::new(move |ctx| Box::pin(checkpointer(ctx, side)))),
            // With --json the report is the one document printed.
            !a.json,
        )
        .await?;
    }
    let report = bench.report.lock().expect("report lock").clone();
    if a.json {
        json(&report);
    } else {
        print_report(&report, &org);
    }
    Ok(())
}

/// A new run: the organization seeded from the task, the reference beside it, the pack.
async fn start(org: &Path, a: &ProgrambenchArgs, task: &Task, workers: usize) -> Result<Report> {
    let bench_dir = bench::bench_dir(org);
    let from_image = bench_dir.join("image");
    let (reference, workspace) = if a.from_image {
        let reference = bench_dir.join("image-reference").join("executable");
        agensh_eval::docker::cleanroom(task, &from_image, &reference).await?;
        (reference, Some(from_image.clone()))
    } else {
        let Some(reference) = a.reference.clone() else {
            bail!(
                "--reference is needed to start a run: the reference executable the workers observe (a path), or --from-image where Docker is"
            );
        };
        (reference, a.workspace.clone())
    };
    let reference = &reference;
    let bytes = std::fs::read(reference).with_context(|| {
        format!(
            "cannot read the reference executable {}",
            reference.display()
        )
    })?;
    let hours = a.flags.hours.unwrap_or(DEFAULT_HOURS);
    let minutes = a.checkpoint_minutes.unwrap_or(DEFAULT_CHECKPOINT_MINUTES);
    if !(hours > 0.0 && hours.is_finite()) {
        bail!(
            "--hours must be more than 0 for a ProgramBench run (it has checkpoints on a schedule)"
        );
    }
    if !(minutes > 0.0 && minutes.is_finite()) {
        bail!("--checkpoint-minutes must be more than 0");
    }
    let name = reference
        .file_name()
        .map_or_else(|| "reference".into(), |n| n.to_string_lossy().into_owned());
    let placed = bench_dir.join("reference").join(&name);
    // The pack and the seed are written before the organization exists: `init` refuses a
    // directory that holds one already, and nothing here is half-made if it fails.
    std::fs::create_dir_all(placed.parent().expect("a parent"))
        .with_context(|| format!("cannot create {}", bench_dir.display()))?;
    std::fs::write(&placed, &bytes)
        .with_context(|| format!("cannot write {}", placed.display()))?;
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&placed, std::fs::Permissions::from_mode(0o755))?;
    }
    let pack = render(
        PROGRAMBENCH_PACK_TEMPLATE,
        &[
            ("task", &task.instance_id),
            ("repository", &task.yaml.repository),
            ("language", &task.yaml.language),
            ("reference", &placed.display().to_string()),
            ("checkpoint_minutes", &format!("{minutes}")),
        ],
    )?;
    std::fs::write(bench_dir.join(PACK_FILE), pack)?;
    let goal = format!(
        "Rebuild the program behind {} so that it behaves exactly like it: `compile.sh` at the repository's root builds `./executable`, which must pass the hidden tests that compare it with the reference executable {}.",
        task.instance_id,
        placed.display()
    );
    let mut config = Config::with_goal(&goal);
    config.organization.pack = vec![format!("{}/{PACK_FILE}", bench::BENCH_DIR)];
    config.run.workers = workers;
    config.run.hours = hours;
    let seed = match &workspace {
        Some(ws) => Some(clean_seed(ws, &bench_dir.join("seed"), task, &bytes)?),
        None => None,
    };
    let made = crate::cmd::init::create(org, &config, seed.as_deref()).await;
    if let Some(s) = &seed {
        let _ = std::fs::remove_dir_all(s);
    }
    let _ = std::fs::remove_dir_all(&from_image);
    let _ = std::fs::remove_dir_all(bench_dir.join("image-reference"));
    made?;
    let report = Report {
        setup: Setup {
            task: a.task.clone(),
            instance_id: task.instance_id.clone(),
            reference: placed,
            workers,
            hours,
            checkpoint_minutes: minutes,
            agent: a.flags.agent.clone().unwrap_or_else(|| "builtin".into()),
            started_at: now_ms(),
        },
        economy: None,
        checkpoints: Vec::new(),
    };
    report.save(org)?;
    eprintln!(
        "created the ProgramBench run {} ({} worker(s), {hours} h, a checkpoint every {minutes} min)",
        org.display(),
        workers
    );
    Ok(report)
}

/// A run found in the directory: its set-up stands; flags that contradict it are refused.
fn resumed(r: Report, a: &ProgrambenchArgs, task: &Task) -> Result<Report> {
    let s = &r.setup;
    if s.instance_id != task.instance_id {
        bail!(
            "this directory holds a run of {}, not {} — give another directory",
            s.instance_id,
            task.instance_id
        );
    }
    let clash = |what: &str, given: String, kept: String| {
        anyhow::anyhow!("this run was started with {what} {kept}; a resumed run keeps it — leave out the flag (given {given}) or start another run in a new directory")
    };
    if let Some(w) = a.flags.workers.filter(|w| *w != s.workers) {
        return Err(clash("--workers", w.to_string(), s.workers.to_string()));
    }
    if let Some(h) = a.flags.hours.filter(|h| *h != s.hours) {
        return Err(clash("--hours", h.to_string(), s.hours.to_string()));
    }
    if let Some(m) = a.checkpoint_minutes.filter(|m| *m != s.checkpoint_minutes) {
        return Err(clash(
            "--checkpoint-minutes",
            m.to_string(),
            s.checkpoint_minutes.to_string(),
        ));
    }
    let scored = r.checkpoints.iter().filter(|c| c.score.is_some()).count();
    eprintln!(
        "resuming the ProgramBench run of {} ({} checkpoint(s) taken, {scored} scored)",
        s.instance_id,
        r.checkpoints.len()
    );
    Ok(r)
}

/// The cleanroom workspace without git metadata and without any file whose sha256 is the
/// reference's or one of the task's clean hashes, copied to `into`.
fn clean_seed(from: &Path, into: &Path, task: &Task, reference: &[u8]) -> Result<PathBuf> {
    if !from.is_dir() {
        bail!("--workspace {} is not a directory", from.display());
    }
    let _ = std::fs::remove_dir_all(into);
    evaluate::copy_tree(from, into)?;
    let mut banned: Vec<String> = task.yaml.eval_clean_hashes.clone();
    banned.push(evaluate::hex(&Sha256::digest(reference)));
    fn walk(dir: &Path, banned: &[String]) -> Result<()> {
        for e in std::fs::read_dir(dir)? {
            let e = e?;
            let p = e.path();
            let kind = e.file_type()?;
            if kind.is_dir() {
                if e.file_name() == ".git" {
                    std::fs::remove_dir_all(&p)?;
                } else {
                    walk(&p, banned)?;
                }
            } else if kind.is_file() {
                let h = evaluate::hex(&Sha256::digest(std::fs::read(&p)?));
                if banned.contains(&h) {
                    eprintln!("left out of main: {} (the reference's bytes)", p.display());
                    std::fs::remove_file(&p)?;
                }
            }
        }
        Ok(())
    }
    walk(into, &banned)?;
    Ok(into.to_path_buf())
}

/// Beside the run: takes each checkpoint when it is due and hands it to the scorer.
async fn checkpointer(mut ctx: RunContext, bench: Bench) -> Result<()> {
    let bench = Bench {
        hub: ctx.admin.clone(),
        ..bench
    };
    {
        let mut r = bench.report.lock().expect("report lock");
        r.setup.agent = ctx.agent.clone();
    }
    bench.save()?;
    // A resumed run: the curve so far.
    let scored: Vec<Checkpoint> = bench
        .report
        .lock()
        .expect("report lock")
        .checkpoints
        .iter()
        .filter(|c| c.score.is_some())
        .cloned()
        .collect();
    for c in &scored {
        post_score(&bench, c).await;
    }
    let (tx, rx) = mpsc::unbounded_channel();
    let scorer = tokio::spawn(scorer(rx, bench.clone()));
    let (setup, last_due, unscored_now) = {
        let r = bench.report.lock().expect("report lock");
        (r.setup.clone(), last_due(&r), unscored(&r))
    };
    for i in unscored_now {
        let _ = tx.send(i);
    }
    let due = bench::schedule(setup.hours, setup.checkpoint_minutes);
    let end = due.len() - 1;
    let mut stopped = false;
    for (slot, minutes) in due.iter().enumerate() {
        if last_due.is_some_and(|d| *minutes <= d + 1e-9) {
            continue;
        }
        let at = setup.started_at + (minutes * 60_000.0) as i64;
        if slot < end {
            let wait = Duration::from_millis((at - now_ms()).max(0) as u64);
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = ctx.ended.wait_for(|e| e.is_some()) => {}
            }
        } else {
            let _ = ctx.ended.wait_for(|e| e.is_some()).await;
        }
        let ended = *ctx.ended.borrow();
        if ended == Some(false) || ctx.stop.is_shutdown() {
            stopped = true;
            break;
        }
        if ended == Some(true) && slot < end {
            // Done early (every worker ended): straight to the last checkpoint.
            continue;
        }
        let c = match take(&ctx, &bench, *minutes).await {
            Ok(c) => c,
            Err(e) => {
                eprintln!("the checkpoint due at {minutes:.1} min could not be taken: {e:#}");
                continue;
            }
        };
        let index = c.index;
        eprintln!(
            "checkpoint {index} ({:.2} h): main {} exported; scoring in the background",
            c.hours(),
            short(&c.commit)
        );
        bench
            .report
            .lock()
            .expect("report lock")
            .checkpoints
            .push(c);
        bench.save()?;
        let _ = tx.send(index);
    }
    drop(tx);
    if !stopped {
        // Cost per result, from what the run's hub recorded: split at the goal when it was
        // met, else at the last merge.
        let goal = ctx.goal.borrow().clone().unwrap_or_default();
        match agensh_hub::goal::economy(&*ctx.store, &goal).await {
            Ok(e) => {
                eprintln!("cost: {}", e.line());
                bench.report.lock().expect("report lock").economy = Some(e);
                bench.save()?;
            }
            Err(e) => eprintln!("the run's cost per result could not be read: {e}"),
        }
    }
    if stopped {
        // The evaluation under way is dropped (its sandbox dies with it); what was not
        // scored is scored when the run is resumed.
        scorer.abort();
        let _ = scorer.await;
        eprintln!("stopped: run `agensh bench programbench` on the same directory to resume");
        Ok(())
    } else {
        scorer.await.context("the scorer stopped")?
    }
}

fn short(commit: &str) -> &str {
    &commit[..commit.len().min(10)]
}

/// The checkpoints taken but not scored yet.
fn unscored(r: &Report) -> Vec<usize> {
    r.checkpoints
        .iter()
        .filter(|c| c.score.is_none())
        .map(|c| c.index)
        .collect()
}

/// When the last checkpoint taken was due, in minutes.
fn last_due(r: &Report) -> Option<f64> {
    r.checkpoints.last().map(|c| c.due_minutes)
}

/// Tags and exports `main` as the next checkpoint and notes what the organization has
/// spent and done so far.
async fn take(ctx: &RunContext, bench: &Bench, minutes: f64) -> Result<Checkpoint> {
    let index = bench.report.lock().expect("report lock").checkpoints.len();
    let repo = state_dir(&bench.org).join(agensh_workspace::REPO_DIR);
    let commit = bench::main_commit(&repo).await?;
    let tag = bench::tag_name(index);
    bench::tag(&repo, &tag, &commit).await?;
    let submission = bench::checkpoint_dir(index).join("submission.tar.gz");
    bench::export(&repo, &commit, &bench.org.join(&submission)).await?;
    let usage = ctx.store.model_usage(None).await?;
    let stats = ctx.store.stats().await?;
    let alive = ctx
        .store
        .list_workers(now_ms())
        .await?
        .iter()
        .filter(|w| w.status != WorkerStatus::Dead)
        .count();
    Ok(Checkpoint {
        index,
        due_minutes: minutes,
        taken_at: now_ms(),
        commit,
        tag,
        submission,
        tokens: usage.iter().map(|u| u.input_tokens + u.output_tokens).sum(),
        cost_usd: usage.iter().map(|u| u.cost_usd).sum(),
        merges: stats.prs_merged,
        workers_alive: alive,
        score: None,
    })
}

/// Scores checkpoints one at a time, in the order they come, at a low priority.
async fn scorer(mut rx: mpsc::UnboundedReceiver<usize>, bench: Bench) -> Result<()> {
    while let Some(index) = rx.recv().await {
        // One checkpoint that cannot be scored (a broken sandbox, a full disk) must not stop
        // the scoring of the next ones, nor the run.
        if let Err(e) = score(&bench, index, SCORING_NICE).await {
            eprintln!(
                "checkpoint {index} could not be scored: {e:#} — it is scored when the run is resumed"
            );
        }
    }
    Ok(())
}

async fn score(bench: &Bench, index: usize, nice: i32) -> Result<()> {
    let submission = {
        let r = bench.report.lock().expect("report lock");
        let Some(c) = r.checkpoints.get(index) else {
            return Ok(());
        };
        if c.score.is_some() {
            return Ok(());
        }
        bench.org.join(&c.submission)
    };
    // One line per evaluation started: a checkpoint scored twice would show here.
    {
        use std::io::Write;
        let log = bench::bench_dir(&bench.org).join(bench::SCORING_LOG);
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .with_context(|| format!("cannot write {}", log.display()))?;
        writeln!(f, "{} {index}", now_ms())?;
    }
    let work = bench.data.join("eval-work").join(format!(
        "{}-{}-{index}",
        bench.task.instance_id,
        std::process::id()
    ));
    let mut opts = Options::new(Sandbox::this_program()?, bench.env.clone(), work);
    opts.cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    opts.nice = nice;
    // The submission sees nothing of the organization: not the reference, not the
    // workers' checkouts.
    opts.hide = vec![bench.org.clone()];
    let outcome = evaluate::evaluate(
        &bench.task,
        &Submission::at(&submission)?,
        &opts,
        &mut |_| {},
    )
    .await?;
    let eval_path = bench::checkpoint_dir(index).join("eval.json");
    std::fs::write(
        bench.org.join(&eval_path),
        serde_json::to_vec_pretty(&outcome.evaluation)?,
    )?;
    let s = Score::of(&outcome, eval_path, now_ms());
    eprintln!(
        "checkpoint {index} scored: kept {:.4} ({}/{} tests){}",
        s.kept,
        s.tests_passed,
        s.tests,
        s.error_code
            .as_deref()
            .map(|c| format!(" — {c}"))
            .unwrap_or_default()
    );
    let checkpoint = {
        let mut r = bench.report.lock().expect("report lock");
        r.checkpoints[index].score = Some(s);
        r.checkpoints[index].clone()
    };
    bench.save()?;
    post_score(bench, &checkpoint).await;
    Ok(())
}

/// Gives the hub a scored checkpoint for the dashboard's curve; the run goes on without
/// it when the hub does not take it.
async fn post_score(bench: &Bench, c: &Checkpoint) {
    let (Some(hub), Some(s)) = (&bench.hub, &c.score) else {
        return;
    };
    let score = agensh_protocol::dashboard::Score {
        at: c.taken_at,
        score: s.kept.clamp(0.0, 1.0),
        label: "programbench kept".into(),
        commit: Some(c.commit.clone()),
    };
    if let Err(e) = hub.add_score(&score).await {
        tracing::warn!(
            "the hub did not take the score of checkpoint {}: {e}",
            c.index
        );
    }
}

/// The run's time is over: the last checkpoint (if missing) and every unscored one.
async fn finish_without_workers(bench: &Bench) -> Result<()> {
    let (setup, last) = {
        let r = bench.report.lock().expect("report lock");
        (r.setup.clone(), last_due(&r))
    };
    let end = setup.hours * 60.0;
    if last.is_none_or(|d| d < end - 1e-9) {
        let store: Arc<dyn agensh_store::Store> = Arc::new(agensh_store::SqliteStore::open(
            &state_dir(&bench.org).join(agensh_hub::STORE_FILE),
        )?);
        let (_tx, ended) = tokio::sync::watch::channel(Some(true));
        let ctx = RunContext {
            store,
            stop: agensh_process::Shutdown::never(),
            ended,
            agent: setup.agent.clone(),
            admin: None,
            goal: tokio::sync::watch::channel(None).1,
        };
        // The checkpoints between are not taken after the fact: main has moved on since.
        let c = take(&ctx, bench, end).await?;
        bench
            .report
            .lock()
            .expect("report lock")
            .checkpoints
            .push(c);
    }
    bench.save()?;
    let missing = unscored(&bench.report.lock().expect("report lock"));
    for i in missing {
        score(bench, i, 0).await?;
    }
    Ok(())
}

fn print_report(r: &Report, org: &Path) {
    outln!(
        "{}: {} worker(s), {} h, {} ({} checkpoint(s))",
        r.setup.instance_id,
        r.setup.workers,
        r.setup.hours,
        r.setup.agent,
        r.checkpoints.len()
    );
    outln!("  CHECKPOINT  HOURS  COMMIT      KEPT    RAW     TESTS    MERGES  TOKENS");
    for c in &r.checkpoints {
        let (kept, raw, tests) = match &c.score {
            Some(s) => (
                format!("{:.4}", s.kept),
                format!("{:.4}", s.raw),
                format!("{}/{}", s.tests_passed, s.tests),
            ),
            None => ("-".into(), "-".into(), "not scored".into()),
        };
        let note = c
            .score
            .as_ref()
            .and_then(|s| s.error_code.clone())
            .unwrap_or_default();
        outln!(
            "  {:<10}  {:>5.2}  {:<10}  {kept:<6}  {raw:<6}  {tests:<7}  {:>6}  {:>6}  {note}",
            c.index,
            c.hours(),
            short(&c.commit),
            c.merges,
            c.tokens
        );
    }
    if let Some(e) = &r.economy {
        outln!("cost: {}", e.line());
    }
    let b = bench::bench_dir(org);
    outln!(
        "report: {}  chart: {} and {}",
        b.join(bench::REPORT).display(),
        b.join("chart.png").display(),
        b.join("chart.svg").display()
    );
}

fn report(runs: &[PathBuf], threshold: f64, out: &Path, as_json: bool) -> Result<()> {
    let mut loaded = Vec::new();
    for dir in runs {
        let r = Report::load(dir)?.with_context(|| {
            format!(
                "{} holds no ProgramBench run (no {})",
                dir.display(),
                Report::path(dir).display()
            )
        })?;
        loaded.push((dir.clone(), r));
    }
    let (chart, lines) = bench::combine(&loaded, threshold);
    // Appended, not `with_extension`: a name such as `run-1.5b` keeps its dot.
    let with = |ext: &str| {
        let mut p = out.as_os_str().to_owned();
        p.push(format!(".{ext}"));
        PathBuf::from(p)
    };
    let (svg, png) = (with("svg"), with("png"));
    std::fs::write(&svg, agensh_eval::chart::svg(&chart))
        .with_context(|| format!("cannot write {}", svg.display()))?;
    std::fs::write(&png, agensh_eval::chart::png(&chart))
        .with_context(|| format!("cannot write {}", png.display()))?;
    if as_json {
        json(&serde_json::json!({
            "threshold": threshold,
            "runs": lines,
            "chart": {"svg": svg, "png": png},
        }));
        return Ok(());
    }
    outln!(
        "{:>5}  {:>5}  {:<28}  {:>11}  {:>9}  {:>16}  {:>12}  {:>9}",
        "N",
        "TASKS",
        "AGENT",
        "FINAL SCORE",
        "AT HOURS",
        format!("TIME TO {:.0}%", threshold * 100.0),
        "TOKENS",
        "COST USD"
    );
    for l in &lines {
        outln!(
            "{:>5}  {:>5}  {:<28}  {:>11}  {:>9}  {:>16}  {:>12}  {:>9.2}",
            l.workers,
            l.tasks.len(),
            truncate(&l.agent, 28),
            l.final_score.map_or("-".into(), |s| format!("{s:.4}")),
            l.final_hours.map_or("-".into(), |h| format!("{h:.2}")),
            l.time_to_threshold
                .map_or("not reached".into(), |h| format!("{h:.2} h")),
            l.tokens,
            l.cost_usd
        );
    }
    outln!("chart: {} and {}", png.display(), svg.display());
    Ok(())
}

fn truncate(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        let mut t: String = s.chars().take(n - 1).collect();
        t.push('…');
        t
    }
}
