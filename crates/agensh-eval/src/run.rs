//! A ProgramBench run beside an organization (`agensh bench programbench`): a new run's
//! set-up (the reference placed, the task pack, a clean seed, the organization's
//! configuration), a resumed run's checks, and the checkpointer that tags `main` on
//! schedule, exports it as a submission and hands it to the scorer, which scores one
//! checkpoint at a time in the background and keeps the report ([`crate::bench`]).
//!
//! What only the running organization knows — what it has spent, its cost per result, the
//! dashboard's curve — comes through [`Organization`], which the caller implements with
//! the hub it has; this crate never reaches the hub or its store.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agensh_domain::config::Config;
use agensh_domain::goal::Economy;
use agensh_domain::prompt::{render, PROGRAMBENCH_PACK_TEMPLATE};
use agensh_process::Shutdown;
use sha2::{Digest, Sha256};
use tokio::sync::{mpsc, watch};

use crate::bench::{self, Checkpoint, Report, Score, Setup};
use crate::env::TestEnv;
use crate::evaluate::{self, Options, Submission};
use crate::sandbox::Sandbox;
use crate::task::Task;

pub const DEFAULT_WORKERS: usize = 8;
pub const DEFAULT_HOURS: f64 = 6.0;
pub const DEFAULT_CHECKPOINT_MINUTES: f64 = 30.0;
/// Scoring runs beside the workers at this niceness.
pub const SCORING_NICE: i32 = 10;
/// The task pack, under [`bench::BENCH_DIR`].
pub const PACK_FILE: &str = "programbench.md";

/// Why a run could not go on. The messages are the user's: each says what to do.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A flag or a directory that does not fit the run.
    #[error("{0}")]
    Refused(String),
    /// `what` could not be done, for `source`.
    #[error("{what}")]
    Context {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Bench(#[from] bench::Error),
    #[error(transparent)]
    Task(#[from] crate::task::Error),
    #[error(transparent)]
    Evaluate(#[from] evaluate::Error),
    #[error(transparent)]
    Docker(#[from] crate::docker::Error),
    #[error(transparent)]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    Json(#[from] serde_json::Error),
    /// The organization's (its store's) or the domain's own error.
    #[error(transparent)]
    Domain(#[from] agensh_domain::Error),
}

fn context(what: String) -> impl FnOnce(std::io::Error) -> Error {
    move |source| Error::Context { what, source }
}

fn now_ms() -> i64 {
    agensh_domain::time::unix_ms(std::time::SystemTime::now())
}

/// What the organization has spent and done so far, as a checkpoint notes it.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Spent {
    /// Model tokens, input and output.
    pub tokens: u64,
    pub cost_usd: f64,
    pub merges: u64,
    /// Workers not dead.
    pub workers_alive: usize,
}

/// The running organization, as the checkpointer needs it: implemented by the caller with
/// the hub and the store it has.
pub trait Organization: Send + Sync + 'static {
    /// What it has spent and done so far.
    fn spent(&self) -> impl Future<Output = Result<Spent, agensh_domain::Error>> + Send;
    /// Its cost per result, once the run ended.
    fn economy(&self) -> impl Future<Output = Result<Economy, agensh_domain::Error>> + Send;
    /// Gives the hub a scored checkpoint for the dashboard's curve; the run goes on without
    /// it when the hub does not take it.
    fn post_score(&self, c: &Checkpoint) -> impl Future<Output = ()> + Send;
}

/// A new run as it is asked for.
#[derive(Debug, Clone)]
pub struct Start {
    /// The task as given: a directory or an instance id.
    pub task: String,
    /// The reference executable (`--reference`), unless `from_image`.
    pub reference: Option<PathBuf>,
    /// The cleanroom workspace `main` is seeded from.
    pub workspace: Option<PathBuf>,
    /// Reference and workspace from the task's official image (Docker).
    pub from_image: bool,
    pub workers: usize,
    pub hours: Option<f64>,
    pub checkpoint_minutes: Option<f64>,
    pub agent: Option<String>,
}

/// A new run made ready before its organization exists: the reference placed, the pack
/// written, the configuration and the seed for the organization. `init` refuses a
/// directory that holds an organization already, and nothing here is half-made if it fails.
pub struct Prepared {
    pub config: Config,
    /// A clean copy of the workspace to seed `main` from (removed by [`Prepared::begin`]).
    pub seed: Option<PathBuf>,
    reference: PathBuf,
    hours: f64,
    minutes: f64,
}

/// Places the reference and writes the pack under `org/bench/`, and makes the
/// organization's configuration and seed; the caller creates the organization from them,
/// then calls [`Prepared::begin`].
pub async fn prepare(
    org: &Path,
    s: &Start,
    task: &Task,
    note: &dyn Fn(&str),
) -> Result<Prepared, Error> {
    let bench_dir = bench::bench_dir(org);
    let from_image = bench_dir.join("image");
    let (reference, workspace) = if s.from_image {
        let reference = bench_dir.join("image-reference").join("executable");
        crate::docker::cleanroom(task, &from_image, &reference).await?;
        (reference, Some(from_image.clone()))
    } else {
        let Some(reference) = s.reference.clone() else {
            return Err(Error::Refused(
                "--reference is needed to start a run: the reference executable the workers observe (a path), or --from-image where Docker is".into(),
            ));
        };
        (reference, s.workspace.clone())
    };
    let reference = &reference;
    let bytes = std::fs::read(reference).map_err(context(format!(
        "cannot read the reference executable {}",
        reference.display()
    )))?;
    let hours = s.hours.unwrap_or(DEFAULT_HOURS);
    let minutes = s.checkpoint_minutes.unwrap_or(DEFAULT_CHECKPOINT_MINUTES);
    if !(hours > 0.0 && hours.is_finite()) {
        return Err(Error::Refused(
            "--hours must be more than 0 for a ProgramBench run (it has checkpoints on a schedule)"
                .into(),
        ));
    }
    if !(minutes > 0.0 && minutes.is_finite()) {
        return Err(Error::Refused(
            "--checkpoint-minutes must be more than 0".into(),
        ));
    }
    let name = reference
        .file_name()
        .map_or_else(|| "reference".into(), |n| n.to_string_lossy().into_owned());
    let placed = bench_dir.join("reference").join(&name);
    std::fs::create_dir_all(placed.parent().expect("a parent"))
        .map_err(context(format!("cannot create {}", bench_dir.display())))?;
    std::fs::write(&placed, &bytes)
        .map_err(context(format!("cannot write {}", placed.display())))?;
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
    config.run.workers = s.workers;
    config.run.hours = hours;
    let seed = match &workspace {
        Some(ws) => Some(clean_seed(ws, &bench_dir.join("seed"), task, &bytes, note)?),
        None => None,
    };
    Ok(Prepared {
        config,
        seed,
        reference: placed,
        hours,
        minutes,
    })
}

impl Prepared {
    /// Removes what only the organization's creation needed (the seed, the image's files),
    /// whether it was created or not.
    pub fn clean(&self, org: &Path) {
        let bench_dir = bench::bench_dir(org);
        if let Some(s) = &self.seed {
            let _ = std::fs::remove_dir_all(s);
        }
        let _ = std::fs::remove_dir_all(bench_dir.join("image"));
        let _ = std::fs::remove_dir_all(bench_dir.join("image-reference"));
    }

    /// The run's first report, saved, once its organization was created.
    pub fn begin(self, org: &Path, s: &Start, task: &Task) -> Result<Report, Error> {
        let report = Report {
            setup: Setup {
                task: s.task.clone(),
                instance_id: task.instance_id.clone(),
                reference: self.reference,
                workers: s.workers,
                hours: self.hours,
                checkpoint_minutes: self.minutes,
                agent: s.agent.clone().unwrap_or_else(|| "builtin".into()),
                started_at: now_ms(),
            },
            economy: None,
            checkpoints: Vec::new(),
        };
        report.save(org)?;
        Ok(report)
    }
}

/// The task a run is to score (`what`: a directory or an instance id of the package's
/// `tasks`), refused when it has no active test branch; each branch's tests found.
pub fn scorable_task(what: &str, tasks: &Path, blobs: Option<&Path>) -> Result<Task, Error> {
    let task = Task::load(what, Some(tasks), blobs)?;
    if task.active_branches().is_empty() {
        return Err(Error::Refused(format!(
            "{} has no active test branch in tests.json: there is nothing to score it with",
            task.instance_id
        )));
    }
    for b in task.active_branches() {
        task.test_files(&b)?;
    }
    Ok(task)
}

/// Where a run of `task` with `workers` goes unless told: `programbench-<id>-<N>w`.
pub fn default_dir(task: &Task, workers: usize) -> PathBuf {
    PathBuf::from(format!("programbench-{}-{workers}w", task.instance_id))
}

/// A run found in the directory: its set-up stands; flags that contradict it are refused.
pub fn resume(r: Report, s: &Start, workers: Option<usize>, task: &Task) -> Result<Report, Error> {
    let setup = &r.setup;
    if setup.instance_id != task.instance_id {
        return Err(Error::Refused(format!(
            "this directory holds a run of {}, not {} — give another directory",
            setup.instance_id, task.instance_id
        )));
    }
    let clash = |what: &str, given: String, kept: String| {
        Error::Refused(format!("this run was started with {what} {kept}; a resumed run keeps it — leave out the flag (given {given}) or start another run in a new directory"))
    };
    if let Some(w) = workers.filter(|w| *w != setup.workers) {
        return Err(clash("--workers", w.to_string(), setup.workers.to_string()));
    }
    if let Some(h) = s.hours.filter(|h| *h != setup.hours) {
        return Err(clash("--hours", h.to_string(), setup.hours.to_string()));
    }
    if let Some(m) = s
        .checkpoint_minutes
        .filter(|m| *m != setup.checkpoint_minutes)
    {
        return Err(clash(
            "--checkpoint-minutes",
            m.to_string(),
            setup.checkpoint_minutes.to_string(),
        ));
    }
    Ok(r)
}

/// The cleanroom workspace without git metadata and without any file whose sha256 is the
/// reference's or one of the task's clean hashes, copied to `into`.
fn clean_seed(
    from: &Path,
    into: &Path,
    task: &Task,
    reference: &[u8],
    note: &dyn Fn(&str),
) -> Result<PathBuf, Error> {
    if !from.is_dir() {
        return Err(Error::Refused(format!(
            "--workspace {} is not a directory",
            from.display()
        )));
    }
    let _ = std::fs::remove_dir_all(into);
    evaluate::copy_tree(from, into)?;
    let mut banned: Vec<String> = task.yaml.eval_clean_hashes.clone();
    banned.push(evaluate::hex(&Sha256::digest(reference)));
    fn walk(dir: &Path, banned: &[String], note: &dyn Fn(&str)) -> Result<(), Error> {
        for e in std::fs::read_dir(dir)? {
            let e = e?;
            let p = e.path();
            let kind = e.file_type()?;
            if kind.is_dir() {
                if e.file_name() == ".git" {
                    std::fs::remove_dir_all(&p)?;
                } else {
                    walk(&p, banned, note)?;
                }
            } else if kind.is_file() {
                let h = evaluate::hex(&Sha256::digest(std::fs::read(&p)?));
                if banned.contains(&h) {
                    note(&format!(
                        "left out of main: {} (the reference's bytes)",
                        p.display()
                    ));
                    std::fs::remove_file(&p)?;
                }
            }
        }
        Ok(())
    }
    walk(into, &banned, note)?;
    Ok(into.to_path_buf())
}

/// Where the run's progress lines go (stderr, for the command line).
pub type Note = Arc<dyn Fn(&str) + Send + Sync>;

/// What the checkpointer and the scorer share: the run's directory, its report, the task
/// and where it is scored.
#[derive(Clone)]
pub struct Bench {
    org: PathBuf,
    /// The organization's shared repository (`main`).
    repo: PathBuf,
    report: Arc<Mutex<Report>>,
    task: Arc<Task>,
    env: TestEnv,
    /// The data directory (`eval-work/` for the evaluations).
    data: PathBuf,
    note: Note,
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

/// `commit`'s first ten characters, as the run shows it.
pub fn short(commit: &str) -> &str {
    &commit[..commit.len().min(10)]
}

impl Bench {
    /// The run in `org` (its report loaded or begun), its `main` in `repo`, scored with
    /// `env` under `data`; progress lines go to `note`.
    pub fn new(
        org: PathBuf,
        repo: PathBuf,
        report: Report,
        task: Task,
        env: TestEnv,
        data: PathBuf,
        note: Note,
    ) -> Self {
        Self {
            org,
            repo,
            report: Arc::new(Mutex::new(report)),
            task: Arc::new(task),
            env,
            data,
            note,
        }
    }

    /// The report as it stands.
    pub fn report(&self) -> Report {
        self.report.lock().expect("report lock").clone()
    }

    /// The hours left of the run at `now` (Unix ms); none or less: its time is over.
    pub fn remaining_hours(&self, now: i64) -> f64 {
        let setup = &self.report.lock().expect("report lock").setup;
        let elapsed_hours = (now - setup.started_at) as f64 / 3_600_000.0;
        setup.hours - elapsed_hours
    }

    fn save(&self) -> Result<(), Error> {
        let r = self.report();
        r.save(&self.org)?;
        Ok(())
    }

    /// Beside the run: takes each checkpoint when it is due and hands it to the scorer.
    /// `agent` is what the workers run; `ended` says when the workers are done
    /// (`Some(true)`) or the run was stopped (`Some(false)`).
    pub async fn checkpoints<O: Organization>(
        self,
        hub: O,
        agent: String,
        mut ended: watch::Receiver<Option<bool>>,
        stop: Shutdown,
    ) -> Result<(), Error> {
        let hub = Arc::new(hub);
        self.report.lock().expect("report lock").setup.agent = agent;
        self.save()?;
        // A resumed run: the curve so far.
        let scored: Vec<Checkpoint> = self
            .report()
            .checkpoints
            .into_iter()
            .filter(|c| c.score.is_some())
            .collect();
        for c in &scored {
            hub.post_score(c).await;
        }
        let (tx, rx) = mpsc::unbounded_channel();
        let scorer = tokio::spawn(self.clone().scorer(hub.clone(), rx));
        let (setup, last_due, unscored_now) = {
            let r = self.report.lock().expect("report lock");
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
                    _ = ended.wait_for(|e| e.is_some()) => {}
                }
            } else {
                let _ = ended.wait_for(|e| e.is_some()).await;
            }
            let now_ended = *ended.borrow();
            if now_ended == Some(false) || stop.is_shutdown() {
                stopped = true;
                break;
            }
            if now_ended == Some(true) && slot < end {
                // Done early (every worker ended): straight to the last checkpoint.
                continue;
            }
            let c = match self.take(&*hub, *minutes).await {
                Ok(c) => c,
                Err(e) => {
                    (self.note)(&format!(
                        "the checkpoint due at {minutes:.1} min could not be taken: {}",
                        chain(&e)
                    ));
                    continue;
                }
            };
            let index = c.index;
            (self.note)(&format!(
                "checkpoint {index} ({:.2} h): main {} exported; scoring in the background",
                c.hours(),
                short(&c.commit)
            ));
            self.report.lock().expect("report lock").checkpoints.push(c);
            self.save()?;
            let _ = tx.send(index);
        }
        drop(tx);
        if stopped {
            // The evaluation under way is dropped (its sandbox dies with it); what was not
            // scored is scored when the run is resumed.
            scorer.abort();
            let _ = scorer.await;
            (self.note)("stopped: run `agensh bench programbench` on the same directory to resume");
            return Ok(());
        }
        // Cost per result, from what the run's hub recorded: split at the goal when it was
        // met, else at the last merge.
        match hub.economy().await {
            Ok(e) => {
                (self.note)(&format!("cost: {}", e.line()));
                self.report.lock().expect("report lock").economy = Some(e);
                self.save()?;
            }
            Err(e) => (self.note)(&format!("the run's cost per result could not be read: {e}")),
        }
        match scorer.await {
            Ok(r) => r,
            Err(e) => Err(Error::Context {
                what: "the scorer stopped".into(),
                source: std::io::Error::other(e),
            }),
        }
    }

    /// Tags and exports `main` as the next checkpoint and notes what the organization has
    /// spent and done so far.
    async fn take<O: Organization>(&self, hub: &O, minutes: f64) -> Result<Checkpoint, Error> {
        let index = self.report.lock().expect("report lock").checkpoints.len();
        let commit = bench::main_commit(&self.repo).await?;
        let tag = bench::tag_name(index);
        bench::tag(&self.repo, &tag, &commit).await?;
        let submission = bench::checkpoint_dir(index).join("submission.tar.gz");
        bench::export(&self.repo, &commit, &self.org.join(&submission)).await?;
        let spent = hub.spent().await?;
        Ok(Checkpoint {
            index,
            due_minutes: minutes,
            taken_at: now_ms(),
            commit,
            tag,
            submission,
            tokens: spent.tokens,
            cost_usd: spent.cost_usd,
            merges: spent.merges,
            workers_alive: spent.workers_alive,
            score: None,
        })
    }

    /// Scores checkpoints one at a time, in the order they come, at a low priority.
    async fn scorer<O: Organization>(
        self,
        hub: Arc<O>,
        mut rx: mpsc::UnboundedReceiver<usize>,
    ) -> Result<(), Error> {
        while let Some(index) = rx.recv().await {
            // One checkpoint that cannot be scored (a broken sandbox, a full disk) must not
            // stop the scoring of the next ones, nor the run.
            if let Err(e) = self.score(Some(&*hub), index, SCORING_NICE).await {
                (self.note)(&format!(
                    "checkpoint {index} could not be scored: {} — it is scored when the run is resumed",
                    chain(&e)
                ));
            }
        }
        Ok(())
    }

    /// Scores checkpoint `index` unless it is scored; the score goes to `hub`'s curve.
    async fn score<O: Organization>(
        &self,
        hub: Option<&O>,
        index: usize,
        nice: i32,
    ) -> Result<(), Error> {
        let submission = {
            let r = self.report.lock().expect("report lock");
            let Some(c) = r.checkpoints.get(index) else {
                return Ok(());
            };
            if c.score.is_some() {
                return Ok(());
            }
            self.org.join(&c.submission)
        };
        // One line per evaluation started: a checkpoint scored twice would show here.
        {
            use std::io::Write;
            let log = bench::bench_dir(&self.org).join(bench::SCORING_LOG);
            let mut f = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&log)
                .map_err(context(format!("cannot write {}", log.display())))?;
            writeln!(f, "{} {index}", now_ms())?;
        }
        let work = self.data.join("eval-work").join(format!(
            "{}-{}-{index}",
            self.task.instance_id,
            std::process::id()
        ));
        let mut opts = Options::new(Sandbox::this_program()?, self.env.clone(), work);
        opts.cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        opts.nice = nice;
        // The submission sees nothing of the organization: not the reference, not the
        // workers' checkouts.
        opts.hide = vec![self.org.clone()];
        let outcome = evaluate::evaluate(
            &self.task,
            &Submission::at(&submission)?,
            &opts,
            &mut |_| {},
        )
        .await?;
        let eval_path = bench::checkpoint_dir(index).join("eval.json");
        std::fs::write(
            self.org.join(&eval_path),
            serde_json::to_vec_pretty(&outcome.evaluation)?,
        )?;
        let s = Score::of(&outcome, eval_path, now_ms());
        (self.note)(&format!(
            "checkpoint {index} scored: kept {:.4} ({}/{} tests){}",
            s.kept,
            s.tests_passed,
            s.tests,
            s.error_code
                .as_deref()
                .map(|c| format!(" — {c}"))
                .unwrap_or_default()
        ));
        let checkpoint = {
            let mut r = self.report.lock().expect("report lock");
            r.checkpoints[index].score = Some(s);
            r.checkpoints[index].clone()
        };
        self.save()?;
        if let Some(hub) = hub {
            hub.post_score(&checkpoint).await;
        }
        Ok(())
    }

    /// The run's time is over: the last checkpoint (if missing; `open` gives the
    /// organization's records for it) and every unscored one, at full priority.
    pub async fn finish_without_workers<O: Organization>(
        &self,
        open: impl FnOnce() -> Result<O, Error>,
    ) -> Result<(), Error> {
        let (setup, last) = {
            let r = self.report.lock().expect("report lock");
            (r.setup.clone(), last_due(&r))
        };
        let end = setup.hours * 60.0;
        if last.is_none_or(|d| d < end - 1e-9) {
            let records = open()?;
            // The checkpoints between are not taken after the fact: main has moved on since.
            let c = self.take(&records, end).await?;
            self.report.lock().expect("report lock").checkpoints.push(c);
        }
        self.save()?;
        let missing = unscored(&self.report.lock().expect("report lock"));
        for i in missing {
            self.score::<O>(None, i, 0).await?;
        }
        Ok(())
    }
}

/// Runs compared (`agensh bench report`): the table's lines and where the chart went.
#[derive(Debug, Clone)]
pub struct Comparison {
    pub lines: Vec<bench::Line>,
    pub svg: PathBuf,
    pub png: PathBuf,
}

/// The runs in `runs` (organization directories) in one chart, written as `out.svg` and
/// `out.png`, one line per organization size, `threshold` drawn.
pub fn compare(runs: &[PathBuf], threshold: f64, out: &Path) -> Result<Comparison, Error> {
    let mut loaded = Vec::new();
    for dir in runs {
        let Some(r) = Report::load(dir)? else {
            return Err(Error::Refused(format!(
                "{} holds no ProgramBench run (no {})",
                dir.display(),
                Report::path(dir).display()
            )));
        };
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
    std::fs::write(&svg, crate::chart::svg(&chart))
        .map_err(context(format!("cannot write {}", svg.display())))?;
    std::fs::write(&png, crate::chart::png(&chart))
        .map_err(context(format!("cannot write {}", png.display())))?;
    Ok(Comparison { lines, svg, png })
}

/// An error with its causes, as `{:#}` of the command line shows them: `a: b: c`.
pub fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cause = c.source();
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_error_shows_its_causes_as_the_command_line_does() {
        let e = Error::Context {
            what: "cannot write x".into(),
            source: std::io::Error::other("disk full"),
        };
        assert_eq!(chain(&e), "cannot write x: disk full");
        assert_eq!(short("0123456789abcdef"), "0123456789");
        assert_eq!(short("abc"), "abc");
    }

    #[test]
    fn a_comparison_names_a_directory_without_a_run_and_keeps_the_dot_of_its_name() {
        let d = tempfile::tempdir().unwrap();
        let e = compare(&[d.path().to_path_buf()], 0.3, &d.path().join("x")).unwrap_err();
        assert!(chain(&e).contains("holds no ProgramBench run"), "{e}");
        let run = d.path().join("run");
        Report {
            setup: Setup {
                task: "t".into(),
                instance_id: "t".into(),
                reference: PathBuf::from("/r"),
                workers: 2,
                hours: 1.0,
                checkpoint_minutes: 30.0,
                agent: "builtin".into(),
                started_at: 0,
            },
            checkpoints: Vec::new(),
            economy: None,
        }
        .save(&run)
        .unwrap();
        let c = compare(&[run], 0.3, &d.path().join("run-1.5b")).unwrap();
        assert_eq!(c.svg, d.path().join("run-1.5b.svg"));
        assert!(c.png.is_file());
        assert_eq!(c.lines.len(), 1);
    }
}
