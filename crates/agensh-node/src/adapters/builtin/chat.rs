//! One OpenAI-compatible chat endpoint: `POST {base}/chat/completions`, not streamed, with
//! retries for what passes (429, 5xx, refused connections). The API key goes only into the
//! `Authorization` header; no message or log carries it.

use std::time::Duration;

use agensh_domain::{Error, ErrorKind};
use serde_json::Value;

use super::actions::ordered_json;

/// Tries of one request (the first and three retries).
const TRIES: u32 = 4;
/// Tries of a request that timed out (a second try finds the prompt cached).
const TIMEOUT_TRIES: u32 = 2;
/// The first wait before a retry; doubled each time.
const BACKOFF: Duration = Duration::from_secs(1);
/// The longest `Retry-After` honoured.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(30);
/// Characters of an error body quoted in an error.
const BODY_SNIPPET: usize = 300;

/// A tool call in a reply (tools style).
#[derive(Debug, Clone, PartialEq)]
pub struct Call {
    pub id: String,
    pub name: String,
    /// The arguments as the model wrote them (JSON text, possibly broken).
    pub arguments: String,
}

/// What the model answered.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Reply {
    pub content: String,
    pub tool_calls: Vec<Call>,
    pub finish_reason: String,
    pub prompt_tokens: Option<u64>,
    pub completion_tokens: u64,
}

/// Why a request failed.
#[derive(Debug)]
pub enum ChatError {
    /// The endpoint says the prompt does not fit its context window.
    ContextFull(String),
    /// Anything else, after retries: the turn fails with this.
    Failed(Error),
}

pub struct Endpoint {
    http: reqwest::Client,
    url: String,
    key: Option<String>,
    timeout: Duration,
}

impl Endpoint {
    /// The endpoint under `base_url` (e.g. `http://127.0.0.1:8080/v1`).
    pub fn new(base_url: &str, key: Option<String>, request_timeout: Duration) -> Endpoint {
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .timeout(request_timeout)
            .pool_idle_timeout(Duration::from_secs(60))
            .build()
            .expect("HTTP client builds");
        Endpoint {
            http,
            url: format!("{}/chat/completions", base_url.trim_end_matches('/')),
            key: key.filter(|k| !k.is_empty()),
            timeout: request_timeout,
        }
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    /// Sends one chat request; retries what may pass on a second try.
    pub async fn complete(&self, body: &Value) -> Result<Reply, ChatError> {
        let text = ordered_json(body);
        let mut wait = BACKOFF;
        let mut tries = 0;
        loop {
            tries += 1;
            let mut req = self
                .http
                .post(&self.url)
                .header("content-type", "application/json")
                .body(text.clone());
            if let Some(k) = &self.key {
                req = req.bearer_auth(k);
            }
            let retry = match req.send().await {
                // A busy local server (every slot taken, a long prompt to read) can miss the
                // timeout once; the retry finds the prompt's prefix cached.
                Err(e) if e.is_timeout() && tries < TIMEOUT_TRIES => {
                    tracing::warn!(
                        "model endpoint {}: no answer within {} s; asking once more",
                        self.url,
                        self.timeout.as_secs()
                    );
                    None
                }
                Err(e) if e.is_timeout() => {
                    return Err(ChatError::Failed(self.error(
                        "model_timeout",
                        format!(
                            "no answer within {} s (request_timeout), twice — is the model too slow for this prompt size, or the machine too busy?",
                            self.timeout.as_secs()
                        ),
                    )))
                }
                Err(e) if tries < TRIES && (e.is_connect() || e.is_request()) => {
                    tracing::info!("model endpoint {}: {e}; retrying", self.url);
                    None
                }
                Err(e) => {
                    return Err(ChatError::Failed(self.error(
                        "model_unreachable",
                        format!(
                            "cannot reach it: {} — is the model server running, and is the URL right?",
                            error_chain(&e)
                        ),
                    )))
                }
                Ok(resp) => {
                    let status = resp.status();
                    let after = resp
                        .headers()
                        .get("retry-after")
                        .and_then(|v| v.to_str().ok())
                        .and_then(|v| v.trim().parse::<u64>().ok())
                        .map(|s| Duration::from_secs(s).min(MAX_RETRY_AFTER));
                    let bytes = match resp.bytes().await {
                        Ok(b) => b,
                        Err(e) if e.is_timeout() => {
                            return Err(ChatError::Failed(self.error(
                                "model_timeout",
                                format!("no complete answer within {} s", self.timeout.as_secs()),
                            )))
                        }
                        Err(e) => {
                            return Err(ChatError::Failed(
                                self.error("model_error", format!("answer cut off: {e}")),
                            ))
                        }
                    };
                    let body = String::from_utf8_lossy(&bytes);
                    if status.is_success() {
                        return parse_reply(&body).map_err(|e| {
                            ChatError::Failed(self.error(
                                "model_error",
                                format!("answered something that is not a chat completion ({e}): {}", snippet(&body)),
                            ))
                        });
                    }
                    let passing = status.as_u16() == 429 || status.is_server_error();
                    if is_context_error(status.as_u16(), &body) {
                        return Err(ChatError::ContextFull(snippet(&body)));
                    }
                    if !passing || tries >= TRIES {
                        return Err(ChatError::Failed(self.error(
                            "model_error",
                            format!(
                                "answered {status}{}: {}",
                                if tries > 1 { format!(" after {tries} tries") } else { String::new() },
                                snippet(&body)
                            ),
                        )));
                    }
                    tracing::info!("model endpoint {} answered {status}; retrying", self.url);
                    after
                }
            };
            tokio::time::sleep(retry.unwrap_or(wait)).await;
            wait *= 2;
        }
    }

    fn error(&self, code: &str, what: String) -> Error {
        Error::new(
            ErrorKind::Internal,
            code,
            format!("the model endpoint {} {what}", self.url),
        )
    }
}

/// The first characters of an error body, on one line.
fn snippet(body: &str) -> String {
    super::history::one_line(body, BODY_SNIPPET)
}

/// A 400 (or 413) saying the prompt is longer than the context window.
fn is_context_error(status: u16, body: &str) -> bool {
    let b = body.to_lowercase();
    (status == 400 || status == 413)
        && (b.contains("context") || b.contains("too many tokens") || b.contains("too long"))
}

/// Reads a chat completion.
pub fn parse_reply(body: &str) -> Result<Reply, String> {
    let v: Value = serde_json::from_str(body).map_err(|e| e.to_string())?;
    let choice = v
        .pointer("/choices/0")
        .ok_or_else(|| "no choices".to_string())?;
    let msg = choice.get("message").cloned().unwrap_or(Value::Null);
    let content = match msg.get("content") {
        Some(Value::String(s)) => s.clone(),
        // Some servers answer with content parts.
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join(""),
        _ => String::new(),
    };
    let tool_calls = msg
        .get("tool_calls")
        .and_then(Value::as_array)
        .map(|calls| {
            calls
                .iter()
                .enumerate()
                .map(|(i, c)| Call {
                    id: c
                        .get("id")
                        .and_then(Value::as_str)
                        .filter(|s| !s.is_empty())
                        .map(str::to_string)
                        .unwrap_or_else(|| format!("call_{i}")),
                    name: c
                        .pointer("/function/name")
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_string(),
                    arguments: match c.pointer("/function/arguments") {
                        Some(Value::String(s)) => s.clone(),
                        Some(Value::Null) | None => "{}".to_string(),
                        Some(other) => other.to_string(),
                    },
                })
                .collect()
        })
        .unwrap_or_default();
    Ok(Reply {
        content,
        tool_calls,
        finish_reason: choice
            .get("finish_reason")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string(),
        prompt_tokens: v.pointer("/usage/prompt_tokens").and_then(Value::as_u64),
        completion_tokens: v
            .pointer("/usage/completion_tokens")
            .and_then(Value::as_u64)
            .unwrap_or(0),
    })
}

/// An error and its causes, one after the other (reqwest's own message hides the cause:
/// a refused connection, a TLS failure, a bad URL).
fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let more = s.to_string();
        if !text.contains(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        source = s.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_parse_with_and_without_tool_calls() {
        let r = parse_reply(
            r#"{"choices":[{"finish_reason":"tool_calls","message":{"role":"assistant","content":null,
              "tool_calls":[{"id":"c1","type":"function","function":{"name":"run","arguments":"{\"command\":\"ls\"}"}}]}}],
              "usage":{"prompt_tokens":100,"completion_tokens":7}}"#,
        )
        .unwrap();
        assert_eq!(r.content, "");
        assert_eq!(
            r.tool_calls,
            vec![Call {
                id: "c1".into(),
                name: "run".into(),
                arguments: "{\"command\":\"ls\"}".into()
            }]
        );
        assert_eq!((r.prompt_tokens, r.completion_tokens), (Some(100), 7));
        let r = parse_reply(r#"{"choices":[{"finish_reason":"stop","message":{"content":"hi"}}]}"#)
            .unwrap();
        assert_eq!(r.content, "hi");
        assert!(r.tool_calls.is_empty());
        assert_eq!(r.prompt_tokens, None);
        assert!(parse_reply("{}").is_err());
    }

    #[test]
    fn context_errors_are_recognised() {
        assert!(is_context_error(
            400,
            r#"{"error":{"message":"the request exceeds the available context size, try increasing it"}}"#
        ));
        assert!(is_context_error(
            400,
            "This model's maximum context length is 8192 tokens"
        ));
        assert!(!is_context_error(400, "bad temperature"));
        assert!(!is_context_error(500, "context"));
    }
}
