//! Under abuse, a well-behaved worker keeps its latency: hundreds of half-sent requests
//! are cut off at the header timeout, and one worker sending as fast as it can is held to
//! its rate while another worker's p99 stays under 50 ms.
//!
//! The two tests take turns (a lock), and each measures its victim against a baseline
//! taken the same way just before, so another test binary's load does not decide them.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use serde_json::json;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

static TURNS: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The p50 and p99 of `n` requests by `token`, a board write and a recent view in turn,
/// one every 40 ms: a busy worker within its limits (`[limits]` defaults).
async fn victim(url: &str, token: &str, n: usize) -> (Duration, Duration) {
    let http = reqwest::Client::new();
    let mut took = Vec::with_capacity(n);
    let mut tick = tokio::time::interval(Duration::from_millis(40));
    for i in 0..n {
        tick.tick().await;
        let started = Instant::now();
        let r = if i.is_multiple_of(2) {
            http.post(format!("{url}/api/v1/board/records"))
                .bearer_auth(token)
                .json(&json!({ "kind": "OBSERVED", "text": format!("victim note {i}") }))
                .send()
                .await
        } else {
            http.get(format!("{url}/api/v1/board/recent?cap=20"))
                .bearer_auth(token)
                .send()
                .await
        }
        .expect("the victim reaches the hub");
        assert!(
            r.status().is_success(),
            "the victim is served: {}",
            r.status()
        );
        let _ = r.bytes().await;
        took.push(started.elapsed());
    }
    took.sort();
    (took[n / 2], took[(n * 99) / 100])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn half_sent_requests_are_cut_off_while_a_normal_client_keeps_its_latency() {
    let _turn = TURNS.lock().await;
    let mut config = config();
    config.hub.header_timeout_secs = 3;
    let hub = TestHub::with_config(config).await;
    let token = hub.tokens(1).await.remove(0);
    let (base50, base99) = victim(hub.url(), &token, 100).await;

    const SLOW: usize = 300;
    let mut slow = Vec::with_capacity(SLOW);
    for _ in 0..SLOW {
        let mut c = TcpStream::connect(hub.hub.addr).await.unwrap();
        c.write_all(b"POST /api/v1/board/records HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Le")
            .await
            .unwrap();
        slow.push(c);
    }
    let opened = Instant::now();
    let (p50, p99) = victim(hub.url(), &token, 100).await;
    eprintln!(
        "{SLOW} half-sent requests: victim p50 {p50:?} p99 {p99:?} (baseline p50 {base50:?} p99 {base99:?})"
    );
    assert!(
        p99 < Duration::from_millis(50).max(base99 * 3),
        "p99 {p99:?}"
    );

    // Every slow connection is closed by the hub at its header timeout.
    let mut cut = 0;
    for mut c in slow {
        let mut buf = [0u8; 64];
        let left = (opened + Duration::from_secs(10)).saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, tokio::io::AsyncReadExt::read(&mut c, &mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => cut += 1,
            Ok(Ok(_)) => cut += 1, // an error answer, then the close
            Err(_) => {}
        }
    }
    assert_eq!(cut, SLOW, "every half-sent request is cut off within 10 s");
    assert!(opened.elapsed() >= Duration::from_millis(2_500));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_at_full_speed_does_not_raise_another_workers_p99_above_50_ms() {
    let _turn = TURNS.lock().await;
    let hub = TestHub::with_config(config()).await;
    let tokens = hub.tokens(2).await;
    let (base50, base99) = victim(hub.url(), &tokens[1], 200).await;

    let stop = Arc::new(AtomicBool::new(false));
    let (sent, refused) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let mut flood = Vec::new();
    for _ in 0..4 {
        let (url, token) = (hub.url().to_string(), tokens[0].clone());
        let (stop, sent, refused) = (stop.clone(), sent.clone(), refused.clone());
        flood.push(tokio::spawn(async move {
            let http = reqwest::Client::new();
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                i += 1;
                // The expensive kind: a prefix grep, or a write.
                let r = if i.is_multiple_of(2) {
                    http.get(format!("{url}/api/v1/board/grep?q=victim*"))
                        .bearer_auth(&token)
                        .send()
                        .await
                } else {
                    http.post(format!("{url}/api/v1/board/records"))
                        .bearer_auth(&token)
                        .json(&json!({ "kind": "FACT", "text": format!("flood {i}") }))
                        .send()
                        .await
                };
                if let Ok(r) = r {
                    sent.fetch_add(1, Ordering::Relaxed);
                    if r.status() == 429 {
                        refused.fetch_add(1, Ordering::Relaxed);
                    }
                    let _ = r.bytes().await;
                }
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (p50, p99) = victim(hub.url(), &tokens[1], 200).await;
    stop.store(true, Ordering::Relaxed);
    for f in flood {
        f.await.unwrap();
    }
    let (sent, refused) = (
        sent.load(Ordering::Relaxed),
        refused.load(Ordering::Relaxed),
    );
    eprintln!(
        "flood of {sent} requests ({refused} refused with 429): victim p50 {p50:?} p99 {p99:?} (baseline p50 {base50:?} p99 {base99:?})"
    );
    assert!(refused > 0, "the flooding worker is held to its rate");
    // 50 ms, unless the machine is so loaded that even the quiet baseline is slow: then
    // the flood must not triple it.
    assert!(
        p99 < Duration::from_millis(50).max(base99 * 3),
        "victim p99 {p99:?} (baseline {base99:?})"
    );
}
