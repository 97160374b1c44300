//! The model gateway's requests: recorded durably, summed per worker and model.

mod common;

use agensh_store::ModelRequest;
use common::TestStore;

stores!(requests_sum_per_worker_and_model_and_survive_a_reopen);

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
