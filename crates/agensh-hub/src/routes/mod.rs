//! REST+JSON handlers under `/api/v1`, one file per area: each maps HTTP (extractors,
//! status codes, JSON bodies) onto an operation of [`crate::ops`].

pub mod board;
use crate::dashboard;
pub mod events;
pub mod git;
pub mod issues;
pub mod messages;
pub mod nodes;
pub mod openapi;
pub mod prs;
pub mod ship;
pub mod turns;
pub mod workers;

use axum::extract::DefaultBodyLimit;
use axum::handler::Handler;
use axum::http::Method;
use axum::routing::{on, MethodFilter, MethodRouter};
use axum::Router;

use crate::state::AppState;

/// Largest body of a request for many workers (a node's status report and event poll),
/// or `hub.body_limit` when that is larger: thousands of entries, each with its token.
pub const BATCH_BODY_LIMIT: usize = 8 << 20;

/// One `/api/v1` operation: a method, a path under `/api/v1` (axum's `{param}`, which is
/// also OpenAPI's) and what serves it.
struct Route {
    method: Method,
    path: &'static str,
    serve: MethodRouter<AppState>,
}

/// `method path` served by `handler`; the method is given once, so the table cannot say
/// one method and route another.
fn route<H, T>(method: Method, path: &'static str, handler: H) -> Route
where
    H: Handler<T, AppState>,
    T: 'static,
{
    let filter = MethodFilter::try_from(method.clone()).expect("a method the router takes");
    Route {
        method,
        path,
        serve: on(filter, handler),
    }
}

/// The one table of the `/api/v1` routes: the router is built from it, and the OpenAPI
/// document's test reads it through [`operations`]. `body_limit` is `hub.body_limit`.
fn table(body_limit: usize) -> Vec<Route> {
    let batch = DefaultBodyLimit::max(body_limit.max(BATCH_BODY_LIMIT));
    let batched = |mut r: Route| {
        r.serve = r.serve.layer(batch);
        r
    };
    let turn_body = DefaultBodyLimit::max(body_limit.max(turns::BODY_LIMIT));
    let turn_report = |mut r: Route| {
        r.serve = r.serve.layer(turn_body);
        r
    };
    vec![
        route(Method::GET, "/openapi.json", openapi::serve),
        route(Method::GET, "/whoami", workers::whoami),
        route(Method::GET, "/stats", workers::stats),
        route(Method::GET, "/goal", workers::goal),
        route(Method::GET, "/usage", workers::usage),
        route(Method::GET, "/budget", workers::budget),
        route(Method::PUT, "/budget", workers::set_budget),
        route(Method::GET, "/workers", workers::list),
        route(Method::POST, "/workers", workers::add),
        route(Method::GET, "/workers/{id}/token", workers::token),
        route(Method::GET, "/nodes", nodes::list),
        route(Method::POST, "/nodes", nodes::add),
        route(Method::POST, "/nodes/register", nodes::register),
        route(Method::POST, "/nodes/{name}/revoke", nodes::revoke),
        route(Method::PUT, "/workers/{id}/status", workers::set_status),
        batched(route(Method::PUT, "/workers/status", workers::set_statuses)),
        turn_report(route(Method::POST, "/workers/{id}/turns", turns::report)),
        route(Method::GET, "/workers/{id}/turns", turns::list),
        route(Method::POST, "/board/records", board::append),
        route(Method::GET, "/board/records/{id}", board::unfold),
        route(Method::GET, "/board/recent", board::recent),
        route(Method::POST, "/board/read", board::read_unread),
        route(Method::GET, "/board/grep", board::grep),
        route(Method::POST, "/board/claims/{id}/renew", board::renew),
        route(Method::POST, "/board/claims/{id}/release", board::release),
        route(Method::GET, "/messages", messages::history),
        route(Method::POST, "/messages", messages::send),
        route(Method::POST, "/messages/read", messages::read_unread),
        route(Method::GET, "/messages/{id}/receipts", messages::receipts),
        route(Method::GET, "/events", events::poll),
        route(Method::POST, "/events", events::notice),
        batched(route(Method::POST, "/events/poll", events::poll_many)),
        batched(route(Method::POST, "/events/overdue", events::overdue)),
        route(Method::POST, "/events/ack", events::ack),
        route(Method::POST, "/events/presented", events::presented),
        route(Method::GET, "/events/state", events::state),
        route(Method::GET, "/prs", prs::list),
        route(Method::POST, "/prs", prs::open),
        route(Method::GET, "/prs/{n}", prs::view),
        route(Method::POST, "/prs/{n}/reviews", prs::review),
        route(Method::POST, "/prs/{n}/comments", prs::comment),
        route(Method::POST, "/prs/{n}/merge", prs::merge),
        route(Method::POST, "/prs/{n}/close", prs::close),
        route(Method::GET, "/issues", issues::list),
        route(Method::POST, "/issues", issues::open),
        route(Method::GET, "/issues/{n}", issues::view),
        route(Method::POST, "/issues/{n}/comments", issues::comment),
        route(Method::POST, "/issues/{n}/labels", issues::labels),
        route(Method::POST, "/issues/{n}/assign", issues::assign),
        route(Method::POST, "/issues/{n}/close", issues::close),
        route(Method::POST, "/issues/{n}/reopen", issues::reopen),
        route(Method::POST, "/ship", ship::ship),
        route(Method::GET, "/overview", dashboard::overview),
        route(Method::GET, "/stream", dashboard::feed::stream),
        route(Method::POST, "/dashboard/links", dashboard::new_link),
        route(Method::PUT, "/run", dashboard::set_run),
        route(Method::POST, "/scores", dashboard::add_score),
        route(Method::GET, "/merge-failures", dashboard::failures),
        route(Method::GET, "/workers/{id}/diff", dashboard::diff),
    ]
}

/// Every `/api/v1` operation the router serves, as (method, path under `/api/v1`), in
/// the table's order: what the OpenAPI document must list, no more and no less.
pub fn operations() -> Vec<(Method, &'static str)> {
    table(0).into_iter().map(|r| (r.method, r.path)).collect()
}

/// The `/api/v1` routes; `body_limit` is `hub.body_limit`. Two entries of one path are
/// merged into one route of both methods.
pub fn api(body_limit: usize) -> Router<AppState> {
    table(body_limit)
        .into_iter()
        .fold(Router::new(), |router, r| router.route(r.path, r.serve))
}
