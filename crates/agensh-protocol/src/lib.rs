//! The wire of agensh, without IO: what goes over HTTP, stdio and event streams, so the
//! hub, the client, the bridge, the node's ACP adapter and the scripted agent agree on one
//! definition of each message.
//!
//! - [`rest`]: bodies and answers of the REST API (`/api/v1`, docs/API.md).
//! - [`jsonrpc`]: one JSON-RPC 2.0 envelope and its error codes (MCP and ACP both use it).
//! - [`framing`]: NDJSON (one message per line) and SSE (`text/event-stream`).
//! - [`acp`]: the Agent Client Protocol messages, as the typed structures of
//!   `agent-client-protocol-schema`.

pub mod acp;
pub mod framing;
pub mod jsonrpc;
pub mod rest;
