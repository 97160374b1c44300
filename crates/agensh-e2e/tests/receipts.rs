//! Delivery receipts through the node's turn loop against a real hub: the events a prompt
//! carries are recorded presented (via prompt) as the turn starts — the urgent ones leave
//! the queue then, so no tool result of the turn repeats them — and acknowledged once the
//! turn has ended, with the worker's next poll. The agent is a stand-in whose turns end
//! when the test says, so each state is seen while it holds.

mod support;

use std::time::Duration;

use agensh_domain::event::kinds;
use agensh_domain::message::NewMessage;
use agensh_domain::receipt::{MessageStatus, ReceiptState, Via};
use agensh_testkit::wait_until;
use support::worker::{self, End};

fn msg(to: &str, text: &str) -> NewMessage {
    NewMessage {
        to: to.into(),
        text: text.into(),
        thread: None,
    }
}

/// The one receipt of w01 in `status`.
fn of_w01(status: &MessageStatus) -> (ReceiptState, Option<Via>, Option<i64>, Option<i64>) {
    let r = status
        .receipts
        .iter()
        .find(|r| r.worker == "w01")
        .expect("w01 is a recipient");
    (r.state, r.via, r.presented_at, r.acknowledged_at)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_carried_dm_is_presented_as_its_turn_starts_and_acknowledged_when_it_ends() {
    let (org, w02, mut gate, running) = worker::w01_in_its_launch_turn(None, |_| {}).await;
    // During the launch turn a DM and a channel post arrive: stored, not shown.
    let dm = w02
        .send_message(&msg("w01", "can you review PR 3?"))
        .await
        .unwrap();
    let post = w02
        .send_message(&msg("#general", "main is green"))
        .await
        .unwrap();
    let dm_id = format!("M{}", dm.seq);
    let post_id = format!("M{}", post.seq);
    let status = w02.message_status(&dm_id).await.unwrap();
    assert_eq!(of_w01(&status), (ReceiptState::Stored, None, None, None));

    // The next turn carries both: presented via prompt before the agent sees it.
    gate.end(End::Done);
    let prompt = gate.next_prompt().await;
    assert!(
        prompt.contains("DM from w02: can you review PR 3?") && prompt.contains("main is green"),
        "{prompt}"
    );
    for id in [&dm_id, &post_id] {
        let (state, via, presented, acked) = of_w01(&w02.message_status(id).await.unwrap());
        assert_eq!(
            (state, via, acked),
            (ReceiptState::Presented, Some(Via::Prompt), None),
            "{id} while the turn runs"
        );
        assert!(presented.is_some());
    }
    // The urgent DM left w01's queue with the prompt: no tool result of this turn shows it
    // again. The post waits for the turn's end.
    let pending = org.client("w01").events(0, 0).await.unwrap();
    assert!(
        pending.iter().all(|e| e.kind != kinds::DIRECT_MESSAGE),
        "{pending:?}"
    );
    assert!(pending.iter().any(|e| e.kind == kinds::CHANNEL_POST));

    // The turn ends: both acknowledged with the worker's next poll, their first
    // presentation kept.
    gate.end(End::Done);
    for id in [&dm_id, &post_id] {
        wait_until(Duration::from_secs(10), "the acknowledgement", async || {
            of_w01(&w02.message_status(id).await.unwrap()).0 == ReceiptState::Acknowledged
        })
        .await;
        let (_, via, presented, acked) = of_w01(&w02.message_status(id).await.unwrap());
        assert_eq!(via, Some(Via::Prompt));
        assert!(acked >= presented, "{id}: {presented:?} then {acked:?}");
    }
    assert!(org.client("w01").events(0, 0).await.unwrap().is_empty());

    let summary = running.stop().await;
    assert_eq!(summary.turns, 2);
    org.shutdown().await;
}

/// A prompt of normal events alone (a channel post) records nothing as it is handed over:
/// the post is presented and acknowledged at once, with the poll after its turn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prompt_of_normal_events_alone_is_presented_with_its_acknowledgement() {
    let (org, w02, mut gate, running) = worker::w01_in_its_launch_turn(None, |_| {}).await;
    let post = w02
        .send_message(&msg("#general", "release at noon"))
        .await
        .unwrap();
    let id = format!("M{}", post.seq);
    gate.end(End::Done);
    let prompt = gate.next_prompt().await;
    assert!(prompt.contains("release at noon"), "{prompt}");
    assert_eq!(
        of_w01(&w02.message_status(&id).await.unwrap()).0,
        ReceiptState::Stored
    );
    gate.end(End::Done);
    wait_until(Duration::from_secs(10), "the acknowledgement", async || {
        of_w01(&w02.message_status(&id).await.unwrap()).0 == ReceiptState::Acknowledged
    })
    .await;
    let (_, via, presented, acked) = of_w01(&w02.message_status(&id).await.unwrap());
    assert_eq!((via, presented), (Some(Via::Prompt), acked));
    running.stop().await;
    org.shutdown().await;
}
