//! One file per command.

pub mod agent;
pub mod agents;
pub mod bench;
pub mod board;
pub mod budget;
pub mod completions;
pub mod config;
pub mod dashboard;
pub mod doctor;
pub mod eval;
pub mod events;
pub mod goal;
pub mod hub;
pub mod init;
pub mod issue;
pub mod mcp;
pub mod model;
pub mod msg;
pub mod node;
pub mod nodes;
pub mod pr;
pub mod run;
pub mod status;
pub mod store;
pub mod workers;
