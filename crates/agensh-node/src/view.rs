//! The run as its user sees it on the terminal (`agensh run`): the live view while it runs
//! (redrawn on a terminal, lines of changes otherwise) from the node's [`Progress`]
//! stream, the dashboard link, the goal met (and the run's end a grace later), and the
//! summary at its end (lines for people, or one JSON document).

use std::collections::{BTreeMap, VecDeque};
use std::future::Future;
use std::io::{IsTerminal, Write};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use agensh_client::show::{clock, count, gateway_json, gateway_text};
use agensh_client::Client;
use agensh_domain::goal::{short, Economy, GoalStatus};
use agensh_domain::text::{escape, Lines};
use agensh_domain::turn::clip as truncate;
use agensh_domain::worker::{WorkerInfo, WorkerStatus};
use agensh_model::ModelServer;
use agensh_process::{Shutdown, ShutdownTrigger};
use agensh_protocol::rest::{ModelUsage, Stats};
use tokio::sync::mpsc;

use crate::adapters::Usage;
use crate::node::{run_node, NodePlan, NodeSummary, WorkerLine};
use crate::turn::Progress;

/// Stored text (a record's text, an agent's step) as one line safe for a terminal.
fn one_line(s: &str) -> std::borrow::Cow<'_, str> {
    escape(s, Lines::One)
}

fn now_ms() -> i64 {
    agensh_domain::time::unix_ms(SystemTime::now())
}

/// How the run ended: its length, its goal and what it spent.
pub struct RunEnd<'a> {
    /// How long it ran.
    pub elapsed: Duration,
    /// Unix ms the run started.
    pub started_ms: i64,
    /// Its goal as the hub judged it at the end.
    pub goal: &'a GoalStatus,
    /// What it spent, before and after the goal.
    pub economy: &'a Economy,
}

/// Most recent changes the live view keeps for its compact form.
const RECENT_CHANGES: usize = 64;
/// Off a terminal, each worker's steps are printed as lines only up to this many workers.
const STEP_LINES_UP_TO: usize = 32;

/// When the run started and when it ends, for the live view's first line.
#[derive(Debug, Clone)]
pub struct RunClock {
    /// When the run started.
    pub started: Instant,
    /// When it ends; none: no time limit.
    pub ends_at: Option<SystemTime>,
    /// The dashboard's address (the hub's `/`).
    pub dashboard: String,
}

/// Gives the hub the run's clock (the dashboard's time left) and prints a one-time link
/// that logs a browser in to the dashboard. Neither stops the run when it fails.
pub async fn tell_dashboard(admin: &Client, clock: &RunClock) {
    let started = SystemTime::now() - clock.started.elapsed();
    let run = agensh_protocol::dashboard::RunClock::of(started, clock.ends_at);
    if let Err(e) = admin.set_run_clock(&run).await {
        tracing::warn!("the hub did not take the run's clock: {e}");
    }
    dashboard_link(admin).await;
}

/// Prints a one-time link that logs a browser in to the dashboard of `admin`'s hub (a
/// warning in the log when there is none).
pub async fn dashboard_link(admin: &Client) {
    match admin.dashboard_link().await {
        Ok(link) => eprintln!(
            "dashboard: {} — open this link once to log in (it works for 10 minutes; `agensh dashboard` makes another)",
            link.url
        ),
        Err(e) => tracing::warn!("no dashboard link: {e}"),
    }
}

/// The line a run starts with: how many workers, on what, toward which goal (its first
/// line, marked when there is more), at which hub.
pub fn running(workers: usize, agent: &str, goal: &str, hub: &str) -> String {
    let goal = goal.trim();
    let goal = match goal.split_once('\n') {
        Some((first, _)) => format!("{}…", first.trim_end()),
        None => goal.to_string(),
    };
    format!("running {workers} worker(s) with the {agent} on \"{goal}\" — hub {hub}; Ctrl-C stops")
}

/// The run as a whole at one moment, the live view's first line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct RunLine {
    elapsed: Duration,
    /// None: the run has no time limit.
    left: Option<Duration>,
    merged: u64,
    open: u64,
    /// Unix ms now, to age each worker's step.
    now: i64,
}

impl RunLine {
    fn render(&self) -> String {
        let left = self.left.map_or("no time limit".to_string(), |l| {
            format!("{} left", clock(l))
        });
        format!(
            "elapsed {} · {left} · parts merged {} (PRs open {})",
            clock(self.elapsed),
            self.merged,
            self.open
        )
    }
}

/// Redraws the view (on a terminal) or prints changes (otherwise), until the node's
/// progress stream `rx` ends; `read` gives the organization's workers (their claims) and
/// counts, read once a second on a terminal.
pub async fn live_view<R, F>(
    mut rx: mpsc::UnboundedReceiver<(String, Progress)>,
    read: R,
    run: RunClock,
    quiet: bool,
) where
    R: Fn() -> F,
    F: Future<Output = (Vec<WorkerInfo>, Stats)>,
{
    let mut lines: BTreeMap<String, WorkerLine> = BTreeMap::new();
    let mut recent: VecDeque<String> = VecDeque::with_capacity(RECENT_CHANGES);
    let tty = std::io::stderr().is_terminal() && !quiet;
    let term = console::Term::stderr();
    let mut drawn = 0usize;
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    loop {
        tokio::select! {
            got = rx.recv() => match got {
                None => break,
                Some((id, p)) => {
                    let print_steps = !tty && !quiet && lines.len() <= STEP_LINES_UP_TO;
                    let line = lines.entry(id.clone()).or_insert(WorkerLine {
                        status: WorkerStatus::Starting, turns: 0, last_action: String::new(), usage: Default::default(), progress: None,
                    });
                    let change = match p {
                        Progress::Status(s) => {
                            line.status = s;
                            line.progress = None;
                            Some(format!("{id}: {}", s.as_str()))
                        }
                        Progress::Step(step) => {
                            if print_steps {
                                eprintln!("{id}: {} (turn tokens {})", one_line(&step.step), step.tokens);
                            }
                            line.progress = Some(step);
                            None
                        }
                        Progress::Turn { turns, last_action, usage } => {
                            line.turns = turns;
                            line.last_action = last_action.clone();
                            line.usage = usage;
                            line.progress = None;
                            let change = format!("{id}: turn {turns} ended ({last_action})");
                            if !tty && !quiet {
                                eprintln!("{}", one_line(&change));
                            }
                            Some(change)
                        }
                    };
                    if let Some(change) = change {
                        if recent.len() == RECENT_CHANGES {
                            recent.pop_front();
                        }
                        recent.push_back(change);
                    }
                }
            },
            _ = tick.tick() => {
                if tty {
                    let (claims, stats) = read().await;
                    let head = RunLine {
                        elapsed: run.started.elapsed(),
                        left: run.ends_at.map(|e| e.duration_since(SystemTime::now()).unwrap_or_default()),
                        merged: stats.prs_merged,
                        open: stats.prs_open,
                        now: now_ms(),
                    };
                    let (rows, cols) = term.size_checked().unwrap_or((24, 80));
                    let mut view = render_view(&head, &lines, &claims, &recent, (rows as usize).saturating_sub(1).max(2), cols as usize);
                    view.insert(1, truncate(&format!("dashboard {} (log in: agensh dashboard)", run.dashboard), cols as usize));
                    drawn = redraw(&view, drawn);
                }
            }
        }
    }
}

/// Moves up over the `drawn` lines of the last view, writes `view` and clears what is left
/// below it; returns how many lines it wrote.
pub fn redraw(view: &[String], drawn: usize) -> usize {
    let mut err = std::io::stderr().lock();
    if drawn > 0 {
        let _ = write!(err, "\x1b[{drawn}A");
    }
    for line in view {
        let _ = writeln!(err, "\x1b[2K{}", one_line(line));
    }
    let _ = write!(err, "\x1b[J");
    let _ = err.flush();
    view.len()
}

/// A worker's tokens: those of its finished turns and those of the turn it is in.
fn tokens_of(l: &WorkerLine) -> u64 {
    l.usage.input_tokens + l.usage.output_tokens + l.progress.as_ref().map_or(0, |p| p.tokens)
}

/// The live view for a terminal of `rows` × `cols`: the run's line (elapsed, time left,
/// parts merged), then a line per worker when they fit (one row stays free) — its current
/// step and for how long, its tokens and its last speed — else counts per state and the
/// most recent changes. No line is wider than `cols`, and never more than `rows - 1` lines.
fn render_view(
    head: &RunLine,
    lines: &BTreeMap<String, WorkerLine>,
    workers: &[WorkerInfo],
    recent: &VecDeque<String>,
    rows: usize,
    cols: usize,
) -> Vec<String> {
    let room = rows.saturating_sub(1).max(1);
    let mut view = vec![head.render()];
    if lines.len() < room {
        let claims: BTreeMap<&str, String> = workers
            .iter()
            .filter_map(|w| {
                w.claims.last().map(|c| {
                    let what = c.label.as_deref().unwrap_or(&c.text);
                    (w.id.as_str(), format!("{} {what}", c.id))
                })
            })
            .collect();
        view.extend(lines.iter().map(|(id, l)| {
            let claim = claims.get(id.as_str()).map_or("", String::as_str);
            let (step, speed) = match &l.progress {
                Some(p) => {
                    let secs = (head.now - p.since).max(0) as u64 / 1000;
                    (
                        format!("{} {}", p.step, clock(Duration::from_secs(secs))),
                        format!("{:.1} tok/s", p.tokens_per_sec),
                    )
                }
                None if l.last_action.is_empty() => (String::new(), String::new()),
                None => (format!("last {}", l.last_action), String::new()),
            };
            format!(
                "{id:<6} {:<8} turns {:<4} {:<40} tokens {:<6} {:<10} claim {}",
                l.status.as_str(),
                l.turns,
                truncate(&step, 40),
                count(tokens_of(l)),
                speed,
                truncate(claim, 28)
            )
        }));
    } else {
        let counts: Vec<String> = WorkerStatus::ALL
            .iter()
            .map(|s| {
                let n = lines.values().filter(|l| l.status == *s).count();
                format!("{n} {}", s.as_str())
            })
            .collect();
        let turns: u64 = lines.values().map(|l| l.turns).sum();
        let tokens: u64 = lines.values().map(tokens_of).sum();
        let claiming = workers.iter().filter(|w| !w.claims.is_empty()).count();
        view.push(format!(
            "{} workers: {} · {turns} turns · {claiming} with a claim · tokens {tokens}",
            lines.len(),
            counts.join(", ")
        ));
        view.push("most recent changes:".to_string());
        let shown = room.saturating_sub(view.len());
        let skip = recent.len().saturating_sub(shown);
        view.extend(recent.iter().skip(skip).map(|c| format!("  {c}")));
    }
    view.into_iter()
        .take(room)
        .map(|l| truncate(&l, cols.max(1)))
        .collect()
}

/// The run's summary as one JSON document (`agensh run --json`).
pub fn summary_json(
    summary: &NodeSummary,
    stats: &Stats,
    gateway: &BTreeMap<String, ModelUsage>,
    run: &RunEnd<'_>,
) -> serde_json::Value {
    let usage = summary.usage();
    let workers: Vec<_> = summary
        .workers
        .iter()
        .filter_map(|(id, r)| r.as_ref().ok().map(|w| (id, w)))
        .map(|(id, w)| {
            serde_json::json!({
                "id": id, "turns": w.turns,
                "input_tokens": w.usage.input_tokens,
                "cached_input_tokens": w.usage.cached_input_tokens,
                "output_tokens": w.usage.output_tokens,
                "cost_usd": w.usage.cost_usd,
                "turns_without_usage": w.usage.unreported_turns,
                "restarts": w.restarts,
                "memory_kills": w.memory_kills,
                "gateway": gateway_json(gateway.get(id.as_str())),
            })
        })
        .collect();
    serde_json::json!({
        "seconds": run.elapsed.as_secs_f64(),
        "turns": summary.turns(),
        "prs_merged": stats.prs_merged, "prs_open": stats.prs_open,
        "records": stats.records, "messages": stats.messages,
        "input_tokens": usage.input_tokens, "cached_input_tokens": usage.cached_input_tokens,
        "output_tokens": usage.output_tokens, "cost_usd": usage.cost_usd,
        "turns_without_usage": usage.unreported_turns,
        "gateway": gateway_json(gateway.get("")),
        "workers": workers,
        "failed_workers": summary.failed().iter().map(|(id, e)| serde_json::json!({"id": id, "error": e})).collect::<Vec<_>>(),
        "goal": agensh_client::show::org::goal_summary_json(run.goal, run.economy, run.started_ms),
    })
}

/// The run's summary for people: what was done and spent, the goal, memory kills and
/// failed workers.
pub fn summary_lines(
    summary: &NodeSummary,
    stats: &Stats,
    gateway: &BTreeMap<String, ModelUsage>,
    run: &RunEnd<'_>,
) -> Vec<String> {
    let mut out = vec![format!(
        "done in {:.0} s: {} turn(s) by {} worker(s); PRs merged {} (open {}); {} board record(s); {} message(s); {}",
        run.elapsed.as_secs_f64(),
        summary.turns(),
        summary.workers.len(),
        stats.prs_merged,
        stats.prs_open,
        stats.records,
        stats.messages,
        usage_text(&summary.usage(), summary.turns())
    )];
    if let Some(g) = gateway.get("") {
        out.push(gateway_text(g));
    }
    out.extend(agensh_client::show::org::goal_summary(
        run.goal,
        run.economy,
        run.started_ms,
    ));
    for (id, w) in summary.workers.iter() {
        if let Some(w) = w.as_ref().ok().filter(|w| w.memory_kills > 0) {
            out.push(format!(
                "{id}: its agent was killed by its memory limit (run.worker_memory) {} time(s) and restarted",
                w.memory_kills
            ));
        }
    }
    for (id, e) in summary.failed() {
        out.push(format!("{id} failed: {e}"));
    }
    out
}

/// An error (exit 4) when every worker of the run failed: nothing was done, and a script
/// running `agensh run` must be able to tell that from a run that ended well.
pub fn every_worker_failed(summary: &NodeSummary) -> anyhow::Result<()> {
    let failed = summary.failed();
    match failed.first() {
        Some((id, e)) if failed.len() == summary.workers.len() => anyhow::bail!(
            "every worker failed ({n} of {n}); {id}: {e} — each worker's log is .agensh/logs/<id>/turns.jsonl",
            n = failed.len()
        ),
        _ => Ok(()),
    }
}

/// Tokens and cost as counted, and how many turns' agents reported none (never guessed).
fn usage_text(u: &Usage, turns: u64) -> String {
    if turns > 0 && u.unreported_turns >= turns {
        return "tokens not reported by the agent".into();
    }
    let mut t = format!(
        "tokens in {} (cached {}) out {}; cost ${:.4}",
        u.input_tokens, u.cached_input_tokens, u.output_tokens, u.cost_usd
    );
    if u.unreported_turns > 0 {
        t.push_str(&format!(
            " ({} turn(s) without usage from the agent, not counted)",
            u.unreported_turns
        ));
    }
    t
}

/// Runs a node's workers (`agensh node`) until the run ends or `stop`, saying each turn's
/// end on stderr; then stops the local model server, if any.
pub async fn drive(
    plan: NodePlan,
    model_server: Option<ModelServer>,
    stop: Shutdown,
) -> anyhow::Result<NodeSummary> {
    let (tx, mut rx) = mpsc::unbounded_channel();
    let node = tokio::spawn(run_node(plan, stop, tx));
    let printer = tokio::spawn(async move {
        while let Some((id, p)) = rx.recv().await {
            if let Progress::Turn {
                turns, last_action, ..
            } = p
            {
                eprintln!("{id}: turn {turns} ended ({})", one_line(&last_action));
            }
        }
    });
    let summary = node.await??;
    let _ = printer.await;
    if let Some(server) = model_server {
        server.stop().await;
    }
    eprintln!("node done: {} turn(s)", summary.turns());
    Ok(summary)
}

/// Longest the run waits, once its goal is met, for turns still running to end on their
/// own (each worker stops at its turn's end) before it stops them.
pub const GOAL_GRACE: Duration = Duration::from_secs(60);

/// Waits for the goal to be met, says so, and — unless `keep_going` — stops the turns
/// still running [`GOAL_GRACE`] later.
pub async fn end_at_goal(
    mut met: tokio::sync::watch::Receiver<Option<GoalStatus>>,
    stopper: Arc<ShutdownTrigger>,
    keep_going: bool,
    started: Instant,
) {
    let Ok(status) = met.wait_for(Option::is_some).await.map(|s| s.clone()) else {
        return;
    };
    let commit = status.and_then(|s| s.met_commit).unwrap_or_default();
    let next = if keep_going {
        "the run goes on (--keep-going)"
    } else {
        "every worker stops at the end of its turn"
    };
    eprintln!(
        "goal met at {} after {}: {next}",
        short(&commit),
        clock(started.elapsed())
    );
    if keep_going {
        return;
    }
    tokio::time::sleep(GOAL_GRACE).await;
    eprintln!(
        "turns still running {} s after the goal was met are stopped",
        GOAL_GRACE.as_secs()
    );
    stopper.fire();
}

#[cfg(test)]
mod tests {
    use super::*;

    fn workers(n: usize) -> BTreeMap<String, WorkerLine> {
        (0..n)
            .map(|i| {
                let status = WorkerStatus::ALL[i % 3];
                let line = WorkerLine {
                    status,
                    turns: 2,
                    last_action: "board_write".into(),
                    usage: Default::default(),
                    progress: None,
                };
                (format!("w{:04}", i + 1), line)
            })
            .collect()
    }

    const NOW: i64 = 1_700_000_000_000;

    fn head() -> RunLine {
        RunLine {
            elapsed: Duration::from_secs(250),
            left: Some(Duration::from_secs(950)),
            merged: 1,
            open: 2,
            now: NOW,
        }
    }

    #[test]
    fn a_run_starts_with_its_first_line_of_goal() {
        assert_eq!(
            running(2, "built-in agent", "Make the tests pass.\nAll of them.", "http://h"),
            "running 2 worker(s) with the built-in agent on \"Make the tests pass.…\" — hub http://h; Ctrl-C stops"
        );
    }

    #[test]
    fn a_thousand_workers_become_counts_and_recent_changes() {
        let lines = workers(1_024);
        let recent: VecDeque<String> = (0..RECENT_CHANGES)
            .map(|i| format!("w{:04}: turn 2 ended (board_write)", i + 1))
            .collect();
        let view = render_view(&head(), &lines, &[], &recent, 40, 100);
        assert_eq!(view.len(), 39, "{view:#?}");
        assert!(
            view[1]
                .starts_with("1024 workers: 342 starting, 341 busy, 341 idle, 0 parked, 0 stalled"),
            "{}",
            view[1]
        );
        assert!(view[1].contains("2048 turns"), "{}", view[1]);
        assert_eq!(view[2], "most recent changes:");
        assert_eq!(
            view[38],
            format!("  w{:04}: turn 2 ended (board_write)", RECENT_CHANGES)
        );
        assert!(view.iter().all(|l| l.chars().count() <= 100));
    }

    #[test]
    fn workers_that_fit_get_a_line_each() {
        let lines = workers(5);
        let view = render_view(&head(), &lines, &[], &VecDeque::new(), 40, 200);
        assert_eq!(view.len(), 6);
        assert!(
            view[1].starts_with("w0001  starting turns 2"),
            "{}",
            view[1]
        );
        assert_eq!(
            render_view(&head(), &lines, &[], &VecDeque::new(), 7, 200).len(),
            6
        );
        assert_eq!(
            render_view(&head(), &lines, &[], &VecDeque::new(), 6, 200)[1],
            {
                "5 workers: 2 starting, 2 busy, 1 idle, 0 parked, 0 stalled, 0 stopped, 0 dead · 10 turns · 0 with a claim · tokens 0"
            }
        );
    }

    #[test]
    fn a_narrow_terminal_cuts_lines() {
        let view = render_view(&head(), &workers(3), &[], &VecDeque::new(), 40, 20);
        assert!(view.iter().all(|l| l.chars().count() == 20), "{view:#?}");
        assert!(view[1].ends_with('…'));
    }

    #[test]
    fn the_first_line_has_the_time_and_the_parts_merged() {
        let view = render_view(&head(), &workers(2), &[], &VecDeque::new(), 40, 200);
        assert_eq!(
            view[0],
            "elapsed 4m10s · 15m50s left · parts merged 1 (PRs open 2)"
        );
        let endless = RunLine {
            left: None,
            elapsed: Duration::from_secs(3_725),
            ..head()
        };
        assert_eq!(
            render_view(&endless, &workers(2), &[], &VecDeque::new(), 40, 200)[0],
            "elapsed 1h02m05s · no time limit · parts merged 1 (PRs open 2)"
        );
    }

    #[test]
    fn a_busy_worker_shows_its_step_for_how_long_its_tokens_and_speed() {
        let mut lines = workers(2);
        let busy = lines.get_mut("w0002").unwrap();
        busy.usage.input_tokens = 10_000;
        busy.usage.output_tokens = 300;
        busy.progress = Some(agensh_domain::worker::WorkerProgress {
            step: "model request 3 (1204 tokens in)".into(),
            since: NOW - 42_000,
            tokens: 2_000,
            tokens_per_sec: 9.54,
        });
        let view = render_view(&head(), &lines, &[], &VecDeque::new(), 40, 200);
        let line = &view[2];
        assert!(
            line.starts_with("w0002  busy     turns 2    model request 3 (1204 tokens in) 42s"),
            "{line}"
        );
        assert!(line.contains("tokens 12.3k  9.5 tok/s"), "{line}");
        // A worker between turns shows what it did last.
        assert!(view[1].contains("last board_write"), "{}", view[1]);
        // The compact form counts the tokens of the turns in progress too.
        let compact = render_view(&head(), &lines, &[], &VecDeque::new(), 3, 200);
        assert!(compact[1].ends_with("tokens 12300"), "{}", compact[1]);
    }
}
