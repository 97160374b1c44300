//! The dashboard benchmark: what open dashboards cost the hub while 1,024 scripted workers
//! are busy, what the page's first load costs a browser, and how soon a board post shows
//! in an open page.
//!
//! An organization with `agensh hub` and one `agensh node` running N scripted workers (each
//! its own `agensh agent script` process, as in `agensh-bench node`) whose turns post a
//! board record, sleep and end, again and again, so the hub has steady work and the
//! dashboard's stream has events and worker changes to send. `[limits]` are off: the load
//! is the scenario's, not what the rate limits let through. Then:
//!
//! 1. **first load** — as a browser opens the page: a fresh one-time link (`/login?code=`,
//!    a 303 that sets the session cookie), `/` with the cookie, every `/assets/…` it names,
//!    then as the script does `/api/v1/overview` and `/api/v1/stats` and the stream from 40
//!    events back until its first frame (the whole worker table). Time and bytes (response
//!    status lines, headers as HTTP/1.1 writes them, and bodies; the requests apart);
//! 2. **hub CPU** — the hub process's utime+stime over windows of W seconds, alternating
//!    a baseline (no page open) and 5 dashboards open (each a first load, then a
//!    `Client::stream` read continuously, as an open page does);
//! 3. **post to page** — with 5 dashboards open, board records posted by the admin acting
//!    as a worker at a steady rate; for every record and page, the time from the moment the
//!    post was sent to the frame that carries its `board.record` event.
//!
//! Every process runs in its own process group; the benchmark is their subreaper and checks
//! that nothing is left when it ends.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agensh_client::Client;
use agensh_domain::record::{NewRecord, RecordKind};
use agensh_domain::worker::WorkerStatus;
use agensh_process::resources::{self, Limit};
use anyhow::{anyhow, bail, Context, Result};
use reqwest::header::{HeaderMap, ACCEPT_ENCODING, CONTENT_ENCODING, COOKIE, SET_COOKIE};
use serde_json::{json, Value};

use crate::hub::{bar, memory_of};
use crate::node::{
    init_org, node_command, print_result, start_hub, stop_all, tail, until_signal, BenchDir, Proc,
};
use crate::stats::{cpu_secs, ms, percentile};

#[derive(clap::Args)]
pub struct Args {
    /// Scripted workers the node runs (each with its own agent process).
    #[arg(long, default_value_t = 1024)]
    workers: usize,
    /// Seconds each agent turn sleeps between its board post and its end.
    #[arg(long, default_value_t = 10.0)]
    turn_secs: f64,
    /// Seconds of each CPU window, and of the post-to-page phase.
    #[arg(long, default_value_t = 20)]
    window_secs: u64,
    /// Pairs of CPU windows (a baseline, then one with the dashboards open).
    #[arg(long, default_value_t = 3)]
    pairs: usize,
    /// Dashboards open at once.
    #[arg(long, default_value_t = 5)]
    dashboards: usize,
    /// First loads timed.
    #[arg(long, default_value_t = 20)]
    loads: usize,
    /// Board posts per second in the post-to-page phase.
    #[arg(long, default_value_t = 5.0)]
    post_rate: f64,
    /// Seconds of load after every worker has reported, before anything is measured.
    #[arg(long, default_value_t = 15)]
    warmup_secs: u64,
    /// Longest wait for every worker to report busy or idle, in seconds.
    #[arg(long, default_value_t = 1800)]
    start_timeout_secs: u64,
    /// Organization directory to create (must not exist; default: a temporary one).
    /// Removed at the end unless --keep.
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Keep the organization directory for inspection.
    #[arg(long)]
    keep: bool,
    #[command(flatten)]
    common: crate::stats::Common,
}

/// The targets of the issue.
const TARGET_EXTRA_CPU_PCT: f64 = 5.0;
const TARGET_LOAD_MS: f64 = 1_000.0;
const TARGET_LOAD_KIB: f64 = 500.0;
const TARGET_POST_P99_MS: f64 = 500.0;

/// What every benchmark post's text starts with.
const POST_PREFIX: &str = "dashboard-bench post";

/// The agents' scenario: `turns` turns that each post a record, sleep and end.
fn scenario(turn_ms: u64, turns: usize) -> String {
    let mut s = String::from("# agensh-bench dashboard: busy workers\n");
    for _ in 0..turns {
        s.push_str(&format!(
            "[[step]]\naction = \"board_write\"\nkind = \"OBSERVED\"\ntext = \"{{worker}} turn {{turn}}: still busy\"\n\
             [[step]]\naction = \"sleep\"\nms = {turn_ms}\n\
             [[step]]\naction = \"end_turn\"\n"
        ));
    }
    s
}

fn pct(x: f64) -> f64 {
    (x * 10.0).round() / 10.0
}

fn kib(b: u64) -> f64 {
    (b as f64 / 1024.0 * 10.0).round() / 10.0
}

fn mib(b: u64) -> f64 {
    (b as f64 / 1_048_576.0 * 10.0).round() / 10.0
}

/// The machine's busy and total jiffies (all cores), from `/proc/stat`.
fn machine_jiffies() -> (u64, u64) {
    let s = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let v: Vec<u64> = s
        .lines()
        .next()
        .unwrap_or("")
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    let total: u64 = v.iter().take(8).sum();
    let idle = v.get(3).copied().unwrap_or(0) + v.get(4).copied().unwrap_or(0);
    (total - idle, total)
}

// ---------------------------------------------------------------------------------------
// A browser's first load

/// Bytes on the wire of one load, as HTTP/1.1 writes them (chunk framing of the stream
/// aside: a few bytes per chunk).
#[derive(Default, Clone, Copy)]
struct Wire {
    /// Hub to browser: status lines, headers, bodies.
    down: u64,
    /// Browser to hub: request lines and headers.
    up: u64,
    requests: u64,
    /// Whether any answer was compressed (`Content-Encoding`).
    compressed: bool,
}

impl Wire {
    fn request(&mut self, path: &str, host: &str, cookie: Option<&str>) {
        // GET PATH HTTP/1.1, host, accept, accept-encoding, cookie (a browser adds its
        // user agent and a few more).
        let mut n = format!("GET {path} HTTP/1.1\r\n").len()
            + format!("host: {host}\r\n").len()
            + "accept: */*\r\n".len()
            + "accept-encoding: gzip, deflate, br\r\n".len()
            + 2;
        if let Some(c) = cookie {
            n += format!("cookie: {c}\r\n").len();
        }
        self.up += n as u64;
        self.requests += 1;
    }

    fn head(&mut self, status: reqwest::StatusCode, headers: &HeaderMap) {
        let mut n = format!(
            "HTTP/1.1 {} {}\r\n",
            status.as_str(),
            status.canonical_reason().unwrap_or("")
        )
        .len()
            + 2;
        for (k, v) in headers {
            n += k.as_str().len() + 2 + v.as_bytes().len() + 2;
        }
        self.down += n as u64;
        self.compressed |= headers.contains_key(CONTENT_ENCODING);
    }
}

/// One timed first load.
struct Load {
    total: Duration,
    /// Until the page and its assets are in (before its API calls).
    page: Duration,
    wire: Wire,
    /// Bytes of the stream until its first frame (the whole worker table).
    first_frame_bytes: u64,
    /// Worker rows in the first frame.
    rows: usize,
}

/// A `GET` as the page makes it, counted in `wire`.
async fn get(
    http: &reqwest::Client,
    base: &str,
    path: &str,
    cookie: &str,
    wire: &Mutex<Wire>,
) -> Result<reqwest::Response> {
    let host = base.trim_start_matches("http://");
    let resp = http
        .get(format!("{base}{path}"))
        .header(ACCEPT_ENCODING, "gzip, deflate, br")
        .header(COOKIE, cookie)
        .send()
        .await
        .with_context(|| format!("GET {path}"))?;
    let mut w = wire.lock().expect("wire lock");
    w.request(path, host, Some(cookie));
    w.head(resp.status(), resp.headers());
    if !resp.status().is_success() {
        bail!("GET {path}: {}", resp.status());
    }
    Ok(resp)
}

/// A whole body, counted in `wire`.
async fn body(resp: reqwest::Response, wire: &Mutex<Wire>) -> Result<Vec<u8>> {
    let b = resp.bytes().await?;
    wire.lock().expect("wire lock").down += b.len() as u64;
    Ok(b.to_vec())
}

/// The page's first load as a browser makes it, from opening a fresh one-time link.
async fn first_load(admin: &Client, http: &reqwest::Client) -> Result<Load> {
    let link = admin.dashboard_link().await?;
    let base = admin.base().to_string();
    let wire = Arc::new(Mutex::new(Wire::default()));
    let started = Instant::now();

    // The link: 303 to `/` with the session cookie.
    let login_path = link
        .url
        .strip_prefix(&base)
        .ok_or_else(|| anyhow!("the link {} is not on {base}", link.url))?
        .to_string();
    let resp = http
        .get(&link.url)
        .header(ACCEPT_ENCODING, "gzip, deflate, br")
        .send()
        .await?;
    {
        let mut w = wire.lock().expect("wire lock");
        w.request(&login_path, base.trim_start_matches("http://"), None);
        w.head(resp.status(), resp.headers());
    }
    if resp.status() != reqwest::StatusCode::SEE_OTHER {
        bail!("the login link answered {}, not 303", resp.status());
    }
    let cookie = resp
        .headers()
        .get_all(SET_COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find_map(|v| {
            let pair = v.split(';').next()?.trim();
            pair.starts_with("agensh_session=")
                .then(|| pair.to_string())
        })
        .ok_or_else(|| anyhow!("the login set no agensh_session cookie"))?;
    body(resp, &wire).await?;

    // The page, then its assets side by side.
    let page = body(get(http, &base, "/", &cookie, &wire).await?, &wire).await?;
    let html = String::from_utf8_lossy(&page).to_string();
    let assets: Vec<String> = html
        .match_indices("/assets/")
        .map(|(i, _)| {
            html[i..]
                .chars()
                .take_while(|c| !matches!(c, '"' | '\'' | ' ' | '>'))
                .collect()
        })
        .collect::<BTreeSet<String>>()
        .into_iter()
        .collect();
    if assets.is_empty() {
        bail!("the page names no /assets/ — is the cookie taken?");
    }
    let mut fetches = tokio::task::JoinSet::new();
    for a in assets {
        let (http, base, cookie, wire) = (http.clone(), base.clone(), cookie.clone(), wire.clone());
        fetches.spawn(async move {
            let r = get(&http, &base, &a, &cookie, &wire).await?;
            body(r, &wire).await
        });
    }
    while let Some(r) = fetches.join_next().await {
        r??;
    }
    let page_done = started.elapsed();

    // What the script asks for: the overview, and the counts then the stream.
    let overview = async {
        let r = get(http, &base, "/api/v1/overview", &cookie, &wire).await?;
        body(r, &wire).await
    };
    let stream = async {
        let r = get(http, &base, "/api/v1/stats", &cookie, &wire).await?;
        let stats: Value = serde_json::from_slice(&body(r, &wire).await?)?;
        let after = (stats["events"].as_i64().unwrap_or(0) - 40).max(0);
        let mut r = get(
            http,
            &base,
            &format!("/api/v1/stream?after={after}"),
            &cookie,
            &wire,
        )
        .await?;
        let mut text: Vec<u8> = Vec::new();
        loop {
            let Some(chunk) = r.chunk().await? else {
                bail!("the stream ended before its first frame");
            };
            wire.lock().expect("wire lock").down += chunk.len() as u64;
            text.extend_from_slice(&chunk);
            if let Some(frame) = first_sse_frame(&text) {
                return Ok::<_, anyhow::Error>((text.len() as u64, frame));
            }
        }
    };
    let (o, s) = tokio::join!(overview, stream);
    o?;
    let (frame_bytes, frame) = s?;
    let total = started.elapsed();
    let wire = *wire.lock().expect("wire lock");
    Ok(Load {
        total,
        page: page_done,
        wire,
        first_frame_bytes: frame_bytes,
        rows: frame["workers"].as_array().map_or(0, Vec::len),
    })
}

/// The data of the first complete `event: frame` in server-sent-event text, parsed.
fn first_sse_frame(text: &[u8]) -> Option<Value> {
    let text = std::str::from_utf8(text).ok()?;
    let mut from = 0;
    while let Some(end) = text[from..].find("\n\n") {
        let block = &text[from..from + end];
        from += end + 2;
        if block.lines().any(|l| l == "event: frame") {
            let data: String = block
                .lines()
                .filter_map(|l| l.strip_prefix("data:"))
                .map(|d| d.strip_prefix(' ').unwrap_or(d))
                .collect::<Vec<_>>()
                .join("\n");
            return serde_json::from_str(&data).ok();
        }
    }
    None
}

// ---------------------------------------------------------------------------------------
// Open dashboards

/// What one open page saw.
#[derive(Default)]
struct Seen {
    frames: u64,
    events: u64,
    /// Benchmark posts (their text) and when their event arrived.
    arrivals: HashMap<String, Instant>,
    error: Option<String>,
}

/// An open page: its first load, then its stream read continuously.
struct Page {
    seen: Arc<Mutex<Seen>>,
    task: tokio::task::JoinHandle<()>,
    load: Arc<Mutex<Option<Load>>>,
}

fn open_page(admin: &Client, http: &reqwest::Client) -> Page {
    let seen = Arc::new(Mutex::new(Seen::default()));
    let load = Arc::new(Mutex::new(None));
    let (admin, http) = (admin.clone(), http.clone());
    let (s, l) = (seen.clone(), load.clone());
    let task = tokio::spawn(async move {
        let run = async {
            let first = first_load(&admin, &http).await?;
            *l.lock().expect("load lock") = Some(first);
            let events = admin.stats().await?.events as i64;
            let mut stream = admin.stream(Some((events - 40).max(0))).await?;
            while let Some(frame) = stream.next().await? {
                let now = Instant::now();
                let mut seen = s.lock().expect("seen lock");
                seen.frames += 1;
                seen.events += frame.events.len() as u64;
                for e in &frame.events {
                    if e.kind != agensh_domain::event::kinds::BOARD_RECORD {
                        continue;
                    }
                    if let Some(t) = e.payload["text"].as_str() {
                        if t.starts_with(POST_PREFIX) {
                            seen.arrivals.entry(t.to_string()).or_insert(now);
                        }
                    }
                }
            }
            bail!("the hub ended the stream")
        };
        let r: Result<()> = run.await;
        if let Err(e) = r {
            s.lock().expect("seen lock").error = Some(format!("{e:#}"));
        }
    });
    Page { seen, task, load }
}

impl Page {
    fn check(&self) -> Result<()> {
        match &self.seen.lock().expect("seen lock").error {
            Some(e) => bail!("an open dashboard failed: {e}"),
            None => Ok(()),
        }
    }

    /// Closes the page (its connection with it).
    fn close(&self) {
        self.task.abort();
    }
}

// ---------------------------------------------------------------------------------------
// The benchmark

pub async fn run(a: Args) -> Result<()> {
    if a.workers == 0 || a.dashboards == 0 || a.pairs == 0 || a.loads == 0 {
        bail!("--workers, --dashboards, --pairs and --loads must be at least 1");
    }
    if a.post_rate.is_nan() || a.post_rate <= 0.0 || a.turn_secs.is_nan() || a.turn_secs <= 0.0 {
        bail!("--post-rate and --turn-secs must be positive");
    }
    let agensh = crate::stats::agensh_binary(a.common.agensh.as_deref())?;
    agensh_process::group::become_subreaper()
        .context("cannot make the benchmark the reaper of its orphaned processes")?;
    let Limit { soft: files, .. } = agensh_process::raise_open_file_limit()
        .or_else(|_| resources::open_file_limit())
        .unwrap_or(Limit { soft: 0, hard: 0 });
    let needed = a.workers as u64 * 8 + 256;
    if files < needed {
        bail!(
            "this machine allows {files} open files per process; a node with {} workers needs about {needed} — raise the limit or pass fewer --workers",
            a.workers
        );
    }
    let dir = BenchDir::new("agensh-bench-dashboard-", a.dir.as_deref(), a.keep)?;
    let scenario = dir.path.join(".agensh/bench-scenario.toml");
    let outcome = until_signal(async {
        init_org(
            &agensh,
            &dir.path,
            "agensh-bench dashboard: busy workers",
            &scenario,
            a.workers,
            |c| {
                // The load is the scenario's, not what the limits let through.
                c.limits = agensh_domain::limits::LimitsConfig {
                    requests_per_sec: 0.0,
                    burst: 0,
                    records_per_hour: 0,
                    record_bytes_per_hour: 0,
                    messages_per_hour: 0,
                    ..Default::default()
                };
            },
        )?;
        // Turns for two hours at least.
        let turn_ms = (a.turn_secs * 1000.0) as u64;
        let turns = (7_200_000 / turn_ms.max(1)).clamp(16, 5_000) as usize;
        std::fs::write(&scenario, self::scenario(turn_ms, turns))?;
        measure(&a, &agensh, &dir.path, &scenario).await
    })
    .await;
    dir.finish();
    print_result(a.common.json, &outcome?, print_table)?;
    Ok(())
}

/// Waits until every worker of `ids` has reported busy or idle at least once.
async fn wait_reported(
    admin: &Client,
    node: &mut Proc,
    ids: &[String],
    dir: &Path,
    timeout: Duration,
) -> Result<Duration> {
    let started = Instant::now();
    let progress = bar(ids.len() as u64, "starting");
    let wanted: HashSet<&str> = ids.iter().map(String::as_str).collect();
    let mut reported: HashSet<String> = HashSet::new();
    let log = dir.join(format!(".agensh/bench-node-{}.log", ids.len()));
    loop {
        for w in admin.workers().await? {
            if !wanted.contains(w.id.as_str()) {
                continue;
            }
            match w.status {
                WorkerStatus::Busy | WorkerStatus::Idle => {
                    reported.insert(w.id);
                }
                WorkerStatus::Dead => bail!(
                    "worker {} died while starting. Node log:\n{}",
                    w.id,
                    tail(&log, 20)
                ),
                _ => {}
            }
        }
        progress.set_position(reported.len() as u64);
        if reported.len() == ids.len() {
            progress.finish();
            return Ok(started.elapsed());
        }
        if !node.running() {
            bail!(
                "the node exited while its workers were starting. Its log:\n{}",
                tail(&log, 30)
            );
        }
        if started.elapsed() > timeout {
            bail!(
                "only {} of {} workers reported within {} s",
                reported.len(),
                ids.len(),
                timeout.as_secs()
            );
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// One CPU window.
struct Window {
    with_pages: bool,
    hub_pct: f64,
    node_pct: f64,
    machine_pct: f64,
    records_per_sec: f64,
    hub_rss: u64,
    frames_per_page: f64,
}

async fn window(
    admin: &Client,
    http: &reqwest::Client,
    hub: u32,
    node: u32,
    secs: u64,
    pages: usize,
    progress: &indicatif::ProgressBar,
) -> Result<Window> {
    let cores = std::thread::available_parallelism().map_or(1, |c| c.get()) as f64;
    let records0 = admin.stats().await?.records;
    let (busy0, total0) = machine_jiffies();
    let (hub0, node0) = (cpu_secs(&hub.to_string()), cpu_secs(&node.to_string()));
    let t0 = Instant::now();
    let open: Vec<Page> = (0..pages).map(|_| open_page(admin, http)).collect();
    for _ in 0..secs {
        tokio::time::sleep(Duration::from_secs(1)).await;
        progress.inc(1);
        for p in &open {
            p.check()?;
        }
    }
    let wall = t0.elapsed().as_secs_f64();
    let (hub1, node1) = (cpu_secs(&hub.to_string()), cpu_secs(&node.to_string()));
    let (busy1, total1) = machine_jiffies();
    let (hub_rss, _) = memory_of(hub);
    let frames: u64 = open
        .iter()
        .map(|p| p.seen.lock().expect("seen lock").frames)
        .sum();
    for p in &open {
        if p.load.lock().expect("load lock").is_none() {
            bail!("an open dashboard's first load did not finish within the window");
        }
        p.close();
    }
    let records1 = admin.stats().await?.records;
    // Let the hub see the pages go (its feed sleeps once no page listens).
    tokio::time::sleep(Duration::from_secs(1)).await;
    Ok(Window {
        with_pages: pages > 0,
        hub_pct: (hub1 - hub0) / wall * 100.0,
        node_pct: (node1 - node0) / wall * 100.0,
        machine_pct: (busy1 - busy0) as f64 / (total1 - total0).max(1) as f64 * cores * 100.0,
        records_per_sec: (records1 - records0) as f64 / wall,
        hub_rss,
        frames_per_page: frames as f64 / pages.max(1) as f64 / wall,
    })
}

fn mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len().max(1) as f64
}

fn spread(v: &[f64]) -> (f64, f64) {
    let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    (pct(lo), pct(hi))
}

async fn measure(a: &Args, agensh: &Path, dir: &Path, scenario: &Path) -> Result<Value> {
    let n = a.workers;
    let loadavg = || {
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    };
    let load_before = loadavg();
    let hub = start_hub(agensh, dir, "127.0.0.1:0")?;
    let admin = Client::new(&hub.url, &hub.admin_token);
    let mut ids: Vec<String> = admin
        .add_workers(n)
        .await?
        .into_iter()
        .map(|w| w.id)
        .collect();
    ids.sort();
    let mut node = Proc::spawn(
        &mut node_command(agensh, dir, scenario, &ids)?,
        "agensh node",
    )?;
    let start_timeout = Duration::from_secs(a.start_timeout_secs);
    let activation = wait_reported(&admin, &mut node, &ids, dir, start_timeout).await?;
    let agents = node.note_child_groups().len();
    let warm = bar(a.warmup_secs, "warm-up");
    for _ in 0..a.warmup_secs {
        tokio::time::sleep(Duration::from_secs(1)).await;
        warm.inc(1);
    }
    warm.finish();
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()?;

    // 1. First loads, one after the other, no other page open.
    let progress = bar(a.loads as u64, "loads");
    let mut loads = Vec::new();
    for _ in 0..a.loads {
        loads.push(first_load(&admin, &http).await?);
        progress.inc(1);
        // Let the hub see the page go.
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    progress.finish();

    // 2. Hub CPU: baseline and with pages, alternating.
    let progress = bar(a.window_secs * a.pairs as u64 * 2, "CPU");
    let mut windows = Vec::new();
    for _ in 0..a.pairs {
        for pages in [0, a.dashboards] {
            let w = window(
                &admin,
                &http,
                hub.proc.pid,
                node.pid,
                a.window_secs,
                pages,
                &progress,
            )
            .await?;
            windows.push(w);
            if !node.running() {
                bail!("the node exited during the measurement");
            }
        }
    }
    progress.finish();

    // 3. Post to page.
    let pages: Vec<Page> = (0..a.dashboards)
        .map(|_| open_page(&admin, &http))
        .collect();
    let deadline = Instant::now() + Duration::from_secs(60);
    while pages
        .iter()
        .any(|p| p.seen.lock().expect("seen lock").frames == 0)
    {
        for p in &pages {
            p.check()?;
        }
        if Instant::now() > deadline {
            bail!("the dashboards did not get their first frames within 60 s");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let poster = admin.clone().acting_as(Some(ids[0].clone()));
    let posts = ((a.window_secs as f64) * a.post_rate).round().max(1.0) as usize;
    let nonce = format!(
        "{:x}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos()
            % (1 << 48)
    );
    let sent: Arc<Mutex<HashMap<String, Instant>>> = Arc::new(Mutex::new(HashMap::new()));
    // When the hub acknowledged each post (durable): what part of the way is the post's own.
    let acked: Arc<Mutex<HashMap<String, Instant>>> = Arc::new(Mutex::new(HashMap::new()));
    let progress = bar(posts as u64, "posts");
    let store_before = store_timings(&hub.url).await;
    let t0 = Instant::now();
    let mut tasks = Vec::new();
    for k in 0..posts {
        let at = t0 + Duration::from_secs_f64(k as f64 / a.post_rate);
        tokio::time::sleep_until(at.into()).await;
        let text = format!("{POST_PREFIX} {k} {nonce}");
        let (poster, sent, acked) = (poster.clone(), sent.clone(), acked.clone());
        tasks.push(tokio::spawn(async move {
            sent.lock()
                .expect("sent lock")
                .insert(text.clone(), Instant::now());
            let r = poster
                .post_record(&NewRecord::new(RecordKind::Observed, text.clone()))
                .await;
            acked
                .lock()
                .expect("acked lock")
                .insert(text, Instant::now());
            r
        }));
        progress.inc(1);
    }
    for t in tasks {
        t.await??;
    }
    let window = t0.elapsed();
    let store_after = store_timings(&hub.url).await;
    progress.finish();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        for p in &pages {
            p.check()?;
        }
        let all = pages
            .iter()
            .all(|p| p.seen.lock().expect("seen lock").arrivals.len() >= posts);
        if all || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let sent = sent.lock().expect("sent lock").clone();
    let acked = acked.lock().expect("acked lock").clone();
    let mut latencies = Vec::new();
    let mut after_ack = Vec::new();
    let mut missing = 0;
    for p in &pages {
        let seen = p.seen.lock().expect("seen lock");
        for (text, at) in &sent {
            match seen.arrivals.get(text) {
                Some(arrived) => {
                    latencies.push(arrived.saturating_duration_since(*at));
                    if let Some(ack) = acked.get(text) {
                        after_ack.push(arrived.saturating_duration_since(*ack));
                    }
                }
                None => missing += 1,
            }
        }
    }
    let round_trips: Vec<Duration> = sent
        .iter()
        .filter_map(|(text, at)| acked.get(text).map(|a| a.saturating_duration_since(*at)))
        .collect();
    for p in &pages {
        p.close();
    }
    let (hub_rss_end, hub_hwm) = memory_of(hub.proc.pid);
    let load_after = loadavg();

    // Stop everything and check nothing is left.
    let (node_stop, left) = stop_all(node, hub).await;
    if missing > 0 {
        bail!(
            "{missing} of {} (post, page) pairs never arrived within 30 s of the last post",
            sent.len() * pages.len()
        );
    }

    let base: Vec<&Window> = windows.iter().filter(|w| !w.with_pages).collect();
    let with: Vec<&Window> = windows.iter().filter(|w| w.with_pages).collect();
    let hub_a: Vec<f64> = base.iter().map(|w| w.hub_pct).collect();
    let hub_b: Vec<f64> = with.iter().map(|w| w.hub_pct).collect();
    let pair_diffs: Vec<f64> = hub_b.iter().zip(&hub_a).map(|(b, a)| b - a).collect();
    let extra = mean(&hub_b) - mean(&hub_a);
    let load_times: Vec<Duration> = loads.iter().map(|l| l.total).collect();
    let page_times: Vec<Duration> = loads.iter().map(|l| l.page).collect();
    let down: Vec<u64> = loads.iter().map(|l| l.wire.down).collect();
    let up: Vec<u64> = loads.iter().map(|l| l.wire.up).collect();
    let frame_bytes: Vec<u64> = loads.iter().map(|l| l.first_frame_bytes).collect();
    let max_u = |v: &[u64]| v.iter().copied().max().unwrap_or(0);
    let dms = |v: &[Duration], p: f64| ms(percentile(v, p));
    let windows_json: Vec<Value> = windows
        .iter()
        .map(|w| {
            json!({
                "dashboards": if w.with_pages { a.dashboards } else { 0 },
                "hub_cpu_pct": pct(w.hub_pct),
                "node_cpu_pct": pct(w.node_pct),
                "machine_cpu_pct": pct(w.machine_pct),
                "records_per_sec": pct(w.records_per_sec),
                "hub_rss_mib": mib(w.hub_rss),
                "frames_per_page_per_sec": pct(w.frames_per_page),
            })
        })
        .collect();
    let rss_a = mean(&base.iter().map(|w| w.hub_rss as f64).collect::<Vec<_>>()) as u64;
    let rss_b = mean(&with.iter().map(|w| w.hub_rss as f64).collect::<Vec<_>>()) as u64;
    Ok(json!({
        "workers": n,
        "agents": agents,
        "turn_secs": a.turn_secs,
        "activation_secs": pct(activation.as_secs_f64()),
        "loadavg_before": load_before,
        "loadavg_after": load_after,
        "cores": std::thread::available_parallelism().map_or(1, |c| c.get()),
        "hub_cpu": {
            "window_secs": a.window_secs,
            "dashboards": a.dashboards,
            "baseline_pct": pct(mean(&hub_a)),
            "baseline_range_pct": spread(&hub_a),
            "with_dashboards_pct": pct(mean(&hub_b)),
            "with_dashboards_range_pct": spread(&hub_b),
            "extra_pct_of_one_core": pct(extra),
            "extra_per_pair_range_pct": spread(&pair_diffs),
            "node_baseline_pct": pct(mean(&base.iter().map(|w| w.node_pct).collect::<Vec<_>>())),
            "machine_baseline_pct": pct(mean(&base.iter().map(|w| w.machine_pct).collect::<Vec<_>>())),
            "machine_with_dashboards_pct": pct(mean(&with.iter().map(|w| w.machine_pct).collect::<Vec<_>>())),
            "records_per_sec": pct(mean(&windows.iter().map(|w| w.records_per_sec).collect::<Vec<_>>())),
            "frames_per_page_per_sec": pct(mean(&with.iter().map(|w| w.frames_per_page).collect::<Vec<_>>())),
            "windows": windows_json,
            "target_extra_pct": TARGET_EXTRA_CPU_PCT,
        },
        "hub_memory": {
            "rss_baseline_mib": mib(rss_a),
            "rss_with_dashboards_mib": mib(rss_b),
            "rss_end_mib": mib(hub_rss_end),
            "hwm_mib": mib(hub_hwm),
        },
        "first_load": {
            "loads": loads.len(),
            "p50_ms": dms(&load_times, 50.0),
            "p99_ms": dms(&load_times, 99.0),
            "max_ms": dms(&load_times, 100.0),
            "page_and_assets_p50_ms": dms(&page_times, 50.0),
            "requests": loads[0].wire.requests,
            "down_kib_max": kib(max_u(&down)),
            "up_kib_max": kib(max_u(&up)),
            "first_frame_kib_max": kib(max_u(&frame_bytes)),
            "first_frame_rows": loads[0].rows,
            "compressed": loads.iter().any(|l| l.wire.compressed),
            "target_ms": TARGET_LOAD_MS,
            "target_kib": TARGET_LOAD_KIB,
        },
        "post_to_page": {
            "posts": sent.len(),
            "rate_per_sec": a.post_rate,
            "pages": pages.len(),
            "arrived": latencies.len(),
            "expected": sent.len() * pages.len(),
            "p50_ms": dms(&latencies, 50.0),
            "p99_ms": dms(&latencies, 99.0),
            "max_ms": dms(&latencies, 100.0),
            "post_ack_p50_ms": dms(&round_trips, 50.0),
            "post_ack_p99_ms": dms(&round_trips, 99.0),
            "ack_to_page_p50_ms": dms(&after_ack, 50.0),
            "ack_to_page_p99_ms": dms(&after_ack, 99.0),
            "target_p99_ms": TARGET_POST_P99_MS,
        },
        "store_writes": store_window(&store_before, &store_after, window),
        "cleanup": {
            "node_exit_on_sigterm_secs": node_stop.map(|d| (d.as_secs_f64() * 100.0).round() / 100.0),
            "processes_left": left.len(),
        },
    }))
}

fn print_table(r: &Value) {
    let mark = |ok: bool| if ok { "meets target" } else { "MISSES target" };
    let f = |v: &Value| v.as_f64().unwrap_or(f64::MAX);
    let c = &r["hub_cpu"];
    let l = &r["first_load"];
    let p = &r["post_to_page"];
    let m = &r["hub_memory"];
    println!(
        "dashboard benchmark: {} scripted workers ({} agent processes) posting a record every {} s turn, on {} cores; all reported after {} s",
        r["workers"], r["agents"], r["turn_secs"], r["cores"], r["activation_secs"]
    );
    println!(
        "machine        load average before the start {}, at the end {}",
        r["loadavg_before"].as_str().unwrap_or("?"),
        r["loadavg_after"].as_str().unwrap_or("?")
    );
    println!(
        "hub CPU        baseline {} % of one core (windows {}–{}), with {} dashboards {} % ({}–{}), {} s windows",
        c["baseline_pct"],
        c["baseline_range_pct"][0],
        c["baseline_range_pct"][1],
        c["dashboards"],
        c["with_dashboards_pct"],
        c["with_dashboards_range_pct"][0],
        c["with_dashboards_range_pct"][1],
        c["window_secs"]
    );
    println!(
        "    extra       {} % of one core (per pair {}–{})   target <= {} %: {}",
        c["extra_pct_of_one_core"],
        c["extra_per_pair_range_pct"][0],
        c["extra_per_pair_range_pct"][1],
        c["target_extra_pct"],
        mark(f(&c["extra_pct_of_one_core"]) <= TARGET_EXTRA_CPU_PCT)
    );
    println!(
        "    load        {} records/s; node {} % of a core; machine {} % busy (of {} cores x 100 %) without pages, {} % with; {} frames/s per page",
        c["records_per_sec"],
        c["node_baseline_pct"],
        c["machine_baseline_pct"],
        r["cores"],
        c["machine_with_dashboards_pct"],
        c["frames_per_page_per_sec"]
    );
    for w in c["windows"].as_array().into_iter().flatten() {
        println!(
            "      {} pages: hub {} %, node {} %, machine {} %, {} records/s, hub RSS {} MiB",
            w["dashboards"],
            w["hub_cpu_pct"],
            w["node_cpu_pct"],
            w["machine_cpu_pct"],
            w["records_per_sec"],
            w["hub_rss_mib"]
        );
    }
    println!(
        "hub memory     RSS {} MiB without pages, {} MiB with, peak {} MiB",
        m["rss_baseline_mib"], m["rss_with_dashboards_mib"], m["hwm_mib"]
    );
    println!(
        "first load     p50 {} ms, p99 {} ms, max {} ms over {} loads (page and assets p50 {} ms)   target <= {} ms: {}",
        l["p50_ms"],
        l["p99_ms"],
        l["max_ms"],
        l["loads"],
        l["page_and_assets_p50_ms"],
        l["target_ms"],
        mark(f(&l["p99_ms"]) <= TARGET_LOAD_MS)
    );
    println!(
        "    bytes       {} KiB down (first frame {} KiB, {} worker rows), {} KiB up, {} requests; compressed: {}   target <= {} KiB: {}",
        l["down_kib_max"],
        l["first_frame_kib_max"],
        l["first_frame_rows"],
        l["up_kib_max"],
        l["requests"],
        if l["compressed"].as_bool().unwrap_or(false) { "yes" } else { "no" },
        l["target_kib"],
        mark(f(&l["down_kib_max"]) + f(&l["up_kib_max"]) <= TARGET_LOAD_KIB)
    );
    println!(
        "post to page   p50 {} ms, p99 {} ms, max {} ms; {} of {} (post, page) arrived ({} posts at {}/s, {} pages)   target p99 <= {} ms: {}",
        p["p50_ms"],
        p["p99_ms"],
        p["max_ms"],
        p["arrived"],
        p["expected"],
        p["posts"],
        p["rate_per_sec"],
        p["pages"],
        p["target_p99_ms"],
        mark(f(&p["p99_ms"]) <= TARGET_POST_P99_MS)
    );
    println!(
        "    parts       the post's own round trip (sent to acknowledged, durable) p50 {} ms, p99 {} ms; acknowledged to page p50 {} ms, p99 {} ms",
        p["post_ack_p50_ms"],
        p["post_ack_p99_ms"],
        p["ack_to_page_p50_ms"],
        p["ack_to_page_p99_ms"]
    );
    let w = &r["store_writes"];
    if !w.is_null() {
        println!(
            "    the store  while posting: {} writes/s in {} groups/s; waiting for the writer p50 ≤ {} ms, p99 ≤ {} ms; a group p50 ≤ {} ms, p99 ≤ {} ms; its commit p50 ≤ {} ms, p99 ≤ {} ms; answering and publishing after it p99 ≤ {} ms (bucket bounds)",
            w["writes_per_sec"],
            w["groups_per_sec"],
            w["wait_p50_ms"],
            w["wait_p99_ms"],
            w["group_p50_ms"],
            w["group_p99_ms"],
            w["commit_p50_ms"],
            w["commit_p99_ms"],
            w["publish_p99_ms"]
        );
        if !w["writer_cpu_pct"].is_null() {
            println!(
                "    the writer thread  on a CPU {} % of the time, ready but waiting for one {} %",
                w["writer_cpu_pct"], w["writer_run_queue_pct"]
            );
        }
    }
    println!(
        "cleanup        node exited {} after SIGTERM; processes left: {}",
        r["cleanup"]["node_exit_on_sigterm_secs"]
            .as_f64()
            .map_or("only when killed".to_string(), |s| format!("in {s} s")),
        r["cleanup"]["processes_left"]
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_percentile_is_read_from_what_was_counted_between_two_readings() {
        let inf = f64::INFINITY;
        // Before: 100 writes, all ≤ 1 ms. After: 100 more, 98 ≤ 5 ms, 2 ≤ 500 ms.
        let before = [(1.0, 100), (5.0, 100), (500.0, 100), (inf, 100)];
        let after = [(1.0, 100), (5.0, 198), (500.0, 200), (inf, 200)];
        assert_eq!(bucket_percentile(&before, &after, 50.0), Some(5.0));
        assert_eq!(bucket_percentile(&before, &after, 98.0), Some(5.0));
        assert_eq!(bucket_percentile(&before, &after, 99.0), Some(500.0));
        assert_eq!(bucket_percentile(&after, &after, 99.0), None);
    }

    #[test]
    fn the_scenario_parses_and_repeats() {
        let s = scenario(1500, 3);
        let v: toml::Value = toml::from_str(&s).expect("TOML");
        let steps = v["step"].as_array().expect("steps");
        assert_eq!(steps.len(), 9);
        assert_eq!(steps[0]["action"].as_str(), Some("board_write"));
        assert_eq!(steps[1]["ms"].as_integer(), Some(1500));
        assert_eq!(steps[2]["action"].as_str(), Some("end_turn"));
    }

    #[test]
    fn the_first_frame_is_found_in_event_stream_text() {
        let text =
            b"retry: 1000\n\nid: 7\nevent: frame\ndata: {\"cursor\":7,\"workers\":[]}\n\nid: 8";
        let f = first_sse_frame(text).expect("a frame");
        assert_eq!(f["cursor"], 7);
        assert!(first_sse_frame(b"retry: 1000\n\nid: 7\nevent: frame\ndata: {").is_none());
    }
}

/// The hub's store timings from `/metrics`: each histogram's cumulative bucket counts by
/// upper bound (ms; `f64::INFINITY` last), and the write and group counters.
#[derive(Debug, Default, Clone)]
struct StoreTimings {
    histograms: HashMap<String, Vec<(f64, u64)>>,
    writes: u64,
    groups: u64,
    /// The writer thread's seconds on a CPU and waiting for one (SQLite's writer).
    writer_cpu: Option<f64>,
    writer_run_queue: Option<f64>,
}

async fn store_timings(hub: &str) -> StoreTimings {
    let text = match reqwest::get(format!("{hub}/metrics")).await {
        Ok(r) => r.text().await.unwrap_or_default(),
        Err(_) => String::new(),
    };
    let mut t = StoreTimings::default();
    for line in text.lines() {
        let Some((key, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let Ok(v) = value.parse::<f64>() else {
            continue;
        };
        if let Some((name, le)) = key
            .strip_suffix("\"}")
            .and_then(|k| k.split_once("_bucket{le=\""))
        {
            let le = if le == "+Inf" {
                f64::INFINITY
            } else {
                le.parse::<f64>().unwrap_or(f64::INFINITY) * 1000.0
            };
            t.histograms
                .entry(name.to_string())
                .or_default()
                .push((le, v as u64));
        } else if key == "agensh_store_writes_total" {
            t.writes = v as u64;
        } else if key == "agensh_store_write_groups_total" {
            t.groups = v as u64;
        } else if key == "agensh_store_writer_cpu_seconds_total" {
            t.writer_cpu = Some(v);
        } else if key == "agensh_store_writer_run_queue_seconds_total" {
            t.writer_run_queue = Some(v);
        }
    }
    t
}

/// The upper bound of the bucket that holds the `q`th percentile of what was counted
/// between two readings (`None` when nothing was).
fn bucket_percentile(before: &[(f64, u64)], after: &[(f64, u64)], q: f64) -> Option<f64> {
    let counts: Vec<(f64, u64)> = after
        .iter()
        .map(|(le, n)| {
            let was = before.iter().find(|(b, _)| b == le).map_or(0, |(_, m)| *m);
            (*le, n.saturating_sub(was))
        })
        .collect();
    let total = counts.last()?.1;
    if total == 0 {
        return None;
    }
    let rank = (q / 100.0 * total as f64).ceil().max(1.0) as u64;
    counts.iter().find(|(_, n)| *n >= rank).map(|(le, _)| *le)
}

/// What the store did while the records were posted (`null` when the hub shows no store
/// timings).
fn store_window(before: &StoreTimings, after: &StoreTimings, window: Duration) -> Value {
    if after.histograms.is_empty() {
        return Value::Null;
    }
    let secs = window.as_secs_f64().max(1e-9);
    let pct = |name: &str, q: f64| {
        let empty = Vec::new();
        let b = before.histograms.get(name).unwrap_or(&empty);
        let a = after.histograms.get(name).unwrap_or(&empty);
        bucket_percentile(b, a, q).map_or(Value::Null, |v| {
            if v.is_finite() {
                json!(v)
            } else {
                json!("more")
            }
        })
    };
    // Shares of the window: the writer thread on a CPU, and ready but waiting for one.
    let share = |b: Option<f64>, a: Option<f64>| match (b, a) {
        (Some(b), Some(a)) => json!(((a - b) / secs * 1000.0).round() / 10.0),
        _ => Value::Null,
    };
    json!({
        "writer_cpu_pct": share(before.writer_cpu, after.writer_cpu),
        "writer_run_queue_pct": share(before.writer_run_queue, after.writer_run_queue),
        "writes_per_sec": ((after.writes - before.writes) as f64 / secs).round(),
        "groups_per_sec": ((after.groups - before.groups) as f64 / secs).round(),
        "wait_p50_ms": pct("agensh_store_write_wait_seconds", 50.0),
        "wait_p99_ms": pct("agensh_store_write_wait_seconds", 99.0),
        "group_p50_ms": pct("agensh_store_write_group_seconds", 50.0),
        "group_p99_ms": pct("agensh_store_write_group_seconds", 99.0),
        "commit_p50_ms": pct("agensh_store_commit_seconds", 50.0),
        "commit_p99_ms": pct("agensh_store_commit_seconds", 99.0),
        "publish_p99_ms": pct("agensh_store_publish_seconds", 99.0),
    })
}
