//! This process and its children.
//!
//! [`shutdown`] is the one stop signal a hub, a node and everything they spawn listen to.
//! Child processes that must be stopped together with everything they started (agents,
//! gate commands, git http-backend, the model server, shell commands of the built-in
//! agent) live in a process group of their own: [`group`] spawns, signals, stops and waits
//! for them, and sets their CPU priority; [`contain`] finds what left the group (a new
//! session, a double fork) by a mark in the environment; [`cgroup`] puts each worker's
//! agent into a control group of its own with a memory limit and a CPU weight, and tells a
//! kill by that limit from any other death. [`resources`] reads and raises this process's
//! limits and its CPU time. These modules hold the `unsafe` for managing agensh's child
//! processes; the evaluator's sandbox (agensh-eval) has its own for the namespaces it
//! builds, and the store its writer thread's priority. Every other crate forbids `unsafe`.

pub mod cgroup;
pub mod contain;
pub mod group;
pub mod resources;
pub mod shutdown;

pub use contain::Mark;
pub use group::{GroupChild, Priority, ProcessGroup};
pub use resources::{raise_open_file_limit, Limit};
pub use shutdown::{Shutdown, ShutdownTrigger};
