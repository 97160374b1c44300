//! A worker's turns: its node reports each finished turn (`POST /workers/{id}/turns`) and
//! the dashboard reads them back (`GET /workers/{id}/turns`), newest first.

mod common;

use std::time::Duration;

use agensh_domain::turn::{PROMPT_BYTES, TITLE_CHARS, TOOL_CALLS};
use agensh_domain::ErrorKind;
use agensh_protocol::dashboard::{ToolCallSummary, TurnReport};
use common::{api_error, expect_err, TestHub};
use reqwest::Method;
use serde_json::json;

fn report(turn: u64) -> TurnReport {
    TurnReport {
        turn,
        started_at: 1_796_000_000_000 + turn as i64 * 60_000,
        ended_at: 1_796_000_030_000 + turn as i64 * 60_000,
        prompt: format!("prompt of turn {turn}"),
        events: vec![turn as i64 * 2, turn as i64 * 2 + 1],
        tool_calls: vec![
            ToolCallSummary {
                name: "claim".into(),
                title: "claim".into(),
                status: "completed".into(),
            },
            ToolCallSummary {
                name: "execute".into(),
                title: "git push origin HEAD:w01/work".into(),
                status: "failed".into(),
            },
        ],
        tool_calls_dropped: 0,
        input_tokens: 1_000 + turn,
        output_tokens: 10 + turn,
        stop_reason: "end_turn".into(),
        last_action: "git push origin HEAD:w01/work".into(),
        restarts: 0,
        memory_kills: turn % 2,
    }
}

#[tokio::test]
async fn a_worker_reports_its_turns_and_reads_them_back_newest_first_in_pages() {
    let hub = TestHub::start().await;
    let w = hub.workers(2).await;
    for t in 1..=3 {
        let stored = w[0].report_turn("w01", &report(t)).await.unwrap();
        assert_eq!(stored, report(t), "a plain report is stored as sent");
    }
    // The admin reports for a worker too (e.g. a node with the admin token).
    hub.admin().report_turn("w01", &report(4)).await.unwrap();

    let turns = w[0].turns("w01", None, None).await.unwrap();
    assert_eq!(
        turns.iter().map(|t| t.turn).collect::<Vec<_>>(),
        [4, 3, 2, 1]
    );
    assert_eq!(turns[1], report(3), "every field reads back");
    let page = hub.admin().turns("w01", Some(4), Some(2)).await.unwrap();
    assert_eq!(page.iter().map(|t| t.turn).collect::<Vec<_>>(), [3, 2]);
    assert!(w[1].turns("w02", None, None).await.unwrap().is_empty());

    // A report sent again (a node that retried) replaces the first.
    let mut again = report(2);
    again.prompt = "turn 2, again".into();
    w[0].report_turn("w01", &again).await.unwrap();
    let turns = w[0].turns("w01", None, None).await.unwrap();
    assert_eq!(turns.len(), 4);
    assert_eq!(turns[2].prompt, "turn 2, again");

    // The wire names are the dashboard's (app.js `turnItem`).
    let (status, body) = hub
        .raw(
            Method::GET,
            "/api/v1/workers/w01/turns?limit=1",
            Some(&hub.hub.admin_token),
            None,
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let t = &body[0];
    for field in [
        "turn",
        "started_at",
        "ended_at",
        "input_tokens",
        "output_tokens",
        "stop_reason",
        "events",
        "prompt",
        "tool_calls",
        "last_action",
    ] {
        assert!(t.get(field).is_some(), "{field} in {t}");
    }
    assert_eq!(
        t["tool_calls"][1],
        json!({"name": "execute", "title": "git push origin HEAD:w01/work", "status": "failed"})
    );

    // The page size is checked: 1 to 500, 50 by default.
    for t in 5..=60 {
        hub.admin().report_turn("w01", &report(t)).await.unwrap();
    }
    assert_eq!(w[0].turns("w01", None, None).await.unwrap().len(), 50);
    assert_eq!(w[0].turns("w01", None, Some(500)).await.unwrap().len(), 60);
    for bad in [0, 501] {
        let e = expect_err(
            w[0].turns("w01", None, Some(bad)).await,
            ErrorKind::Invalid,
            "bad_limit",
        );
        assert!(e.message.contains("ask for 1 to 500 turns"), "{e:?}");
    }
}

#[tokio::test]
async fn only_the_worker_itself_or_the_admin_reports_and_reads_its_turns() {
    let hub = TestHub::start().await;
    let w = hub.workers(2).await;
    w[0].report_turn("w01", &report(1)).await.unwrap();

    let e = expect_err(
        w[1].report_turn("w01", &report(2)).await,
        ErrorKind::Forbidden,
        "impersonation",
    );
    assert!(e.message.contains("only its own turns (w02)"), "{e:?}");
    expect_err(
        w[1].turns("w01", None, None).await,
        ErrorKind::Forbidden,
        "impersonation",
    );
    assert_eq!(hub.admin().turns("w01", None, None).await.unwrap().len(), 1);
    expect_err(
        hub.admin().report_turn("w09", &report(1)).await,
        ErrorKind::NotFound,
        "unknown_worker",
    );
    expect_err(
        hub.admin().turns("w09", None, None).await,
        ErrorKind::NotFound,
        "unknown_worker",
    );
    expect_err(
        hub.admin().turns("W-1", None, None).await,
        ErrorKind::Invalid,
        "bad_worker_id",
    );
    let answer = hub
        .raw(Method::GET, "/api/v1/workers/w01/turns", None, None)
        .await;
    api_error(&answer, 401, "unauthorized");
    // Nothing of a refused report was stored.
    assert_eq!(w[0].turns("w01", None, None).await.unwrap().len(), 1);
}

#[tokio::test]
async fn a_report_over_its_limits_is_refused_with_what_to_send_instead() {
    let hub = TestHub::start().await;
    let w = hub.workers(1).await;
    let refused = |r: TurnReport, code: &'static str| {
        let w = w[0].clone();
        async move { expect_err(w.report_turn("w01", &r).await, ErrorKind::Invalid, code).message }
    };

    let mut r = report(1);
    r.prompt = "x".repeat(PROMPT_BYTES + 1);
    let m = refused(r, "text_too_long").await;
    assert!(m.contains("at most 8192") && m.contains("cut it"), "{m}");

    let mut r = report(1);
    r.tool_calls = vec![r.tool_calls[0].clone(); TOOL_CALLS + 1];
    let m = refused(r, "too_many_tool_calls").await;
    assert!(m.contains("tool_calls_dropped"), "{m}");

    let mut r = report(1);
    r.tool_calls[1].title = "t".repeat(TITLE_CHARS + 1);
    let m = refused(r, "text_too_long").await;
    assert!(
        m.starts_with("the title of tool call 2 is 301 characters"),
        "{m}"
    );

    let mut r = report(1);
    r.ended_at = r.started_at - 1;
    let m = refused(r, "bad_turn").await;
    assert!(m.contains("before started_at"), "{m}");

    let mut r = report(1);
    r.turn = 0;
    refused(r, "bad_turn").await;

    let mut r = report(1);
    r.events = vec![1; 1_001];
    refused(r, "too_many_events").await;

    // Exactly at the limits is taken: 200 tool calls and a prompt of 8 KiB (a body larger
    // than the default 64 KiB body limit).
    let mut r = report(1);
    r.prompt = "é".repeat(PROMPT_BYTES / 2);
    r.tool_calls = (0..TOOL_CALLS)
        .map(|i| ToolCallSummary {
            name: "run".into(),
            title: format!("{i}:{}", "ü".repeat(TITLE_CHARS - 4)),
            status: "completed".into(),
        })
        .collect();
    r.tool_calls_dropped = 12;
    assert!(serde_json::to_vec(&r).unwrap().len() > 64 * 1024);
    w[0].report_turn("w01", &r).await.unwrap();
    let back = &w[0].turns("w01", None, None).await.unwrap()[0];
    assert_eq!(back.tool_calls.len(), TOOL_CALLS);
    assert_eq!(back.tool_calls_dropped, 12);

    // A body that is not a report says which field is wrong.
    let token = hub.admin().worker_token("w01").await.unwrap().token;
    let answer = hub
        .raw(
            Method::POST,
            "/api/v1/workers/w01/turns",
            Some(&token),
            Some(r#"{"turn":"one"}"#),
        )
        .await;
    api_error(&answer, 400, "bad_body");
}

#[tokio::test]
async fn controls_in_an_agents_texts_are_stored_escaped_not_refused() {
    let hub = TestHub::start().await;
    let w = hub.workers(1).await;
    let mut r = report(1);
    r.prompt = "line one\n\tline two \u{1b}[2J\u{202e}".into();
    r.tool_calls[0].title = "run: printf '\\r' \r\u{7}".into();
    r.stop_reason = "end\u{1b}turn".into();
    r.last_action = "x\ny".into();
    let stored = w[0].report_turn("w01", &r).await.unwrap();
    assert_eq!(stored.prompt, "line one\n\tline two \\u{1b}[2J\\u{202e}");
    assert_eq!(stored.tool_calls[0].title, "run: printf '\\r' \\u{d}\\u{7}");
    assert_eq!(stored.stop_reason, "end\\u{1b}turn");
    assert_eq!(
        stored.last_action, "x\\u{a}y",
        "one-line fields keep no line break"
    );
    assert_eq!(w[0].turns("w01", None, None).await.unwrap()[0], stored);
}

async fn next(stream: &mut agensh_client::FrameStream) -> agensh_protocol::dashboard::Frame {
    tokio::time::timeout(Duration::from_secs(10), stream.next())
        .await
        .expect("a frame within 10 s")
        .unwrap()
        .expect("the stream goes on")
}

#[tokio::test]
async fn a_report_gives_the_dashboard_the_workers_restarts_at_once() {
    let hub = TestHub::start().await;
    let w = hub.workers(2).await;
    let mut stream = hub.admin().stream(None).await.unwrap();
    let first = next(&mut stream).await;
    assert!(first.workers.iter().all(|r| r.restarts == 0), "{first:?}");
    let mut r = report(7);
    r.restarts = 3;
    w[0].report_turn("w01", &r).await.unwrap();
    // The feed is told: the changed row comes in a frame soon (each frame within 10 s).
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let frame = next(&mut stream).await;
        let row = frame.workers.iter().find(|r| r.id == "w01");
        if row.is_some_and(|r| r.restarts == 3) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no frame with w01's restarts: {frame:?}"
        );
    }
    let all = hub
        .admin()
        .stream(None)
        .await
        .unwrap()
        .next()
        .await
        .unwrap()
        .unwrap();
    let restarts: Vec<(String, u64)> = all
        .workers
        .iter()
        .map(|r| (r.id.clone(), r.restarts))
        .collect();
    assert_eq!(restarts, [("w01".to_string(), 3), ("w02".to_string(), 0)]);
}
