//! The node: starts a machine's workers, each with its own checkout and agent, and runs
//! their turn loops against a hub given by URL.
//!
//! `adapters` holds the one interface the loop drives ([`adapters::Agent`]) and one thin
//! translation per kind of agent; `turn` is the loop of one worker; `pump` and `status`
//! are the node's shared event long-poll and status reports for all its workers;
//! `mcp_proxy` is the node's `/mcp` in front of the hub, which does `ship`'s local half,
//! and `mcp_bridge` the same for `agensh mcp`'s stdio bridge; `doctor` checks the machine;
//! `install` finds and installs the presets' agent CLIs (npm); `parking` backs off the continue
//! prompts of a worker whose turns change nothing; `view` is a run on the terminal (its live
//! view, its end at the goal, its summary). The scripted
//! agent the tests and load runs drive is a separate crate (`agensh-script`), started as a
//! process like any other ACP agent.

pub mod adapters;
pub mod doctor;
pub mod install;
pub mod mcp_bridge;
pub mod mcp_proxy;
pub mod node;
pub mod parking;
pub mod pump;
pub mod setup;
pub mod status;
pub mod turn;
pub mod urgent;
pub mod view;
