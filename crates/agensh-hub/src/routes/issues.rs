//! Issues over HTTP ([`ops::issues`]).

use agensh_domain::issue::{Issue, IssueComment, NewIssue};
use agensh_protocol::rest::{Assign, LabelChange, ListIssues, NewComment};
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;

use crate::auth::Caller;
use crate::error::{ApiJson, ApiQuery, ApiResult};
use crate::ops::issues;
use crate::state::AppState;

pub async fn open(
    State(s): State<AppState>,
    caller: Caller,
    ApiJson(issue): ApiJson<NewIssue>,
) -> ApiResult<(StatusCode, Json<Issue>)> {
    Ok((
        StatusCode::CREATED,
        Json(issues::open_issue(&s, &caller, issue).await?),
    ))
}

pub async fn list(
    State(s): State<AppState>,
    _caller: Caller,
    ApiQuery(q): ApiQuery<ListIssues>,
) -> ApiResult<Json<Vec<Issue>>> {
    Ok(Json(issues::list_issues(&s, q).await?))
}

pub async fn view(
    State(s): State<AppState>,
    _caller: Caller,
    Path(n): Path<String>,
) -> ApiResult<Json<Issue>> {
    Ok(Json(issues::view_issue(&s, &n).await?))
}

pub async fn comment(
    State(s): State<AppState>,
    caller: Caller,
    Path(n): Path<String>,
    ApiJson(b): ApiJson<NewComment>,
) -> ApiResult<(StatusCode, Json<IssueComment>)> {
    Ok((
        StatusCode::CREATED,
        Json(issues::comment_issue(&s, &caller, &n, &b.text).await?),
    ))
}

pub async fn labels(
    State(s): State<AppState>,
    _caller: Caller,
    Path(n): Path<String>,
    ApiJson(b): ApiJson<LabelChange>,
) -> ApiResult<Json<Issue>> {
    Ok(Json(issues::label_issue(&s, &n, b).await?))
}

pub async fn assign(
    State(s): State<AppState>,
    caller: Caller,
    Path(n): Path<String>,
    ApiJson(b): ApiJson<Assign>,
) -> ApiResult<Json<Issue>> {
    Ok(Json(
        issues::assign_issue(&s, &caller, &n, b.assignee).await?,
    ))
}

pub async fn close(
    State(s): State<AppState>,
    caller: Caller,
    Path(n): Path<String>,
) -> ApiResult<Json<Issue>> {
    Ok(Json(issues::close_issue(&s, &caller, &n).await?))
}

pub async fn reopen(
    State(s): State<AppState>,
    caller: Caller,
    Path(n): Path<String>,
) -> ApiResult<Json<Issue>> {
    Ok(Json(issues::reopen_issue(&s, &caller, &n).await?))
}
