//! Nodes on other hosts (DESIGN §8): the operator issues, lists and revokes them; a node
//! registers with its own token and receives its workers' ids and tokens.

use agensh_domain::node::{NewNode, NodeInfo, Registered};
use agensh_protocol::rest::{AddNode, RegisterNode};
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;

use crate::auth::{Caller, NodeCaller};
use crate::error::{ApiJson, ApiResult};
use crate::state::AppState;

/// `POST /nodes` (admin): a new node and its token, shown this once.
pub async fn add(
    State(s): State<AppState>,
    caller: Caller,
    ApiJson(body): ApiJson<AddNode>,
) -> ApiResult<(StatusCode, Json<NewNode>)> {
    caller.require_admin()?;
    let node = s.store.add_node(&body.name, body.workers, s.now()).await?;
    s.node_tokens
        .write()
        .expect("node tokens lock")
        .insert(node.token.clone(), node.name.clone());
    Ok((StatusCode::CREATED, Json(node)))
}

/// `GET /nodes` (admin): every node, without tokens.
pub async fn list(State(s): State<AppState>, caller: Caller) -> ApiResult<Json<Vec<NodeInfo>>> {
    caller.require_admin()?;
    Ok(Json(s.store.list_nodes().await?))
}

/// `POST /nodes/{name}/revoke` (admin): the node's token stops working, and so do the
/// worker tokens it was given (its workers get new ones and belong to no node).
pub async fn revoke(
    State(s): State<AppState>,
    caller: Caller,
    Path(name): Path<String>,
) -> ApiResult<Json<Vec<String>>> {
    caller.require_admin()?;
    agensh_domain::node::validate_name(&name)?;
    let renewed = s.store.revoke_node(&name).await?;
    s.node_tokens
        .write()
        .expect("node tokens lock")
        .retain(|_, n| *n != name);
    let mut tokens = s.tokens.write().expect("tokens lock");
    tokens.retain(|_, id| !renewed.iter().any(|w| w.id == *id));
    for w in &renewed {
        tokens.insert(w.token.clone(), w.id.clone());
    }
    Ok(Json(renewed.into_iter().map(|w| w.id).collect()))
}

/// `POST /nodes/register` (node token): the node's workers with their tokens — the same
/// ones on every registration, never more than it may run — and what a node on the hub's
/// host would take from the organization: the goal, the task pack, the run's end (the run
/// clock) and the notice times.
pub async fn register(
    State(s): State<AppState>,
    NodeCaller(node): NodeCaller,
    ApiJson(body): ApiJson<RegisterNode>,
) -> ApiResult<Json<Registered>> {
    let workers = s.store.register_node(&node, body.workers, s.now()).await?;
    {
        let mut tokens = s.tokens.write().expect("tokens lock");
        for w in &workers {
            tokens.insert(w.token.clone(), w.id.clone());
        }
    }
    let organization_size = s.tokens.read().expect("tokens lock").len();
    let ends_at = s
        .dashboard
        .run
        .lock()
        .expect("run lock")
        .as_ref()
        .and_then(|c| c.ends_at);
    Ok(Json(Registered {
        node,
        workers,
        goal: s.config.organization.goal.clone(),
        organization_size,
        pack: s.pack.read().expect("pack lock").clone(),
        ends_at,
        notices_minutes: s.config.run.notices_minutes.clone(),
    }))
}
