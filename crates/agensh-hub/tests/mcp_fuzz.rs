//! A property test of every MCP tool's arguments (issue 15): for each tool `tools/list`
//! gives, many `tools/call` requests with generated arguments — plausible values, wrong
//! types, missing and unknown fields, strings past their limits and near `hub.body_limit`,
//! control and invisible characters, deep nesting, numbers out of range — and bodies broken
//! on the wire: truncated JSON, invalid UTF-8, lone surrogates, nesting past the parser's
//! limit, more than `hub.body_limit` bytes. Every answer must come within 10 s, never be a
//! 5xx, and be a well-formed JSON-RPC response (or the documented HTTP error shape). Then
//! nothing is stored partly: every record, message, pull request and issue the API shows is
//! complete, and none carries the marker of a call that was refused.
//!
//! The generator is a small seeded PRNG (splitmix64): a failure names its case and seed,
//! and `AGENSH_FUZZ_SEED=<n>` runs another sequence.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::org::{self, Org};
use reqwest::Method;
use serde_json::{json, Map, Value};

/// Calls per tool.
const CASES_PER_TOOL: usize = 120;
/// The longest an answer may take.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(10);

/// splitmix64: small, seeded, good enough to spread cases.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..n`.
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    /// True `percent` times in a hundred.
    fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }

    fn pick<T: Clone>(&mut self, items: &[T]) -> T {
        items[self.below(items.len())].clone()
    }
}

/// Values a field of any name may get that are of the wrong type or out of range.
fn odd_value(rng: &mut Rng) -> Value {
    match rng.below(16) {
        0 => Value::Null,
        1 => json!(true),
        2 => json!(3.5),
        3 => json!(-1),
        4 => json!(u64::MAX),
        5 => json!(i64::MIN),
        6 => json!(1e308),
        7 => json!(-0.0),
        8 => json!([]),
        9 => json!({}),
        10 => json!([1, "a", null]),
        11 => json!({"a": {"b": [1]}}),
        12 => json!(""),
        13 => json!("   "),
        14 => json!("99999999999999999999999"),
        _ => json!(0),
    }
}

/// A piece of text that the hub's text rules refuse or must handle: controls, bidi,
/// invisible characters, combining marks, astral characters.
fn odd_text(rng: &mut Rng) -> &'static str {
    rng.pick(&[
        "\u{1b}[31mred\u{1b}[0m",
        "nul\u{0}byte",
        "\u{202e}reversed",
        "\u{200b}\u{2060}\u{feff}",
        "lone\rcr",
        "next\u{85}line",
        "two\nlines",
        "tab\there",
        "e\u{301}\u{301}\u{301}",
        "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 🦀",
        "pаrser",
        "\u{7f}del",
        "../../etc/passwd",
        "%00%ff",
        "\\u0000",
    ])
}

/// Plausible values by the argument's name, so that some calls get past the first checks
/// and reach the store (the organization's ids, branches and labels).
fn plausible(rng: &mut Rng, name: &str, marker: &str) -> Option<Value> {
    let v = match name {
        "id" | "claim" => json!(rng.pick(&["G1", "G2", "g1", "1", "G3", "G999", "G0"])),
        "n" | "number" | "pr" => {
            if rng.chance(50) {
                json!(rng.below(4) + 1)
            } else {
                json!(rng.pick(&["1", "#1", "#2", "0", "x"]))
            }
        }
        "branch" => json!(rng.pick(&["w01/work", "w01/ship", "w02/x", "main", "w01/../main"])),
        "to" | "channel" => json!(rng.pick(&["w02", "w01", "#general", "#fuzz", "w99", "##"])),
        "label" => json!(rng.pick(&["parser", "fuzz", "a/b:c#d", "bad label"])),
        "kind" => json!(rng.pick(&["FACT", "OBSERVED", "FAIL", "PATCH_SUMMARY", "CLAIM", "fact"])),
        "verdict" => json!(rng.pick(&["approve", "request_changes", "request-changes", "lgtm"])),
        "assignee" => json!(rng.pick(&["w01", "w02", "none", "w99", "admin"])),
        "state" => json!(rng.pick(&["open", "closed", "all", "merged", "done"])),
        "labels" => json!([rng.pick(&["bug", "good first issue", "a,b", ""])]),
        "query" | "q" => json!(rng.pick(&[
            "parser".to_string(),
            "kind:CLAIM".to_string(),
            format!("{marker} OR parser"),
            "\"unclosed".to_string(),
            "-".to_string(),
        ])),
        "paths" => json!([rng.pick(&["src/parser.rs", "src/", "/abs", "a/../b", ""])]),
        _ => return None,
    };
    Some(v)
}

/// A value for the argument `name` with JSON Schema `schema`, of a kind drawn from
/// `kinds` (0–49 plausible, 50–99 odd in one way or another).
fn value_for(
    rng: &mut Rng,
    kinds: std::ops::Range<usize>,
    name: &str,
    schema: &Value,
    marker: &str,
    body_limit: usize,
) -> Value {
    let max = schema["maxLength"].as_u64().unwrap_or(100) as usize;
    match kinds.start + rng.below(kinds.len()) {
        // Plausible, by name or by the schema.
        0..=49 => {
            if rng.chance(60) {
                if let Some(v) = plausible(rng, name, marker) {
                    return v;
                }
            }
            if let Some(e) = schema["enum"].as_array() {
                return rng.pick(e);
            }
            match schema["type"].as_str() {
                Some("integer") => {
                    let min = schema["minimum"].as_u64().unwrap_or(0);
                    let top = schema["maximum"].as_u64().unwrap_or(min + 100);
                    json!(min + rng.next() % (top - min + 1))
                }
                Some("array") => {
                    let n = rng.below(3);
                    json!((0..n)
                        .map(|i| format!("src/{marker}{i}.rs"))
                        .collect::<Vec<_>>())
                }
                Some("boolean") => json!(rng.chance(50)),
                _ => {
                    // Marked text of a length around the limit.
                    let mut s = format!("fuzz {marker} text");
                    let target = rng.below(max + 1);
                    while s.chars().count() < target {
                        s.push_str(" word");
                    }
                    json!(s)
                }
            }
        }
        50..=61 => odd_value(rng),
        // Too long: one past the limit, or most of the body limit.
        62..=69 => {
            let len = match rng.below(3) {
                0 => max + 1,
                1 => 10_000,
                _ => body_limit.saturating_sub(400 + rng.below(300)),
            };
            let mut s = format!("{marker} ");
            while s.len() < len {
                s.push_str(rng.pick(&["x", "é", "字", "🦀", " "]));
            }
            json!(s)
        }
        70..=81 => json!(format!("{marker} {}", odd_text(rng))),
        // Nested deeper than any schema asks, past serde_json's limit of 128 at times.
        82..=87 => {
            let depth = rng.pick(&[5usize, 40, 120, 127, 200]);
            let mut v = json!(marker);
            for i in 0..depth {
                v = if i % 2 == 0 {
                    json!([v])
                } else {
                    json!({ "k": v })
                };
            }
            v
        }
        88..=93 => json!(rng
            .pick(&[
                json!(-1),
                json!(0),
                json!(u64::MAX),
                json!(i64::MAX),
                json!(1e20),
                json!(-1e20),
                json!(0.5),
                json!("-3"),
                json!("18446744073709551616"),
            ])
            .clone()),
        _ => json!(rng.pick(&[
            "",
            " ",
            "G-1",
            "#",
            "g99999999999999999999",
            "w01/",
            "\u{0}"
        ])),
    }
}

/// The arguments of one call of a tool with `schema`: required fields usually present,
/// optional ones half the time, unknown fields now and then, or not an object at all. A
/// third of the calls are plausible but for at most one argument, so that they reach the
/// store.
fn arguments(rng: &mut Rng, schema: &Value, marker: &str, body_limit: usize) -> Value {
    if rng.chance(4) {
        return odd_value(rng);
    }
    let near_valid = rng.chance(35);
    let required: Vec<&str> = schema["required"]
        .as_array()
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let mut args = Map::new();
    for (name, prop) in schema["properties"].as_object().into_iter().flatten() {
        let present = if required.contains(&name.as_str()) {
            near_valid || rng.chance(90)
        } else {
            rng.chance(50)
        };
        if present {
            let kinds = if near_valid { 0..50 } else { 0..100 };
            let v = value_for(rng, kinds, name, prop, marker, body_limit);
            args.insert(name.clone(), v);
        }
    }
    if near_valid && !args.is_empty() && rng.chance(60) {
        let names: Vec<String> = args.keys().cloned().collect();
        let name = rng.pick(&names);
        let v = value_for(
            rng,
            50..100,
            &name,
            &schema["properties"][&name],
            marker,
            body_limit,
        );
        args.insert(name, v);
    }
    if rng.chance(10) {
        let key = rng
            .pick(&["extra", "", "__proto__", "text\u{0}", "kind "])
            .to_string();
        args.insert(key, odd_value(rng));
    }
    Value::Object(args)
}

/// What was done to a request's body on its way out.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Wire {
    /// Sent as serialized.
    Whole,
    /// Cut short at some byte.
    Truncated,
    /// A byte that is not UTF-8 put in.
    BadUtf8,
    /// A lone surrogate `\ud800` put in a string.
    LoneSurrogate,
    /// `[` repeated far past any parser's depth.
    DeepArrays,
    /// Padded to just over `hub.body_limit`.
    OverLimit,
    /// Padded to just under `hub.body_limit`.
    UnderLimit,
}

/// Breaks `body` as `wire` says.
fn on_the_wire(rng: &mut Rng, mut body: Vec<u8>, wire: Wire, body_limit: usize) -> Vec<u8> {
    match wire {
        Wire::Whole => {}
        Wire::Truncated => body.truncate(rng.below(body.len())),
        Wire::BadUtf8 => {
            let at = 1 + rng.below(body.len() - 1);
            let bad: &[u8] = rng.pick(&[&[0xff][..], &[0xc3], &[0xed, 0xa0, 0x80], &[0x80, 0x80]]);
            body.splice(at..at, bad.iter().copied());
        }
        Wire::LoneSurrogate => {
            // Inside the first string value after `"name":"`.
            let text = String::from_utf8_lossy(&body).into_owned();
            let at = text.find("\"name\":\"").map_or(1, |i| i + 8);
            body.splice(at..at, br"\ud800".iter().copied());
        }
        Wire::DeepArrays => {
            let depth = 100_000.min(body_limit - 100);
            body = br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"board_write","arguments":"#.to_vec();
            body.extend(std::iter::repeat_n(b'[', depth));
        }
        Wire::OverLimit | Wire::UnderLimit => {
            // JSON allows whitespace before the closing brace.
            let want = if wire == Wire::OverLimit {
                body_limit + 1 + rng.below(64)
            } else {
                body_limit - rng.below(64)
            };
            if body.len() < want {
                let close = body.pop().expect("a JSON object ends in }");
                body.resize(want - 1, b' ');
                body.push(close);
            }
        }
    }
    body
}

/// One call: what was sent and how it was answered.
struct Outcome {
    status: u16,
    body: Value,
}

async fn post(org: &Org, token: &str, as_worker: Option<&str>, body: Vec<u8>) -> Outcome {
    let mut r = reqwest::Client::new()
        .post(format!("{}/mcp", org.hub().url))
        .bearer_auth(token)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(body);
    if let Some(w) = as_worker {
        r = r.header("x-agensh-as", w);
    }
    let answer = tokio::time::timeout(ANSWER_TIMEOUT, async {
        let resp = r.send().await.expect("the hub answers");
        let status = resp.status().as_u16();
        (status, resp.bytes().await.expect("the body is read"))
    })
    .await;
    let (status, bytes) = answer.expect("an answer within the timeout");
    let body = serde_json::from_slice(&bytes).unwrap_or_else(|_| {
        Value::String(format!("not JSON: {}", String::from_utf8_lossy(&bytes)))
    });
    Outcome { status, body }
}

/// Problems with a JSON-RPC response `v` to request `id`; an empty list when well formed.
fn jsonrpc_problems(v: &Value, id: &Value, tools_call: bool) -> Vec<String> {
    let mut p = Vec::new();
    let Some(o) = v.as_object() else {
        return vec![format!("not a JSON object: {v}")];
    };
    if o.get("jsonrpc") != Some(&json!("2.0")) {
        p.push("jsonrpc is not \"2.0\"".into());
    }
    match o.get("id") {
        Some(got) if got == id || got.is_null() => {}
        other => p.push(format!("id {other:?}, sent {id}")),
    }
    match (o.get("result"), o.get("error")) {
        (Some(r), None) => {
            if tools_call {
                let content = r["content"].as_array();
                if content.is_none_or(|c| c.is_empty()) {
                    p.push("a tools/call result without content".into());
                }
                for c in content.into_iter().flatten() {
                    if c["type"] != "text" || !c["text"].is_string() {
                        p.push(format!("content that is not text: {c}"));
                    }
                }
                if !r["isError"].is_boolean() {
                    p.push("isError is not a boolean".into());
                }
            }
        }
        (None, Some(e)) => {
            if !e["code"].is_i64() {
                p.push(format!("an error without an integer code: {e}"));
            }
            if e["message"].as_str().is_none_or(|m| m.trim().is_empty()) {
                p.push(format!("an error without a message: {e}"));
            }
        }
        _ => p.push("not exactly one of result and error".into()),
    }
    if o.keys()
        .any(|k| !["jsonrpc", "id", "result", "error"].contains(&k.as_str()))
    {
        p.push(format!("fields other than the envelope's: {v}"));
    }
    p
}

/// Whether `v` is the hub's HTTP error shape `{"error":{"code","message"}}`.
fn is_api_error(v: &Value) -> bool {
    v.as_object().is_some_and(|o| o.len() == 1)
        && v["error"]["code"].is_string()
        && v["error"]["message"].is_string()
}

/// Every string in `v`, for finding markers.
fn strings<'a>(v: &'a Value, out: &mut Vec<&'a str>) {
    match v {
        Value::String(s) => out.push(s),
        Value::Array(a) => a.iter().for_each(|x| strings(x, out)),
        Value::Object(o) => o.values().for_each(|x| strings(x, out)),
        _ => {}
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_tool_argument_breaks_the_hub_or_stores_anything_partly() {
    let seed: u64 = std::env::var("AGENSH_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(15);
    let mut config = common::config();
    // Fuzzing should reach the tools, not the rate limits (tested in tests/limits.rs).
    config.limits.requests_per_sec = 0.0;
    config.limits.burst = 0;
    config.limits.records_per_hour = 0;
    config.limits.record_bytes_per_hour = 0;
    config.limits.messages_per_hour = 0;
    let body_limit = config.hub.body_limit;
    let org = org::example_with(config).await;
    let admin = org.hub().admin_token.clone();
    let callers: [(&str, &str, Option<&str>); 4] = [
        ("w01", org.token("w01"), None),
        ("w02", org.token("w02"), None),
        ("admin as w01", &admin, Some("w01")),
        ("admin", &admin, None),
    ];

    let listed = post(
        &org,
        org.token("w01"),
        None,
        br#"{"jsonrpc":"2.0","id":0,"method":"tools/list"}"#.to_vec(),
    )
    .await;
    assert_eq!(listed.status, 200, "{}", listed.body);
    let tools = listed.body["result"]["tools"].as_array().unwrap().clone();
    let names: Vec<&str> = tools.iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names, agensh_hub::mcp::tools::names());

    let mut rng = Rng(seed);
    let mut refused: Vec<String> = Vec::new();
    let mut accepted = 0usize;
    let mut by_outcome: BTreeMap<String, usize> = BTreeMap::new();
    let mut problems = Vec::new();
    let mut case = 0usize;
    for tool in &tools {
        let name = tool["name"].as_str().unwrap();
        for _ in 0..CASES_PER_TOOL {
            case += 1;
            let marker = format!("qmk{seed}x{case}");
            let args = arguments(&mut rng, &tool["inputSchema"], &marker, body_limit);
            let id = json!(case);
            let request = json!({
                "jsonrpc": "2.0",
                "id": id,
                "method": "tools/call",
                "params": { "name": name, "arguments": args },
            });
            let wire = if rng.chance(80) {
                Wire::Whole
            } else {
                rng.pick(&[
                    Wire::Truncated,
                    Wire::BadUtf8,
                    Wire::LoneSurrogate,
                    Wire::DeepArrays,
                    Wire::OverLimit,
                    Wire::UnderLimit,
                ])
            };
            let body = serde_json::to_vec(&request).unwrap();
            let body = on_the_wire(&mut rng, body, wire, body_limit);
            let (who, token, as_worker) = rng.pick(&callers);
            let what = format!(
                "case {case} (seed {seed}): {name} as {who}, {wire:?}, {} bytes, arguments {}",
                body.len(),
                agensh_domain::ids::truncate_for_message(&args.to_string())
            );
            let out = post(&org, token, as_worker, body).await;
            assert!(out.status < 500, "{what}: {} {}", out.status, out.body);
            let ok = match out.status {
                200 => {
                    let p = jsonrpc_problems(&out.body, &id, true);
                    if !p.is_empty() {
                        problems.push(format!("{what}: {p:?}"));
                    }
                    out.body["result"]["isError"] == json!(false)
                }
                400 | 413 => {
                    let p = jsonrpc_problems(&out.body, &Value::Null, false);
                    if !p.is_empty() && !is_api_error(&out.body) {
                        problems.push(format!("{what}: {} {p:?}", out.status));
                    }
                    false
                }
                status => {
                    problems.push(format!("{what}: {status} {}", out.body));
                    false
                }
            };
            // A whole request must reach the tool; a broken one must not.
            if wire != Wire::Whole && wire != Wire::UnderLimit && out.status == 200 {
                problems.push(format!(
                    "{what}: a broken body was answered 200: {}",
                    out.body
                ));
            }
            let outcome = if ok {
                "ok".to_string()
            } else if out.status == 200 && out.body.get("result").is_some() {
                "tool error".to_string()
            } else {
                format!("{} {}", out.status, out.body["error"]["code"])
            };
            *by_outcome.entry(outcome).or_default() += 1;
            if ok {
                accepted += 1;
            } else {
                refused.push(marker);
            }
        }
    }
    assert!(
        problems.is_empty(),
        "answers off the protocol:\n{}",
        problems.join("\n")
    );
    assert!(
        accepted >= tools.len(),
        "too few calls got through to be a test: {by_outcome:?}"
    );
    eprintln!("{case} calls: {by_outcome:?}");

    // Nothing stored partly: everything the API shows is complete, and nothing carries
    // the marker of a refused call.
    let mut stored: Vec<Value> = Vec::new();
    let mut seq = 1;
    loop {
        let (status, body) = org
            .call(
                Method::GET,
                &format!("/api/v1/board/records/{seq}"),
                None,
                None,
            )
            .await;
        if status == 404 {
            break;
        }
        assert_eq!(status, 200, "record {seq}: {body}");
        let r = &body["record"];
        assert_eq!(r["seq"], seq, "{body}");
        assert_eq!(r["id"], format!("G{seq}"), "{body}");
        for field in ["kind", "author", "text"] {
            assert!(
                r[field].as_str().is_some_and(|s| !s.trim().is_empty()),
                "record {seq} without {field}: {body}"
            );
        }
        assert!(r["created_at"].as_i64().is_some_and(|t| t > 0), "{body}");
        assert_eq!(r["kind"] == "CLAIM", r["lease"].is_object(), "{body}");
        stored.push(body);
        seq += 1;
    }
    let (status, stats) = org.call(Method::GET, "/api/v1/stats", None, None).await;
    assert_eq!(status, 200, "{stats}");
    let mut messages = BTreeMap::new();
    for with in ["", "&with=w01", "&with=w02", "&with=%23general"] {
        let (status, list) = org
            .call(
                Method::GET,
                &format!("/api/v1/messages?limit=1000{with}"),
                None,
                None,
            )
            .await;
        assert_eq!(status, 200, "{list}");
        for m in list.as_array().unwrap() {
            for field in ["from", "to", "text"] {
                assert!(
                    m[field].as_str().is_some_and(|s| !s.trim().is_empty()),
                    "a message without {field}: {m}"
                );
            }
            messages.insert(m["seq"].as_i64().unwrap(), m.clone());
        }
    }
    stored.extend(messages.into_values());
    let (status, prs) = org
        .call(Method::GET, "/api/v1/prs?limit=500", None, None)
        .await;
    assert_eq!(status, 200, "{prs}");
    for pr in prs.as_array().unwrap() {
        for field in ["author", "branch", "title", "state"] {
            assert!(
                pr[field].as_str().is_some_and(|s| !s.trim().is_empty()),
                "a PR without {field}: {pr}"
            );
        }
        let (status, full) = org
            .call(
                Method::GET,
                &format!("/api/v1/prs/{}", pr["number"]),
                None,
                None,
            )
            .await;
        assert_eq!(status, 200, "{full}");
        for r in full["reviews"]
            .as_array()
            .unwrap()
            .iter()
            .chain(full["comments"].as_array().unwrap())
        {
            assert!(
                r["text"].as_str().is_some_and(|s| !s.trim().is_empty()),
                "{full}"
            );
        }
        stored.push(full);
    }
    let (status, issues) = org
        .call(
            Method::GET,
            "/api/v1/issues?state=all&limit=500",
            None,
            None,
        )
        .await;
    assert_eq!(status, 200, "{issues}");
    for issue in issues.as_array().unwrap() {
        for field in ["author", "title", "state"] {
            assert!(
                issue[field].as_str().is_some_and(|s| !s.trim().is_empty()),
                "an issue without {field}: {issue}"
            );
        }
        let (status, full) = org
            .call(
                Method::GET,
                &format!("/api/v1/issues/{}", issue["number"]),
                None,
                None,
            )
            .await;
        assert_eq!(status, 200, "{full}");
        for c in full["comments"].as_array().unwrap() {
            assert!(
                c["text"].as_str().is_some_and(|s| !s.trim().is_empty()),
                "{full}"
            );
        }
        stored.push(full);
    }
    let mut texts = Vec::new();
    for v in &stored {
        strings(v, &mut texts);
    }
    let leaked: Vec<(&String, &&str)> = refused
        .iter()
        .filter_map(|m| {
            // `qmk15x3` must not match `qmk15x31`.
            texts
                .iter()
                .find(|t| {
                    t.match_indices(m.as_str())
                        .any(|(i, _)| !t[i + m.len()..].starts_with(|c: char| c.is_ascii_digit()))
                })
                .map(|t| (m, t))
        })
        .collect();
    assert!(
        leaked.is_empty(),
        "stored by calls that were refused (marker, stored text): {leaked:?}"
    );
    eprintln!(
        "{} records, {} PRs, {} issues, stats {stats}",
        seq - 1,
        prs.as_array().unwrap().len(),
        issues.as_array().unwrap().len()
    );
    org.shutdown().await;
}
