//! Per-worker event queues over HTTP: fan-out written once, dedup, priorities, acks,
//! long-poll, and redelivery across a hub restart.

mod common;

use std::time::{Duration, Instant};

use agensh_domain::event::{kinds, Event, Priority};
use agensh_domain::message::NewMessage;
use agensh_domain::record::RecordKind;
use agensh_domain::ErrorKind;
use common::*;

fn msg(to: &str, text: &str) -> NewMessage {
    NewMessage {
        to: to.into(),
        text: text.into(),
        thread: None,
    }
}

fn seqs(events: &[Event]) -> Vec<i64> {
    events.iter().map(|e| e.seq).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broadcast_is_written_once_and_reaches_1024_workers() {
    let hub = TestHub::start().await;
    // The author and 1,024 others.
    let added = hub.admin().add_workers(1025).await.unwrap();
    let author = hub.client(&added[0].token);
    assert_eq!(added[0].id, "w0001");
    author
        .send_message(&msg("#general", "all hands: main is frozen"))
        .await
        .unwrap();

    let store = hub.hub.store();
    let mut seen = Vec::new();
    for w in &added[1..] {
        let pending = store.pending_events(&w.id, 0, 10).await.unwrap();
        assert_eq!(
            pending.len(),
            1,
            "{} has exactly the one post: {pending:?}",
            w.id
        );
        assert_eq!(pending[0].kind, kinds::CHANNEL_POST);
        seen.push(pending[0].seq);
    }
    assert_eq!(seen.len(), 1024);
    let seq = seen[0];
    assert!(
        seen.iter().all(|&s| s == seq),
        "every worker reads the same stored event"
    );
    assert!(store
        .pending_events("w0001", 0, 10)
        .await
        .unwrap()
        .is_empty());

    // One row was written: the next event takes the very next sequence number.
    let next = hub
        .admin()
        .notice("after the post", None, false, None)
        .await
        .unwrap();
    assert_eq!(next["event"]["seq"], seq + 1, "{next}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notice_with_a_repeated_dedup_key_is_stored_once() {
    let hub = TestHub::start().await;
    let w = hub.workers(1).await.remove(0);
    let admin = hub.admin();
    let first = admin
        .notice("deadline in 1 h", None, false, Some("deadline-1h"))
        .await
        .unwrap();
    assert_eq!(first["duplicate"], false, "{first}");
    let second = admin
        .notice("deadline in 1 h", None, false, Some("deadline-1h"))
        .await
        .unwrap();
    assert_eq!(second["duplicate"], true, "{second}");
    let events = w.events(0, 0).await.unwrap();
    assert_eq!(seqs(&events), vec![first["event"]["seq"].as_i64().unwrap()]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn direct_message_event_is_urgent() {
    let hub = TestHub::start().await;
    let ws = hub.workers(2).await;
    ws[0].send_message(&msg("w02", "ping")).await.unwrap();
    let events = ws[1].events(0, 0).await.unwrap();
    let got: Vec<(&str, Priority)> = events
        .iter()
        .map(|e| (e.kind.as_str(), e.priority))
        .collect();
    assert_eq!(got, vec![(kinds::DIRECT_MESSAGE, Priority::Urgent)]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn channel_post_event_is_normal() {
    let hub = TestHub::start().await;
    let ws = hub.workers(2).await;
    ws[0].send_message(&msg("#general", "hello")).await.unwrap();
    let events = ws[1].events(0, 0).await.unwrap();
    let got: Vec<(&str, Priority)> = events
        .iter()
        .map(|e| (e.kind.as_str(), e.priority))
        .collect();
    assert_eq!(got, vec![(kinds::CHANNEL_POST, Priority::Normal)]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn board_record_event_is_urgent() {
    let hub = TestHub::start().await;
    let ws = hub.workers(2).await;
    let r = ws[0]
        .post_record(&rec(RecordKind::Fact, "main builds again"))
        .await
        .unwrap();
    let events = ws[1].events(0, 0).await.unwrap();
    let got: Vec<(&str, Priority)> = events
        .iter()
        .map(|e| (e.kind.as_str(), e.priority))
        .collect();
    assert_eq!(got, vec![(kinds::BOARD_RECORD, Priority::Urgent)]);
    assert_eq!(events[0].payload["id"], r.record.id.as_str());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn author_does_not_receive_its_own_broadcasts() {
    let hub = TestHub::start().await;
    let ws = hub.workers(2).await;
    ws[0].send_message(&msg("#general", "hello")).await.unwrap();
    ws[0]
        .post_record(&rec(RecordKind::Fact, "main builds again"))
        .await
        .unwrap();
    assert!(ws[0].events(0, 0).await.unwrap().is_empty());
    assert_eq!(ws[1].events(0, 0).await.unwrap().len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acked_events_are_not_returned_again_and_unacked_are() {
    let hub = TestHub::start().await;
    let ws = hub.workers(2).await;
    for text in ["one", "two", "three"] {
        ws[0].send_message(&msg("#general", text)).await.unwrap();
    }
    let all = seqs(&ws[1].events(0, 0).await.unwrap());
    assert_eq!(all.len(), 3);
    assert_eq!(ws[1].ack(&all[..2]).await.unwrap(), 2);
    assert_eq!(seqs(&ws[1].events(0, 0).await.unwrap()), vec![all[2]]);
    assert_eq!(
        ws[1].ack(&all[..2]).await.unwrap(),
        0,
        "acking twice acks nothing new"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn later_urgent_event_can_be_acked_before_an_earlier_normal_one() {
    let hub = TestHub::start().await;
    let ws = hub.workers(2).await;
    ws[0]
        .send_message(&msg("#general", "normal first"))
        .await
        .unwrap();
    ws[0]
        .send_message(&msg("w02", "urgent second"))
        .await
        .unwrap();
    let events = ws[1].events(0, 0).await.unwrap();
    let (normal, urgent) = (events[0].seq, events[1].seq);
    assert_eq!(
        (events[0].priority, events[1].priority),
        (Priority::Normal, Priority::Urgent)
    );

    assert_eq!(ws[1].ack(&[urgent]).await.unwrap(), 1);
    assert_eq!(seqs(&ws[1].events(0, 0).await.unwrap()), vec![normal]);
    let state = ws[1].queue_state().await.unwrap();
    assert!(
        state.cursor < normal,
        "the cursor cannot pass the unacked {normal}: {state:?}"
    );
    assert_eq!(state.acked_above_cursor, 1, "{state:?}");

    assert_eq!(ws[1].ack(&[normal]).await.unwrap(), 1);
    assert!(ws[1].events(0, 0).await.unwrap().is_empty());
    let state = ws[1].queue_state().await.unwrap();
    assert_eq!(
        (state.cursor, state.acked_above_cursor),
        (urgent, 0),
        "{state:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acking_another_workers_event_is_rejected() {
    let hub = TestHub::start().await;
    let ws = hub.workers(3).await;
    ws[0]
        .send_message(&msg("w02", "for w02 only"))
        .await
        .unwrap();
    let seq = ws[1].events(0, 0).await.unwrap()[0].seq;
    let e = expect_err(
        ws[2].ack(&[seq]).await,
        ErrorKind::Invalid,
        "not_your_event",
    );
    assert!(
        e.message.contains("acknowledge only events you received"),
        "{}",
        e.message
    );
    assert_eq!(
        seqs(&ws[1].events(0, 0).await.unwrap()),
        vec![seq],
        "w02 still has it"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_poll_returns_as_soon_as_an_event_arrives() {
    let hub = TestHub::start().await;
    let ws = hub.workers(2).await;
    let poller = ws[1].clone();
    let started = Instant::now();
    let poll = tokio::spawn(async move {
        let events = poller.events(0, 10).await;
        (events, Instant::now())
    });
    hub.wait_for_metric("agensh_long_polls_waiting", 1, "the poll waits at the hub")
        .await;
    assert!(
        !poll.is_finished(),
        "the poll waits while nothing is pending"
    );
    let posting = Instant::now();
    let dm = ws[0].send_message(&msg("w02", "wake up")).await.unwrap();
    let (events, returned) = poll.await.unwrap();
    let events = events.unwrap();
    assert!(returned >= posting, "the poll returned before the post");
    assert!(
        returned - started < Duration::from_secs(2),
        "took {:?}",
        returned - started
    );
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0].kind, kinds::DIRECT_MESSAGE);
    assert_eq!(events[0].payload["seq"], dm.seq);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_poll_returns_empty_after_the_wait_when_nothing_arrives() {
    let hub = TestHub::start().await;
    let w = hub.workers(1).await.remove(0);
    let started = Instant::now();
    let events = w.events(0, 1).await.unwrap();
    let took = started.elapsed();
    assert!(events.is_empty(), "{events:?}");
    assert!(
        took >= Duration::from_millis(900),
        "returned after only {took:?}"
    );
    assert!(took < Duration::from_secs(5), "took {took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_redelivers_unacked_events_and_not_acked_ones() {
    let hub = TestHub::start().await;
    let added = hub.admin().add_workers(2).await.unwrap();
    let (w01, w02) = (hub.client(&added[0].token), hub.client(&added[1].token));
    for text in ["first", "second", "third"] {
        w01.send_message(&msg("w02", text)).await.unwrap();
    }
    let before = seqs(&w02.events(0, 0).await.unwrap());
    assert_eq!(before.len(), 3);
    // The first moves the cursor; the third is acknowledged above it.
    assert_eq!(w02.ack(&[before[0], before[2]]).await.unwrap(), 2);

    let hub = hub.restart().await;
    let w02 = hub.client(&added[1].token);
    assert_eq!(seqs(&w02.events(0, 0).await.unwrap()), vec![before[1]]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_poll_is_not_woken_by_events_for_other_workers() {
    let hub = TestHub::start().await;
    let ws = hub.workers(3).await;
    let poller = ws[1].clone();
    let poll = tokio::spawn(async move {
        let events = poller.events(0, 30).await;
        (events, Instant::now())
    });
    hub.wait_for_metric("agensh_long_polls_waiting", 1, "the poll waits at the hub")
        .await;
    ws[0]
        .send_message(&msg("w03", "only for w03"))
        .await
        .unwrap();
    ws[1]
        .send_message(&msg("#general", "w02's own post"))
        .await
        .unwrap();
    // Events reach waiting polls in commit order: had either of those woken the poll, it
    // would answer before (and without) w02's own message.
    let posting = Instant::now();
    let dm = ws[0].send_message(&msg("w02", "now you")).await.unwrap();
    let (events, returned) = poll.await.unwrap();
    let events = events.unwrap();
    assert!(
        returned >= posting,
        "the poll returned before its own event was posted: {events:?}"
    );
    assert_eq!(events.len(), 1, "only w02's own event: {events:?}");
    assert_eq!(events[0].kind, kinds::DIRECT_MESSAGE);
    assert_eq!(events[0].payload["seq"], dm.seq);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_added_later_does_not_get_earlier_broadcasts_as_events() {
    let hub = TestHub::start().await;
    let first = hub.workers(1).await;
    first[0]
        .send_message(&msg("#general", "before you joined"))
        .await
        .unwrap();
    let late = hub.workers(1).await;
    assert!(late[0].events(0, 0).await.unwrap().is_empty());
    first[0]
        .send_message(&msg("#general", "after you joined"))
        .await
        .unwrap();
    let events = late[0].events(0, 0).await.unwrap();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].payload["text"], "after you joined");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_dedup_key_cannot_suppress_a_hub_event() {
    let hub = TestHub::start().await;
    let ws = hub.workers(2).await;
    hub.admin()
        .notice("heads up", None, false, Some("board:G1"))
        .await
        .unwrap();
    let posted = ws[0]
        .post_record(&agensh_domain::record::NewRecord::new(
            RecordKind::Fact,
            "first",
        ))
        .await
        .unwrap();
    assert_eq!(posted.record.id, "G1");
    let kinds_seen: Vec<String> = ws[1]
        .events(0, 0)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.kind)
        .collect();
    assert_eq!(kinds_seen, vec![kinds::NOTICE, kinds::BOARD_RECORD]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_poll_can_acknowledge_events_in_the_same_request() {
    let hub = TestHub::start().await;
    let ws = hub.workers(2).await;
    ws[0].send_message(&msg("#general", "one")).await.unwrap();
    ws[0].send_message(&msg("#general", "two")).await.unwrap();
    let first = ws[1].events(0, 0).await.unwrap();
    assert_eq!(first.len(), 2);
    let rest = ws[1].ack_and_poll(&[first[0].seq], 0, 0).await.unwrap();
    assert_eq!(
        seqs(&rest),
        vec![first[1].seq],
        "the acknowledged event is gone"
    );
    let err = ws[1]
        .ack_and_poll(&[first[0].seq + 1000], 0, 0)
        .await
        .unwrap_err();
    assert_eq!(err.code, "not_your_event");
}
