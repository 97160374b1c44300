//! The turn loop of one worker: launch prompt; then, at each turn boundary, the pending
//! events batched into the next prompt with the unread board digest; an idle timeout sends
//! a continue prompt; deadline notices at their times; the run's end stops the worker.
//! The worker's status is kept current at the hub and every turn is logged.

use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use agensh_client::Client;
use agensh_domain::config::RunConfig;
use agensh_domain::event::{kinds, Event, Priority};
use agensh_domain::prompt::{
    render, BUDGET_RAISED_TEMPLATE, CONTINUE_TEMPLATE, DEADLINE_TEMPLATE, INTERRUPTED_TEMPLATE,
    RESTART_TEMPLATE, RESUME_TEMPLATE,
};
use agensh_domain::receipt::Via;
use agensh_domain::time::unix_ms;
use agensh_domain::worker::{WorkerProgress, WorkerStatus};
use agensh_domain::Result;
use agensh_process::Shutdown;
use serde_json::json;
use tokio::sync::mpsc;

use agensh_protocol::dashboard::{ToolCallSummary, TurnReport};
use tokio::task::JoinSet;

use crate::adapters::limits::MEMORY_KILLED;
use crate::adapters::{Agent, AgentContext, Heartbeat, TurnEvent, TurnOutcome, Usage};
use crate::parking::{wakes_a_parked_worker, Footprint, Parking};
use crate::pump::EventPump;
use crate::status::StatusReporter;
use crate::urgent::UrgentWatch;

/// Stop reasons of a turn cut off before the agent was done: the built-in agent's step
/// limit and ACP's `max_turn_requests`.
const CUT_OFF: &[&str] = &["max_steps", "max_turn_requests"];
/// How long a worker whose turn was cut off waits for events before it is told to carry on.
const RESUME_AFTER: Duration = Duration::from_secs(1);
/// Longest wait for events before the idle timeout and deadline notices are checked again.
const WAIT_SECS: u64 = 30;
/// Most events listed in one prompt; the rest are summarized by count.
const EVENTS_SHOWN: usize = 50;
/// Longest wait for an interrupted agent to end its turn; past it the agent is stopped and
/// started again (its session restored where it can be).
pub const CANCEL_GRACE: Duration = Duration::from_secs(10);
/// Longest wait, as a worker stops, for its turn reports still on their way to the hub.
const REPORTS_WAIT: Duration = Duration::from_secs(5);

/// How one worker runs.
#[derive(Debug, Clone)]
pub struct WorkerPlan {
    pub ctx: AgentContext,
    /// The rendered launch prompt.
    pub launch_prompt: String,
    /// Time without events after a turn before a continue prompt.
    pub idle_timeout: Duration,
    /// Park the worker when its turns change nothing ([`crate::parking`]); off: a continue
    /// prompt after every `idle_timeout`.
    pub park_idle: bool,
    /// When the run ends, if it has a limit.
    pub ends_at: Option<SystemTime>,
    /// Notices sent this long before the end (e.g. 45 and 5 minutes).
    pub notices_before_end: Vec<Duration>,
    /// Where turns are logged (`.agensh/logs/<id>/`).
    pub log_dir: PathBuf,
    /// How the worker recovers when its agent fails.
    pub recovery: Recovery,
    /// Urgent news unseen this long while the worker is in a turn interrupts the turn
    /// (`run.interrupt_after_secs`; none: never).
    pub interrupt_after: Option<Duration>,
}

/// How a worker recovers when its agent fails (DESIGN §6.6): the agent is stopped and
/// started again (the adapter restores its session where the agent can) after a wait that
/// doubles with each failure in a row, and its next prompt is a recap around the prompt it
/// failed on. After `max_restarts` failures in a row the worker is dead: its claims lapse
/// and `#general` is told.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Recovery {
    pub max_restarts: u32,
    /// The wait before the first restart.
    pub backoff: Duration,
    /// An agent silent this long in the middle of a turn is hung (none: never).
    pub hang_after: Option<Duration>,
}

/// The longest wait between restarts.
const MAX_BACKOFF: Duration = Duration::from_secs(300);

impl Recovery {
    /// The wait before restart number `n` (1-based).
    pub fn backoff_before(&self, n: u32) -> Duration {
        let factor = 2u32.saturating_pow(n.saturating_sub(1).min(16));
        self.backoff
            .saturating_mul(factor)
            .min(MAX_BACKOFF.max(self.backoff))
    }
}

impl From<&RunConfig> for Recovery {
    /// `run.max_restarts`, `run.restart_backoff_secs` and `run.hang_timeout_secs` (0: never).
    fn from(run: &RunConfig) -> Self {
        Recovery {
            max_restarts: run.max_restarts,
            backoff: Duration::from_secs_f64(run.restart_backoff_secs),
            hang_after: (run.hang_timeout_secs > 0)
                .then(|| Duration::from_secs(run.hang_timeout_secs)),
        }
    }
}

impl Default for Recovery {
    /// As `agensh.toml`'s defaults say.
    fn default() -> Self {
        Recovery::from(&RunConfig::default())
    }
}

/// How a recovery ended.
enum Recovered {
    /// The agent runs again.
    Running,
    /// The run ended (or the node is stopping) while waiting to restart.
    Stopped,
    /// The restarts are used up: the last error.
    GaveUp(agensh_domain::Error),
}

/// What the worker tells the node as it goes (for the live view).
#[derive(Debug, Clone, PartialEq)]
pub enum Progress {
    Status(WorkerStatus),
    /// The agent began a step of its turn, or its token count moved.
    Step(WorkerProgress),
    /// A turn ended: how many so far, what the agent did last, the usage so far.
    Turn {
        turns: u64,
        last_action: String,
        usage: Usage,
    },
}

/// What a worker did in the whole run.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct WorkerSummary {
    pub turns: u64,
    pub usage: Usage,
    /// Restarts of its agent.
    pub restarts: u64,
    /// Times its agent was killed by its memory limit (`run.worker_memory`; each also a
    /// restart).
    pub memory_kills: u64,
}

/// Why the next prompt is being sent (or why the wait for one ended).
enum Next {
    Events(Vec<Event>),
    Idle,
    Deadline(Duration),
    Stop,
    /// The agent's process died during the wait.
    Died(agensh_domain::Error),
}

/// The node's shared connections to the hub that every worker's loop uses.
#[derive(Clone)]
pub struct NodeLink {
    /// Events for the workers waiting at a turn boundary.
    pub events: EventPump,
    /// Status changes, sent to the hub together.
    pub status: StatusReporter,
    /// Urgent news waiting too long for the workers in a turn.
    pub urgent: UrgentWatch,
}

impl NodeLink {
    /// The event pump, status reporter and urgent watch of a node, against the hub of
    /// `hub` (whose own token is not used: each request carries its workers' tokens).
    pub fn start(hub: Client) -> Self {
        NodeLink {
            events: EventPump::start(hub.clone()),
            status: StatusReporter::start(hub.clone()),
            urgent: UrgentWatch::start(hub),
        }
    }
}

/// Runs `agent` for the worker of `plan` until the run ends or `stop` fires.
pub async fn run_worker(
    plan: WorkerPlan,
    mut agent: Box<dyn Agent>,
    hub: Client,
    link: NodeLink,
    mut stop: Shutdown,
    progress: mpsc::UnboundedSender<(String, Progress)>,
) -> Result<WorkerSummary> {
    let id = plan.ctx.worker.clone();
    let report = |p: Progress| {
        let _ = progress.send((id.clone(), p));
    };
    // Status updates go to the hub from the node's reporter, so no prompt waits for one;
    // `flush` waits for the last (stopped or dead) before the worker returns.
    let status = &link.status;
    let set_status = |s: WorkerStatus| {
        report(Progress::Status(s));
        status.set(&id, &plan.ctx.token, s);
        std::future::ready(())
    };
    std::fs::create_dir_all(&plan.log_dir).map_err(|e| {
        agensh_domain::Error::internal(format!("cannot create {}: {e}", plan.log_dir.display()))
    })?;
    // What the turn log says this worker was already shown, by this node before it was
    // killed: acknowledged now, so a restarted node never shows an event twice.
    let shown = shown_before(&plan.log_dir);
    let mut log = TurnLog::open(&plan.log_dir)?;

    set_status(WorkerStatus::Starting).await;
    // Agent failures in a row; a completed turn starts the count again.
    let mut failures = 0u32;
    let mut prompt = plan.launch_prompt.clone();
    if let Some(shown) = &shown {
        if !shown.is_empty() {
            if let Err(e) = hub.ack(shown).await {
                tracing::warn!(worker = %id, "could not acknowledge the events shown before the restart: {e}");
            }
        }
        prompt.push_str(RESTARTED_NOTE);
        log.write(
            json!({ "restarted": true, "acked_shown": shown, "at": unix_ms(SystemTime::now()) }),
        );
    }
    // A failure to recover from before the next turn: the error, and whether it ended a
    // turn (then the next prompt is a recap around the prompt it failed on).
    let mut failure: Option<(agensh_domain::Error, bool)> = None;
    if let Err(e) = agent.start(&plan.ctx).await {
        log.write(
            json!({ "error": e.message, "phase": "start", "at": unix_ms(SystemTime::now()) }),
        );
        failure = Some((e, false));
    }
    let mut summary = WorkerSummary::default();
    // Turns in a row that changed nothing, against the checkout as the last turn left it.
    let mut parking = if plan.park_idle {
        Parking::new(Footprint::of(&plan.ctx.checkout).await)
    } else {
        Parking::default()
    };
    // Restarts of the agent so far (each start after a failure), for the turn reports.
    let mut restarts = 0u64;
    // Turn reports on their way to the hub, in the background.
    let mut reports: JoinSet<()> = JoinSet::new();
    // The events the last prompt carried, acknowledged when its turn has ended (with the
    // next poll); those the next prompt carries, recorded presented as it is handed over,
    // and the urgent ones among them.
    let mut carry = Carry::default();
    // The next turn is a fresh worker's first (its launch prompt).
    let mut first_prompt = shown.is_none();
    let mut after = 0i64;
    let mut notices_left: Vec<Duration> = plan.notices_before_end.clone();
    notices_left.sort_by(|a, b| b.cmp(a));

    // Events that carry a `worker.stop` (a spent budget), taken at a turn's end or when a
    // turn ended in an error.
    let mut stopped_by: Option<Vec<Event>> = None;
    loop {
        if let Some(events) = stopped_by.take() {
            // The agent stops until the budget is raised (or for good, when it is the
            // organization's).
            let paused = pause_for_budget(
                &events,
                &mut *agent,
                &plan,
                &hub,
                &link.events,
                &mut log,
                &set_status,
                &mut stop,
            )
            .await;
            match paused {
                Paused::Over => break,
                Paused::Resumed { after: a, error } => {
                    after = a;
                    failure = error.map(|e| (e, false));
                    prompt = render(BUDGET_RAISED_TEMPLATE, &[("worker_id", &id)])?;
                }
            }
        }
        if let Some((e, in_turn)) = failure.take() {
            // Refused model requests end a turn with an error too: when a budget stopped
            // the worker, that is no failure of its agent to recover from.
            if let Ok(pending) = hub.events(after, 0).await {
                if pending.iter().any(|e| e.kind == kinds::WORKER_STOP) {
                    stopped_by = Some(pending);
                    continue;
                }
            }
            let error = e.message.clone();
            if e.code == MEMORY_KILLED {
                summary.memory_kills += 1;
                show_memory_kill(&e, &id, &report, status);
            }
            let failures_before = failures;
            let recovered = recover(
                &mut *agent,
                &plan,
                &mut failures,
                e,
                &mut log,
                &set_status,
                &mut stop,
            );
            let recovered = recovered.await;
            restarts += u64::from(failures.saturating_sub(failures_before));
            match recovered {
                Recovered::Running => {}
                Recovered::Stopped => break,
                Recovered::GaveUp(e) => {
                    finish_reports(&mut reports).await;
                    return give_up(agent, &hub, &plan, failures, e, &set_status, status).await;
                }
            }
            if in_turn {
                let max = plan.recovery.max_restarts;
                prompt = restart_prompt(&id, &error, failures, max, &prompt)?;
            }
        }
        if stop.is_shutdown() || past(plan.ends_at) {
            break;
        }
        set_status(WorkerStatus::Busy).await;
        // The events this prompt carries are presented as it is handed over (their
        // receipts); the urgent ones leave the queue with it, else the hub would show them
        // again as notices of the agent's first tool call in this turn. All are
        // acknowledged when the turn has ended.
        // News that came while this prompt was made from something else than events (a
        // restart, the node's restart, a continue or deadline prompt, a raised budget)
        // goes with it: nothing waits a turn more. A fresh worker's launch prompt is left
        // as it is (it reads the board first anyway).
        if !carry.fresh && !first_prompt {
            match hub.events(after, 0).await {
                Ok(events) if events.iter().any(|e| e.kind == kinds::WORKER_STOP) => {
                    stopped_by = Some(events);
                    continue;
                }
                Ok(events) if !events.is_empty() => {
                    after = events.iter().map(|e| e.seq).max().unwrap_or(after);
                    carry.take(&events, Via::Prompt, &mut log);
                    prompt.push_str("\n\n");
                    prompt.push_str(&news_of(&hub, &events).await);
                }
                Ok(_) => {}
                Err(e) => tracing::warn!(worker = %id, "could not read pending events: {e}"),
            }
        }
        carry.fresh = false;
        first_prompt = false;
        // A prompt of normal events only (channel posts, PRs opened, main moved) records
        // nothing now: none of them can show in a tool result, and their acknowledgement
        // with the next poll records them presented and acknowledged at once. A post to
        // 1,024 workers would otherwise cost 1,024 requests and writes as it is delivered
        // (the node benchmark's dispatch p99 went from 71 to 699 ms).
        if carry.urgent.is_empty() {
            carry.to_present.clear();
        }
        if !carry.to_present.is_empty() {
            if let Err(e) = hub.presented(&carry.to_present, carry.via).await {
                tracing::warn!(worker = %id, "could not record the events presented: {e}");
                // Never shown twice all the same: the urgent ones leave the queue now.
                if !carry.urgent.is_empty() {
                    if let Err(e) = hub.ack(&carry.urgent).await {
                        tracing::warn!(worker = %id, "could not acknowledge events: {e}");
                    }
                }
            }
            carry.to_present.clear();
            carry.urgent.clear();
        }
        let started = SystemTime::now();
        plan.ctx.heartbeat.clear();
        plan.ctx.heartbeat.beat();
        plan.ctx.interrupt.clear();
        let hang_after = plan.recovery.hang_after.filter(|_| !agent.self_bounded());
        let steps = forward_steps(&plan.ctx.heartbeat, &id, &progress, status);
        let (outcome, interruption) = run_turn(
            &mut *agent,
            &prompt,
            &plan,
            &link.urgent,
            hang_after,
            &mut stop,
            steps,
        )
        .await;
        let Some(outcome) = outcome else { break };
        if let Some(i) = &interruption {
            log.write(json!({
                "interrupted": i.news.iter().map(|e| e.seq).collect::<Vec<_>>(),
                "at": unix_ms(SystemTime::now()),
                "turn_ms": i.at.duration_since(started).unwrap_or_default().as_millis() as u64,
                "ended_in_ms": i.at.elapsed().unwrap_or_default().as_millis() as u64,
                "forced": outcome.as_ref().is_err_and(|e| e.code == NOT_CANCELLED),
            }));
        }
        let outcome = match outcome {
            // The agent did not end its turn when asked: it is stopped and started again
            // (its session restored where it can be), and the turn counts as ended.
            Err(e) if e.code == NOT_CANCELLED => {
                agent.stop().await;
                restarts += 1;
                if let Err(e) = agent.start(&plan.ctx).await {
                    failure = Some((e, false));
                }
                Ok(TurnOutcome {
                    stop_reason: NOT_CANCELLED.to_string(),
                    usage: Usage::not_reported(),
                    events: Vec::new(),
                    model_ms: 0,
                    tools_ms: 0,
                })
            }
            o => o,
        };
        let outcome = match outcome {
            Ok(o) => o,
            Err(e) => {
                log.write(
                    json!({ "prompt": prompt, "error": e.message, "memory_limit": e.code == MEMORY_KILLED, "started": unix_ms(started), "ended": unix_ms(SystemTime::now()) }),
                );
                failure = Some((e, true));
                continue;
            }
        };
        failures = 0;
        summary.turns += 1;
        summary.usage += outcome.usage;
        log.write(json!({
            "turn": summary.turns, "started": unix_ms(started), "ended": unix_ms(SystemTime::now()),
            "prompt": prompt, "stop_reason": outcome.stop_reason, "usage": outcome.usage,
            "events": outcome.events, "model_ms": outcome.model_ms, "tools_ms": outcome.tools_ms,
            "carried": carry.at.iter().map(|(seq, at)| json!({ "seq": seq, "created_at": at })).collect::<Vec<_>>(),
        }));
        let last_action = outcome
            .events
            .iter()
            .rev()
            .find_map(|e| match e {
                crate::adapters::TurnEvent::ToolCall { name, .. } => Some(name.clone()),
                _ => None,
            })
            .unwrap_or_else(|| outcome.stop_reason.clone());
        // The hub's copy of the turn, for the dashboard: sent in the background, so the
        // next turn never waits for it; the turn log above stays the full record.
        let mut turn_report = report_of(
            summary.turns,
            started,
            &prompt,
            &carry.at,
            &outcome,
            &last_action,
            restarts,
        );
        turn_report.memory_kills = summary.memory_kills;
        while reports.try_join_next().is_some() {}
        let (client, worker) = (hub.clone(), id.clone());
        reports.spawn(async move {
            if let Err(e) = client.report_turn(&worker, &turn_report).await {
                tracing::warn!(worker = %worker, turn = turn_report.turn, "could not report the turn to the hub: {e}");
            }
        });
        report(Progress::Turn {
            turns: summary.turns,
            last_action,
            usage: summary.usage,
        });
        // The turn that carried these events is complete: they are delivered. They are
        // acknowledged (their receipts too, urgent ones included) with the next poll (one
        // request), or on their own below.
        carry.at.clear();

        // A turn cut off at its step limit was not done: the next one starts as soon as
        // the pending events are in, not after the idle timeout. So does the one after an
        // interrupted turn, with the news it was interrupted for.
        let interrupted = interruption.is_some();
        let cut_off = CUT_OFF.contains(&outcome.stop_reason.as_str()) || interrupted;
        if plan.park_idle {
            parking.turn_ended(
                Footprint::of(&plan.ctx.checkout).await,
                &outcome.events,
                cut_off,
            );
        }
        let idle = if cut_off {
            RESUME_AFTER
        } else {
            parking.idle_wait(plan.idle_timeout)
        };
        match parking.reason() {
            Some(why) => {
                set_status(WorkerStatus::Parked).await;
                let step = format!(
                    "parked: {why}; next continue prompt in {} unless news comes",
                    agensh_domain::time::span(idle.as_secs())
                );
                let now = unix_ms(SystemTime::now());
                log.write(json!({ "parked": why, "continue_in_secs": idle.as_secs(), "at": now }));
                status.progress(
                    &id,
                    Some(WorkerProgress {
                        step,
                        since: now,
                        tokens: 0,
                        tokens_per_sec: 0.0,
                    }),
                );
            }
            None => set_status(WorkerStatus::Idle).await,
        }
        // An agent that dies while the worker waits is restarted at once (with its
        // session), and the wait goes on.
        let next = loop {
            let next = wait_for_reason(
                &link.events,
                &plan,
                idle,
                Boundary {
                    after,
                    to_ack: &mut carry.seqs,
                    notices_left: &mut notices_left,
                    parked: parking.parked() && !cut_off,
                },
                &mut stop,
                &mut *agent,
            )
            .await;
            let Next::Died(e) = next else { break next };
            let memory = e.code == MEMORY_KILLED;
            if memory {
                summary.memory_kills += 1;
                show_memory_kill(&e, &id, &report, status);
            }
            log.write(json!({ "error": e.message, "phase": "between_turns", "memory_limit": memory, "at": unix_ms(SystemTime::now()) }));
            let failures_before = failures;
            let recovered = recover(
                &mut *agent,
                &plan,
                &mut failures,
                e,
                &mut log,
                &set_status,
                &mut stop,
            )
            .await;
            restarts += u64::from(failures.saturating_sub(failures_before));
            match recovered {
                Recovered::Running => {
                    set_status(if parking.parked() {
                        WorkerStatus::Parked
                    } else {
                        WorkerStatus::Idle
                    })
                    .await
                }
                Recovered::Stopped => break Next::Stop,
                Recovered::GaveUp(e) => {
                    finish_reports(&mut reports).await;
                    return give_up(agent, &hub, &plan, failures, e, &set_status, status).await;
                }
            }
        };
        if !carry.seqs.is_empty() {
            if let Err(e) = hub.ack(&carry.seqs).await {
                tracing::warn!(worker = %id, "could not acknowledge events: {e}");
            }
            carry.seqs.clear();
        }
        let next = match next {
            Next::Events(events) if events.iter().any(|e| e.kind == kinds::WORKER_STOP) => {
                stopped_by = Some(events);
                continue;
            }
            other => other,
        };
        prompt = match next {
            Next::Stop | Next::Died(_) => break,
            Next::Events(events) => {
                after = events.iter().map(|e| e.seq).max().unwrap_or(after);
                let via = if interrupted {
                    Via::Interruption
                } else {
                    Via::Prompt
                };
                carry.take(&events, via, &mut log);
                carry.fresh = true;
                let news = news_of(&hub, &events).await;
                match &interruption {
                    Some(i) => interrupted_prompt(&id, i, started, plan.interrupt_after, &news)?,
                    None => news,
                }
            }
            // The news it was interrupted for was shown to it meanwhile, in a tool result.
            Next::Idle if interrupted => {
                let shown = "(it reached you meanwhile in a tool result's notices: `inbox` has it)";
                let i = interruption.as_ref().expect("interrupted");
                interrupted_prompt(&id, i, started, plan.interrupt_after, shown)?
            }
            Next::Idle if cut_off => render(RESUME_TEMPLATE, &[("worker_id", &id)])?,
            Next::Idle => render(
                CONTINUE_TEMPLATE,
                &[
                    ("worker_id", &id),
                    ("idle_for", &agensh_domain::time::span(idle.as_secs())),
                ],
            )?,
            Next::Deadline(left) => {
                let minutes = left.as_secs().div_ceil(60);
                let advice = if left <= Duration::from_secs(600) {
                    "Final integration: merge what is ready now, post your PATCH_SUMMARY, release your claims. Start nothing new."
                } else {
                    "Integrate and merge what you have; stop starting new features."
                };
                render(
                    DEADLINE_TEMPLATE,
                    &[
                        ("worker_id", &id),
                        ("minutes_left", &minutes.to_string()),
                        ("advice", advice),
                    ],
                )?
            }
        };
    }
    agent.stop().await;
    set_status(WorkerStatus::Stopped).await;
    status.flush().await;
    finish_reports(&mut reports).await;
    summary.restarts = restarts;
    Ok(summary)
}

/// The events the next prompt carries, from being taken until they are acknowledged.
#[derive(Default)]
struct Carry {
    /// Carried by the last prompt (or the next): acknowledged once its turn has ended.
    seqs: Vec<i64>,
    /// Recorded presented (`via`) as the next prompt is handed over.
    to_present: Vec<i64>,
    via: Via,
    /// The urgent ones among `to_present`.
    urgent: Vec<i64>,
    /// (seq, created_at) of those the next prompt carries, for the turn log and report.
    at: Vec<(i64, i64)>,
    /// The next prompt was made from the pending events just now.
    fresh: bool,
}

impl Carry {
    /// `events` go with the next prompt, presented `via`. Written to the turn log before
    /// the agent sees them: a node killed during the turn then knows, when it starts again,
    /// that they were shown.
    fn take(&mut self, events: &[Event], via: Via, log: &mut TurnLog) {
        self.seqs.extend(events.iter().map(|e| e.seq));
        self.to_present.extend(events.iter().map(|e| e.seq));
        self.via = via;
        self.urgent.extend(
            events
                .iter()
                .filter(|e| e.priority == Priority::Urgent)
                .map(|e| e.seq),
        );
        self.at.extend(events.iter().map(|e| (e.seq, e.created_at)));
        log.write(json!({ "carrying": events.iter().map(|e| e.seq).collect::<Vec<_>>(), "at": unix_ms(SystemTime::now()) }));
    }
}

/// What a prompt says of `events`: each listed, and the board's unread records when some
/// were appended.
async fn news_of(hub: &Client, events: &[Event]) -> String {
    let digest = if events.iter().any(|e| e.kind == kinds::BOARD_RECORD) {
        hub.read_board().await.unwrap_or_default()
    } else {
        Vec::new()
    };
    events_prompt(events, &digest)
}

/// The code of the error a turn ends with when its agent did not end it within
/// [`CANCEL_GRACE`] of being interrupted; also the stop reason recorded for that turn.
const NOT_CANCELLED: &str = "not_cancelled";

/// Why and when a turn was interrupted.
struct Interruption {
    /// The news that waited too long.
    news: Vec<Event>,
    /// When the agent was asked to end its turn.
    at: SystemTime,
}

/// Runs one turn of `agent` on `prompt`, bounded by the hang watch, the run's end and the
/// node's stop (then no outcome). When news that interrupts a turn waits unseen longer than
/// `plan.interrupt_after`, the agent is asked to end the turn (the context's
/// [`crate::adapters::Interrupt`]) and given [`CANCEL_GRACE`] to do so; past it the turn
/// ends with the error [`NOT_CANCELLED`].
async fn run_turn(
    agent: &mut dyn Agent,
    prompt: &str,
    plan: &WorkerPlan,
    urgent: &UrgentWatch,
    hang_after: Option<Duration>,
    stop: &mut Shutdown,
    steps: impl std::future::Future<Output = std::convert::Infallible>,
) -> (Option<Result<TurnOutcome>>, Option<Interruption>) {
    let ctx = &plan.ctx;
    let watch = async {
        match plan.interrupt_after {
            Some(after) => urgent.overdue(&ctx.worker, &ctx.token, after).await,
            None => std::future::pending().await,
        }
    };
    let turn = agent.turn(prompt);
    tokio::pin!(watch, steps, turn);
    let mut interruption: Option<Interruption> = None;
    let outcome = loop {
        let grace_ends = interruption.as_ref().map(|i| {
            tokio::time::Instant::now()
                + CANCEL_GRACE.saturating_sub(i.at.elapsed().unwrap_or_default())
        });
        let grace = async {
            match grace_ends {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            r = &mut turn => break Some(r),
            e = hung(&ctx.heartbeat, hang_after) => break Some(Err(e)),
            never = &mut steps => match never {},
            _ = stop.wait() => break None,
            _ = sleep_until(plan.ends_at) => break None,
            news = &mut watch, if interruption.is_none() => {
                tracing::info!(worker = %ctx.worker, "interrupting the turn for urgent news: {:?}", news.iter().map(|e| e.seq).collect::<Vec<_>>());
                ctx.heartbeat.step("interrupted for urgent news: ending the turn");
                ctx.interrupt.raise();
                interruption = Some(Interruption { news, at: SystemTime::now() });
            }
            _ = grace => break Some(Err(agensh_domain::Error::new(
                agensh_domain::ErrorKind::Internal,
                NOT_CANCELLED,
                format!(
                    "the agent did not end its turn within {} s of being interrupted for urgent news: it is stopped and started again",
                    CANCEL_GRACE.as_secs()
                ),
            ))),
        }
    };
    (outcome, interruption)
}

/// The prompt after a turn interrupted at `i` (begun at `started`) for `news`.
fn interrupted_prompt(
    id: &str,
    i: &Interruption,
    started: SystemTime,
    bound: Option<Duration>,
    news: &str,
) -> Result<String> {
    let turn_secs = i.at.duration_since(started).unwrap_or_default().as_secs();
    let bound = agensh_domain::time::span(bound.unwrap_or_default().as_secs());
    render(
        INTERRUPTED_TEMPLATE,
        &[
            ("worker_id", id),
            ("turn_secs", &turn_secs.to_string()),
            ("bound", &bound),
            ("news", news),
        ],
    )
}

/// Waits a little for the turn reports still on their way, so a worker's last turn reaches
/// the hub when its node stops; one the hub does not take in [`REPORTS_WAIT`] is dropped.
async fn finish_reports(reports: &mut JoinSet<()>) {
    let all = async { while reports.join_next().await.is_some() {} };
    if tokio::time::timeout(REPORTS_WAIT, all).await.is_err() {
        tracing::warn!(
            "{} turn reports did not reach the hub in {} s; dropped (the turn log has them)",
            reports.len(),
            REPORTS_WAIT.as_secs()
        );
        reports.abort_all();
    }
}

/// What the hub is told of a finished turn (`agensh_domain::turn`'s limits): the prompt cut
/// to 8 KiB, the seqs of the events it carried, the first 200 tool calls the agent reported
/// (the rest counted), the turn's tokens, how it ended and the agent's restarts so far.
fn report_of(
    turn: u64,
    started: SystemTime,
    prompt: &str,
    carried: &[(i64, i64)],
    outcome: &TurnOutcome,
    last_action: &str,
    restarts: u64,
) -> TurnReport {
    use agensh_domain::turn::{self as limits, clip};
    let calls: Vec<ToolCallSummary> = outcome
        .events
        .iter()
        .filter_map(|e| match e {
            TurnEvent::ToolCall { name, status, kind } => Some(tool_call(name, status, kind)),
            TurnEvent::Message { .. } => None,
        })
        .collect();
    let dropped = calls.len().saturating_sub(limits::TOOL_CALLS) as u64;
    TurnReport {
        turn,
        started_at: unix_ms(started),
        ended_at: unix_ms(SystemTime::now()).max(unix_ms(started)),
        prompt: limits::clip_prompt(prompt),
        events: carried
            .iter()
            .map(|(seq, _)| *seq)
            .take(limits::EVENTS)
            .collect(),
        tool_calls: calls.into_iter().take(limits::TOOL_CALLS).collect(),
        tool_calls_dropped: dropped,
        input_tokens: outcome.usage.input_tokens,
        output_tokens: outcome.usage.output_tokens,
        stop_reason: clip(&outcome.stop_reason, limits::STATUS_CHARS),
        last_action: clip(last_action, limits::LAST_ACTION_CHARS),
        restarts,
        // The loop's count, set by the loop.
        memory_kills: 0,
    }
}

/// One tool call as the dashboard lists it: an ACP call of a kind of its own (`execute`,
/// `edit`, `read`, …) is named by its kind and titled as the agent titled it; one of kind
/// `other` (the organization's tools) or from an agent without kinds is named by its
/// title or tool (`claim`, `pr_merge`).
fn tool_call(name: &str, status: &str, kind: &str) -> ToolCallSummary {
    use agensh_domain::turn::{clip, NAME_CHARS, STATUS_CHARS, TITLE_CHARS};
    let (name, title) = match kind {
        "" | "other" => (name, ""),
        kind => (kind, name),
    };
    ToolCallSummary {
        name: clip(name, NAME_CHARS),
        title: clip(title, TITLE_CHARS),
        status: clip(status, STATUS_CHARS),
    }
}

/// Sends each step the agent reports during a turn to the live view and the hub; never
/// ends (it is dropped with the turn).
async fn forward_steps(
    heartbeat: &Heartbeat,
    id: &str,
    progress: &mpsc::UnboundedSender<(String, Progress)>,
    status: &StatusReporter,
) -> std::convert::Infallible {
    let mut steps = heartbeat.watch();
    steps.mark_unchanged();
    loop {
        if steps.changed().await.is_err() {
            // The heartbeat lives in the plan, so this does not happen; wait like a turn
            // that reports nothing.
            std::future::pending::<()>().await;
        }
        let step = steps.borrow_and_update().clone();
        if let Some(p) = &step {
            let _ = progress.send((id.to_string(), Progress::Step(p.clone())));
        }
        status.progress(id, step);
    }
}

/// Shows the live view and the hub that the worker's agent was killed by its memory limit
/// (the error's first part, `agent killed by its memory limit (512 MiB)`) as the worker's
/// current step, until its next step replaces it.
fn show_memory_kill(
    e: &agensh_domain::Error,
    id: &str,
    report: &impl Fn(Progress),
    status: &StatusReporter,
) {
    let what = e.message.split(':').next().unwrap_or(&e.message);
    let step = WorkerProgress {
        step: format!("{what}; restarting"),
        since: unix_ms(SystemTime::now()),
        tokens: 0,
        tokens_per_sec: 0.0,
    };
    report(Progress::Step(step.clone()));
    status.progress(id, Some(step));
}

/// Whether a deadline notice is due with `left` to go; `notices` are the notice times
/// not sent yet, largest first. The nearest one due is sent and every one it makes
/// redundant goes with it, so a run shorter than several notice times gets one notice,
/// not one per notice time back to back.
fn take_due_notice(notices: &mut Vec<Duration>, left: Duration) -> bool {
    match notices.iter().rposition(|n| left <= *n) {
        Some(pos) => {
            notices.drain(..=pos);
            true
        }
        None => false,
    }
}

/// Where a worker's news stands at a turn boundary.
struct Boundary<'a> {
    /// The last event seen.
    after: i64,
    /// Events delivered but not yet acknowledged.
    to_ack: &'a mut Vec<i64>,
    /// The deadline notices not sent yet, largest first.
    notices_left: &'a mut Vec<Duration>,
    /// The worker is parked: only events that wake a parked worker end the wait; the
    /// others are held for the next prompt.
    parked: bool,
}

/// Waits at a turn boundary for the next reason to prompt: events, a deadline notice, the
/// idle timeout, or the end.
async fn wait_for_reason(
    events: &EventPump,
    plan: &WorkerPlan,
    idle: Duration,
    at: Boundary<'_>,
    stop: &mut Shutdown,
    agent: &mut dyn Agent,
) -> Next {
    let Boundary {
        mut after,
        to_ack,
        notices_left,
        parked,
    } = at;
    let idle_until = tokio::time::Instant::now() + idle;
    // A parked worker's events that did not wake it, for its next prompt.
    let mut held: Vec<Event> = Vec::new();
    loop {
        if stop.is_shutdown() || past(plan.ends_at) {
            return Next::Stop;
        }
        if let Some(ends_at) = plan.ends_at {
            let left = ends_at
                .duration_since(SystemTime::now())
                .unwrap_or_default();
            if take_due_notice(notices_left, left) {
                return Next::Deadline(left);
            }
        }
        let now = tokio::time::Instant::now();
        if now >= idle_until {
            if !held.is_empty() {
                return Next::Events(held);
            }
            return Next::Idle;
        }
        let mut wait = (idle_until - now).as_secs().clamp(1, WAIT_SECS);
        if let Some(ends_at) = plan.ends_at {
            let left = ends_at
                .duration_since(SystemTime::now())
                .unwrap_or_default();
            if let Some(next_notice) = notices_left.first() {
                wait = wait.min(left.saturating_sub(*next_notice).as_secs().max(1));
            }
            wait = wait.min(left.as_secs().max(1));
        }
        let ctx = &plan.ctx;
        let next = events.next(&ctx.worker, &ctx.token, after, to_ack);
        let polled = tokio::select! {
            r = tokio::time::timeout(Duration::from_secs(wait), next) => r,
            _ = stop.wait() => return Next::Stop,
            e = agent.died() => return Next::Died(e),
        };
        // Nothing within `wait`: check the idle timeout and deadlines again. Acks not
        // confirmed stay in `to_ack`, to go again.
        let Ok(polled) = polled else { continue };
        if polled.is_ok() {
            to_ack.clear();
        }
        match polled {
            Ok(events) if parked && !events.iter().any(wakes_a_parked_worker) => {
                after = events.iter().map(|e| e.seq).max().unwrap_or(after);
                held.extend(events);
            }
            Ok(events) if !events.is_empty() => {
                held.extend(events);
                return Next::Events(held);
            }
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(worker = %plan.ctx.worker, "could not poll events: {e}");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    }
}

/// How a worker stopped by a budget came back.
enum Paused {
    /// Not at all: the organization's budget is spent, or the run ended.
    Over,
    /// Its budget was raised: the agent was started again (`error` if that failed), and
    /// events up to `after` were taken.
    Resumed {
        after: i64,
        error: Option<agensh_domain::Error>,
    },
}

/// A `worker.stop` in `events`: stops the agent, marks the worker stopped and waits for
/// `worker.resume` (its budget raised), then starts the agent again. Every event taken
/// meanwhile is acknowledged: the worker catches up from the board and its messages.
#[allow(clippy::too_many_arguments)]
async fn pause_for_budget<S, F>(
    events: &[Event],
    agent: &mut dyn Agent,
    plan: &WorkerPlan,
    hub: &Client,
    pump: &EventPump,
    log: &mut TurnLog,
    set_status: &S,
    stop: &mut Shutdown,
) -> Paused
where
    S: Fn(WorkerStatus) -> F,
    F: std::future::Future<Output = ()>,
{
    let ctx = &plan.ctx;
    let order = events
        .iter()
        .find(|e| e.kind == kinds::WORKER_STOP)
        .expect("a stop event");
    let reason = order.payload["reason"]
        .as_str()
        .unwrap_or("a budget is spent")
        .to_string();
    let org = order.payload["organization"].as_bool().unwrap_or(false);
    let mut after = events.iter().map(|e| e.seq).max().unwrap_or(0);
    let mut acks: Vec<i64> = events.iter().map(|e| e.seq).collect();
    tracing::warn!(worker = %ctx.worker, "stopped: {reason}");
    log.write(json!({ "stopped": reason, "organization": org, "at": unix_ms(SystemTime::now()) }));
    agent.stop().await;
    set_status(WorkerStatus::Stopped).await;
    let over = |acks: Vec<i64>| async move {
        if let Err(e) = hub.ack(&acks).await {
            tracing::warn!(worker = %ctx.worker, "could not acknowledge events: {e}");
        }
        Paused::Over
    };
    if org {
        return over(acks).await;
    }
    loop {
        if stop.is_shutdown() || past(plan.ends_at) {
            return over(acks).await;
        }
        let mut wait = WAIT_SECS;
        if let Some(ends_at) = plan.ends_at {
            let left = ends_at
                .duration_since(SystemTime::now())
                .unwrap_or_default();
            wait = wait.min(left.as_secs().max(1));
        }
        let next = pump.next(&ctx.worker, &ctx.token, after, &acks);
        let polled = tokio::select! {
            r = tokio::time::timeout(Duration::from_secs(wait), next) => r,
            _ = stop.wait() => return over(acks).await,
        };
        let Ok(polled) = polled else { continue };
        match polled {
            Ok(taken) => {
                acks = taken.iter().map(|e| e.seq).collect();
                after = taken
                    .iter()
                    .map(|e| e.seq)
                    .max()
                    .unwrap_or(after)
                    .max(after);
                let org_stop = taken.iter().any(|e| {
                    e.kind == kinds::WORKER_STOP && e.payload["organization"] == json!(true)
                });
                if org_stop {
                    return over(acks).await;
                }
                if taken.iter().any(|e| e.kind == kinds::WORKER_RESUME) {
                    if let Err(e) = hub.ack(&acks).await {
                        tracing::warn!(worker = %ctx.worker, "could not acknowledge events: {e}");
                    }
                    tracing::info!(worker = %ctx.worker, "its budget was raised: going on");
                    log.write(
                        json!({ "resumed": "budget raised", "at": unix_ms(SystemTime::now()) }),
                    );
                    let error = agent.start(ctx).await.err();
                    return Paused::Resumed { after, error };
                }
            }
            Err(e) => {
                tracing::warn!(worker = %ctx.worker, "could not poll events: {e}");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    }
}

/// The prompt for a batch of events: one line each, urgent first, and the board digest.
fn events_prompt(events: &[Event], digest: &[agensh_domain::view::ViewEntry]) -> String {
    let now = unix_ms(SystemTime::now());
    let mut lines = vec!["While you were working, this happened:".to_string()];
    let mut shown = 0;
    for priority in [Priority::Urgent, Priority::Normal] {
        for e in events
            .iter()
            .filter(|e| e.priority == priority && e.kind != kinds::BOARD_RECORD)
        {
            if shown == EVENTS_SHOWN {
                break;
            }
            lines.push(format!("- {}", describe(e)));
            shown += 1;
        }
    }
    let rest = events
        .iter()
        .filter(|e| e.kind != kinds::BOARD_RECORD)
        .count()
        .saturating_sub(shown);
    if rest > 0 {
        lines.push(format!("- … and {rest} more (see `inbox`, `pr_list`)"));
    }
    if !digest.is_empty() {
        lines.push(String::new());
        lines.push(format!("New on the board ({} records):", digest.len()));
        for entry in digest.iter().take(EVENTS_SHOWN) {
            lines.push(format!("  {}", entry.record.line(now)));
        }
    }
    lines.push(String::new());
    lines.push("Take what matters into account and continue the loop.".to_string());
    lines.join("\n")
}

/// One line for an event.
fn describe(e: &Event) -> String {
    let p = &e.payload;
    let s = |k: &str| p[k].as_str().unwrap_or("").to_string();
    match e.kind.as_str() {
        kinds::DIRECT_MESSAGE => format!("DM from {}: {}", s("from"), s("text")),
        kinds::CHANNEL_POST => format!("{} {}: {}", s("to"), s("from"), s("text")),
        kinds::PR_OPENED => format!(
            "PR #{} opened by {}: {}",
            p["number"],
            s("author"),
            s("title")
        ),
        kinds::PR_REVIEW => format!(
            "{} reviewed your PR #{} ({}): {}",
            s("reviewer"),
            p["number"],
            s("verdict"),
            s("text")
        ),
        kinds::PR_REVIEWED => format!(
            "{} reviewed PR #{} ({})",
            s("reviewer"),
            p["number"],
            s("verdict")
        ),
        kinds::PR_COMMENTED => format!(
            "{} commented on PR #{}: {}",
            s("by"),
            p["number"],
            s("text")
        ),
        kinds::PR_MERGED => format!(
            "PR #{} by {} merged: {}",
            p["number"],
            s("author"),
            s("title")
        ),
        kinds::PR_CLOSED => format!("PR #{} closed: {}", p["number"], s("title")),
        kinds::PR_MERGE_FAILED => format!(
            "your PR #{} could not merge: {}",
            p["number"],
            p["reason"]["message"].as_str().unwrap_or("")
        ),
        kinds::MAIN_UPDATED => format!(
            "main moved to {} (by {})",
            &s("commit")[..s("commit").len().min(10)],
            s("by")
        ),
        kinds::CLAIM_TAKEN_OVER => format!(
            "your claim {} \"{}\" was taken over by {} with {} ({}) — stop work on it; msg_dm {} to hand over what you have",
            s("id"),
            s("text"),
            s("author"),
            s("by"),
            s("why"),
            s("author")
        ),
        kinds::NOTICE => format!("notice: {}", s("text")),
        kinds::MESSAGE_UNSEEN => format!(
            "{} — msg_status {} shows where it stands",
            s("text"),
            s("id")
        ),
        other => format!("{other}: {p}"),
    }
}

/// After the agent failed with `error` (failure number `*failures + 1` in a row): waits its
/// backoff, then stops and starts the agent again, as long as restarts are left.
#[allow(clippy::too_many_arguments)]
async fn recover<S, F>(
    agent: &mut dyn Agent,
    plan: &WorkerPlan,
    failures: &mut u32,
    mut error: agensh_domain::Error,
    log: &mut TurnLog,
    set_status: &S,
    stop: &mut Shutdown,
) -> Recovered
where
    S: Fn(WorkerStatus) -> F,
    F: std::future::Future<Output = ()>,
{
    loop {
        *failures += 1;
        if *failures > plan.recovery.max_restarts {
            return Recovered::GaveUp(error);
        }
        set_status(WorkerStatus::Stalled).await;
        let wait = plan.recovery.backoff_before(*failures);
        tracing::warn!(
            worker = %plan.ctx.worker,
            "agent failed ({}); restart {} of {} in {:.1} s",
            error.message,
            failures,
            plan.recovery.max_restarts,
            wait.as_secs_f64()
        );
        agent.stop().await;
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = stop.wait() => return Recovered::Stopped,
            _ = sleep_until(plan.ends_at) => return Recovered::Stopped,
        }
        let restarted = tokio::select! {
            r = agent.start(&plan.ctx) => r,
            _ = stop.wait() => return Recovered::Stopped,
        };
        log.write(json!({
            "restart": *failures, "after_error": error.message, "at": unix_ms(SystemTime::now()),
            "started": restarted.is_ok(),
        }));
        match restarted {
            Ok(()) => {
                set_status(WorkerStatus::Busy).await;
                return Recovered::Running;
            }
            Err(e) => error = e,
        }
    }
}

/// The restarts are used up: the worker is dead (its claims stop being live at the hub),
/// and `#general` is told so others can take over its work.
async fn give_up<S, F>(
    mut agent: Box<dyn Agent>,
    hub: &Client,
    plan: &WorkerPlan,
    failures: u32,
    error: agensh_domain::Error,
    set_status: &S,
    status: &StatusReporter,
) -> Result<WorkerSummary>
where
    S: Fn(WorkerStatus) -> F,
    F: std::future::Future<Output = ()>,
{
    agent.stop().await;
    set_status(WorkerStatus::Dead).await;
    status.flush().await;
    let id = &plan.ctx.worker;
    let text = format!(
        "{id} is out: its agent failed {failures} times in a row (last: {}). Its claims are no longer live; its pushed branches ({id}/*) and open pull requests are there to take over.",
        cut(&error.message, 300)
    );
    let post = agensh_domain::message::NewMessage {
        to: "#general".into(),
        text,
        thread: None,
    };
    if let Err(e) = hub.send_message(&post).await {
        tracing::warn!(worker = %id, "could not tell #general that the worker is dead: {e}");
    }
    Err(error)
}

/// The first prompt after a restart: what happened, and the prompt the agent failed on.
fn restart_prompt(
    worker: &str,
    error: &str,
    restart: u32,
    max_restarts: u32,
    previous: &str,
) -> Result<String> {
    render(
        RESTART_TEMPLATE,
        &[
            ("worker_id", worker),
            ("error", &cut(error, 300)),
            ("restart", &restart.to_string()),
            ("max_restarts", &max_restarts.to_string()),
            ("previous_prompt", &cut(previous, 6_000)),
        ],
    )
}

/// `text` cut to at most `max` characters, marked when cut.
fn cut(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((i, _)) => format!("{}…", &text[..i]),
        None => text.to_string(),
    }
}

/// Resolves when the agent has been silent for `after` (never when `after` is none).
async fn hung(
    heartbeat: &crate::adapters::Heartbeat,
    after: Option<Duration>,
) -> agensh_domain::Error {
    let Some(after) = after else {
        return std::future::pending().await;
    };
    loop {
        let silent = heartbeat.silent_for();
        if silent >= after {
            return agensh_domain::Error::new(
                agensh_domain::ErrorKind::Internal,
                "agent_hung",
                format!(
                    "the agent showed no sign of life for {} s in the middle of a turn (run.hang_timeout_secs)",
                    silent.as_secs()
                ),
            );
        }
        tokio::time::sleep((after - silent).max(Duration::from_millis(50))).await;
    }
}

fn past(ends_at: Option<SystemTime>) -> bool {
    ends_at.is_some_and(|e| SystemTime::now() >= e)
}

async fn sleep_until(ends_at: Option<SystemTime>) {
    match ends_at {
        Some(e) => {
            tokio::time::sleep(e.duration_since(SystemTime::now()).unwrap_or_default()).await
        }
        None => std::future::pending().await,
    }
}

/// Appends one JSON line per turn to `turns.jsonl`.
struct TurnLog {
    file: std::fs::File,
}

/// Appended to the launch prompt of a worker whose node was restarted.
const RESTARTED_NOTE: &str = "\n\n(The node running you was restarted; your last turn may have been cut off. What you were told before is not repeated: read your inbox and the board, and check your checkout with `git status`, before you go on.)";

/// How much of the end of a turn log [`shown_before`] reads.
const LOG_TAIL: u64 = 1 << 20;
/// How many of the log's last entries [`shown_before`] looks at: the turn that was cut off
/// and the one before it, whose events are acknowledged only with the next poll.
const LOG_ENTRIES: usize = 16;

/// When the worker's turn log in `dir` has entries (its node ran it before): the event
/// seqs its last entries say were handed to the agent (`carrying`, and the `carried` of
/// finished turns). `None` for a worker that never ran.
fn shown_before(dir: &std::path::Path) -> Option<Vec<i64>> {
    use std::io::{Read, Seek, SeekFrom};
    let mut f = std::fs::File::open(dir.join("turns.jsonl")).ok()?;
    let len = f.metadata().ok()?.len();
    if len == 0 {
        return None;
    }
    let start = len.saturating_sub(LOG_TAIL);
    f.seek(SeekFrom::Start(start)).ok()?;
    let mut tail = Vec::new();
    f.read_to_end(&mut tail).ok()?;
    let text = String::from_utf8_lossy(&tail);
    let mut lines: Vec<&str> = text.lines().collect();
    if start > 0 && !lines.is_empty() {
        lines.remove(0); // cut in the middle
    }
    let mut seqs: Vec<i64> = Vec::new();
    for line in lines.iter().rev().take(LOG_ENTRIES) {
        let Ok(entry) = serde_json::from_str::<serde_json::Value>(line) else {
            continue; // a line cut off by the kill
        };
        if let Some(list) = entry["carrying"].as_array() {
            seqs.extend(list.iter().filter_map(serde_json::Value::as_i64));
        }
        if let Some(list) = entry["carried"].as_array() {
            seqs.extend(list.iter().filter_map(|c| c["seq"].as_i64()));
        }
    }
    seqs.sort_unstable();
    seqs.dedup();
    Some(seqs)
}

impl TurnLog {
    fn open(dir: &std::path::Path) -> Result<Self> {
        let path = dir.join("turns.jsonl");
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(|e| {
                agensh_domain::Error::internal(format!("cannot open {}: {e}", path.display()))
            })?;
        Ok(TurnLog { file })
    }

    fn write(&mut self, entry: serde_json::Value) {
        // One write per line: formatting straight into the file would cost a system call
        // per JSON token.
        let mut line = entry.to_string();
        line.push('\n');
        if let Err(e) = self.file.write_all(line.as_bytes()) {
            tracing::warn!("cannot write the turn log: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_restarted_worker_knows_what_it_was_shown() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(
            shown_before(dir.path()),
            None,
            "no log: a worker that never ran"
        );
        let log = dir.path().join("turns.jsonl");
        std::fs::write(&log, "").unwrap();
        assert_eq!(shown_before(dir.path()), None);
        std::fs::write(
            &log,
            concat!(
                r#"{"turn":1,"carried":[{"seq":3,"created_at":0},{"seq":4,"created_at":0}]}"#,
                "\n",
                r#"{"carrying":[7,9]}"#,
                "\n",
                r#"{"prompt":"cut off by the ki"#,
            ),
        )
        .unwrap();
        assert_eq!(shown_before(dir.path()), Some(vec![3, 4, 7, 9]));
        std::fs::write(&log, "{\"turn\":1,\"carried\":[]}\n").unwrap();
        assert_eq!(shown_before(dir.path()), Some(vec![]));
    }

    #[test]
    fn a_taken_over_claim_is_told_at_the_turn_boundary_with_what_to_do() {
        let e = Event {
            seq: 1,
            kind: kinds::CLAIM_TAKEN_OVER.into(),
            priority: Priority::Urgent,
            payload: json!({"id":"G12","text":"the parser","by":"G15","author":"w04","why":"dead"}),
            dedup_key: None,
            source: Some("w04".into()),
            target: Some("w03".into()),
            except: None,
            created_at: 0,
        };
        assert_eq!(
            describe(&e),
            "your claim G12 \"the parser\" was taken over by w04 with G15 (dead) — stop work on it; msg_dm w04 to hand over what you have"
        );
    }

    #[test]
    fn a_dm_not_seen_in_time_is_told_to_its_sender_with_how_to_follow_it() {
        let e = Event {
            seq: 9,
            kind: kinds::MESSAGE_UNSEEN.into(),
            priority: Priority::Urgent,
            payload: json!({"message":12,"id":"M12","to":"w07","waited_secs":181,"busy":true,
                "text":"w07 has not seen your message M12 for 3 minutes: it is busy in a turn that has called no organization tool since"}),
            dedup_key: Some("unseen:M12".into()),
            source: None,
            target: Some("w01".into()),
            except: None,
            created_at: 0,
        };
        assert_eq!(
            describe(&e),
            "w07 has not seen your message M12 for 3 minutes: it is busy in a turn that has called no organization tool since — msg_status M12 shows where it stands"
        );
    }

    #[test]
    fn a_run_shorter_than_every_notice_time_gets_one_notice() {
        let m = |n: u64| Duration::from_secs(n * 60);
        // Notices at 5 and 1 minutes, 30 s left: one notice, none left to send.
        let mut left = vec![m(5), m(1)];
        assert!(take_due_notice(&mut left, Duration::from_secs(30)));
        assert!(left.is_empty());
        assert!(!take_due_notice(&mut left, Duration::from_secs(20)));
        // 3 minutes left: the 5-minute notice now, the 1-minute one still to come.
        let mut left = vec![m(10), m(5), m(1)];
        assert!(!take_due_notice(&mut left, m(12)));
        assert!(take_due_notice(&mut left, m(3)));
        assert_eq!(left, vec![m(1)]);
        assert!(!take_due_notice(&mut left, m(2)));
        assert!(take_due_notice(&mut left, Duration::from_secs(59)));
        assert!(left.is_empty());
    }

    #[test]
    fn the_wait_before_a_restart_doubles_up_to_five_minutes() {
        let r = Recovery {
            max_restarts: 100,
            backoff: Duration::from_secs(5),
            hang_after: None,
        };
        let secs: Vec<u64> = (1..=8).map(|n| r.backoff_before(n).as_secs()).collect();
        assert_eq!(secs, [5, 10, 20, 40, 80, 160, 300, 300]);
        assert_eq!(r.backoff_before(u32::MAX), MAX_BACKOFF);
        let none = Recovery {
            max_restarts: 1,
            backoff: Duration::ZERO,
            hang_after: None,
        };
        assert_eq!(none.backoff_before(3), Duration::ZERO);
    }

    #[test]
    fn a_turn_report_carries_what_the_turn_did_within_the_hubs_limits() {
        let call = |name: &str, status: &str, kind: &str| TurnEvent::ToolCall {
            name: name.into(),
            status: status.into(),
            kind: kind.into(),
        };
        let mut events = vec![
            TurnEvent::Message {
                text: "on it".into(),
            },
            call("claim", "completed", "other"),
            call("git push origin HEAD:w01/work", "failed", "execute"),
            call("write_file", "ok", ""),
            call(&"x".repeat(500), "in_progress", "edit"),
        ];
        events.extend((0..250).map(|i| call(&format!("run {i}"), "ok", "")));
        let outcome = TurnOutcome {
            stop_reason: "end_turn".into(),
            usage: Usage {
                input_tokens: 1200,
                output_tokens: 34,
                ..Usage::default()
            },
            events,
            model_ms: 0,
            tools_ms: 0,
        };
        let started = SystemTime::now() - Duration::from_secs(3);
        let prompt = "ü".repeat(9_000);
        let r = report_of(
            4,
            started,
            &prompt,
            &[(7, 1), (9, 2)],
            &outcome,
            "run 249",
            2,
        );
        assert_eq!(r.turn, 4);
        assert_eq!(r.started_at, unix_ms(started));
        assert!(r.ended_at >= r.started_at + 3_000, "{r:?}");
        assert!(r.prompt.len() <= agensh_domain::turn::PROMPT_BYTES);
        assert!(r.prompt.ends_with(agensh_domain::turn::PROMPT_CUT_MARKER));
        assert_eq!(r.events, [7, 9]);
        assert_eq!((r.input_tokens, r.output_tokens), (1200, 34));
        assert_eq!(
            (r.stop_reason.as_str(), r.last_action.as_str()),
            ("end_turn", "run 249")
        );
        assert_eq!(r.restarts, 2);
        // 254 tool calls: the first 200 listed, 54 counted.
        assert_eq!(r.tool_calls.len(), 200);
        assert_eq!(r.tool_calls_dropped, 54);
        let shown: Vec<(&str, &str, &str)> = r.tool_calls[..4]
            .iter()
            .map(|c| (c.name.as_str(), c.title.as_str(), c.status.as_str()))
            .collect();
        assert_eq!(
            &shown[..3],
            [
                ("claim", "", "completed"),
                ("execute", "git push origin HEAD:w01/work", "failed"),
                ("write_file", "", "ok"),
            ]
        );
        assert_eq!(shown[3].0, "edit");
        assert_eq!(shown[3].1.chars().count(), agensh_domain::turn::TITLE_CHARS);
        assert_eq!(r.tool_calls[199].name, "run 195");
    }

    #[test]
    fn a_recap_is_cut_to_its_limits_on_character_boundaries() {
        let p = restart_prompt("w07", &"é".repeat(400), 2, 5, &"ü".repeat(7_000)).unwrap();
        assert!(p.contains("worker w07") || p.contains("Worker w07"), "{p}");
        assert!(p.contains("restart 2 of at most 5"), "{p}");
        assert!(
            p.contains(&format!("{}…", "é".repeat(300))),
            "error cut at 300"
        );
        assert!(!p.contains(&"é".repeat(301)));
        assert!(
            p.contains(&format!("{}…", "ü".repeat(6_000))),
            "prompt cut at 6,000"
        );
    }
}
