//! Limits and malformed requests: each is refused with HTTP 4xx and
//! `{"error":{"code","message"}}` whose message says what to do, and nothing is stored.

mod common;

use agensh_domain::record::RecordKind;
use common::*;
use reqwest::Method;
use serde_json::json;

const RECORDS: &str = "/api/v1/board/records";

/// Posts a record as raw JSON with a fresh worker's token.
async fn post_record_raw(hub: &TestHub, body: &str) -> (u16, serde_json::Value) {
    let token = hub.tokens(1).await.remove(0);
    hub.raw(Method::POST, RECORDS, Some(&token), Some(body))
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fact_of_143_characters_is_rejected_with_advice_and_not_stored() {
    let hub = TestHub::start().await;
    let text = format!("quokka {}", "x".repeat(136));
    assert_eq!(text.chars().count(), 143);
    let ans = post_record_raw(&hub, &json!({ "kind": "FACT", "text": text }).to_string()).await;
    let message = api_error(&ans, 400, "text_too_long");
    assert_eq!(
        message,
        "FACT text is 143 characters; the limit is 100 — shorten it or move the rest to detail"
    );
    assert_board_empty(&hub.admin(), "quokka").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn patch_summary_of_300_characters_is_stored() {
    let hub = TestHub::start().await;
    let w = hub.workers(1).await.remove(0);
    // Multi-byte characters: the limit counts characters, not bytes.
    let text = format!("ocelot {}", "é".repeat(293));
    assert_eq!(text.chars().count(), 300);
    let appended = w
        .post_record(&rec(RecordKind::PatchSummary, &text))
        .await
        .expect("a 300-character PATCH_SUMMARY is accepted");
    assert_eq!(appended.record.text, text);
    let view = w.recent(None).await.unwrap();
    assert_eq!(view_ids(&view), vec![appended.record.id.clone()]);
    assert_eq!(view[0].record.text, text);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn patch_summary_of_301_characters_is_rejected_and_not_stored() {
    let hub = TestHub::start().await;
    let text = format!("ocelot {}", "é".repeat(294));
    assert_eq!(text.chars().count(), 301);
    let ans = post_record_raw(
        &hub,
        &json!({ "kind": "PATCH_SUMMARY", "text": text }).to_string(),
    )
    .await;
    let message = api_error(&ans, 400, "text_too_long");
    assert_eq!(
        message,
        "PATCH_SUMMARY text is 301 characters; the limit is 300 — shorten it or move the rest to detail"
    );
    assert_board_empty(&hub.admin(), "ocelot").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_kind_is_rejected_naming_the_valid_kinds_and_not_stored() {
    let hub = TestHub::start().await;
    let ans = post_record_raw(&hub, r#"{"kind":"GUESS","text":"quokka sighted"}"#).await;
    let message = api_error(&ans, 400, "unknown_kind");
    assert!(message.contains("GUESS"), "{message}");
    assert!(
        message.contains("use one of OBSERVED, FACT, FAIL, CLAIM, PATCH_SUMMARY"),
        "{message}"
    );
    assert_board_empty(&hub.admin(), "quokka").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn empty_text_is_rejected_and_not_stored() {
    let hub = TestHub::start().await;
    let ans = post_record_raw(&hub, r#"{"kind":"FACT","text":"   ","detail":"quokka"}"#).await;
    let message = api_error(&ans, 400, "empty_text");
    assert!(message.contains("say in one line"), "{message}");
    assert_board_empty(&hub.admin(), "quokka").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn label_over_64_characters_is_rejected_and_not_stored() {
    let hub = TestHub::start().await;
    let body =
        json!({ "kind": "FACT", "text": "quokka sighted", "label": "a".repeat(65) }).to_string();
    let message = api_error(&post_record_raw(&hub, &body).await, 400, "label_too_long");
    assert!(message.contains("the limit is 64"), "{message}");
    assert!(message.contains("use a short name"), "{message}");
    assert_board_empty(&hub.admin(), "quokka").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn direct_message_to_unknown_worker_is_404_and_not_stored() {
    let hub = TestHub::start().await;
    let token = hub.tokens(1).await.remove(0);
    let body = json!({ "to": "w99", "text": "quokka?" }).to_string();
    let ans = hub
        .raw(Method::POST, "/api/v1/messages", Some(&token), Some(&body))
        .await;
    let message = api_error(&ans, 404, "unknown_worker");
    assert!(message.contains("w99"), "{message}");
    assert!(message.contains("list the workers"), "{message}");
    assert!(
        !message.contains("agensh ") && !message.contains("--"),
        "a model reads this too: no CLI command in it: {message}"
    );
    let all = hub
        .admin()
        .message_history(&Default::default())
        .await
        .unwrap();
    assert!(
        all.is_empty(),
        "nothing was stored, but history has {all:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_grep_query_is_400_bad_query() {
    let hub = TestHub::start().await;
    let token = hub.tokens(1).await.remove(0);
    let ans = hub
        .raw(
            Method::GET,
            "/api/v1/board/grep?q=%28parser%20lexer",
            Some(&token),
            None,
        )
        .await;
    let message = api_error(&ans, 400, "bad_query");
    assert!(message.contains("parenthes"), "{message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn body_over_the_limit_is_413_body_too_large_and_not_stored() {
    let mut config = config();
    config.hub.body_limit = 2048;
    let hub = TestHub::with_config(config).await;
    let body = json!({ "kind": "FACT", "text": "quokka sighted", "detail": "y".repeat(10 * 1024) })
        .to_string();
    let message = api_error(&post_record_raw(&hub, &body).await, 413, "body_too_large");
    assert!(message.contains("hub.body_limit"), "{message}");
    assert_board_empty(&hub.admin(), "quokka").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_json_body_is_400_bad_body_and_not_stored() {
    let hub = TestHub::start().await;
    let ans = post_record_raw(&hub, r#"{"kind":"FACT","text":"quokka sighted""#).await;
    let message = api_error(&ans, 400, "bad_body");
    assert!(message.contains("docs/API.md"), "{message}");
    assert_board_empty(&hub.admin(), "quokka").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_endpoint_is_404_json() {
    let hub = TestHub::start().await;
    let token = hub.tokens(1).await.remove(0);
    let ans = hub
        .raw(Method::GET, "/api/v1/no/such/thing", Some(&token), None)
        .await;
    let message = api_error(&ans, 404, "no_such_endpoint");
    assert!(message.contains("/api/v1/no/such/thing"), "{message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_method_on_a_known_path_is_405_json() {
    let hub = TestHub::start().await;
    let token = hub.tokens(1).await.remove(0);
    let ans = hub
        .raw(Method::DELETE, "/api/v1/board/recent", Some(&token), None)
        .await;
    let message = api_error(&ans, 405, "method_not_allowed");
    assert!(message.contains("/api/v1/board/recent"), "{message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kind_is_accepted_in_any_case() {
    let hub = TestHub::start().await;
    let ans = post_record_raw(&hub, r#"{"kind":"patch_summary","text":"quokka fixed"}"#).await;
    assert_eq!(ans.0, 201, "{}", ans.1);
    assert_eq!(ans.1["record"]["kind"], "PATCH_SUMMARY", "{}", ans.1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn record_without_text_is_400_bad_body_naming_the_field() {
    let hub = TestHub::start().await;
    let ans = post_record_raw(&hub, r#"{"kind":"FACT","label":"quokka"}"#).await;
    let message = api_error(&ans, 400, "bad_body");
    assert!(message.contains("text"), "{message}");
    assert_board_empty(&hub.admin(), "quokka").await;
}
