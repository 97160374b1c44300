//! `agensh bench install|programbench|report`: ProgramBench runs. An organization seeded
//! from a task runs as `agensh run` does, and beside it agensh-eval's checkpointer
//! (`agensh_eval::run`) tags `main` on schedule, exports it and scores it in the background;
//! this file gives it the run's store and hub, and prints.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use agensh_domain::goal::{Economy, GoalStatus};
use agensh_domain::worker::WorkerStatus;
use agensh_eval::bench::{Checkpoint, Report};
use agensh_eval::run::{self, Bench, Organization, Spent};
use agensh_eval::show;
use agensh_eval::task::Task;
use agensh_hub::state_dir;
use agensh_store::Store;
use anyhow::Result;
use tokio::sync::watch;

use crate::cli::{BenchArgs, BenchCommand, Global, ProgrambenchArgs, RunArgs};
use crate::cmd::eval::{lib, spinner, test_env};
use crate::cmd::run::{run_with, RunContext};
use crate::output::{json, json_or, lines, now_ms};

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

/// The running organization as the checkpointer sees it: its store and hub.
struct Hub {
    store: Arc<dyn Store>,
    /// The running hub, as its admin: each scored checkpoint goes to the dashboard's curve.
    admin: Option<agensh_client::Client>,
    goal: watch::Receiver<Option<GoalStatus>>,
}

impl Organization for Hub {
    async fn spent(&self) -> Result<Spent, agensh_domain::Error> {
        let usage = self.store.model_usage(None).await?;
        let stats = self.store.stats().await?;
        let alive = self
            .store
            .list_workers(now_ms())
            .await?
            .iter()
            .filter(|w| w.status != WorkerStatus::Dead)
            .count();
        Ok(Spent {
            tokens: usage.iter().map(|u| u.input_tokens + u.output_tokens).sum(),
            cost_usd: usage.iter().map(|u| u.cost_usd).sum(),
            merges: stats.prs_merged,
            workers_alive: alive,
        })
    }

    async fn economy(&self) -> Result<Economy, agensh_domain::Error> {
        let goal = self.goal.borrow().clone().unwrap_or_default();
        agensh_hub::goal::economy(&*self.store, &goal).await
    }

    async fn post_score(&self, c: &Checkpoint) {
        let (Some(hub), Some(s)) = (&self.admin, &c.score) else {
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
}

async fn programbench(g: &Global, a: ProgrambenchArgs) -> Result<()> {
    let data = agensh_model::data_dir()?;
    let spinner = spinner(a.json);
    let env = test_env(&data, &spinner).await?;
    spinner.finish_and_clear();
    let tasks = env.package_dir.join("data").join("tasks");
    let task = run::scorable_task(&a.task, &tasks, a.blobs.as_deref()).map_err(lib)?;
    let workers = a.flags.workers.unwrap_or(run::DEFAULT_WORKERS);
    let dir = a
        .run_dir
        .clone()
        .unwrap_or_else(|| run::default_dir(&task, workers));
    let org = std::path::absolute(&dir)?;
    let start = run::Start {
        task: a.task.clone(),
        reference: a.reference.clone(),
        workspace: a.workspace.clone(),
        from_image: a.from_image,
        workers,
        hours: a.flags.hours,
        checkpoint_minutes: a.checkpoint_minutes,
        agent: a.flags.agent.clone(),
    };
    let report = match Report::load(&org)? {
        Some(r) => {
            let r = run::resume(r, &start, a.flags.workers, &task).map_err(lib)?;
            let scored = r.checkpoints.iter().filter(|c| c.score.is_some()).count();
            eprintln!(
                "resuming the ProgramBench run of {} ({} checkpoint(s) taken, {scored} scored)",
                r.setup.instance_id,
                r.checkpoints.len()
            );
            r
        }
        None => begin(&org, &start, &task).await?,
    };
    let setup = report.setup.clone();
    let repo = state_dir(&org).join(agensh_workspace::REPO_DIR);
    let note: run::Note = Arc::new(|line: &str| eprintln!("{line}"));
    let bench = Bench::new(org.clone(), repo, report, task, env, data, note);
    let remaining = bench.remaining_hours(now_ms());
    if remaining <= 0.0 {
        eprintln!(
            "the run's {} h are over: taking and scoring the checkpoints still missing",
            setup.hours
        );
        let store_file = state_dir(&org).join(agensh_hub::STORE_FILE);
        bench
            .finish_without_workers(|| {
                Ok(Hub {
                    store: Arc::new(agensh_store::SqliteStore::open(&store_file)?),
                    admin: None,
                    goal: watch::channel(None).1,
                })
            })
            .await
            .map_err(lib)?;
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
    json_or(a.json, &bench.report(), |r| show::report(r, &org));
    Ok(())
}

/// A new run: the organization seeded from the task, the reference beside it, the pack.
async fn begin(org: &Path, start: &run::Start, task: &Task) -> Result<Report> {
    let prepared = run::prepare(org, start, task, &|line| eprintln!("{line}"))
        .await
        .map_err(lib)?;
    let made = agensh_hub::org::create(org, &prepared.config, prepared.seed.as_deref()).await;
    prepared.clean(org);
    made?;
    let report = prepared.begin(org, start, task).map_err(lib)?;
    eprintln!(
        "created the ProgramBench run {} ({} worker(s), {} h, a checkpoint every {} min)",
        org.display(),
        report.setup.workers,
        report.setup.hours,
        report.setup.checkpoint_minutes
    );
    Ok(report)
}

/// Beside the run: agensh-eval's checkpointer, given the run's store and hub.
async fn checkpointer(ctx: RunContext, bench: Bench) -> Result<()> {
    let hub = Hub {
        store: ctx.store,
        admin: ctx.admin,
        goal: ctx.goal,
    };
    bench
        .checkpoints(hub, ctx.agent, ctx.ended, ctx.stop)
        .await
        .map_err(lib)
}

fn report(runs: &[PathBuf], threshold: f64, out: &Path, as_json: bool) -> Result<()> {
    let c = run::compare(runs, threshold, out).map_err(lib)?;
    if as_json {
        json(&serde_json::json!({
            "threshold": threshold,
            "runs": c.lines,
            "chart": {"svg": c.svg, "png": c.png},
        }));
    } else {
        lines(show::comparison(&c, threshold));
    }
    Ok(())
}
