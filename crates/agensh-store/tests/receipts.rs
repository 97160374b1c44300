//! Delivery receipts on both stores: a recipient's receipt goes from stored (no row) to
//! presented (the first presentation wins) to acknowledged (an acknowledgement without a
//! presentation counts as one via prompt); events without receipts are left out; the
//! urgent events nobody was shown are found by the time they were stored.

mod common;

use agensh_domain::event::{kinds, Event, NewEvent, Priority};
use agensh_domain::message::NewMessage;
use agensh_domain::receipt::{Receipt, ReceiptState, Via};
use agensh_store::Store;
use common::TestStore;

const T0: i64 = 1_700_000_000_000;

fn msg(to: &str, text: &str) -> NewMessage {
    NewMessage {
        to: to.into(),
        text: text.into(),
        thread: None,
    }
}

/// The event that carries message `seq`.
async fn event_of(s: &dyn Store, seq: i64) -> Event {
    s.message_event(seq)
        .await
        .unwrap()
        .expect("the message is stored")
        .1
        .expect("its event is stored")
}

/// A direct message from `from` to `to` at `at`, and its event's number.
async fn dm(s: &dyn Store, from: &str, to: &str, at: i64) -> i64 {
    let m = s.post_message(from, msg(to, "ping"), at).await.unwrap();
    event_of(s, m.seq).await.seq
}

async fn receipts(s: &dyn Store, seqs: &[i64]) -> Vec<Receipt> {
    s.receipts(seqs.to_vec()).await.unwrap()
}

/// A receipt's worker, state, presentation (when, how) and acknowledgement (when).
type Seen = (String, ReceiptState, Option<(i64, Via)>, Option<i64>);

/// What [`Seen`] says of each receipt.
fn states(r: &[Receipt]) -> Vec<Seen> {
    r.iter()
        .map(|r| {
            (
                r.worker.clone(),
                r.state,
                r.presented_at.zip(r.via),
                r.acknowledged_at,
            )
        })
        .collect()
}

async fn a_receipt_goes_from_presented_to_acknowledged_and_keeps_its_first_times(t: TestStore) {
    t.add_workers(3, T0).await.unwrap();
    let e = dm(&*t, "w01", "w02", T0).await;
    assert!(receipts(&*t, &[e]).await.is_empty(), "stored: no row yet");

    let n = t
        .present_events("w02", vec![e], Via::ToolResult, false, T0 + 1_000)
        .await
        .unwrap();
    assert_eq!(n, 1);
    let r = receipts(&*t, &[e]).await;
    assert_eq!(
        states(&r),
        [(
            "w02".to_string(),
            ReceiptState::Presented,
            Some((T0 + 1_000, Via::ToolResult)),
            None
        )]
    );
    assert_eq!((r[0].event, r[0].kind.as_str()), (e, kinds::DIRECT_MESSAGE));
    assert_eq!((r[0].stored_at, r[0].wait_ms()), (T0, Some(1_000)));

    // Presented again, another way: the first presentation stays.
    let again = t
        .present_events("w02", vec![e], Via::Prompt, false, T0 + 2_000)
        .await
        .unwrap();
    assert_eq!(again, 0);
    assert_eq!(t.ack_events("w02", vec![e], T0 + 3_000).await.unwrap(), 1);
    // Acknowledged again (already out of the queue): the first acknowledgement stays.
    assert_eq!(t.ack_events("w02", vec![e], T0 + 4_000).await.unwrap(), 0);
    assert_eq!(
        states(&receipts(&*t, &[e]).await),
        [(
            "w02".to_string(),
            ReceiptState::Acknowledged,
            Some((T0 + 1_000, Via::ToolResult)),
            Some(T0 + 3_000)
        )]
    );
    assert!(t.pending_events("w02", 0, 10).await.unwrap().is_empty());
}

async fn an_acknowledgement_without_a_presentation_counts_as_one_via_prompt(t: TestStore) {
    t.add_workers(2, T0).await.unwrap();
    let e = dm(&*t, "w01", "w02", T0).await;
    t.ack_events("w02", vec![e], T0 + 5_000).await.unwrap();
    assert_eq!(
        states(&receipts(&*t, &[e]).await),
        [(
            "w02".to_string(),
            ReceiptState::Acknowledged,
            Some((T0 + 5_000, Via::Prompt)),
            Some(T0 + 5_000)
        )]
    );
    // A presentation after it changes nothing.
    let n = t
        .present_events("w02", vec![e], Via::ToolResult, false, T0 + 6_000)
        .await
        .unwrap();
    assert_eq!(n, 0);
    assert_eq!(receipts(&*t, &[e]).await[0].presented_at, Some(T0 + 5_000));
    // The batched acknowledgement of a node's poll records receipts too.
    let f = dm(&*t, "w02", "w01", T0 + 7_000).await;
    let out = t
        .ack_events_many(vec![("w01".to_string(), vec![f, f])], T0 + 8_000)
        .await
        .unwrap();
    assert_eq!(out[0].as_ref().unwrap(), &1);
    assert_eq!(
        states(&receipts(&*t, &[f]).await),
        [(
            "w01".to_string(),
            ReceiptState::Acknowledged,
            Some((T0 + 8_000, Via::Prompt)),
            Some(T0 + 8_000)
        )]
    );
}

async fn the_first_presentation_wins(t: TestStore) {
    t.add_workers(2, T0).await.unwrap();
    let e = dm(&*t, "w01", "w02", T0).await;
    for (at, via) in [
        (T0 + 10, Via::Prompt),
        (T0 + 20, Via::ToolResult),
        (T0 + 30, Via::Interruption),
    ] {
        t.present_events("w02", vec![e], via, false, at)
            .await
            .unwrap();
    }
    let r = receipts(&*t, &[e]).await;
    assert_eq!(
        (r[0].presented_at, r[0].via, r[0].state),
        (Some(T0 + 10), Some(Via::Prompt), ReceiptState::Presented)
    );
}

async fn events_without_receipts_and_others_events_are_left_out(t: TestStore) {
    t.add_workers(3, T0).await.unwrap();
    let board = t
        .enqueue(
            NewEvent {
                kind: kinds::BOARD_RECORD.into(),
                priority: Priority::Urgent,
                payload: serde_json::json!({ "id": "G1" }),
                dedup_key: Some("board:G1".into()),
                source: Some("w01".into()),
                target: None,
                except: None,
            },
            T0,
        )
        .await
        .unwrap()
        .unwrap()
        .seq;
    let opened = t
        .enqueue(
            NewEvent {
                kind: kinds::PR_OPENED.into(),
                priority: Priority::Normal,
                payload: serde_json::json!({ "number": 1 }),
                dedup_key: Some("pr:1:opened".into()),
                source: Some("w01".into()),
                target: None,
                except: None,
            },
            T0,
        )
        .await
        .unwrap()
        .unwrap()
        .seq;
    let to_w03 = dm(&*t, "w01", "w03", T0).await;
    let n = t
        .present_events(
            "w02",
            vec![board, opened, to_w03],
            Via::Prompt,
            false,
            T0 + 1,
        )
        .await
        .unwrap();
    assert_eq!(n, 0);
    t.ack_events("w02", vec![board, opened], T0 + 2)
        .await
        .unwrap();
    assert!(receipts(&*t, &[board, opened, to_w03]).await.is_empty());
    // An unknown worker is refused, as its acknowledgements are.
    let e = t
        .present_events("w09", vec![to_w03], Via::Prompt, false, T0 + 3)
        .await
        .unwrap_err();
    assert_eq!(e.code, "unknown_worker");
}

async fn a_prompts_urgent_events_leave_the_queue_when_presented_and_stay_presented(t: TestStore) {
    t.add_workers(3, T0).await.unwrap();
    let direct = dm(&*t, "w01", "w02", T0).await;
    let post = t
        .post_message("w03", msg("#general", "hello"), T0)
        .await
        .unwrap();
    let post = event_of(&*t, post.seq).await.seq;
    let n = t
        .present_events("w02", vec![direct, post], Via::Prompt, true, T0 + 100)
        .await
        .unwrap();
    assert_eq!(n, 2);
    let pending: Vec<i64> = t
        .pending_events("w02", 0, 10)
        .await
        .unwrap()
        .iter()
        .map(|e| e.seq)
        .collect();
    assert_eq!(
        pending,
        [post],
        "the urgent DM left the queue, the post waits"
    );
    let r = receipts(&*t, &[direct, post]).await;
    assert!(
        r.iter().all(|r| r.state == ReceiptState::Presented),
        "{r:?}"
    );
    // The turn ends: both acknowledged.
    t.ack_events("w02", vec![direct, post], T0 + 900)
        .await
        .unwrap();
    let r = receipts(&*t, &[direct, post]).await;
    assert_eq!(
        r.iter()
            .map(|r| (r.event, r.state, r.acknowledged_at))
            .collect::<Vec<_>>(),
        [
            (direct, ReceiptState::Acknowledged, Some(T0 + 900)),
            (post, ReceiptState::Acknowledged, Some(T0 + 900))
        ]
    );
    // Dequeuing is an acknowledgement of the queue: refused for an event not the worker's.
    let theirs = dm(&*t, "w01", "w03", T0 + 1_000).await;
    let e = t
        .present_events("w02", vec![theirs], Via::Prompt, true, T0 + 1_100)
        .await
        .unwrap_err();
    assert_eq!(e.code, "not_your_event");
}

async fn a_channel_post_has_a_receipt_per_worker_shown_it(t: TestStore) {
    t.add_workers(4, T0).await.unwrap();
    let m = t
        .post_message("w01", msg("#general", "hi all"), T0)
        .await
        .unwrap();
    let e = event_of(&*t, m.seq).await;
    assert_eq!(
        (e.kind.as_str(), e.target.as_deref()),
        (kinds::CHANNEL_POST, None)
    );
    t.present_events("w02", vec![e.seq], Via::Prompt, false, T0 + 10)
        .await
        .unwrap();
    t.ack_events("w03", vec![e.seq], T0 + 20).await.unwrap();
    // The sender's own post is not in its queue: nothing recorded for it.
    t.present_events("w01", vec![e.seq], Via::Prompt, false, T0 + 30)
        .await
        .unwrap();
    let r = receipts(&*t, &[e.seq]).await;
    assert_eq!(
        r.iter()
            .map(|r| (r.worker.as_str(), r.state))
            .collect::<Vec<_>>(),
        [
            ("w02", ReceiptState::Presented),
            ("w03", ReceiptState::Acknowledged)
        ]
    );
    // The newest presentations, for the stored → presented times.
    let since: Vec<(String, Option<i64>)> = t
        .receipts_presented_since(T0 + 15, 10)
        .await
        .unwrap()
        .iter()
        .map(|r| (r.worker.clone(), r.wait_ms()))
        .collect();
    assert_eq!(since, [("w03".to_string(), Some(20))]);
}

async fn urgent_events_nobody_was_shown_are_found_by_when_they_were_stored(t: TestStore) {
    t.add_workers(5, T0).await.unwrap();
    let waiting = dm(&*t, "w01", "w02", T0).await;
    let shown = dm(&*t, "w01", "w03", T0 + 1_000).await;
    let acked = dm(&*t, "w01", "w04", T0 + 2_000).await;
    let later = dm(&*t, "w01", "w05", T0 + 10_000).await;
    // Neither a channel post (for everyone) nor a normal event for one worker counts.
    t.post_message("w01", msg("#general", "hi"), T0 + 500)
        .await
        .unwrap();
    t.enqueue(
        NewEvent {
            kind: kinds::ISSUE_COMMENTED.into(),
            priority: Priority::Normal,
            payload: serde_json::json!({ "number": 1 }),
            dedup_key: Some("issue:1:comment:1".into()),
            source: Some("w01".into()),
            target: Some("w02".into()),
            except: None,
        },
        T0 + 600,
    )
    .await
    .unwrap();
    t.present_events("w03", vec![shown], Via::ToolResult, false, T0 + 3_000)
        .await
        .unwrap();
    t.ack_events("w04", vec![acked], T0 + 3_000).await.unwrap();

    async fn unseen(t: &dyn Store, from: i64, to: i64) -> Vec<i64> {
        t.unseen_events(from, to, 100)
            .await
            .unwrap()
            .iter()
            .map(|e| e.seq)
            .collect()
    }
    assert_eq!(unseen(&*t, T0, T0 + 5_000).await, [waiting]);
    assert_eq!(unseen(&*t, T0, T0 + 20_000).await, [waiting, later]);
    assert_eq!(
        unseen(&*t, T0 + 1, T0 + 20_000).await,
        [later],
        "stored before from"
    );
    assert_eq!(
        unseen(&*t, T0, T0 + 10_000).await,
        [waiting],
        "stored at to: not yet"
    );
    assert_eq!(t.unseen_events(T0, T0 + 20_000, 1).await.unwrap().len(), 1);
    // Shown at last: no longer waiting.
    t.present_events("w02", vec![waiting], Via::Prompt, true, T0 + 30_000)
        .await
        .unwrap();
    assert_eq!(unseen(&*t, T0, T0 + 20_000).await, [later]);
}

/// A worker's events that would interrupt its turn: its own urgent news stored before the
/// mark and not presented; never a broadcast (an urgent notice to all included), a board
/// record, a channel post, a normal event, another worker's message or one it was shown or
/// acknowledged.
async fn a_workers_overdue_events_are_its_unseen_urgent_news_before_the_mark(t: TestStore) {
    t.add_workers(3, T0).await.unwrap();
    let first = dm(&*t, "w01", "w02", T0).await;
    let shown = dm(&*t, "w01", "w02", T0 + 100).await;
    let acked = dm(&*t, "w03", "w02", T0 + 200).await;
    dm(&*t, "w02", "w03", T0 + 300).await;
    t.post_message("w01", msg("#general", "hi"), T0 + 400)
        .await
        .unwrap();
    use agensh_domain::record::{NewRecord, RecordKind};
    let fact = NewRecord::new(RecordKind::Fact, "the build takes 10 minutes".to_string());
    t.append_record("w01", fact, T0 + 500, 600).await.unwrap();
    let notice = |priority, key: &str, target: Option<&str>| NewEvent {
        kind: kinds::NOTICE.into(),
        priority,
        payload: serde_json::json!({ "text": "stop and read" }),
        dedup_key: Some(key.into()),
        source: None,
        target: target.map(str::to_string),
        except: None,
    };
    t.enqueue(notice(Priority::Normal, "n1", Some("w02")), T0 + 600)
        .await
        .unwrap();
    let everyone = t
        .enqueue(notice(Priority::Urgent, "n2", None), T0 + 700)
        .await
        .unwrap()
        .unwrap()
        .seq;
    let late = dm(&*t, "w01", "w02", T0 + 5_000).await;
    t.present_events("w02", vec![shown], Via::ToolResult, false, T0 + 1_000)
        .await
        .unwrap();
    t.ack_events("w02", vec![acked], T0 + 1_000).await.unwrap();

    async fn overdue(t: &dyn Store, worker: &str, before: i64, limit: usize) -> Vec<i64> {
        t.overdue_events(worker, before, limit)
            .await
            .unwrap()
            .iter()
            .map(|e| e.seq)
            .collect()
    }
    assert_eq!(overdue(&*t, "w02", T0 + 5_000, 100).await, [first]);
    assert_eq!(overdue(&*t, "w02", T0 + 5_001, 100).await, [first, late]);
    assert_eq!(overdue(&*t, "w02", T0 + 5_001, 1).await, [first]);
    assert_eq!(overdue(&*t, "w02", T0, 100).await, Vec::<i64>::new());
    // Neither the notice to all nor w03's message is overdue for w01.
    assert!(overdue(&*t, "w01", T0 + 5_000, 100).await.is_empty());
    // Shown in a prompt at last: no longer overdue.
    t.present_events("w02", vec![first, everyone], Via::Prompt, true, T0 + 6_000)
        .await
        .unwrap();
    assert_eq!(overdue(&*t, "w02", T0 + 10_000, 100).await, [late]);
}

stores!(
    a_workers_overdue_events_are_its_unseen_urgent_news_before_the_mark,
    a_receipt_goes_from_presented_to_acknowledged_and_keeps_its_first_times,
    an_acknowledgement_without_a_presentation_counts_as_one_via_prompt,
    the_first_presentation_wins,
    events_without_receipts_and_others_events_are_left_out,
    a_prompts_urgent_events_leave_the_queue_when_presented_and_stay_presented,
    a_channel_post_has_a_receipt_per_worker_shown_it,
    urgent_events_nobody_was_shown_are_found_by_when_they_were_stored,
);
