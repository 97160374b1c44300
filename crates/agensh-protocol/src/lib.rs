//! The wire of agensh, without IO: what goes over HTTP, stdio and event streams, so the
//! hub, the client, the bridge, the node's ACP adapter and the scripted agent agree on one
//! definition of each message.
//!
//! - [`rest`]: bodies and answers of the REST API (`/api/v1`, docs/API.md).
//! - [`jsonrpc`]: one JSON-RPC 2.0 envelope and its error codes (MCP and ACP both use it).
//! - [`framing`]: NDJSON (one message per line) and SSE (`text/event-stream`).
//! - [`model_usage`]: token usage as each model API writes it (whole bodies and streams),
//!   and prices, for the model gateway.
//! - [`acp`]: the Agent Client Protocol messages, as the typed structures of
//!   `agent-client-protocol-schema`.

pub mod acp;
pub mod dashboard;
pub mod framing;
pub mod jsonrpc;
pub mod model_usage;
pub mod rest;
