//! Domain types of agensh, shared by the hub, the node and the command line.
//!
//! This crate does no IO: it holds the shapes of workers, board records, messages and
//! events, the limits and page sizes that every way in enforces, the grep query language
//! (its syntax tree, which each store translates to its own dialect), the recent-view rules
//! of the board and the configuration file's schema.

pub mod agents;
pub mod budget;
pub mod config;
pub mod error;
pub mod event;
pub mod gateway;
pub mod goal;
pub mod ids;
pub mod issue;
pub mod limits;
pub mod message;
pub mod node;
pub mod page;
pub mod pr;
pub mod programbench;
pub mod prompt;
pub mod query;
pub mod receipt;
pub mod record;
pub mod size;
pub mod text;
pub mod time;
pub mod turn;
pub mod view;
pub mod worker;

pub use error::{Error, ErrorKind, Result};
