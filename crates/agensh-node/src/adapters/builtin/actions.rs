//! The tools as the model sees them, in both calling styles: OpenAI function definitions
//! (`tools`), or one JSON-schema `anyOf` with a branch per tool for a constrained decoder
//! (`response_format`), and the parsing of the JSON actions that come back.

use serde_json::{json, Map, Value};

/// The pseudo-tool that ends a turn in JSON style.
pub const END_TURN: &str = "end_turn";

/// The workspace tools' names.
pub const WORKSPACE_TOOLS: &[&str] = &["write_file", "run", "read_file", "edit_file", "list_files"];

/// One tool the model may call.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    /// Its input schema (JSON Schema, an object).
    pub schema: Value,
    /// An organization tool (called over MCP), not a workspace tool.
    pub org: bool,
}

fn string(description: &str) -> Value {
    json!({ "type": "string", "description": description })
}

fn integer(description: &str) -> Value {
    json!({ "type": "integer", "description": description })
}

fn object(properties: Value, required: &[&str]) -> Value {
    json!({ "type": "object", "properties": properties, "required": required })
}

/// The workspace tools: files and a shell in the checkout.
pub fn workspace_specs() -> Vec<ToolSpec> {
    let spec = |name: &str, description: &str, schema: Value| ToolSpec {
        name: name.to_string(),
        description: description.to_string(),
        schema,
        org: false,
    };
    // The order of the system prompt's list: a small model picks from the top.
    vec![
        spec(
            "write_file",
            "Create or replace a file with content.",
            object(
                json!({ "path": string("the file"), "content": string("the whole new content") }),
                &["path", "content"],
            ),
        ),
        spec(
            "run",
            "Run a shell command in your checkout; shows output and exit code.",
            object(
                json!({
                    "command": string("for sh -c, e.g. python3 test.py"),
                    "timeout_secs": integer("seconds before it is killed"),
                }),
                &["command"],
            ),
        ),
        spec(
            "read_file",
            "Read a text file.",
            object(
                json!({
                    "path": string("the file"),
                    "offset_line": integer("first line to show, from 1"),
                    "max_lines": integer("how many lines to show"),
                }),
                &["path"],
            ),
        ),
        spec(
            "edit_file",
            "Replace the exact text old, found once in the file, with new.",
            object(
                json!({
                    "path": string("the file"),
                    "old": string("exact text now in the file, unique"),
                    "new": string("the replacement"),
                }),
                &["path", "old", "new"],
            ),
        ),
        spec(
            "list_files",
            "List files under a directory (default: all).",
            object(
                json!({ "path": string("a directory, default the checkout's top") }),
                &[],
            ),
        ),
    ]
}

/// The workspace tools of small mode: a part needs no listing (its files come with the
/// claim, and `run` can `ls`), and no `edit_file`: a small model's edits changed nothing or
/// piled copies of a line up (issue 11's runs), while it writes a small file whole well.
/// Its `write_file` takes only a path: the text comes in a code block of its own
/// ([`super::code`]).
pub const SMALL_WORKSPACE_TOOLS: &[&str] = &["write_file", "run", "read_file"];
/// The organization tools of small mode, in the order the prompt lists them: take a part,
/// ship it (commit, push, PR, merge through the gate, PATCH_SUMMARY, release), and post
/// what did not work. No `release`: the agent lets a claim go when the next one is made
/// (a small model released after ship, and other workers' claims, over and over). No
/// messages, no reviews, no board reading: each is a turn a small model spends on talk
/// instead of code.
pub const SMALL_ORG_TOOLS: &[&str] = &["claim", "ship", "board_write"];
/// When the hub offers no `ship`: the pull-request tools it stands for.
pub const SMALL_FALLBACK_TOOLS: &[&str] = &["pr_open", "pr_merge"];
/// Arguments small mode leaves out of organization tools: long and rarely needed, or
/// (`ship`'s branch and claim) right by default and wrong when a small model fills them in
/// (it shipped "main" and "feature/fibonacci").
const SMALL_DROPPED: &[&str] = &["detail", "lease_secs", "branch", "claim"];

/// The board kinds small mode posts: FAIL, and PATCH_SUMMARY only when there is no `ship`
/// to post it. Everything else a small model posts is chatter.
pub fn small_board_kinds(ship: bool) -> &'static [&'static str] {
    if ship {
        &["FAIL"]
    } else {
        &["FAIL", "PATCH_SUMMARY"]
    }
}

/// A record small mode posts, made to fit: a text over its kind's limit is cut to it at a
/// word and kept whole in `detail` (small mode offers no `detail`, and a small model does
/// not shorten on request: it sent the same traceback again).
pub fn small_record(args: Value) -> Value {
    let kind = args.get("kind").and_then(Value::as_str).unwrap_or("");
    match agensh_domain::record::RecordKind::parse(kind.trim()) {
        Ok(kind) => fit_text(args, kind),
        Err(_) => args,
    }
}

/// A claim small mode makes, made to fit as [`small_record`] does: its text cut at a word,
/// the whole of it in `detail` (the model sent a 203-character claim again and again).
pub fn small_claim(args: Value) -> Value {
    fit_text(args, agensh_domain::record::RecordKind::Claim)
}

/// `args["text"]` cut to `kind`'s limit at a word, kept whole in `detail` (unless the
/// model gave one).
fn fit_text(mut args: Value, kind: agensh_domain::record::RecordKind) -> Value {
    let limit = kind.text_limit();
    let Some(text) = args.get("text").and_then(Value::as_str).map(str::to_string) else {
        return args;
    };
    if text.chars().count() <= limit {
        return args;
    }
    let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
    let mut short: String = flat.chars().take(limit - 1).collect();
    if let Some(at) = short.rfind(' ').filter(|&at| at > limit / 2) {
        short.truncate(at);
    }
    short.push('…');
    args["text"] = Value::String(short);
    if args.get("detail").and_then(Value::as_str).is_none() {
        let detail: String = text
            .chars()
            .take(agensh_domain::record::DETAIL_LIMIT)
            .collect();
        args["detail"] = Value::String(detail);
    }
    args
}

/// A label small mode sends, made valid: a small model writes labels like titles
/// (`w01: hello`, `Prime numbers`) and, refused, sends the same one again until its turn
/// ends. Characters a label may not hold are dropped, a run of them between two words
/// becomes one `-` (none after `:` or `/`), and the result is cut to the label limit. A
/// valid label, and one with nothing valid left, are kept as they are (the hub then says
/// what is wrong).
pub fn small_label(mut args: Value) -> Value {
    let Some(raw) = args.get("label").and_then(Value::as_str) else {
        return args;
    };
    if agensh_domain::record::validate_label(raw).is_ok() {
        return args;
    }
    let mut label = String::new();
    let mut gap = false;
    for c in raw.trim().chars() {
        if agensh_domain::record::is_label_char(c) {
            if gap && !label.is_empty() && !label.ends_with(['-', ':', '/']) {
                label.push('-');
            }
            gap = false;
            label.push(c);
        } else {
            gap = true;
        }
    }
    let label: String = label
        .chars()
        .take(agensh_domain::record::LABEL_LIMIT)
        .collect();
    if agensh_domain::record::validate_label(&label).is_ok() {
        args["label"] = Value::String(label);
    }
    args
}

/// The tools of small mode out of `specs`: [`SMALL_WORKSPACE_TOOLS`] and
/// [`SMALL_ORG_TOOLS`] (or [`SMALL_FALLBACK_TOOLS`] without `ship`), the organization tools
/// with one-sentence descriptions, without [`SMALL_DROPPED`] arguments, and `board_write`
/// limited to [`small_board_kinds`].
pub fn small_specs(specs: Vec<ToolSpec>) -> Vec<ToolSpec> {
    let ship = specs.iter().any(|s| s.org && s.name == "ship");
    let org_order: Vec<&str> = SMALL_ORG_TOOLS
        .iter()
        .chain(if ship { &[][..] } else { SMALL_FALLBACK_TOOLS })
        .copied()
        .collect();
    let mut out: Vec<ToolSpec> = specs
        .iter()
        .filter(|s| !s.org && SMALL_WORKSPACE_TOOLS.contains(&s.name.as_str()))
        .cloned()
        .map(|mut s| {
            if s.name == "write_file" {
                s.description =
                    "Write a whole file: you are then asked for its text, as a code block."
                        .to_string();
                s.schema = object(json!({ "path": string("the file") }), &["path"]);
            }
            s
        })
        .collect();
    for name in org_order {
        let Some(spec) = specs.iter().find(|s| s.org && s.name == name) else {
            continue;
        };
        let mut schema = sanitize(&spec.schema);
        if let Some(props) = schema.get_mut("properties").and_then(Value::as_object_mut) {
            props.retain(|k, _| !SMALL_DROPPED.contains(&k.as_str()));
            if name == "board_write" {
                if let Some(kind) = props.get_mut("kind") {
                    *kind = json!({ "type": "string", "enum": small_board_kinds(ship) });
                }
            }
        }
        let description = if name == "board_write" {
            "Post a FAIL record: an approach that did not work, so peers do not repeat it."
                .to_string()
        } else {
            first_sentence(&spec.description, 100)
        };
        out.push(ToolSpec {
            name: spec.name.clone(),
            description,
            schema,
            org: true,
        });
    }
    out
}

/// An organization tool from the hub's `tools/list`.
pub fn org_spec(t: &agensh_client::mcp::ToolInfo) -> ToolSpec {
    let schema = if t.input_schema.is_object() {
        t.input_schema.clone()
    } else {
        json!({ "type": "object", "properties": {} })
    };
    ToolSpec {
        name: t.name.clone(),
        description: t.description.clone().unwrap_or_default(),
        schema,
        org: true,
    }
}

/// `name(a, b?): first sentence of the description` — one line for a system prompt.
pub fn signature_line(spec: &ToolSpec, max_description: usize) -> String {
    format!(
        "{}: {}",
        signature(spec),
        first_sentence(&spec.description, max_description)
    )
}

/// `name(a, b?)`: the tool and its parameters, optional ones with `?`.
pub fn signature(spec: &ToolSpec) -> String {
    let required: Vec<&str> = spec
        .schema
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let params: Vec<String> = spec
        .schema
        .get("properties")
        .and_then(Value::as_object)
        .map(|p| {
            property_order(p, spec.schema.get("required"))
                .into_iter()
                .map(|k| {
                    if required.contains(&k) {
                        k.to_string()
                    } else {
                        format!("{k}?")
                    }
                })
                .collect()
        })
        .unwrap_or_default();
    format!("{}({})", spec.name, params.join(", "))
}

/// The first sentence of `text`, at most `max` characters: cut at a clause (`:`, `;`,
/// ` —`, `,`) when one ends far enough in, else at a word with `…`.
pub fn first_sentence(text: &str, max: usize) -> String {
    let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
    let end = flat.find(". ").map(|i| i + 1).unwrap_or(flat.len());
    let s = &flat[..end];
    if s.chars().count() <= max {
        return s.to_string();
    }
    let cut: String = s.chars().take(max).collect();
    for sep in [": ", "; ", " — ", ", "] {
        if let Some(i) = cut.rfind(sep) {
            if i >= max / 3 {
                return cut[..i].to_string();
            }
        }
    }
    match cut.rfind(' ') {
        Some(i) if i > max / 2 => format!("{}…", &cut[..i]),
        _ => format!("{cut}…"),
    }
}

/// The `tools` array of a chat request (OpenAI function format); `short` keeps only each
/// description's first sentence and the schemas' essentials (for small windows).
pub fn openai_tools(specs: &[ToolSpec], short: bool) -> Value {
    Value::Array(
        specs
            .iter()
            .map(|s| {
                let (description, parameters) = if short {
                    (first_sentence(&s.description, 160), sanitize(&s.schema))
                } else {
                    (s.description.clone(), s.schema.clone())
                };
                json!({
                    "type": "function",
                    "function": {
                        "name": s.name,
                        "description": description,
                        "parameters": parameters,
                    },
                })
            })
            .collect(),
    )
}

/// The schema of one JSON action: `{"tool": NAME, "args": {…}}`, one branch per tool and
/// one for `end_turn` (`{"tool":"end_turn","args":{"summary":…}}`).
pub fn action_schema(specs: &[ToolSpec]) -> Value {
    let mut branches: Vec<Value> = specs
        .iter()
        .map(|s| branch(&s.name, sanitize(&s.schema)))
        .collect();
    branches.push(branch(
        END_TURN,
        object(
            json!({ "summary": string("what you did and what is left") }),
            &["summary"],
        ),
    ));
    json!({ "anyOf": branches })
}

fn branch(name: &str, args: Value) -> Value {
    json!({
        "type": "object",
        "properties": { "tool": { "const": name }, "args": args },
        "required": ["tool", "args"],
    })
}

/// The keywords a grammar converter (llama.cpp's) follows reliably; others are dropped
/// (the hub validates every argument anyway and answers with what to fix).
const KEPT: &[&str] = &[
    "type",
    "properties",
    "required",
    "enum",
    "items",
    "const",
    "anyOf",
    "description",
];

/// `schema` reduced to [`KEPT`] keywords, recursively; `required` lists only properties
/// that exist; an object always has `properties`.
pub fn sanitize(schema: &Value) -> Value {
    let Some(obj) = schema.as_object() else {
        return json!({});
    };
    let mut out = Map::new();
    for (k, v) in obj {
        if !KEPT.contains(&k.as_str()) {
            continue;
        }
        let v = match k.as_str() {
            "properties" => match v.as_object() {
                Some(p) => Value::Object(p.iter().map(|(n, s)| (n.clone(), sanitize(s))).collect()),
                None => continue,
            },
            "items" => sanitize(v),
            "anyOf" => match v.as_array() {
                Some(a) => Value::Array(a.iter().map(sanitize).collect()),
                None => continue,
            },
            _ => v.clone(),
        };
        out.insert(k.clone(), v);
    }
    let is_object = out.get("type").and_then(Value::as_str) == Some("object");
    if is_object && !out.contains_key("properties") {
        out.insert("properties".into(), json!({}));
    }
    if let (Some(req), Some(props)) = (
        out.get("required").and_then(Value::as_array).cloned(),
        out.get("properties").and_then(Value::as_object).cloned(),
    ) {
        let req: Vec<Value> = req
            .into_iter()
            .filter(|r| r.as_str().is_some_and(|r| props.contains_key(r)))
            .collect();
        out.insert("required".into(), Value::Array(req));
    }
    Value::Object(out)
}

/// The names of `properties` in the order a model should produce them: the `required`
/// ones in `required`'s order, then the rest (alphabetically).
fn property_order<'a>(
    properties: &'a Map<String, Value>,
    required: Option<&'a Value>,
) -> Vec<&'a str> {
    let mut order: Vec<&str> = required
        .and_then(Value::as_array)
        .map(|r| {
            r.iter()
                .filter_map(Value::as_str)
                .filter(|k| properties.contains_key(*k))
                .collect()
        })
        .unwrap_or_default();
    // The others by name, whatever order the map keeps its keys in (serde_json's
    // `preserve_order` is on in this build).
    let mut rest: Vec<&str> = properties
        .keys()
        .map(String::as_str)
        .filter(|k| !order.contains(k))
        .collect();
    rest.sort_unstable();
    order.extend(rest);
    order
}

/// `v` as JSON text with the keys of every schema object in a useful order: each
/// `properties` map required-first (see [`property_order`]) — a grammar built from the
/// schema makes the model write properties in this order, so `tool` comes before `args`
/// and a file's `path` before its `content`.
pub fn ordered_json(v: &Value) -> String {
    let mut out = String::new();
    write_ordered(v, &mut out);
    out
}

fn write_ordered(v: &Value, out: &mut String) {
    match v {
        Value::Object(m) => {
            out.push('{');
            for (i, (k, val)) in m.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(k.clone()).to_string());
                out.push(':');
                match (k.as_str(), val.as_object()) {
                    ("properties", Some(props)) => {
                        out.push('{');
                        for (j, name) in property_order(props, m.get("required")).iter().enumerate()
                        {
                            if j > 0 {
                                out.push(',');
                            }
                            out.push_str(&Value::String(name.to_string()).to_string());
                            out.push(':');
                            write_ordered(&props[*name], out);
                        }
                        out.push('}');
                    }
                    _ => write_ordered(val, out),
                }
            }
            out.push('}');
        }
        Value::Array(a) => {
            out.push('[');
            for (i, item) in a.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_ordered(item, out);
            }
            out.push(']');
        }
        other => out.push_str(&other.to_string()),
    }
}

/// One action of a JSON-style reply.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    Tool { name: String, args: Value },
    EndTurn { summary: String },
}

/// Reads a JSON-style reply: `{"tool": NAME, "args": {…}}` (also `name`/`action` for the
/// tool, and arguments given beside it instead of in `args`), in a code fence or not.
/// The error text says what to send instead.
pub fn parse_action(content: &str, known: &dyn Fn(&str) -> bool) -> Result<Action, String> {
    let text = content.trim();
    let (Some(start), Some(end)) = (text.find('{'), text.rfind('}')) else {
        return Err(format!(
            "your reply is not a JSON action. Reply with one JSON object like {{\"tool\": \"list_files\", \"args\": {{}}}}, or {{\"tool\": \"{END_TURN}\", \"args\": {{\"summary\": \"…\"}}}} when done"
        ));
    };
    let v: Value = if start < end {
        serde_json::from_str(&text[start..=end]).map_err(|e| {
            format!("your reply is not valid JSON ({e}). Reply with exactly one JSON action")
        })?
    } else {
        return Err("your reply is not valid JSON. Reply with exactly one JSON action".into());
    };
    let Some(obj) = v.as_object() else {
        return Err("the action must be a JSON object with \"tool\" and \"args\"".into());
    };
    let name = ["tool", "name", "action"]
        .iter()
        .find_map(|k| obj.get(*k).and_then(Value::as_str))
        .map(str::to_string)
        .ok_or("the action has no \"tool\": say which tool to use, e.g. {\"tool\": \"read_file\", \"args\": {\"path\": \"README.md\"}}")?;
    let args = match obj.get("args").or_else(|| obj.get("arguments")) {
        Some(a) => a.clone(),
        None => Value::Object(
            obj.iter()
                .filter(|(k, _)| !["tool", "name", "action"].contains(&k.as_str()))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        ),
    };
    if name == END_TURN {
        let summary = args
            .get("summary")
            .or_else(|| obj.get("summary"))
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        return Ok(Action::EndTurn { summary });
    }
    if !known(&name) {
        return Err(format!(
            "unknown tool {name:?}; use one of the tools listed in the system prompt, or {END_TURN}"
        ));
    }
    Ok(Action::Tool { name, args })
}

#[cfg(test)]
mod tests {

    #[test]
    fn a_long_claim_is_cut_at_a_word_with_the_whole_text_in_detail() {
        let text = "Implement the part w01 by writing the file w01.txt with one line saying hello, then run its check and ship it with a short title as the goal says";
        let out = small_claim(json!({ "text": text, "label": "w01" }));
        let short = out["text"].as_str().unwrap();
        assert!(short.chars().count() <= 100, "{short}");
        assert!(short.ends_with("run its check…"), "{short}");
        assert_eq!(out["detail"], text);
        assert_eq!(out["label"], "w01");
        // A short claim is left alone.
        let ok = json!({ "text": "w01 hello", "label": "w01" });
        assert_eq!(small_claim(ok.clone()), ok);
    }

    #[test]
    fn small_labels_are_made_valid_and_valid_ones_kept() {
        let label = |l: &str| small_label(json!({ "label": l }))["label"].clone();
        assert_eq!(label("w01: hello"), json!("w01:hello"));
        assert_eq!(label("Prime numbers!"), json!("Prime-numbers"));
        assert_eq!(label("'primes'"), json!("primes"));
        assert_eq!(label("parser-errors"), json!("parser-errors"));
        // Nothing valid left: kept, for the hub to refuse with its own words.
        assert_eq!(label("  ?? "), json!("  ?? "));
        let long = "word ".repeat(40);
        let cut = label(&long);
        assert_eq!(cut.as_str().unwrap().chars().count(), 64);
        assert!(agensh_domain::record::validate_label(cut.as_str().unwrap()).is_ok());
        // No label: nothing added.
        assert_eq!(small_label(json!({ "text": "x" })), json!({ "text": "x" }));
    }

    #[test]
    fn a_long_record_of_small_mode_is_cut_at_a_word_and_kept_whole_in_detail() {
        let long = "ImportError: Failed to import test module: tests/test_primes Traceback (most recent call last): File loader.py, line 162";
        let r = small_record(json!({ "kind": "FAIL", "text": long, "label": "primes" }));
        let text = r["text"].as_str().unwrap();
        assert!(
            text.chars().count() <= agensh_domain::record::TEXT_LIMIT,
            "{text}"
        );
        assert!(
            text.ends_with('…') && text.starts_with("ImportError: Failed"),
            "{text}"
        );
        assert_eq!(r["detail"], long);
        assert_eq!(r["label"], "primes");
        let short = json!({ "kind": "FAIL", "text": "sed broke it" });
        assert_eq!(small_record(short.clone()), short);
    }

    #[test]
    fn small_mode_writes_whole_files_from_a_path() {
        let specs = small_specs(workspace_specs());
        assert_eq!(specs[0].name, "write_file");
        assert_eq!(specs[0].schema["required"], json!(["path"]));
        assert!(specs[0].schema["properties"].get("content").is_none());
    }

    use super::*;

    #[test]
    fn sanitize_keeps_what_grammars_follow() {
        let s = json!({
            "type": "object",
            "properties": {
                "text": { "type": "string", "minLength": 1, "maxLength": 500, "description": "d" },
                "to": { "type": "string", "pattern": "^w[0-9]+$" },
                "paths": { "type": "array", "maxItems": 3, "items": { "type": "string", "maxLength": 9 } },
                "kind": { "type": "string", "enum": ["FACT", "FAIL"] },
            },
            "required": ["text", "gone"],
            "additionalProperties": false,
        });
        assert_eq!(
            sanitize(&s),
            json!({
                "type": "object",
                "properties": {
                    "text": { "type": "string", "description": "d" },
                    "to": { "type": "string" },
                    "paths": { "type": "array", "items": { "type": "string" } },
                    "kind": { "type": "string", "enum": ["FACT", "FAIL"] },
                },
                "required": ["text"],
            })
        );
        assert_eq!(
            sanitize(&json!({ "type": "object", "additionalProperties": false })),
            json!({ "type": "object", "properties": {} })
        );
    }

    #[test]
    fn actions_parse_leniently_and_fail_with_advice() {
        let known = |n: &str| WORKSPACE_TOOLS.contains(&n);
        assert_eq!(
            parse_action(
                "```json\n{\"tool\": \"run\", \"args\": {\"command\": \"ls\"}}\n```",
                &known
            ),
            Ok(Action::Tool {
                name: "run".into(),
                args: json!({ "command": "ls" })
            })
        );
        assert_eq!(
            parse_action("{\"tool\": \"read_file\", \"path\": \"a\"}", &known),
            Ok(Action::Tool {
                name: "read_file".into(),
                args: json!({ "path": "a" })
            })
        );
        assert_eq!(
            parse_action(
                "{\"tool\":\"end_turn\",\"args\":{\"summary\":\"done\"}}",
                &known
            ),
            Ok(Action::EndTurn {
                summary: "done".into()
            })
        );
        assert_eq!(
            parse_action("{\"tool\":\"end_turn\",\"summary\":\"ok\"}", &known),
            Ok(Action::EndTurn {
                summary: "ok".into()
            })
        );
        assert!(parse_action("I will now write", &known)
            .unwrap_err()
            .contains("not a JSON action"));
        assert!(parse_action("{\"tool\": \"fly\", \"args\": {}}", &known)
            .unwrap_err()
            .contains("unknown tool"));
        assert!(parse_action("{\"tool\": \"run\", \"args\": {", &known).is_err());
    }

    #[test]
    fn signatures_are_one_short_line() {
        let specs = workspace_specs();
        let read = specs.iter().find(|s| s.name == "read_file").unwrap();
        assert_eq!(
            signature_line(read, 80),
            "read_file(path, max_lines?, offset_line?): Read a text file."
        );
        assert_eq!(
            first_sentence("Append a record to the board. Share findings early.", 80),
            "Append a record to the board."
        );
        assert_eq!(
            first_sentence("Read the shared board: the records peers posted since your last read, newest first", 60),
            "Read the shared board"
        );
        assert_eq!(
            first_sentence("List files (default: all).", 60),
            "List files (default: all)."
        );
    }

    #[test]
    fn ordered_json_puts_required_properties_first() {
        let s = action_schema(&workspace_specs());
        let text = ordered_json(&s);
        assert_eq!(serde_json::from_str::<Value>(&text).unwrap(), s);
        let edit = text.find("\"const\":\"edit_file\"").unwrap();
        let args = text[edit..].find("\"args\"").unwrap() + edit;
        let branch = &text[edit - 40..];
        assert!(branch.find("\"tool\"").unwrap() < branch.find("\"args\"").unwrap());
        let (p, o, n) = (
            text[args..].find("\"path\"").unwrap(),
            text[args..].find("\"old\"").unwrap(),
            text[args..].find("\"new\"").unwrap(),
        );
        assert!(p < o && o < n, "{}", &text[args..args + 300]);
    }

    #[test]
    fn short_tool_definitions_keep_the_first_sentence_and_the_essentials() {
        let spec = ToolSpec {
            name: "board_write".into(),
            description: "Append a record to the board. Share findings early.".into(),
            schema: json!({ "type": "object", "properties": { "text": { "type": "string", "maxLength": 9 } }, "required": ["text"], "additionalProperties": false }),
            org: true,
        };
        let full = openai_tools(std::slice::from_ref(&spec), false);
        assert_eq!(
            full[0]["function"]["description"],
            spec.description.as_str()
        );
        assert_eq!(full[0]["function"]["parameters"], spec.schema);
        let short = openai_tools(&[spec], true);
        assert_eq!(short[0]["type"], "function");
        assert_eq!(short[0]["function"]["name"], "board_write");
        assert_eq!(
            short[0]["function"]["description"],
            "Append a record to the board."
        );
        assert_eq!(
            short[0]["function"]["parameters"],
            json!({ "type": "object", "properties": { "text": { "type": "string" } }, "required": ["text"] })
        );
    }

    fn org(name: &str, properties: Value) -> ToolSpec {
        ToolSpec {
            name: name.into(),
            description: format!("{name} does it. More words."),
            schema: json!({ "type": "object", "properties": properties, "required": ["text"] }),
            org: true,
        }
    }

    #[test]
    fn small_mode_keeps_the_few_tools_a_part_needs() {
        let mut specs = workspace_specs();
        for n in [
            "board_read",
            "board_write",
            "msg_dm",
            "claim",
            "release",
            "pr_open",
            "pr_merge",
        ] {
            specs.push(org(n, json!({ "text": {}, "detail": {}, "lease_secs": {}, "kind": { "enum": ["FACT", "OBSERVED", "FAIL", "PATCH_SUMMARY"] } })));
        }
        let names = |v: &[ToolSpec]| v.iter().map(|s| s.name.clone()).collect::<Vec<_>>();
        let small = small_specs(specs.clone());
        assert_eq!(
            names(&small),
            [
                "write_file",
                "run",
                "read_file",
                "claim",
                "board_write",
                "pr_open",
                "pr_merge"
            ]
        );
        let claim = small.iter().find(|s| s.name == "claim").unwrap();
        assert_eq!(claim.description, "claim does it.");
        let props = claim.schema["properties"].as_object().unwrap();
        assert!(!props.contains_key("detail") && !props.contains_key("lease_secs"));
        let board = small.iter().find(|s| s.name == "board_write").unwrap();
        assert_eq!(
            board.schema["properties"]["kind"]["enum"],
            json!(["FAIL", "PATCH_SUMMARY"])
        );
        // With ship, the pull-request tools go and the board takes only FAIL; ship goes to
        // the worker's own branch and releases its claims.
        specs.push(org(
            "ship",
            json!({ "text": {}, "branch": {}, "claim": {}, "label": {} }),
        ));
        let small = small_specs(specs);
        assert_eq!(
            names(&small),
            [
                "write_file",
                "run",
                "read_file",
                "claim",
                "ship",
                "board_write"
            ]
        );
        let board = small.iter().find(|s| s.name == "board_write").unwrap();
        assert_eq!(board.schema["properties"]["kind"]["enum"], json!(["FAIL"]));
        let ship = small.iter().find(|s| s.name == "ship").unwrap();
        let props = ship.schema["properties"].as_object().unwrap();
        let mut kept: Vec<&str> = props.keys().map(String::as_str).collect();
        kept.sort();
        assert_eq!(kept, ["label", "text"]);
    }

    #[test]
    fn the_action_schema_has_a_branch_per_tool_and_end_turn() {
        let s = action_schema(&workspace_specs());
        let names: Vec<&str> = s["anyOf"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| b["properties"]["tool"]["const"].as_str().unwrap())
            .collect();
        assert_eq!(
            names,
            [
                "write_file",
                "run",
                "read_file",
                "edit_file",
                "list_files",
                "end_turn"
            ]
        );
    }
}
