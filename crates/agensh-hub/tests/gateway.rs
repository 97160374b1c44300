//! The model gateway against a real replay upstream: usage counted exactly for every API,
//! streamed and not; the worker's token swapped for the upstream's key; a rate-limit storm
//! absorbed with every request answered and billed once; one worker's token never spends
//! as another; oversized prompts and unknown tokens refused in the provider's shape.

mod common;

use std::time::Duration;

use agensh_domain::gateway::{RouteConfig, UpstreamConfig};
use agensh_replay::{ReplayServer, Scenario};
use common::{config, TestHub};
use serde_json::{json, Value};

/// The hub's environment variable holding the replay upstream's key.
const KEY_VAR: &str = "AGENSH_TEST_GATEWAY_UPSTREAM_KEY";
const UPSTREAM_KEY: &str = "sk-upstream-secret-1234";

fn set_key() {
    // Every test sets the same value, so the order they run in does not matter.
    std::env::set_var(KEY_VAR, UPSTREAM_KEY);
}

/// A scenario of `steps` tool calls, each reporting this usage.
fn scenario(steps: usize, extra: &str) -> Scenario {
    let mut text = format!("{extra}\n");
    for i in 0..steps {
        text.push_str(&format!(
            "[[step]]\ntext = \"step {i}\"\ntool_calls = [{{ name = \"run\", args = {{ command = \"ls\" }} }}]\nusage = {{ input = {}, output = {}, cached = {} }}\n",
            1000 + i * 10,
            40 + i,
            200 + i
        ));
    }
    Scenario::parse(&text).expect("scenario parses")
}

/// A hub whose gateway routes every worker to `replay`.
async fn hub_with(
    replay: &ReplayServer,
    tweak: impl FnOnce(&mut agensh_domain::config::Config),
) -> TestHub {
    set_key();
    let mut c = config();
    c.gateway.upstreams.push(UpstreamConfig {
        name: "replay".into(),
        api: "any".into(),
        url: format!("{}/v1", replay.url()),
        api_key_env: KEY_VAR.into(),
        concurrency: 8,
        prices: agensh_domain::gateway::PriceTable {
            input: 3.0,
            cached_input: 0.3,
            output: 15.0,
        },
        fallback: String::new(),
    });
    c.gateway.routes.push(RouteConfig {
        workers: "all".into(),
        upstream: "replay".into(),
        model: String::new(),
    });
    c.gateway.retry_base_ms = 20;
    tweak(&mut c);
    TestHub::with_config(c).await
}

/// One generation request of `api`, offering a tool (so it takes a scenario step).
fn request(api: &str, stream: bool) -> (String, Value) {
    let tool = "run";
    match api {
        "chat" => (
            "openai/v1/chat/completions".into(),
            json!({ "model": "m", "stream": stream, "messages": [{ "role": "user", "content": "hi" }],
                    "tools": [{ "type": "function", "function": { "name": tool, "parameters": { "type": "object" } } }] }),
        ),
        "responses" => (
            "openai/v1/responses".into(),
            json!({ "model": "m", "stream": stream, "input": "hi",
                    "tools": [{ "type": "function", "name": tool, "parameters": { "type": "object" } }] }),
        ),
        "anthropic" => (
            "anthropic/v1/messages".into(),
            json!({ "model": "m", "max_tokens": 100, "stream": stream, "messages": [{ "role": "user", "content": "hi" }],
                    "tools": [{ "name": tool, "input_schema": { "type": "object" } }] }),
        ),
        _ => (
            format!(
                "gemini/v1beta/models/m:{}",
                if stream {
                    "streamGenerateContent?alt=sse"
                } else {
                    "generateContent"
                }
            ),
            json!({ "contents": [{ "role": "user", "parts": [{ "text": "hi" }] }],
                    "tools": [{ "functionDeclarations": [{ "name": tool, "parameters": { "type": "object" } }] }] }),
        ),
    }
}

/// Sends `body` to the gateway with `token` where `api`'s clients put their key.
async fn post(
    hub: &TestHub,
    api: &str,
    path: &str,
    token: &str,
    body: &Value,
) -> reqwest::Response {
    let http = reqwest::Client::new();
    let url = format!("{}/model/{path}", hub.url());
    let req = http.post(url).json(body);
    let req = match api {
        "anthropic" => req.header("x-api-key", token),
        "gemini" => req.header("x-goog-api-key", token),
        _ => req.bearer_auth(token),
    };
    req.send().await.expect("the gateway answers")
}

/// The usage the hub recorded for `worker`, summed over models; the hub records a request
/// just after its answer ends, so this waits for `requests` of them.
async fn recorded(hub: &TestHub, worker: &str, requests: u64) -> (u64, u64, u64, u64, f64) {
    for _ in 0..200 {
        let rows = hub.admin().usage().await.expect("usage");
        let mine: Vec<_> = rows.iter().filter(|r| r.worker == worker).collect();
        let sum = mine.iter().fold((0, 0, 0, 0, 0.0), |a, r| {
            (
                a.0 + r.requests,
                a.1 + r.input_tokens,
                a.2 + r.cached_input_tokens,
                a.3 + r.output_tokens,
                a.4 + r.cost_usd,
            )
        });
        if sum.0 >= requests {
            return sum;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("{worker}'s {requests} requests were never recorded");
}

#[tokio::test]
async fn usage_is_counted_exactly_for_every_api_streamed_and_not() {
    let replay = ReplayServer::start(scenario(8, ""), "127.0.0.1:0", None)
        .await
        .unwrap();
    let hub = hub_with(&replay, |_| {}).await;
    let tokens = hub.tokens(1).await;
    let mut n = 0;
    for api in ["chat", "responses", "anthropic", "gemini"] {
        for stream in [false, true] {
            let (path, body) = request(api, stream);
            let resp = post(&hub, api, &path, &tokens[0], &body).await;
            assert_eq!(resp.status(), 200, "{api} stream={stream}");
            let text = resp.text().await.unwrap();
            assert!(
                text.contains("\"run\"") || text.contains("run"),
                "{api}: {text}"
            );
            n += 1;
        }
    }
    let served = replay.served()["w01"];
    assert_eq!(served.requests, n);
    let (requests, input, cached, output, cost) = recorded(&hub, "w01", n).await;
    assert_eq!(requests, n);
    assert_eq!(
        (input, cached, output),
        (
            served.input_tokens,
            served.cached_input_tokens,
            served.output_tokens
        )
    );
    let want_cost =
        ((input - cached) as f64 * 3.0 + cached as f64 * 0.3 + output as f64 * 15.0) / 1e6;
    assert!((cost - want_cost).abs() < 1e-9, "{cost} vs {want_cost}");
    // The upstream saw its own key, never the worker's token.
    for r in replay.requests() {
        assert_eq!(r.key, UPSTREAM_KEY, "{}", r.path);
        assert_eq!(r.worker.as_deref(), Some("w01"));
        assert!(!r.body.to_string().contains(&tokens[0]));
    }
    // Streamed Chat Completions were asked for their usage.
    let chat_streamed = replay
        .requests()
        .into_iter()
        .find(|r| r.api == "chat" && r.stream)
        .unwrap();
    assert_eq!(chat_streamed.body["stream_options"]["include_usage"], true);
    let metrics = reqwest::get(format!("{}/metrics", hub.url()))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains(&format!("agensh_model_requests_total {n}")),
        "{metrics}"
    );
    assert!(metrics.contains(&format!("agensh_model_output_tokens_total {output}")));
}

#[tokio::test]
async fn a_rate_limit_storm_is_absorbed_and_every_request_billed_once() {
    // Every second request is refused with 429 and Retry-After.
    let replay = ReplayServer::start(
        scenario(40, "refuse_every = 2\nretry_after = 0.05"),
        "127.0.0.1:0",
        None,
    )
    .await
    .unwrap();
    let hub = hub_with(&replay, |_| {}).await;
    let tokens = hub.tokens(4).await;
    let mut tasks = Vec::new();
    for (i, token) in tokens.iter().enumerate() {
        for _ in 0..5 {
            let (hub_url, token) = (hub.url().to_string(), token.clone());
            tasks.push(tokio::spawn(async move {
                let (path, body) = request("chat", i % 2 == 0);
                let resp = reqwest::Client::new()
                    .post(format!("{hub_url}/model/{path}"))
                    .bearer_auth(token)
                    .json(&body)
                    .send()
                    .await
                    .unwrap();
                (resp.status().as_u16(), resp.text().await.unwrap())
            }));
        }
    }
    for t in tasks {
        let (status, text) = t.await.unwrap();
        assert_eq!(status, 200, "{text}");
    }
    let served = replay.served();
    let refused: u64 = served.values().map(|s| s.refused).sum();
    assert!(refused >= 10, "the storm refused only {refused}");
    for (i, _) in tokens.iter().enumerate() {
        let w = format!("w{:02}", i + 1);
        let s = served[&w];
        assert_eq!(s.requests, 5, "{w} answered once per request");
        let (requests, input, _, output, _) = recorded(&hub, &w, 5).await;
        assert_eq!(requests, 5, "{w} billed once per request");
        assert_eq!((input, output), (s.input_tokens, s.output_tokens));
    }
    let metrics = reqwest::get(format!("{}/metrics", hub.url()))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let retries: u64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("agensh_model_retries_total "))
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(retries, refused);
}

#[tokio::test]
async fn a_workers_token_spends_only_its_own_usage() {
    let replay = ReplayServer::start(scenario(4, ""), "127.0.0.1:0", None)
        .await
        .unwrap();
    let hub = hub_with(&replay, |_| {}).await;
    let tokens = hub.tokens(2).await;
    let (path, body) = request("anthropic", false);
    // w02's token, whatever the request says about who it is for.
    let resp = reqwest::Client::new()
        .post(format!("{}/model/{path}", hub.url()))
        .header("x-api-key", &tokens[1])
        .header("x-agensh-worker", "w01")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let (requests, ..) = recorded(&hub, "w02", 1).await;
    assert_eq!(requests, 1);
    let rows = hub.admin().usage().await.unwrap();
    assert!(rows.iter().all(|r| r.worker == "w02"), "{rows:?}");
    // A worker reads its own usage and nobody else's.
    let own = hub.client(&tokens[0]).usage().await.unwrap();
    assert!(own.is_empty(), "{own:?}");
    assert_eq!(replay.requests()[0].worker.as_deref(), Some("w02"));
}

#[tokio::test]
async fn refusals_come_in_the_providers_shape_and_say_what_to_do() {
    let replay = ReplayServer::start(scenario(2, ""), "127.0.0.1:0", None)
        .await
        .unwrap();
    let hub = hub_with(&replay, |c| c.gateway.prompt_window = 2048).await;
    let tokens = hub.tokens(1).await;
    // An unknown token.
    let (path, body) = request("anthropic", false);
    let resp = post(&hub, "anthropic", &path, "not-a-token", &body).await;
    assert_eq!(resp.status(), 401);
    let v: Value = resp.json().await.unwrap();
    assert_eq!(v["type"], "error");
    assert!(v["error"]["message"]
        .as_str()
        .unwrap()
        .contains("worker's agensh token"));
    // A prompt over the window, in Gemini's shape.
    let (path, mut body) = request("gemini", false);
    body["contents"][0]["parts"][0]["text"] = json!("word ".repeat(4000));
    let resp = post(&hub, "gemini", &path, &tokens[0], &body).await;
    assert_eq!(resp.status(), 400);
    let v: Value = resp.json().await.unwrap();
    assert_eq!(v["error"]["status"], "INVALID_ARGUMENT");
    let m = v["error"]["message"].as_str().unwrap();
    assert!(
        m.contains("prompt window of 2048") && m.contains("compact"),
        "{m}"
    );
    // A path the gateway does not serve.
    let resp = reqwest::Client::new()
        .post(format!("{}/model/openai/v1/files", hub.url()))
        .bearer_auth(&tokens[0])
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 404);
    let v: Value = resp.json().await.unwrap();
    assert!(v["error"]["message"]
        .as_str()
        .unwrap()
        .contains("v1/chat/completions"));
    // Nothing of it reached the upstream.
    assert!(replay.requests().is_empty());
}

#[tokio::test]
async fn an_output_cap_lowers_what_a_request_asks_for() {
    let replay = ReplayServer::start(scenario(1, ""), "127.0.0.1:0", None)
        .await
        .unwrap();
    let hub = hub_with(&replay, |c| c.gateway.output_cap = 64).await;
    let tokens = hub.tokens(1).await;
    let (path, body) = request("anthropic", true);
    let resp = post(&hub, "anthropic", &path, &tokens[0], &body).await;
    assert_eq!(resp.status(), 200);
    resp.text().await.unwrap();
    assert_eq!(replay.requests()[0].body["max_tokens"], 64);
}

#[tokio::test]
async fn a_route_sets_the_model_and_an_upstream_that_is_down_is_said() {
    let replay = ReplayServer::start(scenario(2, ""), "127.0.0.1:0", None)
        .await
        .unwrap();
    let hub = hub_with(&replay, |c| {
        c.gateway.upstreams.push(UpstreamConfig {
            name: "down".into(),
            api: "openai".into(),
            // A port nothing listens on.
            url: "http://127.0.0.1:9/v1".into(),
            api_key_env: String::new(),
            concurrency: 0,
            prices: Default::default(),
            fallback: String::new(),
        });
        c.gateway.routes.insert(
            0,
            RouteConfig {
                workers: "w02".into(),
                upstream: "down".into(),
                model: String::new(),
            },
        );
        c.gateway.routes[1].model = "routed-model".into();
        c.gateway.retries = 1;
    })
    .await;
    let tokens = hub.tokens(2).await;
    let (path, body) = request("chat", false);
    let resp = post(&hub, "chat", &path, &tokens[0], &body).await;
    assert_eq!(resp.status(), 200);
    let v: Value = resp.json().await.unwrap();
    assert_eq!(v["model"], "routed-model");
    assert_eq!(replay.requests()[0].body["model"], "routed-model");
    let resp = post(&hub, "chat", &path, &tokens[1], &body).await;
    assert_eq!(resp.status(), 502);
    let v: Value = resp.json().await.unwrap();
    let m = v["error"]["message"].as_str().unwrap();
    assert!(m.contains("\"down\"") && m.contains("2 tries"), "{m}");
    // The request that never got an answer is counted for w02, with no tokens.
    let (requests, input, ..) = recorded(&hub, "w02", 1).await;
    assert_eq!((requests, input), (1, 0));
}

/// Polls `worker`'s queue until an event of `kind` is there; returns it.
async fn event_of(c: &agensh_client::Client, kind: &str) -> agensh_domain::event::Event {
    for _ in 0..200 {
        if let Some(e) = c
            .events(0, 0)
            .await
            .unwrap()
            .into_iter()
            .find(|e| e.kind == kind)
        {
            return e;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("no {kind} event arrived");
}

#[tokio::test]
async fn a_token_budget_warns_then_stops_a_worker_and_raising_it_lets_the_worker_go_on() {
    // Each answer costs about 1,050 tokens: the third passes 2,500.
    let replay = ReplayServer::start(scenario(8, ""), "127.0.0.1:0", None)
        .await
        .unwrap();
    let hub = hub_with(&replay, |c| c.budget.worker.tokens = 2500).await;
    let tokens = hub.tokens(2).await;
    let w01 = hub.client(&tokens[0]);
    w01.post_record(&common::claim("the parser", Some("parser"), &[], None))
        .await
        .unwrap();
    let (path, body) = request("anthropic", false);
    for i in 0..3 {
        let resp = post(&hub, "anthropic", &path, &tokens[0], &body).await;
        assert_eq!(resp.status(), 200, "request {i}");
        resp.text().await.unwrap();
    }
    // The notice at 80%, then the stop, which the worker's node takes at its turn's end.
    let notice = event_of(&w01, "notice").await;
    let text = notice.payload["text"].as_str().unwrap();
    assert!(text.contains("80% of your token budget"), "{text}");
    let stop = event_of(&w01, "worker.stop").await;
    assert!(stop.payload["reason"]
        .as_str()
        .unwrap()
        .contains("token budget"));
    // Refused now, in the provider's shape, saying which budget ran out.
    let resp = post(&hub, "anthropic", &path, &tokens[0], &body).await;
    assert_eq!(resp.status(), 403);
    let v: Value = resp.json().await.unwrap();
    let m = v["error"]["message"].as_str().unwrap();
    assert!(
        m.contains("w01's token budget") && m.contains("2500 tokens"),
        "{m}"
    );
    // Its claim is released, #general is told, its status says why.
    let workers = hub.admin().workers().await.unwrap();
    let me = workers.iter().find(|w| w.id == "w01").unwrap();
    assert!(me.claims.is_empty(), "{:?}", me.claims);
    assert_eq!(me.status, agensh_domain::worker::WorkerStatus::Stopped);
    assert!(me.stopped_for.as_deref().unwrap().contains("token budget"));
    let general = hub
        .admin()
        .message_history(&agensh_client::MessageFilter {
            with: Some("#general".into()),
            ..Default::default()
        })
        .await
        .unwrap();
    assert!(
        general.iter().any(|m| m.text.starts_with("w01 is stopped")),
        "{general:?}"
    );
    // Another worker's budget is its own.
    let resp = post(&hub, "anthropic", &path, &tokens[1], &body).await;
    assert_eq!(resp.status(), 200);
    // Raised: w01 is told to go on and its requests pass again.
    let view = hub
        .admin()
        .set_budget(&agensh_domain::budget::LimitsChange {
            worker: Some("w01".into()),
            tokens: Some(100_000),
            ..Default::default()
        })
        .await
        .unwrap();
    let mine = view.workers.iter().find(|w| w.worker == "w01").unwrap();
    assert_eq!(
        (mine.limits.tokens, mine.stopped_for.as_ref()),
        (100_000, None)
    );
    event_of(&w01, "worker.resume").await;
    let resp = post(&hub, "anthropic", &path, &tokens[0], &body).await;
    assert_eq!(resp.status(), 200);
    // A worker may read its own budget but not set one.
    let own = w01.budget().await.unwrap();
    assert_eq!(own.workers.len(), 1);
    let refused = w01
        .set_budget(&agensh_domain::budget::LimitsChange {
            tokens: Some(1),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(refused.kind, agensh_domain::ErrorKind::Forbidden);
}

#[tokio::test]
async fn the_organizations_budget_stops_every_worker() {
    let replay = ReplayServer::start(scenario(8, ""), "127.0.0.1:0", None)
        .await
        .unwrap();
    let hub = hub_with(&replay, |c| c.budget.organization.requests = 3).await;
    let tokens = hub.tokens(2).await;
    let (path, body) = request("chat", false);
    for t in [&tokens[0], &tokens[1], &tokens[0]] {
        assert_eq!(post(&hub, "chat", &path, t, &body).await.status(), 200);
    }
    let w02 = hub.client(&tokens[1]);
    let stop = event_of(&w02, "worker.stop").await;
    assert_eq!(stop.payload["organization"], true);
    let resp = post(&hub, "chat", &path, &tokens[1], &body).await;
    assert_eq!(resp.status(), 403);
    let v: Value = resp.json().await.unwrap();
    assert!(v["error"]["message"]
        .as_str()
        .unwrap()
        .contains("organization's request budget"));
}

#[tokio::test]
async fn budgets_set_and_usage_spent_outlive_a_restart() {
    let replay = ReplayServer::start(scenario(8, ""), "127.0.0.1:0", None)
        .await
        .unwrap();
    let hub = hub_with(&replay, |_| {}).await;
    let tokens = hub.tokens(1).await;
    let (path, body) = request("gemini", false);
    assert_eq!(
        post(&hub, "gemini", &path, &tokens[0], &body)
            .await
            .status(),
        200
    );
    recorded(&hub, "w01", 1).await;
    hub.admin()
        .set_budget(&agensh_domain::budget::LimitsChange {
            organization: true,
            cost_usd: Some(12.5),
            ..Default::default()
        })
        .await
        .unwrap();
    let hub = hub.restart().await;
    let v = hub.admin().budget().await.unwrap();
    assert_eq!(v.organization.cost_usd, 12.5);
    assert_eq!(v.organization_spent.requests, 1);
    assert!(v.workers[0].spent.tokens > 0 && v.workers[0].spent.first_at > 0);
}

#[tokio::test]
async fn an_upstream_out_of_quota_sends_its_requests_to_its_fallback() {
    // The primary refuses everything: its quota is gone.
    let primary = ReplayServer::start(
        scenario(4, "refuse_every = 1\nrefuse_message = \"You exceeded your current quota (insufficient_quota)\""),
        "127.0.0.1:0",
        None,
    )
    .await
    .unwrap();
    let spare = ReplayServer::start(scenario(4, ""), "127.0.0.1:0", None)
        .await
        .unwrap();
    let hub = hub_with(&primary, |c| {
        c.gateway.upstreams.push(UpstreamConfig {
            name: "spare".into(),
            api: "any".into(),
            url: spare.url(),
            api_key_env: String::new(),
            concurrency: 4,
            prices: Default::default(),
            fallback: String::new(),
        });
        c.gateway.upstreams[0].fallback = "spare".into();
    })
    .await;
    let tokens = hub.tokens(1).await;
    let (path, body) = request("responses", true);
    let resp = post(&hub, "responses", &path, &tokens[0], &body).await;
    assert_eq!(resp.status(), 200);
    resp.text().await.unwrap();
    assert_eq!(primary.served()["w01"].refused, 1);
    assert_eq!(spare.served()["w01"].requests, 1);
    // Recorded once, when the answer ended.
    let (requests, ..) = recorded(&hub, "w01", 1).await;
    assert_eq!(requests, 1);
    let rows = hub.admin().usage().await.unwrap();
    assert_eq!(rows.len(), 1, "{rows:?}");
}

#[tokio::test]
async fn a_slow_stream_reaches_the_worker_event_by_event_as_it_is_made() {
    let replay = ReplayServer::start(
        scenario(1, "pad_events = 6\npad_bytes = 16\nevent_delay_ms = 150"),
        "127.0.0.1:0",
        None,
    )
    .await
    .unwrap();
    let hub = hub_with(&replay, |_| {}).await;
    let tokens = hub.tokens(1).await;
    let (path, body) = request("chat", true);
    let started = std::time::Instant::now();
    let mut resp = post(&hub, "chat", &path, &tokens[0], &body).await;
    let mut arrivals = Vec::new();
    while let Some(c) = resp.chunk().await.unwrap() {
        if String::from_utf8_lossy(&c).contains("xxxxxxxxxxxxxxxx") {
            arrivals.push(started.elapsed());
        }
    }
    // Each padding event came on its own, about 150 ms after the one before: nothing was
    // held back to be sent together.
    assert_eq!(arrivals.len(), 6, "{arrivals:?}");
    assert!(arrivals[0] < Duration::from_millis(140), "{arrivals:?}");
    assert!(
        arrivals[5] - arrivals[0] >= Duration::from_millis(700),
        "{arrivals:?}"
    );
    let (requests, _, _, output, _) = recorded(&hub, "w01", 1).await;
    assert_eq!(
        (requests, output),
        (1, replay.served()["w01"].output_tokens)
    );
}

#[tokio::test]
async fn an_upstream_whose_key_is_not_set_is_refused_with_the_variable_named() {
    let replay = ReplayServer::start(scenario(1, ""), "127.0.0.1:0", None)
        .await
        .unwrap();
    let hub = hub_with(&replay, |c| {
        c.gateway.upstreams[0].api_key_env = "AGENSH_TEST_KEY_NOBODY_SETS".into();
    })
    .await;
    let tokens = hub.tokens(1).await;
    let (path, body) = request("anthropic", false);
    let resp = post(&hub, "anthropic", &path, &tokens[0], &body).await;
    assert_eq!(resp.status(), 503);
    let v: Value = resp.json().await.unwrap();
    let m = v["error"]["message"].as_str().unwrap();
    assert!(
        m.contains("AGENSH_TEST_KEY_NOBODY_SETS") && m.contains("export"),
        "{m}"
    );
    // The hub serves everything else.
    assert!(hub.admin().workers().await.is_ok());
    assert!(replay.requests().is_empty());
}

#[tokio::test]
async fn a_request_whose_worker_left_before_the_answer_is_still_read_and_counted() {
    // The model thinks 600 ms before its first byte; the agent gives up after 150 ms (as an
    // agent stopped at the end of a run does). The upstream answers, and bills, anyway.
    let replay = ReplayServer::start(scenario(1, "answer_delay_ms = 600"), "127.0.0.1:0", None)
        .await
        .unwrap();
    let hub = hub_with(&replay, |_| {}).await;
    let tokens = hub.tokens(1).await;
    let (path, body) = request("chat", false);
    let gone = reqwest::Client::new()
        .post(format!("{}/model/{path}", hub.url()))
        .bearer_auth(&tokens[0])
        .json(&body)
        .timeout(Duration::from_millis(150))
        .send()
        .await;
    assert!(gone.is_err(), "the agent left before the answer: {gone:?}");
    let (requests, input, _, output, _) = recorded(&hub, "w01", 1).await;
    let served = &replay.served()["w01"];
    assert_eq!(
        (requests, input, output),
        (1, served.input_tokens, served.output_tokens),
        "the answer nobody waited for is counted as the upstream served it"
    );
}
