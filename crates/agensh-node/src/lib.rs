//! The node: starts a machine's workers, each with its own checkout and agent, and runs
//! their turn loops against a hub given by URL.
//!
//! `adapters` holds the one interface the loop drives ([`adapters::Agent`]) and one thin
//! translation per kind of agent; `turn` is the loop of one worker; `pump` and `status`
//! are the node's shared event long-poll and status reports for all its workers; `script`
//! is the deterministic scripted agent used by tests and load runs.

pub mod adapters;
pub mod node;
pub mod pump;
pub mod script;
pub mod status;
pub mod turn;
