//! The model gateway benchmark: a real `agensh hub` process in front of real replay model
//! servers (`agensh model replay`, processes of their own), each request made once directly
//! to the upstream and once through the gateway, alternating, in the same run.
//!
//! 1. added latency per request (non-streamed Chat Completions): p50 and p99 of each side;
//! 2. time to the first streamed byte, each side;
//! 3. streaming throughput: one long answer (many small events, as a model streams them),
//!    bytes per second each side;
//! 4. memory per open stream: the hub's resident memory with `--streams` slow streams open
//!    at once, against before they opened.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use agensh_domain::config::Config;
use agensh_domain::gateway::{RouteConfig, UpstreamConfig};
use agensh_store::{SqliteStore, Store};
use anyhow::{bail, Context, Result};
use serde_json::{json, Value};
use tokio::sync::Barrier;

use crate::hub::{bar, memory_of, start_hub};
use crate::stats::{ms, percentile};

#[derive(clap::Args)]
pub struct Args {
    /// Requests per side in the latency measurement.
    #[arg(long, default_value_t = 2000)]
    requests: usize,
    /// Streamed requests per side in the time-to-first-byte measurement.
    #[arg(long, default_value_t = 300)]
    first_bytes: usize,
    /// Events of the long answer in the throughput measurement (64 characters each).
    #[arg(long, default_value_t = 200_000)]
    stream_events: usize,
    /// Long answers per side in the throughput measurement (the median is reported).
    #[arg(long, default_value_t = 7)]
    stream_rounds: usize,
    /// Streams open at once in the memory measurement.
    #[arg(long, default_value_t = 1024)]
    streams: usize,
    #[command(flatten)]
    common: crate::stats::Common,
}

/// `agensh model replay SCENARIO` on a free port, a process of its own (so its work is not
/// counted as the harness's); killed when dropped.
pub(crate) struct Replay {
    child: Child,
    pub(crate) url: String,
}

impl Drop for Replay {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts a replay server on `scenario`, written to `dir/NAME.toml`.
pub(crate) fn start_replay(
    agensh: &Path,
    dir: &Path,
    name: &str,
    scenario: &str,
) -> Result<Replay> {
    start_replay_recording(agensh, dir, name, scenario, None)
}

/// [`start_replay`], appending every request to `record` (a JSON line each) when given.
pub(crate) fn start_replay_recording(
    agensh: &Path,
    dir: &Path,
    name: &str,
    scenario: &str,
    record: Option<&Path>,
) -> Result<Replay> {
    let file = dir.join(format!("{name}.toml"));
    std::fs::write(&file, scenario)?;
    let mut cmd = Command::new(agensh);
    if let Some(r) = record {
        cmd.arg("model").arg("replay").arg("--record").arg(r);
    } else {
        cmd.args(["model", "replay"]);
    }
    let mut child = cmd
        .arg(&file)
        .args(["--listen", "127.0.0.1:0"])
        .env("AGENSH_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .with_context(|| format!("cannot start {}", agensh.display()))?;
    let mut out = BufReader::new(child.stdout.take().expect("piped"));
    let mut first = String::new();
    out.read_line(&mut first)?;
    // Read the rest too: agensh exits when it finds its stdout closed.
    std::thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));
    let url = first
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .map(|w| w.trim_end_matches(';').to_string())
        .with_context(|| format!("no URL in the replay server's first line: {first:?}"))?;
    Ok(Replay { child, url })
}

/// A Chat Completions request of about 1 KiB.
fn chat(stream: bool) -> Value {
    json!({
        "model": "replay-model",
        "stream": stream,
        "messages": [
            { "role": "system", "content": "You are a worker of an agensh organization. ".repeat(12) },
            { "role": "user", "content": "Say ok." }
        ]
    })
}

/// One request: the time to its answer's end (or first byte), and the bytes it carried.
async fn one(
    http: &reqwest::Client,
    url: &str,
    token: &str,
    body: &Value,
    first_byte_only: bool,
) -> Result<(Duration, u64)> {
    let started = Instant::now();
    let mut resp = http.post(url).bearer_auth(token).json(body).send().await?;
    if !resp.status().is_success() {
        bail!("{url} answered {}: {}", resp.status(), resp.text().await?);
    }
    let mut bytes = 0u64;
    while let Some(c) = resp.chunk().await? {
        bytes += c.len() as u64;
        if first_byte_only {
            return Ok((started.elapsed(), bytes));
        }
    }
    Ok((started.elapsed(), bytes))
}

/// One worker's requests, directly to its upstream and through the gateway.
struct Pair<'a> {
    http: &'a reqwest::Client,
    direct: &'a str,
    gateway: &'a str,
    token: &'a str,
}

impl Pair<'_> {
    /// `n` requests of `body` each way, alternating; each side's times.
    async fn times(
        &self,
        body: &Value,
        n: usize,
        first_byte_only: bool,
        what: &str,
    ) -> Result<(Vec<Duration>, Vec<Duration>)> {
        let b = bar(n as u64, what);
        let (mut d, mut g) = (Vec::with_capacity(n), Vec::with_capacity(n));
        for i in 0..n {
            // Which side goes first alternates, so neither always finds the other's cache warm.
            let order = if i % 2 == 0 {
                [true, false]
            } else {
                [false, true]
            };
            for through in order {
                let url = if through { self.gateway } else { self.direct };
                let (t, _) = one(self.http, url, self.token, body, first_byte_only).await?;
                if through { &mut g } else { &mut d }.push(t);
            }
            b.inc(1);
        }
        b.finish_and_clear();
        Ok((d, g))
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

pub async fn run(a: Args) -> Result<()> {
    let agensh = crate::stats::agensh_binary(a.common.agensh.as_deref())?;
    // This process holds one connection per open stream.
    let _ = agensh_process::raise_open_file_limit();
    let tmp = tempfile::tempdir()?;
    let fast = start_replay(&agensh, tmp.path(), "fast", "side_text = \"ok\"\n")?;
    let long = start_replay(
        &agensh,
        tmp.path(),
        "long",
        &format!(
            "side_text = \"ok\"\npad_events = {}\npad_bytes = 64\n",
            a.stream_events
        ),
    )?;
    let slow = start_replay(
        &agensh,
        tmp.path(),
        "slow",
        "side_text = \"ok\"\npad_events = 10\npad_bytes = 64\nevent_delay_ms = 1000\n",
    )?;

    // The organization: w…1 on the fast upstream, w…2 on the long one, the rest on the slow.
    let dir = tmp.path().join("org");
    let state = agensh_hub::state_dir(&dir);
    std::fs::create_dir_all(&state)?;
    let store = SqliteStore::open(&state.join(agensh_hub::STORE_FILE))?;
    let ids: Vec<String> = store
        .add_workers(a.streams + 2, 0)
        .await?
        .into_iter()
        .map(|w| w.id)
        .collect();
    drop(store);
    let mut config = Config::with_goal("gateway benchmark");
    // The gateway's own cost is measured, not a worker's share of the hub: its request
    // limits are off.
    config.limits.requests_per_sec = 0.0;
    config.limits.burst = 0;
    for (name, r) in [("fast", &fast), ("long", &long), ("slow", &slow)] {
        config.gateway.upstreams.push(UpstreamConfig {
            name: name.into(),
            api: "openai".into(),
            url: format!("{}/v1", r.url),
            api_key_env: String::new(),
            // No limit: this measures the gateway's own cost, not its queue.
            concurrency: 0,
            prices: Default::default(),
            fallback: String::new(),
        });
    }
    for (workers, upstream) in [
        (ids[0].clone(), "fast"),
        (ids[1].clone(), "long"),
        ("all".to_string(), "slow"),
    ] {
        config.gateway.routes.push(RouteConfig {
            workers,
            upstream: upstream.into(),
            model: String::new(),
        });
    }
    std::fs::write(dir.join("agensh.toml"), toml::to_string(&config)?)?;
    let hub = start_hub(&agensh, &dir)?;
    let admin = agensh_client::Client::new(&hub.url, &hub.admin_token);
    let mut tokens = Vec::with_capacity(ids.len());
    for id in &ids {
        tokens.push(admin.worker_token(id).await?.token);
    }
    let http = reqwest::Client::builder()
        .no_proxy()
        .pool_max_idle_per_host(a.streams + 16)
        .build()?;
    let gw = format!("{}/model/openai/v1/chat/completions", hub.url);
    let direct = |r: &Replay| format!("{}/v1/chat/completions", r.url);

    // 1. Latency.
    let fast_url = direct(&fast);
    let pair = Pair {
        http: &http,
        direct: &fast_url,
        gateway: &gw,
        token: &tokens[0],
    };
    let warm = (a.requests / 10).max(10);
    pair.times(&chat(false), warm, false, "warming up").await?;
    let (d, g) = pair
        .times(&chat(false), a.requests, false, "latency")
        .await?;
    let lat = |v: &[Duration], p| ms(percentile(v, p));
    let (d50, d99, g50, g99) = (lat(&d, 50.0), lat(&d, 99.0), lat(&g, 50.0), lat(&g, 99.0));

    // 2. Time to the first streamed byte.
    let (fd, fg) = pair
        .times(&chat(true), a.first_bytes, true, "first bytes")
        .await?;
    let (f50d, f50g, f99d, f99g) = (
        lat(&fd, 50.0),
        lat(&fg, 50.0),
        lat(&fd, 99.0),
        lat(&fg, 99.0),
    );

    // 3. Throughput of a long streamed answer.
    let b = bar(a.stream_rounds as u64 * 2, "long streams");
    let (mut rate_d, mut rate_g, mut stream_bytes) = (Vec::new(), Vec::new(), 0u64);
    for i in 0..a.stream_rounds {
        let order = if i % 2 == 0 {
            [true, false]
        } else {
            [false, true]
        };
        for through in order {
            let url = if through { gw.clone() } else { direct(&long) };
            let (t, bytes) = one(&http, &url, &tokens[1], &chat(true), false).await?;
            stream_bytes = bytes;
            let rate = bytes as f64 / t.as_secs_f64() / 1e6;
            if through { &mut rate_g } else { &mut rate_d }.push(rate);
            b.inc(1);
        }
    }
    b.finish_and_clear();
    let (mbps_d, mbps_g) = (median(rate_d), median(rate_g));

    // 4. Memory per open stream.
    let pid = hub.child.id();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (rss_before, _) = memory_of(pid);
    let opened = Arc::new(Barrier::new(a.streams + 1));
    let mut tasks = Vec::with_capacity(a.streams);
    for token in tokens[2..].iter().cloned() {
        let (http, gw, opened) = (http.clone(), gw.clone(), opened.clone());
        tasks.push(tokio::spawn(async move {
            let mut resp = http
                .post(&gw)
                .bearer_auth(token)
                .json(&chat(true))
                .send()
                .await?;
            let ok = resp.status().is_success() && resp.chunk().await?.is_some();
            opened.wait().await;
            while resp.chunk().await?.is_some() {}
            anyhow::ensure!(ok, "a stream did not open");
            Ok::<_, anyhow::Error>(())
        }));
    }
    let all_open = tokio::time::timeout(Duration::from_secs(60), opened.wait()).await;
    if all_open.is_err() {
        bail!("{} streams did not all open within 60 s", a.streams);
    }
    let mut rss_open = 0;
    for _ in 0..10 {
        rss_open = rss_open.max(memory_of(pid).0);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for t in tasks {
        t.await??;
    }
    let per_stream = rss_open.saturating_sub(rss_before) as f64 / a.streams as f64;
    let recorded = admin.usage().await?.iter().map(|u| u.requests).sum::<u64>();

    let result = json!({
        "latency_ms": { "direct_p50": d50, "direct_p99": d99, "gateway_p50": g50, "gateway_p99": g99,
                        "added_p50": g50 - d50, "added_p99": g99 - d99, "requests": a.requests },
        "first_byte_ms": { "direct_p50": f50d, "gateway_p50": f50g, "direct_p99": f99d, "gateway_p99": f99g },
        "stream_mb_per_s": { "direct": mbps_d, "gateway": mbps_g, "ratio": mbps_g / mbps_d,
                             "bytes": stream_bytes, "events": a.stream_events },
        "memory": { "streams": a.streams, "rss_before_mib": rss_before as f64 / 1048576.0,
                    "rss_open_mib": rss_open as f64 / 1048576.0, "per_stream_kib": per_stream / 1024.0 },
        "recorded_requests": recorded,
    });
    if a.common.json {
        println!("{}", serde_json::to_string_pretty(&result)?);
        return Ok(());
    }
    println!("model gateway against direct, same replay upstream, same run");
    println!(
        "latency ({} requests each): direct p50 {d50:.3} ms p99 {d99:.3} ms; gateway p50 {g50:.3} ms p99 {g99:.3} ms; added p50 {:.3} ms p99 {:.3} ms",
        a.requests,
        g50 - d50,
        g99 - d99
    );
    println!(
        "first streamed byte: direct p50 {f50d:.3} ms p99 {f99d:.3} ms; gateway p50 {f50g:.3} ms p99 {f99g:.3} ms"
    );
    println!(
        "long stream ({} events, {:.1} MB): direct {mbps_d:.1} MB/s, gateway {mbps_g:.1} MB/s ({:.1}%)",
        a.stream_events,
        stream_bytes as f64 / 1e6,
        100.0 * mbps_g / mbps_d
    );
    println!(
        "{} streams open: hub {:.1} MiB before, {:.1} MiB open: {:.1} KiB per open stream",
        a.streams,
        rss_before as f64 / 1048576.0,
        rss_open as f64 / 1048576.0,
        per_stream / 1024.0
    );
    println!("requests recorded by the gateway: {recorded}");
    Ok(())
}
