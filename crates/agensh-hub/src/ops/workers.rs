//! The worker registry: workers, their statuses, the organization's counts, goal, usage
//! and budgets.

use agensh_domain::budget::LimitsChange;
use agensh_domain::goal::GoalStatus;
use agensh_domain::ids::validate_worker_id;
use agensh_domain::text::{self, Lines};
use agensh_domain::worker::{check_batch, NewWorker, StatusReports, WorkerInfo, WorkerStatus};
use agensh_domain::Result;
use agensh_protocol::rest::{BudgetView, ModelUsage, Stats};

use crate::auth::Caller;
use crate::state::AppState;

/// Adds `count` workers (admin only); their tokens work at once.
pub async fn add_workers(s: &AppState, caller: &Caller, count: usize) -> Result<Vec<NewWorker>> {
    caller.require_admin()?;
    let added = s.store.add_workers(count, s.now()).await?;
    let mut tokens = s.tokens.write().expect("tokens lock");
    for w in &added {
        tokens.insert(w.token.clone(), w.id.clone());
    }
    Ok(added)
}

/// Every worker with status, live claims and up-to-date last activity, in id order.
pub async fn list_workers(s: &AppState) -> Result<Vec<WorkerInfo>> {
    s.flush_activity().await;
    let mut workers = s.store.list_workers(s.now()).await?;
    let progress = s.progress.lock().expect("progress lock");
    let agents = s.agents.lock().expect("agents lock");
    for w in &mut workers {
        w.progress = progress.get(&w.id).cloned();
        w.agent = agents.get(&w.id).cloned();
        w.stopped_for = s.gateway.budgets.stopped_for(&w.id);
    }
    Ok(workers)
}

/// Worker `id`'s token (admin only).
pub fn worker_token(s: &AppState, caller: &Caller, id: String) -> Result<NewWorker> {
    caller.require_admin()?;
    validate_worker_id(&id)?;
    let token = s
        .token_of(&id)
        .ok_or_else(|| agensh_domain::worker::unknown_worker(&id))?;
    Ok(NewWorker { id, token })
}

/// Sets worker `id`'s status (the worker itself, or the admin); the status set.
pub async fn set_status(
    s: &AppState,
    caller: &Caller,
    id: &str,
    status: &str,
) -> Result<WorkerStatus> {
    caller.require_self(id, "set only its own status")?;
    let status = WorkerStatus::parse(status)?;
    s.note_status(id, status == WorkerStatus::Busy);
    s.store.set_worker_status(id, status).await?;
    s.dashboard.feed.touch();
    Ok(status)
}

/// Many workers' statuses in one request, as a node reports them: all set, or none. How
/// many were set.
pub async fn set_statuses(s: &AppState, caller: &Caller, body: StatusReports) -> Result<usize> {
    check_batch(body.workers.len())?;
    crate::auth::authorize_many(
        caller,
        s,
        body.workers
            .iter()
            .map(|w| (w.id.as_str(), w.token.as_deref())),
    )?;
    let mut statuses = Vec::with_capacity(body.workers.len());
    let mut progress = Vec::with_capacity(body.workers.len());
    let mut agents = Vec::new();
    for w in body.workers {
        let status = WorkerStatus::parse(&w.status)?;
        s.note_status(&w.id, status == WorkerStatus::Busy);
        statuses.push((w.id.clone(), status));
        if let Some(a) = w.agent {
            agents.push((w.id.clone(), clip_agent(a)));
        }
        let progress_now = w.progress.map(|mut p| {
            p.step = plain_line(&p.step);
            p
        });
        progress.push((w.id, progress_now));
    }
    let n = statuses.len();
    s.store.set_worker_statuses(statuses).await?;
    s.dashboard.feed.touch();
    s.agents.lock().expect("agents lock").extend(agents);
    let mut known = s.progress.lock().expect("progress lock");
    for (id, p) in progress {
        match p {
            Some(p) => known.insert(id, p),
            None => known.remove(&id),
        };
    }
    Ok(n)
}

/// A node's description of a worker's agent, cut to a length a listing can show, as one
/// plain line ([`plain_line`]).
pub(crate) fn clip_agent(a: String) -> String {
    const MOST: usize = 300;
    let a = plain_line(&a);
    if a.chars().count() <= MOST {
        a
    } else {
        a.chars().take(MOST).collect::<String>() + "…"
    }
}

/// A text a node reports from what an agent does (its step, e.g. `run: <command>`; its
/// agent) as one plain line: controls are replaced by their visible escapes
/// ([`text::escape`]) rather than refused, so one agent's odd command cannot fail the
/// status report of every worker of its node.
fn plain_line(s: &str) -> String {
    text::escape(s, Lines::One).into_owned()
}

/// Counts of what the organization has produced.
pub async fn stats(s: &AppState) -> Result<Stats> {
    s.store.stats().await
}

/// The organization's goal (`organization.done_when`), each condition's last check and
/// when it was met.
pub async fn goal(s: &AppState) -> Result<GoalStatus> {
    let mut status = s.goal.status();
    status.economy = Some(crate::goal::economy(&*s.store, &status).await?);
    Ok(status)
}

/// The budgets and what was spent: every worker's for the admin, a worker its own.
pub fn budget(s: &AppState, caller: &Caller) -> BudgetView {
    let workers: Vec<String> = if caller.admin {
        s.worker_ids()
    } else {
        vec![caller.id.clone()]
    };
    s.gateway.budgets.view(&workers, s.now())
}

/// Changes a budget (admin only): stored, in force at once, and each worker it stopped
/// that may go on now is told to. The budgets as [`budget`] shows them.
pub async fn set_budget(s: &AppState, caller: &Caller, change: LimitsChange) -> Result<BudgetView> {
    caller.require_admin()?;
    change.validate()?;
    if let Some(w) = &change.worker {
        validate_worker_id(w)?;
        if s.token_of(w).is_none() {
            return Err(agensh_domain::worker::unknown_worker(w));
        }
    }
    let ((scope, limits), free) = s.gateway.budgets.set(&change, s.now());
    s.store.set_budget(&scope, limits).await?;
    crate::gateway::budget::resume(s, &free).await?;
    tracing::info!("budget of {scope} set to {limits:?}; going on: {free:?}");
    Ok(budget(s, caller))
}

/// Model usage through the gateway per worker and model: the admin's every worker's, a
/// worker's its own.
pub async fn usage(s: &AppState, caller: &Caller) -> Result<Vec<ModelUsage>> {
    let only = (!caller.admin).then_some(caller.id.as_str());
    s.store.model_usage(only).await
}
