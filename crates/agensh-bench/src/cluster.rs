//! The cluster benchmark (issue 17): N nodes × M scripted workers (16 × 64 by default),
//! each node a host of its own — a network namespace made by `agensh-netns`, with its own
//! state directory, reaching the hub only over the bridge — against one `agensh hub` in
//! another host, on SQLite (`--store sqlite`) or on a throwaway PostgreSQL server beside it
//! (`--store postgres`, fsync on). Measured:
//!
//! 1. **event-to-prompt latency** — `#general` posts, one at a time, sent from a probe host
//!    on the bridge; for every worker and post, the time from the event's creation at the
//!    hub to the prompt that carries it being handed to the agent (`started` −
//!    `created_at` in the worker's turn log), the method of `agensh-bench node`;
//! 2. **durable appends/s** — W writers in the probe host (each a worker, with its token)
//!    append board records for S seconds, each acknowledged only once durable, while every
//!    node runs (each record is an event every worker is woken by);
//! 3. **the hub's CPU** (per post, and cores used while appending) and **memory** (VmRSS,
//!    VmHWM at the end).
//!
//! Merge throughput (every worker merging a disjoint PR at once) is not measured here:
//! [`Cluster`] is what such a phase needs (the hub's URL and admin token, the hosts, each
//! node's directory and workers) — add it as a phase of [`measure`].
//!
//! The probe is this binary again (`agensh-bench cluster-probe`), run inside the probe
//! host. Everything it starts is in the namespaces, killed and removed at the end (and by
//! the testnet's watchdog if this process dies).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use agensh_client::Client;
use agensh_domain::message::NewMessage;
use agensh_domain::record::{NewRecord, RecordKind};
use agensh_netns::Testnet;
use agensh_testkit::pg::Postgres;
use anyhow::{anyhow, bail, Context, Result};
use serde_json::{json, Value};

use crate::node::{
    agensh_cmd, cpu_of, init_org, log_file, memory_of, print_result, tail, until_signal, BenchDir,
    Proc, TurnLogs,
};
use crate::stats::{ms, percentile};

const HUB_PORT: u16 = 7420;

#[derive(clap::Args)]
pub struct Args {
    /// Nodes, each in a host (network namespace) of its own.
    #[arg(long, default_value_t = 16)]
    nodes: usize,
    /// Scripted workers per node.
    #[arg(long, default_value_t = 64)]
    workers: usize,
    /// The hub's store: `sqlite` (its file) or `postgres` (a throwaway server in the hub's
    /// host, fsync on).
    #[arg(long, default_value = "sqlite")]
    store: String,
    /// `#general` posts whose dispatch to every worker is timed.
    #[arg(long, default_value_t = 10)]
    posts: usize,
    /// Posts before the timed ones, waited for but not counted (reported apart): the
    /// first after the launch meets the organization still settling.
    #[arg(long, default_value_t = 1)]
    warmup_posts: usize,
    /// Seconds to wait after every launch turn is logged, before the first post.
    #[arg(long, default_value_t = 0.0)]
    settle_secs: f64,
    /// Seconds between the last worker's turn for one post and the next post.
    #[arg(long, default_value_t = 2.0)]
    gap_secs: f64,
    /// Seconds of appends.
    #[arg(long, default_value_t = 10)]
    append_secs: u64,
    /// Concurrent writers of the appends (each a worker).
    #[arg(long, default_value_t = 64)]
    writers: usize,
    /// Longest wait for every worker to finish its launch turn, in seconds.
    #[arg(long, default_value_t = 1800)]
    start_timeout_secs: u64,
    /// Keep the directories (turn logs, node and hub logs) for inspection.
    #[arg(long)]
    keep: bool,
    #[command(flatten)]
    common: crate::stats::Common,
}

/// What the probe host does: one post (its `created_at` printed as JSON), or the appends.
#[derive(clap::Args)]
pub struct ProbeArgs {
    #[arg(long)]
    hub: String,
    #[arg(long)]
    admin_token: String,
    /// Post this text to `#general`.
    #[arg(long)]
    post: Option<String>,
    /// Append for this many seconds.
    #[arg(long, default_value_t = 0)]
    append_secs: u64,
    #[arg(long, default_value_t = 64)]
    writers: usize,
}

/// The probe: a post, or the appends, from inside the probe host; one JSON line out.
pub async fn probe(a: ProbeArgs) -> Result<()> {
    let admin = Client::new(&a.hub, &a.admin_token);
    if let Some(text) = a.post {
        // The long-polls the post will wake (a node's idle workers share polls).
        let polls = crate::hub::waiting_polls(&reqwest::Client::new(), &a.hub).await?;
        let m = admin
            .send_message(&NewMessage {
                to: "#general".into(),
                text,
                thread: None,
            })
            .await?;
        println!(
            "{}",
            json!({ "created_at": m.created_at, "polls_waiting": polls })
        );
        return Ok(());
    }
    let mut tokens = Vec::new();
    for w in admin.workers().await?.iter().take(a.writers) {
        tokens.push(admin.worker_token(&w.id).await?.token);
    }
    let done = Arc::new(AtomicU64::new(0));
    let deadline = Instant::now() + Duration::from_secs(a.append_secs);
    let started = Instant::now();
    let mut tasks = Vec::new();
    for token in tokens {
        let c = Client::new(&a.hub, &token);
        let done = done.clone();
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::new();
            let mut i = 0u64;
            while Instant::now() < deadline {
                let t = Instant::now();
                c.post_record(&NewRecord::new(
                    RecordKind::Fact,
                    format!("cluster append {i}"),
                ))
                .await?;
                lat.push(t.elapsed());
                done.fetch_add(1, Ordering::Relaxed);
                i += 1;
            }
            anyhow::Ok(lat)
        }));
    }
    let mut lat = Vec::new();
    for t in tasks {
        lat.extend(t.await??);
    }
    let secs = started.elapsed().as_secs_f64();
    let count = done.load(Ordering::Relaxed);
    println!(
        "{}",
        json!({
            "count": count,
            "secs": (secs * 100.0).round() / 100.0,
            "per_sec": (count as f64 / secs).round(),
            "p50_ms": ms(percentile(&lat, 50.0)),
            "p99_ms": ms(percentile(&lat, 99.0)),
        })
    );
    Ok(())
}

/// The running cluster: what every phase needs.
pub struct Cluster {
    pub net: Testnet,
    pub hub: Proc,
    pub hub_url: String,
    pub admin_token: String,
    /// Each node's process, directory and workers, in node order.
    pub nodes: Vec<(Proc, PathBuf, Vec<String>)>,
    /// This binary, to run the probe inside the probe host.
    pub me: PathBuf,
}

impl Cluster {
    /// `agensh-bench cluster-probe ARGS` inside the probe host; its one JSON line.
    fn probe(&self, args: &[&str]) -> Result<Value> {
        let out = self
            .net
            .command("probe", &self.me)
            .arg("cluster-probe")
            .args(["--hub", &self.hub_url, "--admin-token", &self.admin_token])
            .args(args)
            .stdin(Stdio::null())
            .output()
            .context("cannot run the probe")?;
        if !out.status.success() {
            bail!("the probe failed: {}", String::from_utf8_lossy(&out.stderr));
        }
        serde_json::from_slice(&out.stdout).with_context(|| {
            format!(
                "the probe's answer is not JSON: {}",
                String::from_utf8_lossy(&out.stdout)
            )
        })
    }
}

pub async fn run(a: Args) -> Result<()> {
    agensh_netns::check().map_err(|e| anyhow!("the cluster benchmark cannot run here: {e}"))?;
    if !matches!(a.store.as_str(), "sqlite" | "postgres") {
        bail!("--store is sqlite or postgres, not {:?}", a.store);
    }
    if a.nodes == 0 || a.workers == 0 || a.nodes + 2 > agensh_netns::MAX_HOSTS {
        bail!(
            "--nodes is 1 to {} and --workers at least 1",
            agensh_netns::MAX_HOSTS - 2
        );
    }
    let agensh = crate::stats::agensh_binary(a.common.agensh.as_deref())?;
    let _ = agensh_process::raise_open_file_limit();
    let dir = BenchDir::new("agensh-bench-cluster-", None, a.keep)?;
    let outcome = until_signal(measure(&a, &agensh, &dir.path)).await;
    dir.finish();
    print_result(a.common.json, &outcome?, print_table)
}

/// Makes the hosts, the hub and the nodes, and waits until every worker is idle.
async fn start(a: &Args, agensh: &Path, dir: &Path) -> Result<Cluster> {
    let root = dir.parent().expect("the organization is in a directory");
    let mut hosts = vec!["hub".to_string(), "probe".to_string()];
    hosts.extend((1..=a.nodes).map(|k| format!("n{k}")));
    let names: Vec<&str> = hosts.iter().map(String::as_str).collect();
    // Torn down after 6 hours even if this process hangs.
    let mut net =
        Testnet::create("agbc", &names, Duration::from_secs(6 * 3600)).map_err(|e| anyhow!(e))?;
    let pg = match a.store.as_str() {
        "postgres" => Some(Postgres::start_in(&mut net, "hub", true).map_err(|e| anyhow!(e))?),
        _ => None,
    };
    let hub_addr = format!("{}:{HUB_PORT}", net.host("hub").addr);
    let scenario = root.join("scenario.toml");
    // Every turn ends at once: the launch turn and one per post, with spare.
    std::fs::write(&scenario, crate::node::scenario(0, 0))?;
    init_org(agensh, dir, "agensh-bench cluster", &scenario, 1, |c| {
        // The hub's capacity is measured, not a worker's share of it.
        c.limits = agensh_domain::limits::LimitsConfig {
            requests_per_sec: 0.0,
            burst: 0,
            records_per_hour: 0,
            record_bytes_per_hour: 0,
            messages_per_hour: 0,
            ..Default::default()
        };
        c.hub.listen = hub_addr.clone();
        c.hub.max_connections = 16_384;
        if let Some(pg) = &pg {
            c.hub.store = pg.url();
        }
    })?;
    let hub_log = dir.join(".agensh/bench-hub.log");
    let mut hub = Proc::spawn(
        net.command("hub", agensh)
            .env("AGENSH_LOG", "warn")
            .arg("hub")
            .arg(dir)
            .stdout(Stdio::null())
            .stderr(log_file(&hub_log)?),
        "agensh hub",
    )?;
    let started = Instant::now();
    let info = loop {
        match agensh_hub::read_hub_info(dir) {
            Ok(i) if i.pid == hub.pid => break i,
            _ if !hub.running() => bail!("the hub exited: {}", tail(&hub_log, 20)),
            _ if started.elapsed() > Duration::from_secs(60) => {
                bail!("the hub did not start within 60 s: {}", tail(&hub_log, 20))
            }
            _ => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    };
    let mut nodes = Vec::new();
    for k in 1..=a.nodes {
        let out = agensh_cmd_in(&net, "hub", agensh)
            .arg("--dir")
            .arg(dir)
            .args(["nodes", "add", &format!("n{k}"), "--workers"])
            .arg(a.workers.to_string())
            .output()?;
        if !out.status.success() {
            bail!("nodes add: {}", String::from_utf8_lossy(&out.stderr));
        }
        let token = String::from_utf8_lossy(&out.stdout).trim().to_string();
        let node_dir = root.join(format!("node{k}"));
        std::fs::create_dir_all(&node_dir)?;
        std::fs::write(
            node_dir.join("agensh.toml"),
            "[organization]\ngoal = \"set by the hub\"\n[run]\nstagger_secs = 0.0\nidle_timeout_secs = 3600\n",
        )?;
        let log = log_file(&node_dir.join("node.log"))?;
        let node = Proc::spawn(
            agensh_cmd_in(&net, &format!("n{k}"), agensh)
                .args(["--hub", &format!("http://{hub_addr}"), "--dir"])
                .arg(&node_dir)
                .args(["node", "--workers", &a.workers.to_string()])
                .args(["--agent", "script", "--scenario"])
                .arg(&scenario)
                .env("AGENSH_NODE_TOKEN", token)
                .stdout(Stdio::null())
                .stderr(log),
            "agensh node",
        )?;
        nodes.push((node, node_dir, Vec::new()));
    }
    // Which workers each node was given (they register as they start).
    let deadline = Instant::now() + Duration::from_secs(a.start_timeout_secs);
    let assigned = loop {
        let out = agensh_cmd_in(&net, "hub", agensh)
            .arg("--dir")
            .arg(dir)
            .args(["nodes", "list", "--json"])
            .output()?;
        let list: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
        let per: Vec<Vec<String>> = list
            .as_array()
            .map(|l| {
                l.iter()
                    .map(|n| {
                        n["assigned"]
                            .as_array()
                            .map(|a| {
                                a.iter()
                                    .filter_map(|s| s.as_str().map(str::to_string))
                                    .collect()
                            })
                            .unwrap_or_default()
                    })
                    .collect()
            })
            .unwrap_or_default();
        if per.len() == a.nodes && per.iter().all(|w| w.len() == a.workers) {
            break per;
        }
        if Instant::now() > deadline {
            bail!("the nodes did not all register: {list}");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    // `nodes list` is in name order (n1, n10, n11, …, n2, …): match by name.
    let list_names: Vec<String> = {
        let mut v: Vec<String> = (1..=a.nodes).map(|k| format!("n{k}")).collect();
        v.sort();
        v
    };
    for (name, ids) in list_names.iter().zip(assigned) {
        let k: usize = name[1..].parse()?;
        nodes[k - 1].2 = ids;
    }
    let cluster = Cluster {
        net,
        hub,
        hub_url: format!("http://{hub_addr}"),
        admin_token: info.admin_token,
        nodes,
        me: std::env::current_exe()?,
    };
    // Every worker's launch turn logged.
    let total = a.nodes * a.workers;
    let bar = crate::hub::bar(total as u64, "workers started");
    let mut logs: Vec<TurnLogs> = cluster
        .nodes
        .iter()
        .map(|(_, d, ids)| TurnLogs::new(d, ids))
        .collect();
    let mut pending: Vec<(usize, usize)> = (0..a.nodes)
        .flat_map(|n| (0..a.workers).map(move |w| (n, w)))
        .collect();
    while !pending.is_empty() {
        let mut still = Vec::new();
        for (n, w) in pending {
            if logs[n].read_new(w)?.is_empty() {
                still.push((n, w));
            } else {
                bar.inc(1);
            }
        }
        pending = still;
        if !pending.is_empty() {
            if Instant::now() > deadline {
                bail!(
                    "{} workers never finished their launch turn; node n{}'s log:\n{}",
                    pending.len(),
                    pending[0].0 + 1,
                    tail(&cluster.nodes[pending[0].0].1.join("node.log"), 20)
                );
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
    bar.finish();
    Ok(cluster)
}

/// `agensh` inside `host`, with the benchmark's environment.
fn agensh_cmd_in(net: &Testnet, host: &str, agensh: &Path) -> std::process::Command {
    let mut c = net.command(host, agensh);
    let base = agensh_cmd(agensh);
    for (k, v) in base.get_envs() {
        match v {
            Some(v) => c.env(k, v),
            None => c.env_remove(k),
        };
    }
    c.env_remove("AGENSH_NODE_TOKEN").env_remove("AGENSH_STORE");
    c
}

async fn measure(a: &Args, agensh: &Path, dir: &Path) -> Result<Value> {
    let setup = Instant::now();
    let mut cluster = start(a, agensh, dir).await?;
    let activation = setup.elapsed();
    let hub_pid = cluster.hub.pid;
    let total = a.nodes * a.workers;

    // 1. Event-to-prompt latency.
    let mut logs: Vec<TurnLogs> = cluster
        .nodes
        .iter()
        .map(|(_, d, ids)| TurnLogs::new(d, ids))
        .collect();
    for (n, l) in logs.iter_mut().enumerate() {
        for w in 0..a.workers {
            let _ = l.read_new(w).with_context(|| format!("node n{}", n + 1))?;
        }
    }
    // The first posts after the launch meet 1,024 agents and nodes still settling (their
    // launch turns' reports, statuses, the store's first checkpoint): posted and waited for
    // like the others, reported apart, not counted.
    tokio::time::sleep(Duration::from_secs_f64(a.settle_secs)).await;
    let mut warmup: Vec<Duration> = Vec::new();
    for p in 0..a.warmup_posts {
        warmup.extend(
            time_post(&mut cluster, &mut logs, a, &format!("warm-up {p}"))
                .await?
                .0,
        );
        tokio::time::sleep(Duration::from_secs_f64(a.gap_secs)).await;
    }
    let cpu_before = cpu_of(hub_pid);
    let bar = crate::hub::bar(a.posts as u64, "posts");
    let mut samples: Vec<Duration> = Vec::new();
    let mut per_post_max: Vec<Duration> = Vec::new();
    // Each post's own p99, in order: shows whether the first posts after the launch (or the
    // warm-up) are the tail, or every post is alike.
    let mut per_post_p99: Vec<f64> = Vec::new();
    let mut per_post_polls: Vec<u64> = Vec::new();
    for p in 0..a.posts {
        let (this, polls) = time_post(&mut cluster, &mut logs, a, &p.to_string()).await?;
        per_post_polls.push(polls);
        per_post_max.push(this.iter().copied().max().unwrap_or_default());
        per_post_p99.push(ms(percentile(&this, 99.0)));
        samples.extend(this);
        bar.inc(1);
        tokio::time::sleep(Duration::from_secs_f64(a.gap_secs)).await;
    }
    bar.finish();
    let hub_cpu_per_post = cpu_of(hub_pid).saturating_sub(cpu_before) / a.posts.max(1) as u32;

    // 2. Durable appends, every node running.
    let cpu_before = cpu_of(hub_pid);
    eprintln!(
        "appending for {} s with {} writers…",
        a.append_secs, a.writers
    );
    let appends = cluster.probe(&[
        "--append-secs",
        &a.append_secs.to_string(),
        "--writers",
        &a.writers.to_string(),
    ])?;
    let append_cpu = cpu_of(hub_pid).saturating_sub(cpu_before);
    let append_secs = appends["secs"].as_f64().unwrap_or(1.0).max(0.001);
    let (rss, hwm) = memory_of(hub_pid);

    // Stop the nodes and the hub; the testnet's teardown removes what is left.
    for (node, _, _) in cluster.nodes.iter_mut() {
        node.terminate(Duration::from_secs(120)).await;
    }
    cluster.hub.terminate(Duration::from_secs(30)).await;
    drop(cluster);

    let dms = |v: &[Duration], p: f64| ms(percentile(v, p));
    Ok(json!({
        "nodes": a.nodes,
        "workers_per_node": a.workers,
        "workers": total,
        "store": a.store,
        "activation_secs": (activation.as_secs_f64() * 10.0).round() / 10.0,
        "latency": {
            "posts": a.posts,
            "samples": samples.len(),
            "p50_ms": dms(&samples, 50.0),
            "p99_ms": dms(&samples, 99.0),
            "max_ms": dms(&samples, 100.0),
            "per_post_max_p50_ms": dms(&per_post_max, 50.0),
            "per_post_p99_ms": per_post_p99,
            "per_post_polls_waiting": per_post_polls,
            "target_p99_ms": 100,
        },
        "warmup": {
            "posts": a.warmup_posts,
            "p50_ms": dms(&warmup, 50.0),
            "p99_ms": dms(&warmup, 99.0),
            "max_ms": dms(&warmup, 100.0),
        },
        "appends": {
            "writers": a.writers,
            "count": appends["count"],
            "per_sec": appends["per_sec"],
            "p50_ms": appends["p50_ms"],
            "p99_ms": appends["p99_ms"],
            "target_per_sec": 5000,
        },
        "hub": {
            "cpu_per_post_ms": ms(hub_cpu_per_post),
            "cores_while_appending": ((append_cpu.as_secs_f64() / append_secs) * 100.0).round() / 100.0,
            "rss_mib": crate::node::mib(rss),
            "hwm_mib": crate::node::mib(hwm),
        },
        "cores": std::thread::available_parallelism().map_or(1, |c| c.get()),
    }))
}

/// Posts once to `#general` and waits until every worker has logged the turn that carries
/// it: each worker's time from the event's `created_at` at the hub to its turn's `started`,
/// and the long-polls the hub held just before the post.
async fn time_post(
    cluster: &mut Cluster,
    logs: &mut [TurnLogs],
    a: &Args,
    label: &str,
) -> Result<(Vec<Duration>, u64)> {
    let total = a.nodes * a.workers;
    let answer = cluster.probe(&["--post", &format!("cluster post {label}: nothing to do")])?;
    let created = answer["created_at"]
        .as_i64()
        .ok_or_else(|| anyhow!("no created_at in {answer}"))?;
    let polls = answer["polls_waiting"].as_u64().unwrap_or(0);
    let mut pending: Vec<(usize, usize)> = (0..a.nodes)
        .flat_map(|n| (0..a.workers).map(move |w| (n, w)))
        .collect();
    let mut this = Vec::with_capacity(total);
    let deadline = Instant::now() + Duration::from_secs(300);
    while !pending.is_empty() {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let mut still = Vec::new();
        for (n, w) in pending {
            let found = logs[n].read_new(w)?.into_iter().find_map(|t| {
                t.carried
                    .iter()
                    .find(|c| c.1 == created)
                    .map(|c| t.started - c.1)
            });
            match found {
                Some(d) => this.push(Duration::from_millis(d.max(0) as u64)),
                None => still.push((n, w)),
            }
        }
        pending = still;
        if !pending.is_empty() && Instant::now() > deadline {
            bail!(
                "post {label}: {} of {total} workers never logged a turn carrying it",
                pending.len()
            );
        }
    }
    Ok((this, polls))
}

fn print_table(r: &Value) {
    let l = &r["latency"];
    let ap = &r["appends"];
    let h = &r["hub"];
    println!(
        "cluster: {} nodes × {} workers ({} workers) on {}, started in {} s, {} cores",
        r["nodes"],
        r["workers_per_node"],
        r["workers"],
        r["store"],
        r["activation_secs"],
        r["cores"]
    );
    println!(
        "event to prompt  p50 {} ms, p99 {} ms, max {} ms ({} samples; target p99 <= 100 ms)",
        l["p50_ms"], l["p99_ms"], l["max_ms"], l["samples"]
    );
    // A list of the result, one value a post, in order.
    let each = |key: &str| -> String {
        let values = l[key].as_array().map(Vec::as_slice).unwrap_or_default();
        values
            .iter()
            .map(Value::to_string)
            .collect::<Vec<_>>()
            .join(" · ")
    };
    println!("  each post p99  {} ms, in order", each("per_post_p99_ms"));
    println!(
        "  polls it woke  {}, in order",
        each("per_post_polls_waiting")
    );
    let w = &r["warmup"];
    if w["posts"].as_u64().unwrap_or(0) > 0 {
        println!(
            "  warm-up        {} post(s) right after the launch, not counted: p50 {} ms, p99 {} ms, max {} ms",
            w["posts"], w["p50_ms"], w["p99_ms"], w["max_ms"]
        );
    }
    println!(
        "appends          {} /s ({} writers, p50 {} ms, p99 {} ms; target >= 5000/s)",
        ap["per_sec"], ap["writers"], ap["p50_ms"], ap["p99_ms"]
    );
    println!(
        "hub              {} ms CPU per post, {} cores while appending, RSS {} MiB (peak {} MiB)",
        h["cpu_per_post_ms"], h["cores_while_appending"], h["rss_mib"], h["hwm_mib"]
    );
}
