//! Text that cannot fool people or agents, over HTTP: terminal escapes and bidirectional
//! controls are refused with a code and nothing is stored; text of only invisible
//! characters counts as empty; labels and paths that look alike meet in the claim overlap
//! check.

mod common;

use agensh_client::MessageFilter;
use common::*;
use reqwest::Method;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_escape_in_a_message_body_is_refused_with_its_code_and_not_stored() {
    let hub = TestHub::start().await;
    let tokens = hub.tokens(2).await;
    let body = json!({ "to": "#general", "text": "standup \u{1b}]0;owned\u{7}\u{1b}[2J" });
    let ans = hub
        .raw(
            Method::POST,
            "/api/v1/messages",
            Some(&tokens[0]),
            Some(&body.to_string()),
        )
        .await;
    let message = api_error(&ans, 400, "control_chars");
    assert_eq!(
        message,
        "message contains an escape character (U+001B) at character 9 — remove terminal control sequences; plain text only"
    );
    let seen = hub
        .client(&tokens[1])
        .message_history(&MessageFilter::default())
        .await
        .unwrap();
    assert!(seen.is_empty(), "{seen:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_of_zero_width_characters_is_refused_as_empty() {
    let hub = TestHub::start().await;
    let tokens = hub.tokens(1).await;
    let body = json!({ "to": "#general", "text": "\u{200B}\u{200D}\u{2060}\u{FEFF}" });
    let ans = hub
        .raw(
            Method::POST,
            "/api/v1/messages",
            Some(&tokens[0]),
            Some(&body.to_string()),
        )
        .await;
    api_error(&ans, 400, "empty_text");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_right_to_left_override_in_a_record_is_refused_and_not_stored() {
    let hub = TestHub::start().await;
    let tokens = hub.tokens(1).await;
    for (body, code) in [
        (
            json!({ "kind": "FACT", "text": "quokka tests pass \u{202E}lin" }),
            "text_control_chars",
        ),
        (
            json!({ "kind": "FACT", "text": "quokka", "detail": "ok\n\u{9b}2J" }),
            "control_chars",
        ),
    ] {
        let ans = hub
            .raw(
                Method::POST,
                "/api/v1/board/records",
                Some(&tokens[0]),
                Some(&body.to_string()),
            )
            .await;
        api_error(&ans, 400, code);
    }
    assert_board_empty(&hub.admin(), "quokka").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_text_in_other_scripts_is_stored_as_written() {
    let hub = TestHub::start().await;
    let ws = hub.workers(1).await;
    let mut r = labeled(
        agensh_domain::record::RecordKind::Fact,
        "le café — 日本語",
        "パーサー",
    );
    r.detail = Some("line one\n\tline two\r\nשלום".into());
    let appended = ws[0].post_record(&r).await.unwrap();
    let back = ws[0].unfold(&appended.record.id).await.unwrap().record;
    assert_eq!(
        (back.text, back.label, back.detail),
        (r.text, r.label, r.detail)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_on_a_look_alike_label_reports_the_earlier_claim() {
    let hub = TestHub::start().await;
    let ws = hub.workers(2).await;
    let first = ws[0]
        .post_record(&claim("parser rewrite", Some("parser"), &[], None))
        .await
        .unwrap();
    // A Cyrillic а (U+0430) in place of the Latin a.
    let second = ws[1]
        .post_record(&claim("parser fixes", Some("p\u{0430}rser"), &[], None))
        .await
        .unwrap();
    let got: Vec<(String, bool)> = second
        .overlaps
        .iter()
        .map(|o| (o.id.clone(), o.same_label))
        .collect();
    assert_eq!(got, vec![(first.record.id, true)]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_on_a_look_alike_path_reports_the_earlier_claim() {
    let hub = TestHub::start().await;
    let ws = hub.workers(2).await;
    let first = ws[0]
        .post_record(&claim("parser", Some("a"), &["src/parser.rs"], None))
        .await
        .unwrap();
    // Cyrillic ѕ (U+0455) and а (U+0430), and full-width letters.
    let second = ws[1]
        .post_record(&claim(
            "parser too",
            Some("b"),
            &["\u{0455}rc/p\u{0430}rser.rs", "ｄｏｃｓ/"],
            None,
        ))
        .await
        .unwrap();
    let got: Vec<(String, Vec<String>)> = second
        .overlaps
        .iter()
        .map(|o| (o.id.clone(), o.paths.clone()))
        .collect();
    assert_eq!(
        got,
        vec![(first.record.id, vec!["src/parser.rs".to_string()])]
    );
}
