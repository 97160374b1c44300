//! Delivery receipts through the hub: a direct message's receipt goes from stored to
//! presented (in an MCP tool result's notices, or by `/events/presented` for a prompt) to
//! acknowledged; a channel post has a receipt per worker; only the sender, the recipient
//! of a direct message and the admin read them (REST and `msg_status`); and the sender of
//! an urgent DM its worker was not shown in time is told so, once; a node's question which
//! of its busy workers have news waiting too long (`/events/overdue`) is answered per worker,
//! each authorised by its own token.

mod common;

use std::time::Duration;

use agensh_client::Client;
use agensh_domain::event::{kinds, Event, OverdueQuery, PollEntry, Priority};
use agensh_domain::message::NewMessage;
use agensh_domain::receipt::{MessageStatus, ReceiptState, Via};
use agensh_domain::worker::WorkerStatus;
use agensh_testkit::wait_until;
use common::{api_error, TestHub};
use reqwest::Method;
use rmcp::model::{CallToolRequestParams, CallToolResult, ClientConfig};
use rmcp::service::RunningService;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::{RoleClient, ServiceExt};
use serde_json::{json, Value};

type Mcp = RunningService<RoleClient, ClientConfig>;

/// An MCP session with the hub at `url` as the worker of `token`.
async fn connect(url: &str, token: &str) -> Mcp {
    let config =
        StreamableHttpClientTransportConfig::with_uri(format!("{url}/mcp")).auth_header(token);
    ClientConfig::default()
        .serve(StreamableHttpClientTransport::from_config(config))
        .await
        .expect("the MCP client connects")
}

async fn call(c: &Mcp, tool: &str, args: Value) -> CallToolResult {
    let args = args.as_object().expect("arguments are an object").clone();
    c.call_tool(CallToolRequestParams::new(tool.to_string()).with_arguments(args))
        .await
        .unwrap_or_else(|e| panic!("{tool} answers: {e:?}"))
}

fn texts(r: &CallToolResult) -> Vec<String> {
    r.content
        .iter()
        .map(|c| c.as_text().expect("text content").text.clone())
        .collect()
}

/// The `notices:` block of a result, if any.
fn notices(r: &CallToolResult) -> Option<String> {
    texts(r).get(1).cloned()
}

fn dm(to: &str, text: &str) -> NewMessage {
    NewMessage {
        to: to.into(),
        text: text.into(),
        thread: None,
    }
}

/// `worker`'s pending event that carries message `seq`.
async fn event_of(c: &Client, seq: i64) -> Event {
    c.events(0, 0)
        .await
        .unwrap()
        .into_iter()
        .find(|e| e.payload["seq"] == json!(seq))
        .expect("the message's event is pending")
}

/// (worker, state, via) of each receipt.
fn states(s: &MessageStatus) -> Vec<(String, ReceiptState, Option<Via>)> {
    s.receipts
        .iter()
        .map(|r| (r.worker.clone(), r.state, r.via))
        .collect()
}

#[tokio::test]
async fn a_dms_receipt_goes_from_stored_to_presented_in_a_tool_result_to_acknowledged() {
    let hub = TestHub::start().await;
    let tokens = hub.tokens(2).await;
    let (w01, _) = (hub.client(&tokens[0]), hub.client(&tokens[1]));
    let m = w01
        .send_message(&dm("w02", "can I take the lexer?"))
        .await
        .unwrap();
    let id = format!("M{}", m.seq);
    let st = w01.message_status(&id).await.unwrap();
    assert_eq!(
        (st.id.as_str(), st.from.as_str(), st.to.as_str()),
        (id.as_str(), "w01", "w02")
    );
    assert_eq!(
        states(&st),
        [("w02".to_string(), ReceiptState::Stored, None)]
    );
    assert_eq!(st.receipts[0].kind, kinds::DIRECT_MESSAGE);
    assert_eq!(st.receipts[0].stored_at, m.created_at);

    // w02's next organization tool call shows it in its notices: presented via the tool
    // result, and acknowledged as the result is built.
    let w02 = connect(hub.url(), &tokens[1]).await;
    let r = call(&w02, "workers", json!({})).await;
    let n = notices(&r).expect("the DM is in the notices");
    assert!(n.contains("DM M1 from w01"), "{n}");
    let st = w01.message_status(&id).await.unwrap();
    assert_eq!(
        states(&st),
        [(
            "w02".to_string(),
            ReceiptState::Acknowledged,
            Some(Via::ToolResult)
        )]
    );
    let r0 = &st.receipts[0];
    assert!(r0.presented_at.unwrap() >= m.created_at);
    assert!(r0.acknowledged_at >= r0.presented_at);
    assert_eq!(hub.metric("agensh_events_presented_total").await, 1);

    // The sender asks over MCP.
    let w01_mcp = connect(hub.url(), &tokens[0]).await;
    let r = call(&w01_mcp, "msg_status", json!({ "id": id })).await;
    assert_eq!(r.is_error, Some(false), "{:?}", texts(&r));
    let text = &texts(&r)[0];
    assert!(
        text.starts_with("M1 from w01 to w02, sent ")
            && text.contains("\n- w02: presented in a tool result ")
            && text.contains("; acknowledged "),
        "{text}"
    );
    let structured = r.structured_content.as_ref().unwrap();
    assert_eq!(structured["receipts"][0]["state"], "acknowledged");
    assert_eq!(structured["receipts"][0]["via"], "tool_result");
}

#[tokio::test]
async fn a_dm_presented_in_a_prompt_leaves_the_queue_and_is_acknowledged_with_the_next_poll() {
    let hub = TestHub::start().await;
    let tokens = hub.tokens(2).await;
    let (w01, w02) = (hub.client(&tokens[0]), hub.client(&tokens[1]));
    let m = w01.send_message(&dm("w02", "ping")).await.unwrap();
    let id = format!("M{}", m.seq);
    let e = event_of(&w02, m.seq).await;

    // The node hands the prompt over: presented, and out of the queue.
    assert_eq!(w02.presented(&[e.seq], Via::Prompt).await.unwrap(), 1);
    let st = w01.message_status(&id).await.unwrap();
    assert_eq!(
        states(&st),
        [(
            "w02".to_string(),
            ReceiptState::Presented,
            Some(Via::Prompt)
        )]
    );
    assert!(w02.events(0, 0).await.unwrap().is_empty());
    // No tool result of the turn shows it again.
    let mcp = connect(hub.url(), &tokens[1]).await;
    let r = call(&mcp, "workers", json!({})).await;
    assert_eq!(notices(&r), None);
    // Presented again (a retried request): the first presentation stays.
    assert_eq!(w02.presented(&[e.seq], Via::ToolResult).await.unwrap(), 0);

    // The turn ends: the node's next poll acknowledges it.
    w02.ack_and_poll(&[e.seq], 0, 0).await.unwrap();
    let st = w01.message_status(&id).await.unwrap();
    assert_eq!(
        states(&st),
        [(
            "w02".to_string(),
            ReceiptState::Acknowledged,
            Some(Via::Prompt)
        )]
    );

    // A presentation needs a worker, and the worker's own events when it dequeues.
    let admin = hub.admin();
    assert_eq!(
        admin
            .presented(&[e.seq], Via::Prompt)
            .await
            .unwrap_err()
            .code,
        "needs_worker"
    );
    let other = w02.send_message(&dm("w01", "pong")).await.unwrap();
    let theirs = event_of(&w01, other.seq).await;
    assert_eq!(
        w02.presented(&[theirs.seq], Via::Prompt)
            .await
            .unwrap_err()
            .code,
        "not_your_event"
    );
}

#[tokio::test]
async fn only_the_sender_the_recipient_of_a_dm_and_the_admin_read_its_receipts() {
    let hub = TestHub::start().await;
    let tokens = hub.tokens(3).await;
    let c: Vec<Client> = tokens.iter().map(|t| hub.client(t)).collect();
    let direct = c[0].send_message(&dm("w02", "private")).await.unwrap();
    let post = c[0]
        .send_message(&dm("#general", "for everyone"))
        .await
        .unwrap();
    let path = |seq: i64| format!("/api/v1/messages/M{seq}/receipts");

    for (who, ok) in [(0, true), (1, true), (2, false)] {
        let r = c[who].message_status(&format!("M{}", direct.seq)).await;
        assert_eq!(
            r.is_ok(),
            ok,
            "w0{} reads the DM's receipts: {r:?}",
            who + 1
        );
    }
    let refused = hub
        .raw(Method::GET, &path(direct.seq), Some(&tokens[2]), None)
        .await;
    let message = api_error(&refused, 403, "not_your_message");
    assert_eq!(
        message,
        "only the sender of M1 (w01), its recipient (w02) and the admin may read its receipts"
    );
    assert!(hub
        .admin()
        .message_status(&direct.seq.to_string())
        .await
        .is_ok());
    // A channel post: its sender and the admin only.
    assert!(c[0].message_status(&format!("m{}", post.seq)).await.is_ok());
    let r = hub
        .raw(Method::GET, &path(post.seq), Some(&tokens[1]), None)
        .await;
    api_error(&r, 403, "not_your_message");
    // Ids that name no message.
    let r = hub
        .raw(
            Method::GET,
            "/api/v1/messages/M99/receipts",
            Some(&tokens[0]),
            None,
        )
        .await;
    api_error(&r, 404, "unknown_message");
    let r = hub
        .raw(
            Method::GET,
            "/api/v1/messages/G1/receipts",
            Some(&tokens[0]),
            None,
        )
        .await;
    api_error(&r, 400, "bad_message_id");

    // msg_status over MCP refuses the same way, as a tool error the model reads.
    let w03 = connect(hub.url(), &tokens[2]).await;
    let r = call(&w03, "msg_status", json!({ "id": "M1" })).await;
    assert_eq!(r.is_error, Some(true));
    assert!(
        texts(&r)[0].starts_with("refused (not_your_message): only the sender of M1"),
        "{:?}",
        texts(&r)
    );
}

#[tokio::test]
async fn a_channel_post_has_a_receipt_for_every_worker_but_its_sender() {
    let hub = TestHub::start().await;
    let tokens = hub.tokens(4).await;
    let c: Vec<Client> = tokens.iter().map(|t| hub.client(t)).collect();
    let post = c[0]
        .send_message(&dm("#general", "main is green"))
        .await
        .unwrap();
    let id = format!("M{}", post.seq);
    let st = c[0].message_status(&id).await.unwrap();
    assert_eq!(
        states(&st),
        [
            ("w02".to_string(), ReceiptState::Stored, None),
            ("w03".to_string(), ReceiptState::Stored, None),
            ("w04".to_string(), ReceiptState::Stored, None),
        ]
    );
    assert!(st
        .receipts
        .iter()
        .all(|r| r.kind == kinds::CHANNEL_POST && r.event == st.receipts[0].event));
    // w02 is shown it in a prompt; w03's node acknowledges it at once.
    let e = event_of(&c[1], post.seq).await;
    c[1].presented(&[e.seq], Via::Prompt).await.unwrap();
    c[2].ack_and_poll(&[e.seq], 0, 0).await.unwrap();
    // A normal event stays queued when presented: it is acknowledged at the turn's end.
    assert_eq!(c[1].events(0, 0).await.unwrap().len(), 1);
    let st = c[0].message_status(&id).await.unwrap();
    assert_eq!(
        states(&st),
        [
            (
                "w02".to_string(),
                ReceiptState::Presented,
                Some(Via::Prompt)
            ),
            (
                "w03".to_string(),
                ReceiptState::Acknowledged,
                Some(Via::Prompt)
            ),
            ("w04".to_string(), ReceiptState::Stored, None),
        ]
    );
}

/// Waits for `n` more passes of the hub over the receipts than it had made.
async fn passes(hub: &TestHub, n: u64) {
    let start = hub.metric("agensh_receipt_passes_total").await;
    wait_until(
        Duration::from_secs(10),
        "passes over the receipts",
        async || hub.metric("agensh_receipt_passes_total").await >= start + n,
    )
    .await;
}

/// The `msg.unseen` events in `c`'s queue.
async fn unseen_notices(c: &Client) -> Vec<Event> {
    c.events(0, 0)
        .await
        .unwrap()
        .into_iter()
        .filter(|e| e.kind == kinds::MESSAGE_UNSEEN)
        .collect()
}

#[tokio::test]
async fn the_sender_of_a_dm_not_seen_in_time_is_told_once_and_not_for_one_that_was() {
    let mut config = common::config();
    config.hub.unseen_notice_secs = 2;
    let (hub, clock) = TestHub::with_config_and_manual_clock(config).await;
    let tokens = hub.tokens(3).await;
    let c: Vec<Client> = tokens.iter().map(|t| hub.client(t)).collect();
    // w02 is in a long turn; w03 is shown its DM at once, in a tool result.
    c[1].set_status("w02", WorkerStatus::Busy).await.unwrap();
    let waiting = c[0]
        .send_message(&dm("w02", "are you on the parser?"))
        .await
        .unwrap();
    let seen = c[0].send_message(&dm("w03", "and you?")).await.unwrap();
    let w03 = connect(hub.url(), &tokens[2]).await;
    let r = call(&w03, "workers", json!({})).await;
    assert!(notices(&r).is_some_and(|n| n.contains(&format!("DM M{}", seen.seq))));

    // Before the wait is over, whatever the passes: nothing.
    passes(&hub, 2).await;
    assert!(unseen_notices(&c[0]).await.is_empty());

    clock.advance(Duration::from_secs(3));
    wait_until(Duration::from_secs(10), "the sender's notice", async || {
        !unseen_notices(&c[0]).await.is_empty()
    })
    .await;
    // Once, for the message w02 was not shown; none for w03's.
    passes(&hub, 2).await;
    let told = unseen_notices(&c[0]).await;
    assert_eq!(told.len(), 1, "{told:?}");
    let e = &told[0];
    assert_eq!(e.priority, Priority::Urgent);
    assert_eq!(e.target.as_deref(), Some("w01"));
    assert_eq!(e.dedup_key, Some(format!("unseen:M{}", waiting.seq)));
    assert_eq!(e.payload["id"], format!("M{}", waiting.seq));
    assert_eq!(e.payload["to"], "w02");
    assert_eq!(e.payload["busy"], true);
    assert_eq!(
        e.payload["text"],
        format!(
            "w02 has not seen your message M{} for 3 seconds: it is busy in a turn that has called no organization tool since",
            waiting.seq
        )
    );
    assert_eq!(hub.metric("agensh_unseen_notices_total").await, 1);
    // The DM still waits; w03's was shown, the moment it was stored.
    assert_eq!(
        hub.metric("agensh_urgent_waiting{kind=\"msg.dm\"}").await,
        1
    );
    assert_eq!(
        hub.metric("agensh_presented_wait_seconds_count{kind=\"msg.dm\"}")
            .await,
        1
    );

    // The sender reads it in the notices of its next tool call.
    let w01 = connect(hub.url(), &tokens[0]).await;
    let r = call(&w01, "workers", json!({})).await;
    let n = notices(&r).expect("the sender's notice");
    assert!(
        n.contains(&format!(
            "- w02 has not seen your message M{0} for 3 seconds: it is busy in a turn that has called no organization tool since — msg_status M{0} shows where it stands",
            waiting.seq
        )),
        "{n}"
    );
}

#[tokio::test]
async fn a_node_learns_which_busy_workers_have_news_waiting_too_long() {
    let hub = TestHub::start().await;
    let tokens = hub.tokens(3).await;
    let (w01, w02) = (hub.client(&tokens[0]), hub.client(&tokens[1]));
    let m = w01.send_message(&dm("w02", "stop")).await.unwrap();
    let e = event_of(&w02, m.seq).await;
    w01.send_message(&dm("#general", "hello all"))
        .await
        .unwrap();
    let entry = |id: &str, token: &str| PollEntry {
        id: id.into(),
        token: Some(token.into()),
        after: 0,
        ack: Vec::new(),
    };
    let ask = |older_than_ms| OverdueQuery {
        older_than_ms,
        workers: vec![entry("w02", &tokens[1]), entry("w03", &tokens[2])],
    };
    // As a node asks: with its first worker's token, each entry carrying its worker's.
    let node = hub.client(&tokens[1]);
    // Not waiting long enough yet.
    let a = node.overdue(&ask(60_000)).await.unwrap();
    assert!(a.workers.is_empty() && a.events.is_empty(), "{a:?}");
    tokio::time::sleep(Duration::from_millis(50)).await;
    // Waiting longer than 10 ms: w02's DM; w03 has only a channel post, which never
    // interrupts.
    let a = node.overdue(&ask(10)).await.unwrap();
    assert_eq!(a.workers.len(), 1, "{a:?}");
    assert_eq!(
        a.events_of("w02").iter().map(|e| e.seq).collect::<Vec<_>>(),
        [e.seq]
    );
    // Shown in a tool result: no longer waiting.
    let mcp = connect(hub.url(), &tokens[1]).await;
    assert!(notices(&call(&mcp, "workers", json!({})).await).is_some());
    assert!(node.overdue(&ask(10)).await.unwrap().workers.is_empty());
    // An entry with another worker's token is refused.
    let bad = OverdueQuery {
        older_than_ms: 0,
        workers: vec![entry("w02", &tokens[2])],
    };
    assert!(node.overdue(&bad).await.is_err());
}
