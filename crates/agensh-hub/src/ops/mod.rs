//! The hub's service layer: every operation REST (`routes/`), MCP (`mcp/`) and the
//! dashboard share, one function each.
//!
//! An operation takes the hub's state, the [`Caller`](crate::auth::Caller) where it matters
//! and typed inputs, and answers a typed result or the domain's
//! [`Error`](agensh_domain::Error); limits, events and metrics are applied here, once,
//! however the request came. No extractors, status codes or JSON bodies: the handlers
//! above map those. Nothing below the handlers imports them: outside `routes/`, `mcp/`,
//! `serve.rs` and `lib.rs` no file names `routes` or `mcp` (`tests/layers.rs` checks it).

pub mod board;
pub mod events;
pub mod issues;
pub mod messages;
pub mod nodes;
pub mod prs;
pub mod ship;
pub mod turns;
pub mod workers;
