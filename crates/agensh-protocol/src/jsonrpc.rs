//! JSON-RPC 2.0: one envelope for every message agensh sends or reads (the hub's MCP
//! server, the client's MCP client, the stdio bridge, the ACP adapter, the scripted agent).
//!
//! [`Message::from_value`] checks the envelope (`"jsonrpc":"2.0"`, a string `method`, an id
//! that is a number, a string or null) and sorts it into a request, a notification or a
//! response; a message that is none of these is [`Malformed`], with the JSON-RPC error to
//! answer it with. Params and results stay JSON values: the caller reads them into the
//! type its method expects. An error's `data` is kept as it came.

use std::fmt;

use serde::de::DeserializeOwned;
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};

/// The version string every message carries.
pub const VERSION: &str = "2.0";

/// Error codes: the five of the JSON-RPC specification, then the server-defined ones
/// agensh answers with (`-32000` to `-32099`).
pub mod code {
    /// The message is not JSON.
    pub const PARSE_ERROR: i64 = -32700;
    /// The JSON is not a JSON-RPC request or notification.
    pub const INVALID_REQUEST: i64 = -32600;
    /// No such method.
    pub const METHOD_NOT_FOUND: i64 = -32601;
    /// The params do not fit the method.
    pub const INVALID_PARAMS: i64 = -32602;
    /// The receiver failed while handling the request.
    pub const INTERNAL_ERROR: i64 = -32603;
    /// The stdio bridge could not reach the hub.
    pub const HUB_UNREACHABLE: i64 = -32000;
    /// The hub refused the request at the HTTP level (authentication, impersonation).
    pub const HUB_REFUSED: i64 = -32001;
    /// The thing named does not exist (ACP: a session the agent cannot load).
    pub const NOT_FOUND: i64 = -32002;
}

/// A request id: a number or a string (null only in answers to messages whose id could
/// not be read).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Id {
    Number(i64),
    String(String),
    Null,
}

impl Id {
    /// The id as a number, when it is one (agensh numbers its own requests).
    pub fn as_u64(&self) -> Option<u64> {
        match self {
            Id::Number(n) => u64::try_from(*n).ok(),
            _ => None,
        }
    }

    fn from_value(v: &Value) -> Option<Id> {
        match v {
            Value::Null => Some(Id::Null),
            Value::String(s) => Some(Id::String(s.clone())),
            Value::Number(n) => n.as_i64().map(Id::Number),
            _ => None,
        }
    }
}

impl From<u64> for Id {
    fn from(n: u64) -> Self {
        Id::Number(n as i64)
    }
}

impl fmt::Display for Id {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Id::Number(n) => write!(f, "{n}"),
            Id::String(s) => write!(f, "{s:?}"),
            Id::Null => f.write_str("null"),
        }
    }
}

/// The error object of a response: a code, a message and, when the sender gave one,
/// `data` with the details.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorObject {
    pub code: i64,
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
}

impl ErrorObject {
    /// An error without data.
    pub fn new(code: i64, message: impl Into<String>) -> Self {
        ErrorObject {
            code,
            message: message.into(),
            data: None,
        }
    }

    /// The same error with `data`.
    pub fn with_data(mut self, data: Value) -> Self {
        self.data = Some(data);
        self
    }

    /// The message with what `data` says: its text, or its `message`, `detail` or `details`,
    /// else the data itself as JSON. A generic message such as "Internal error" is useless
    /// to a reader without the data (an agent puts the real cause there).
    pub fn describe(&self) -> String {
        let detail = match &self.data {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => Some(s.clone()),
            Some(Value::Object(o)) => {
                let texts: Vec<String> = ["message", "detail", "details"]
                    .iter()
                    .filter_map(|k| o.get(*k))
                    .map(|v| match v {
                        Value::String(s) => s.clone(),
                        other => other.to_string(),
                    })
                    .collect();
                Some(if texts.is_empty() {
                    Value::Object(o.clone()).to_string()
                } else {
                    texts.join("; ")
                })
            }
            Some(other) => Some(other.to_string()),
        };
        match detail {
            Some(d) if !d.is_empty() && d != self.message => {
                format!("{}: {}", self.message, cut(&d, 1000))
            }
            _ => self.message.clone(),
        }
    }

    /// Reads an error object leniently: a missing code is 0, a missing message "no message".
    fn from_value(v: &Value) -> ErrorObject {
        ErrorObject {
            code: v.get("code").and_then(Value::as_i64).unwrap_or(0),
            message: v
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or("no message")
                .to_string(),
            data: v.get("data").filter(|d| !d.is_null()).cloned(),
        }
    }
}

impl fmt::Display for ErrorObject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (JSON-RPC error {})", self.describe(), self.code)
    }
}

fn cut(s: &str, max: usize) -> &str {
    match s.char_indices().nth(max) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

/// A request: it has an id and wants a [`Response`].
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    pub id: Id,
    pub method: String,
    pub params: Option<Value>,
}

impl Request {
    /// A request with `params` (anything that serializes to JSON).
    pub fn new(id: impl Into<Id>, method: &str, params: impl Serialize) -> Self {
        Request {
            id: id.into(),
            method: method.to_string(),
            params: Some(to_value(params)),
        }
    }

    /// The params read as `T`, or the `invalid params` error to answer with.
    pub fn params<T: DeserializeOwned>(&self) -> Result<T, ErrorObject> {
        read_params(&self.method, self.params.as_ref())
    }
}

/// A notification: no id, no answer.
#[derive(Debug, Clone, PartialEq)]
pub struct Notification {
    pub method: String,
    pub params: Option<Value>,
}

impl Notification {
    /// A notification with `params`.
    pub fn new(method: &str, params: impl Serialize) -> Self {
        Notification {
            method: method.to_string(),
            params: Some(to_value(params)),
        }
    }

    /// The params read as `T`, or the `invalid params` error that says why not.
    pub fn params<T: DeserializeOwned>(&self) -> Result<T, ErrorObject> {
        read_params(&self.method, self.params.as_ref())
    }
}

/// The answer to a request: its result or its error.
#[derive(Debug, Clone, PartialEq)]
pub struct Response {
    pub id: Id,
    pub result: Result<Value, ErrorObject>,
}

impl Response {
    /// A successful answer.
    pub fn ok(id: Id, result: impl Serialize) -> Self {
        Response {
            id,
            result: Ok(to_value(result)),
        }
    }

    /// An error answer.
    pub fn error(id: Id, error: ErrorObject) -> Self {
        Response {
            id,
            result: Err(error),
        }
    }
}

/// Any JSON-RPC message.
#[derive(Debug, Clone, PartialEq)]
pub enum Message {
    Request(Request),
    Notification(Notification),
    Response(Response),
}

/// Why a message is not JSON-RPC 2.0.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Invalid {
    /// Not JSON at all.
    Parse(String),
    /// A JSON array (a batch), which agensh does not take.
    Batch,
    /// JSON, but not an object.
    NotObject,
    /// No `"jsonrpc":"2.0"`.
    Version,
    /// An id that is not a number, a string or null.
    BadId,
    /// A `method` that is not a string.
    MethodNotString,
    /// Neither a method nor a result or error.
    NoMethod,
}

/// A message that is not JSON-RPC 2.0: why, and the id to answer with (null when unknown).
#[derive(Debug, Clone, PartialEq)]
pub struct Malformed {
    pub id: Id,
    pub reason: Invalid,
}

impl Malformed {
    /// The error to answer with: `parse error` or `invalid request`, and what to send instead.
    pub fn error(&self) -> ErrorObject {
        let (code, message) = match &self.reason {
            Invalid::Parse(e) => (
                code::PARSE_ERROR,
                format!("parse error: {e} — send one JSON-RPC 2.0 message as JSON"),
            ),
            Invalid::Batch => (
                code::INVALID_REQUEST,
                "batches are not supported — send one JSON-RPC message at a time".to_string(),
            ),
            Invalid::NotObject => (
                code::INVALID_REQUEST,
                "a JSON-RPC message is a JSON object with \"jsonrpc\":\"2.0\"".to_string(),
            ),
            Invalid::Version => (
                code::INVALID_REQUEST,
                "the message needs \"jsonrpc\":\"2.0\"".to_string(),
            ),
            Invalid::BadId => (
                code::INVALID_REQUEST,
                "\"id\" must be a number or a string".to_string(),
            ),
            Invalid::MethodNotString => (
                code::INVALID_REQUEST,
                "\"method\" must be a string".to_string(),
            ),
            Invalid::NoMethod => (
                code::INVALID_REQUEST,
                "the message has no \"method\" — send a request or a notification".to_string(),
            ),
        };
        ErrorObject::new(code, message)
    }
}

impl fmt::Display for Malformed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.error().message)
    }
}

impl std::error::Error for Malformed {}

impl Message {
    /// Reads one message from JSON text.
    pub fn parse(text: &str) -> Result<Message, Malformed> {
        Message::from_slice(text.as_bytes())
    }

    /// Reads one message from JSON bytes.
    pub fn from_slice(bytes: &[u8]) -> Result<Message, Malformed> {
        let v: Value = serde_json::from_slice(bytes).map_err(|e| Malformed {
            id: Id::Null,
            reason: Invalid::Parse(e.to_string()),
        })?;
        Message::from_value(v)
    }

    /// Sorts a JSON value into a request, a notification or a response.
    pub fn from_value(v: Value) -> Result<Message, Malformed> {
        let mut obj = match v {
            Value::Object(o) => o,
            Value::Array(_) => return Err(malformed(Id::Null, Invalid::Batch)),
            _ => return Err(malformed(Id::Null, Invalid::NotObject)),
        };
        let id = match obj.get("id") {
            None => None,
            Some(v) => match Id::from_value(v) {
                Some(id) => Some(id),
                None => return Err(malformed(Id::Null, Invalid::BadId)),
            },
        };
        let answer_id = id.clone().unwrap_or(Id::Null);
        if obj.get("jsonrpc").and_then(Value::as_str) != Some(VERSION) {
            return Err(malformed(answer_id, Invalid::Version));
        }
        let params = obj.remove("params");
        match obj.remove("method") {
            Some(Value::String(method)) => Ok(match id {
                Some(id) => Message::Request(Request { id, method, params }),
                None => Message::Notification(Notification { method, params }),
            }),
            Some(_) => Err(malformed(answer_id, Invalid::MethodNotString)),
            None => {
                if let Some(e) = obj.get("error") {
                    return Ok(Message::Response(Response {
                        id: answer_id,
                        result: Err(ErrorObject::from_value(e)),
                    }));
                }
                match obj.remove("result") {
                    Some(result) => Ok(Message::Response(Response {
                        id: answer_id,
                        result: Ok(result),
                    })),
                    None => Err(malformed(answer_id, Invalid::NoMethod)),
                }
            }
        }
    }

    /// The message as a JSON value.
    pub fn to_value(&self) -> Value {
        serde_json::to_value(self).expect("a JSON-RPC message serializes")
    }
}

fn malformed(id: Id, reason: Invalid) -> Malformed {
    Malformed { id, reason }
}

fn to_value(v: impl Serialize) -> Value {
    serde_json::to_value(v).expect("params and results serialize to JSON")
}

fn read_params<T: DeserializeOwned>(
    method: &str,
    params: Option<&Value>,
) -> Result<T, ErrorObject> {
    let v = params.cloned().unwrap_or(Value::Object(Map::new()));
    serde_json::from_value(v).map_err(|e| {
        ErrorObject::new(
            code::INVALID_PARAMS,
            format!("the params of {method} do not fit: {e}"),
        )
    })
}

impl Serialize for Message {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Message::Request(r) => r.serialize(s),
            Message::Notification(n) => n.serialize(s),
            Message::Response(r) => r.serialize(s),
        }
    }
}

impl Serialize for Request {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("jsonrpc", VERSION)?;
        m.serialize_entry("id", &self.id)?;
        m.serialize_entry("method", &self.method)?;
        if let Some(p) = &self.params {
            m.serialize_entry("params", p)?;
        }
        m.end()
    }
}

impl Serialize for Notification {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("jsonrpc", VERSION)?;
        m.serialize_entry("method", &self.method)?;
        if let Some(p) = &self.params {
            m.serialize_entry("params", p)?;
        }
        m.end()
    }
}

impl Serialize for Response {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("jsonrpc", VERSION)?;
        m.serialize_entry("id", &self.id)?;
        match &self.result {
            Ok(r) => m.serialize_entry("result", r)?,
            Err(e) => m.serialize_entry("error", e)?,
        }
        m.end()
    }
}

impl<'de> Deserialize<'de> for Message {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = Value::deserialize(d)?;
        Message::from_value(v).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(v: Value) -> Result<Message, Malformed> {
        Message::from_value(v)
    }

    #[test]
    fn requests_notifications_and_responses_are_told_apart() {
        let m = parse(json!({ "jsonrpc": "2.0", "id": 1, "method": "ping" })).unwrap();
        assert_eq!(
            m,
            Message::Request(Request {
                id: Id::Number(1),
                method: "ping".into(),
                params: None
            })
        );
        let m = parse(json!({ "jsonrpc": "2.0", "method": "n", "params": { "a": 1 } })).unwrap();
        assert!(matches!(m, Message::Notification(n) if n.params == Some(json!({ "a": 1 }))));
        let m = parse(json!({ "jsonrpc": "2.0", "id": "x", "result": null })).unwrap();
        assert_eq!(
            m,
            Message::Response(Response {
                id: Id::String("x".into()),
                result: Ok(Value::Null)
            })
        );
    }

    #[test]
    fn an_error_keeps_its_data() {
        let m = parse(json!({
            "jsonrpc": "2.0", "id": 3,
            "error": { "code": -32603, "message": "Internal error", "data": { "details": "process exited with code 1" } },
        }))
        .unwrap();
        let Message::Response(Response { result: Err(e), .. }) = m else {
            panic!("an error response")
        };
        assert_eq!(e.code, code::INTERNAL_ERROR);
        assert_eq!(
            e.data,
            Some(json!({ "details": "process exited with code 1" }))
        );
        assert_eq!(e.describe(), "Internal error: process exited with code 1");
    }

    #[test]
    fn describe_uses_text_data_or_the_data_itself() {
        let e = ErrorObject::new(-1, "failed").with_data(json!("disk full"));
        assert_eq!(e.describe(), "failed: disk full");
        let e = ErrorObject::new(-1, "failed").with_data(json!({ "message": "no auth" }));
        assert_eq!(e.describe(), "failed: no auth");
        let e = ErrorObject::new(-1, "failed").with_data(json!({ "retry": 3 }));
        assert_eq!(e.describe(), "failed: {\"retry\":3}");
        assert_eq!(ErrorObject::new(-1, "failed").describe(), "failed");
        assert_eq!(
            ErrorObject::new(-1, "failed")
                .with_data(json!({ "x": 1 }))
                .to_string(),
            "failed: {\"x\":1} (JSON-RPC error -1)"
        );
    }

    #[test]
    fn malformed_messages_say_why_and_keep_the_id() {
        let bad = |v: Value| parse(v).unwrap_err();
        assert_eq!(bad(json!([1])).reason, Invalid::Batch);
        assert_eq!(bad(json!("x")).reason, Invalid::NotObject);
        let m = bad(json!({ "id": 4, "method": "ping" }));
        assert_eq!(
            (m.id.clone(), m.reason.clone()),
            (Id::Number(4), Invalid::Version)
        );
        assert_eq!(m.error().code, code::INVALID_REQUEST);
        assert_eq!(
            bad(json!({ "jsonrpc": "2.0", "id": 5, "method": 1 })).reason,
            Invalid::MethodNotString
        );
        assert_eq!(
            bad(json!({ "jsonrpc": "2.0", "id": 6 })).reason,
            Invalid::NoMethod
        );
        assert_eq!(
            bad(json!({ "jsonrpc": "2.0", "id": [1], "method": "m" })).reason,
            Invalid::BadId
        );
        let p = Message::parse("{not json").unwrap_err();
        assert_eq!(
            (p.id.clone(), p.error().code),
            (Id::Null, code::PARSE_ERROR)
        );
        assert!(p.to_string().starts_with("parse error: "));
    }

    #[test]
    fn messages_serialize_with_the_version_and_without_absent_fields() {
        let r = Message::Request(Request::new(7u64, "tools/list", json!({})));
        assert_eq!(
            r.to_value(),
            json!({ "jsonrpc": "2.0", "id": 7, "method": "tools/list", "params": {} })
        );
        let n = Message::Notification(Notification {
            method: "notifications/initialized".into(),
            params: None,
        });
        assert_eq!(
            n.to_value(),
            json!({ "jsonrpc": "2.0", "method": "notifications/initialized" })
        );
        let e = Message::Response(Response::error(
            Id::Null,
            ErrorObject::new(code::PARSE_ERROR, "bad"),
        ));
        assert_eq!(
            e.to_value(),
            json!({ "jsonrpc": "2.0", "id": null, "error": { "code": -32700, "message": "bad" } })
        );
        let ok = serde_json::to_string(&Response::ok(Id::String("a".into()), json!({}))).unwrap();
        assert_eq!(ok, r#"{"jsonrpc":"2.0","id":"a","result":{}}"#);
    }

    #[test]
    fn params_are_read_into_the_type_the_method_expects() {
        #[derive(Deserialize, Debug)]
        struct P {
            name: String,
        }
        let r = Request::new(1u64, "tools/call", json!({ "name": "claim" }));
        assert_eq!(r.params::<P>().unwrap().name, "claim");
        let e = Request::new(1u64, "tools/call", json!({}))
            .params::<P>()
            .unwrap_err();
        assert_eq!(e.code, code::INVALID_PARAMS);
        assert!(e.message.contains("tools/call"), "{}", e.message);
    }

    #[test]
    fn ids_compare_with_our_numbers() {
        assert_eq!(Id::Number(9).as_u64(), Some(9));
        assert_eq!(Id::String("9".into()).as_u64(), None);
        assert_eq!(Id::from(3u64), Id::Number(3));
    }
}
