//! The Agent Client Protocol (ACP) messages agensh sends and reads, as the typed
//! structures of `agent-client-protocol-schema` (version 1 of the protocol), re-exported so
//! the node's adapter and the scripted agent name them from one place.
//!
//! The schema's structs are `#[non_exhaustive]`: build them with `new` and their builder
//! methods. Real agents send fields and updates the schema may not know yet: unknown
//! fields are ignored when reading, and a `session/update` the schema cannot read is for
//! the caller to skip ([`read_update`]), never a reason to fail a turn.

use serde_json::Value;

pub use agent_client_protocol_schema::v1::{
    AgentCapabilities, AuthMethod, CancelNotification, ClientCapabilities, ContentBlock,
    ContentChunk, Cost, EnvVariable, FileSystemCapabilities, HttpHeader, Implementation,
    InitializeRequest, InitializeResponse, LoadSessionRequest, LoadSessionResponse,
    McpCapabilities, McpServer, McpServerHttp, McpServerStdio, NewSessionRequest,
    NewSessionResponse, PermissionOption, PermissionOptionId, PermissionOptionKind,
    PromptCapabilities, PromptRequest, PromptResponse, RequestPermissionOutcome,
    RequestPermissionRequest, RequestPermissionResponse, SelectedPermissionOutcome, SessionId,
    SessionNotification, SessionUpdate, StopReason, TextContent, ToolCall, ToolCallContent,
    ToolCallId, ToolCallLocation, ToolCallStatus, ToolCallUpdate, ToolCallUpdateFields, ToolKind,
    Usage, UsageUpdate,
};
pub use agent_client_protocol_schema::ProtocolVersion;

/// The method names, from the schema's own tables.
pub mod method {
    use agent_client_protocol_schema::v1::{AGENT_METHOD_NAMES, CLIENT_METHOD_NAMES};

    /// Client → agent: the handshake.
    pub const INITIALIZE: &str = AGENT_METHOD_NAMES.initialize;
    /// Client → agent: a new session in a working directory, with MCP servers.
    pub const SESSION_NEW: &str = AGENT_METHOD_NAMES.session_new;
    /// Client → agent: a stored session resumed (the agent replays it as updates).
    pub const SESSION_LOAD: &str = AGENT_METHOD_NAMES.session_load;
    /// Client → agent: one turn.
    pub const SESSION_PROMPT: &str = AGENT_METHOD_NAMES.session_prompt;
    /// Client → agent (notification): stop the running turn.
    pub const SESSION_CANCEL: &str = AGENT_METHOD_NAMES.session_cancel;
    /// Agent → client (notification): progress of a turn.
    pub const SESSION_UPDATE: &str = CLIENT_METHOD_NAMES.session_update;
    /// Agent → client: may this tool call run?
    pub const SESSION_REQUEST_PERMISSION: &str = CLIENT_METHOD_NAMES.session_request_permission;
    /// Agent → client: read a file through the client (agensh offers no file system).
    pub const FS_READ_TEXT_FILE: &str = CLIENT_METHOD_NAMES.fs_read_text_file;
    /// Agent → client: write a file through the client (agensh offers no file system).
    pub const FS_WRITE_TEXT_FILE: &str = CLIENT_METHOD_NAMES.fs_write_text_file;
}

/// A `session/update`'s params read as a [`SessionNotification`], or why not (an update
/// kind the schema does not know, or a field of the wrong type).
pub fn read_update(params: Option<&Value>) -> Result<SessionNotification, serde_json::Error> {
    serde_json::from_value(params.cloned().unwrap_or(Value::Null))
}

/// A `session/prompt` answer as the adapter reads it: the typed response, and its stop
/// reason by wire name.
#[derive(Debug, Clone)]
pub struct PromptAnswer {
    /// The answer in the schema's structure (its `stopReason` is `end_turn` when the agent
    /// wrote one the schema does not know, or none).
    pub response: PromptResponse,
    /// The stop reason exactly as the agent wrote it (`end_turn`, `max_tokens`, or a newer
    /// one such as `paused`); `end_turn` when it wrote none.
    pub stop_reason: String,
}

/// Reads a `session/prompt` result. A stop reason the schema does not know is kept as
/// written and the rest of the answer is still read through the schema, so an agent ahead
/// of the schema loses neither its stop reason nor its usage.
pub fn read_prompt_answer(result: Value) -> PromptAnswer {
    if let Ok(response) = serde_json::from_value::<PromptResponse>(result.clone()) {
        let stop_reason = wire_name(&response.stop_reason);
        return PromptAnswer {
            response,
            stop_reason,
        };
    }
    let stop_reason = result
        .get("stopReason")
        .and_then(Value::as_str)
        .unwrap_or("end_turn")
        .to_string();
    let mut known = match result {
        Value::Object(o) => o,
        _ => serde_json::Map::new(),
    };
    known.insert("stopReason".into(), Value::from("end_turn"));
    let response = serde_json::from_value(Value::Object(known))
        .unwrap_or_else(|_| PromptResponse::new(StopReason::EndTurn));
    PromptAnswer {
        response,
        stop_reason,
    }
}

/// The text blocks of a prompt or message, joined by newlines.
pub fn text_of(blocks: &[ContentBlock]) -> String {
    blocks
        .iter()
        .filter_map(|b| match b {
            ContentBlock::Text(t) => Some(t.text.as_str()),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// A text content block.
pub fn text(text: impl Into<String>) -> ContentBlock {
    ContentBlock::Text(TextContent::new(text))
}

/// The wire name of a value of one of the schema's string enums (`in_progress`,
/// `end_turn`, `allow_always`, …).
pub fn wire_name(v: &impl serde::Serialize) -> String {
    match serde_json::to_value(v) {
        Ok(Value::String(s)) => s,
        _ => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn method_names_are_the_protocol_s() {
        assert_eq!(method::INITIALIZE, "initialize");
        assert_eq!(method::SESSION_PROMPT, "session/prompt");
        assert_eq!(method::SESSION_UPDATE, "session/update");
        assert_eq!(
            method::SESSION_REQUEST_PERMISSION,
            "session/request_permission"
        );
        assert_eq!(method::FS_READ_TEXT_FILE, "fs/read_text_file");
    }

    #[test]
    fn updates_are_read_and_unknown_kinds_are_errors_to_skip() {
        let n = read_update(Some(&json!({
            "sessionId": "s",
            "update": { "sessionUpdate": "tool_call", "toolCallId": "c1", "title": "claim", "status": "in_progress", "extra": 1 },
        })))
        .unwrap();
        let SessionUpdate::ToolCall(c) = n.update else {
            panic!("a tool call")
        };
        assert_eq!(
            (c.title.as_str(), wire_name(&c.status)),
            ("claim", "in_progress".into())
        );
        assert!(read_update(Some(&json!({
            "sessionId": "s",
            "update": { "sessionUpdate": "a_future_kind" },
        })))
        .is_err());
    }

    #[test]
    fn prompt_answers_keep_a_stop_reason_the_schema_does_not_know() {
        let a = read_prompt_answer(json!({ "stopReason": "max_tokens" }));
        assert_eq!(a.stop_reason, "max_tokens");
        let a = read_prompt_answer(json!({
            "stopReason": "paused",
            "usage": { "inputTokens": 7, "outputTokens": 2, "totalTokens": 9 },
        }));
        assert_eq!(a.stop_reason, "paused");
        let usage = a.response.usage.expect("the usage is still read");
        assert_eq!((usage.input_tokens, usage.output_tokens), (7, 2));
        assert_eq!(read_prompt_answer(json!({})).stop_reason, "end_turn");
        assert_eq!(read_prompt_answer(json!(null)).stop_reason, "end_turn");
    }

    #[test]
    fn prompts_are_read_as_their_text() {
        let p: PromptRequest = serde_json::from_value(json!({
            "sessionId": "s",
            "prompt": [{ "type": "text", "text": "a" }, { "type": "text", "text": "b" }],
        }))
        .unwrap();
        assert_eq!(text_of(&p.prompt), "a\nb");
        assert_eq!(wire_name(&StopReason::EndTurn), "end_turn");
    }
}
