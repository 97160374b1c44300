//! A hostile or broken client cannot hold the hub: connections are capped, slow headers,
//! idle connections and stalled bodies are cut off at their timeouts, and each worker's
//! requests, records and messages are rate-limited with `429` and `Retry-After` (MCP: a
//! tool error) — while other workers and the admin go on.

mod common;

use std::time::{Duration, Instant};

use agensh_domain::record::RecordKind;
use agensh_domain::ErrorKind;
use common::*;
use reqwest::Method;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Reads from `conn` until the hub closes it or `within` passes; returns what came and
/// whether it closed.
async fn read_until_closed(conn: &mut TcpStream, within: Duration) -> (String, bool) {
    let mut got = Vec::new();
    let deadline = tokio::time::Instant::now() + within;
    let mut buf = [0u8; 4096];
    loop {
        match tokio::time::timeout_at(deadline, conn.read(&mut buf)).await {
            Err(_) => return (String::from_utf8_lossy(&got).into_owned(), false),
            Ok(Ok(0)) | Ok(Err(_)) => return (String::from_utf8_lossy(&got).into_owned(), true),
            Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
        }
    }
}

/// Asserts that no record holds `word`.
async fn assert_not_stored(hub: &TestHub, word: &str) {
    let found = hub.admin().grep(word, None, None).await.expect("grep");
    assert!(
        found.is_empty(),
        "nothing with {word} was stored, but grep finds {found:?}"
    );
}

fn addr(hub: &TestHub) -> std::net::SocketAddr {
    hub.hub.addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_past_the_cap_are_refused_with_a_503_that_says_why() {
    let mut config = config();
    config.hub.max_connections = 16;
    let hub = TestHub::with_config(config).await;
    let mut held = Vec::new();
    for _ in 0..16 {
        held.push(TcpStream::connect(addr(&hub)).await.unwrap());
    }
    // Let the hub take all sixteen before the next one knocks.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut extra = TcpStream::connect(addr(&hub)).await.unwrap();
    let (answer, closed) = read_until_closed(&mut extra, Duration::from_secs(5)).await;
    assert!(closed, "the hub closes a connection over its cap");
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    assert!(answer.contains("retry-after: 1"), "{answer}");
    assert!(answer.contains("too_many_connections"), "{answer}");
    assert!(answer.contains("hub.max_connections"), "{answer}");

    // An HTTP client over the cap gets the same answer to its request.
    let resp = reqwest::get(format!("{}/healthz", hub.url()))
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 503);
    assert_eq!(resp.headers()["retry-after"], "1");

    // Once they go, the hub serves again.
    drop(held);
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let resp = reqwest::get(format!("{}/healthz", hub.url())).await;
        if resp.is_ok_and(|r| r.status() == 200) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the hub serves after the held connections close"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(hub.metric("agensh_http_connections_refused_total").await >= 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn half_sent_headers_and_idle_connections_are_closed_at_the_header_timeout() {
    let mut config = config();
    config.hub.header_timeout_secs = 1;
    let hub = TestHub::with_config(config).await;

    let mut slow = TcpStream::connect(addr(&hub)).await.unwrap();
    slow.write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0")
        .await
        .unwrap();
    let started = Instant::now();
    let (_, closed) = read_until_closed(&mut slow, Duration::from_secs(10)).await;
    assert!(
        closed,
        "a client that never finishes its headers is cut off"
    );
    assert!(
        started.elapsed() >= Duration::from_millis(900),
        "{:?}",
        started.elapsed()
    );

    // A kept-alive connection that goes quiet after an answer is closed too.
    let mut idle = TcpStream::connect(addr(&hub)).await.unwrap();
    idle.write_all(format!("GET /healthz HTTP/1.1\r\nHost: {}\r\n\r\n", addr(&hub)).as_bytes())
        .await
        .unwrap();
    let started = Instant::now();
    let (answer, closed) = read_until_closed(&mut idle, Duration::from_secs(10)).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.ends_with("ok\n"), "{answer}");
    assert!(closed, "an idle kept-alive connection is closed");
    assert!(
        started.elapsed() >= Duration::from_millis(900),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_body_is_cut_off_and_nothing_is_stored() {
    let mut config = config();
    config.hub.body_timeout_secs = 1;
    let hub = TestHub::with_config(config).await;
    let token = hub.tokens(1).await.remove(0);
    let body = json!({ "kind": "FACT", "text": "stalled marmot" }).to_string();
    let mut conn = TcpStream::connect(addr(&hub)).await.unwrap();
    let head = format!(
        "POST /api/v1/board/records HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {token}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        addr(&hub),
        body.len()
    );
    conn.write_all(head.as_bytes()).await.unwrap();
    conn.write_all(&body.as_bytes()[..10]).await.unwrap();
    let started = Instant::now();
    let (answer, _) = read_until_closed(&mut conn, Duration::from_secs(10)).await;
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "{:?}",
        started.elapsed()
    );
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    assert!(answer.contains("hub.body_timeout_secs"), "{answer}");
    assert_board_empty(&hub.admin(), "marmot").await;
}

/// Posts a FACT as `token`; the status and the Retry-After header.
async fn post_fact(
    hub: &TestHub,
    token: &str,
    text: &str,
) -> (u16, Option<String>, serde_json::Value) {
    let resp = reqwest::Client::new()
        .post(format!("{}/api/v1/board/records", hub.url()))
        .bearer_auth(token)
        .json(&json!({ "kind": "FACT", "text": text }))
        .send()
        .await
        .unwrap();
    let status = resp.status().as_u16();
    let retry = resp
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().to_string());
    (status, retry, resp.json().await.unwrap_or_default())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_past_its_request_rate_gets_429_and_the_others_do_not() {
    let mut config = config();
    config.limits.requests_per_sec = 0.2;
    config.limits.burst = 3;
    let hub = TestHub::with_config(config).await;
    let tokens = hub.tokens(2).await;
    for i in 0..3 {
        let (status, _, _) = post_fact(&hub, &tokens[0], &format!("fact {i}")).await;
        assert_eq!(status, 201);
    }
    let (status, retry, body) = post_fact(&hub, &tokens[0], "one too many capybaras").await;
    assert_eq!(status, 429, "{body}");
    assert_eq!(retry.as_deref(), Some("5"), "one request at 0.2 per second");
    assert_eq!(body["error"]["code"], "rate_limited");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("slow down: wait 5 s"), "{message}");
    assert!(message.contains("limits.requests_per_sec"), "{message}");
    assert_not_stored(&hub, "capybaras").await;

    // Another worker, and the admin, are not held back.
    let (status, _, _) = post_fact(&hub, &tokens[1], "w02 goes on").await;
    assert_eq!(status, 201);
    for _ in 0..10 {
        let (status, _) = hub
            .raw(
                Method::GET,
                "/api/v1/stats",
                Some(&hub.hub.admin_token),
                None,
            )
            .await;
        assert_eq!(status, 200);
    }
    assert!(hub.metric("agensh_rate_limited_total").await >= 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn greps_cost_more_than_writes() {
    let mut config = config();
    config.limits.requests_per_sec = 0.1;
    config.limits.burst = 10;
    let hub = TestHub::with_config(config).await;
    let token = hub.tokens(1).await.remove(0);
    let grep = "/api/v1/board/grep?q=parser";
    assert_eq!(hub.raw(Method::GET, grep, Some(&token), None).await.0, 200);
    assert_eq!(hub.raw(Method::GET, grep, Some(&token), None).await.0, 200);
    let ans = hub.raw(Method::GET, grep, Some(&token), None).await;
    api_error(&ans, 429, "rate_limited");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_past_the_hourly_quota_are_refused_and_not_stored() {
    let mut config = config();
    config.limits.records_per_hour = 2;
    let hub = TestHub::with_config(config).await;
    let w = hub.workers(1).await.remove(0);
    w.post_record(&rec(RecordKind::Fact, "first"))
        .await
        .unwrap();
    w.post_record(&rec(RecordKind::Fact, "second"))
        .await
        .unwrap();
    let e = expect_err(
        w.post_record(&rec(RecordKind::Fact, "third wombat")).await,
        ErrorKind::RateLimited,
        "record_quota",
    );
    assert!(
        e.message.contains("limits.records_per_hour"),
        "{}",
        e.message
    );
    assert!(e.message.contains("wait 1800 s"), "{}", e.message);
    assert_not_stored(&hub, "wombat").await;
    // An invalid record spends nothing: the quota is checked after the record is.
    let mut config = common::config();
    config.limits.records_per_hour = 1;
    let hub = TestHub::with_config(config).await;
    let w = hub.workers(1).await.remove(0);
    let long = "x".repeat(500);
    expect_err(
        w.post_record(&rec(RecordKind::Fact, &long)).await,
        ErrorKind::Invalid,
        "text_too_long",
    );
    w.post_record(&rec(RecordKind::Fact, "fits")).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_past_the_hourly_quota_are_refused() {
    let mut config = config();
    config.limits.messages_per_hour = 1;
    let hub = TestHub::with_config(config).await;
    let token = hub.tokens(1).await.remove(0);
    let send = |text: &str| json!({ "to": "#general", "text": text }).to_string();
    let ok = hub
        .raw(
            Method::POST,
            "/api/v1/messages",
            Some(&token),
            Some(&send("hello")),
        )
        .await;
    assert_eq!(ok.0, 201, "{:?}", ok.1);
    let ans = hub
        .raw(
            Method::POST,
            "/api/v1/messages",
            Some(&token),
            Some(&send("again")),
        )
        .await;
    let message = api_error(&ans, 429, "message_quota");
    assert!(message.contains("limits.messages_per_hour"), "{message}");
    // The admin is never limited.
    let admin = hub
        .raw(
            Method::POST,
            "/api/v1/messages",
            Some(&hub.hub.admin_token),
            Some(&send("from the operator")),
        )
        .await;
    assert_eq!(admin.0, 201, "{:?}", admin.1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mcp_tool_call_past_the_limit_is_a_tool_error_that_says_to_slow_down() {
    let mut config = config();
    config.limits.requests_per_sec = 0.1;
    config.limits.burst = 2;
    let hub = TestHub::with_config(config).await;
    let token = hub.tokens(1).await.remove(0);
    let call = |n: u64| {
        json!({ "jsonrpc": "2.0", "id": n, "method": "tools/call",
                "params": { "name": "board_write", "arguments": { "kind": "FACT", "text": format!("mcp fact {n} {}", ["ibis", "heron", "egret"][n as usize]) } } })
        .to_string()
    };
    for n in 0..2 {
        let (status, body) = hub
            .raw(Method::POST, "/mcp", Some(&token), Some(&call(n)))
            .await;
        assert_eq!(status, 200);
        assert_eq!(body["result"]["isError"], false, "{body}");
    }
    let (status, body) = hub
        .raw(Method::POST, "/mcp", Some(&token), Some(&call(2)))
        .await;
    assert_eq!(status, 200, "a tool error travels as a result");
    assert_eq!(body["result"]["isError"], true, "{body}");
    let text = body["result"]["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("slow down"), "{text}");
    assert!(text.contains("limits.requests_per_sec"), "{text}");
    assert_not_stored(&hub, "egret").await;
}
