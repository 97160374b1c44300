//! Nodes over HTTP ([`ops::nodes`]).

use agensh_domain::node::{NewNode, NodeInfo, Registered};
use agensh_protocol::rest::{AddNode, RegisterNode};
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;

use crate::auth::{Caller, NodeCaller};
use crate::error::{ApiJson, ApiResult};
use crate::ops::nodes;
use crate::state::AppState;

/// `POST /nodes` (admin): a new node and its token, shown this once.
pub async fn add(
    State(s): State<AppState>,
    caller: Caller,
    ApiJson(body): ApiJson<AddNode>,
) -> ApiResult<(StatusCode, Json<NewNode>)> {
    Ok((
        StatusCode::CREATED,
        Json(nodes::add_node(&s, &caller, body).await?),
    ))
}

/// `GET /nodes` (admin): every node, without tokens.
pub async fn list(State(s): State<AppState>, caller: Caller) -> ApiResult<Json<Vec<NodeInfo>>> {
    Ok(Json(nodes::list_nodes(&s, &caller).await?))
}

/// `POST /nodes/{name}/revoke` (admin): the node's token stops working, and so do the
/// worker tokens it was given (its workers get new ones and belong to no node).
pub async fn revoke(
    State(s): State<AppState>,
    caller: Caller,
    Path(name): Path<String>,
) -> ApiResult<Json<Vec<String>>> {
    Ok(Json(nodes::revoke_node(&s, &caller, &name).await?))
}

/// `POST /nodes/register` (node token): the node's workers with their tokens and what the
/// node takes from the organization.
pub async fn register(
    State(s): State<AppState>,
    NodeCaller(node): NodeCaller,
    ApiJson(body): ApiJson<RegisterNode>,
) -> ApiResult<Json<Registered>> {
    Ok(Json(nodes::register_node(&s, node, body).await?))
}
