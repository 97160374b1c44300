//! Budgets at the gateway: what each worker and the organization have spent (loaded from
//! the store at start, added to as each request is recorded), the limits in force
//! (`[budget]`, then what `agensh budget set` stored), and what to do as they are reached —
//! a notice at `notice_at`, and at a limit the worker (or every worker) stopped: its
//! requests refused, its claims released, `#general` told, its node sent `worker.stop`.
//! Raising a budget sends `worker.resume` to each worker it stopped that may go on.

use std::collections::HashMap;
use std::sync::Mutex;

use agensh_domain::budget::{BudgetConfig, Limits, LimitsChange, Spent, Use};
use agensh_domain::event::{kinds, NewEvent, Priority};
use agensh_domain::message::NewMessage;
use agensh_protocol::rest::{BudgetView, ModelUsage, WorkerBudget};
use serde_json::json;

use crate::state::AppState;

/// The scope names a stored budget has: every worker's default, the organization's.
pub const EVERY_WORKER: &str = "*";
pub const ORGANIZATION: &str = "organization";

/// What the hub must do about budgets after a change of what was spent.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Tell one worker (or everyone: `None`) it is near a budget.
    Notice {
        worker: Option<String>,
        text: String,
        key: String,
    },
    /// Stop one worker: a budget of its own is spent.
    Stop { worker: String, reason: String },
    /// Stop every worker: the organization's budget is spent.
    StopAll { reason: String },
}

pub struct Budgets {
    notice_at: f64,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    every_worker: Limits,
    organization: Limits,
    workers: HashMap<String, Limits>,
    spent: HashMap<String, Spent>,
    org: Spent,
    /// Workers stopped by a budget, with the reason.
    stopped: HashMap<String, String>,
    org_stopped: Option<String>,
}

impl State {
    fn limits_of(&self, worker: &str) -> Limits {
        self.workers
            .get(worker)
            .copied()
            .unwrap_or(self.every_worker)
    }

    /// The worker's own spent budget, else the organization's, at `now`.
    fn exhausted(&self, worker: &str, now: i64) -> Option<(bool, Use)> {
        let spent = self.spent.get(worker).copied().unwrap_or_default();
        if let Some(u) = self.limits_of(worker).exhausted(&spent, now) {
            return Some((false, u));
        }
        self.organization
            .exhausted(&self.org, now)
            .map(|u| (true, u))
    }
}

fn add(s: &mut Spent, tokens: u64, cost: f64, at: i64) {
    s.tokens += tokens;
    s.cost_usd += cost;
    s.requests += 1;
    if s.first_at == 0 || at < s.first_at {
        s.first_at = at;
    }
}

/// Why a worker is stopped, in words for its log, `#general` and the refusal.
fn reason(worker: &str, org: bool, u: &Use) -> String {
    if org {
        format!(
            "the organization's {} is spent (budget.organization.{})",
            u.describe(),
            u.dimension.field()
        )
    } else {
        format!(
            "{worker}'s {} is spent (budget.worker.{})",
            u.describe(),
            u.dimension.field()
        )
    }
}

impl Budgets {
    pub fn new(config: &BudgetConfig) -> Budgets {
        Budgets {
            notice_at: config.notice_at,
            state: Mutex::new(State {
                every_worker: config.worker,
                organization: config.organization,
                ..State::default()
            }),
        }
    }

    /// Takes in what the store holds: usage so far and the budgets set while running.
    pub fn load(&self, usage: &[ModelUsage], set: &[(String, Limits)]) {
        let mut st = self.state.lock().expect("budget lock");
        for u in usage {
            let one = |s: &mut Spent| {
                s.tokens += u.input_tokens + u.output_tokens;
                s.cost_usd += u.cost_usd;
                s.requests += u.requests;
                if s.first_at == 0 || (u.first_at > 0 && u.first_at < s.first_at) {
                    s.first_at = u.first_at;
                }
            };
            one(st.spent.entry(u.worker.clone()).or_default());
            one(&mut st.org);
        }
        for (scope, limits) in set {
            match scope.as_str() {
                EVERY_WORKER => st.every_worker = *limits,
                ORGANIZATION => st.organization = *limits,
                w => {
                    st.workers.insert(w.to_string(), *limits);
                }
            }
        }
    }

    /// Before a request of `worker`: the refusal's message when it may not spend more
    /// (and the stop to make, the first time).
    pub fn check(&self, worker: &str, now: i64) -> Result<(), (String, Vec<Action>)> {
        let mut st = self.state.lock().expect("budget lock");
        if let Some(r) = st
            .org_stopped
            .clone()
            .or_else(|| st.stopped.get(worker).cloned())
        {
            return Err((r, Vec::new()));
        }
        let Some((org, u)) = st.exhausted(worker, now) else {
            return Ok(());
        };
        let r = reason(worker, org, &u);
        let action = if org {
            st.org_stopped = Some(r.clone());
            Action::StopAll { reason: r.clone() }
        } else {
            st.stopped.insert(worker.to_string(), r.clone());
            Action::Stop {
                worker: worker.to_string(),
                reason: r.clone(),
            }
        };
        Err((r, vec![action]))
    }

    /// After a request of `worker` that used `tokens` and cost `cost`: the notices due and
    /// the stops to make.
    pub fn add(&self, worker: &str, tokens: u64, cost: f64, now: i64) -> Vec<Action> {
        let mut st = self.state.lock().expect("budget lock");
        let before = st.spent.get(worker).copied().unwrap_or_default();
        let org_before = st.org;
        add(
            st.spent.entry(worker.to_string()).or_default(),
            tokens,
            cost,
            now,
        );
        add(&mut st.org, tokens, cost, now);
        let after = st.spent[worker];
        let org_after = st.org;
        let mut out = Vec::new();
        let pct = (self.notice_at * 100.0).round();
        for u in st
            .limits_of(worker)
            .crossed(&before, &after, self.notice_at, now)
        {
            out.push(Action::Notice {
                worker: Some(worker.to_string()),
                text: format!(
                    "Budget: you have used {pct}% of your {}. Finish what you are doing — merge what is ready, post your PATCH_SUMMARY, release your claims — before it runs out: then your model requests are refused and you are stopped.",
                    u.describe()
                ),
                key: format!("budget:{worker}:{}:{}", u.dimension.field(), u.limit),
            });
        }
        for u in st
            .organization
            .crossed(&org_before, &org_after, self.notice_at, now)
        {
            out.push(Action::Notice {
                worker: None,
                text: format!(
                    "Budget: the organization has used {pct}% of its {}. Integrate and merge what you have; start nothing big.",
                    u.describe()
                ),
                key: format!("budget:organization:{}:{}", u.dimension.field(), u.limit),
            });
        }
        if st.org_stopped.is_none() && !st.stopped.contains_key(worker) {
            if let Some((org, u)) = st.exhausted(worker, now) {
                let r = reason(worker, org, &u);
                if org {
                    st.org_stopped = Some(r.clone());
                    out.push(Action::StopAll { reason: r });
                } else {
                    st.stopped.insert(worker.to_string(), r.clone());
                    out.push(Action::Stop {
                        worker: worker.to_string(),
                        reason: r,
                    });
                }
            }
        }
        out
    }

    /// Applies `change`; returns the scope and limits to store, and the workers it lets go
    /// on (stopped by a budget that is no longer spent).
    pub fn set(&self, change: &LimitsChange, now: i64) -> ((String, Limits), Vec<String>) {
        let mut st = self.state.lock().expect("budget lock");
        let stored = if change.organization {
            st.organization = st.organization.with(change);
            (ORGANIZATION.to_string(), st.organization)
        } else if let Some(w) = &change.worker {
            let l = st.limits_of(w).with(change);
            st.workers.insert(w.clone(), l);
            (w.clone(), l)
        } else {
            st.every_worker = st.every_worker.with(change);
            (EVERY_WORKER.to_string(), st.every_worker)
        };
        if st.org_stopped.is_some() && st.organization.exhausted(&st.org, now).is_none() {
            st.org_stopped = None;
        }
        let free: Vec<String> = st
            .stopped
            .keys()
            .filter(|w| st.exhausted(w, now).is_none())
            .cloned()
            .collect();
        for w in &free {
            st.stopped.remove(w);
        }
        (stored, free)
    }

    /// Why `worker` is stopped, if a budget stopped it.
    pub fn stopped_for(&self, worker: &str) -> Option<String> {
        let st = self.state.lock().expect("budget lock");
        st.org_stopped
            .clone()
            .or_else(|| st.stopped.get(worker).cloned())
    }

    /// The budgets and what was spent: every worker's (`None`), or one worker's.
    pub fn view(&self, workers: &[String], now: i64) -> BudgetView {
        let st = self.state.lock().expect("budget lock");
        BudgetView {
            at: now,
            notice_at: self.notice_at,
            every_worker: st.every_worker,
            organization: st.organization,
            organization_spent: st.org,
            organization_stopped_for: st.org_stopped.clone(),
            workers: workers
                .iter()
                .map(|w| WorkerBudget {
                    worker: w.clone(),
                    limits: st.limits_of(w),
                    spent: st.spent.get(w).copied().unwrap_or_default(),
                    stopped_for: st.stopped.get(w).cloned(),
                })
                .collect(),
        }
    }
}

/// Does what `actions` say: notices as events, stops as released claims, a post to
/// `#general`, the worker's status and a `worker.stop` event for its node.
pub async fn act(s: &AppState, actions: Vec<Action>) {
    for a in actions {
        if let Err(e) = act_one(s, &a).await {
            tracing::warn!("budget action {a:?} failed: {e}");
        }
    }
}

async fn act_one(s: &AppState, a: &Action) -> agensh_domain::Result<()> {
    match a {
        Action::Notice { worker, text, key } => {
            tracing::info!(target: "agensh_hub::gateway", worker = ?worker, "budget notice: {text}");
            s.store
                .enqueue(
                    NewEvent {
                        kind: kinds::NOTICE.into(),
                        priority: Priority::Urgent,
                        payload: json!({ "text": text }),
                        dedup_key: Some(key.clone()),
                        source: None,
                        target: worker.clone(),
                        except: None,
                    },
                    s.now(),
                )
                .await?;
        }
        Action::Stop { worker, reason } => {
            tracing::warn!(target: "agensh_hub::gateway", %worker, "stopping the worker: {reason}");
            stop(s, std::slice::from_ref(worker), reason, false).await?;
            post(
                s,
                format!("{worker} is stopped: {reason}. Its claims are released; it goes on when its budget is raised."),
            )
            .await?;
        }
        Action::StopAll { reason } => {
            tracing::warn!(target: "agensh_hub::gateway", "stopping every worker: {reason}");
            stop(s, &s.worker_ids(), reason, true).await?;
            post(
                s,
                format!("Every worker is stopped: {reason}. The run ends."),
            )
            .await?;
        }
    }
    Ok(())
}

/// Releases the claims of `workers`, marks them stopped and tells their nodes.
async fn stop(
    s: &AppState,
    workers: &[String],
    reason: &str,
    org: bool,
) -> agensh_domain::Result<()> {
    let now = s.now();
    for w in s.store.list_workers(now).await? {
        if !workers.contains(&w.id) {
            continue;
        }
        for c in &w.claims {
            if let Err(e) = s.store.release_claim(&w.id, c.seq, now).await {
                tracing::warn!(worker = %w.id, "could not release claim {}: {e}", c.seq);
            }
        }
        s.store
            .set_worker_status(&w.id, agensh_domain::worker::WorkerStatus::Stopped)
            .await?;
    }
    let payload = json!({ "reason": reason, "organization": org });
    let targets: Vec<Option<String>> = if org {
        vec![None]
    } else {
        workers.iter().cloned().map(Some).collect()
    };
    for target in targets {
        s.store
            .enqueue(
                NewEvent {
                    kind: kinds::WORKER_STOP.into(),
                    priority: Priority::Normal,
                    payload: payload.clone(),
                    dedup_key: None,
                    source: None,
                    target,
                    except: None,
                },
                now,
            )
            .await?;
    }
    Ok(())
}

/// Tells `workers` (stopped by a budget now raised) to go on.
pub async fn resume(s: &AppState, workers: &[String]) -> agensh_domain::Result<()> {
    for w in workers {
        s.store
            .enqueue(
                NewEvent {
                    kind: kinds::WORKER_RESUME.into(),
                    priority: Priority::Normal,
                    payload: json!({ "reason": "its budget was raised" }),
                    dedup_key: None,
                    source: None,
                    target: Some(w.clone()),
                    except: None,
                },
                s.now(),
            )
            .await?;
    }
    if !workers.is_empty() {
        post(
            s,
            format!("{} go(es) on: the budget was raised.", workers.join(", ")),
        )
        .await?;
    }
    Ok(())
}

async fn post(s: &AppState, text: String) -> agensh_domain::Result<()> {
    let m = NewMessage {
        to: "#general".into(),
        text,
        thread: None,
    };
    s.store.post_message("admin", m, s.now()).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn budgets(worker_tokens: u64, org_requests: u64) -> Budgets {
        Budgets::new(&BudgetConfig {
            worker: Limits {
                tokens: worker_tokens,
                ..Limits::default()
            },
            organization: Limits {
                requests: org_requests,
                ..Limits::default()
            },
            notice_at: 0.8,
        })
    }

    #[test]
    fn a_worker_gets_a_notice_then_is_stopped_once_then_refused() {
        let b = budgets(1000, 0);
        assert!(b.add("w01", 500, 0.0, 1).is_empty());
        let a = b.add("w01", 400, 0.0, 2);
        assert!(
            matches!(&a[..], [Action::Notice { worker: Some(w), .. }] if w == "w01"),
            "{a:?}"
        );
        assert!(b.check("w01", 3).is_ok());
        let a = b.add("w01", 200, 0.0, 4);
        assert!(
            matches!(&a[..], [Action::Stop { worker, .. }] if worker == "w01"),
            "{a:?}"
        );
        let (why, again) = b.check("w01", 5).unwrap_err();
        assert!(
            why.contains("w01's token budget (1100 tokens of 1000 tokens) is spent"),
            "{why}"
        );
        assert!(again.is_empty(), "stopped once");
        // Another worker is not held back by w01's budget.
        assert!(b.check("w02", 5).is_ok());
    }

    #[test]
    fn raising_a_budget_lets_the_workers_it_stopped_go_on() {
        let b = budgets(100, 0);
        b.add("w01", 150, 0.0, 1);
        b.add("w02", 150, 0.0, 1);
        let raise_w01 = LimitsChange {
            worker: Some("w01".into()),
            tokens: Some(1000),
            ..LimitsChange::default()
        };
        let ((scope, limits), free) = b.set(&raise_w01, 2);
        assert_eq!((scope.as_str(), limits.tokens), ("w01", 1000));
        assert_eq!(free, ["w01"]);
        assert!(b.check("w01", 3).is_ok());
        assert!(b.check("w02", 3).is_err());
        let everyone = LimitsChange {
            tokens: Some(0),
            ..LimitsChange::default()
        };
        let ((scope, _), free) = b.set(&everyone, 4);
        assert_eq!(
            (scope.as_str(), free),
            (EVERY_WORKER, vec!["w02".to_string()])
        );
    }

    #[test]
    fn the_organizations_budget_stops_everyone_once() {
        let b = budgets(0, 5);
        for (w, at) in [("w01", 1), ("w02", 2), ("w01", 3)] {
            assert!(b.add(w, 1, 0.0, at).is_empty());
        }
        // The fourth of five is 80%.
        let a = b.add("w02", 1, 0.0, 4);
        assert!(
            matches!(&a[..], [Action::Notice { worker: None, .. }]),
            "{a:?}"
        );
        let a = b.add("w01", 1, 0.0, 5);
        assert!(matches!(&a[..], [Action::StopAll { .. }]), "{a:?}");
        let (why, again) = b.check("w03", 6).unwrap_err();
        assert!(why.contains("organization's request budget"), "{why}");
        assert!(again.is_empty());
    }

    #[test]
    fn what_the_store_holds_is_taken_in_at_start() {
        let b = budgets(1000, 0);
        let rows = [ModelUsage {
            worker: "w01".into(),
            model: "m".into(),
            requests: 2,
            input_tokens: 900,
            cached_input_tokens: 0,
            output_tokens: 100,
            cost_usd: 0.5,
            first_at: 10,
        }];
        b.load(
            &rows,
            &[(
                "w01".into(),
                Limits {
                    tokens: 2000,
                    ..Limits::default()
                },
            )],
        );
        assert!(
            b.check("w01", 11).is_ok(),
            "w01's own budget was raised to 2000"
        );
        let v = b.view(&["w01".into()], 11);
        assert_eq!(v.workers[0].spent.tokens, 1000);
        assert_eq!(v.organization_spent.requests, 2);
    }
}
