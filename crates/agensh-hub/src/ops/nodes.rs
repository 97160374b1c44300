//! Nodes on other hosts (DESIGN §8): the operator issues, lists and revokes them; a node
//! registers with its own token and receives its workers' ids and tokens.

use agensh_domain::node::{NewNode, NodeInfo, Registered};
use agensh_domain::Result;
use agensh_protocol::rest::{AddNode, RegisterNode};

use crate::auth::Caller;
use crate::state::AppState;

/// A new node and its token, shown this once (admin only).
pub async fn add_node(s: &AppState, caller: &Caller, body: AddNode) -> Result<NewNode> {
    caller.require_admin()?;
    let node = s.store.add_node(&body.name, body.workers, s.now()).await?;
    s.node_tokens
        .write()
        .expect("node tokens lock")
        .insert(node.token.clone(), node.name.clone());
    Ok(node)
}

/// Every node, without tokens (admin only).
pub async fn list_nodes(s: &AppState, caller: &Caller) -> Result<Vec<NodeInfo>> {
    caller.require_admin()?;
    s.store.list_nodes().await
}

/// Revokes node `name` (admin only): its token stops working, and so do the worker tokens
/// it was given (its workers get new ones and belong to no node). The workers renewed.
pub async fn revoke_node(s: &AppState, caller: &Caller, name: &str) -> Result<Vec<String>> {
    caller.require_admin()?;
    agensh_domain::node::validate_name(name)?;
    let renewed = s.store.revoke_node(name).await?;
    s.node_tokens
        .write()
        .expect("node tokens lock")
        .retain(|_, n| n != name);
    let mut tokens = s.tokens.write().expect("tokens lock");
    tokens.retain(|_, id| !renewed.iter().any(|w| w.id == *id));
    for w in &renewed {
        tokens.insert(w.token.clone(), w.id.clone());
    }
    Ok(renewed.into_iter().map(|w| w.id).collect())
}

/// Registers `node` (authenticated by its node token): its workers with their tokens — the
/// same ones on every registration, never more than it may run — and what a node on the
/// hub's host would take from the organization: the goal, the task pack, the run's end
/// (the run clock) and the notice times.
pub async fn register_node(s: &AppState, node: String, body: RegisterNode) -> Result<Registered> {
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
    Ok(Registered {
        node,
        workers,
        goal: s.config.organization.goal.clone(),
        organization_size,
        pack: s.pack.read().expect("pack lock").clone(),
        ends_at,
        notices_minutes: s.config.run.notices_minutes.clone(),
    })
}
