//! Authentication and impersonation: every call acts as the worker that owns the token;
//! only the admin may act as another worker.

mod common;

use agensh_domain::record::RecordKind;
use agensh_domain::worker::WorkerStatus;
use agensh_domain::ErrorKind;
use common::*;
use reqwest::Method;

async fn status_of(hub: &TestHub, id: &str) -> WorkerStatus {
    let workers = hub.admin().workers().await.unwrap();
    workers
        .iter()
        .find(|w| w.id == id)
        .expect("worker is listed")
        .status
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_without_token_is_401() {
    let hub = TestHub::start().await;
    let ans = hub
        .raw(Method::GET, "/api/v1/board/recent", None, None)
        .await;
    let message = api_error(&ans, 401, "unauthorized");
    assert!(message.contains("Authorization: Bearer"), "{message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_with_wrong_token_is_401() {
    let hub = TestHub::start().await;
    hub.workers(1).await;
    let ans = hub
        .raw(
            Method::GET,
            "/api/v1/board/recent",
            Some("agw_0000000000000000000000000000000000000000"),
            None,
        )
        .await;
    let message = api_error(&ans, 401, "unauthorized");
    assert!(message.contains("not valid"), "{message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn worker_token_acting_as_another_worker_is_403_and_posts_nothing() {
    let hub = TestHub::start().await;
    let ws = hub.workers(2).await;
    let posing = ws[0].clone().acting_as(Some("w02".into()));
    let e = expect_err(
        posing
            .post_record(&rec(RecordKind::Fact, "quokka by w02?"))
            .await,
        ErrorKind::Forbidden,
        "impersonation",
    );
    assert!(
        e.message.contains("leave out the X-Agensh-As header"),
        "{}",
        e.message
    );
    assert!(!e.message.contains("--as"), "{}", e.message);
    assert_board_empty(&hub.admin(), "quokka").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn worker_token_acting_as_itself_is_allowed() {
    let hub = TestHub::start().await;
    let w = hub.workers(1).await.remove(0).acting_as(Some("w01".into()));
    let me = w.whoami().await.unwrap();
    assert_eq!((me.id.as_str(), me.admin), ("w01", false));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn worker_cannot_add_workers() {
    let hub = TestHub::start().await;
    let w = hub.workers(1).await.remove(0);
    expect_err(w.add_workers(1).await, ErrorKind::Forbidden, "admin_only");
    assert_eq!(hub.admin().workers().await.unwrap().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn worker_cannot_read_another_workers_token() {
    let hub = TestHub::start().await;
    let ws = hub.workers(2).await;
    expect_err(
        ws[0].worker_token("w02").await,
        ErrorKind::Forbidden,
        "admin_only",
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_reads_a_workers_token() {
    let hub = TestHub::start().await;
    let added = hub.admin().add_workers(2).await.unwrap();
    let got = hub.admin().worker_token("w02").await.unwrap();
    assert_eq!(got, added[1]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_acting_as_a_worker_posts_as_that_worker() {
    let hub = TestHub::start().await;
    hub.workers(2).await;
    let appended = hub
        .admin_as("w02")
        .post_record(&rec(RecordKind::Fact, "posted for w02"))
        .await
        .unwrap();
    assert_eq!(appended.record.author, "w02");
    let view = hub.admin().recent(None).await.unwrap();
    assert_eq!(view[0].record.author, "w02");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_acting_as_an_unknown_worker_is_404() {
    let hub = TestHub::start().await;
    hub.workers(1).await;
    expect_err(
        hub.admin_as("w09").whoami().await,
        ErrorKind::NotFound,
        "unknown_worker",
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_without_acting_as_cannot_read_events() {
    let hub = TestHub::start().await;
    hub.workers(1).await;
    let e = expect_err(
        hub.admin().events(0, 0).await,
        ErrorKind::Invalid,
        "needs_worker",
    );
    assert!(e.message.contains("X-Agensh-As header"), "{}", e.message);
    assert!(!e.message.contains("--as"), "{}", e.message);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn worker_may_set_its_own_status() {
    let hub = TestHub::start().await;
    let w = hub.workers(1).await.remove(0);
    w.set_status("w01", WorkerStatus::Busy).await.unwrap();
    assert_eq!(status_of(&hub, "w01").await, WorkerStatus::Busy);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn worker_may_not_set_another_workers_status() {
    let hub = TestHub::start().await;
    let ws = hub.workers(2).await;
    let before = status_of(&hub, "w02").await;
    assert_ne!(before, WorkerStatus::Dead);
    expect_err(
        ws[0].set_status("w02", WorkerStatus::Dead).await,
        ErrorKind::Forbidden,
        "impersonation",
    );
    assert_eq!(status_of(&hub, "w02").await, before);
}
