//! The model gateway's requests: recorded durably, summed per worker and model.

mod common;

use agensh_store::ModelRequest;
use common::TestStore;

stores!(
    requests_sum_per_worker_and_model_and_survive_a_reopen,
    usage_since_counts_only_the_requests_made_at_or_after_it,
    the_hubs_state_is_kept_apart_from_the_admin_token_and_survives_a_reopen
);

fn request(
    worker: &str,
    model: &str,
    input: u64,
    cached: u64,
    output: u64,
    cost: f64,
) -> ModelRequest {
    ModelRequest {
        worker: worker.into(),
        turn: Some(1),
        upstream: "replay".into(),
        model: model.into(),
        status: 200,
        input_tokens: input,
        cached_input_tokens: cached,
        output_tokens: output,
        cost_usd: cost,
        latency_ms: 12,
        at: 1_700_000_000_000,
    }
}

async fn requests_sum_per_worker_and_model_and_survive_a_reopen(t: TestStore) {
    {
        let store = &t;
        for r in [
            request("w01", "m-a", 1000, 400, 10, 0.25),
            request("w01", "m-a", 2000, 800, 20, 0.5),
            request("w01", "m-b", 10, 0, 1, 0.0),
            request("w02", "m-a", 7, 0, 3, 0.125),
        ] {
            store.record_model_request(r).await.unwrap();
        }
    }
    // Acknowledged means stored: a new process finds every request.
    let store = t.reopen().await;
    let all = store.model_usage(None).await.unwrap();
    let rows: Vec<_> = all
        .iter()
        .map(|u| {
            (
                u.worker.as_str(),
                u.model.as_str(),
                u.requests,
                u.input_tokens,
                u.cached_input_tokens,
                u.output_tokens,
                u.cost_usd,
            )
        })
        .collect();
    assert_eq!(
        rows,
        [
            ("w01", "m-a", 2, 3000, 1200, 30, 0.75),
            ("w01", "m-b", 1, 10, 0, 1, 0.0),
            ("w02", "m-a", 1, 7, 0, 3, 0.125),
        ]
    );
    let w02 = store.model_usage(Some("w02")).await.unwrap();
    assert_eq!(w02.len(), 1);
    assert_eq!(w02[0].worker, "w02");
    assert!(store.model_usage(Some("w09")).await.unwrap().is_empty());
}

async fn usage_since_counts_only_the_requests_made_at_or_after_it(t: TestStore) {
    // (started, worker): each recorded when it ended, 12 ms later.
    for (at, worker) in [(1_000, "w01"), (2_000, "w01"), (3_000, "w02")] {
        let mut r = request(worker, "m", 10, 0, 1, 0.5);
        r.at = at + r.latency_ms as i64;
        t.record_model_request(r).await.unwrap();
    }
    // Made before 2,000 and ended after it: counted before.
    let mut on_its_way = request("w03", "m", 10, 0, 1, 0.5);
    (on_its_way.at, on_its_way.latency_ms) = (2_500, 600);
    t.record_model_request(on_its_way).await.unwrap();
    let since = t.model_usage_since(2_000).await.unwrap();
    let requests: Vec<(String, u64)> = since
        .iter()
        .map(|u| (u.worker.clone(), u.requests))
        .collect();
    assert_eq!(requests, [("w01".to_string(), 1), ("w02".to_string(), 1)]);
    assert!(t.model_usage_since(3_001).await.unwrap().is_empty());
    assert_eq!(
        t.model_usage_since(0)
            .await
            .unwrap()
            .iter()
            .map(|u| u.requests)
            .sum::<u64>(),
        4
    );
}

async fn the_hubs_state_is_kept_apart_from_the_admin_token_and_survives_a_reopen(t: TestStore) {
    let admin = t.admin_token().await.unwrap();
    assert_eq!(t.hub_state("goal").await.unwrap(), None);
    t.set_hub_state("goal", "{\"runs\":1}").await.unwrap();
    t.set_hub_state("goal", "{\"runs\":2}").await.unwrap();
    // A key named like the admin token's is the hub's own, not the token.
    assert_eq!(t.hub_state("admin_token").await.unwrap(), None);
    let store = t.reopen().await;
    assert_eq!(
        store.hub_state("goal").await.unwrap().as_deref(),
        Some("{\"runs\":2}")
    );
    assert_eq!(store.admin_token().await.unwrap(), admin);
}
