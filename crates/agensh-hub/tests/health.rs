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
async fn metrics_time_the_stores_writes() {
    let hub = TestHub::start().await;
    let w = hub.workers(1).await.remove(0);
    let before = hub.metric("agensh_store_writes_total").await;
    let waited = hub.metric("agensh_store_write_wait_seconds_count").await;
    w.post_record(&rec(RecordKind::Fact, "timed"))
        .await
        .unwrap();
    // The record, and maybe other writes (last activity) with it.
    assert!(hub.metric("agensh_store_writes_total").await > before);
    assert!(hub.metric("agensh_store_write_wait_seconds_count").await > waited);
    let (_, body) = hub.raw(Method::GET, "/metrics", None, None).await;
    let text = body.as_str().unwrap_or_default().to_string();
    let count = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.trim().parse::<u64>().ok())
            .unwrap_or_else(|| panic!("no {name} in {text}"))
    };
    // Buckets are cumulative: the +Inf bucket counts every commit.
    assert_eq!(
        count("agensh_store_commit_seconds_bucket{le=\"+Inf\"}"),
        count("agensh_store_commit_seconds_count")
    );
    assert_eq!(
        count("agensh_store_commit_seconds_count"),
        count("agensh_store_write_groups_total")
    );
    // Every group is answered and published after its commit.
    assert!(
        count("agensh_store_publish_seconds_count") >= count("agensh_store_write_groups_total") - 1
    );
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usage_shows_the_admin_every_worker_and_a_worker_its_own() {
    use agensh_store::{ModelRequest, SqliteStore, Store};
    let hub = TestHub::start().await;
    let ws = hub.workers(2).await;
    let ids: Vec<String> = {
        let mut v = Vec::new();
        for w in &ws {
            v.push(w.whoami().await.unwrap().id);
        }
        v
    };
    // What the model gateway records, written to the hub's store file.
    let store = SqliteStore::open(&hub.store_path()).unwrap();
    for (id, input) in [(&ids[0], 100), (&ids[0], 50), (&ids[1], 7)] {
        store
            .record_model_request(ModelRequest {
                worker: id.clone(),
                upstream: "replay".into(),
                model: "m".into(),
                status: 200,
                input_tokens: input,
                output_tokens: 1,
                ..ModelRequest::default()
            })
            .await
            .unwrap();
    }
    let all = hub.admin().usage().await.unwrap();
    assert_eq!(
        all.iter()
            .map(|u| (u.worker.as_str(), u.requests, u.input_tokens))
            .collect::<Vec<_>>(),
        [(ids[0].as_str(), 2, 150), (ids[1].as_str(), 1, 7)]
    );
    let own = ws[1].usage().await.unwrap();
    assert_eq!(own.len(), 1);
    assert_eq!(
        (own[0].worker.as_str(), own[0].input_tokens),
        (ids[1].as_str(), 7)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hub_on_loopback_refuses_other_hosts_and_web_origins_on_every_route() {
    let hub = TestHub::start().await;
    let token = hub.tokens(1).await.remove(0);
    let send = |path: &'static str, header: &'static str, value: &'static str| {
        let url = format!("{}{path}", hub.url());
        let token = token.clone();
        async move {
            let resp = reqwest::Client::new()
                .get(url)
                .bearer_auth(token)
                .header(header, value)
                .send()
                .await
                .unwrap();
            let status = resp.status().as_u16();
            let body: serde_json::Value = resp.json().await.unwrap_or_default();
            (
                status,
                body["error"]["code"].as_str().unwrap_or("").to_string(),
            )
        }
    };
    // DNS rebinding: a page of another site whose name resolves to 127.0.0.1.
    for path in [
        "/api/v1/whoami",
        "/healthz",
        "/mcp",
        "/model/openai/v1/models",
    ] {
        assert_eq!(
            send(path, "host", "rebind.evil.example").await,
            (403, "bad_host".to_string()),
            "{path}"
        );
        assert_eq!(
            send(path, "origin", "http://127.0.0.1.evil.example").await,
            (403, "bad_origin".to_string()),
            "{path}"
        );
    }
    // Loopback names and origins are answered.
    assert_eq!(send("/api/v1/whoami", "host", "localhost").await.0, 200);
    assert_eq!(
        send("/api/v1/whoami", "origin", "http://localhost:3000")
            .await
            .0,
        200
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_show_the_store_writer_threads_time_on_a_cpu_and_waiting_for_one() {
    let hub = TestHub::start().await;
    let w = hub.workers(1).await.remove(0);
    w.post_record(&rec(RecordKind::Fact, "scheduled"))
        .await
        .unwrap();
    let (_, body) = hub.raw(Method::GET, "/metrics", None, None).await;
    let text = body.as_str().unwrap_or_default().to_string();
    let value = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.trim().parse::<f64>().ok())
            .unwrap_or_else(|| panic!("no {name} in {text}"))
    };
    // The writer thread ran (migrations, the record): some CPU time, never negative.
    assert!(value("agensh_store_writer_cpu_seconds_total ") > 0.0);
    assert!(value("agensh_store_writer_run_queue_seconds_total ") >= 0.0);
}
