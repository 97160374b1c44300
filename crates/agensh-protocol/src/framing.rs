//! How messages are cut from a byte stream: NDJSON (one JSON message per line, the stdio
//! transport of ACP and MCP) and SSE (`text/event-stream`, which an MCP server may answer
//! a POST with).

use std::fmt;

use serde::de::DeserializeOwned;
use serde::Serialize;

/// One message as one NDJSON line: compact JSON and a newline (JSON never holds a raw one).
pub fn encode_line(message: &impl Serialize) -> Vec<u8> {
    let mut line = serde_json::to_vec(message).expect("a message serializes to JSON");
    line.push(b'\n');
    line
}

/// Reads one NDJSON line: `None` for a blank line, the message, or a [`BadLine`] that
/// quotes the start of the line and says why it was refused.
pub fn decode_line<T: DeserializeOwned>(line: &str) -> Result<Option<T>, BadLine> {
    let line = line.trim();
    if line.is_empty() {
        return Ok(None);
    }
    serde_json::from_str(line).map(Some).map_err(|e| BadLine {
        excerpt: line.chars().take(200).collect(),
        reason: e.to_string(),
    })
}

/// A line that is not the message it should be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadLine {
    /// The first 200 characters of the line.
    pub excerpt: String,
    /// What was wrong with it.
    pub reason: String,
}

impl fmt::Display for BadLine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "a line that is not a JSON-RPC message ({}): {}",
            self.reason, self.excerpt
        )
    }
}

impl std::error::Error for BadLine {}

/// One server-sent event.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SseEvent {
    /// The `event:` field, if the event had one.
    pub event: Option<String>,
    /// The `id:` field, if the event had one.
    pub id: Option<String>,
    /// The `data:` lines, joined by newlines.
    pub data: String,
}

/// An incremental `text/event-stream` parser: feed it chunks as they arrive (cut
/// anywhere, even inside a line or a UTF-8 character); it hands out each event once its
/// blank line has come. Lines end with LF or CRLF; `:` lines are comments; an event
/// without `data:` is dropped, as the specification says.
#[derive(Debug, Default)]
pub struct SseParser {
    /// Bytes of the line not yet ended.
    partial: Vec<u8>,
    data: Option<String>,
    event: Option<String>,
    id: Option<String>,
}

impl SseParser {
    /// A parser at the start of a stream.
    pub fn new() -> Self {
        SseParser::default()
    }

    /// Takes the next chunk; returns the events it completed, in order.
    pub fn push(&mut self, chunk: &[u8]) -> Vec<SseEvent> {
        let mut out = Vec::new();
        let mut rest = chunk;
        while let Some(end) = rest.iter().position(|b| *b == b'\n') {
            self.partial.extend_from_slice(&rest[..end]);
            rest = &rest[end + 1..];
            let mut line = std::mem::take(&mut self.partial);
            if line.last() == Some(&b'\r') {
                line.pop();
            }
            if let Some(e) = self.line(&String::from_utf8_lossy(&line)) {
                out.push(e);
            }
        }
        self.partial.extend_from_slice(rest);
        out
    }

    /// The stream ended: the event in progress, if its last line had data (a server that
    /// closes without the final blank line still meant it).
    pub fn finish(&mut self) -> Option<SseEvent> {
        let line = std::mem::take(&mut self.partial);
        let mut last = None;
        if !line.is_empty() {
            let text = String::from_utf8_lossy(&line);
            last = self.line(text.trim_end_matches('\r'));
        }
        last.or_else(|| self.line(""))
    }

    /// One line without its end; an event when the line is blank and data was given.
    fn line(&mut self, line: &str) -> Option<SseEvent> {
        if line.is_empty() {
            let event = self.event.take();
            let id = self.id.take();
            return self.data.take().map(|data| SseEvent { event, id, data });
        }
        if line.starts_with(':') {
            return None;
        }
        let (field, value) = match line.split_once(':') {
            Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
            None => (line, ""),
        };
        match field {
            "data" => match &mut self.data {
                Some(d) => {
                    d.push('\n');
                    d.push_str(value);
                }
                None => self.data = Some(value.to_string()),
            },
            "event" => self.event = Some(value.to_string()),
            "id" if !value.contains('\0') => self.id = Some(value.to_string()),
            _ => {}
        }
        None
    }
}

/// Every event of a whole `text/event-stream` body.
pub fn sse_events(body: &[u8]) -> Vec<SseEvent> {
    let mut p = SseParser::new();
    let mut events = p.push(body);
    events.extend(p.finish());
    events
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    #[test]
    fn a_line_is_one_message_and_a_newline() {
        assert_eq!(encode_line(&json!({ "a": "x\ny" })), b"{\"a\":\"x\\ny\"}\n");
    }

    #[test]
    fn blank_lines_are_skipped_and_bad_lines_reported() {
        assert_eq!(decode_line::<Value>("  \r").unwrap(), None);
        assert_eq!(
            decode_line::<Value>("{\"a\":1}\r").unwrap(),
            Some(json!({ "a": 1 }))
        );
        let bad = decode_line::<Value>("Loading model…").unwrap_err();
        assert_eq!(bad.excerpt, "Loading model…");
        assert!(bad.to_string().contains("not a JSON-RPC message"), "{bad}");
        let long = "x".repeat(500);
        assert_eq!(decode_line::<Value>(&long).unwrap_err().excerpt.len(), 200);
    }

    #[test]
    fn event_stream_data_is_split_per_event() {
        let body = "id: 1\ndata: {\"a\":1}\n\nevent: message\ndata:{\"b\":\ndata: 2}\n\n";
        let events = sse_events(body.as_bytes());
        let data: Vec<&str> = events.iter().map(|e| e.data.as_str()).collect();
        assert_eq!(data, vec!["{\"a\":1}", "{\"b\":\n2}"]);
        assert_eq!(events[0].id.as_deref(), Some("1"));
        assert_eq!(events[1].event.as_deref(), Some("message"));
        assert_eq!(events[1].id, None);
    }

    #[test]
    fn sse_events_are_taken_whole_across_chunks_and_crlf() {
        let mut p = SseParser::new();
        let events = p.push(
            "event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\"}\n\n\
             event: message\r\ndata: {\"jsonrpc\":\"2.0\",\"id\":7,\r\ndata: \"result\":{\"ok\":true}}\r\n\r\nda"
                .as_bytes(),
        );
        assert_eq!(events.len(), 2);
        let answer: Value = serde_json::from_str(&events[1].data).unwrap();
        assert_eq!(answer["result"]["ok"], json!(true));
        // "da" waits for the rest of its line.
        assert_eq!(p.push(b"ta: x\n\n")[0].data, "x");
        // An event without its blank line is not complete until the stream ends.
        let mut partial = SseParser::new();
        assert!(partial
            .push(b"data: {\"jsonrpc\":\"2.0\",\"id\":7,\"result\":{}}\n")
            .is_empty());
        assert_eq!(
            partial.finish().map(|e| e.data),
            Some("{\"jsonrpc\":\"2.0\",\"id\":7,\"result\":{}}".to_string())
        );
    }

    #[test]
    fn a_character_cut_between_chunks_is_kept_whole() {
        let bytes = "data: é\n\n".as_bytes();
        let mut p = SseParser::new();
        assert!(p.push(&bytes[..7]).is_empty());
        assert_eq!(p.push(&bytes[7..])[0].data, "é");
    }

    #[test]
    fn comments_and_events_without_data_are_dropped() {
        let events = sse_events(b": keep-alive\n\nevent: ping\n\ndata: x\n");
        assert_eq!(
            events,
            vec![SseEvent {
                event: None,
                id: None,
                data: "x".into()
            }]
        );
    }
}
