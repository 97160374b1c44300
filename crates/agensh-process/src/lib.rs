//! This process and its children.
//!
//! [`shutdown`] is the one stop signal a hub, a node and everything they spawn listen to.
//! Child processes that must be stopped together with everything they started (agents,
//! gate commands, the model server, shell commands of the built-in agent) live in a process
//! group of their own; the module that spawns and kills such groups is the only place in
//! agensh with `unsafe` for processes.

pub mod shutdown;

pub use shutdown::{Shutdown, ShutdownTrigger};
