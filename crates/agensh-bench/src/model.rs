//! The model benchmark: N workers of the built-in agent (JSON-action style) sharing ONE
//! local model server with `parallel = N` slots, for N = 1, 2, 4, 8 by default.
//!
//! For each N: a fresh organization in a temporary directory (`main` seeded from
//! `examples/textkit/seed`, the goal of `examples/textkit/agensh.toml`), a hub in this
//! process, a model server with N slots, and `run_node` with the built-in agent for
//! `--secs` seconds (`ends_at`). Afterwards, from the logs of the run:
//!
//! - **throughput** — completion and prompt tokens of every model reply
//!   (`builtin.jsonl`, `reply` events) ÷ run seconds; prompt tokens the server actually
//!   evaluated (without its prompt cache) from its own timing lines; model requests and
//!   turns per minute, all workers together. Requests still running at the end are
//!   cancelled and never logged, so the server's `GET /slots` is read 0.3 s before the end
//!   and their tokens so far are added (a reply logged after that read is left out);
//! - **the harness's share of a turn** — from each line of `turns.jsonl`:
//!   (wall − `model_ms` − `tools_ms`) / wall, as p50 over turns and as an aggregate
//!   (sums over all turns), next to the model's and the tools' aggregate shares;
//! - **between turns** — one turn's `ended` to the next turn's `started` of the same worker
//!   (p50). This includes waiting for events and the idle timeout, so it is mostly waiting,
//!   not work;
//! - **load** — the CPU cores this process (with the commands it ran) and its model server
//!   used, and what everything else on the machine used meanwhile (`/proc`), so a run on a
//!   shared machine can be judged.
//!
//! Baseline: before the agents of N = 1 start, one direct `POST /v1/chat/completions` on
//! the same server; its `timings` give the single-stream prompt and generation speed, so the
//! aggregate figures read as a ratio of it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use agensh_client::Client;
use agensh_domain::config::Config;
use agensh_model::{InstallProgress, Installed, ModelServer, ServeOptions, Size};
use agensh_node::adapters::builtin::{BuiltinConfig, ToolStyle};
use agensh_node::node::{run_node, AgentKind, NodePlan};
use agensh_node::turn::Progress;
use agensh_process::ShutdownTrigger;
use agensh_store::SqliteStore;
use agensh_workspace::seed::Source;
use anyhow::{anyhow, bail, Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;
use serde_json::{json, Value};
use tokio::sync::mpsc;

/// How long before the end of a run the slots of the server are read.
const SNAPSHOT_BEFORE_END: Duration = Duration::from_millis(300);

#[derive(clap::Args)]
pub struct Args {
    /// Worker counts to measure, one run each (the server gets one slot per worker).
    #[arg(long, value_delimiter = ',', default_value = "1,2,4,8")]
    workers: Vec<usize>,
    /// The local model: 0.5b or 1.5b (installed first if missing).
    #[arg(long, default_value = "0.5b")]
    size: String,
    /// Seconds each run lasts.
    #[arg(long, default_value_t = 120)]
    secs: u64,
    /// Context window of one request, in tokens (the server's total is this × N).
    #[arg(long, default_value_t = 8192)]
    context: u32,
    /// Model requests per turn before the turn ends (small: frequent turns).
    #[arg(long, default_value_t = 6)]
    max_steps: u32,
    /// Most tokens of one reply.
    #[arg(long, default_value_t = 1024)]
    max_reply_tokens: u32,
    /// Seconds without events after a turn before a continue prompt.
    #[arg(long, default_value_t = 10)]
    idle_secs: u64,
    /// Seconds between two workers' activation.
    #[arg(long, default_value_t = 0.0)]
    stagger_secs: f64,
    /// CPU threads of the model server (0: all cores).
    #[arg(long, default_value_t = 0)]
    threads: u32,
    /// The example organization (its agensh.toml gives the goal, its seed/ the code).
    #[arg(long)]
    example: Option<PathBuf>,
    /// Keep each run's organization directory (turn logs, agent logs, server log).
    #[arg(long)]
    keep: bool,
    /// Print the results as JSON.
    #[arg(long)]
    json: bool,
}

/// The single-stream speed of the server: one direct request.
#[derive(Debug, Clone, Serialize)]
struct Baseline {
    prompt_tokens: u64,
    prompt_tps: f64,
    completion_tokens: u64,
    gen_tps: f64,
    wall_ms: f64,
}

/// One run's figures.
#[derive(Debug, Clone, Default, Serialize)]
struct Row {
    workers: usize,
    secs: f64,
    server_ready_secs: f64,
    workers_failed: usize,
    turns: usize,
    requests: usize,
    invalid_actions: usize,
    /// Requests still running at the end (their tokens so far are counted).
    in_flight: usize,
    completion_tokens: u64,
    prompt_tokens: u64,
    /// Prompt tokens the server evaluated (not taken from its prompt cache).
    prompt_tokens_evaluated: Option<u64>,
    gen_tps: f64,
    prompt_tps: f64,
    prompt_eval_tps: Option<f64>,
    /// The server's whole work: prompt tokens evaluated plus tokens generated, per second.
    server_tps: Option<f64>,
    /// `gen_tps` ÷ the baseline's single-stream generation speed.
    gen_vs_single: Option<f64>,
    /// Generation speed of one slot while it decoded (server timings), averaged.
    per_stream_gen_tps: Option<f64>,
    requests_per_min: f64,
    turns_per_min: f64,
    harness_share_p50: f64,
    harness_share_agg: f64,
    model_share_p50: f64,
    model_share_agg: f64,
    tools_share_agg: f64,
    turn_ms_p50: f64,
    harness_ms_p50: f64,
    harness_ms_p90: f64,
    /// One turn's end to the same worker's next start: mostly waiting (events, idle timeout).
    /// None when no worker had two turns.
    between_turns_ms_p50: Option<f64>,
    between_turns_ms_p90: Option<f64>,
    /// Between-turn gaps (samples).
    between_turns: usize,
    /// Run start to a worker's first turn (checkout, MCP session), p50.
    first_turn_ms_p50: f64,
    stop_reasons: BTreeMap<String, usize>,
    processes_left: usize,
    /// Cores this benchmark and its model server used on average during the run.
    cpu_ours_cores: f64,
    /// Cores everything else on the machine used on average during the run (others' work).
    cpu_others_cores: f64,
}

pub async fn run(a: Args) -> Result<()> {
    if a.workers.is_empty() || a.workers.contains(&0) {
        bail!("--workers needs positive counts, e.g. --workers 1,2,4,8");
    }
    if a.secs == 0 {
        bail!("--secs must be positive");
    }
    let size: Size = a.size.parse()?;
    let example = example_dir(a.example.as_deref())?;
    let toml_path = example.join("agensh.toml");
    let text = std::fs::read_to_string(&toml_path)
        .with_context(|| format!("cannot read {}", toml_path.display()))?;
    let config = Config::parse(&text)?;
    let goal = config.organization.goal.trim().to_string();
    let seed = example.join(if config.organization.seed.is_empty() {
        "seed"
    } else {
        config.organization.seed.as_str()
    });
    // Orphaned descendants (commands the agents started) become our children, so they
    // show up in [`processes_left`].
    agensh_process::group::become_subreaper()
        .context("cannot make the benchmark the reaper of its orphaned processes")?;

    let data = agensh_model::data_dir()?;
    let inst = match agensh_model::installed(&data, size) {
        Some(i) => i,
        None => {
            eprintln!(
                "installing the local {size} model into {} (once; about {} MB)",
                data.display(),
                size.spec().bytes >> 20
            );
            install(&data, size).await?
        }
    };
    eprintln!(
        "model benchmark: built-in agent (json actions) on the local {size} model ({}), N = {:?}, {} s each, {} cores",
        inst.model_file.display(),
        a.workers,
        a.secs,
        std::thread::available_parallelism().map_or(1, |n| n.get())
    );

    let mut baseline: Option<Baseline> = None;
    if !a.workers.contains(&1) {
        // The baseline is measured on a one-slot server; start one just for it.
        let tmp = tempfile::tempdir()?;
        let (server, _) = start_server(&inst, &a, 1, &tmp.path().join("serve.log")).await?;
        let b = measure_baseline(&server, &seed, &goal).await;
        server.stop().await;
        baseline = Some(b?);
    }
    let mut rows = Vec::new();
    for &n in &a.workers {
        let row = run_one(&a, &inst, &config, &seed, &goal, n, &mut baseline).await?;
        rows.push(row);
    }
    let baseline = baseline.ok_or_else(|| anyhow!("no baseline was measured"))?;
    for r in &mut rows {
        r.gen_vs_single = (baseline.gen_tps > 0.0).then(|| round2(r.gen_tps / baseline.gen_tps));
    }

    if a.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&json!({
                "benchmark": "model",
                "model": size.as_str(),
                "model_file": inst.model_file,
                "cores": std::thread::available_parallelism().map_or(1, |n| n.get()),
                "secs": a.secs,
                "context_per_request": a.context,
                "max_steps_per_turn": a.max_steps,
                "max_reply_tokens": a.max_reply_tokens,
                "idle_timeout_secs": a.idle_secs,
                "stagger_secs": a.stagger_secs,
                "baseline": baseline,
                "runs": rows,
            }))?
        );
    } else {
        print_table(&a, size, &baseline, &rows);
    }
    Ok(())
}

/// One organization, one server with `n` slots, `n` workers for `a.secs` seconds.
async fn run_one(
    a: &Args,
    inst: &Installed,
    config: &Config,
    seed: &Path,
    goal: &str,
    n: usize,
    baseline: &mut Option<Baseline>,
) -> Result<Row> {
    let tmp = tempfile::Builder::new()
        .prefix(&format!("agensh-bench-model-{n}-"))
        .tempdir()?;
    let org = tmp.path().join("org");
    let state = org.join(".agensh");
    std::fs::create_dir_all(&state)?;
    let serve_log = tmp.path().join("serve.log");

    eprintln!(
        "N={n}: starting the model server ({n} slot(s), {} tokens each)",
        a.context
    );
    let (server, ready) = start_server(inst, a, n as u32, &serve_log).await?;
    let server_pgid = server.pid().map(|p| p as i32);
    eprintln!(
        "N={n}: server ready in {ready:.1} s at {}",
        server.base_url()
    );
    if n == 1 && baseline.is_none() {
        let b = measure_baseline(&server, seed, goal).await?;
        eprintln!(
            "N=1: single stream: prompt {:.1} tok/s ({} tokens), generation {:.1} tok/s ({} tokens)",
            b.prompt_tps, b.prompt_tokens, b.gen_tps, b.completion_tokens
        );
        *baseline = Some(b);
    }
    let log_from = std::fs::metadata(&serve_log).map_or(0, |m| m.len());

    let ws = agensh_workspace::seed::create(
        &state.join(agensh_workspace::REPO_DIR),
        Source::Dir(seed),
        goal,
    )
    .await?;
    let store = SqliteStore::open(&state.join(agensh_hub::STORE_FILE))?;
    let hub =
        agensh_hub::start_with_workspace(Arc::new(store), Some(ws), config.clone(), "127.0.0.1:0")
            .await?;
    let admin = Client::new(&hub.url, &hub.admin_token);
    let workers: Vec<(String, String)> = admin
        .add_workers(n)
        .await?
        .into_iter()
        .map(|w| (w.id, w.token))
        .collect();

    let builtin = BuiltinConfig {
        base_url: server.base_url(),
        model: server.model_name().to_string(),
        api_key: None,
        style: ToolStyle::Json,
        context_tokens: a.context,
        max_reply_tokens: a.max_reply_tokens,
        max_steps_per_turn: a.max_steps,
        temperature: config.model.temperature as f32,
        ..BuiltinConfig::default()
    };
    let run_for = Duration::from_secs(a.secs);
    let t0 = SystemTime::now();
    let started = Instant::now();
    let cpu_before = cpu_sample(server_pgid);
    let plan = NodePlan {
        groups: Vec::new(),
        permissions: Default::default(),
        org_dir: org.clone(),
        hub_url: hub.url.clone(),
        workers,
        agent: AgentKind::Builtin(builtin),
        goal: goal.to_string(),
        organization_size: n,
        stagger: Duration::from_secs_f64(a.stagger_secs),
        idle_timeout: Duration::from_secs(a.idle_secs),
        park_idle: true,
        interrupt_after: config.run.interrupt_after(),
        ends_at: Some(t0 + run_for),
        notices_before_end: Vec::new(),
        limits: Default::default(),
        pack: Vec::new(),
        agensh: std::env::current_exe()?,
        agent_cpu: Default::default(),
        recovery: Default::default(),
        remote: None,
    };
    let (stop, shutdown) = ShutdownTrigger::new();
    let (tx, mut rx) = mpsc::unbounded_channel();
    let mut node = tokio::spawn(run_node(plan, shutdown, tx));
    // Requests still running when the run ends are cancelled and never logged: their work
    // so far comes from the server's /slots just before the end.
    let snapshot = tokio::spawn(slots_snapshot(
        format!("http://127.0.0.1:{}/slots", server.port()),
        tokio::time::Instant::now() + run_for.saturating_sub(SNAPSHOT_BEFORE_END),
        serve_log.clone(),
    ));

    let bar = ProgressBar::new(a.secs);
    bar.set_style(
        ProgressStyle::with_template("{prefix:>5} [{bar:30}] {pos}/{len} s  {msg}")
            .expect("template")
            .progress_chars("=> "),
    );
    bar.set_prefix(format!("N={n}"));
    eprintln!("N={n}: running {n} worker(s) for {} s", a.secs);
    let mut turns: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    // Past the end, the turns in flight are cancelled; give the workers a moment to stop.
    let give_up = tokio::time::Instant::now() + run_for + Duration::from_secs(60);
    let summary = loop {
        tokio::select! {
            r = &mut node => break r,
            Some((id, p)) = rx.recv() => {
                if let Progress::Turn { turns: t, usage, .. } = p {
                    turns.insert(id, (t, usage.output_tokens));
                }
            }
            _ = tick.tick() => {
                bar.set_position(started.elapsed().as_secs().min(a.secs));
                let (t, o) = turns.values().fold((0, 0), |(a, b), (t, o)| (a + t, b + o));
                bar.set_message(format!("{t} turns, {o} tokens generated"));
                if tokio::time::Instant::now() > give_up {
                    stop.fire();
                }
            }
        }
    };
    bar.finish_and_clear();
    stop.fire();
    let summary = summary.context("the node task failed")??;
    let elapsed = started.elapsed();
    let (in_flight, log_to) = snapshot.await.unwrap_or_default();
    let cpu_after = cpu_sample(server_pgid);
    hub.shutdown().await;
    server.stop().await;
    let left = processes_left(server_pgid);
    if !left.is_empty() {
        eprintln!("N={n}: processes left after cleanup: {left:?}");
    }

    let mut row = analyse(&org, n, a.secs as f64, t0)?;
    row.server_ready_secs = round2(ready);
    row.workers_failed = summary.workers.values().filter(|r| r.is_err()).count();
    for (id, r) in &summary.workers {
        if let Err(e) = r {
            eprintln!("N={n}: worker {id} failed: {e}");
        }
    }
    if let Some(f) = &in_flight {
        row.in_flight = f.requests;
        row.completion_tokens += f.decoded;
        row.prompt_tokens += f.prompt;
        row.gen_tps = round1(row.completion_tokens as f64 / row.secs);
        row.prompt_tps = round1(row.prompt_tokens as f64 / row.secs);
    }
    let log_to = log_to.max(log_from);
    if let Some((evaluated, per_stream)) = server_timings(&serve_log, log_from, log_to) {
        let evaluated = evaluated + in_flight.as_ref().map_or(0, |f| f.prompt_evaluated);
        row.prompt_tokens_evaluated = Some(evaluated);
        row.prompt_eval_tps = Some(round1(evaluated as f64 / row.secs));
        row.server_tps = Some(round1(
            (evaluated + row.completion_tokens) as f64 / row.secs,
        ));
        row.per_stream_gen_tps = per_stream.map(round1);
    }
    row.processes_left = left.len();
    let secs = elapsed.as_secs_f64();
    row.cpu_ours_cores = round2((cpu_after.ours - cpu_before.ours) / secs);
    row.cpu_others_cores = round2(
        ((cpu_after.busy - cpu_before.busy) - (cpu_after.ours - cpu_before.ours)).max(0.0) / secs,
    );
    eprintln!(
        "N={n}: done in {:.1} s: {} turns, {} requests, {:.1} tokens/s generated",
        elapsed.as_secs_f64(),
        row.turns,
        row.requests,
        row.gen_tps
    );
    if a.keep {
        let kept = tmp.keep();
        eprintln!("N={n}: kept {}", kept.display());
    }
    Ok(row)
}

/// Starts a server with `parallel` slots; the seconds it took to be ready.
async fn start_server(
    inst: &Installed,
    a: &Args,
    parallel: u32,
    log: &Path,
) -> Result<(ModelServer, f64)> {
    let opts = ServeOptions {
        parallel,
        context_per_request: a.context,
        threads: a.threads,
        log_file: Some(log.to_path_buf()),
        ..ServeOptions::default()
    };
    let t = Instant::now();
    let server = ModelServer::start(inst, &opts).await?;
    Ok((server, t.elapsed().as_secs_f64()))
}

/// One direct chat request: a prompt like the agents' (the goal, a test file, a stub).
async fn measure_baseline(server: &ModelServer, seed: &Path, goal: &str) -> Result<Baseline> {
    let read = |p: &str| std::fs::read_to_string(seed.join(p)).unwrap_or_default();
    let user = format!(
        "{goal}\n\nHere are tests/test_roman.py:\n```python\n{}\n```\nand textkit/roman.py:\n```python\n{}\n```\nWrite the complete textkit/roman.py so that the tests pass. Answer with the code only.",
        read("tests/test_roman.py"),
        read("textkit/roman.py")
    );
    let body = json!({
        "model": server.model_name(),
        "messages": [
            { "role": "system", "content": "You are a careful Python programmer." },
            { "role": "user", "content": user },
        ],
        "max_tokens": 256,
        "temperature": 0.0,
        "stream": false,
    });
    let http = reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(600))
        .build()?;
    let t = Instant::now();
    let resp = http
        .post(format!("{}/chat/completions", server.base_url()))
        .json(&body)
        .send()
        .await
        .context("the baseline request failed")?;
    let status = resp.status();
    let v: Value = resp
        .json()
        .await
        .context("the baseline answer is not JSON")?;
    let wall = t.elapsed().as_secs_f64();
    if !status.is_success() {
        bail!("the baseline request got {status}: {v}");
    }
    let num = |p: &str| v.pointer(p).and_then(Value::as_f64);
    let usage_prompt = num("/usage/prompt_tokens").unwrap_or(0.0);
    let usage_completion = num("/usage/completion_tokens").unwrap_or(0.0);
    let (prompt_n, prompt_ms, gen_n, gen_ms) = match (
        num("/timings/prompt_n"),
        num("/timings/prompt_ms"),
        num("/timings/predicted_n"),
        num("/timings/predicted_ms"),
    ) {
        (Some(pn), Some(pm), Some(gn), Some(gm)) => (pn, pm, gn, gm),
        // No timings: all of the wall time counts as generation.
        _ => (usage_prompt, 0.0, usage_completion, wall * 1000.0),
    };
    let rate = |n: f64, ms: f64| {
        if ms > 0.0 {
            round1(n / ms * 1000.0)
        } else {
            0.0
        }
    };
    Ok(Baseline {
        prompt_tokens: prompt_n as u64,
        prompt_tps: rate(prompt_n, prompt_ms),
        completion_tokens: gen_n as u64,
        gen_tps: rate(gen_n, gen_ms),
        wall_ms: round1(wall * 1000.0),
    })
}

/// The figures of one run from its turn logs and the built-in agent's logs.
fn analyse(org: &Path, n: usize, secs: f64, t0: SystemTime) -> Result<Row> {
    let t0_ms = t0
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis() as f64;
    let cutoff_ms = t0_ms + secs * 1000.0 - SNAPSHOT_BEFORE_END.as_millis() as f64;
    let logs = org.join(".agensh").join("logs");
    let mut row = Row {
        workers: n,
        secs,
        ..Row::default()
    };
    let (mut wall_sum, mut model_sum, mut tools_sum, mut harness_sum) = (0.0, 0.0, 0.0, 0.0);
    let mut harness_shares = Vec::new();
    let mut model_shares = Vec::new();
    let mut walls = Vec::new();
    let mut harness_ms = Vec::new();
    let mut gaps = Vec::new();
    let mut firsts = Vec::new();
    let dirs =
        std::fs::read_dir(&logs).with_context(|| format!("no logs in {}", logs.display()))?;
    for dir in dirs {
        let dir = dir?.path();
        let mut turns: Vec<(f64, f64)> = Vec::new();
        for v in json_lines(&dir.join("turns.jsonl")) {
            let (Some(s), Some(e)) = (
                v.get("started").and_then(Value::as_f64),
                v.get("ended").and_then(Value::as_f64),
            ) else {
                continue;
            };
            if v.get("turn").is_none() {
                continue;
            }
            let wall = (e - s).max(0.0);
            let model = v.get("model_ms").and_then(Value::as_f64).unwrap_or(0.0);
            let tools = v.get("tools_ms").and_then(Value::as_f64).unwrap_or(0.0);
            let harness = (wall - model - tools).max(0.0);
            wall_sum += wall;
            model_sum += model;
            tools_sum += tools;
            harness_sum += harness;
            if wall > 0.0 {
                harness_shares.push(harness / wall);
                model_shares.push(model / wall);
            }
            walls.push(wall);
            harness_ms.push(harness);
            let reason = v
                .get("stop_reason")
                .and_then(Value::as_str)
                .unwrap_or("?")
                .to_string();
            *row.stop_reasons.entry(reason).or_default() += 1;
            turns.push((s, e));
        }
        turns.sort_by(|a, b| a.0.total_cmp(&b.0));
        if let Some(first) = turns.first() {
            firsts.push((first.0 - t0_ms).max(0.0));
        }
        for w in turns.windows(2) {
            gaps.push((w[1].0 - w[0].1).max(0.0));
        }
        row.turns += turns.len();
        for v in json_lines(&dir.join("builtin.jsonl")) {
            match v.get("event").and_then(Value::as_str) {
                // Later replies are counted as in flight, from the server's slots.
                Some("reply") if v.get("at").and_then(Value::as_f64) <= Some(cutoff_ms) => {
                    row.requests += 1;
                    row.prompt_tokens +=
                        v.get("prompt_tokens").and_then(Value::as_u64).unwrap_or(0);
                    row.completion_tokens += v
                        .get("completion_tokens")
                        .and_then(Value::as_u64)
                        .unwrap_or(0);
                }
                Some("invalid_action") => row.invalid_actions += 1,
                _ => {}
            }
        }
    }
    let share = |x: f64| {
        if wall_sum > 0.0 {
            round3(x / wall_sum)
        } else {
            0.0
        }
    };
    row.gen_tps = round1(row.completion_tokens as f64 / secs);
    row.prompt_tps = round1(row.prompt_tokens as f64 / secs);
    row.requests_per_min = round1(row.requests as f64 / secs * 60.0);
    row.turns_per_min = round1(row.turns as f64 / secs * 60.0);
    row.harness_share_p50 = round3(median(&harness_shares));
    row.model_share_p50 = round3(median(&model_shares));
    row.harness_share_agg = share(harness_sum);
    row.model_share_agg = share(model_sum);
    row.tools_share_agg = share(tools_sum);
    row.turn_ms_p50 = round1(pct(&walls, 50.0));
    row.harness_ms_p50 = round1(pct(&harness_ms, 50.0));
    row.harness_ms_p90 = round1(pct(&harness_ms, 90.0));
    row.between_turns = gaps.len();
    row.between_turns_ms_p50 = (!gaps.is_empty()).then(|| round1(pct(&gaps, 50.0)));
    row.between_turns_ms_p90 = (!gaps.is_empty()).then(|| round1(pct(&gaps, 90.0)));
    row.first_turn_ms_p50 = round1(pct(&firsts, 50.0));
    Ok(row)
}

/// From the server's log between `from` and `to`: prompt tokens it evaluated, and the mean
/// decode speed of one slot (tokens ÷ decode time, summed over requests); None when the
/// log cannot be read.
fn server_timings(log: &Path, from: u64, to: u64) -> Option<(u64, Option<f64>)> {
    let bytes = std::fs::read(log).ok()?;
    let text = String::from_utf8_lossy(bytes.get(from as usize..to as usize)?);
    let (mut prompt_tokens, mut gen_tokens, mut gen_ms) = (0u64, 0u64, 0.0);
    for line in text.lines() {
        if !line.contains("print_timing") {
            continue;
        }
        if let Some(rest) = line.split("prompt eval time =").nth(1) {
            if let Some((_, t)) = ms_and_tokens(rest) {
                prompt_tokens += t;
            }
        } else if let Some(rest) = line.split("eval time =").nth(1) {
            if let Some((ms, t)) = ms_and_tokens(rest) {
                gen_tokens += t;
                gen_ms += ms;
            }
        }
    }
    let per_stream = (gen_ms > 0.0).then(|| gen_tokens as f64 / gen_ms * 1000.0);
    Some((prompt_tokens, per_stream))
}

/// What the requests in flight at the end of a run had done (from `GET /slots`).
#[derive(Debug, Clone, Default)]
struct InFlight {
    requests: usize,
    /// Tokens generated so far.
    decoded: u64,
    /// Prompt tokens of the requests already generating (their prompt is done).
    prompt: u64,
    /// Of these, the ones the server evaluated (not from its cache).
    prompt_evaluated: u64,
}

/// At `at`: the server log's length (what completed before) and the slots' work so far.
async fn slots_snapshot(
    url: String,
    at: tokio::time::Instant,
    log: PathBuf,
) -> (Option<InFlight>, u64) {
    tokio::time::sleep_until(at).await;
    let log_len = std::fs::metadata(&log).map_or(0, |m| m.len());
    let Ok(http) = reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(20))
        .build()
    else {
        return (None, log_len);
    };
    let slots: Option<Value> = match http.get(&url).send().await {
        Ok(r) if r.status().is_success() => r.json().await.ok(),
        _ => None,
    };
    let Some(slots) = slots.as_ref().and_then(Value::as_array) else {
        return (None, log_len);
    };
    let mut f = InFlight::default();
    for s in slots {
        if s.get("is_processing").and_then(Value::as_bool) != Some(true) {
            continue;
        }
        let num = |p: &str| s.pointer(p).and_then(Value::as_u64).unwrap_or(0);
        let decoded = num("/next_token/0/n_decoded");
        f.requests += 1;
        f.decoded += decoded;
        if decoded > 0 {
            f.prompt += num("/n_prompt_tokens");
            f.prompt_evaluated += num("/n_prompt_tokens_processed");
        }
    }
    (Some(f), log_len)
}

/// CPU seconds so far: the whole machine busy, and this process with its reaped children
/// and the model server.
#[derive(Debug, Clone, Copy, Default)]
struct Cpu {
    busy: f64,
    ours: f64,
}

fn cpu_sample(server: Option<i32>) -> Cpu {
    let tick = agensh_process::resources::clock_ticks_per_second() as f64;
    let busy = std::fs::read_to_string("/proc/stat")
        .ok()
        .and_then(|s| {
            let f: Vec<f64> = s
                .lines()
                .next()?
                .split_whitespace()
                .skip(1)
                .filter_map(|x| x.parse().ok())
                .collect();
            // user nice system idle iowait irq softirq steal …: all but idle and iowait.
            Some(f.iter().take(8).sum::<f64>() - f.get(3)? - f.get(4)?)
        })
        .unwrap_or(0.0);
    let ours = crate::stats::cpu_secs("self")
        + server.map_or(0.0, |p| crate::stats::cpu_secs(&p.to_string()));
    Cpu {
        busy: busy / tick,
        ours,
    }
}

/// `"  734.46 ms /    99 tokens (…"` → (734.46, 99).
fn ms_and_tokens(s: &str) -> Option<(f64, u64)> {
    let (ms, rest) = s.split_once("ms")?;
    let ms: f64 = ms.trim().parse().ok()?;
    let rest = rest.trim_start().strip_prefix('/')?;
    let tokens = rest.split_whitespace().next()?.parse().ok()?;
    Some((ms, tokens))
}

fn json_lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

fn print_table(a: &Args, size: Size, b: &Baseline, rows: &[Row]) {
    println!(
        "model benchmark: built-in agent (json actions) on the local {size} model, one server with N slots, {} s per N, {} cores",
        a.secs,
        std::thread::available_parallelism().map_or(1, |n| n.get())
    );
    println!(
        "    context {} tokens/request, max {} steps/turn, replies <= {} tokens, idle timeout {} s, stagger {} s",
        a.context, a.max_steps, a.max_reply_tokens, a.idle_secs, a.stagger_secs
    );
    println!(
        "single stream (one direct request, N=1 server): prompt {:.1} tok/s over {} tokens, generation {:.1} tok/s over {} tokens, {:.0} ms",
        b.prompt_tps, b.prompt_tokens, b.gen_tps, b.completion_tokens, b.wall_ms
    );
    println!();
    println!(
        "{:>2} {:>7} {:>9} {:>14} {:>14} {:>8} {:>10} {:>16} {:>6} {:>6} {:>8} {:>10} {:>9}",
        "N",
        "req/min",
        "turns/min",
        "gen tok/s",
        "prompt tok/s",
        "server",
        "slot tok/s",
        "harness p50/agg",
        "model",
        "tools",
        "h ms p50",
        "turn p50",
        "gap p50"
    );
    for r in rows {
        let ratio = r
            .gen_vs_single
            .map(|x| format!(" ({x:.2}x)"))
            .unwrap_or_default();
        let prompt = match r.prompt_eval_tps {
            Some(e) => format!("{:.0}/{:.0}", r.prompt_tps, e),
            None => format!("{:.0}/-", r.prompt_tps),
        };
        println!(
            "{:>2} {:>7.1} {:>9.1} {:>14} {:>14} {:>8} {:>10} {:>16} {:>6} {:>6} {:>8.1} {:>10} {:>9}",
            r.workers,
            r.requests_per_min,
            r.turns_per_min,
            format!("{:.1}{ratio}", r.gen_tps),
            prompt,
            r.server_tps.map_or("-".into(), |x| format!("{x:.1}")),
            r.per_stream_gen_tps
                .map(|x| format!("{x:.1}"))
                .unwrap_or_else(|| "-".into()),
            format!(
                "{}/{}",
                pct_str(r.harness_share_p50),
                pct_str(r.harness_share_agg)
            ),
            pct_str(r.model_share_agg),
            pct_str(r.tools_share_agg),
            r.harness_ms_p50,
            secs_str(r.turn_ms_p50),
            r.between_turns_ms_p50.map_or("-".into(), secs_str),
        );
    }
    println!();
    println!("gen tok/s: completion tokens of all workers / run seconds (x: of the single stream); prompt tok/s: sent / evaluated by the server (not from its cache);");
    println!("server: prompt tokens evaluated + tokens generated, per second;");
    println!("slot tok/s: decode speed of one request while it decoded (server timings); harness: (turn wall - model_ms - tools_ms) / turn wall, p50 over turns / aggregate;");
    println!("model, tools: aggregate shares of turn wall time; h ms p50: harness ms per turn; gap: one turn's end to the same worker's next start (includes waiting for events and the idle timeout)");
    println!();
    for r in rows {
        let reasons: Vec<String> = r
            .stop_reasons
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect();
        println!(
            "N={}: {} turns ({}), {} requests (+{} in flight at the end), {} invalid actions, {} completion / {} prompt tokens (evaluated {}), harness ms p90 {:.1}, {} gaps between turns (p90 {}), first turn after {}, server ready in {:.1} s, CPU: this benchmark and its server {:.2} cores, everything else {:.2} cores, workers failed {}, processes left {}",
            r.workers,
            r.turns,
            reasons.join(", "),
            r.requests,
            r.in_flight,
            r.invalid_actions,
            r.completion_tokens,
            r.prompt_tokens,
            r.prompt_tokens_evaluated
                .map(|x| x.to_string())
                .unwrap_or_else(|| "-".into()),
            r.harness_ms_p90,
            r.between_turns,
            r.between_turns_ms_p90.map_or("-".into(), secs_str),
            secs_str(r.first_turn_ms_p50),
            r.server_ready_secs,
            r.cpu_ours_cores,
            r.cpu_others_cores,
            r.workers_failed,
            r.processes_left
        );
    }
}

/// Installs the model with a line per step and the join's progress every 10 %.
async fn install(data: &Path, size: Size) -> Result<Installed> {
    let mut step = String::new();
    let mut tenth = 0u64;
    let mut on = move |p: InstallProgress| {
        if p.step != step {
            eprintln!("  {}", p.step);
            step = p.step.clone();
            tenth = 0;
        }
        if let Some(t) = (p.done * 10).checked_div(p.total) {
            if t > tenth {
                tenth = t;
                eprintln!("    {}%", t * 10);
            }
        }
    };
    Ok(agensh_model::install(data, size, false, &mut on).await?)
}

/// `--example`, else `examples/textkit` here, else the one of this source tree.
fn example_dir(flag: Option<&Path>) -> Result<PathBuf> {
    let candidates: Vec<PathBuf> = match flag {
        Some(p) => vec![p.to_path_buf()],
        None => vec![
            PathBuf::from("examples/textkit"),
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/textkit"),
        ],
    };
    for c in &candidates {
        if c.join("agensh.toml").is_file() {
            return Ok(std::path::absolute(c)?);
        }
    }
    bail!(
        "no example organization at {} — give one with --example DIR (with agensh.toml and its seed)",
        candidates[0].display()
    )
}

/// Live (not zombie) processes that are our children or in the server's process group.
fn processes_left(server_pgid: Option<i32>) -> Vec<u32> {
    let me = std::process::id();
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let left: Vec<u32> = std::fs::read_dir("/proc")
            .map(|d| {
                d.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
                    .filter(|&pid| {
                        let Ok(s) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
                            return false;
                        };
                        let Some(rest) = s.rfind(')').map(|i| &s[i + 2..]) else {
                            return false;
                        };
                        let f: Vec<&str> = rest.split_whitespace().take(3).collect();
                        let (state, ppid, pgrp) = match f.as_slice() {
                            [st, pp, pg] => (*st, pp.parse::<u32>(), pg.parse::<i32>()),
                            _ => return false,
                        };
                        state != "Z"
                            && (ppid == Ok(me)
                                || (server_pgid.is_some() && pgrp.ok() == server_pgid))
                    })
                    .collect()
            })
            .unwrap_or_default();
        if left.is_empty() || Instant::now() > deadline {
            return left;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn pct(v: &[f64], p: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let rank = ((p / 100.0) * s.len() as f64).ceil() as usize;
    s[rank.clamp(1, s.len()) - 1]
}

fn median(v: &[f64]) -> f64 {
    pct(v, 50.0)
}

fn pct_str(x: f64) -> String {
    format!("{:.1}%", x * 100.0)
}

fn secs_str(ms: f64) -> String {
    if ms >= 1000.0 {
        format!("{:.1} s", ms / 1000.0)
    } else {
        format!("{ms:.0} ms")
    }
}

fn round1(x: f64) -> f64 {
    (x * 10.0).round() / 10.0
}

fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_llama_timing_lines() {
        assert_eq!(
            ms_and_tokens("     734.46 ms /    99 tokens (    7.42 ms per token)"),
            Some((734.46, 99))
        );
        assert_eq!(ms_and_tokens(" nothing"), None);
    }

    #[test]
    fn percentiles_are_nearest_rank() {
        let v: Vec<f64> = (1..=10).map(f64::from).collect();
        assert_eq!(pct(&v, 50.0), 5.0);
        assert_eq!(pct(&v, 90.0), 9.0);
        assert_eq!(pct(&[], 50.0), 0.0);
    }
}
