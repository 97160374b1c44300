//! `/healthz` and `/metrics`.

mod common;

use agensh_domain::record::RecordKind;
use common::*;
use reqwest::Method;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthz_answers_ok() {
    let hub = TestHub::start().await;
    let (status, body) = hub.raw(Method::GET, "/healthz", None, None).await;
    assert_eq!(status, 200);
    assert_eq!(body.as_str().map(str::trim), Some("ok"), "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_board_records() {
    let hub = TestHub::start().await;
    let w = hub.workers(1).await.remove(0);
    let before = hub.metric("agensh_board_records_total").await;
    w.post_record(&rec(RecordKind::Fact, "counted"))
        .await
        .unwrap();
    assert_eq!(hub.metric("agensh_board_records_total").await, before + 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_do_not_count_rejected_records() {
    let hub = TestHub::start().await;
    let w = hub.workers(1).await.remove(0);
    let before = hub.metric("agensh_board_records_total").await;
    w.post_record(&rec(RecordKind::Fact, &"x".repeat(101)))
        .await
        .unwrap_err();
    assert_eq!(hub.metric("agensh_board_records_total").await, before);
}
