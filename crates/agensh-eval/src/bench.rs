//! A ProgramBench run's record: its set-up, the checkpoints of `main` and their scores
//! (`<org>/bench/report.json`), the schedule of checkpoints, the submission exported at
//! each, and the charts of one run and of several runs side by side.
//!
//! Layout under the organization directory:
//! `bench/report.json`, `bench/chart.svg`, `bench/chart.png`, `bench/reference/<name>` (the
//! reference executable, outside the repository), `bench/programbench.md` (the task pack),
//! `bench/checkpoints/<NN>/submission.tar.gz` and `eval.json`, and `bench/scoring.log` (one
//! line per evaluation started, so a checkpoint scored twice would show).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::chart::{Chart, Series};
use crate::evaluate::Outcome;

pub const BENCH_DIR: &str = "bench";
pub const REPORT: &str = "report.json";
pub const SCORING_LOG: &str = "scoring.log";

/// How the run was set up (fixed when it starts; a resumed run keeps it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Setup {
    /// The task as given: a directory or an instance id.
    pub task: String,
    pub instance_id: String,
    /// The reference executable, where the workers run it.
    pub reference: PathBuf,
    pub workers: usize,
    pub hours: f64,
    pub checkpoint_minutes: f64,
    /// The agent, as the run describes it.
    pub agent: String,
    /// Unix milliseconds when the run first started.
    pub started_at: i64,
}

/// The organization at a checkpoint, with the score of its `main` once scored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Checkpoint {
    pub index: usize,
    /// When it was due, in minutes since the start, and when it was taken (Unix ms).
    pub due_minutes: f64,
    pub taken_at: i64,
    /// `main`'s commit and the tag put on it (`checkpoint-NN`).
    pub commit: String,
    pub tag: String,
    /// The submission, relative to the organization directory.
    pub submission: PathBuf,
    /// Model tokens (input + output) and dollars spent so far, pull requests merged so far,
    /// and workers alive (not dead).
    pub tokens: u64,
    pub cost_usd: f64,
    pub merges: u64,
    pub workers_alive: usize,
    #[serde(default)]
    pub score: Option<Score>,
}

impl Checkpoint {
    pub fn hours(&self) -> f64 {
        self.due_minutes / 60.0
    }
}

/// A checkpoint's score.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Score {
    /// ProgramBench's `score_instance` (the leaderboard's), the raw score, and the one
    /// `programbench eval` shows.
    pub kept: f64,
    pub raw: f64,
    pub eval: f64,
    pub tests_passed: usize,
    pub tests: usize,
    pub compiled: bool,
    /// Why it did not compile (or the task-level error), the first lines of the output.
    pub error_code: Option<String>,
    pub error_details: Option<String>,
    /// How long the evaluation took, in seconds, and when it finished (Unix ms).
    pub seconds: f64,
    pub scored_at: i64,
    /// The whole evaluation, relative to the organization directory.
    pub evaluation: PathBuf,
}

impl Score {
    pub fn of(outcome: &Outcome, evaluation: PathBuf, scored_at: i64) -> Self {
        let e = &outcome.evaluation;
        let details = e.error_details.as_ref().map(|d| {
            let lines: Vec<&str> = d.lines().collect();
            lines[lines.len().saturating_sub(20)..].join("\n")
        });
        Self {
            kept: outcome.scores.kept,
            raw: outcome.scores.raw,
            eval: outcome.scores.eval,
            tests_passed: outcome.scores.passed,
            tests: outcome.scores.tests,
            compiled: outcome.scores.compiled,
            error_code: e.error_code.clone(),
            error_details: details,
            seconds: outcome.wall_time,
            scored_at,
            evaluation,
        }
    }
}

/// `bench/report.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    pub setup: Setup,
    pub checkpoints: Vec<Checkpoint>,
    /// Cost per result once the run ended: model requests, tokens and dollars per merged
    /// PR, and the share spent after the goal was met (or after the last merge).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub economy: Option<agensh_domain::goal::Economy>,
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot {what} {path}: {source}")]
    Io {
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path} is not a report agensh can read: {detail}")]
    Parse { path: PathBuf, detail: String },
    #[error("git {args} failed in {repo}: {detail}")]
    Git {
        args: String,
        repo: PathBuf,
        detail: String,
    },
}

pub fn bench_dir(org: &Path) -> PathBuf {
    org.join(BENCH_DIR)
}

impl Report {
    pub fn path(org: &Path) -> PathBuf {
        bench_dir(org).join(REPORT)
    }

    /// The report of the run in `org`, if one was started there.
    pub fn load(org: &Path) -> Result<Option<Self>, Error> {
        let path = Self::path(org);
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(source) => {
                return Err(Error::Io {
                    what: "read",
                    path,
                    source,
                })
            }
        };
        serde_json::from_str(&text)
            .map(Some)
            .map_err(|e| Error::Parse {
                path,
                detail: e.to_string(),
            })
    }

    /// Writes the report (whole, through a temporary file renamed over it) and its charts.
    pub fn save(&self, org: &Path) -> Result<(), Error> {
        let dir = bench_dir(org);
        let json = serde_json::to_vec_pretty(self).expect("a report serialises");
        write_atomic(&dir.join(REPORT), &json)?;
        let chart = self.chart();
        write_atomic(&dir.join("chart.svg"), crate::chart::svg(&chart).as_bytes())?;
        write_atomic(&dir.join("chart.png"), &crate::chart::png(&chart))?;
        Ok(())
    }

    /// The series of this run: each scored checkpoint's kept score at its due time.
    pub fn series(&self) -> Series {
        Series {
            label: format!("N = {}", self.setup.workers),
            points: self
                .checkpoints
                .iter()
                .filter_map(|c| c.score.as_ref().map(|s| (c.hours(), s.kept)))
                .collect(),
        }
    }

    pub fn chart(&self) -> Chart {
        Chart {
            title: format!(
                "{}: pass rate of main, {} worker(s)",
                self.setup.instance_id, self.setup.workers
            ),
            x_label: "hours".into(),
            y_label: "pass rate (kept)".into(),
            series: vec![self.series()],
            threshold: None,
            x_max: Some(self.setup.hours),
        }
    }

    /// The last scored checkpoint.
    pub fn last_scored(&self) -> Option<&Checkpoint> {
        self.checkpoints.iter().rev().find(|c| c.score.is_some())
    }

    /// When the kept score first reached `threshold`, in hours.
    pub fn time_to(&self, threshold: f64) -> Option<f64> {
        self.checkpoints
            .iter()
            .find(|c| c.score.as_ref().is_some_and(|s| s.kept >= threshold))
            .map(Checkpoint::hours)
    }
}

fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), Error> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|source| Error::Io {
            what: "create",
            path: dir.to_path_buf(),
            source,
        })?;
    }
    let tmp = path.with_extension("partial");
    let io = |what, source| Error::Io {
        what,
        path: path.to_path_buf(),
        source,
    };
    std::fs::write(&tmp, bytes).map_err(|e| io("write", e))?;
    std::fs::rename(&tmp, path).map_err(|e| io("replace", e))
}

/// When checkpoints are due, in minutes since the start: the start itself, every `every`
/// minutes, and the end (`hours`), each once.
pub fn schedule(hours: f64, every: f64) -> Vec<f64> {
    let end = hours * 60.0;
    let mut due = vec![0.0];
    if every > 0.0 {
        let mut k = 1.0;
        while k * every < end - 1e-9 {
            due.push(k * every);
            k += 1.0;
        }
    }
    if end > 0.0 {
        due.push(end);
    }
    due
}

/// The tag of checkpoint `index`.
pub fn tag_name(index: usize) -> String {
    format!("checkpoint-{index:02}")
}

/// Where checkpoint `index`'s files go, relative to the organization directory.
pub fn checkpoint_dir(index: usize) -> PathBuf {
    PathBuf::from(BENCH_DIR)
        .join("checkpoints")
        .join(format!("{index:02}"))
}

async fn git(repo: &Path, args: &[&str]) -> Result<String, Error> {
    let out = tokio::process::Command::new("git")
        .arg("-C")
        .arg(repo)
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .map_err(|source| Error::Io {
            what: "run git in",
            path: repo.to_path_buf(),
            source,
        })?;
    if !out.status.success() {
        return Err(Error::Git {
            args: args.join(" "),
            repo: repo.to_path_buf(),
            detail: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// `main`'s commit in the shared repository.
pub async fn main_commit(repo: &Path) -> Result<String, Error> {
    git(repo, &["rev-parse", "--verify", "refs/heads/main^{commit}"]).await
}

/// Tags `commit` as `tag` (moved if it exists: a resumed run takes the checkpoint again).
pub async fn tag(repo: &Path, tag: &str, commit: &str) -> Result<(), Error> {
    git(repo, &["tag", "-f", tag, commit]).await.map(|_| ())
}

/// The tree at `commit` as ProgramBench's `submission.tar.gz`: the files at the archive's
/// root, without a root `executable` (a built program is never part of a submission).
pub async fn export(repo: &Path, commit: &str, out: &Path) -> Result<(), Error> {
    if let Some(dir) = out.parent() {
        std::fs::create_dir_all(dir).map_err(|source| Error::Io {
            what: "create",
            path: dir.to_path_buf(),
            source,
        })?;
    }
    let out_s = out.to_string_lossy().into_owned();
    let mut args = vec!["archive", "--format=tar.gz", "-o", &out_s, commit];
    // A pathspec that excludes the root executable, only when there is one: on an empty
    // tree (a checkpoint before the first merge) any pathspec matches nothing and fails.
    let root_exe = git(
        repo,
        &["ls-tree", "--name-only", commit, "--", "executable"],
    )
    .await?;
    if !root_exe.is_empty() {
        args.extend(["--", ".", ":(top,exclude)executable"]);
    }
    git(repo, &args).await.map(|_| ())
}

/// One organization size's line in a comparison of runs (several runs of one size — on
/// different tasks — are averaged).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Line {
    pub workers: usize,
    pub agent: String,
    /// The tasks of its runs.
    pub tasks: Vec<String>,
    /// The last scored checkpoint's kept score (the mean over its runs) and when it was
    /// due, in hours.
    pub final_score: Option<f64>,
    pub final_hours: Option<f64>,
    /// When the (mean) kept score first reached the threshold, in hours.
    pub time_to_threshold: Option<f64>,
    /// Spent by all its runs.
    pub tokens: u64,
    pub cost_usd: f64,
    pub runs: Vec<PathBuf>,
}

/// The mean kept score of `runs` at each due time some of them scored, in hours.
fn mean_curve(runs: &[&Report]) -> Vec<(f64, f64)> {
    let mut at: std::collections::BTreeMap<i64, (f64, usize)> = Default::default();
    for r in runs {
        for c in &r.checkpoints {
            if let Some(s) = &c.score {
                // Due times in milliseconds: the same schedule lands on the same key.
                let e = at
                    .entry((c.due_minutes * 60_000.0).round() as i64)
                    .or_default();
                e.0 += s.kept;
                e.1 += 1;
            }
        }
    }
    at.into_iter()
        .map(|(ms, (sum, n))| (ms as f64 / 3_600_000.0, sum / n as f64))
        .collect()
}

/// Runs in one chart, one line per organization size (the mean over its runs when there
/// are several, e.g. one per task), with the threshold drawn; and their table.
pub fn combine(runs: &[(PathBuf, Report)], threshold: f64) -> (Chart, Vec<Line>) {
    let mut sizes: std::collections::BTreeMap<usize, Vec<&(PathBuf, Report)>> = Default::default();
    for r in runs {
        sizes.entry(r.1.setup.workers).or_default().push(r);
    }
    let mut series = Vec::new();
    let mut lines = Vec::new();
    for (workers, group) in sizes {
        let reports: Vec<&Report> = group.iter().map(|(_, r)| r).collect();
        let curve = mean_curve(&reports);
        let mut tasks: Vec<String> = reports
            .iter()
            .map(|r| r.setup.instance_id.clone())
            .collect();
        tasks.sort();
        tasks.dedup();
        let mut agents: Vec<String> = reports.iter().map(|r| r.setup.agent.clone()).collect();
        agents.sort();
        agents.dedup();
        let spent = |f: &dyn Fn(&Checkpoint) -> f64| -> f64 {
            reports
                .iter()
                .filter_map(|r| r.checkpoints.last())
                .map(f)
                .sum()
        };
        lines.push(Line {
            workers,
            agent: agents.join(", "),
            tasks,
            final_score: curve.last().map(|p| p.1),
            final_hours: curve.last().map(|p| p.0),
            time_to_threshold: curve.iter().find(|p| p.1 >= threshold).map(|p| p.0),
            tokens: spent(&|c| c.tokens as f64) as u64,
            cost_usd: spent(&|c| c.cost_usd),
            runs: group.iter().map(|(d, _)| d.clone()).collect(),
        });
        series.push(Series {
            label: if reports.len() > 1 {
                format!("N = {workers} (mean of {})", reports.len())
            } else {
                format!("N = {workers}")
            },
            points: curve,
        });
    }
    let mut ids: Vec<&str> = runs
        .iter()
        .map(|(_, r)| r.setup.instance_id.as_str())
        .collect();
    ids.sort();
    ids.dedup();
    let title = match ids.as_slice() {
        [one] => format!("{one}: pass rate of main"),
        many => format!("{} tasks: mean pass rate of main", many.len()),
    };
    let chart = Chart {
        title,
        x_label: "hours".into(),
        y_label: "pass rate (kept)".into(),
        series,
        threshold: Some(threshold),
        x_max: runs
            .iter()
            .map(|(_, r)| r.setup.hours)
            .fold(None, |m: Option<f64>, h| Some(m.map_or(h, |m| m.max(h)))),
    };
    (chart, lines)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn checkpoint(index: usize, minutes: f64, kept: Option<f64>) -> Checkpoint {
        Checkpoint {
            index,
            due_minutes: minutes,
            taken_at: 0,
            commit: "c".into(),
            tag: tag_name(index),
            submission: checkpoint_dir(index).join("submission.tar.gz"),
            tokens: 100 * index as u64,
            cost_usd: 0.5 * index as f64,
            merges: index as u64,
            workers_alive: 2,
            score: kept.map(|k| Score {
                kept: k,
                raw: k,
                eval: k,
                tests_passed: 0,
                tests: 0,
                compiled: true,
                error_code: None,
                error_details: None,
                seconds: 1.0,
                scored_at: 0,
                evaluation: PathBuf::new(),
            }),
        }
    }

    fn report(workers: usize, points: &[(f64, Option<f64>)]) -> Report {
        Report {
            setup: Setup {
                task: "t".into(),
                instance_id: "t".into(),
                reference: PathBuf::from("/r"),
                workers,
                hours: 1.0,
                checkpoint_minutes: 30.0,
                agent: "builtin".into(),
                started_at: 0,
            },
            checkpoints: points
                .iter()
                .enumerate()
                .map(|(i, (m, k))| checkpoint(i, *m, *k))
                .collect(),
            economy: None,
        }
    }

    #[test]
    fn the_schedule_has_the_start_each_interval_and_the_end_once() {
        assert_eq!(schedule(1.0, 30.0), vec![0.0, 30.0, 60.0]);
        assert_eq!(schedule(1.0, 25.0), vec![0.0, 25.0, 50.0, 60.0]);
        assert_eq!(schedule(0.5, 60.0), vec![0.0, 30.0]);
        assert_eq!(schedule(6.0, 30.0).len(), 13);
    }

    #[test]
    fn time_to_threshold_is_the_first_scored_checkpoint_at_or_above_it() {
        let r = report(
            8,
            &[(0.0, Some(0.0)), (30.0, Some(0.2)), (60.0, Some(0.35))],
        );
        assert_eq!(r.time_to(0.3), Some(1.0));
        assert_eq!(r.time_to(0.2), Some(0.5));
        assert_eq!(r.time_to(0.5), None);
    }

    #[test]
    fn unscored_checkpoints_are_left_out_of_the_curve() {
        let r = report(1, &[(0.0, Some(0.0)), (30.0, None), (60.0, Some(0.5))]);
        assert_eq!(r.series().points, vec![(0.0, 0.0), (1.0, 0.5)]);
    }

    #[test]
    fn combining_runs_gives_one_line_per_run_in_order_of_size() {
        let a = report(8, &[(0.0, Some(0.0)), (60.0, Some(0.4))]);
        let b = report(1, &[(0.0, Some(0.0)), (60.0, Some(0.1))]);
        let (chart, lines) = combine(&[(PathBuf::from("a"), a), (PathBuf::from("b"), b)], 0.3);
        assert_eq!(
            chart
                .series
                .iter()
                .map(|s| s.label.as_str())
                .collect::<Vec<_>>(),
            ["N = 1", "N = 8"]
        );
        assert_eq!(chart.threshold, Some(0.3));
        assert_eq!(lines[0].workers, 1);
        assert_eq!(lines[1].time_to_threshold, Some(1.0));
        assert_eq!(lines[0].time_to_threshold, None);
        assert_eq!(lines[1].final_score, Some(0.4));
        assert_eq!(lines[1].tokens, 100);
    }

    #[test]
    fn runs_of_one_size_on_several_tasks_make_one_mean_line() {
        let mut a = report(8, &[(0.0, Some(0.0)), (60.0, Some(0.4))]);
        let mut b = report(8, &[(0.0, Some(0.2)), (60.0, Some(0.2))]);
        a.setup.instance_id = "a".into();
        b.setup.instance_id = "b".into();
        let (chart, lines) = combine(&[(PathBuf::from("a"), a), (PathBuf::from("b"), b)], 0.3);
        assert_eq!(lines.len(), 1);
        assert_eq!(
            chart.series[0].points,
            vec![(0.0, 0.1), (1.0, 0.30000000000000004)]
        );
        assert_eq!(lines[0].tasks, ["a", "b"]);
        assert_eq!(lines[0].time_to_threshold, Some(1.0));
        assert_eq!(lines[0].tokens, 200);
        assert_eq!(chart.series[0].label, "N = 8 (mean of 2)");
    }

    #[test]
    fn a_report_saves_with_its_charts_and_loads_back() {
        let d = tempfile::tempdir().unwrap();
        let r = report(2, &[(0.0, Some(0.0)), (30.0, Some(0.25))]);
        r.save(d.path()).unwrap();
        assert_eq!(Report::load(d.path()).unwrap(), Some(r));
        assert!(bench_dir(d.path()).join("chart.svg").is_file());
        assert!(std::fs::read(bench_dir(d.path()).join("chart.png"))
            .unwrap()
            .starts_with(b"\x89PNG"));
        assert_eq!(Report::load(&d.path().join("none")).unwrap(), None);
    }

    #[tokio::test]
    async fn a_submission_is_the_tree_at_the_commit_without_a_root_executable() {
        let d = tempfile::tempdir().unwrap();
        let repo = d.path().join("repo");
        std::fs::create_dir_all(repo.join("sub")).unwrap();
        for f in ["compile.sh", "executable", "sub/executable"] {
            std::fs::write(repo.join(f), f).unwrap();
        }
        let sh = |args: &[&str]| {
            let st = std::process::Command::new("git")
                .arg("-C")
                .arg(&repo)
                .args(["-c", "user.name=t", "-c", "user.email=t@t"])
                .args(args)
                .status()
                .unwrap();
            assert!(st.success());
        };
        sh(&["init", "-q", "-b", "main"]);
        sh(&["add", "-A"]);
        sh(&["commit", "-q", "-m", "c"]);
        let commit = main_commit(&repo).await.unwrap();
        let out = d.path().join("out/submission.tar.gz");
        export(&repo, &commit, &out).await.unwrap();
        let list = std::process::Command::new("tar")
            .arg("-tzf")
            .arg(&out)
            .output()
            .unwrap();
        let mut names: Vec<String> = String::from_utf8(list.stdout)
            .unwrap()
            .lines()
            .map(String::from)
            .collect();
        names.sort();
        assert_eq!(names, ["compile.sh", "sub/", "sub/executable"]);
        // Before anything is merged main is an empty tree: an empty submission.
        let empty = d.path().join("empty");
        std::fs::create_dir(&empty).unwrap();
        let st = std::process::Command::new("git")
            .arg("-C")
            .arg(&empty)
            .args(["init", "-q", "-b", "main"])
            .status()
            .unwrap();
        assert!(st.success());
        let tree = std::process::Command::new("git")
            .arg("-C")
            .arg(&empty)
            .args([
                "-c",
                "user.name=t",
                "-c",
                "user.email=t@t",
                "commit",
                "-q",
                "--allow-empty",
                "-m",
                "e",
            ])
            .status()
            .unwrap();
        assert!(tree.success());
        let commit = main_commit(&empty).await.unwrap();
        export(&empty, &commit, &d.path().join("e.tar.gz"))
            .await
            .unwrap();
        assert!(d.path().join("e.tar.gz").is_file());
    }
}
