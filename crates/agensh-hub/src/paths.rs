//! Where the hub serves what, for the code below the router that tells requests apart
//! (the rate limiter, the server loop's timeouts) without reaching up into the handlers.

/// Where the hub serves MCP.
pub const MCP: &str = "/mcp";
