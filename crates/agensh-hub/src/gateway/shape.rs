//! What the gateway says in each provider's own shapes: its errors (so an agent CLI prints
//! the message instead of failing to read it), and where each API puts its key and its
//! model.

use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};

/// The API family a request came in on (`/model/<family>/...`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    OpenAi,
    Anthropic,
    Gemini,
}

impl Family {
    pub fn parse(s: &str) -> Option<Family> {
        match s {
            "openai" => Some(Family::OpenAi),
            "anthropic" => Some(Family::Anthropic),
            "gemini" => Some(Family::Gemini),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Family::OpenAi => "openai",
            Family::Anthropic => "anthropic",
            Family::Gemini => "gemini",
        }
    }

    /// The header a client of this API puts its key in, and how.
    pub fn key_header(self, key: &str) -> (&'static str, String) {
        match self {
            Family::OpenAi => ("authorization", format!("Bearer {key}")),
            Family::Anthropic => ("x-api-key", key.to_string()),
            Family::Gemini => ("x-goog-api-key", key.to_string()),
        }
    }
}

/// The key a client sent, wherever its API puts it: `Authorization: Bearer`, `x-api-key`,
/// `x-goog-api-key` or `?key=`.
pub fn client_key(headers: &HeaderMap, query: Option<&str>) -> Option<String> {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
            .filter(|v| !v.is_empty())
            .map(str::to_string)
    };
    header("authorization")
        .map(|v| match v.split_once(' ') {
            Some((scheme, k)) if scheme.eq_ignore_ascii_case("bearer") => k.trim().to_string(),
            _ => v,
        })
        .or_else(|| header("x-api-key"))
        .or_else(|| header("x-goog-api-key"))
        .or_else(|| {
            query?
                .split('&')
                .find_map(|kv| kv.strip_prefix("key="))
                .map(str::to_string)
        })
}

/// The query without its `key=` (the worker's token never goes upstream).
pub fn query_without_key(query: Option<&str>) -> Option<String> {
    let rest: Vec<&str> = query?
        .split('&')
        .filter(|kv| !kv.starts_with("key=") && !kv.is_empty())
        .collect();
    (!rest.is_empty()).then(|| rest.join("&"))
}

/// An error in `family`'s shape with HTTP `status`; `code` is agensh's stable name for it.
pub fn error(family: Family, status: StatusCode, code: &str, message: &str) -> Response {
    let body = match family {
        Family::OpenAi => json!({
            "error": { "message": message, "type": openai_type(status), "code": code, "param": Value::Null }
        }),
        Family::Anthropic => json!({
            "type": "error",
            "error": { "type": anthropic_type(status), "message": message }
        }),
        Family::Gemini => json!({
            "error": { "code": status.as_u16(), "message": message, "status": gemini_status(status) }
        }),
    };
    let mut resp = (status, axum::Json(body)).into_response();
    resp.headers_mut().insert(
        "x-agensh-error",
        HeaderValue::from_str(code).unwrap_or(HeaderValue::from_static("gateway")),
    );
    resp
}

fn openai_type(status: StatusCode) -> &'static str {
    match status.as_u16() {
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        429 => "rate_limit_error",
        400..=499 => "invalid_request_error",
        _ => "api_error",
    }
}

fn anthropic_type(status: StatusCode) -> &'static str {
    match status.as_u16() {
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        400..=499 => "invalid_request_error",
        529 | 503 => "overloaded_error",
        _ => "api_error",
    }
}

fn gemini_status(status: StatusCode) -> &'static str {
    match status.as_u16() {
        401 => "UNAUTHENTICATED",
        403 => "PERMISSION_DENIED",
        404 => "NOT_FOUND",
        429 => "RESOURCE_EXHAUSTED",
        400..=499 => "INVALID_ARGUMENT",
        503 => "UNAVAILABLE",
        _ => "INTERNAL",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_key_is_found_wherever_a_client_puts_it() {
        let mut h = HeaderMap::new();
        assert_eq!(client_key(&h, Some("alt=sse&key=k1")), Some("k1".into()));
        h.insert("x-goog-api-key", "k2".parse().unwrap());
        assert_eq!(client_key(&h, None), Some("k2".into()));
        h.insert("x-api-key", "k3".parse().unwrap());
        assert_eq!(client_key(&h, None), Some("k3".into()));
        h.insert("authorization", "bearer k4".parse().unwrap());
        assert_eq!(client_key(&h, None), Some("k4".into()));
        assert_eq!(client_key(&HeaderMap::new(), Some("alt=sse")), None);
    }

    #[test]
    fn the_key_never_stays_in_the_query() {
        assert_eq!(
            query_without_key(Some("key=t&alt=sse")),
            Some("alt=sse".into())
        );
        assert_eq!(query_without_key(Some("key=t")), None);
        assert_eq!(query_without_key(None), None);
    }

    #[tokio::test]
    async fn errors_take_each_providers_shape() {
        let body = |r: Response| async move {
            let b = axum::body::to_bytes(r.into_body(), 1 << 16).await.unwrap();
            serde_json::from_slice::<Value>(&b).unwrap()
        };
        let s = StatusCode::FORBIDDEN;
        let o = body(error(Family::OpenAi, s, "budget", "spent")).await;
        assert_eq!(o["error"]["message"], "spent");
        assert_eq!(o["error"]["code"], "budget");
        let a = body(error(Family::Anthropic, s, "budget", "spent")).await;
        assert_eq!(
            (a["type"].as_str(), a["error"]["type"].as_str()),
            (Some("error"), Some("permission_error"))
        );
        let g = body(error(Family::Gemini, s, "budget", "spent")).await;
        assert_eq!(
            (g["error"]["code"].as_u64(), g["error"]["status"].as_str()),
            (Some(403), Some("PERMISSION_DENIED"))
        );
    }
}
