//! Nodes on other hosts (DESIGN §8): a node token, issued by the operator, lets one node
//! register and receive its own workers' ids and tokens — nothing else.

use serde::{Deserialize, Serialize};

use crate::worker::NewWorker;
use crate::{Error, Result};

/// Longest node name.
pub const NAME_MAX: usize = 40;

/// Most workers one node may run.
pub const WORKERS_MAX: usize = 4_096;

/// A node the operator issued, with its secret token (shown once, by `nodes add`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NewNode {
    pub name: String,
    pub token: String,
    /// How many workers the node may run.
    pub workers: usize,
}

/// A node as the operator lists it (never its token).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeInfo {
    pub name: String,
    /// How many workers the node may run.
    pub workers: usize,
    /// The workers it was given, in id order.
    pub assigned: Vec<String>,
    pub created_at: i64,
    /// When it last registered (None: never).
    pub registered_at: Option<i64>,
}

/// What a node's registration gives it: its workers (the same ones on every
/// registration), each with its own token, and what a node on the hub's host takes from the
/// organization's `agensh.toml` and the run: the goal, the task pack, the run's end and
/// when before it workers are told.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Registered {
    pub node: String,
    pub workers: Vec<NewWorker>,
    /// The organization's goal, for the workers' prompt.
    pub goal: String,
    /// How many workers the whole organization has (the prompt says so).
    pub organization_size: usize,
    /// The task pack's fragments (`organization.pack`, read by the hub), appended to every
    /// worker's prompt in order.
    #[serde(default)]
    pub pack: Vec<String>,
    /// Unix ms the run ends (the hub's run clock: the same on every registration, so a
    /// node started again keeps the run's end); none: no deadline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ends_at: Option<i64>,
    /// Minutes before the end at which each worker gets a deadline notice
    /// (`run.notices_minutes` of the organization).
    #[serde(default)]
    pub notices_minutes: Vec<f64>,
}

/// A node name: 1 to [`NAME_MAX`] characters of ASCII letters, digits, `-`, `_` and `.`,
/// starting with a letter or digit.
pub fn validate_name(name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= NAME_MAX
        && name.as_bytes()[0].is_ascii_alphanumeric()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    if ok {
        Ok(())
    } else {
        Err(Error::invalid(
            "bad_node_name",
            format!(
                "{:?} is not a node name — use 1 to {NAME_MAX} letters, digits, '-', '_' or '.', starting with a letter or digit (e.g. gpu-host-1)",
                crate::ids::truncate_for_message(name)
            ),
        ))
    }
}

/// How many workers a node may be allowed: 1 to [`WORKERS_MAX`].
pub fn check_allowed(workers: usize) -> Result<()> {
    if (1..=WORKERS_MAX).contains(&workers) {
        Ok(())
    } else {
        Err(Error::invalid(
            "bad_worker_count",
            format!("a node may run between 1 and {WORKERS_MAX} workers, not {workers}"),
        ))
    }
}

/// A registration asking for `asked` workers of a node allowed `allowed`.
pub fn check_register(name: &str, asked: usize, allowed: usize) -> Result<()> {
    if asked == 0 {
        return Err(Error::invalid(
            "bad_worker_count",
            "a node registers at least 1 worker — ask for `workers` of 1 or more",
        ));
    }
    if asked > allowed {
        return Err(Error::forbidden(
            "too_many_workers",
            format!(
                "node {name} may run {allowed} worker(s), not {asked} — start it with {allowed} or fewer, or ask the operator to issue a node token for more"
            ),
        ));
    }
    Ok(())
}

/// The error for a node name that names no node.
pub fn unknown_node(name: &str) -> Error {
    Error::not_found(
        "unknown_node",
        format!(
            "there is no node {:?} — list the nodes to see their names",
            crate::ids::truncate_for_message(name)
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_names_are_short_plain_words() {
        for ok in ["a", "gpu-host-1", "n.2_b", &"x".repeat(NAME_MAX)] {
            validate_name(ok).unwrap();
        }
        for bad in ["", "-a", "a b", "ä", "a/b", &"x".repeat(NAME_MAX + 1)] {
            assert_eq!(
                validate_name(bad).unwrap_err().code,
                "bad_node_name",
                "{bad}"
            );
        }
    }

    #[test]
    fn a_node_registers_no_more_workers_than_it_is_allowed() {
        check_register("n", 4, 4).unwrap();
        check_register("n", 1, 4).unwrap();
        let e = check_register("n", 5, 4).unwrap_err();
        assert_eq!(e.code, "too_many_workers");
        assert!(e.message.contains("may run 4"), "{}", e.message);
        assert_eq!(
            check_register("n", 0, 4).unwrap_err().code,
            "bad_worker_count"
        );
        assert!(check_allowed(0).is_err() && check_allowed(WORKERS_MAX + 1).is_err());
    }
}
