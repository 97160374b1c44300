//! The organization tools (DESIGN §5), one file per tool: its name, title, the
//! description and input schema a model reads, and its handler. [`TOOLS`] is the one
//! registry: `tools/list` and `tools/call` are both derived from it, and tests read the
//! tool names from it through [`names`].
//!
//! Each handler runs the same shared function as its REST endpoint ([`crate::ops`]), so
//! limits, errors and events cannot drift; a tool only reads its arguments ([`Args`]) and
//! writes concise text.

mod common;

mod board_grep;
mod board_read;
mod board_unfold;
mod board_write;
mod claim;
mod inbox;
mod issue_claim;
mod issue_close;
mod issue_comment;
mod issue_list;
mod issue_open;
mod issue_view;
mod msg_dm;
mod msg_post;
mod msg_status;
mod pr_close;
mod pr_comment;
mod pr_list;
mod pr_merge;
mod pr_open;
mod pr_review;
mod pr_view;
mod release;
mod renew;
mod ship;
mod workers;

use std::future::Future;
use std::pin::Pin;

use agensh_domain::config::Config;
use agensh_domain::ids::ADMIN;
use agensh_domain::record::LABEL_LIMIT;
use agensh_domain::{Error, ErrorKind};
use serde::Serialize;
use serde_json::{json, Map, Value};

use super::args::Args;
use super::notices::Covers;
use crate::auth::Caller;
use crate::state::AppState;

/// Every tool, in the order `tools/list` gives them.
static TOOLS: [&Tool; 26] = [
    &board_read::TOOL,
    &board_write::TOOL,
    &board_grep::TOOL,
    &board_unfold::TOOL,
    &claim::TOOL,
    &release::TOOL,
    &renew::TOOL,
    &msg_post::TOOL,
    &msg_dm::TOOL,
    &msg_status::TOOL,
    &inbox::TOOL,
    &workers::TOOL,
    &ship::TOOL,
    &pr_open::TOOL,
    &pr_list::TOOL,
    &pr_view::TOOL,
    &pr_review::TOOL,
    &pr_comment::TOOL,
    &pr_merge::TOOL,
    &pr_close::TOOL,
    &issue_list::TOOL,
    &issue_view::TOOL,
    &issue_open::TOOL,
    &issue_comment::TOOL,
    &issue_claim::TOOL,
    &issue_close::TOOL,
];

/// One tool: what `tools/list` shows of it and what `tools/call` runs.
pub(crate) struct Tool {
    /// The name a model calls it by.
    pub name: &'static str,
    /// A short human title (also its `annotations.title`).
    pub title: &'static str,
    /// Whether it only reads (`annotations.readOnlyHint`).
    pub read_only: bool,
    /// What it is for, when to use it and its limits, written for a model.
    pub description: fn(&Listing) -> String,
    /// Its JSON Schema input (an object with `additionalProperties: false`).
    pub schema: fn(&Listing) -> Value,
    /// Its handler.
    pub run: Run,
}

/// A tool's handler: runs it as the caller with the call's arguments.
pub(crate) type Run = for<'a> fn(&'a AppState, &'a Caller, Args<'a>) -> Running<'a>;

/// The future a handler returns.
pub(crate) type Running<'a> = Pin<Box<dyn Future<Output = Result<Done, Error>> + Send + 'a>>;

/// The names of every tool, in the order `tools/list` gives them.
pub fn names() -> Vec<&'static str> {
    TOOLS.iter().map(|t| t.name).collect()
}

/// The tool called `name`, if there is one.
pub(crate) fn find(name: &str) -> Option<&'static Tool> {
    TOOLS.iter().copied().find(|t| t.name == name)
}

/// The `tools/list` answer for `caller`: every tool with its input schema and a
/// description written for a model (what it is for, when to use it, its limits).
pub(crate) fn list(s: &AppState, caller: &Caller) -> Vec<Value> {
    let l = Listing::new(&s.config, caller);
    TOOLS
        .iter()
        .map(|t| {
            json!({
                "name": t.name,
                "title": t.title,
                "description": (t.description)(&l),
                "inputSchema": (t.schema)(&l),
                "annotations": {
                    "title": t.title,
                    "readOnlyHint": t.read_only,
                    "destructiveHint": false,
                    "openWorldHint": false,
                },
            })
        })
        .collect()
}

/// What the descriptions and schemas depend on: the organization's configuration and who
/// asks, worked out once per `tools/list`.
pub(crate) struct Listing<'a> {
    pub config: &'a Config,
    /// The caller's branch namespace: its worker id, or `<your id>` for the admin.
    pub me: String,
    /// How many records `board_read` shows by default.
    pub read_cap: usize,
    /// The sentence on required approvals, for the PR tools.
    pub approvals: String,
    /// The sentence on the merge gate (empty when there is none), with a leading space.
    pub gate: String,
    /// The description of a `label` argument.
    pub label: String,
}

impl<'a> Listing<'a> {
    fn new(config: &'a Config, caller: &Caller) -> Self {
        let me = if caller.id == ADMIN {
            "<your id>".to_string()
        } else {
            caller.id.clone()
        };
        let approvals = match config.merge.required_approvals {
            0 => "No approving review is required to merge here.".to_string(),
            n => format!("This organization needs {n} approving review(s) before a merge."),
        };
        let gate = if config.merge.gate.trim().is_empty() {
            String::new()
        } else {
            format!(
                " Before main moves, the gate `{}` runs on the merged tree (up to {} s); if it fails the merge is refused with its output.",
                config.merge.gate, config.merge.gate_timeout_secs
            )
        };
        let label = format!(
            "the work item it belongs to, e.g. parser-errors: 1–{LABEL_LIMIT} letters, digits and - _ . / : # (no spaces); use the same label for everything about one item"
        );
        Listing {
            config,
            me,
            read_cap: board_read::READ_CAP.min(config.board.view_cap),
            approvals,
            gate,
            label,
        }
    }

    /// The default claim lease, in seconds.
    pub fn lease(&self) -> u64 {
        self.config.board.claim_lease_secs
    }
}

/// What one tool call produced, before notices are added.
pub(crate) struct Outcome {
    /// The text for the model.
    pub text: String,
    /// The same answer as JSON (`structuredContent`).
    pub structured: Option<Value>,
    /// Whether the hub refused the call.
    pub is_error: bool,
    /// The error's kind, when the call failed.
    pub kind: Option<ErrorKind>,
    /// What the answer showed, so the notices do not repeat it.
    pub covers: Covers,
}

/// A successful call: its text, its structured form, and what it showed.
pub(crate) struct Done {
    text: String,
    structured: Value,
    covers: Covers,
}

impl Done {
    fn new(text: impl Into<String>, structured: Value) -> Self {
        Done {
            text: text.into(),
            structured,
            covers: Covers::default(),
        }
    }

    /// A success whose structured form is `v` serialised.
    fn of<T: Serialize>(text: impl Into<String>, v: &T) -> Self {
        Done::new(text, serde_json::to_value(v).unwrap_or(Value::Null))
    }
}

/// Runs `tool` as `caller` with `args`; a refusal becomes an error result for the model.
pub(crate) async fn call(
    s: &AppState,
    caller: &Caller,
    tool: &Tool,
    args: &Map<String, Value>,
) -> Outcome {
    match (tool.run)(s, caller, Args::new(tool.name, args)).await {
        Ok(d) => Outcome {
            text: d.text,
            structured: Some(d.structured),
            is_error: false,
            kind: None,
            covers: d.covers,
        },
        Err(e) => Outcome {
            text: format!("refused ({}): {}", e.code, e.message),
            structured: Some(json!({ "error": { "code": e.code, "message": e.message } })),
            is_error: true,
            kind: Some(e.kind),
            covers: Covers::default(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_names_are_unique_and_found_by_name() {
        let names = names();
        let unique: std::collections::BTreeSet<_> = names.iter().collect();
        assert_eq!(unique.len(), names.len(), "{names:?}");
        for n in &names {
            assert!(find(n).is_some_and(|t| t.name == *n), "{n}");
        }
        assert!(find("nope").is_none());
    }
}
