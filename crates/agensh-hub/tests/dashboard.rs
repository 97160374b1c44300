//! The dashboard's hub side: logging in with a one-time link, what the session cookie may
//! do, the page and its assets, and the live stream (frames, resuming without gaps or
//! duplicates).

mod common;

use std::time::{Duration, Instant};

use agensh_domain::record::RecordKind;
use agensh_domain::worker::WorkerStatus;
use common::{rec, TestHub};
use reqwest::header::{COOKIE, HOST, ORIGIN, SET_COOKIE};
use reqwest::redirect::Policy;
use serde_json::Value;

fn browser() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(Policy::none())
        .build()
        .unwrap()
}

/// Logs in through a fresh one-time link; the session cookie (`name=value`).
async fn log_in(hub: &TestHub) -> String {
    let link = hub.admin().dashboard_link().await.unwrap();
    assert!(
        link.url.starts_with(hub.url()),
        "{} on {}",
        link.url,
        hub.url()
    );
    let r = browser().get(&link.url).send().await.unwrap();
    assert_eq!(r.status(), 303);
    assert_eq!(r.headers()["location"], "/");
    let set = r.headers()[SET_COOKIE].to_str().unwrap().to_string();
    for attr in ["HttpOnly", "SameSite=Strict", "Path=/"] {
        assert!(set.contains(attr), "{attr} in {set}");
    }
    set.split(';').next().unwrap().to_string()
}

#[tokio::test]
async fn a_link_logs_in_once_and_the_cookie_acts_as_the_operator() {
    let hub = TestHub::start().await;
    let link = hub.admin().dashboard_link().await.unwrap();
    let r = browser().get(&link.url).send().await.unwrap();
    assert_eq!(r.status(), 303);
    let cookie = r.headers()[SET_COOKIE].to_str().unwrap();
    let cookie = cookie.split(';').next().unwrap().to_string();
    let again = browser().get(&link.url).send().await.unwrap();
    assert_eq!(again.status(), 401, "a link is spent by its first use");
    assert!(again.headers().get(SET_COOKIE).is_none());
    assert!(again
        .text()
        .await
        .unwrap()
        .contains("used already or has expired"));

    let overview = browser()
        .get(format!("{}/api/v1/overview", hub.url()))
        .header(COOKIE, &cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(overview.status(), 200);
    let body: Value = overview.json().await.unwrap();
    assert_eq!(body["goal"], "test");

    let forged = format!("{}x", &cookie[..cookie.len() - 1]);
    let refused = browser()
        .get(format!("{}/api/v1/overview", hub.url()))
        .header(COOKIE, forged)
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 401, "a cookie whose MAC is wrong");
}

#[tokio::test]
async fn without_the_cookie_the_page_shows_nothing_of_the_organization() {
    let hub = TestHub::start().await;
    let tokens = hub.tokens(1).await;
    let r = browser()
        .get(format!("{}/", hub.url()))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    let page = r.text().await.unwrap();
    assert!(page.contains("agensh dashboard"), "says how to log in");
    assert!(!page.contains(".js"), "not the application");
    for path in [
        "/api/v1/overview",
        "/api/v1/stream",
        "/api/v1/merge-failures",
    ] {
        let none = browser()
            .get(format!("{}{path}", hub.url()))
            .send()
            .await
            .unwrap();
        assert_eq!(none.status(), 401, "{path} without a cookie");
        let worker = browser()
            .get(format!("{}{path}", hub.url()))
            .bearer_auth(&tokens[0])
            .send()
            .await
            .unwrap();
        assert_eq!(worker.status(), 403, "{path} with a worker's token");
    }
    let link = hub.client(&tokens[0]).dashboard_link().await.unwrap_err();
    assert_eq!(link.code, "admin_only", "a worker cannot make a link");
}

#[tokio::test]
async fn the_page_and_its_assets_carry_a_strict_policy_and_no_token() {
    let hub = TestHub::start().await;
    let cookie = log_in(&hub).await;
    let r = browser()
        .get(format!("{}/", hub.url()))
        .header(COOKIE, &cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let csp = r.headers()["content-security-policy"]
        .to_str()
        .unwrap()
        .to_string();
    assert!(
        csp.contains("script-src 'self'") && csp.contains("frame-ancestors 'none'"),
        "{csp}"
    );
    assert_eq!(r.headers()["referrer-policy"], "no-referrer");
    let page = r.text().await.unwrap();
    assert!(!page.contains(&hub.hub.admin_token));
    let assets: Vec<String> = page
        .match_indices("/assets/")
        .map(|(i, _)| page[i..].split('"').next().unwrap().to_string())
        .collect();
    assert_eq!(assets.len(), 2, "{assets:?}");
    for a in &assets {
        let r = browser()
            .get(format!("{}{a}", hub.url()))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{a}");
        assert!(r.headers()["cache-control"]
            .to_str()
            .unwrap()
            .contains("immutable"));
        let body = r.text().await.unwrap();
        assert!(!body.contains(&hub.hub.admin_token));
    }
    let gone = browser()
        .get(format!("{}/assets/app-000000000000.js", hub.url()))
        .send()
        .await
        .unwrap();
    assert_eq!(gone.status(), 404);
}

#[tokio::test]
async fn a_change_by_cookie_must_come_from_the_hubs_own_page() {
    let hub = TestHub::start().await;
    hub.tokens(1).await;
    let cookie = log_in(&hub).await;
    let host = hub.url().trim_start_matches("http://").to_string();
    let post = |origin: Option<String>, site: Option<&'static str>| {
        let mut r = browser()
            .post(format!("{}/api/v1/messages", hub.url()))
            .header(COOKIE, &cookie)
            .header(HOST, &host)
            .json(&serde_json::json!({ "to": "w01", "text": "from the page" }));
        if let Some(o) = origin {
            r = r.header(ORIGIN, o);
        }
        if let Some(s) = site {
            r = r.header("sec-fetch-site", s);
        }
        r.send()
    };
    let no_origin = post(None, None).await.unwrap();
    assert_eq!(no_origin.status(), 403);
    let body: Value = no_origin.json().await.unwrap();
    assert_eq!(body["error"]["code"], "cross_origin");
    // Another port of localhost is the same site to a browser, but not the hub's page.
    let other = post(Some("http://127.0.0.1:1".into()), Some("same-site"))
        .await
        .unwrap();
    assert_eq!(other.status(), 403);
    let own = post(Some(format!("http://{host}")), Some("same-origin"))
        .await
        .unwrap();
    assert_eq!(own.status(), 201, "{}", own.text().await.unwrap());
    let events = hub.admin_as("w01").events(0, 0).await.unwrap();
    assert!(
        events.iter().any(|e| e.kind == "msg.dm"
            && e.payload["text"] == "from the page"
            && e.payload["from"] == "admin"),
        "the worker got the operator's message: {events:?}"
    );
}

/// Reads frames from a stream response until `done` says enough, or `limit` passes.
async fn frames_until(
    resp: &mut reqwest::Response,
    limit: Duration,
    mut done: impl FnMut(&[Value]) -> bool,
) -> Vec<Value> {
    let mut parser = agensh_protocol::framing::SseParser::new();
    let mut frames = Vec::new();
    let end = Instant::now() + limit;
    while !done(&frames) {
        let left = end.saturating_duration_since(Instant::now());
        let chunk = tokio::time::timeout(left, resp.chunk())
            .await
            .unwrap_or_else(|_| panic!("no frame in time; got {frames:?}"))
            .unwrap()
            .expect("the stream goes on");
        for ev in parser.push(&chunk) {
            if ev.event.as_deref() == Some("frame") {
                let f: Value = serde_json::from_str(&ev.data).unwrap();
                assert_eq!(ev.id.as_deref(), Some(f["cursor"].to_string().as_str()));
                frames.push(f);
            }
        }
    }
    frames
}

fn record_ids(frames: &[Value]) -> Vec<String> {
    frames
        .iter()
        .flat_map(|f| f["events"].as_array().cloned().unwrap_or_default())
        .filter(|e| e["kind"] == "board.record")
        .map(|e| e["payload"]["id"].as_str().unwrap().to_string())
        .collect()
}

async fn open_stream(hub: &TestHub, last: Option<i64>) -> reqwest::Response {
    let mut r = browser()
        .get(format!("{}/api/v1/stream", hub.url()))
        .bearer_auth(&hub.hub.admin_token);
    if let Some(n) = last {
        r = r.header("last-event-id", n.to_string());
    }
    let resp = r.send().await.unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["content-type"], "text/event-stream");
    resp
}

#[tokio::test]
async fn the_stream_carries_changes_and_resumes_without_gaps_or_duplicates() {
    let hub = TestHub::start().await;
    let w = hub.workers(3).await;
    let mut stream = open_stream(&hub, None).await;
    let first = frames_until(&mut stream, Duration::from_secs(10), |f| !f.is_empty()).await;
    assert_eq!(first[0]["reset"], true, "a fresh connection starts whole");
    assert_eq!(first[0]["workers"].as_array().unwrap().len(), 3);
    let total: u64 = first[0]["states"]
        .as_object()
        .unwrap()
        .values()
        .map(|v| v.as_u64().unwrap())
        .sum();
    assert_eq!(total, 3, "workers per state");

    // A record posted shows in a frame within a second.
    let posted = Instant::now();
    let g = w[0]
        .post_record(&rec(RecordKind::Fact, "seen live"))
        .await
        .unwrap();
    let frames = frames_until(&mut stream, Duration::from_secs(5), |f| {
        record_ids(f).contains(&g.record.id)
    })
    .await;
    assert!(
        posted.elapsed() < Duration::from_secs(1),
        "{:?}",
        posted.elapsed()
    );
    let cursor = frames.last().unwrap()["cursor"].as_i64().unwrap();

    // A worker's status change shows as its row.
    w[1].set_status("w02", WorkerStatus::Dead).await.unwrap();
    let frames = frames_until(&mut stream, Duration::from_secs(5), |f| {
        f.iter()
            .flat_map(|f| f["workers"].as_array().cloned().unwrap_or_default())
            .any(|r| r["id"] == "w02" && r["status"] == "dead")
    })
    .await;
    assert!(frames.iter().any(|f| f["states"]["dead"] == 1));
    drop(stream);

    // Away: three records; back with the last cursor seen: exactly those, in order.
    let mut missed = Vec::new();
    for i in 0..3 {
        let a = w[2]
            .post_record(&rec(RecordKind::Fact, &format!("while away {i}")))
            .await
            .unwrap();
        missed.push(a.record.id);
    }
    let mut again = open_stream(&hub, Some(cursor)).await;
    let frames = frames_until(&mut again, Duration::from_secs(10), |f| {
        record_ids(f).len() >= 3
    })
    .await;
    assert_ne!(frames[0]["reset"], true, "a resumed stream needs no reload");
    assert_eq!(
        frames[0]["workers"].as_array().unwrap().len(),
        3,
        "the whole table again"
    );
    assert_eq!(
        record_ids(&frames),
        missed,
        "every missed record once, in order"
    );
    let mut seqs: Vec<i64> = frames
        .iter()
        .flat_map(|f| f["events"].as_array().cloned().unwrap_or_default())
        .map(|e| e["seq"].as_i64().unwrap())
        .collect();
    assert!(
        seqs.iter().all(|s| *s > cursor),
        "nothing at or before the cursor: {seqs:?}"
    );
    let n = seqs.len();
    seqs.dedup();
    assert_eq!(seqs.len(), n, "no event twice");

    // And it goes on live after the catch-up.
    let later = w[0]
        .post_record(&rec(RecordKind::Fact, "after resuming"))
        .await
        .unwrap();
    let frames = frames_until(&mut again, Duration::from_secs(5), |f| {
        record_ids(f).contains(&later.record.id)
    })
    .await;
    assert_eq!(record_ids(&frames), vec![later.record.id.clone()]);
}

#[tokio::test]
async fn a_resume_from_a_cursor_far_back_or_ahead_reloads_instead() {
    let hub = TestHub::start().await;
    hub.workers(1).await;
    let mut ahead = open_stream(&hub, Some(1_000_000)).await;
    let frames = frames_until(&mut ahead, Duration::from_secs(10), |f| !f.is_empty()).await;
    assert_eq!(
        frames[0]["reset"], true,
        "a cursor the hub never reached (another store)"
    );
}

#[tokio::test]
async fn the_stream_survives_a_hub_restart_with_nothing_lost() {
    let hub = TestHub::start().await;
    let w = hub.workers(1).await;
    let a = w[0]
        .post_record(&rec(RecordKind::Fact, "before"))
        .await
        .unwrap();
    let mut stream = open_stream(&hub, Some(0)).await;
    let frames = frames_until(&mut stream, Duration::from_secs(10), |f| {
        record_ids(f).contains(&a.record.id)
    })
    .await;
    let cursor = frames.last().unwrap()["cursor"].as_i64().unwrap();
    drop(stream);
    let hub = hub.restart().await;
    let b = hub
        .admin_as("w01")
        .post_record(&rec(RecordKind::Fact, "after the restart"))
        .await
        .unwrap();
    let mut again = open_stream(&hub, Some(cursor)).await;
    let frames = frames_until(&mut again, Duration::from_secs(10), |f| {
        record_ids(f).contains(&b.record.id)
    })
    .await;
    assert_eq!(record_ids(&frames), vec![b.record.id.clone()]);
}

#[tokio::test]
async fn the_overview_counts_merges_health_and_scores() {
    let hub = TestHub::start().await;
    let w = hub.workers(2).await;
    w[0].post_record(&common::claim(
        "parser",
        Some("parser"),
        &["src/parser.rs"],
        None,
    ))
    .await
    .unwrap();
    let overlap = w[1]
        .post_record(&common::claim(
            "parser",
            Some("parser"),
            &["src/parser.rs"],
            None,
        ))
        .await
        .unwrap();
    assert!(!overlap.overlaps.is_empty());
    let admin = hub.admin();
    admin
        .set_run_clock(&agensh_protocol::dashboard::RunClock {
            started_at: 1_000,
            ends_at: Some(5_000),
        })
        .await
        .unwrap();
    admin
        .add_score(&agensh_protocol::dashboard::Score {
            at: 2_000,
            score: 0.5,
            label: "programbench kept".into(),
            commit: None,
        })
        .await
        .unwrap();
    let bad = admin
        .add_score(&agensh_protocol::dashboard::Score {
            at: 2_000,
            score: 1.5,
            label: "x".into(),
            commit: None,
        })
        .await
        .unwrap_err();
    assert_eq!(bad.code, "bad_score");
    let o = admin.overview().await.unwrap();
    assert_eq!(o.health.claims, 2);
    assert_eq!(o.health.claim_overlaps, 1);
    assert_eq!(o.run.unwrap().ends_at, Some(5_000));
    assert_eq!(o.scores.len(), 1);
    assert_eq!(o.states.values().sum::<u64>(), 2);
    assert!(o.merges.is_empty());
}

#[tokio::test]
async fn a_workers_diff_shows_the_branch_it_committed_to_last() {
    let org = common::org::example().await;
    let get = |path: &'static str| org.call(reqwest::Method::GET, path, None, None);
    let (status, d) = get("/api/v1/workers/w01/diff").await;
    assert_eq!(status, 200, "{d}");
    assert_eq!(d["branch"], "w01/ship", "the newest of its branches");
    assert_eq!(d["branches"], serde_json::json!(["w01/ship", "w01/work"]));
    let patch = d["patch"].as_str().unwrap();
    assert!(
        patch.contains("+roman") && patch.contains("+parse"),
        "{patch}"
    );
    assert_eq!(d["truncated"], false);
    let (status, d) = get("/api/v1/workers/w01/diff?branch=w01/work").await;
    assert_eq!(
        (status, &d["branch"]),
        (200, &serde_json::json!("w01/work"))
    );
    assert!(!d["patch"].as_str().unwrap().contains("+roman"));
    let (status, d) = get("/api/v1/workers/w01/diff?branch=w02/work").await;
    assert_eq!(
        (status, &d["error"]["code"]),
        (403, &serde_json::json!("outside_namespace"))
    );
    let (status, d) = get("/api/v1/workers/w02/diff").await;
    assert_eq!(
        (status, &d["error"]["code"]),
        (404, &serde_json::json!("unknown_branch"))
    );
}
