//! Requests a node makes for many of its workers at once: one long-poll for their events
//! (`POST /events/poll`) and one status report (`PUT /workers/status`) — who may make
//! them, what they answer, their limits, and that acknowledgements stay durable.

mod common;

use std::time::{Duration, Instant};

use agensh_domain::event::{kinds, PollEntry, PollMany};
use agensh_domain::message::NewMessage;
use agensh_domain::worker::{NewWorker, StatusReport, WorkerStatus, BATCH_LIMIT};
use agensh_domain::ErrorKind;
use common::*;
use reqwest::Method;
use serde_json::json;

fn msg(to: &str, text: &str) -> NewMessage {
    NewMessage {
        to: to.into(),
        text: text.into(),
        thread: None,
    }
}

fn entry(w: &NewWorker, after: i64, ack: &[i64]) -> PollEntry {
    PollEntry {
        id: w.id.clone(),
        token: Some(w.token.clone()),
        after,
        ack: ack.to_vec(),
    }
}

fn poll(wait: u64, workers: Vec<PollEntry>) -> PollMany {
    PollMany {
        wait,
        limit: None,
        workers,
    }
}

fn report(w: &NewWorker, status: &str) -> StatusReport {
    StatusReport {
        id: w.id.clone(),
        token: Some(w.token.clone()),
        status: status.into(),
        progress: None,
        agent: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_poll_answers_many_workers_with_each_event_once() {
    let hub = TestHub::start().await;
    let ws = hub.admin().add_workers(3).await.unwrap();
    let node = hub.client(&ws[1].token);
    let post = hub
        .client(&ws[0].token)
        .send_message(&msg("#general", "all hands"))
        .await
        .unwrap();
    let dm = hub
        .client(&ws[0].token)
        .send_message(&msg(&ws[2].id, "just you"))
        .await
        .unwrap();
    let got = node
        .poll_many(&poll(0, vec![entry(&ws[1], 0, &[]), entry(&ws[2], 0, &[])]))
        .await
        .unwrap();
    assert_eq!(got.events.len(), 2, "each event once: {got:?}");
    let w1 = got.events_of(&ws[1].id);
    let w2 = got.events_of(&ws[2].id);
    assert_eq!(w1.len(), 1);
    assert_eq!(w1[0].kind, kinds::CHANNEL_POST);
    assert_eq!(w1[0].created_at, post.created_at);
    assert_eq!(
        w2.iter().map(|e| e.kind.as_str()).collect::<Vec<_>>(),
        [kinds::CHANNEL_POST, kinds::DIRECT_MESSAGE]
    );
    assert_eq!(w2[1].created_at, dm.created_at);
    assert!(got.errors.is_empty());
    // The sender's own broadcast is not its event.
    let own = node
        .poll_many(&poll(0, vec![entry(&ws[0], 0, &[])]))
        .await
        .unwrap();
    assert!(own.events.is_empty() && own.workers.is_empty(), "{own:?}");
    // `after` skips the events in hand, per worker.
    let later = node
        .poll_many(&poll(
            0,
            vec![entry(&ws[1], w1[0].seq, &[]), entry(&ws[2], w2[0].seq, &[])],
        ))
        .await
        .unwrap();
    assert!(later.events_of(&ws[1].id).is_empty());
    assert_eq!(later.events_of(&ws[2].id)[0].seq, w2[1].seq);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_poll_answers_as_soon_as_any_of_its_workers_has_an_event() {
    let hub = TestHub::start().await;
    let ws = hub.admin().add_workers(3).await.unwrap();
    let node = hub.client(&ws[1].token);
    let body = poll(20, vec![entry(&ws[1], 0, &[]), entry(&ws[2], 0, &[])]);
    let waiting = tokio::spawn(async move { node.poll_many(&body).await });
    hub.wait_for_metric("agensh_long_polls_waiting", 1, "the poll waits")
        .await;
    let sent = Instant::now();
    hub.client(&ws[0].token)
        .send_message(&msg(&ws[2].id, "wake up"))
        .await
        .unwrap();
    let got = waiting.await.unwrap().unwrap();
    assert!(sent.elapsed() < Duration::from_secs(5), "answered at once");
    assert!(got.events_of(&ws[1].id).is_empty());
    assert_eq!(got.events_of(&ws[2].id)[0].kind, kinds::DIRECT_MESSAGE);
    assert_eq!(hub.metric("agensh_long_polls_waiting").await, 0);
    assert_eq!(
        hub.metric("agensh_long_polls_total").await,
        1,
        "one poll waited"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_poll_stops_waiting_at_the_hub() {
    let hub = TestHub::start().await;
    let ws = hub.admin().add_workers(2).await.unwrap();
    let node = hub.client(&ws[1].token);
    let body = poll(30, vec![entry(&ws[0], 0, &[]), entry(&ws[1], 0, &[])]);
    let waiting = tokio::spawn(async move { node.poll_many(&body).await });
    hub.wait_for_metric("agensh_long_polls_waiting", 1, "the poll waits")
        .await;
    waiting.abort();
    hub.wait_for_metric(
        "agensh_long_polls_waiting",
        0,
        "the hub drops a poll whose node went away",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acks_in_a_poll_are_durable_and_one_workers_refusal_is_its_own() {
    let hub = TestHub::start().await;
    let ws = hub.admin().add_workers(3).await.unwrap();
    let sender = hub.client(&ws[0].token);
    sender.send_message(&msg("#general", "one")).await.unwrap();
    sender.send_message(&msg("#general", "two")).await.unwrap();
    let node = hub.client(&ws[1].token);
    let got = node
        .poll_many(&poll(0, vec![entry(&ws[1], 0, &[]), entry(&ws[2], 0, &[])]))
        .await
        .unwrap();
    let seqs: Vec<i64> = got.events.iter().map(|e| e.seq).collect();
    assert_eq!(seqs.len(), 2);
    // w02 acknowledges both; w03 names an event that is not in its queue. The refusal
    // answers at once, although the poll would wait.
    let t = Instant::now();
    let acked = node
        .poll_many(&poll(
            20,
            vec![entry(&ws[1], 0, &seqs), entry(&ws[2], 0, &[seqs[0], 999])],
        ))
        .await
        .unwrap();
    assert!(t.elapsed() < Duration::from_secs(5));
    assert_eq!(acked.errors[&ws[2].id].code, "not_your_event");
    assert!(acked.events_of(&ws[2].id).is_empty());
    assert!(
        acked.events_of(&ws[1].id).is_empty(),
        "acked events are gone"
    );
    // Durable: the queue state says so, and after a restart nothing comes back for w02.
    let hub = hub.restart().await;
    let state = hub.client(&ws[1].token).queue_state().await.unwrap();
    assert_eq!(state.cursor, seqs[1]);
    assert!(hub
        .client(&ws[1].token)
        .events(0, 0)
        .await
        .unwrap()
        .is_empty());
    // w03's acks were not applied, not even the valid one.
    assert_eq!(
        hub.client(&ws[2].token).events(0, 0).await.unwrap().len(),
        2
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_entry_must_be_authorised_for_its_worker() {
    let hub = TestHub::start().await;
    let ws = hub.admin().add_workers(3).await.unwrap();
    let as_w1 = hub.client(&ws[0].token);
    let no_token = |w: &NewWorker| PollEntry {
        id: w.id.clone(),
        token: None,
        after: 0,
        ack: Vec::new(),
    };
    // A worker token covers its own entry only.
    as_w1
        .poll_many(&poll(0, vec![no_token(&ws[0])]))
        .await
        .unwrap();
    let e = expect_err(
        as_w1
            .poll_many(&poll(0, vec![no_token(&ws[0]), no_token(&ws[1])]))
            .await,
        ErrorKind::Forbidden,
        "needs_token",
    );
    assert!(e.message.contains(&ws[1].id), "{}", e.message);
    // Another worker's token in an entry is refused.
    let mut wrong = entry(&ws[1], 0, &[]);
    wrong.token = Some(ws[2].token.clone());
    expect_err(
        as_w1.poll_many(&poll(0, vec![wrong])).await,
        ErrorKind::Unauthorized,
        "wrong_token",
    );
    // The admin needs no tokens, but the workers must exist.
    hub.admin()
        .poll_many(&poll(0, vec![no_token(&ws[1]), no_token(&ws[2])]))
        .await
        .unwrap();
    let ghost = PollEntry {
        id: "w77".into(),
        token: None,
        after: 0,
        ack: Vec::new(),
    };
    expect_err(
        hub.admin().poll_many(&poll(0, vec![ghost])).await,
        ErrorKind::NotFound,
        "unknown_worker",
    );
    // No token at all.
    let body = json!({ "workers": [{ "id": ws[0].id, "token": ws[0].token }] }).to_string();
    let answer = hub
        .raw(Method::POST, "/api/v1/events/poll", None, Some(&body))
        .await;
    api_error(&answer, 401, "unauthorized");
    // The same rules for status reports.
    let e = expect_err(
        as_w1
            .set_statuses(&[StatusReport {
                id: ws[1].id.clone(),
                token: None,
                status: "busy".into(),
                progress: None,
                agent: None,
            }])
            .await,
        ErrorKind::Forbidden,
        "needs_token",
    );
    assert!(e.message.contains("token"), "{}", e.message);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_polls_are_refused_with_what_to_do() {
    let hub = TestHub::start().await;
    let ws = hub.admin().add_workers(2).await.unwrap();
    let node = hub.client(&ws[0].token);
    let e = expect_err(
        node.poll_many(&poll(0, Vec::new())).await,
        ErrorKind::Invalid,
        "no_workers",
    );
    assert!(e.message.contains("at least one"), "{}", e.message);
    expect_err(
        node.poll_many(&poll(0, vec![entry(&ws[0], 0, &[]), entry(&ws[0], 0, &[])]))
            .await,
        ErrorKind::Invalid,
        "duplicate_worker",
    );
    let e = expect_err(
        node.poll_many(&poll(3600, vec![entry(&ws[0], 0, &[])]))
            .await,
        ErrorKind::Invalid,
        "bad_wait",
    );
    assert!(e.message.contains("60"), "{}", e.message);
    let mut limited = poll(0, vec![entry(&ws[0], 0, &[])]);
    limited.limit = Some(0);
    expect_err(
        node.poll_many(&limited).await,
        ErrorKind::Invalid,
        "bad_limit",
    );
    let mut bad_id = entry(&ws[0], 0, &[]);
    bad_id.id = "../w01".into();
    expect_err(
        node.poll_many(&poll(0, vec![bad_id])).await,
        ErrorKind::Invalid,
        "bad_worker_id",
    );
    let answer = hub
        .raw(
            Method::POST,
            "/api/v1/events/poll",
            Some(&ws[0].token),
            Some(r#"{"workers":"w01"}"#),
        )
        .await;
    api_error(&answer, 400, "bad_body");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_may_name_up_to_the_limit_of_workers_and_is_told_to_split_beyond() {
    let hub = TestHub::start().await;
    let mut ws = hub.admin().add_workers(BATCH_LIMIT).await.unwrap();
    ws.extend(hub.admin().add_workers(1).await.unwrap());
    let node = hub.client(&ws[0].token);
    hub.client(&ws[0].token)
        .send_message(&msg("#general", "everyone"))
        .await
        .unwrap();
    // With every token, far beyond hub.body_limit (64 KiB): one request still does.
    let all: Vec<PollEntry> = ws[1..].iter().map(|w| entry(w, 0, &[])).collect();
    let got = node.poll_many(&poll(0, all.clone())).await.unwrap();
    assert_eq!(got.events.len(), 1);
    assert_eq!(got.workers.len(), BATCH_LIMIT);
    let reports: Vec<StatusReport> = ws[1..].iter().map(|w| report(w, "idle")).collect();
    assert_eq!(node.set_statuses(&reports).await.unwrap(), BATCH_LIMIT);
    // One more is refused, with the advice.
    let mut too_many = all;
    too_many.push(entry(&ws[0], 0, &[]));
    let e = expect_err(
        node.poll_many(&poll(0, too_many)).await,
        ErrorKind::Invalid,
        "too_many_workers",
    );
    assert!(e.message.contains("split"), "{}", e.message);
    let every: Vec<StatusReport> = ws.iter().map(|w| report(w, "idle")).collect();
    expect_err(
        node.set_statuses(&every).await,
        ErrorKind::Invalid,
        "too_many_workers",
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_status_report_sets_every_status_or_none() {
    let hub = TestHub::start().await;
    let ws = hub.admin().add_workers(3).await.unwrap();
    let node = hub.client(&ws[0].token);
    let n = node
        .set_statuses(&[report(&ws[0], "busy"), report(&ws[1], "idle")])
        .await
        .unwrap();
    assert_eq!(n, 2);
    let status = |list: &[agensh_domain::worker::WorkerInfo], id: &str| {
        list.iter().find(|w| w.id == id).unwrap().status
    };
    let listed = hub.admin().workers().await.unwrap();
    assert_eq!(status(&listed, &ws[0].id), WorkerStatus::Busy);
    assert_eq!(status(&listed, &ws[1].id), WorkerStatus::Idle);
    assert_eq!(status(&listed, &ws[2].id), WorkerStatus::Stopped);
    // A request for many workers counts as activity of each worker it names.
    let active: Vec<bool> = listed.iter().map(|w| w.last_activity.is_some()).collect();
    assert_eq!(active, [true, true, false]);
    // A bad status anywhere sets nothing.
    let e = expect_err(
        node.set_statuses(&[report(&ws[0], "idle"), report(&ws[2], "asleep")])
            .await,
        ErrorKind::Invalid,
        "bad_status",
    );
    assert!(e.message.contains("busy"), "{}", e.message);
    let listed = hub.admin().workers().await.unwrap();
    assert_eq!(status(&listed, &ws[0].id), WorkerStatus::Busy);
    assert_eq!(status(&listed, &ws[2].id), WorkerStatus::Stopped);
    // The admin needs no tokens.
    hub.admin()
        .set_statuses(&[StatusReport {
            id: ws[2].id.clone(),
            token: None,
            status: "dead".into(),
            progress: None,
            agent: Some("codex on gpt-x at http://127.0.0.1:9/v1".into()),
        }])
        .await
        .unwrap();
    let listed = hub.admin().workers().await.unwrap();
    let w2 = listed.iter().find(|w| w.id == ws[2].id).unwrap();
    assert_eq!(
        w2.agent.as_deref(),
        Some("codex on gpt-x at http://127.0.0.1:9/v1"),
        "the agent a node reports is listed with the worker"
    );
    assert_eq!(status(&listed, &ws[2].id), WorkerStatus::Dead);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_workers_step_is_listed_until_a_report_without_one() {
    let hub = TestHub::start().await;
    let ws = hub.admin().add_workers(2).await.unwrap();
    let node = hub.client(&ws[0].token);
    let step = agensh_domain::worker::WorkerProgress {
        step: "run: python3 -m unittest".into(),
        since: 1_700_000_000_000,
        tokens: 1_500,
        tokens_per_sec: 8.5,
    };
    let busy = StatusReport {
        progress: Some(step.clone()),
        ..report(&ws[0], "busy")
    };
    node.set_statuses(&[busy, report(&ws[1], "idle")])
        .await
        .unwrap();
    let listed = hub.admin().workers().await.unwrap();
    assert_eq!(listed[0].progress.as_ref(), Some(&step));
    assert_eq!(listed[1].progress, None);
    node.set_statuses(&[report(&ws[0], "idle")]).await.unwrap();
    let listed = hub.admin().workers().await.unwrap();
    assert_eq!(listed[0].progress, None, "the step outlived its turn");
}
