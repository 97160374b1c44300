//! Channel posts and direct messages over HTTP.

mod common;

use agensh_client::MessageFilter;
use agensh_domain::message::NewMessage;
use agensh_domain::ErrorKind;
use common::*;

fn msg(to: &str, text: &str) -> NewMessage {
    NewMessage {
        to: to.into(),
        text: text.into(),
        thread: None,
    }
}

fn seqs(ms: &[agensh_domain::message::Message]) -> Vec<i64> {
    ms.iter().map(|m| m.seq).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn channel_post_is_unread_for_others_once() {
    let hub = TestHub::start().await;
    let ws = hub.workers(2).await;
    let posted = ws[0]
        .send_message(&msg("#general", "standup at noon"))
        .await
        .unwrap();
    let unread = ws[1]
        .read_messages(&MessageFilter::default())
        .await
        .unwrap();
    assert_eq!(unread, vec![posted]);
    let again = ws[1]
        .read_messages(&MessageFilter::default())
        .await
        .unwrap();
    assert!(again.is_empty(), "a second read has nothing new: {again:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn own_channel_post_is_not_unread_for_its_author() {
    let hub = TestHub::start().await;
    let ws = hub.workers(2).await;
    ws[0]
        .send_message(&msg("#general", "standup at noon"))
        .await
        .unwrap();
    assert!(ws[0]
        .read_messages(&MessageFilter::default())
        .await
        .unwrap()
        .is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn direct_message_is_seen_by_its_target_and_sender_only() {
    let hub = TestHub::start().await;
    let ws = hub.workers(3).await;
    let dm = ws[0]
        .send_message(&msg("w02", "can you review G3?"))
        .await
        .unwrap();
    assert_eq!((dm.from.as_str(), dm.to.as_str()), ("w01", "w02"));
    assert_eq!(
        seqs(
            &ws[1]
                .read_messages(&MessageFilter::default())
                .await
                .unwrap()
        ),
        vec![dm.seq]
    );
    assert_eq!(
        seqs(
            &ws[0]
                .message_history(&MessageFilter::default())
                .await
                .unwrap()
        ),
        vec![dm.seq]
    );
    assert!(ws[2]
        .read_messages(&MessageFilter::default())
        .await
        .unwrap()
        .is_empty());
    assert!(ws[2]
        .message_history(&MessageFilter::default())
        .await
        .unwrap()
        .is_empty());
    let with_w01 = MessageFilter {
        with: Some("w01".into()),
        ..Default::default()
    };
    assert!(ws[2].message_history(&with_w01).await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn direct_message_to_self_is_rejected_and_not_stored() {
    let hub = TestHub::start().await;
    let w = hub.workers(1).await.remove(0);
    let e = expect_err(
        w.send_message(&msg("w01", "note to self")).await,
        ErrorKind::Invalid,
        "message_to_self",
    );
    assert!(e.message.contains("post to a #channel"), "{}", e.message);
    assert!(hub
        .admin()
        .message_history(&MessageFilter::default())
        .await
        .unwrap()
        .is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reading_unread_messages_of_one_conversation_is_refused() {
    let hub = TestHub::start().await;
    let ws = hub.workers(2).await;
    ws[0].send_message(&msg("#dev", "in dev")).await.unwrap();
    let f = agensh_client::MessageFilter {
        with: Some("#general".into()),
        ..Default::default()
    };
    let err = ws[1].read_messages(&f).await.unwrap_err();
    assert_eq!(err.code, "bad_filter");
    let unread = ws[1].read_messages(&Default::default()).await.unwrap();
    assert_eq!(unread.len(), 1, "the #dev post is still unread");
}
