//! Pull requests over HTTP ([`ops::prs`]).

use agensh_domain::pr::{NewPr, PullRequest, Review};
use agensh_protocol::rest::{ListPrs, NewComment, NewReview};
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;

use crate::auth::Caller;
use crate::error::{ApiJson, ApiQuery, ApiResult};
use crate::ops::prs;
use crate::state::AppState;

pub async fn open(
    State(s): State<AppState>,
    caller: Caller,
    ApiJson(pr): ApiJson<NewPr>,
) -> ApiResult<(StatusCode, Json<PullRequest>)> {
    Ok((
        StatusCode::CREATED,
        Json(prs::open_pr(&s, &caller, pr).await?),
    ))
}

pub async fn list(
    State(s): State<AppState>,
    _caller: Caller,
    ApiQuery(q): ApiQuery<ListPrs>,
) -> ApiResult<Json<Vec<PullRequest>>> {
    Ok(Json(
        prs::list_prs(&s, q.state.as_deref(), q.author, q.limit).await?,
    ))
}

pub async fn view(
    State(s): State<AppState>,
    _caller: Caller,
    Path(n): Path<String>,
) -> ApiResult<Json<prs::PrView>> {
    Ok(Json(prs::view_pr(&s, &n).await?))
}

pub async fn review(
    State(s): State<AppState>,
    caller: Caller,
    Path(n): Path<String>,
    ApiJson(b): ApiJson<NewReview>,
) -> ApiResult<(StatusCode, Json<Review>)> {
    let r = prs::review_pr(&s, &caller, &n, &b.verdict, &b.text).await?;
    Ok((StatusCode::CREATED, Json(r)))
}

pub async fn comment(
    State(s): State<AppState>,
    caller: Caller,
    Path(n): Path<String>,
    ApiJson(b): ApiJson<NewComment>,
) -> ApiResult<(StatusCode, Json<agensh_domain::pr::Comment>)> {
    Ok((
        StatusCode::CREATED,
        Json(prs::comment_pr(&s, &caller, &n, &b.text).await?),
    ))
}

pub async fn close(
    State(s): State<AppState>,
    caller: Caller,
    Path(n): Path<String>,
) -> ApiResult<Json<PullRequest>> {
    Ok(Json(prs::close_pr(&s, &caller, &n).await?))
}

pub async fn merge(
    State(s): State<AppState>,
    caller: Caller,
    Path(n): Path<String>,
) -> ApiResult<Json<prs::Merged>> {
    Ok(Json(prs::merge_pr(&s, &caller, &n).await?))
}
