//! REST+JSON handlers under `/api/v1`, one file per area.

pub mod board;
pub mod events;
pub mod git;
pub mod messages;
pub mod prs;
pub mod ship;
pub mod workers;

use axum::extract::DefaultBodyLimit;
use axum::routing::{get, post, put};
use axum::Router;

use crate::state::AppState;

/// Largest body of a request for many workers (a node's status report and event poll),
/// or `hub.body_limit` when that is larger: thousands of entries, each with its token.
pub const BATCH_BODY_LIMIT: usize = 8 << 20;

/// The `/api/v1` routes; `body_limit` is `hub.body_limit`.
pub fn api(body_limit: usize) -> Router<AppState> {
    let batch = DefaultBodyLimit::max(body_limit.max(BATCH_BODY_LIMIT));
    Router::new()
        .route("/whoami", get(workers::whoami))
        .route("/stats", get(workers::stats))
        .route("/usage", get(workers::usage))
        .route("/budget", get(workers::budget).put(workers::set_budget))
        .route("/workers", get(workers::list).post(workers::add))
        .route("/workers/{id}/token", get(workers::token))
        .route("/workers/{id}/status", put(workers::set_status))
        .route("/workers/status", put(workers::set_statuses).layer(batch))
        .route("/board/records", post(board::append))
        .route("/board/records/{id}", get(board::unfold))
        .route("/board/recent", get(board::recent))
        .route("/board/read", post(board::read_unread))
        .route("/board/grep", get(board::grep))
        .route("/board/claims/{id}/renew", post(board::renew))
        .route("/board/claims/{id}/release", post(board::release))
        .route("/messages", get(messages::history).post(messages::send))
        .route("/messages/read", post(messages::read_unread))
        .route("/events", get(events::poll).post(events::notice))
        .route("/events/poll", post(events::poll_many).layer(batch))
        .route("/events/ack", post(events::ack))
        .route("/events/state", get(events::state))
        .route("/prs", get(prs::list).post(prs::open))
        .route("/prs/{n}", get(prs::view))
        .route("/prs/{n}/reviews", post(prs::review))
        .route("/prs/{n}/comments", post(prs::comment))
        .route("/prs/{n}/merge", post(prs::merge))
        .route("/prs/{n}/close", post(prs::close))
        .route("/ship", post(ship::ship))
}
