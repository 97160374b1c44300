//! What several tools share: pieces of input schemas, argument descriptions and the
//! wording of leases and times.

use agensh_domain::record::Lease;
use agensh_domain::time::{age, rfc3339};
use agensh_domain::Error;
use serde_json::{json, Value};

use crate::mcp::args::Args;

/// The description of a record id argument.
pub const RECORD_ID: &str = "a record id like G12 (12 and g12 work too)";
/// The description of a pull request number argument.
pub const PR_NUMBER: &str = "the pull request's number, like 3";
/// The description of an issue number argument.
pub const ISSUE_NUMBER: &str = "the issue's number, like 3";

/// A string property of at most `max` characters.
pub fn string(description: &str, max: usize) -> Value {
    json!({ "type": "string", "minLength": 1, "maxLength": max, "description": description })
}

/// An integer property from `min` to `max`.
pub fn integer(description: &str, min: u64, max: u64) -> Value {
    json!({ "type": "integer", "minimum": min, "maximum": max, "description": description })
}

/// An integer property of at least 1.
pub fn positive(description: &str) -> Value {
    json!({ "type": "integer", "minimum": 1, "description": description })
}

/// An input schema: an object with these `properties`, of which `required` must be given,
/// and no others.
pub fn object(properties: Value, required: &[&str]) -> Value {
    json!({
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": false,
    })
}

/// A lease as a model reads it: released, live until when, or expired.
pub fn lease_state(l: &Lease, now: i64) -> String {
    if let Some(by) = &l.taken_over_by {
        format!("taken over by {by}")
    } else if let Some(at) = l.released_at {
        format!("released at {}", rfc3339(at))
    } else if l.is_live(now) {
        format!(
            "live until {} (in {})",
            rfc3339(l.expires_at),
            in_time(l.expires_at, now)
        )
    } else {
        format!("expired at {}", rfc3339(l.expires_at))
    }
}

/// `42m` for a time ahead of `now`.
pub fn in_time(at: i64, now: i64) -> String {
    age(now, at).trim_start_matches('+').to_string()
}

/// The optional `thread` argument of the message tools: the message answered.
pub fn thread(a: &Args<'_>) -> Result<Option<i64>, Error> {
    Ok(a.opt_u64(
        "thread",
        "the number of the message you answer, like 7 for M7",
    )?
    .map(|n| i64::try_from(n).unwrap_or(i64::MAX)))
}

/// The schema of a comment tool: the `number` (described as `number`) and the comment's
/// `text`, at most `limit` characters.
pub fn comment_schema(number: &str, limit: usize) -> Value {
    object(
        json!({
            "number": positive(number),
            "text": string(&format!("the comment, at most {limit} characters"), limit),
        }),
        &["number", "text"],
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn in_time_reads_ahead() {
        assert_eq!(in_time(120_000, 0), "2m");
    }
}
