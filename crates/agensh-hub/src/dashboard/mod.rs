//! The dashboard: the page at `/` (assets embedded in the binary), logging in with a
//! one-time link, the live stream and the reads only the page needs.
//!
//! The page is plain HTML, CSS and JavaScript with no build step, served with a strict
//! Content-Security-Policy (scripts and styles from the hub only, no inline script); it
//! puts every stored text into the page as text (`textContent`), never as markup.

pub mod assets;
pub mod feed;
pub mod session;

use std::collections::VecDeque;
use std::sync::Mutex;

use agensh_domain::event::kinds;
use agensh_domain::ids::validate_worker_id;
use agensh_domain::pr::PrState;
use agensh_domain::Error;
use agensh_protocol::dashboard::{DashboardLink, Merge, Overview, RunClock, Score};
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;

use crate::auth::Caller;
use crate::error::{ApiJson, ApiResult};
use crate::state::AppState;

/// Most delivery times kept for the percentiles.
const DELIVERIES_KEPT: usize = 4_096;
/// Most failed merges kept.
const FAILURES_KEPT: usize = 200;
/// Most bytes of a branch's patch the page is sent.
pub const DIFF_BYTES: usize = 512 * 1024;
/// Most scores kept.
const SCORES_KEPT: usize = 10_000;

/// What the hub keeps for the dashboard (memory only: the feed re-reads the store, and
/// counts start again with the hub).
#[derive(Default)]
pub struct Dashboard {
    /// The address the hub listens on (`127.0.0.1:PORT`), for links.
    pub host: String,
    pub sessions: Option<session::Sessions>,
    pub feed: feed::Feed,
    pub deliveries: Deliveries,
    /// The run's clock, as `agensh run` reported it.
    pub run: Mutex<Option<RunClock>>,
    /// Scores of `main` posted by an evaluation.
    pub scores: Mutex<Vec<Score>>,
    /// Each worker's last finished turn, as its node reported it.
    pub last_turns: Mutex<std::collections::HashMap<String, LastTurn>>,
    /// The newest failed merges: PR number, when, why.
    pub failures: Mutex<VecDeque<serde_json::Value>>,
}

impl Dashboard {
    pub fn new(admin_token: &str, host: String) -> Self {
        Self {
            host,
            sessions: Some(session::Sessions::new(admin_token)),
            ..Self::default()
        }
    }

    /// The sessions (always there on a started hub).
    pub fn sessions(&self) -> &session::Sessions {
        self.sessions.as_ref().expect("sessions of a started hub")
    }

    /// Notes a failed merge for the page's list of pull requests.
    pub fn note_failure(&self, number: i64, reason: &serde_json::Value, at: i64) {
        let mut f = self.failures.lock().expect("failures lock");
        if f.len() == FAILURES_KEPT {
            f.pop_front();
        }
        f.push_back(serde_json::json!({ "number": number, "at": at, "reason": reason }));
    }
}

/// What the workers table shows of a worker's last finished turn.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LastTurn {
    pub turn: u64,
    pub last_action: String,
    pub ended_at: i64,
    /// Agent restarts so far.
    pub restarts: u64,
}

/// The newest event delivery times (commit to delivery to a node), in ms.
#[derive(Default)]
pub struct Deliveries(Mutex<VecDeque<u32>>);

impl Deliveries {
    /// Notes the delivery of events committed at `created` (unix ms), at `now`.
    pub fn note(&self, created: impl Iterator<Item = i64>, now: i64) {
        let mut d = self.0.lock().expect("deliveries lock");
        for c in created {
            if d.len() == DELIVERIES_KEPT {
                d.pop_front();
            }
            d.push_back((now - c).clamp(0, u32::MAX as i64) as u32);
        }
    }

    /// p50 and p99 of the kept times, and how many there are.
    pub fn percentiles(&self) -> (u64, u64, u64) {
        let mut v: Vec<u32> = self
            .0
            .lock()
            .expect("deliveries lock")
            .iter()
            .copied()
            .collect();
        if v.is_empty() {
            return (0, 0, 0);
        }
        v.sort_unstable();
        let at = |q: f64| v[((v.len() as f64 * q).ceil() as usize).clamp(1, v.len()) - 1] as u64;
        (at(0.50), at(0.99), v.len() as u64)
    }
}

/// The page, its assets, logging in and out.
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/", get(page))
        .route("/assets/{name}", get(asset))
        .route("/login", get(login))
        .route("/logout", post(logout))
}

/// Headers every dashboard answer carries: no framing, no sniffing, no referrer, and
/// scripts, styles and connections to the hub itself only.
fn secure(mut r: Response) -> Response {
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'",
        ),
    );
    h.insert(
        "x-content-type-options",
        HeaderValue::from_static("nosniff"),
    );
    h.insert("referrer-policy", HeaderValue::from_static("no-referrer"));
    h.insert("x-frame-options", HeaderValue::from_static("DENY"));
    r
}

fn logged_in(s: &AppState, headers: &HeaderMap) -> bool {
    session::session_cookies(headers).any(|v| s.dashboard.sessions().valid(v, s.now()))
}

/// `/`: the dashboard for a logged-in operator; how to log in for anyone else (nothing of
/// the organization in it).
async fn page(State(s): State<AppState>, headers: HeaderMap) -> Response {
    let logged_in = logged_in(&s, &headers);
    let body = if logged_in {
        assets::index_html()
    } else {
        assets::login_html()
    };
    let mut r = (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        body,
    )
        .into_response();
    if !logged_in {
        *r.status_mut() = StatusCode::UNAUTHORIZED;
    }
    secure(r)
}

/// `/assets/NAME-HASH.EXT`: an embedded asset; cached for good, its name changes with it.
async fn asset(Path(name): Path<String>) -> Response {
    match assets::get(&name) {
        Some((kind, body)) => secure(
            (
                [
                    (header::CONTENT_TYPE, kind),
                    (header::CACHE_CONTROL, "public, max-age=31536000, immutable"),
                ],
                body,
            )
                .into_response(),
        ),
        None => crate::error::ApiError(Error::not_found(
            "no_such_asset",
            "the dashboard has no such asset — reload the page (the hub may have been upgraded)",
        ))
        .into_response(),
    }
}

#[derive(Deserialize)]
struct LoginQuery {
    #[serde(default)]
    code: String,
}

/// `/login?code=…`: spends a one-time link, sets the session cookie and sends the browser
/// to `/` (so the code leaves the address bar and the history).
async fn login(State(s): State<AppState>, Query(q): Query<LoginQuery>) -> Response {
    let Some(value) = s.dashboard.sessions().redeem(&q.code, s.now()) else {
        let r = (
            StatusCode::UNAUTHORIZED,
            [
                (header::CONTENT_TYPE, "text/html; charset=utf-8"),
                (header::CACHE_CONTROL, "no-store"),
            ],
            assets::link_spent_html(),
        )
            .into_response();
        return secure(r);
    };
    let cookie = format!(
        "{}={value}; Path=/; HttpOnly; SameSite=Strict; Max-Age={}",
        session::COOKIE,
        session::SESSION_TTL_MS / 1000
    );
    let mut r = (StatusCode::SEE_OTHER, [(header::LOCATION, "/")]).into_response();
    r.headers_mut().insert(
        header::SET_COOKIE,
        HeaderValue::from_str(&cookie).expect("a cookie of hex digits"),
    );
    r.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    secure(r)
}

/// `POST /logout`: forgets the cookie in this browser.
async fn logout() -> Response {
    let mut r = (StatusCode::SEE_OTHER, [(header::LOCATION, "/")]).into_response();
    r.headers_mut().insert(
        header::SET_COOKIE,
        HeaderValue::from_str(&format!(
            "{}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0",
            session::COOKIE
        ))
        .expect("a plain cookie"),
    );
    secure(r)
}

/// `POST /api/v1/dashboard/links` (admin token): a one-time link to the dashboard.
pub async fn new_link(
    State(s): State<AppState>,
    caller: Caller,
    headers: HeaderMap,
) -> ApiResult<(StatusCode, Json<DashboardLink>)> {
    caller.require_admin()?;
    let (code, expires_at) = s.dashboard.sessions().new_link(s.now());
    // The address the caller reached the hub at (a loopback hub answers only loopback
    // hosts, crate::origin), else the one it listens on.
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .map(str::to_string)
        .unwrap_or_else(|| s.dashboard.host.clone());
    Ok((
        StatusCode::CREATED,
        Json(DashboardLink {
            url: format!("http://{host}/login?code={code}"),
            expires_at,
        }),
    ))
}

/// `GET /api/v1/overview` (admin): the organization at a glance.
pub async fn overview(State(s): State<AppState>, caller: Caller) -> ApiResult<Json<Overview>> {
    caller.require_admin()?;
    let feed::Snapshot {
        rows,
        stats,
        states,
        health,
    } = feed::snapshot(&s).await?;
    let mut merges: Vec<Merge> = s
        .store
        .list_prs(Some(PrState::Merged), None, 100_000)
        .await?
        .into_iter()
        .map(|p| Merge {
            pr: p.number,
            author: p.author,
            at: p.updated_at,
        })
        .collect();
    merges.sort_by_key(|m| (m.at, m.pr));
    let ids: Vec<String> = rows.iter().map(|r| r.id.clone()).collect();
    let notices = recent_notices(&s, stats.events as i64).await?;
    let mut done = s.goal.status();
    done.economy = Some(crate::goal::economy(&*s.store, &done).await?);
    Ok(Json(Overview {
        goal: s.config.organization.goal.clone(),
        now: s.now(),
        run: s.dashboard.run.lock().expect("run lock").clone(),
        states,
        stats,
        health,
        merges,
        scores: s.dashboard.scores.lock().expect("scores lock").clone(),
        budget: s.gateway.budgets.view(&ids, s.now()),
        notices,
        done,
    }))
}

/// The newest operator notices (deadline notices among them) up to the event `newest`,
/// oldest first.
async fn recent_notices(s: &AppState, newest: i64) -> ApiResult<Vec<agensh_domain::event::Event>> {
    let mut found = Vec::new();
    // Look back over the newest events only: notices are rare and recent ones matter.
    let from = (newest - 20_000).max(0);
    let mut cursor = from;
    loop {
        let events = s.store.events_after(cursor, 5_000).await?;
        let Some(last) = events.last().map(|e| e.seq) else {
            break;
        };
        cursor = last;
        found.extend(events.into_iter().filter(|e| e.kind == kinds::NOTICE));
    }
    let keep = found.len().saturating_sub(20);
    Ok(found.split_off(keep))
}

/// `PUT /api/v1/run` (admin): the run's clock, for the page's time left.
pub async fn set_run(
    State(s): State<AppState>,
    caller: Caller,
    ApiJson(clock): ApiJson<RunClock>,
) -> ApiResult<Json<RunClock>> {
    caller.require_admin()?;
    if clock.ends_at.is_some_and(|e| e < clock.started_at) {
        return Err(Error::invalid(
            "bad_run_clock",
            "ends_at is before started_at — give the run's end after its start, or none",
        )
        .into());
    }
    *s.dashboard.run.lock().expect("run lock") = Some(clock.clone());
    Ok(Json(clock))
}

/// `POST /api/v1/scores` (admin): a score of `main` for the page's curve.
pub async fn add_score(
    State(s): State<AppState>,
    caller: Caller,
    ApiJson(score): ApiJson<Score>,
) -> ApiResult<(StatusCode, Json<Score>)> {
    caller.require_admin()?;
    if !(0.0..=1.0).contains(&score.score) || score.label.trim().is_empty() {
        return Err(Error::invalid(
            "bad_score",
            "a score is between 0 and 1 and has a label (e.g. \"programbench kept\")",
        )
        .into());
    }
    agensh_domain::text::check(
        "the label",
        &score.label,
        agensh_domain::text::Lines::One,
        "bad_score",
        agensh_domain::text::PLAIN_TEXT,
    )?;
    let mut scores = s.dashboard.scores.lock().expect("scores lock");
    if scores.len() == SCORES_KEPT {
        scores.remove(0);
    }
    scores.push(score.clone());
    scores.sort_by_key(|x| x.at);
    drop(scores);
    s.goal.note_score(&score);
    Ok((StatusCode::CREATED, Json(score)))
}

/// `GET /api/v1/prs/failures` (admin): the newest failed merges, oldest first.
pub async fn failures(
    State(s): State<AppState>,
    caller: Caller,
) -> ApiResult<Json<Vec<serde_json::Value>>> {
    caller.require_admin()?;
    let f = s.dashboard.failures.lock().expect("failures lock");
    Ok(Json(f.iter().cloned().collect()))
}

#[derive(Deserialize)]
pub struct DiffQuery {
    /// A branch of the worker's namespace; its work branch when left out.
    #[serde(default)]
    pub branch: Option<String>,
}

/// A worker's branch against `main`, and the other branches it could show.
#[derive(serde::Serialize)]
pub struct WorkerDiff {
    /// The branch shown.
    pub branch: String,
    /// Every branch of the worker's namespace, the most recently committed first.
    pub branches: Vec<String>,
    #[serde(flatten)]
    pub diff: agensh_workspace::merge::BranchDiff,
}

/// `GET /api/v1/workers/{id}/diff` (admin): a worker's branch against `main` — the one
/// asked for, else the one it committed to last.
pub async fn diff(
    State(s): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    Query(q): Query<DiffQuery>,
) -> ApiResult<Json<WorkerDiff>> {
    caller.require_admin()?;
    validate_worker_id(&id)?;
    let ws = s.workspace.as_ref().ok_or_else(|| {
        Error::not_found(
            "no_workspace",
            "this hub serves no git workspace — start it on an organization directory",
        )
    })?;
    let branches = ws.branches_of(&id).await?;
    let branch = match q.branch {
        Some(b) => b,
        None => branches.first().cloned().ok_or_else(|| {
            Error::not_found(
                "unknown_branch",
                format!("{id} has pushed no branch yet — its changes show here once it pushes one"),
            )
        })?,
    };
    agensh_domain::pr::validate_branch(&branch)?;
    agensh_domain::pr::check_namespace(&id, &branch, "show")?;
    let diff = ws.diff(&branch, DIFF_BYTES).await?;
    Ok(Json(WorkerDiff {
        branch,
        branches,
        diff,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delivery_percentiles_are_nearest_rank_over_the_kept_times() {
        let d = Deliveries::default();
        assert_eq!(d.percentiles(), (0, 0, 0));
        d.note((1..=100).map(|i| 1_000 - i), 1_000);
        assert_eq!(d.percentiles(), (50, 99, 100));
        d.note(std::iter::repeat_n(0, DELIVERIES_KEPT), 5);
        assert_eq!(
            d.percentiles(),
            (5, 5, DELIVERIES_KEPT as u64),
            "old times go"
        );
    }
}
