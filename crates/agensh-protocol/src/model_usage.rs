//! Token usage in the answers of the model APIs the agents speak, read the way each API
//! writes it — for the model gateway, which counts every worker's usage at the hub instead
//! of trusting each agent's own report.
//!
//! One meaning for every API: `input` is the whole prompt (cached tokens included — the
//! Anthropic API counts cache reads and writes apart, and they are added), `cached_input`
//! the part read from a prompt cache, `output` every generated token (Gemini's thoughts
//! included). A streamed answer is read as its bytes pass ([`StreamUsage`]: nothing is
//! held back or buffered beyond the line being read); a whole body with [`usage_of_body`].
//! [`ask_for_stream_usage`] adds what an API needs to put usage in a stream at all.

use serde_json::Value;

/// The API a request speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flavour {
    /// OpenAI Chat Completions.
    OpenAiChat,
    /// OpenAI Responses.
    OpenAiResponses,
    /// Anthropic Messages.
    Anthropic,
    /// Gemini `generateContent` / `streamGenerateContent`.
    Gemini,
}

/// Tokens one model answer used.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TokenUsage {
    /// The whole prompt, cached tokens included.
    pub input: u64,
    /// The part of `input` read from a prompt cache.
    pub cached_input: u64,
    pub output: u64,
}

/// Prices per million tokens.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Prices {
    pub input: f64,
    pub cached_input: f64,
    pub output: f64,
}

impl Prices {
    /// What `u` costs: uncached input, cached input and output, each at its price.
    pub fn cost(&self, u: &TokenUsage) -> f64 {
        let uncached = u.input.saturating_sub(u.cached_input) as f64;
        (uncached * self.input
            + u.cached_input as f64 * self.cached_input
            + u.output as f64 * self.output)
            / 1_000_000.0
    }
}

fn n(v: &Value, path: &str) -> Option<u64> {
    v.pointer(path).and_then(Value::as_u64)
}

/// The usage in a whole (not streamed) answer body; `None` when it holds none.
pub fn usage_of_body(flavour: Flavour, body: &Value) -> Option<TokenUsage> {
    match flavour {
        Flavour::OpenAiChat => Some(TokenUsage {
            input: n(body, "/usage/prompt_tokens")?,
            cached_input: n(body, "/usage/prompt_tokens_details/cached_tokens").unwrap_or(0),
            output: n(body, "/usage/completion_tokens").unwrap_or(0),
        }),
        Flavour::OpenAiResponses => responses_usage(body.get("usage")?),
        Flavour::Anthropic => {
            let mut u = AnthropicUsage::default();
            u.note(body.get("usage")?);
            u.total()
        }
        Flavour::Gemini => gemini_usage(body.get("usageMetadata")?),
    }
}

fn responses_usage(u: &Value) -> Option<TokenUsage> {
    Some(TokenUsage {
        input: n(u, "/input_tokens")?,
        cached_input: n(u, "/input_tokens_details/cached_tokens").unwrap_or(0),
        output: n(u, "/output_tokens").unwrap_or(0),
    })
}

fn gemini_usage(u: &Value) -> Option<TokenUsage> {
    Some(TokenUsage {
        input: n(u, "/promptTokenCount")?,
        cached_input: n(u, "/cachedContentTokenCount").unwrap_or(0),
        output: n(u, "/candidatesTokenCount").unwrap_or(0)
            + n(u, "/thoughtsTokenCount").unwrap_or(0),
    })
}

/// Anthropic's counts, which a stream spreads over `message_start` (input, cache, first
/// output) and `message_delta` (output so far, sometimes input again): the latest of each.
#[derive(Debug, Default, Clone, Copy)]
struct AnthropicUsage {
    input: Option<u64>,
    cache_read: u64,
    cache_write: u64,
    output: u64,
}

impl AnthropicUsage {
    fn note(&mut self, u: &Value) {
        if let Some(i) = n(u, "/input_tokens") {
            self.input = Some(i);
        }
        if let Some(c) = n(u, "/cache_read_input_tokens") {
            self.cache_read = c;
        }
        if let Some(c) = n(u, "/cache_creation_input_tokens") {
            self.cache_write = c;
        }
        if let Some(o) = n(u, "/output_tokens") {
            self.output = o;
        }
    }

    fn total(&self) -> Option<TokenUsage> {
        Some(TokenUsage {
            input: self.input? + self.cache_read + self.cache_write,
            cached_input: self.cache_read,
            output: self.output,
        })
    }
}

/// Reads the usage out of a streamed (SSE) answer as its bytes pass.
///
/// Every one of the four APIs writes each event's JSON on one `data:` line, and only a
/// line that mentions `usage` (`usage`, `usageMetadata`) can carry it: every other line is
/// passed over where it lies, without a copy — a long answer is thousands of small deltas,
/// and reading each would cost the gateway more than passing it on. Only a line cut by the
/// end of a chunk is kept, until its end comes.
#[derive(Debug)]
pub struct StreamUsage {
    flavour: Flavour,
    /// The start of a line the last chunk cut.
    partial: Vec<u8>,
    found: Option<TokenUsage>,
    anthropic: AnthropicUsage,
}

/// The longest line kept across chunks (a Responses API `response.completed` event holds the
/// whole answer and its usage on one line).
const PARTIAL_LIMIT: usize = 8 << 20;

/// Where `needle` is in `hay`.
fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

impl StreamUsage {
    pub fn new(flavour: Flavour) -> Self {
        StreamUsage {
            flavour,
            partial: Vec::new(),
            found: None,
            anthropic: AnthropicUsage::default(),
        }
    }

    /// Takes the next chunk of the stream, cut anywhere.
    pub fn feed(&mut self, chunk: &[u8]) {
        let mut rest = chunk;
        while let Some(end) = rest.iter().position(|b| *b == b'\n') {
            let (line, after) = rest.split_at(end);
            rest = &after[1..];
            if self.partial.is_empty() {
                self.line(line);
            } else {
                let mut whole = std::mem::take(&mut self.partial);
                whole.extend_from_slice(line);
                self.line(&whole);
            }
        }
        // A line without its end yet: kept only while it may carry usage (a long line of
        // text is dropped once it is plainly a delta, so memory stays bounded).
        if !rest.is_empty() {
            self.partial.extend_from_slice(rest);
        }
        if self.partial.len() > PARTIAL_LIMIT {
            self.partial.clear();
        }
    }

    /// One whole line of the stream.
    fn line(&mut self, line: &[u8]) {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let Some(data) = line.strip_prefix(b"data:") else {
            return; // `event:`, `id:`, comments, blank lines
        };
        if find(data, b"usage").is_none() {
            return;
        }
        self.event(data.strip_prefix(b" ").unwrap_or(data));
    }

    /// One event's data that mentions usage.
    fn event(&mut self, data: &[u8]) {
        {
            let Ok(v) = serde_json::from_slice::<Value>(data) else {
                return; // not JSON after all
            };
            match self.flavour {
                // Usage comes in the last chunk (asked for with `include_usage`).
                Flavour::OpenAiChat => {
                    if v.get("usage").is_some_and(Value::is_object) {
                        if let Some(u) = usage_of_body(Flavour::OpenAiChat, &v) {
                            self.found = Some(u);
                        }
                    }
                }
                Flavour::OpenAiResponses => {
                    if let Some(u) = v.pointer("/response/usage").and_then(responses_usage) {
                        self.found = Some(u);
                    }
                }
                Flavour::Anthropic => {
                    if let Some(u) = v.pointer("/message/usage").or_else(|| v.get("usage")) {
                        self.anthropic.note(u);
                        self.found = self.anthropic.total();
                    }
                }
                // Each chunk may carry the counts so far: the last wins.
                Flavour::Gemini => {
                    if let Some(u) = v.get("usageMetadata").and_then(gemini_usage) {
                        self.found = Some(u);
                    }
                }
            }
        }
    }

    /// The usage the stream reported so far; `None` when it reported none.
    pub fn usage(&self) -> Option<TokenUsage> {
        self.found
    }
}

/// Makes a streamed request ask for its usage where the API needs asking (Chat Completions:
/// `stream_options.include_usage`); other APIs always report it. Whether it changed the
/// request.
pub fn ask_for_stream_usage(flavour: Flavour, request: &mut Value) -> bool {
    if flavour != Flavour::OpenAiChat || request.get("stream") != Some(&Value::Bool(true)) {
        return false;
    }
    let Some(obj) = request.as_object_mut() else {
        return false;
    };
    let options = obj
        .entry("stream_options")
        .or_insert_with(|| Value::Object(Default::default()));
    match options.as_object_mut() {
        Some(o) if o.get("include_usage") != Some(&Value::Bool(true)) => {
            o.insert("include_usage".into(), Value::Bool(true));
            true
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn streamed(flavour: Flavour, text: &str) -> Option<TokenUsage> {
        // Cut into 7-byte chunks: the reader must not depend on where chunks end.
        let mut s = StreamUsage::new(flavour);
        for c in text.as_bytes().chunks(7) {
            s.feed(c);
        }
        s.usage()
    }

    const U: TokenUsage = TokenUsage {
        input: 1000,
        cached_input: 400,
        output: 20,
    };

    #[test]
    fn whole_bodies_of_every_api() {
        let chat = json!({ "usage": { "prompt_tokens": 1000, "completion_tokens": 20, "prompt_tokens_details": { "cached_tokens": 400 } } });
        assert_eq!(usage_of_body(Flavour::OpenAiChat, &chat), Some(U));
        let resp = json!({ "usage": { "input_tokens": 1000, "output_tokens": 20, "input_tokens_details": { "cached_tokens": 400 } } });
        assert_eq!(usage_of_body(Flavour::OpenAiResponses, &resp), Some(U));
        // Anthropic counts the cache apart from the input.
        let anth = json!({ "usage": { "input_tokens": 500, "cache_read_input_tokens": 400, "cache_creation_input_tokens": 100, "output_tokens": 20 } });
        assert_eq!(usage_of_body(Flavour::Anthropic, &anth), Some(U));
        let gem = json!({ "usageMetadata": { "promptTokenCount": 1000, "cachedContentTokenCount": 400, "candidatesTokenCount": 15, "thoughtsTokenCount": 5 } });
        assert_eq!(usage_of_body(Flavour::Gemini, &gem), Some(U));
        assert_eq!(
            usage_of_body(Flavour::OpenAiChat, &json!({ "choices": [] })),
            None
        );
    }

    #[test]
    fn streams_of_every_api_cut_anywhere() {
        let chat = "data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\n\
                    data: {\"choices\":[],\"usage\":{\"prompt_tokens\":1000,\"completion_tokens\":20,\"prompt_tokens_details\":{\"cached_tokens\":400}}}\n\n\
                    data: [DONE]\n\n";
        assert_eq!(streamed(Flavour::OpenAiChat, chat), Some(U));
        let resp = "event: response.created\ndata: {\"response\":{\"status\":\"in_progress\"}}\n\n\
                    event: response.completed\ndata: {\"response\":{\"usage\":{\"input_tokens\":1000,\"output_tokens\":20,\"input_tokens_details\":{\"cached_tokens\":400}}}}\n\n";
        assert_eq!(streamed(Flavour::OpenAiResponses, resp), Some(U));
        let anth = "event: message_start\r\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":500,\"cache_read_input_tokens\":400,\"cache_creation_input_tokens\":100,\"output_tokens\":1}}}\r\n\r\n\
                    event: message_delta\r\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":20}}\r\n\r\n";
        assert_eq!(streamed(Flavour::Anthropic, anth), Some(U));
        let gem = "data: {\"usageMetadata\":{\"promptTokenCount\":1000,\"candidatesTokenCount\":3}}\n\n\
                   data: {\"usageMetadata\":{\"promptTokenCount\":1000,\"cachedContentTokenCount\":400,\"candidatesTokenCount\":20}}\n\n";
        assert_eq!(streamed(Flavour::Gemini, gem), Some(U));
        assert_eq!(streamed(Flavour::OpenAiChat, "data: [DONE]\n\n"), None);
    }

    #[test]
    fn a_streamed_chat_request_is_made_to_ask_for_its_usage() {
        let mut r = json!({ "model": "m", "stream": true });
        assert!(ask_for_stream_usage(Flavour::OpenAiChat, &mut r));
        assert_eq!(r["stream_options"]["include_usage"], true);
        assert!(!ask_for_stream_usage(Flavour::OpenAiChat, &mut r), "once");
        let mut whole = json!({ "model": "m" });
        assert!(!ask_for_stream_usage(Flavour::OpenAiChat, &mut whole));
        let mut anth = json!({ "stream": true });
        assert!(!ask_for_stream_usage(Flavour::Anthropic, &mut anth));
    }

    #[test]
    fn cost_prices_uncached_cached_and_output_tokens() {
        let p = Prices {
            input: 3.0,
            cached_input: 0.3,
            output: 15.0,
        };
        // 600 uncached at 3, 400 cached at 0.3, 20 out at 15, per million.
        let want = (600.0 * 3.0 + 400.0 * 0.3 + 20.0 * 15.0) / 1e6;
        assert!((p.cost(&U) - want).abs() < 1e-12);
    }

    #[test]
    fn deltas_pass_without_being_kept_and_crlf_and_cut_lines_are_read() {
        let mut s = StreamUsage::new(Flavour::OpenAiChat);
        let delta = "data: {\"choices\":[{\"delta\":{\"content\":\"xxxxxxxx\"}}]}\r\n\r\n";
        for _ in 0..10_000 {
            s.feed(delta.as_bytes());
        }
        assert!(s.partial.is_empty());
        assert_eq!(s.usage(), None);
        let last = "data:{\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":2}}\r\n\r\ndata: [DONE]\r\n\r\n";
        let (a, b) = last.split_at(30);
        s.feed(a.as_bytes());
        assert!(!s.partial.is_empty(), "a cut line waits for its end");
        s.feed(b.as_bytes());
        assert_eq!(
            s.usage(),
            Some(TokenUsage {
                input: 5,
                cached_input: 0,
                output: 2
            })
        );
    }
}
