//! The organization's goal (`organization.done_when`, [`agensh_domain::goal`]): checked
//! after each move of `main`, each issue closed and each kept score; its state kept in the
//! store (`Store::hub_state`) so a restarted hub knows what was checked and whether the
//! goal was met.
//!
//! When every condition holds on one commit of `main`, the hub records it once: a FACT on
//! the board and a post in `#general` ("goal met at …"), an urgent notice to every worker,
//! and — unless `run.keep_going` — an organization-wide `worker.stop`, which each node
//! takes at its worker's turn's end, so no new turn starts and the run ends.

use std::sync::Mutex;
use std::time::Duration;

use agensh_domain::event::{kinds, NewEvent, Priority};
use agensh_domain::goal::{parse_all, short, ConditionCheck, DoneWhen, GoalStatus};
use agensh_domain::message::NewMessage;
use agensh_domain::record::{NewRecord, RecordKind};
use agensh_domain::Result;
use agensh_protocol::dashboard::Score;
use serde_json::json;

use crate::state::AppState;

/// The key of the goal's state in the store.
const STATE_KEY: &str = "goal";
/// How often the goal is checked without a nudge: `main` moved by a hub sharing this
/// store, or a nudge lost.
const POLL: Duration = Duration::from_secs(5);
/// A score counts toward `score: X` when its label ends so (`programbench kept`).
const KEPT_LABEL: &str = "kept";
/// Open issues named in a check's detail.
const OPEN_NAMED: usize = 10;

/// The goal of a running hub.
pub struct Goal {
    conditions: Vec<DoneWhen>,
    timeout: Duration,
    /// `run.keep_going`: the goal met changes nothing for the workers.
    keep_going: bool,
    status: Mutex<GoalStatus>,
    /// The best kept score posted (`POST /scores`), with its commit.
    score: Mutex<Option<(f64, String)>>,
    wake: tokio::sync::Notify,
    /// The goal's state once it is met (none before).
    met: tokio::sync::watch::Sender<Option<GoalStatus>>,
}

impl Goal {
    /// The goal of `config` (conditions already validated with it).
    pub fn new(config: &agensh_domain::config::Config) -> Result<Goal> {
        let conditions = parse_all(&config.organization.done_when)?;
        Ok(Goal {
            status: Mutex::new(GoalStatus {
                conditions: conditions.iter().map(ToString::to_string).collect(),
                ..GoalStatus::default()
            }),
            conditions,
            timeout: Duration::from_secs(config.organization.done_timeout_secs),
            keep_going: config.run.keep_going,
            score: Mutex::new(None),
            wake: tokio::sync::Notify::new(),
            met: tokio::sync::watch::Sender::new(None),
        })
    }

    /// Why the model gateway refuses a new model request: the goal is met and the run ends
    /// (not with `run.keep_going`); none while the workers may spend.
    pub fn refusal(&self) -> Option<String> {
        if self.keep_going {
            return None;
        }
        // Once announced (the stop is in every queue): a worker whose request is refused
        // finds it when its turn ends in the error.
        let met = self.met.borrow();
        let commit = met.as_ref()?.met_commit.as_deref()?;
        Some(format!(
            "the organization's goal is met at {}: the run is ending and no new model request is sent — end your turn (run.keep_going lets the workers go on after the goal)",
            short(commit)
        ))
    }

    /// Changes to the goal's state once it is met: none until then.
    pub fn met(&self) -> tokio::sync::watch::Receiver<Option<GoalStatus>> {
        self.met.subscribe()
    }

    /// The goal's state now.
    pub fn status(&self) -> GoalStatus {
        self.status.lock().expect("goal lock").clone()
    }

    /// Something the goal may depend on changed (`main` moved, an issue closed, a score
    /// came): check again now.
    pub fn nudge(&self) {
        self.wake.notify_one();
    }

    /// A score was posted; a kept one counts toward `score: X`.
    pub fn note_score(&self, s: &Score) {
        if !s.label.trim_end().ends_with(KEPT_LABEL) {
            return;
        }
        let mut best = self.score.lock().expect("score lock");
        if best.as_ref().is_none_or(|(b, _)| s.score >= *b) {
            *best = Some((s.score, s.commit.clone().unwrap_or_default()));
        }
        drop(best);
        self.nudge();
    }
}

/// Starts checking the goal, when it has conditions and is not met yet: the state a
/// previous hub left (for the same conditions) is taken up first.
pub async fn start(s: AppState) -> Result<()> {
    if s.goal.conditions.is_empty() {
        return Ok(());
    }
    if let Some(kept) = stored(&*s.store, &s.config).await? {
        let met = kept.met();
        *s.goal.status.lock().expect("goal lock") = kept.clone();
        if met {
            s.goal.met.send_replace(Some(kept));
            return Ok(());
        }
    }
    tokio::spawn(watch(s));
    Ok(())
}

/// The goal's state a hub left in `store`, when it was for the conditions `config` has
/// (a changed `organization.done_when` is checked anew).
pub async fn stored(
    store: &dyn agensh_store::Store,
    config: &agensh_domain::config::Config,
) -> Result<Option<GoalStatus>> {
    let conditions: Vec<String> = parse_all(&config.organization.done_when)?
        .iter()
        .map(ToString::to_string)
        .collect();
    let Some(text) = store.hub_state(STATE_KEY).await? else {
        return Ok(None);
    };
    match serde_json::from_str::<GoalStatus>(&text) {
        Ok(kept) if kept.conditions == conditions && !conditions.is_empty() => Ok(Some(kept)),
        Ok(_) => Ok(None),
        Err(e) => {
            tracing::warn!("the goal's stored state is not readable ({e}); checking anew");
            Ok(None)
        }
    }
}

/// Checks the goal at start, on every nudge and every [`POLL`], until it is met or the
/// hub stops.
async fn watch(s: AppState) {
    let mut shutdown = s.shutdown.clone();
    loop {
        match check(&s).await {
            Ok(true) => return,
            Ok(false) => {}
            Err(e) => tracing::warn!("could not check the goal: {e}"),
        }
        tokio::select! {
            _ = s.goal.wake.notified() => {}
            _ = tokio::time::sleep(POLL) => {}
            _ = shutdown.wait() => return,
        }
    }
}

/// Checks every condition on `main` as it is now; whether the goal is met.
async fn check(s: &AppState) -> Result<bool> {
    let commit = match &s.workspace {
        Some(ws) => ws.main_commit().await?,
        None => String::new(),
    };
    let before = s.goal.status();
    let mut checks = Vec::with_capacity(s.goal.conditions.len());
    let mut ran = 0u64;
    for (i, c) in s.goal.conditions.iter().enumerate() {
        let last = before.checks.get(i).filter(|l| l.commit == commit);
        let check = match (c, last) {
            // A command's result holds for the commit it ran on.
            (DoneWhen::Command(_), Some(last)) => last.clone(),
            (DoneWhen::Command(cmd), None) => {
                ran += 1;
                run_command(s, &commit, cmd).await?
            }
            (DoneWhen::Issues, _) => issues(s, &commit).await?,
            (DoneWhen::Score(x), _) => score(s, *x, &commit),
        };
        checks.push(ConditionCheck {
            condition: c.to_string(),
            ..check
        });
    }
    let met = checks.iter().all(|c| c.met);
    let changed = checks
        .iter()
        .zip(&before.checks)
        .any(|(a, b)| (a.met, &a.commit, &a.detail) != (b.met, &b.commit, &b.detail))
        || checks.len() != before.checks.len();
    let status = {
        let mut st = s.goal.status.lock().expect("goal lock");
        st.checks = checks;
        st.runs += ran;
        if met {
            st.met_at = Some(s.now());
            st.met_commit = Some(met_commit(&st.checks, &commit));
        }
        st.clone()
    };
    if changed || ran > 0 || met {
        let text = serde_json::to_string(&status)
            .map_err(|e| agensh_domain::Error::internal(format!("the goal's state: {e}")))?;
        s.store.set_hub_state(STATE_KEY, &text).await?;
    }
    if met {
        announce(s, &status).await?;
        s.goal.met.send_replace(Some(status));
    }
    Ok(met)
}

/// The commit the goal was met at: `main`'s, or the scored commit when a score is the
/// only condition with a commit of its own.
fn met_commit(checks: &[ConditionCheck], main: &str) -> String {
    if !main.is_empty() {
        return main.to_string();
    }
    checks
        .iter()
        .map(|c| c.commit.as_str())
        .find(|c| !c.is_empty())
        .unwrap_or("")
        .to_string()
}

fn blank(commit: &str) -> ConditionCheck {
    ConditionCheck {
        condition: String::new(),
        met: false,
        commit: commit.to_string(),
        at: 0,
        took_ms: 0,
        exit: None,
        timed_out: false,
        detail: String::new(),
    }
}

async fn run_command(s: &AppState, commit: &str, cmd: &str) -> Result<ConditionCheck> {
    let Some(ws) = &s.workspace else {
        return Ok(ConditionCheck {
            detail: "this hub serves no git workspace: a command has no tree to run on".into(),
            at: s.now(),
            ..blank(commit)
        });
    };
    tracing::info!(commit = short(commit), "checking the goal: {cmd}");
    let run = ws.check(commit, cmd, s.goal.timeout).await?;
    Ok(ConditionCheck {
        met: run.passed(),
        at: s.now(),
        took_ms: run.took.as_millis() as u64,
        exit: run.exit,
        timed_out: run.timed_out,
        detail: s.redact_tokens(&run.output_tail),
        ..blank(commit)
    })
}

async fn issues(s: &AppState, commit: &str) -> Result<ConditionCheck> {
    use agensh_domain::issue::IssueState;
    let open = s
        .store
        .list_issues(agensh_store::IssueQuery {
            state: Some(IssueState::Open),
            label: None,
            assignee: None,
            before: None,
            limit: OPEN_NAMED,
        })
        .await?;
    let any = !s
        .store
        .list_issues(agensh_store::IssueQuery {
            state: None,
            label: None,
            assignee: None,
            before: None,
            limit: 1,
        })
        .await?
        .is_empty();
    let detail = if !any {
        "the organization has no issue yet".to_string()
    } else if open.is_empty() {
        "every issue is closed".to_string()
    } else {
        let named: Vec<String> = open.iter().map(|i| format!("#{}", i.number)).collect();
        let more = if open.len() == OPEN_NAMED { " …" } else { "" };
        format!("still open: {}{more}", named.join(", "))
    };
    Ok(ConditionCheck {
        met: any && open.is_empty(),
        at: s.now(),
        detail,
        ..blank(commit)
    })
}

fn score(s: &AppState, threshold: f64, main: &str) -> ConditionCheck {
    let best = s.goal.score.lock().expect("score lock").clone();
    let (met, commit, detail) = match best {
        Some((x, c)) if x >= threshold => (true, c, format!("kept score {x:.4} ≥ {threshold}")),
        Some((x, c)) => (false, c, format!("best kept score {x:.4} < {threshold}")),
        None => (false, main.to_string(), "no kept score yet".to_string()),
    };
    ConditionCheck {
        met,
        at: s.now(),
        detail,
        ..blank(&commit)
    }
}

/// Tells the organization the goal is met: the board, `#general`, an urgent notice to
/// every worker and, unless `run.keep_going`, the stop every node takes at its workers'
/// turn ends.
async fn announce(s: &AppState, status: &GoalStatus) -> Result<()> {
    let commit = status.met_commit.clone().unwrap_or_default();
    let at = short(&commit);
    let what = status.conditions.join("; ");
    tracing::info!(commit = at, "the goal is met ({what})");
    let keep_going = s.config.run.keep_going;
    let now = s.now();
    let mut record = NewRecord::new(RecordKind::Fact, format!("goal met at {at}: {what}"));
    record.detail = Some(
        status
            .checks
            .iter()
            .map(|c| format!("{} — {}", c.condition, last_line(&c.detail)))
            .collect::<Vec<_>>()
            .join("\n"),
    );
    s.store
        .append_record("admin", record, now, s.config.board.claim_lease_secs)
        .await?;
    let next = if keep_going {
        "The run goes on (run.keep_going)."
    } else {
        "Every worker stops at the end of its current turn and the run ends: start nothing new."
    };
    s.store
        .post_message(
            "admin",
            NewMessage {
                to: "#general".into(),
                text: format!("Goal met at {at} ({what}). {next}"),
                thread: None,
            },
            now,
        )
        .await?;
    let notice = |kind: &str, priority, payload| NewEvent {
        kind: kind.to_string(),
        priority,
        payload,
        dedup_key: Some(format!("goal:{kind}:{commit}")),
        source: None,
        target: None,
        except: None,
    };
    let text = if keep_going {
        format!("the organization's goal is met at {at} ({what}); the run goes on.")
    } else {
        format!("the organization's goal is met at {at} ({what}). Stop: finish your reply now, start nothing new; your turn is the last.")
    };
    s.store
        .enqueue(
            notice(kinds::NOTICE, Priority::Urgent, json!({ "text": text })),
            now,
        )
        .await?;
    if !keep_going {
        s.store
            .enqueue(
                notice(
                    kinds::WORKER_STOP,
                    Priority::Normal,
                    json!({ "reason": format!("the goal is met at {at}"), "organization": true, "goal_met": true }),
                ),
                now,
            )
            .await?;
    }
    Ok(())
}

fn last_line(s: &str) -> &str {
    s.trim().lines().last().unwrap_or("")
}

/// The goal's figures at `/metrics`.
pub fn render_metrics(out: &mut String, g: &GoalStatus) {
    use std::fmt::Write;
    if !g.defined() {
        return;
    }
    let held = g.checks.iter().filter(|c| c.met).count();
    let _ = writeln!(
        out,
        "# HELP agensh_goal_met Whether the organization's goal (organization.done_when) is met.\n# TYPE agensh_goal_met gauge\nagensh_goal_met {}",
        u8::from(g.met())
    );
    let _ = writeln!(
        out,
        "# HELP agensh_goal_conditions Conditions of the goal, and how many held at the last check.\n# TYPE agensh_goal_conditions gauge\nagensh_goal_conditions{{state=\"all\"}} {}\nagensh_goal_conditions{{state=\"met\"}} {held}",
        g.conditions.len()
    );
    let _ = writeln!(
        out,
        "# HELP agensh_goal_command_runs_total Runs of the goal's commands on commits of main.\n# TYPE agensh_goal_command_runs_total counter\nagensh_goal_command_runs_total {}",
        g.runs
    );
    if let Some(at) = g.met_at {
        let _ = writeln!(
            out,
            "# HELP agensh_goal_met_at_seconds When the goal was met (Unix time).\n# TYPE agensh_goal_met_at_seconds gauge\nagensh_goal_met_at_seconds {}",
            at / 1000
        );
    }
}

/// Most merged PRs read to find the last merge's time.
const MERGED_READ: usize = 1_000;

/// The run's economy (`agensh_domain::goal::Economy`): what went through the model
/// gateway, per merged PR, and how much of it after the goal was met — or, with no goal
/// met, after the last merge.
pub async fn economy(
    store: &dyn agensh_store::Store,
    status: &GoalStatus,
) -> Result<agensh_domain::goal::Economy> {
    use agensh_domain::goal::{DoneMark, Economy, Spend};
    let sum = |rows: Vec<agensh_store::ModelUsage>| {
        rows.iter().fold(Spend::default(), |t, u| Spend {
            requests: t.requests + u.requests,
            input_tokens: t.input_tokens + u.input_tokens,
            output_tokens: t.output_tokens + u.output_tokens,
            cost_usd: t.cost_usd + u.cost_usd,
        })
    };
    let total = sum(store.model_usage(None).await?);
    let prs_merged = store.stats().await?.prs_merged;
    let mark = match status.met_at {
        Some(at) => Some((DoneMark::GoalMet, at)),
        None => store
            .list_prs(Some(agensh_domain::pr::PrState::Merged), None, MERGED_READ)
            .await?
            .iter()
            .map(|p| p.updated_at)
            .max()
            .map(|at| (DoneMark::LastMerge, at + 1)),
    };
    let after = match mark {
        // After the mark: requests that started once the work was done (`+ 1` above: the
        // merge's own millisecond counts as before it).
        Some((_, at)) => sum(store.model_usage_since(at).await?),
        None => Spend::default(),
    };
    Ok(Economy::of(total, after, mark, prs_merged))
}
