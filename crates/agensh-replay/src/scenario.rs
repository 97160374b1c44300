//! The scenario: what the replay server answers, step by step, read from TOML.
//!
//! ```toml
//! side_text = "ok"            # the answer to a request that offers no tools
//! final_text = "All done."    # the answer once every step is used
//! keys = []                   # when not empty, only these keys are accepted (others: 401)
//!
//! [[step]]
//! text = "I will look around."
//! tool_calls = [
//!   # the first name the request offers wins, so one scenario serves several agents
//!   { any = [ { name = "Bash", args = { command = "ls" } },
//!             { name = "run_shell_command", args = { command = "ls" } } ] },
//!   # a name offered under a prefix (mcp__agensh__board_write) is found by its end
//!   { name = "board_write", args = { kind = "FACT", text = "seen" } },
//! ]
//! usage = { input = 1200, output = 40, cached = 1000 }   # else estimated from sizes
//!
//! [[step]]
//! error = { status = 500, message = "overloaded" }
//! ```

use serde::Deserialize;
use serde_json::Value;

/// A scenario that cannot be used, with what to change.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ScenarioError(pub String);

/// What the server answers.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// The answer to a request that offers no tools (titles, summaries, routing).
    #[serde(default = "default_side_text")]
    pub side_text: String,
    /// The answer to a request that offers tools once every step is used: text, no tool
    /// call, so the agent ends its turn.
    #[serde(default = "default_final_text")]
    pub final_text: String,
    /// Keys accepted; empty: any key, or none.
    #[serde(default)]
    pub keys: Vec<String>,
    /// Refuse every Nth model request (counted over the whole server, before any step is
    /// taken) with 429 and `Retry-After` — a rate-limit storm; 0: never.
    #[serde(default)]
    pub refuse_every: u64,
    /// The `Retry-After` of those refusals, in seconds (fractions allowed).
    #[serde(default)]
    pub retry_after: f64,
    /// The message of those refusals (e.g. one that says the quota is exhausted).
    #[serde(default = "default_refuse_message")]
    pub refuse_message: String,
    /// Streamed answers begin with this many extra events (a long answer, for
    /// benchmarks): Chat Completions content deltas of `pad_bytes` characters each; for the
    /// other APIs, SSE comments of that size, which clients skip.
    #[serde(default)]
    pub pad_events: usize,
    #[serde(default = "default_pad_bytes")]
    pub pad_bytes: usize,
    /// Milliseconds between two events of a streamed answer (0: as fast as they are taken).
    #[serde(default)]
    pub event_delay_ms: u64,
    /// Milliseconds before any answer begins (a model that thinks first; 0: none).
    #[serde(default)]
    pub answer_delay_ms: u64,
    /// The steps, in order, one per request that offers tools.
    #[serde(default, rename = "step")]
    pub steps: Vec<Step>,
}

fn default_pad_bytes() -> usize {
    64
}

fn default_refuse_message() -> String {
    "rate limited by the replay scenario (refuse_every); try again after Retry-After".into()
}

fn default_side_text() -> String {
    "ok".into()
}

fn default_final_text() -> String {
    "Done.".into()
}

/// One answer.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Step {
    /// Text the model says (before its tool calls).
    #[serde(default)]
    pub text: Option<String>,
    /// Tool calls, in order.
    #[serde(default)]
    pub tool_calls: Vec<ToolCallSpec>,
    /// The usage reported; estimated from the sizes of the request and the answer when
    /// not given.
    #[serde(default)]
    pub usage: Option<UsageSpec>,
    /// An error answer instead (an HTTP status and a message, in the API's error shape).
    #[serde(default)]
    pub error: Option<ErrorSpec>,
}

/// A tool call: one tool, or the first of several that the request offers.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum ToolCallSpec {
    One(ToolCall),
    Any { any: Vec<ToolCall> },
}

impl ToolCallSpec {
    /// The choices, in order of preference.
    pub fn choices(&self) -> &[ToolCall] {
        match self {
            ToolCallSpec::One(c) => std::slice::from_ref(c),
            ToolCallSpec::Any { any } => any,
        }
    }
}

/// A tool and its arguments.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolCall {
    pub name: String,
    #[serde(default = "empty_object")]
    pub args: Value,
}

fn empty_object() -> Value {
    Value::Object(Default::default())
}

/// Tokens reported for one answer. `input` counts every prompt token, `cached` the part of
/// them read from a prompt cache (each API reports that in its own field).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct UsageSpec {
    pub input: u64,
    pub output: u64,
    #[serde(default)]
    pub cached: u64,
}

/// An error answer.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ErrorSpec {
    pub status: u16,
    pub message: String,
}

impl Scenario {
    /// Reads and checks a scenario.
    pub fn parse(text: &str) -> Result<Scenario, ScenarioError> {
        let s: Scenario = toml::from_str(text)
            .map_err(|e| ScenarioError(format!("the scenario is not valid: {e}")))?;
        s.check()?;
        Ok(s)
    }

    /// Reads a scenario file.
    pub fn load(path: &std::path::Path) -> Result<Scenario, ScenarioError> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            ScenarioError(format!("cannot read the scenario {}: {e}", path.display()))
        })?;
        Scenario::parse(&text).map_err(|e| ScenarioError(format!("{}: {}", path.display(), e.0)))
    }

    fn check(&self) -> Result<(), ScenarioError> {
        for (i, step) in self.steps.iter().enumerate() {
            let n = i + 1;
            let bad = |why: String| Err(ScenarioError(format!("step {n}: {why}")));
            if step.text.is_none() && step.tool_calls.is_empty() && step.error.is_none() {
                return bad(
                    "it has no text, no tool_calls and no error — give at least one".into(),
                );
            }
            if let Some(e) = &step.error {
                if !(400..=599).contains(&e.status) {
                    return bad(format!(
                        "error status {} is not an HTTP error — use 400 to 599",
                        e.status
                    ));
                }
                if step.text.is_some() || !step.tool_calls.is_empty() {
                    return bad("an error step has no text or tool_calls".into());
                }
            }
            for call in &step.tool_calls {
                if call.choices().is_empty() {
                    return bad("`any` lists no tool".into());
                }
                for c in call.choices() {
                    if c.name.trim().is_empty() {
                        return bad("a tool call has an empty name".into());
                    }
                    if !c.args.is_object() {
                        return bad(format!(
                            "the arguments of {} are not a table — write args = {{ … }}",
                            c.name
                        ));
                    }
                }
            }
            if let Some(u) = step.usage {
                if u.cached > u.input {
                    return bad(format!(
                        "usage.cached ({}) is more than usage.input ({}): input counts every prompt token, cached ones included",
                        u.cached, u.input
                    ));
                }
            }
        }
        Ok(())
    }
}

/// The tool a call resolves to among the tools a request offers: the first choice offered
/// by its exact name, else by the end of a longer name after a separator (`board_write`
/// is `mcp__agensh__board_write`), else the first choice as written (the agent then says
/// the tool is unknown, as it would to a model).
pub fn resolve<'a>(
    call: &'a ToolCallSpec,
    offered: &[OfferedTool],
) -> (&'a ToolCall, Option<OfferedTool>) {
    let choices = call.choices();
    for c in choices {
        if let Some(t) = offered.iter().find(|t| t.name == c.name) {
            return (c, Some(t.clone()));
        }
    }
    for c in choices {
        if let Some(t) = offered.iter().find(|t| ends_with_name(&t.name, &c.name)) {
            return (c, Some(t.clone()));
        }
    }
    (&choices[0], None)
}

fn ends_with_name(offered: &str, name: &str) -> bool {
    offered
        .strip_suffix(name)
        .is_some_and(|head| head.ends_with(['_', '.', '/', ':', '-']))
}

/// A tool a request offers: its name, and the namespace it sits in (the Responses API
/// groups MCP tools under one).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OfferedTool {
    pub name: String,
    pub namespace: Option<String>,
}

impl OfferedTool {
    pub fn plain(name: &str) -> OfferedTool {
        OfferedTool {
            name: name.to_string(),
            namespace: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scenario_reads_with_its_defaults() {
        let s = Scenario::parse(
            "[[step]]\ntext = \"hi\"\n\
             [[step]]\ntool_calls = [{ name = \"Bash\", args = { command = \"ls\" } }]\n\
             usage = { input = 10, output = 2, cached = 4 }\n",
        )
        .unwrap();
        assert_eq!(s.side_text, "ok");
        assert_eq!(s.steps.len(), 2);
        assert_eq!(
            s.steps[1].usage,
            Some(UsageSpec {
                input: 10,
                output: 2,
                cached: 4
            })
        );
    }

    #[test]
    fn a_bad_scenario_says_which_step_and_what_to_do() {
        let err = |t: &str| Scenario::parse(t).unwrap_err().0;
        assert!(err("[[step]]\n").contains("step 1: it has no text"));
        assert!(
            err("[[step]]\nerror = { status = 200, message = \"x\" }\n").contains("use 400 to 599")
        );
        assert!(
            err("[[step]]\ntool_calls = [{ name = \"x\", args = 3 }]\n").contains("not a table")
        );
        assert!(
            err("[[step]]\ntext = \"a\"\nusage = { input = 1, output = 1, cached = 2 }\n")
                .contains("more than usage.input")
        );
        assert!(err("[[step]]\ntext = \"a\"\nbogus = 1\n").contains("not valid"));
    }

    #[test]
    fn a_call_resolves_to_the_first_offered_choice_exact_names_first() {
        let s = Scenario::parse(
            "[[step]]\ntool_calls = [\
             { any = [{ name = \"Bash\" }, { name = \"run_shell_command\" }] },\
             { name = \"board_write\" }]\n",
        )
        .unwrap();
        let calls = &s.steps[0].tool_calls;
        let offered = [
            OfferedTool::plain("run_shell_command"),
            OfferedTool::plain("mcp__agensh__board_write"),
            OfferedTool::plain("board_write_all"),
        ];
        let (c, t) = resolve(&calls[0], &offered);
        assert_eq!(c.name, "run_shell_command");
        assert_eq!(t.unwrap().name, "run_shell_command");
        let (_, t) = resolve(&calls[1], &offered);
        assert_eq!(t.unwrap().name, "mcp__agensh__board_write");
        // Not offered at all: the first choice as written.
        let (c, t) = resolve(&calls[0], &[]);
        assert_eq!((c.name.as_str(), t), ("Bash", None));
    }
}
