//! Taking over a claim over REST and MCP: a dead or stopped worker's claim is taken over by a
//! new CLAIM that names it (`takes_over`), the old one leaves the view and its author is
//! told; a live worker's claim is refused with `claim_alive`; two takers racing get one
//! winner.

mod common;

use agensh_domain::event::{kinds, Priority};
use agensh_domain::record::{NewRecord, RecordKind, TakeoverReason};
use agensh_domain::worker::WorkerStatus;
use agensh_domain::ErrorKind;
use common::*;
use rmcp::model::{CallToolRequestParams, ClientConfig};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::ServiceExt;
use serde_json::{json, Value};

fn taking(text: &str, old: &str) -> NewRecord {
    let mut n = NewRecord::new(RecordKind::Claim, text);
    n.takes_over = Some(old.to_string());
    n
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_workers_claim_is_taken_over_and_leaves_the_view() {
    let hub = TestHub::start().await;
    let ws = hub.workers(3).await;
    let old = ws[0]
        .post_record(&claim("the parser", Some("parser"), &["src/parser/"], None))
        .await
        .unwrap()
        .record;
    hub.admin()
        .set_status("w01", WorkerStatus::Dead)
        .await
        .unwrap();

    let got = ws[1]
        .post_record(&taking("finishing the parser", &old.id))
        .await
        .unwrap();
    let new = got.record;
    let t = new.takes_over.clone().expect("takes_over");
    assert_eq!(
        (t.id.as_str(), t.author.as_str(), t.why),
        ("G1", "w01", TakeoverReason::Dead)
    );
    assert_eq!(
        new.label.as_deref(),
        Some("parser"),
        "the old claim's label"
    );

    // w01 comes back: its old claim stays ended, only the new one shows.
    hub.admin()
        .set_status("w01", WorkerStatus::Idle)
        .await
        .unwrap();
    let view = hub.admin().recent(None).await.unwrap();
    assert_eq!(view_ids(&view), vec![new.id.clone()]);
    let workers = hub.admin().workers().await.unwrap();
    let claims_of = |id: &str| record_ids(&workers.iter().find(|w| w.id == id).unwrap().claims);
    assert!(claims_of("w01").is_empty());
    assert_eq!(claims_of("w02"), vec![new.id.clone()]);
    let unfolded = hub.admin().unfold(&old.id).await.unwrap().record;
    assert_eq!(
        unfolded.lease.unwrap().taken_over_by.as_deref(),
        Some(new.id.as_str())
    );

    // A third worker's claim on the same label overlaps the new claim, not the old one.
    let third = ws[2]
        .post_record(&claim("parser errors", Some("parser"), &[], None))
        .await
        .unwrap();
    let ids: Vec<&str> = third.overlaps.iter().map(|o| o.id.as_str()).collect();
    assert_eq!(ids, vec![new.id.as_str()]);

    // The old author gets one urgent event that says who took which claim.
    let events = ws[0].events(0, 0).await.unwrap();
    let told: Vec<_> = events
        .iter()
        .filter(|e| e.kind == kinds::CLAIM_TAKEN_OVER)
        .collect();
    assert_eq!(told.len(), 1, "{events:?}");
    assert_eq!(told[0].priority, Priority::Urgent);
    assert_eq!(told[0].payload["id"], "G1");
    assert_eq!(told[0].payload["by"], new.id);
    assert_eq!(told[0].payload["author"], "w02");
    assert_eq!(told[0].payload["why"], "dead");
    assert!(
        !events
            .iter()
            .any(|e| e.kind == kinds::BOARD_RECORD && e.payload["id"] == new.id),
        "w01 hears of the takeover once, not also as a board record"
    );
    // And when it tries to go on with it, it is told again.
    let e = expect_err(
        ws[0].renew(&old.id, None).await,
        ErrorKind::Conflict,
        "claim_taken_over",
    );
    assert!(
        e.message.contains("taken over by G2 (w02)"),
        "{}",
        e.message
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_workers_claim_is_refused_with_claim_alive_and_what_to_do() {
    let hub = TestHub::start().await;
    let ws = hub.workers(2).await;
    let tokens_w02 = hub.admin().worker_token("w02").await.unwrap().token;
    ws[0]
        .post_record(&claim("the parser", Some("parser"), &[], Some(2_460)))
        .await
        .unwrap();
    hub.admin()
        .set_status("w01", WorkerStatus::Busy)
        .await
        .unwrap();
    let answer = hub
        .raw(
            reqwest::Method::POST,
            "/api/v1/board/records",
            Some(&tokens_w02),
            Some(r#"{"kind":"CLAIM","text":"mine now","takes_over":"G1"}"#),
        )
        .await;
    let message = api_error(&answer, 409, "claim_alive");
    assert!(
        message.starts_with("G1 is w01's live claim (w01 is busy, lease 4"),
        "{message}"
    );
    assert!(
        message.ends_with("message w01 to hand it over, or claim something else"),
        "{message}"
    );
    assert_eq!(
        view_ids(&hub.admin().recent(None).await.unwrap()),
        vec!["G1"]
    );

    // Unknown, not a claim, own claim, not a CLAIM taking over: each its own code.
    for (body, status, code) in [
        (
            r#"{"kind":"CLAIM","text":"x","takes_over":"G9"}"#,
            404,
            "unknown_record",
        ),
        (
            r#"{"kind":"CLAIM","text":"x","takes_over":"nine"}"#,
            400,
            "bad_record_id",
        ),
        (
            r#"{"kind":"FACT","text":"x","takes_over":"G1"}"#,
            400,
            "takeover_not_claim",
        ),
    ] {
        let answer = hub
            .raw(
                reqwest::Method::POST,
                "/api/v1/board/records",
                Some(&tokens_w02),
                Some(body),
            )
            .await;
        api_error(&answer, status, code);
    }
    expect_err(
        ws[0].post_record(&taking("again", "G1")).await,
        ErrorKind::Invalid,
        "own_claim",
    );
    let fact = ws[0]
        .post_record(&rec(RecordKind::Fact, "parser is LL(1)"))
        .await
        .unwrap()
        .record;
    expect_err(
        ws[1].post_record(&taking("x", &fact.id)).await,
        ErrorKind::Invalid,
        "not_a_claim",
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_workers_taking_over_one_claim_at_once_get_one_winner() {
    let hub = TestHub::start().await;
    let ws = hub.workers(6).await;
    for round in 0..5 {
        let old = ws[0]
            .post_record(&claim(&format!("part {round}"), None, &[], None))
            .await
            .unwrap()
            .record;
        // w01 is stopped (as every new worker is): its claims can be taken over.
        let takers: Vec<_> = ws[1..]
            .iter()
            .map(|c| {
                let c = c.clone();
                let id = old.id.clone();
                tokio::spawn(async move { c.post_record(&taking("mine", &id)).await })
            })
            .collect();
        let mut won = Vec::new();
        let mut lost = Vec::new();
        for t in takers {
            match t.await.unwrap() {
                Ok(a) => won.push(a.record),
                Err(e) => lost.push(e),
            }
        }
        assert_eq!(won.len(), 1, "round {round}: one winner, {lost:?}");
        let winner = &won[0];
        for e in &lost {
            assert_eq!(
                (e.kind, e.code.as_str()),
                (ErrorKind::Conflict, "claim_taken_over")
            );
            assert!(
                e.message.contains(&format!(
                    "{} was already taken over by {} ({})",
                    old.id, winner.id, winner.author
                )),
                "round {round}: {}",
                e.message
            );
        }
    }
    assert_eq!(
        ws[0]
            .events(0, 0)
            .await
            .unwrap()
            .iter()
            .filter(|e| e.kind == kinds::CLAIM_TAKEN_OVER)
            .count(),
        5,
        "w01 is told once per claim"
    );
}

type Mcp = rmcp::service::RunningService<rmcp::RoleClient, ClientConfig>;

/// Calls `tool`: whether it was refused, and its text blocks (the result, then notices).
async fn call(c: &Mcp, tool: &str, args: Value) -> (bool, Vec<String>) {
    let args = args.as_object().unwrap().clone();
    let r = c
        .call_tool(CallToolRequestParams::new(tool.to_string()).with_arguments(args))
        .await
        .unwrap();
    let texts = r
        .content
        .iter()
        .map(|c| c.as_text().unwrap().text.clone())
        .collect();
    (r.is_error == Some(true), texts)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_mcp_claim_takes_over_and_the_old_author_sees_a_notice() {
    let hub = TestHub::start().await;
    let tokens = hub.tokens(2).await;
    let mcp = |token: &str| {
        let config = StreamableHttpClientTransportConfig::with_uri(format!("{}/mcp", hub.url()))
            .auth_header(token);
        ClientConfig::default().serve(StreamableHttpClientTransport::from_config(config))
    };
    let a = mcp(&tokens[0]).await.unwrap();
    let b = mcp(&tokens[1]).await.unwrap();
    let (err, t) = call(&a, "claim", json!({"text": "the lexer", "label": "lexer"})).await;
    assert!(!err, "{t:?}");
    hub.admin()
        .set_status("w01", WorkerStatus::Busy)
        .await
        .unwrap();
    let (err, t) = call(&b, "claim", json!({"text": "lexer", "takes_over": "G1"})).await;
    assert!(err, "{t:?}");
    assert!(
        t[0].starts_with("refused (claim_alive): G1 is w01's live claim"),
        "{t:?}"
    );

    hub.admin()
        .set_status("w01", WorkerStatus::Dead)
        .await
        .unwrap();
    let (err, t) = call(&b, "claim", json!({"text": "lexer", "takes_over": "G1"})).await;
    assert!(!err, "{t:?}");
    assert!(t[0].contains("takes over G1 (w01, dead)"), "{t:?}");
    assert!(
        t[0].contains("took over G1 from w01 (dead): w01 no longer holds it and is told"),
        "{t:?}"
    );

    let (_, t) = call(&b, "board_unfold", json!({"id": "G1"})).await;
    assert!(t[0].contains("\nlease: taken over by G2"), "{t:?}");
    let (_, t) = call(&b, "board_unfold", json!({"id": "G2"})).await;
    assert!(t[0].contains("\ntakes over: G1 (w01, dead)"), "{t:?}");

    // w01 comes back; its next tool call carries the notice, once.
    hub.admin()
        .set_status("w01", WorkerStatus::Idle)
        .await
        .unwrap();
    let (_, t) = call(&a, "workers", json!({})).await;
    let notices = t.get(1).cloned().unwrap_or_default();
    assert!(
        notices.contains(
            "- your claim G1 \"the lexer\" was taken over by w02 with G2 (you were dead) — stop work on it"
        ),
        "{t:?}"
    );
    let (_, t) = call(&a, "workers", json!({})).await;
    assert_eq!(t.len(), 1, "shown once: {t:?}");
}
