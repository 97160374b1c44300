//! The worker registry over HTTP ([`ops::workers`]).

use agensh_domain::budget::LimitsChange;
use agensh_domain::goal::GoalStatus;
use agensh_domain::worker::{NewWorker, StatusReports, WorkerInfo};
use agensh_protocol::rest::{
    AddWorkers, BudgetView, ModelUsage, SetStatus, Stats, Updated, WhoAmI,
};
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use serde_json::{json, Value};

use crate::auth::Caller;
use crate::error::{ApiJson, ApiResult};
use crate::ops::workers;
use crate::state::AppState;

pub async fn whoami(caller: Caller) -> Json<WhoAmI> {
    Json(WhoAmI {
        id: caller.id,
        admin: caller.admin,
    })
}

pub async fn add(
    State(s): State<AppState>,
    caller: Caller,
    ApiJson(body): ApiJson<AddWorkers>,
) -> ApiResult<(StatusCode, Json<Vec<NewWorker>>)> {
    let added = workers::add_workers(&s, &caller, body.count).await?;
    Ok((StatusCode::CREATED, Json(added)))
}

pub async fn list(State(s): State<AppState>, _caller: Caller) -> ApiResult<Json<Vec<WorkerInfo>>> {
    Ok(Json(workers::list_workers(&s).await?))
}

pub async fn token(
    State(s): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<Json<NewWorker>> {
    Ok(Json(workers::worker_token(&s, &caller, id)?))
}

pub async fn set_status(
    State(s): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<SetStatus>,
) -> ApiResult<Json<Value>> {
    let status = workers::set_status(&s, &caller, &id, &body.status).await?;
    Ok(Json(json!({ "id": id, "status": status })))
}

/// Many workers' statuses in one request, as a node reports them: all set, or none.
pub async fn set_statuses(
    State(s): State<AppState>,
    caller: Caller,
    ApiJson(body): ApiJson<StatusReports>,
) -> ApiResult<Json<Updated>> {
    let updated = workers::set_statuses(&s, &caller, body).await?;
    Ok(Json(Updated { updated }))
}

/// Counts of what the organization has produced.
pub async fn stats(State(s): State<AppState>, _caller: Caller) -> ApiResult<Json<Stats>> {
    Ok(Json(workers::stats(&s).await?))
}

/// `GET /goal`: the organization's goal (`organization.done_when`), each condition's last
/// check and when it was met.
pub async fn goal(State(s): State<AppState>, _caller: Caller) -> ApiResult<Json<GoalStatus>> {
    Ok(Json(workers::goal(&s).await?))
}

/// The budgets and what was spent: every worker's for the admin, a worker its own.
pub async fn budget(State(s): State<AppState>, caller: Caller) -> ApiResult<Json<BudgetView>> {
    Ok(Json(workers::budget(&s, &caller)))
}

/// Changes a budget (admin only): stored, in force at once, and each worker it stopped
/// that may go on now is told to.
pub async fn set_budget(
    State(s): State<AppState>,
    caller: Caller,
    ApiJson(change): ApiJson<LimitsChange>,
) -> ApiResult<Json<BudgetView>> {
    Ok(Json(workers::set_budget(&s, &caller, change).await?))
}

/// Model usage through the gateway per worker and model: the admin's every worker's, a
/// worker's its own.
pub async fn usage(State(s): State<AppState>, caller: Caller) -> ApiResult<Json<Vec<ModelUsage>>> {
    Ok(Json(workers::usage(&s, &caller).await?))
}
