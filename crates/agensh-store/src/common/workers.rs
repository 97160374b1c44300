//! Workers and nodes: the refusals and the rows as the API shows them.

use std::collections::HashMap;

use agensh_domain::record::Record;
use agensh_domain::worker::{WorkerInfo, WorkerStatus, ADD_LIMIT};
use agensh_domain::{Error, Result};

/// Whether `count` workers may be added at once.
pub fn check_add(count: usize) -> Result<()> {
    if count == 0 || count > ADD_LIMIT {
        return Err(Error::invalid(
            "bad_worker_count",
            format!("cannot add {count} workers — add between 1 and {ADD_LIMIT} at a time"),
        ));
    }
    Ok(())
}

/// The refusal of a node named `name`, which exists already.
pub fn node_exists(name: &str) -> Error {
    Error::conflict(
        "node_exists",
        format!("node {name} exists already — pick another name, or revoke it first"),
    )
}

/// Live claims (oldest first) by their authors.
pub fn claims_by_author(live: Vec<Record>) -> HashMap<String, Vec<Record>> {
    let mut claims: HashMap<String, Vec<Record>> = HashMap::new();
    for c in live {
        claims.entry(c.author.clone()).or_default().push(c);
    }
    claims
}

/// A worker's row as listed, with its live claims (taken from `claims`).
pub fn info(
    id: String,
    status: &str,
    last_activity: Option<i64>,
    created_at: i64,
    claims: &mut HashMap<String, Vec<Record>>,
) -> Result<WorkerInfo> {
    Ok(WorkerInfo {
        claims: claims.remove(&id).unwrap_or_default(),
        status: WorkerStatus::parse(status)?,
        progress: None,
        agent: None,
        stopped_for: None,
        id,
        last_activity,
        created_at,
    })
}
