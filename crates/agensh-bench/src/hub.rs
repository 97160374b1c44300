//! The hub benchmark: a real `agensh hub` process with 1,024 workers registered and a
//! history of 1,000,000 records, measured from a separate client process (this one).
//!
//! 1. single-record appends per second, each durable before it is acknowledged;
//! 2. one channel post waking every worker's long-poll: time until the last returns;
//! 3. grep latency over the whole history;
//! 4. the hub's resident memory.
//!
//! On the SQLite store by default; `--store postgres://…` (an empty database) or
//! `--postgres` (a throwaway server started here, `pg.rs`) run it on PostgreSQL.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use agensh_client::Client;
use agensh_domain::config::Config;
use agensh_domain::message::NewMessage;
use agensh_domain::record::{NewRecord, RecordKind};
use agensh_store::Store;
use anyhow::{anyhow, bail, Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::json;

use crate::stats::{ms, percentile};

#[derive(clap::Args)]
pub struct Args {
    /// Workers registered (and long-polls in the wake benchmark).
    #[arg(long, default_value_t = 1024)]
    workers: usize,
    /// Records in the history grep searches.
    #[arg(long, default_value_t = 1_000_000)]
    records: usize,
    /// Seconds of the append benchmark.
    #[arg(long, default_value_t = 10)]
    append_secs: u64,
    /// Concurrent writers in the append benchmark (each a different worker).
    #[arg(long, default_value_t = 64)]
    writers: usize,
    /// Channel posts in the wake benchmark.
    #[arg(long, default_value_t = 30)]
    wake_rounds: usize,
    /// Times each grep query runs.
    #[arg(long, default_value_t = 40)]
    grep_rounds: usize,
    /// Organization directory to use; a seeded one is reused (default: a temporary one).
    #[arg(long)]
    dir: Option<PathBuf>,
    #[command(flatten)]
    common: crate::stats::Common,
    /// Run the hub on this PostgreSQL database (postgres://USER:PASSWORD@HOST:PORT/DB,
    /// empty: the benchmark seeds it) instead of the SQLite file.
    #[arg(long, conflicts_with = "postgres")]
    store: Option<String>,
    /// Run the hub on a throwaway PostgreSQL server started for the benchmark (initdb from
    /// /usr/lib/postgresql/*/bin or AGENSH_PG_BIN, a temporary directory, a free 127.0.0.1
    /// port, fsync on), stopped and removed at the end.
    #[arg(long)]
    postgres: bool,
    /// A setting for the throwaway server of --postgres, NAME=VALUE (repeatable; e.g.
    /// max_wal_size=8GB): its defaults are PostgreSQL's but for fsync and synchronous_commit,
    /// which stay on.
    #[arg(long = "pg-setting", value_name = "NAME=VALUE", requires = "postgres")]
    pg_settings: Vec<String>,
}

/// A deterministic generator, so every run searches the same history.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    /// A Zipf-like rank in 0..n: small ranks are much more common.
    fn zipf(&mut self, n: usize) -> usize {
        let u = (self.next() % 1_000_000) as f64 / 1_000_000.0;
        ((n as f64).powf(u) as usize).saturating_sub(1).min(n - 1)
    }
}

const SYLLABLES: [&str; 24] = [
    "par", "lex", "tok", "en", "ser", "ci", "mod", "ule", "test", "buf", "fer", "io", "str", "ing",
    "map", "vec", "err", "or", "cal", "cu", "la", "tor", "ast", "node",
];

/// The benchmark's vocabulary: 5,000 distinct pseudo-words.
pub(crate) fn vocabulary() -> Vec<String> {
    let mut words = Vec::with_capacity(5_000);
    let mut seen = std::collections::HashSet::new();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    while words.len() < 5_000 {
        let n = 2 + rng.below(3);
        let w: String = (0..n)
            .map(|_| SYLLABLES[rng.below(SYLLABLES.len())])
            .collect();
        if seen.insert(w.clone()) {
            words.push(w);
        }
    }
    words
}

/// Up to `words` words, cut to fit the 100-character record limit.
fn sentence(rng: &mut Rng, vocab: &[String], words: usize) -> String {
    let mut s = String::new();
    for _ in 0..words {
        let w = &vocab[rng.zipf(vocab.len())];
        if s.len() + w.len() + 1 > 100 {
            break;
        }
        if !s.is_empty() {
            s.push(' ');
        }
        s.push_str(w);
    }
    s
}

/// A progress bar for `len` steps of `what`.
pub fn bar(len: u64, what: &str) -> ProgressBar {
    let b = ProgressBar::new(len);
    b.set_style(
        ProgressStyle::with_template("{msg:>10} [{bar:40}] {pos}/{len} {per_sec} eta {eta}")
            .expect("template")
            .progress_chars("=> "),
    );
    b.set_message(what.to_string());
    b
}

/// Fills the store with `records` records by `workers` authors, through the store API.
pub(crate) async fn seed(
    store: Arc<dyn Store>,
    workers: &[String],
    records: usize,
    vocab: Arc<Vec<String>>,
) -> Result<()> {
    const TASKS: usize = 256;
    let progress = bar(records as u64, "seeding");
    let mut tasks = Vec::new();
    for t in 0..TASKS {
        let store = store.clone();
        let workers = workers.to_vec();
        let vocab = vocab.clone();
        let progress = progress.clone();
        tasks.push(tokio::spawn(async move {
            let mut rng = Rng(0x1234_5678 + t as u64 * 7919);
            let mut i = t;
            while i < records {
                let kind = match rng.below(10) {
                    0..=4 => RecordKind::Fact,
                    5..=6 => RecordKind::Observed,
                    7 => RecordKind::Fail,
                    _ => RecordKind::PatchSummary,
                };
                let words = 5 + rng.below(8);
                let mut r = NewRecord::new(kind, sentence(&mut rng, &vocab, words));
                r.label = Some(format!("item-{}", rng.below(200)));
                let author = &workers[rng.below(workers.len())];
                store.append_record(author, r, now_ms(), 3600).await?;
                progress.inc(1);
                i += TASKS;
            }
            anyhow::Ok(())
        }));
    }
    for t in tasks {
        t.await??;
    }
    progress.finish();
    Ok(())
}

fn now_ms() -> i64 {
    agensh_domain::time::unix_ms(std::time::SystemTime::now())
}

pub(crate) struct HubProc {
    pub child: Child,
    pub url: String,
    pub admin_token: String,
}

impl Drop for HubProc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub(crate) fn start_hub(agensh: &Path, dir: &Path) -> Result<HubProc> {
    start_hub_on(agensh, dir, None)
}

/// [`start_hub`] on the store `store` names (a PostgreSQL URL) rather than its SQLite file.
fn start_hub_on(agensh: &Path, dir: &Path, store: Option<&str>) -> Result<HubProc> {
    let mut command = Command::new(agensh);
    command.args([
        "hub",
        dir.to_str().expect("utf-8 path"),
        "--listen",
        "127.0.0.1:0",
    ]);
    if let Some(url) = store {
        command.args(["--store", url]);
    }
    let child = command
        .env("AGENSH_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .with_context(|| format!("cannot start {}", agensh.display()))?;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok(info) = agensh_hub::read_hub_info(dir) {
            if info.pid == child.id() {
                return Ok(HubProc {
                    child,
                    url: info.url,
                    admin_token: info.admin_token,
                });
            }
        }
        if Instant::now() > deadline {
            bail!("the hub did not start within 60 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// (VmRSS, VmHWM) of a process, in bytes.
pub(crate) fn memory_of(pid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
            * 1024
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// The hub's `/metrics` page.
async fn metrics_text(http: &reqwest::Client, url: &str) -> Result<String> {
    Ok(http
        .get(format!("{url}/metrics"))
        .send()
        .await?
        .text()
        .await?)
}

pub(crate) async fn waiting_polls(http: &reqwest::Client, url: &str) -> Result<u64> {
    let text = metrics_text(http, url).await?;
    text.lines()
        .find(|l| l.starts_with("agensh_long_polls_waiting "))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| anyhow!("no agensh_long_polls_waiting in /metrics"))
}

/// The store's writer over the append benchmark, from the hub's `/metrics`: writes per
/// group, and the mean group and commit times in ms (when the store measures them).
async fn writer_figures(http: &reqwest::Client, url: &str) -> Result<serde_json::Value> {
    let text = metrics_text(http, url).await?;
    let value = |name: &str| -> Option<f64> {
        text.lines()
            .find(|l| l.split_whitespace().next() == Some(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
    };
    let per = |a: Option<f64>, b: Option<f64>, scale: f64| match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => Some((a / b * scale * 100.0).round() / 100.0),
        _ => None,
    };
    Ok(json!({
        "writes_per_group": per(value("agensh_store_writes_total"), value("agensh_store_write_groups_total"), 1.0),
        "group_mean_ms": per(value("agensh_store_write_group_seconds_sum"), value("agensh_store_write_group_seconds_count"), 1000.0),
        "commit_mean_ms": per(value("agensh_store_commit_seconds_sum"), value("agensh_store_commit_seconds_count"), 1000.0),
    }))
}

/// Leaves a freshly seeded PostgreSQL database as a long-running one is: vacuumed and
/// analyzed (as autovacuum would have done while the history grew), its WAL checkpointed.
/// Else the appends measured next share the machine with the seed's aftermath —
/// autovacuum's first pass over every new table and a checkpoint of all the seed's WAL —
/// and swing by half from run to run.
async fn settle(url: &str) -> Result<()> {
    eprintln!("settling the seeded database (VACUUM ANALYZE, CHECKPOINT)");
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .context("connecting to the seeded database")?;
    let conn = tokio::spawn(conn);
    client
        .batch_execute("VACUUM (ANALYZE)")
        .await
        .context("VACUUM ANALYZE after the seed")?;
    if let Err(e) = client.batch_execute("CHECKPOINT").await {
        // Only a superuser (or pg_checkpoint) may: the server checkpoints on its own.
        eprintln!("no CHECKPOINT after the seed ({e}); measuring anyway");
    }
    drop(client);
    let _ = conn.await;
    Ok(())
}

pub async fn run(a: Args) -> Result<()> {
    let agensh = crate::stats::agensh_binary(a.common.agensh.as_deref())?;
    let tmp = tempfile::tempdir()?;
    let dir = a.dir.clone().unwrap_or_else(|| tmp.path().join("org"));
    let vocab = Arc::new(vocabulary());

    let server = if a.postgres {
        eprintln!("starting a throwaway PostgreSQL server");
        Some(crate::pg::start(&a.pg_settings)?)
    } else {
        None
    };
    let store_url = match &server {
        Some(s) => Some(
            s.create_database("agensh_bench")
                .await
                .map_err(|e| anyhow!(e))?,
        ),
        None => a.store.clone(),
    };
    if let Some(url) = &store_url {
        if !agensh_store::is_postgres_url(url) {
            bail!("--store takes a PostgreSQL URL, postgres://USER:PASSWORD@HOST:PORT/DATABASE (without it the benchmark runs on the SQLite file)");
        }
    }
    let store_path = agensh_hub::state_dir(&dir).join(agensh_hub::STORE_FILE);
    let store_spec = store_url
        .clone()
        .unwrap_or_else(|| store_path.display().to_string());
    let marker = agensh_hub::state_dir(&dir).join("bench-seeded");
    let mut sizes = format!("{} {}", a.workers, a.records);
    if let Some(url) = &store_url {
        sizes.push_str(&format!(" {url}"));
    }
    let seeded = std::fs::read_to_string(&marker).ok() == Some(sizes.clone());
    let seed_time = if seeded {
        eprintln!("reusing the seeded organization in {}", dir.display());
        None
    } else {
        if dir.exists() {
            bail!("{} exists but was not seeded by this benchmark with these sizes — remove it or pick another --dir", dir.display());
        }
        std::fs::create_dir_all(agensh_hub::state_dir(&dir))?;
        // The hub's capacity is measured, not a worker's share of it: each writer here
        // sends far more than `[limits]` lets one worker send, so the limits are off.
        let mut config = Config::with_goal("benchmark");
        config.limits = agensh_domain::limits::LimitsConfig {
            requests_per_sec: 0.0,
            burst: 0,
            records_per_hour: 0,
            record_bytes_per_hour: 0,
            messages_per_hour: 0,
            ..Default::default()
        };
        std::fs::write(dir.join("agensh.toml"), config.template())?;
        let store = agensh_store::open_store(&store_spec).await?;
        let workers: Vec<String> = store
            .add_workers(a.workers, now_ms())
            .await?
            .into_iter()
            .map(|w| w.id)
            .collect();
        let started = Instant::now();
        seed(store.clone(), &workers, a.records, vocab.clone()).await?;
        drop(store);
        if let Some(url) = &store_url {
            settle(url).await?;
        }
        std::fs::write(&marker, sizes)?;
        Some(started.elapsed())
    };

    let hub = start_hub_on(&agensh, &dir, store_url.as_deref())?;
    let admin = Client::new(&hub.url, &hub.admin_token);
    let mut tokens = Vec::new();
    for w in admin.workers().await? {
        tokens.push(admin.worker_token(&w.id).await?.token);
    }
    let (rss_start, _) = memory_of(hub.child.id());

    // 1. Appends.
    let writers = a.writers.min(tokens.len());
    let done = Arc::new(AtomicU64::new(0));
    let deadline = Instant::now() + Duration::from_secs(a.append_secs);
    let progress = bar(a.append_secs, "appends");
    let ticker = {
        let progress = progress.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_secs(1)).await;
                progress.inc(1);
            }
        })
    };
    let mut tasks = Vec::new();
    for token in tokens.iter().take(writers) {
        let c = Client::new(&hub.url, token);
        let done = done.clone();
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::new();
            let mut i = 0u64;
            while Instant::now() < deadline {
                let t = Instant::now();
                c.post_record(&NewRecord::new(
                    RecordKind::Fact,
                    format!("bench append {i}"),
                ))
                .await?;
                lat.push(t.elapsed());
                done.fetch_add(1, Ordering::Relaxed);
                i += 1;
            }
            anyhow::Ok(lat)
        }));
    }
    let started = Instant::now();
    let mut append_lat = Vec::new();
    for t in tasks {
        append_lat.extend(t.await??);
    }
    let append_elapsed = started.elapsed();
    ticker.abort();
    progress.finish();
    let appends = done.load(Ordering::Relaxed);
    let appends_per_sec = appends as f64 / append_elapsed.as_secs_f64();

    let http = reqwest::Client::new();
    let writer = writer_figures(&http, &hub.url).await?;

    // 2. Wake: one channel post, every worker's long-poll waiting.
    let base = admin
        .notice("benchmark baseline", None, false, None)
        .await?;
    let mut after = base["event"]["seq"]
        .as_i64()
        .ok_or_else(|| anyhow!("notice without seq"))?;
    let clients: Vec<Client> = tokens.iter().map(|t| Client::new(&hub.url, t)).collect();
    let mut round_max = Vec::new();
    let mut each = Vec::new();
    let progress = bar(a.wake_rounds as u64, "wake");
    for round in 0..a.wake_rounds {
        let mut polls = Vec::new();
        for c in &clients {
            let c = c.clone();
            polls.push(tokio::spawn(async move {
                let events = c.events(after, 30).await?;
                anyhow::Ok((Instant::now(), events.first().map(|e| e.seq)))
            }));
        }
        let wait_deadline = Instant::now() + Duration::from_secs(60);
        while waiting_polls(&http, &hub.url).await? < clients.len() as u64 {
            if Instant::now() > wait_deadline {
                bail!("not every long-poll reached the hub within 60 s");
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let t0 = Instant::now();
        let m = NewMessage {
            to: "#general".into(),
            text: format!("wake round {round}"),
            thread: None,
        };
        let posted = admin.send_message(&m).await?;
        let mut latest = Duration::ZERO;
        for p in polls {
            let (at, seq) = p.await??;
            if seq.is_none() {
                bail!("a long-poll returned without the post");
            }
            let d = at.saturating_duration_since(t0);
            latest = latest.max(d);
            each.push(d);
        }
        round_max.push(latest);
        after = after.max(posted.seq).max(after);
        // The post's event seq is above every earlier one; ask for newer ones next round.
        after = clients[0]
            .events(after, 0)
            .await?
            .last()
            .map_or(after, |e| e.seq);
        progress.inc(1);
    }
    progress.finish();

    // 3. Grep over the whole history.
    let mut rng = Rng(42);
    let mut queries: Vec<String> = vec![
        vocab[0].clone(),
        vocab[10].clone(),
        vocab[300].clone(),
        vocab[4000].clone(),
        format!("{} {}", vocab[20], vocab[50]),
        format!("{} OR {}", vocab[500], vocab[900]),
        format!("{} NOT {}", vocab[30], vocab[1]),
        format!("\"{} {}\"", vocab[0], vocab[1]),
        format!("kind:FAIL {}", vocab[100]),
        format!("author:w0007 {}", vocab[5]),
        "label:item-42".to_string(),
        format!("label:item-7 kind:PATCH_SUMMARY"),
        format!("({} OR {}) AND NOT kind:OBSERVED", vocab[60], vocab[61]),
        format!("{}*", &vocab[3][..3]),
        "NOT kind:FACT".to_string(),
    ];
    queries.push(sentence(&mut rng, &vocab, 3));
    // Reported on their own: the five commonest words together, everything but the
    // commonest word, and a long prefix of the commonest word (FTS5 merges the lists of
    // every word it matches, here about half the history).
    let hard: Vec<String> = vec![
        vocab[..5].join(" "),
        format!("NOT {}", vocab[0]),
        format!("{}*", &vocab[0][..vocab[0].len().min(5)]),
    ];
    let progress = bar(
        ((queries.len() + hard.len()) * a.grep_rounds) as u64,
        "grep",
    );
    let (grep_all, per_query) = grep_latencies(&admin, &queries, a.grep_rounds, &progress).await?;
    let (grep_hard, per_hard) = grep_latencies(&admin, &hard, a.grep_rounds, &progress).await?;
    progress.finish();

    let (rss, hwm) = memory_of(hub.child.id());
    let mib = |b: u64| (b as f64 / 1_048_576.0 * 10.0).round() / 10.0;
    drop(hub);
    drop(server);
    let result = json!({
        "store": if store_url.is_some() { "postgresql" } else { "sqlite" },
        "workers": a.workers,
        "records": a.records,
        "seed_secs": seed_time.map(|d| d.as_secs_f64()),
        "appends": { "writers": writers, "count": appends, "per_sec": appends_per_sec.round(),
                     "p50_ms": ms(percentile(&append_lat, 50.0)), "p99_ms": ms(percentile(&append_lat, 99.0)),
                     "target_per_sec": 5000, "writer": writer },
        "wake": { "long_polls": clients.len(), "rounds": a.wake_rounds,
                  "last_returned_p50_ms": ms(percentile(&round_max, 50.0)),
                  "last_returned_p99_ms": ms(percentile(&round_max, 99.0)),
                  "each_p50_ms": ms(percentile(&each, 50.0)), "each_p99_ms": ms(percentile(&each, 99.0)),
                  "target_p99_ms": 50 },
        "grep": { "queries": per_query, "rounds": a.grep_rounds,
                  "p50_ms": ms(percentile(&grep_all, 50.0)), "p95_ms": ms(percentile(&grep_all, 95.0)),
                  "target_p95_ms": 20,
                  "hard_queries": per_hard,
                  "hard_p50_ms": ms(percentile(&grep_hard, 50.0)), "hard_p95_ms": ms(percentile(&grep_hard, 95.0)) },
        "memory": { "rss_after_start_mib": mib(rss_start), "rss_end_mib": mib(rss), "peak_mib": mib(hwm), "target_mib": 200 },
    });
    if a.common.json {
        println!("{}", serde_json::to_string_pretty(&result)?);
    } else {
        print_table(&result);
    }
    Ok(())
}

fn print_queries(list: &serde_json::Value) {
    for q in list.as_array().into_iter().flatten() {
        println!(
            "    {:<45} hits {:>3}  p50 {:>7} ms  p95 {:>7} ms",
            q["query"].as_str().unwrap_or(""),
            q["hits"],
            q["p50_ms"],
            q["p95_ms"]
        );
    }
}

/// Runs each query `rounds` times over HTTP; all latencies, and a summary per query.
async fn grep_latencies(
    admin: &Client,
    queries: &[String],
    rounds: usize,
    progress: &ProgressBar,
) -> Result<(Vec<Duration>, Vec<serde_json::Value>)> {
    let mut all = Vec::new();
    let mut per_query = Vec::new();
    for q in queries {
        let mut lat = Vec::new();
        let mut hits = 0;
        for _ in 0..rounds {
            let t = Instant::now();
            hits = admin.grep(q, Some(50), None).await?.len();
            lat.push(t.elapsed());
            progress.inc(1);
        }
        per_query.push(json!({ "query": q, "hits": hits, "p50_ms": ms(percentile(&lat, 50.0)), "p95_ms": ms(percentile(&lat, 95.0)) }));
        all.extend(lat);
    }
    Ok((all, per_query))
}

fn print_table(r: &serde_json::Value) {
    let mark = |ok: bool| if ok { "meets target" } else { "MISSES target" };
    let ap = &r["appends"];
    let wk = &r["wake"];
    let gp = &r["grep"];
    let mem = &r["memory"];
    println!(
        "hub benchmark ({}): {} workers, {} records",
        r["store"].as_str().unwrap_or("sqlite"),
        r["workers"],
        r["records"]
    );
    println!(
        "appends     {} /s ({} writers, p50 {} ms, p99 {} ms)   target >= 5000/s: {}",
        ap["per_sec"],
        ap["writers"],
        ap["p50_ms"],
        ap["p99_ms"],
        mark(ap["per_sec"].as_f64().unwrap_or(0.0) >= 5000.0)
    );
    let wr = &ap["writer"];
    println!(
        "  writer    {} writes per group, group {} ms, commit {} ms (means)",
        wr["writes_per_group"], wr["group_mean_ms"], wr["commit_mean_ms"]
    );
    println!(
        "wake all    p50 {} ms, p99 {} ms until the last of {} returns (each: p50 {} ms, p99 {} ms)   target p99 <= 50 ms: {}",
        wk["last_returned_p50_ms"], wk["last_returned_p99_ms"], wk["long_polls"], wk["each_p50_ms"], wk["each_p99_ms"],
        mark(wk["last_returned_p99_ms"].as_f64().unwrap_or(f64::MAX) <= 50.0)
    );
    println!(
        "grep        p50 {} ms, p95 {} ms over {} queries x {} rounds   target p95 <= 20 ms: {}",
        gp["p50_ms"],
        gp["p95_ms"],
        gp["queries"].as_array().map_or(0, |q| q.len()),
        gp["rounds"],
        mark(gp["p95_ms"].as_f64().unwrap_or(f64::MAX) <= 20.0)
    );
    print_queries(&gp["queries"]);
    println!(
        "grep (hard) p50 {} ms, p95 {} ms, reported apart from the target mix:",
        gp["hard_p50_ms"], gp["hard_p95_ms"]
    );
    print_queries(&gp["hard_queries"]);
    println!(
        "memory      RSS {} MiB after start, {} MiB at end, peak {} MiB   target <= 200 MiB: {}",
        mem["rss_after_start_mib"],
        mem["rss_end_mib"],
        mem["peak_mib"],
        mark(mem["peak_mib"].as_f64().unwrap_or(f64::MAX) <= 200.0)
    );
}
