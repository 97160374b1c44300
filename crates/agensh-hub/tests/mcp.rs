//! The organization tools over MCP at `/mcp`, driven by a real MCP client (the `rmcp`
//! crate's streamable-HTTP client) against a real hub over HTTP and SQLite; plus raw
//! JSON-RPC checks of the transport.

mod common;

use std::collections::{BTreeSet, HashMap};
use std::path::PathBuf;
use std::sync::Arc;

use agensh_domain::event::{kinds, Priority};
use agensh_domain::message::NewMessage;
use agensh_domain::record::RecordKind;
use agensh_testkit::Org;
use common::{rec, TestHub};
use reqwest::header::{HeaderName, HeaderValue};
use rmcp::model::{CallToolRequestParams, CallToolResult, ClientConfig, ProtocolVersion};
use rmcp::service::RunningService;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::{ClientLifecycleMode, ClientServiceExt, RoleClient, ServiceExt};
use serde_json::{json, Value};

type Mcp = RunningService<RoleClient, ClientConfig>;

/// An MCP client session with the hub at `url`, with `token` (and `X-Agensh-As: as_worker`).
async fn connect_as(url: &str, token: &str, as_worker: Option<&str>) -> Mcp {
    let mut config =
        StreamableHttpClientTransportConfig::with_uri(format!("{url}/mcp")).auth_header(token);
    if let Some(id) = as_worker {
        let mut headers = HashMap::new();
        headers.insert(
            HeaderName::from_static("x-agensh-as"),
            HeaderValue::from_str(id).unwrap(),
        );
        config = config.custom_headers(headers);
    }
    ClientConfig::default()
        .serve(StreamableHttpClientTransport::from_config(config))
        .await
        .expect("the MCP client connects")
}

async fn connect(url: &str, token: &str) -> Mcp {
    connect_as(url, token, None).await
}

/// Calls `tool` with `args` (a JSON object).
async fn call(c: &Mcp, tool: &str, args: Value) -> CallToolResult {
    let args = args.as_object().expect("arguments are an object").clone();
    c.call_tool(CallToolRequestParams::new(tool.to_string()).with_arguments(args))
        .await
        .unwrap_or_else(|e| panic!("{tool} answers: {e:?}"))
}

/// The texts of a result's content blocks, with ages in seconds shown as `+0s` (a slow
/// machine may take a second between a write and the read that shows it).
fn texts(r: &CallToolResult) -> Vec<String> {
    r.content
        .iter()
        .map(|c| seconds_as_zero(&c.as_text().expect("text content").text))
        .collect()
}

/// `text` with every `+<n>s` written `+0s`.
fn seconds_as_zero(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(i) = rest.find('+') {
        out.push_str(&rest[..=i]);
        rest = &rest[i + 1..];
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits > 0 && rest[digits..].starts_with('s') {
            out.push('0');
            rest = &rest[digits..];
        }
    }
    out.push_str(rest);
    out
}

/// The main text of a successful result.
fn ok_text(r: &CallToolResult) -> String {
    assert_eq!(r.is_error, Some(false), "the call succeeds: {:?}", texts(r));
    texts(r)[0].clone()
}

/// The `notices:` block of a result, if any.
fn notices(r: &CallToolResult) -> Option<String> {
    let t = texts(r);
    assert!(t.len() <= 2, "at most a result and a notices block: {t:?}");
    t.get(1).map(|n| {
        assert!(
            n.starts_with("notices:"),
            "second block is the notices: {n}"
        );
        n.clone()
    })
}

#[tokio::test]
async fn initialize_and_tools_list_give_every_tool_with_a_schema_and_a_description() {
    let hub = TestHub::start().await;
    let tokens = hub.tokens(1).await;
    let c = connect(hub.url(), &tokens[0]).await;

    let info = c.peer_info().expect("the server answered initialize");
    let server = info.server_info.as_ref().expect("serverInfo");
    assert_eq!(server.name, "agensh");
    assert_eq!(server.version, env!("CARGO_PKG_VERSION"));
    // rmcp asks for a version past 2025-11-25; the hub answers its newest.
    assert_eq!(info.protocol_version.as_str(), "2025-11-25");
    assert!(info.capabilities.tools.is_some(), "tools capability");
    assert!(info
        .instructions
        .as_deref()
        .unwrap_or("")
        .contains("You are worker w01"));

    let tools = c.list_all_tools().await.expect("tools/list");
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    assert_eq!(names, agensh_hub::mcp::tools::names());
    for t in &tools {
        let d = t.description.as_deref().unwrap_or("");
        assert!(d.len() > 40, "{} has a real description: {d:?}", t.name);
        let schema = &t.input_schema;
        assert_eq!(schema["type"], "object", "{}", t.name);
        let props = schema["properties"].as_object().expect("properties");
        for r in schema["required"].as_array().expect("required") {
            let r = r.as_str().unwrap();
            assert!(
                props.contains_key(r),
                "{}: required {r} is a property",
                t.name
            );
        }
    }
    let schema = |name: &str| {
        tools
            .iter()
            .find(|t| t.name == name)
            .unwrap()
            .input_schema
            .clone()
    };
    let w = schema("board_write");
    assert_eq!(w["required"], json!(["kind", "text"]));
    assert_eq!(w["properties"]["text"]["maxLength"], 300);
    assert_eq!(w["properties"]["label"]["maxLength"], 64);
    assert_eq!(w["properties"]["detail"]["maxLength"], 8000);
    assert_eq!(
        w["properties"]["kind"]["enum"],
        json!(["FACT", "OBSERVED", "FAIL", "PATCH_SUMMARY"])
    );
    assert_eq!(schema("claim")["properties"]["text"]["maxLength"], 100);
    assert_eq!(
        schema("pr_review")["properties"]["verdict"]["enum"],
        json!(["approve", "request_changes"])
    );
    let write = tools.iter().find(|t| t.name == "board_write").unwrap();
    assert!(write
        .description
        .as_deref()
        .unwrap()
        .contains("at most 100 characters (PATCH_SUMMARY 300); put longer content in detail"));
    c.cancel().await.unwrap();
}

#[tokio::test]
async fn the_hub_echoes_a_supported_protocol_version() {
    let hub = TestHub::start().await;
    let tokens = hub.tokens(1).await;
    let transport = StreamableHttpClientTransport::from_config(
        StreamableHttpClientTransportConfig::with_uri(format!("{}/mcp", hub.url()))
            .auth_header(tokens[0].clone()),
    );
    let c = ClientConfig::default()
        .with_protocol_version(ProtocolVersion::V_2025_06_18)
        .serve(transport)
        .await
        .unwrap();
    assert_eq!(
        c.peer_info().unwrap().protocol_version.as_str(),
        "2025-06-18"
    );
    let r = call(&c, "workers", json!({})).await;
    assert!(ok_text(&r).contains("w01 (you) stopped"), "{:?}", texts(&r));
    c.cancel().await.unwrap();
}

#[tokio::test]
async fn a_client_probing_the_newest_protocol_falls_back_to_initialize() {
    // A 2026-07-28 client first sends `server/discover` labelled with that version; the
    // hub, which has no discover yet, answers "method not found", and the client
    // initializes with the newest version the hub speaks.
    let hub = TestHub::start().await;
    let tokens = hub.tokens(1).await;
    let transport = StreamableHttpClientTransport::from_config(
        StreamableHttpClientTransportConfig::with_uri(format!("{}/mcp", hub.url()))
            .auth_header(tokens[0].clone()),
    );
    let c = ClientConfig::default()
        .serve_with_lifecycle(
            transport,
            ClientLifecycleMode::Auto {
                preferred_versions: vec![ProtocolVersion::V_2026_07_28],
                legacy_version: None,
            },
        )
        .await
        .expect("the client falls back to initialize");
    assert_eq!(
        c.peer_info().unwrap().protocol_version.as_str(),
        "2025-11-25"
    );
    let r = call(&c, "workers", json!({})).await;
    assert!(ok_text(&r).contains("w01 (you) stopped"), "{:?}", texts(&r));
    c.cancel().await.unwrap();
}

#[tokio::test]
async fn board_write_then_read_grep_and_unfold_through_mcp() {
    let hub = TestHub::start().await;
    let tokens = hub.tokens(2).await;
    let a = connect(hub.url(), &tokens[0]).await;
    let b = connect(hub.url(), &tokens[1]).await;

    let r = call(
        &a,
        "board_write",
        json!({"kind": "FACT", "text": "the lexer drops trailing newlines", "label": "lexer", "detail": "seen in tests/lex.rs:42"}),
    )
    .await;
    let text = ok_text(&r);
    assert!(
        text.starts_with("posted G1 [w01/FACT +0s] the lexer drops trailing newlines #lexer"),
        "{text}"
    );
    let sc = r.structured_content.as_ref().expect("structured content");
    assert_eq!(sc["record"]["id"], "G1");
    assert_eq!(sc["record"]["author"], "w01");
    // The kind is matched without regard to case, as over REST.
    let r = call(
        &a,
        "board_write",
        json!({"kind": "fail", "text": "regex lexer: too slow on 1 MB inputs", "label": "lexer"}),
    )
    .await;
    assert!(ok_text(&r).starts_with("posted G2 [w01/FAIL"));

    let r = call(&b, "board_read", json!({})).await;
    let text = ok_text(&r);
    assert_eq!(
        text,
        "2 new record(s) on the board, newest first:\n\
         G2 [w01/FAIL +0s] regex lexer: too slow on 1 MB inputs #lexer\n\
         G1 [w01/FACT +0s] the lexer drops trailing newlines #lexer (+detail)"
    );
    // board_read showed them: the notices do not repeat them.
    assert_eq!(notices(&r), None);
    assert_eq!(
        r.structured_content.as_ref().unwrap()["records"][0]["id"],
        "G2"
    );
    let r = call(&b, "board_read", json!({})).await;
    assert_eq!(
        ok_text(&r),
        "nothing new on the board since your last board_read"
    );

    let r = call(&b, "board_grep", json!({"query": "lexer kind:FACT"})).await;
    let text = ok_text(&r);
    assert!(text.starts_with("1 record(s) match"), "{text}");
    assert!(text.contains("G1 [w01/FACT"), "{text}");
    let r = call(
        &b,
        "board_grep",
        json!({"query": "label:lexer", "limit": 1}),
    )
    .await;
    assert!(ok_text(&r).contains("before=\"G2\""), "paging hint");
    let r = call(
        &b,
        "board_grep",
        json!({"query": "label:lexer", "before": "G2"}),
    )
    .await;
    assert!(ok_text(&r).contains("G1 [w01/FACT"));
    let r = call(&b, "board_grep", json!({"query": "(lexer"})).await;
    assert_eq!(r.is_error, Some(true));
    assert!(
        texts(&r)[0].starts_with("refused (bad_query):"),
        "{:?}",
        texts(&r)
    );

    let r = call(&b, "board_unfold", json!({"id": "g1"})).await;
    let text = ok_text(&r);
    assert!(text.starts_with("G1 FACT by w01 at "), "{text}");
    assert!(text.contains("label: lexer"), "{text}");
    assert!(text.contains("detail:\nseen in tests/lex.rs:42"), "{text}");
    let r = call(&b, "board_unfold", json!({"id": 12})).await;
    assert_eq!(r.is_error, Some(true));
    assert!(texts(&r)[0].contains("unknown_record"), "{:?}", texts(&r));
}

#[tokio::test]
async fn a_claim_reports_overlapping_live_claims_and_who_holds_them() {
    let hub = TestHub::start().await;
    let tokens = hub.tokens(2).await;
    let a = connect(hub.url(), &tokens[0]).await;
    let b = connect(hub.url(), &tokens[1]).await;

    let r = call(
        &a,
        "claim",
        json!({"text": "rewriting the parser", "label": "parser", "paths": ["src/parser/"]}),
    )
    .await;
    let text = ok_text(&r);
    assert!(text.starts_with("claimed G1 [w01/CLAIM"), "{text}");
    assert!(
        text.contains("no other worker's live claim overlaps it"),
        "{text}"
    );
    assert!(text.contains("lease: live until"), "{text}");

    let r = call(
        &b,
        "claim",
        json!({"text": "parser error messages", "paths": ["src/parser/errors.rs"], "lease_secs": 600}),
    )
    .await;
    let text = ok_text(&r);
    assert!(
        text.contains("OVERLAP: 1 live claim(s) by other workers collide with G2:"),
        "{text}"
    );
    assert!(
        text.contains("- G1 held by w01 (paths src/parser/; expires in "),
        "{text}"
    );
    assert!(text.contains("rewriting the parser"), "{text}");
    assert!(
        text.contains("msg_dm the holder (w01) to split or hand over the work, or release G2 and pick other work"),
        "{text}"
    );
    let sc = r.structured_content.as_ref().unwrap();
    assert_eq!(sc["overlaps"][0]["author"], "w01");
    assert!(sc["record"]["lease"]["expires_at"].as_i64().is_some());

    // workers shows who holds what; renew and release work on one's own claim only.
    let r = call(&a, "workers", json!({})).await;
    let text = ok_text(&r);
    assert!(text.contains("w01 (you) stopped"), "{text}");
    assert!(
        text.contains("claims: G1 \"rewriting the parser\" #parser"),
        "{text}"
    );
    assert!(text.contains("w02 stopped"), "{text}");
    let r = call(&a, "renew", json!({"id": "G2"})).await;
    assert_eq!(r.is_error, Some(true));
    assert!(texts(&r)[0].contains("not_your_claim"), "{:?}", texts(&r));
    let r = call(&b, "renew", json!({"id": "G2", "lease_secs": 7200})).await;
    assert!(ok_text(&r).starts_with("renewed G2: live until"));
    let r = call(&b, "release", json!({"id": "G2"})).await;
    assert_eq!(ok_text(&r), "released G2: parser error messages");
    let r = call(&b, "release", json!({"id": "G2"})).await;
    assert!(texts(&r)[0].contains("claim_released"), "{:?}", texts(&r));
    // Releasing a record that is not a claim names the claims one holds.
    let r = call(
        &b,
        "board_write",
        json!({"kind": "FAIL", "text": "regex parser too slow"}),
    )
    .await;
    let fail = ok_text(&r).split_whitespace().nth(1).unwrap().to_string();
    let r = call(&a, "release", json!({"id": fail})).await;
    let refused = &texts(&r)[0];
    assert!(refused.contains("not_a_claim"), "{refused}");
    assert!(
        refused.contains("pass the id of one of your claims (your live claims: G1 (parser))"),
        "{refused}"
    );
    let r = call(&b, "release", json!({"id": fail})).await;
    assert!(
        texts(&r)[0].contains("(you hold no live claim)"),
        "{:?}",
        texts(&r)
    );
}

#[tokio::test]
async fn a_limit_violation_is_a_tool_error_with_the_hubs_message() {
    let hub = TestHub::start().await;
    let tokens = hub.tokens(1).await;
    let a = connect(hub.url(), &tokens[0]).await;

    let r = call(
        &a,
        "board_write",
        json!({"kind": "FACT", "text": "x".repeat(143)}),
    )
    .await;
    assert_eq!(r.is_error, Some(true));
    let text = &texts(&r)[0];
    assert_eq!(
        text,
        "refused (text_too_long): FACT text is 143 characters; the limit is 100 — shorten it or move the rest to detail"
    );
    let sc = r.structured_content.as_ref().unwrap();
    assert_eq!(sc["error"]["code"], "text_too_long");
    common::assert_board_empty(&hub.admin(), "xxx").await;

    // A missing argument is a tool error too, naming the argument.
    let r = call(&a, "board_write", json!({"kind": "FACT"})).await;
    assert_eq!(r.is_error, Some(true));
    assert!(
        texts(&r)[0].contains("board_write needs `text`"),
        "{:?}",
        texts(&r)
    );
    // An unknown kind gets the hub's own advice.
    let r = call(&a, "board_write", json!({"kind": "TRIED", "text": "x"})).await;
    assert!(texts(&r)[0].contains("use one of OBSERVED, FACT, FAIL, CLAIM, PATCH_SUMMARY"));
}

#[tokio::test]
async fn a_terminal_escape_is_a_tool_error_and_nothing_is_stored() {
    let hub = TestHub::start().await;
    let tokens = hub.tokens(1).await;
    let a = connect(hub.url(), &tokens[0]).await;

    let r = call(
        &a,
        "board_write",
        json!({"kind": "FACT", "text": "quokka", "detail": "\u{1b}]0;owned\u{7}"}),
    )
    .await;
    assert_eq!(r.is_error, Some(true));
    assert_eq!(
        texts(&r)[0],
        "refused (control_chars): detail contains an escape character (U+001B) at character 1 — remove terminal control sequences; plain text only"
    );
    common::assert_board_empty(&hub.admin(), "quokka").await;

    let r = call(
        &a,
        "msg_post",
        json!({"channel": "#general", "text": "hello \u{202E}dlrow"}),
    )
    .await;
    assert_eq!(r.is_error, Some(true));
    assert!(
        texts(&r)[0].starts_with(
            "refused (control_chars): message contains a bidirectional control character (U+202E)"
        ),
        "{:?}",
        texts(&r)
    );
}

#[tokio::test]
async fn a_dm_reaches_the_next_tool_result_as_a_notice_once() {
    let hub = TestHub::start().await;
    let clients = hub.workers(2).await;
    let tokens: Vec<String> = {
        let admin = hub.admin();
        let mut t = Vec::new();
        for id in ["w01", "w02"] {
            t.push(admin.worker_token(id).await.unwrap().token);
        }
        t
    };
    let a = connect(hub.url(), &tokens[0]).await;

    clients[1]
        .send_message(&NewMessage {
            to: "w01".into(),
            text: "can I take src/parser/errors.rs?\nI would start now".into(),
            thread: None,
        })
        .await
        .unwrap();

    let r = call(&a, "pr_list", json!({})).await;
    assert_eq!(ok_text(&r), "no pull requests match");
    let n = notices(&r).expect("the DM is in the notices");
    assert!(
        n.contains("- DM M1 from w02 (+0s): can I take src/parser/errors.rs?\n    I would start now — answer with msg_dm to=\"w02\""),
        "{n}"
    );
    assert_eq!(
        r.structured_content.as_ref().unwrap()["notices"],
        json!(n),
        "structured content carries the notices too"
    );
    assert_eq!(
        r.structured_content.as_ref().unwrap()["summary"],
        json!("no pull requests match"),
        "and the text meant for the model: agents that show their model only the structured content (Claude Code, Codex) see it"
    );
    // Acknowledged: the next call does not show it again, and the queue is empty.
    let r = call(&a, "workers", json!({})).await;
    assert_eq!(notices(&r), None);
    assert!(clients[0].events(0, 0).await.unwrap().is_empty());
    // The message itself is still unread in the inbox.
    let r = call(&a, "inbox", json!({})).await;
    assert!(ok_text(&r).contains("M1 DM from w02 +0s: can I take"));

    // Answering by MCP reaches w02 over REST.
    let r = call(&a, "msg_dm", json!({"to": "w02", "text": "yes, take it"})).await;
    assert_eq!(ok_text(&r), "sent M2 to w02");
    let events = clients[1].events(0, 0).await.unwrap();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].kind, kinds::DIRECT_MESSAGE);
    assert_eq!(events[0].payload["from"], "w01");
}

#[tokio::test]
async fn a_channel_post_is_not_a_notice_and_stays_queued() {
    let hub = TestHub::start().await;
    let tokens = hub.tokens(2).await;
    let a = connect(hub.url(), &tokens[0]).await;
    let b_rest = hub.client(&tokens[1]);
    let a_rest = hub.client(&tokens[0]);

    b_rest
        .send_message(&NewMessage {
            to: "#general".into(),
            text: "lexer is done".into(),
            thread: None,
        })
        .await
        .unwrap();
    let r = call(&a, "workers", json!({})).await;
    assert_eq!(
        notices(&r),
        None,
        "normal priority waits for the turn boundary"
    );
    let r = call(&a, "workers", json!({})).await;
    assert_eq!(notices(&r), None);
    let pending = a_rest.events(0, 0).await.unwrap();
    assert_eq!(pending.len(), 1);
    assert_eq!(pending[0].kind, kinds::CHANNEL_POST);
    assert_eq!(pending[0].priority, Priority::Normal);

    // Peers' board records are urgent: a digest, once.
    b_rest
        .post_record(&rec(RecordKind::Fact, "parser handles unary minus"))
        .await
        .unwrap();
    let r = call(&a, "inbox", json!({})).await;
    assert!(ok_text(&r).contains("M1 #general from w02 +0s: lexer is done"));
    let n = notices(&r).expect("the board digest");
    assert_eq!(
        n,
        "notices:\n- board: 1 new record(s) by peers:\n  G1 [w02/FACT +0s] parser handles unary minus"
    );
    let r = call(&a, "workers", json!({})).await;
    assert_eq!(notices(&r), None);
    // The channel post is still pending; the board record is acknowledged.
    let kinds_left: Vec<String> = a_rest
        .events(0, 0)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.kind)
        .collect();
    assert_eq!(kinds_left, vec![kinds::CHANNEL_POST.to_string()]);

    // A post over MCP reaches peers as a normal event.
    let r = call(
        &a,
        "msg_post",
        json!({"channel": "general", "text": "parser next"}),
    )
    .await;
    assert_eq!(ok_text(&r), "posted M2 to #general");
    let r = call(&a, "msg_dm", json!({"to": "#general", "text": "x"})).await;
    assert!(texts(&r)[0].contains("msg_post"), "{:?}", texts(&r));
}

#[tokio::test]
async fn parallel_tool_calls_never_show_a_notice_twice() {
    let hub = TestHub::start().await;
    let tokens = hub.tokens(2).await;
    let a = Arc::new(connect(hub.url(), &tokens[0]).await);
    let b_rest = hub.client(&tokens[1]);
    for i in 0..5 {
        b_rest
            .send_message(&NewMessage {
                to: "w01".into(),
                text: format!("dm {i}"),
                thread: None,
            })
            .await
            .unwrap();
    }
    let mut set = tokio::task::JoinSet::new();
    for _ in 0..8 {
        let a = a.clone();
        set.spawn(async move { call(&a, "workers", json!({})).await });
    }
    let mut shown = Vec::new();
    while let Some(r) = set.join_next().await {
        if let Some(n) = notices(&r.unwrap()) {
            shown.extend(
                n.lines()
                    .filter(|l| l.starts_with("- DM"))
                    .map(str::to_string),
            );
        }
    }
    shown.sort();
    assert_eq!(shown.len(), 5, "each DM shown exactly once: {shown:?}");
    shown.dedup();
    assert_eq!(shown.len(), 5);
}

#[tokio::test]
async fn a_wrong_token_gets_401_and_no_session() {
    let hub = TestHub::start().await;
    hub.tokens(1).await;
    let init = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#;
    let answer = hub
        .raw(
            reqwest::Method::POST,
            "/mcp",
            Some("agw_0000000000000000000000000000000000000000"),
            Some(init),
        )
        .await;
    common::api_error(&answer, 401, "unauthorized");
    let answer = hub
        .raw(reqwest::Method::POST, "/mcp", None, Some(init))
        .await;
    common::api_error(&answer, 401, "unauthorized");

    let transport = StreamableHttpClientTransport::from_config(
        StreamableHttpClientTransportConfig::with_uri(format!("{}/mcp", hub.url()))
            .auth_header("agw_0000000000000000000000000000000000000000"),
    );
    let refused = ClientConfig::default().serve(transport).await;
    assert!(refused.is_err(), "the MCP client cannot connect");
}

#[tokio::test]
async fn no_call_can_act_as_another_worker() {
    let hub = TestHub::start().await;
    let tokens = hub.tokens(2).await;
    let init = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#;
    let resp = reqwest::Client::new()
        .post(format!("{}/mcp", hub.url()))
        .bearer_auth(&tokens[0])
        .header("x-agensh-as", "w02")
        .header("content-type", "application/json")
        .body(init)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 403);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["error"]["code"], "impersonation");

    // Arguments cannot name an author either: the record is the token's.
    let a = connect(hub.url(), &tokens[0]).await;
    let r = call(
        &a,
        "board_write",
        json!({"kind": "FACT", "text": "written by w01", "author": "w02"}),
    )
    .await;
    assert!(ok_text(&r).contains("[w01/FACT"));
    assert_eq!(hub.admin().unfold("G1").await.unwrap().record.author, "w01");

    // The admin token acts as a worker with X-Agensh-As, as over REST.
    let admin = connect_as(hub.url(), &hub.hub.admin_token, Some("w02")).await;
    let r = call(
        &admin,
        "board_write",
        json!({"kind": "FACT", "text": "by w02"}),
    )
    .await;
    assert!(ok_text(&r).contains("[w02/FACT"), "{:?}", texts(&r));
    // It hears w01's record as a notice, as w02 would.
    let n = notices(&r).expect("w02's notices");
    assert!(n.contains("G1 [w01/FACT"), "{n}");
    // Without X-Agensh-As the admin has no board cursor: a tool error, not a crash.
    let admin = connect(hub.url(), &hub.hub.admin_token).await;
    let r = call(&admin, "board_read", json!({})).await;
    assert_eq!(r.is_error, Some(true));
    assert!(texts(&r)[0].contains("needs_worker"), "{:?}", texts(&r));
    assert_eq!(notices(&r), None);
}

/// Posts one raw JSON-RPC message with `token`; the status, the session header and the body.
async fn rpc(hub: &TestHub, token: &str, body: &str) -> (u16, Option<String>, Value) {
    let resp = reqwest::Client::new()
        .post(format!("{}/mcp", hub.url()))
        .bearer_auth(token)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    let status = resp.status().as_u16();
    let session = resp
        .headers()
        .get("mcp-session-id")
        .map(|v| v.to_str().unwrap().to_string());
    if let Some(ct) = resp.headers().get("content-type") {
        assert_eq!(ct, "application/json");
    }
    let text = resp.text().await.unwrap();
    let body = if text.is_empty() {
        Value::Null
    } else {
        serde_json::from_str(&text).unwrap()
    };
    (status, session, body)
}

#[tokio::test]
async fn the_transport_speaks_plain_json_rpc() {
    let hub = TestHub::start().await;
    let t = &hub.tokens(1).await[0];

    let (status, session, body) = rpc(
        &hub,
        t,
        r#"{"jsonrpc":"2.0","id":"a","method":"initialize","params":{"protocolVersion":"2025-03-26","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#,
    )
    .await;
    assert_eq!(status, 200);
    assert!(session.unwrap().starts_with("mcp-"));
    assert_eq!(body["id"], "a");
    assert_eq!(body["result"]["protocolVersion"], "2025-03-26");
    assert_eq!(body["result"]["capabilities"], json!({"tools": {}}));
    assert_eq!(body["result"]["serverInfo"]["name"], "agensh");
    let (_, _, body) = rpc(
        &hub,
        t,
        r#"{"jsonrpc":"2.0","id":2,"method":"initialize","params":{"protocolVersion":"1999-01-01","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#,
    )
    .await;
    assert_eq!(body["result"]["protocolVersion"], "2025-11-25");

    let (status, _, body) = rpc(
        &hub,
        t,
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
    )
    .await;
    assert_eq!((status, body), (202, Value::Null));
    let (status, _, body) = rpc(&hub, t, r#"{"jsonrpc":"2.0","id":3,"method":"ping"}"#).await;
    assert_eq!(status, 200);
    assert_eq!(body, json!({"jsonrpc":"2.0","id":3,"result":{}}));

    let (status, _, body) = rpc(
        &hub,
        t,
        r#"{"jsonrpc":"2.0","id":4,"method":"resources/list"}"#,
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(body["error"]["code"], -32601);
    assert!(body["error"]["message"]
        .as_str()
        .unwrap()
        .contains("tools/call"));
    let (_, _, body) = rpc(
        &hub,
        t,
        r#"{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"board_erase","arguments":{}}}"#,
    )
    .await;
    assert_eq!(body["error"]["code"], -32602);
    assert!(body["error"]["message"]
        .as_str()
        .unwrap()
        .contains("board_read"));
    let (_, _, body) = rpc(
        &hub,
        t,
        r#"{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"board_read","arguments":[1]}}"#,
    )
    .await;
    assert_eq!(body["error"]["code"], -32602);
    let (_, _, body) = rpc(&hub, t, r#"{"jsonrpc":"2.0","id":7,"method":"tools/call"}"#).await;
    assert_eq!(body["error"]["code"], -32602);
    let (_, _, body) = rpc(
        &hub,
        t,
        r#"{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"board_write","arguments":{"kind":"FACT","text":"raw"}}}"#,
    )
    .await;
    assert_eq!(body["result"]["isError"], false);
    assert_eq!(body["result"]["content"][0]["type"], "text");

    let (status, _, body) = rpc(&hub, t, "{not json").await;
    assert_eq!(status, 400);
    assert_eq!(body["error"]["code"], -32700);
    let (status, _, body) = rpc(&hub, t, r#"[{"jsonrpc":"2.0","id":1,"method":"ping"}]"#).await;
    assert_eq!(status, 400);
    assert!(body["error"]["message"]
        .as_str()
        .unwrap()
        .contains("batches"));
    let (status, _, _) = rpc(&hub, t, r#"{"jsonrpc":"2.0","id":9,"result":{}}"#).await;
    assert_eq!(status, 202, "a client's response is accepted");

    // A version named after initialize must be one the hub speaks.
    let resp = reqwest::Client::new()
        .post(format!("{}/mcp", hub.url()))
        .bearer_auth(t)
        .header("content-type", "application/json")
        .header("mcp-protocol-version", "2031-01-01")
        .header("mcp-session-id", "mcp-from-an-earlier-hub")
        .body(r#"{"jsonrpc":"2.0","id":10,"method":"ping"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 400);

    // No server-initiated stream; sessions end without fuss; browsers' origins are refused.
    let (status, body) = hub.raw(reqwest::Method::GET, "/mcp", Some(t), None).await;
    assert_eq!(status, 405, "{body}");
    let (status, _) = hub
        .raw(reqwest::Method::DELETE, "/mcp", Some(t), None)
        .await;
    assert_eq!(status, 204);
    let resp = reqwest::Client::new()
        .post(format!("{}/mcp", hub.url()))
        .bearer_auth(t)
        .header("origin", "http://evil.example")
        .header("content-type", "application/json")
        .body(r#"{"jsonrpc":"2.0","id":11,"method":"ping"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 403);
}

// ------------------------------------------------------------------ pull requests

/// An organization over a workspace seeded with `shared.txt`, with `n` workers.
async fn start(n: usize) -> Org {
    Org::builder()
        .file("shared.txt", "one\ntwo\nthree\n")
        .config(common::config())
        .workers(n)
        .start()
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pull_requests_through_mcp_with_reviews_and_failed_merges_as_notices() {
    let org = start(2).await;
    let a = connect(&org.hub().url, org.token("w01")).await;
    let b = connect(&org.hub().url, org.token("w02")).await;
    org.push_branch(
        "w01",
        "w01/three",
        &[("shared.txt", "one\ntwo\nTHREE\n")],
        "w01: w01/three",
    )
    .await;
    org.push_branch(
        "w02",
        "w02/three",
        &[("shared.txt", "one\ntwo\n3\n")],
        "w02: w02/three",
    )
    .await;

    let r = call(
        &a,
        "pr_open",
        json!({"branch": "w01/three", "title": "Shout three", "body": "louder"}),
    )
    .await;
    assert_eq!(
        ok_text(&r),
        "opened #1 \"Shout three\" (w01/three -> main); peers are told. Merge it with pr_merge number=1."
    );
    let r = call(
        &a,
        "pr_open",
        json!({"branch": "w02/three", "title": "Not mine"}),
    )
    .await;
    assert!(
        texts(&r)[0].starts_with("refused (outside_namespace)"),
        "{:?}",
        texts(&r)
    );
    let r = call(
        &b,
        "pr_open",
        json!({"branch": "w02/three", "title": "Digit three"}),
    )
    .await;
    assert!(ok_text(&r).starts_with("opened #2"));

    let r = call(&b, "pr_list", json!({"state": "open"})).await;
    let text = ok_text(&r);
    assert!(
        text.starts_with("2 pull request(s), newest first:"),
        "{text}"
    );
    assert!(
        text.contains("#1 [open] w01 w01/three \"Shout three\""),
        "{text}"
    );
    let r = call(&b, "pr_view", json!({"number": 1})).await;
    let text = ok_text(&r);
    assert!(text.starts_with("#1 \"Shout three\" [open]"), "{text}");
    assert!(text.contains("mergeable: yes"), "{text}");
    assert!(text.contains("files (1):\n  +1 -1 shared.txt"), "{text}");

    // A review reaches the author in its next tool result.
    let r = call(
        &b,
        "pr_review",
        json!({"number": 1, "verdict": "request_changes", "text": "three should stay lowercase"}),
    )
    .await;
    assert_eq!(
        ok_text(&r),
        "reviewed #1: request_changes; its author is told"
    );
    let r = call(
        &b,
        "pr_review",
        json!({"number": 2, "verdict": "approve", "text": "ok"}),
    )
    .await;
    assert!(texts(&r)[0].contains("own_pr"), "{:?}", texts(&r));
    let r = call(
        &b,
        "pr_comment",
        json!({"number": "#1", "text": "or use 3"}),
    )
    .await;
    assert_eq!(ok_text(&r), "commented on #1");
    let r = call(&a, "pr_view", json!({"number": "1"})).await;
    let text = ok_text(&r);
    assert!(
        text.contains("review by w02 +0s: request_changes — three should stay lowercase"),
        "{text}"
    );
    assert!(text.contains("comment by w02 +0s: or use 3"), "{text}");
    let n = notices(&r).expect("the review is a notice");
    assert!(
        n.contains("- review of your PR #1 \"Shout three\" by w02: request_changes — three should stay lowercase"),
        "{n}"
    );
    assert!(!n.contains("or use 3"), "comments are normal priority: {n}");

    // w02 merges #1; its own #2 then conflicts, and w01 tries: w02 hears it at once.
    let main_before = org.main().await;
    let r = call(&b, "pr_merge", json!({"number": 1})).await;
    let text = ok_text(&r);
    assert!(
        text.starts_with("merged #1 \"Shout three\" into main at "),
        "{text}"
    );
    let main_after = org.main().await;
    assert_ne!(main_after, main_before);
    assert!(text.contains(&main_after[..12]), "{text}");
    let r = call(&a, "pr_merge", json!({"number": 2})).await;
    assert_eq!(r.is_error, Some(true));
    assert!(
        texts(&r)[0]
            .starts_with("refused (merge_conflict): PR #2 conflicts with main in shared.txt"),
        "{:?}",
        texts(&r)
    );
    assert_eq!(org.main().await, main_after, "main did not move");
    let r = call(&b, "workers", json!({})).await;
    let n = notices(&r).expect("the failed merge is a notice");
    assert!(
        n.contains("- your PR #2 \"Digit three\" could not merge (w01 tried): merge_conflict: PR #2 conflicts with main in shared.txt"),
        "{n}"
    );
    let r = call(&b, "pr_close", json!({"number": 2})).await;
    assert_eq!(
        ok_text(&r),
        "closed #2 without merging (branch w02/three stays)"
    );
    let r = call(&a, "pr_list", json!({})).await;
    let states: BTreeSet<String> = ok_text(&r)
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().nth(1).unwrap().to_string())
        .collect();
    assert_eq!(
        states,
        BTreeSet::from(["[closed]".to_string(), "[merged]".to_string()])
    );
    let _: PathBuf = org.tmp.path().to_path_buf();
}
