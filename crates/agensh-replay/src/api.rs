//! The four APIs: what a request offers (its tools, whether it streams), and an answer in
//! each API's own shape — a JSON body, or the server-sent events its clients read.

use serde_json::{json, Value};

use crate::scenario::{ErrorSpec, OfferedTool, UsageSpec};

/// The APIs the server speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Api {
    /// Anthropic Messages (`/v1/messages`).
    Anthropic,
    /// OpenAI Chat Completions (`/v1/chat/completions`).
    Chat,
    /// OpenAI Responses (`/v1/responses`).
    Responses,
    /// Gemini (`/v1beta/models/{model}:generateContent` and `:streamGenerateContent`).
    Gemini,
}

impl Api {
    pub fn name(self) -> &'static str {
        match self {
            Api::Anthropic => "anthropic",
            Api::Chat => "chat",
            Api::Responses => "responses",
            Api::Gemini => "gemini",
        }
    }
}

/// One tool call of an answer, resolved against the request's tools.
#[derive(Debug, Clone)]
pub struct Call {
    /// The call's id (`call_3`; Anthropic's `toolu_3`).
    pub id: String,
    pub name: String,
    pub namespace: Option<String>,
    pub args: Value,
}

/// An answer, whatever the API.
#[derive(Debug, Clone)]
pub struct Answer {
    /// The response's id.
    pub id: String,
    pub model: String,
    pub text: Option<String>,
    pub calls: Vec<Call>,
    pub usage: UsageSpec,
}

/// The tools a request offers, in the API's shape.
pub fn offered_tools(api: Api, body: &Value) -> Vec<OfferedTool> {
    let tools = body.get("tools").and_then(Value::as_array);
    let names = |v: &Value, key: &str| v.get(key).and_then(Value::as_str).map(OfferedTool::plain);
    let Some(tools) = tools else {
        return Vec::new();
    };
    match api {
        Api::Anthropic => tools.iter().filter_map(|t| names(t, "name")).collect(),
        Api::Chat => tools
            .iter()
            .filter_map(|t| t.get("function").and_then(|f| names(f, "name")))
            .collect(),
        Api::Responses => tools
            .iter()
            .flat_map(|t| match t.get("type").and_then(Value::as_str) {
                Some("namespace") => {
                    let ns = t.get("name").and_then(Value::as_str).map(str::to_string);
                    t.get("tools")
                        .and_then(Value::as_array)
                        .map(|inner| {
                            inner
                                .iter()
                                .filter_map(|i| i.get("name").and_then(Value::as_str))
                                .map(|n| OfferedTool {
                                    name: n.to_string(),
                                    namespace: ns.clone(),
                                })
                                .collect::<Vec<_>>()
                        })
                        .unwrap_or_default()
                }
                _ => names(t, "name").into_iter().collect(),
            })
            .collect(),
        Api::Gemini => tools
            .iter()
            .filter_map(|t| t.get("functionDeclarations").and_then(Value::as_array))
            .flatten()
            .filter_map(|f| names(f, "name"))
            .collect(),
    }
}

/// Whether a Chat Completions request asks for the usage chunk of a stream.
pub fn chat_wants_usage(body: &Value) -> bool {
    body.pointer("/stream_options/include_usage")
        .and_then(Value::as_bool)
        .unwrap_or(false)
}

/// The answer as a JSON body.
pub fn body(api: Api, a: &Answer) -> Value {
    match api {
        Api::Anthropic => anthropic_message(a),
        Api::Chat => chat_completion(a),
        Api::Responses => response(a, "completed"),
        Api::Gemini => gemini(a),
    }
}

/// The answer as server-sent events. `chat_usage`: a Chat Completions stream ends with a
/// usage chunk (the client asked with `stream_options.include_usage`).
pub fn events(api: Api, a: &Answer, chat_usage: bool) -> String {
    match api {
        Api::Anthropic => anthropic_events(a),
        Api::Chat => chat_events(a, chat_usage),
        Api::Responses => responses_events(a),
        Api::Gemini => sse(None, &gemini(a)),
    }
}

/// An error in the API's shape.
pub fn error(api: Api, e: &ErrorSpec) -> Value {
    match api {
        Api::Anthropic => json!({
            "type": "error",
            "error": { "type": anthropic_error_type(e.status), "message": e.message },
        }),
        Api::Chat | Api::Responses => json!({
            "error": {
                "message": e.message,
                "type": if e.status >= 500 { "server_error" } else { "invalid_request_error" },
                "param": null,
                "code": if e.status == 401 { json!("invalid_api_key") } else { Value::Null },
            }
        }),
        Api::Gemini => json!({
            "error": { "code": e.status, "message": e.message, "status": gemini_status(e.status) }
        }),
    }
}

fn anthropic_error_type(status: u16) -> &'static str {
    match status {
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        529 => "overloaded_error",
        s if s >= 500 => "api_error",
        _ => "invalid_request_error",
    }
}

fn gemini_status(status: u16) -> &'static str {
    match status {
        401 => "UNAUTHENTICATED",
        403 => "PERMISSION_DENIED",
        404 => "NOT_FOUND",
        429 => "RESOURCE_EXHAUSTED",
        503 => "UNAVAILABLE",
        s if s >= 500 => "INTERNAL",
        _ => "INVALID_ARGUMENT",
    }
}

/// One server-sent event.
fn sse(event: Option<&str>, data: &Value) -> String {
    match event {
        Some(e) => format!("event: {e}\ndata: {data}\n\n"),
        None => format!("data: {data}\n\n"),
    }
}

fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

// --- Anthropic Messages ---

fn anthropic_usage(u: &UsageSpec) -> Value {
    // Anthropic's input_tokens leaves out the tokens read from the cache.
    json!({
        "input_tokens": u.input - u.cached,
        "output_tokens": u.output,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": u.cached,
    })
}

fn anthropic_stop(a: &Answer) -> &'static str {
    if a.calls.is_empty() {
        "end_turn"
    } else {
        "tool_use"
    }
}

fn anthropic_blocks(a: &Answer) -> Vec<Value> {
    let mut blocks = Vec::new();
    if let Some(t) = &a.text {
        blocks.push(json!({ "type": "text", "text": t }));
    }
    for c in &a.calls {
        blocks.push(json!({ "type": "tool_use", "id": c.id, "name": c.name, "input": c.args }));
    }
    blocks
}

fn anthropic_message(a: &Answer) -> Value {
    json!({
        "id": a.id,
        "type": "message",
        "role": "assistant",
        "model": a.model,
        "content": anthropic_blocks(a),
        "stop_reason": anthropic_stop(a),
        "stop_sequence": null,
        "usage": anthropic_usage(&a.usage),
    })
}

fn anthropic_events(a: &Answer) -> String {
    let mut start_usage = anthropic_usage(&a.usage);
    start_usage["output_tokens"] = json!(0);
    let mut out = sse(
        Some("message_start"),
        &json!({
            "type": "message_start",
            "message": {
                "id": a.id, "type": "message", "role": "assistant", "model": a.model,
                "content": [], "stop_reason": null, "stop_sequence": null, "usage": start_usage,
            },
        }),
    );
    for (index, block) in anthropic_blocks(a).into_iter().enumerate() {
        let (opening, delta) = match block["type"].as_str() {
            Some("text") => (
                json!({ "type": "text", "text": "" }),
                json!({ "type": "text_delta", "text": block["text"] }),
            ),
            _ => (
                json!({ "type": "tool_use", "id": block["id"], "name": block["name"], "input": {} }),
                json!({ "type": "input_json_delta", "partial_json": block["input"].to_string() }),
            ),
        };
        out.push_str(&sse(
            Some("content_block_start"),
            &json!({ "type": "content_block_start", "index": index, "content_block": opening }),
        ));
        out.push_str(&sse(
            Some("content_block_delta"),
            &json!({ "type": "content_block_delta", "index": index, "delta": delta }),
        ));
        out.push_str(&sse(
            Some("content_block_stop"),
            &json!({ "type": "content_block_stop", "index": index }),
        ));
    }
    out.push_str(&sse(
        Some("message_delta"),
        &json!({
            "type": "message_delta",
            "delta": { "stop_reason": anthropic_stop(a), "stop_sequence": null },
            "usage": { "output_tokens": a.usage.output },
        }),
    ));
    out.push_str(&sse(
        Some("message_stop"),
        &json!({ "type": "message_stop" }),
    ));
    out
}

// --- OpenAI Chat Completions ---

fn chat_usage(u: &UsageSpec) -> Value {
    json!({
        "prompt_tokens": u.input,
        "completion_tokens": u.output,
        "total_tokens": u.input + u.output,
        "prompt_tokens_details": { "cached_tokens": u.cached },
    })
}

fn chat_finish(a: &Answer) -> &'static str {
    if a.calls.is_empty() {
        "stop"
    } else {
        "tool_calls"
    }
}

fn chat_tool_calls(a: &Answer, with_index: bool) -> Vec<Value> {
    a.calls
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let mut v = json!({
                "id": c.id,
                "type": "function",
                "function": { "name": c.name, "arguments": c.args.to_string() },
            });
            if with_index {
                v["index"] = json!(i);
            }
            v
        })
        .collect()
}

fn chat_completion(a: &Answer) -> Value {
    let mut message = json!({ "role": "assistant", "content": a.text });
    if !a.calls.is_empty() {
        message["tool_calls"] = json!(chat_tool_calls(a, false));
    }
    json!({
        "id": a.id,
        "object": "chat.completion",
        "created": now_secs(),
        "model": a.model,
        "choices": [{ "index": 0, "message": message, "finish_reason": chat_finish(a) }],
        "usage": chat_usage(&a.usage),
    })
}

fn chat_events(a: &Answer, with_usage: bool) -> String {
    let created = now_secs();
    let chunk = |choices: Value| {
        json!({
            "id": a.id, "object": "chat.completion.chunk", "created": created,
            "model": a.model, "choices": choices,
        })
    };
    let mut out = sse(
        None,
        &chunk(
            json!([{ "index": 0, "delta": { "role": "assistant", "content": "" }, "finish_reason": null }]),
        ),
    );
    if let Some(t) = &a.text {
        out.push_str(&sse(
            None,
            &chunk(json!([{ "index": 0, "delta": { "content": t }, "finish_reason": null }])),
        ));
    }
    if !a.calls.is_empty() {
        out.push_str(&sse(
            None,
            &chunk(json!([{ "index": 0, "delta": { "tool_calls": chat_tool_calls(a, true) }, "finish_reason": null }])),
        ));
    }
    out.push_str(&sse(
        None,
        &chunk(json!([{ "index": 0, "delta": {}, "finish_reason": chat_finish(a) }])),
    ));
    if with_usage {
        let mut last = chunk(json!([]));
        last["usage"] = chat_usage(&a.usage);
        out.push_str(&sse(None, &last));
    }
    out.push_str("data: [DONE]\n\n");
    out
}

// --- OpenAI Responses ---

fn responses_usage(u: &UsageSpec) -> Value {
    json!({
        "input_tokens": u.input,
        "input_tokens_details": { "cached_tokens": u.cached },
        "output_tokens": u.output,
        "output_tokens_details": { "reasoning_tokens": 0 },
        "total_tokens": u.input + u.output,
    })
}

/// The output items: the message (when there is text), then one function call each.
fn responses_items(a: &Answer) -> Vec<Value> {
    let mut items = Vec::new();
    if let Some(t) = &a.text {
        items.push(json!({
            "type": "message", "id": format!("msg_{}", a.id), "status": "completed",
            "role": "assistant",
            "content": [{ "type": "output_text", "text": t, "annotations": [] }],
        }));
    }
    for c in &a.calls {
        let mut item = json!({
            "type": "function_call", "id": format!("fc_{}", c.id), "call_id": c.id,
            "name": c.name, "arguments": c.args.to_string(), "status": "completed",
        });
        if let Some(ns) = &c.namespace {
            item["namespace"] = json!(ns);
        }
        items.push(item);
    }
    items
}

fn response(a: &Answer, status: &str) -> Value {
    let done = status == "completed";
    json!({
        "id": a.id,
        "object": "response",
        "created_at": now_secs(),
        "status": status,
        "model": a.model,
        "output": if done { json!(responses_items(a)) } else { json!([]) },
        "usage": if done { responses_usage(&a.usage) } else { Value::Null },
    })
}

fn responses_events(a: &Answer) -> String {
    let mut seq = 0u64;
    let mut out = String::new();
    let mut emit = |kind: &str, mut data: Value| {
        data["type"] = json!(kind);
        data["sequence_number"] = json!(seq);
        seq += 1;
        out.push_str(&sse(Some(kind), &data));
    };
    emit(
        "response.created",
        json!({ "response": response(a, "in_progress") }),
    );
    emit(
        "response.in_progress",
        json!({ "response": response(a, "in_progress") }),
    );
    for (i, item) in responses_items(a).into_iter().enumerate() {
        let id = item["id"].clone();
        let mut opening = item.clone();
        opening["status"] = json!("in_progress");
        match item["type"].as_str() {
            Some("message") => {
                opening["content"] = json!([]);
                emit(
                    "response.output_item.added",
                    json!({ "output_index": i, "item": opening }),
                );
                let text = item["content"][0]["text"].clone();
                let part =
                    |t: Value| json!({ "type": "output_text", "text": t, "annotations": [] });
                emit(
                    "response.content_part.added",
                    json!({ "item_id": id, "output_index": i, "content_index": 0, "part": part(json!("")) }),
                );
                emit(
                    "response.output_text.delta",
                    json!({ "item_id": id, "output_index": i, "content_index": 0, "delta": text }),
                );
                emit(
                    "response.output_text.done",
                    json!({ "item_id": id, "output_index": i, "content_index": 0, "text": text }),
                );
                emit(
                    "response.content_part.done",
                    json!({ "item_id": id, "output_index": i, "content_index": 0, "part": part(text) }),
                );
            }
            _ => {
                opening["arguments"] = json!("");
                emit(
                    "response.output_item.added",
                    json!({ "output_index": i, "item": opening }),
                );
                let args = item["arguments"].clone();
                emit(
                    "response.function_call_arguments.delta",
                    json!({ "item_id": id, "output_index": i, "delta": args }),
                );
                emit(
                    "response.function_call_arguments.done",
                    json!({ "item_id": id, "output_index": i, "arguments": args }),
                );
            }
        }
        emit(
            "response.output_item.done",
            json!({ "output_index": i, "item": item }),
        );
    }
    emit(
        "response.completed",
        json!({ "response": response(a, "completed") }),
    );
    out
}

// --- Gemini ---

fn gemini(a: &Answer) -> Value {
    let mut parts = Vec::new();
    if let Some(t) = &a.text {
        parts.push(json!({ "text": t }));
    }
    for c in &a.calls {
        parts.push(json!({ "functionCall": { "name": c.name, "args": c.args } }));
    }
    let mut usage = json!({
        "promptTokenCount": a.usage.input,
        "candidatesTokenCount": a.usage.output,
        "totalTokenCount": a.usage.input + a.usage.output,
    });
    if a.usage.cached > 0 {
        usage["cachedContentTokenCount"] = json!(a.usage.cached);
    }
    json!({
        "candidates": [{
            "content": { "role": "model", "parts": parts },
            "finishReason": "STOP",
            "index": 0,
        }],
        "usageMetadata": usage,
        "modelVersion": a.model,
        "responseId": a.id,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(text: Option<&str>, calls: &[(&str, Value)]) -> Answer {
        Answer {
            id: "r1".into(),
            model: "m".into(),
            text: text.map(str::to_string),
            calls: calls
                .iter()
                .enumerate()
                .map(|(i, (n, a))| Call {
                    id: format!("call_{i}"),
                    name: n.to_string(),
                    namespace: None,
                    args: a.clone(),
                })
                .collect(),
            usage: UsageSpec {
                input: 100,
                output: 7,
                cached: 60,
            },
        }
    }

    /// The `data:` payloads of an event stream, as JSON.
    fn data(events: &str) -> Vec<Value> {
        events
            .lines()
            .filter_map(|l| l.strip_prefix("data: "))
            .filter(|d| *d != "[DONE]")
            .map(|d| serde_json::from_str(d).unwrap())
            .collect()
    }

    #[test]
    fn anthropic_counts_cached_tokens_apart_from_input() {
        let a = answer(Some("hi"), &[("Bash", json!({ "command": "ls" }))]);
        let b = body(Api::Anthropic, &a);
        assert_eq!(b["usage"]["input_tokens"], 40);
        assert_eq!(b["usage"]["cache_read_input_tokens"], 60);
        assert_eq!(b["stop_reason"], "tool_use");
        assert_eq!(b["content"][1]["input"]["command"], "ls");
        let ev = data(&events(Api::Anthropic, &a, false));
        let delta = ev.iter().find(|e| e["type"] == "message_delta").unwrap();
        assert_eq!(delta["usage"]["output_tokens"], 7);
        let json_delta = ev
            .iter()
            .find(|e| e["delta"]["type"] == "input_json_delta")
            .unwrap();
        let args: Value =
            serde_json::from_str(json_delta["delta"]["partial_json"].as_str().unwrap()).unwrap();
        assert_eq!(args, json!({ "command": "ls" }));
    }

    #[test]
    fn a_chat_stream_ends_with_usage_only_when_asked() {
        let a = answer(None, &[("shell", json!({ "command": ["ls"] }))]);
        let with = data(&events(Api::Chat, &a, true));
        assert_eq!(with.last().unwrap()["usage"]["prompt_tokens"], 100);
        assert_eq!(
            with.iter()
                .filter_map(|c| c["choices"][0]["finish_reason"].as_str())
                .collect::<Vec<_>>(),
            ["tool_calls"]
        );
        let without = data(&events(Api::Chat, &a, false));
        assert!(without.iter().all(|c| c.get("usage").is_none()));
        assert!(events(Api::Chat, &a, false).ends_with("data: [DONE]\n\n"));
    }

    #[test]
    fn a_responses_stream_completes_with_the_whole_response() {
        let mut a = answer(Some("ok"), &[("board_write", json!({ "kind": "FACT" }))]);
        a.calls[0].namespace = Some("mcp__agensh".into());
        let ev = data(&events(Api::Responses, &a, false));
        let seqs: Vec<u64> = ev
            .iter()
            .map(|e| e["sequence_number"].as_u64().unwrap())
            .collect();
        assert_eq!(seqs, (0..ev.len() as u64).collect::<Vec<_>>());
        let done = ev.last().unwrap();
        assert_eq!(done["type"], "response.completed");
        assert_eq!(
            done["response"]["usage"]["input_tokens_details"]["cached_tokens"],
            60
        );
        let call = &done["response"]["output"][1];
        assert_eq!(
            (call["name"].as_str(), call["namespace"].as_str()),
            (Some("board_write"), Some("mcp__agensh"))
        );
        assert_eq!(call["arguments"], json!({ "kind": "FACT" }).to_string());
    }

    #[test]
    fn tools_are_read_in_each_apis_shape() {
        let names = |api, body: Value| {
            offered_tools(api, &body)
                .into_iter()
                .map(|t| (t.name, t.namespace))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            names(Api::Anthropic, json!({ "tools": [{ "name": "Bash" }] })),
            [("Bash".to_string(), None)]
        );
        assert_eq!(
            names(
                Api::Chat,
                json!({ "tools": [{ "type": "function", "function": { "name": "bash" } }] })
            ),
            [("bash".to_string(), None)]
        );
        assert_eq!(
            names(
                Api::Responses,
                json!({ "tools": [{ "type": "function", "name": "shell" },
                                  { "type": "namespace", "name": "mcp__agensh", "tools": [{ "name": "claim" }] }] })
            ),
            [
                ("shell".to_string(), None),
                ("claim".to_string(), Some("mcp__agensh".to_string()))
            ]
        );
        assert_eq!(
            names(
                Api::Gemini,
                json!({ "tools": [{ "functionDeclarations": [{ "name": "run_shell_command" }] }] })
            ),
            [("run_shell_command".to_string(), None)]
        );
        assert!(names(Api::Chat, json!({})).is_empty());
    }

    #[test]
    fn errors_take_each_apis_shape() {
        let e = ErrorSpec {
            status: 401,
            message: "no".into(),
        };
        assert_eq!(
            error(Api::Anthropic, &e)["error"]["type"],
            "authentication_error"
        );
        assert_eq!(error(Api::Chat, &e)["error"]["code"], "invalid_api_key");
        assert_eq!(error(Api::Gemini, &e)["error"]["status"], "UNAUTHENTICATED");
    }
}
