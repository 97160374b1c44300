//! Counters the hub exposes at `/metrics` in the Prometheus text format.

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};

/// The hub's counters and gauges; all lock-free.
#[derive(Default)]
pub struct Metrics {
    pub requests: AtomicU64,
    pub client_errors: AtomicU64,
    pub server_errors: AtomicU64,
    pub records_appended: AtomicU64,
    pub messages_posted: AtomicU64,
    pub events_delivered: AtomicU64,
    pub events_acked: AtomicU64,
    /// Receipts newly presented (`/events/presented`, tool results' notices).
    pub events_presented: AtomicU64,
    pub greps: AtomicU64,
    pub merges: AtomicU64,
    pub merge_conflicts: AtomicU64,
    pub gate_failures: AtomicU64,
    pub long_polls_waiting: AtomicU64,
    /// Long-polls that found nothing pending and began to wait (cancelled ones included).
    pub long_polls: AtomicU64,
    /// Model requests through the gateway that reached their end (any status).
    pub model_requests: AtomicU64,
    /// Of them, answered with an error status (or cut off).
    pub model_errors: AtomicU64,
    pub model_input_tokens: AtomicU64,
    pub model_cached_input_tokens: AtomicU64,
    pub model_output_tokens: AtomicU64,
    /// Cost in millionths of a dollar.
    pub model_cost_micros: AtomicU64,
    /// Tries again after a refusal or a dropped connection.
    pub model_retries: AtomicU64,
    /// Connections accepted.
    pub connections: AtomicU64,
    /// Connections refused over `hub.max_connections`.
    pub connections_refused: AtomicU64,
    /// Requests stopped at `hub.request_timeout_secs`.
    pub request_timeouts: AtomicU64,
    /// Requests refused past a worker's `[limits]`.
    pub rate_limited: AtomicU64,
    /// CLAIM records appended, and those that overlapped another worker's live claim.
    pub claims: AtomicU64,
    pub claim_overlaps: AtomicU64,
    /// Seconds from a `ship` to its PR merged, the latest [`Latencies::KEPT`].
    pub ship_to_merged: Latencies,
}

/// The latest durations of something, for its quantiles.
#[derive(Default)]
pub struct Latencies {
    kept: std::sync::Mutex<std::collections::VecDeque<f64>>,
    count: AtomicU64,
    /// Sum in milliseconds.
    sum_ms: AtomicU64,
}

impl Latencies {
    /// Durations kept for the quantiles.
    pub const KEPT: usize = 4096;

    pub fn note(&self, d: std::time::Duration) {
        inc(&self.count);
        self.sum_ms
            .fetch_add(d.as_millis() as u64, Ordering::Relaxed);
        let mut kept = self.kept.lock().unwrap_or_else(|p| p.into_inner());
        if kept.len() == Self::KEPT {
            kept.pop_front();
        }
        kept.push_back(d.as_secs_f64());
    }

    /// The `q` quantile (0..=1) of the kept durations, nearest rank; none before the first.
    pub fn quantile(&self, q: f64) -> Option<f64> {
        let mut v: Vec<f64> = self
            .kept
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .copied()
            .collect();
        if v.is_empty() {
            return None;
        }
        v.sort_by(f64::total_cmp);
        let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
        Some(v[rank - 1])
    }

    /// Appends it as a Prometheus summary: p50, p99, count and sum.
    fn render(&self, out: &mut String, name: &str, help: &str) {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} summary");
        for q in [0.5, 0.99] {
            if let Some(v) = self.quantile(q) {
                let _ = writeln!(out, "{name}{{quantile=\"{q}\"}} {v:.3}");
            }
        }
        let _ = writeln!(
            out,
            "{name}_count {}\n{name}_sum {:.3}",
            self.count.load(Ordering::Relaxed),
            self.sum_ms.load(Ordering::Relaxed) as f64 / 1e3
        );
    }
}

/// Adds one to a counter.
pub fn inc(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

impl Metrics {
    /// Counts a model request's end: its usage, its cost and whether it failed.
    pub fn note_model(&self, u: &agensh_protocol::model_usage::TokenUsage, cost: f64, status: u16) {
        inc(&self.model_requests);
        if status >= 400 {
            inc(&self.model_errors);
        }
        let add = |c: &AtomicU64, v: u64| c.fetch_add(v, Ordering::Relaxed);
        add(&self.model_input_tokens, u.input);
        add(&self.model_cached_input_tokens, u.cached_input);
        add(&self.model_output_tokens, u.output);
        add(&self.model_cost_micros, (cost * 1e6).round() as u64);
    }

    /// Renders every metric, plus the worker count and resident memory given by the caller.
    pub fn render(&self, workers: usize, rss_bytes: Option<u64>) -> String {
        let mut out = String::new();
        let mut metric = |name: &str, kind: &str, help: &str, v: u64| {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {v}"
            );
        };
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        metric(
            "agensh_http_requests_total",
            "counter",
            "HTTP requests served.",
            get(&self.requests),
        );
        metric(
            "agensh_http_client_errors_total",
            "counter",
            "Requests answered with a 4xx status.",
            get(&self.client_errors),
        );
        metric(
            "agensh_http_server_errors_total",
            "counter",
            "Requests answered with a 5xx status.",
            get(&self.server_errors),
        );
        metric(
            "agensh_board_records_total",
            "counter",
            "Board records appended.",
            get(&self.records_appended),
        );
        metric(
            "agensh_messages_total",
            "counter",
            "Messages posted.",
            get(&self.messages_posted),
        );
        metric(
            "agensh_events_delivered_total",
            "counter",
            "Events returned to workers (redeliveries included).",
            get(&self.events_delivered),
        );
        metric(
            "agensh_events_acked_total",
            "counter",
            "Events newly acknowledged.",
            get(&self.events_acked),
        );
        metric(
            "agensh_events_presented_total",
            "counter",
            "Delivery receipts newly presented (shown to their worker in a prompt or a tool result).",
            get(&self.events_presented),
        );
        metric(
            "agensh_board_greps_total",
            "counter",
            "Board searches run.",
            get(&self.greps),
        );
        metric(
            "agensh_merges_total",
            "counter",
            "Pull requests merged into main.",
            get(&self.merges),
        );
        metric(
            "agensh_merge_conflicts_total",
            "counter",
            "Merges refused for a conflict.",
            get(&self.merge_conflicts),
        );
        metric(
            "agensh_gate_failures_total",
            "counter",
            "Merges refused by the gate.",
            get(&self.gate_failures),
        );
        metric(
            "agensh_long_polls_waiting",
            "gauge",
            "Event long-polls waiting right now.",
            get(&self.long_polls_waiting),
        );
        metric(
            "agensh_long_polls_total",
            "counter",
            "Event long-polls that began to wait.",
            get(&self.long_polls),
        );
        metric(
            "agensh_model_requests_total",
            "counter",
            "Model requests through the gateway that ended (any status).",
            get(&self.model_requests),
        );
        metric(
            "agensh_model_errors_total",
            "counter",
            "Model requests that ended with an error status or were cut off.",
            get(&self.model_errors),
        );
        metric(
            "agensh_model_input_tokens_total",
            "counter",
            "Prompt tokens of model requests, cached ones included.",
            get(&self.model_input_tokens),
        );
        metric(
            "agensh_model_cached_input_tokens_total",
            "counter",
            "Prompt tokens read from a prompt cache.",
            get(&self.model_cached_input_tokens),
        );
        metric(
            "agensh_model_output_tokens_total",
            "counter",
            "Generated tokens.",
            get(&self.model_output_tokens),
        );
        metric(
            "agensh_model_retries_total",
            "counter",
            "Model requests tried again (429, 5xx, or a connection dropped before the first byte).",
            get(&self.model_retries),
        );
        metric(
            "agensh_http_connections_total",
            "counter",
            "Connections accepted.",
            get(&self.connections),
        );
        metric(
            "agensh_http_connections_refused_total",
            "counter",
            "Connections refused over hub.max_connections.",
            get(&self.connections_refused),
        );
        metric(
            "agensh_http_request_timeouts_total",
            "counter",
            "Requests stopped at hub.request_timeout_secs.",
            get(&self.request_timeouts),
        );
        metric(
            "agensh_rate_limited_total",
            "counter",
            "Requests refused past a worker's [limits].",
            get(&self.rate_limited),
        );
        metric(
            "agensh_claims_total",
            "counter",
            "CLAIM records appended.",
            get(&self.claims),
        );
        metric(
            "agensh_claim_overlaps_total",
            "counter",
            "CLAIM records that overlapped another worker's live claim.",
            get(&self.claim_overlaps),
        );
        metric(
            "agensh_workers",
            "gauge",
            "Registered workers.",
            workers as u64,
        );
        if let Some(rss) = rss_bytes {
            metric(
                "agensh_process_resident_memory_bytes",
                "gauge",
                "Resident memory of the hub process.",
                rss,
            );
        }
        let _ = writeln!(
            out,
            "# HELP agensh_model_cost_dollars_total What model requests cost, at the upstreams' prices.\n# TYPE agensh_model_cost_dollars_total counter\nagensh_model_cost_dollars_total {}",
            get(&self.model_cost_micros) as f64 / 1e6
        );
        self.ship_to_merged.render(
            &mut out,
            "agensh_ship_to_merged_seconds",
            "Time from a ship to its PR merged (merge queue and gate included), over the latest 4096.",
        );
        out
    }
}

/// Appends how often merges moved `main` (a batch of the merge queue moves it once).
pub fn render_main_moves(out: &mut String, moves: u64) {
    let _ = writeln!(
        out,
        "# HELP agensh_main_moves_total Moves of main by merges (one per batch of the merge queue).\n# TYPE agensh_main_moves_total counter\nagensh_main_moves_total {moves}"
    );
}

/// Appends the merge train's counts: gate runs, searches, chains and their merges.
pub fn render_gates(out: &mut String, g: agensh_workspace::merge::GateStats) {
    let _ = writeln!(
        out,
        "# HELP agensh_gate_runs_total Runs of the merge gate (on gated chains and their prefixes).\n# TYPE agensh_gate_runs_total counter\nagensh_gate_runs_total {}\n# HELP agensh_gate_bisections_total Rounds of gate runs that searched a chain for the merge that failed it.\n# TYPE agensh_gate_bisections_total counter\nagensh_gate_bisections_total {}\n# HELP agensh_gate_batches_total Chains of gated merges (each folded and gated together).\n# TYPE agensh_gate_batches_total counter\nagensh_gate_batches_total {}\n# HELP agensh_gate_batched_merges_total Merge commits in those chains (divided by the chains: the mean batch size).\n# TYPE agensh_gate_batched_merges_total counter\nagensh_gate_batched_merges_total {}",
        g.runs, g.searches, g.batches, g.batched_merges
    );
}

/// The store's write timings as Prometheus histograms (seconds) and counters.
pub fn render_store(out: &mut String, w: &agensh_store::write_stats::WriteStatsSnapshot) {
    let histograms = [
        (
            "agensh_store_write_wait_seconds",
            "Time a write waited for the store's writer (queued behind other writes).",
            &w.wait,
        ),
        (
            "agensh_store_write_group_seconds",
            "Time a group of writes took from its start to its commit.",
            &w.group,
        ),
        (
            "agensh_store_commit_seconds",
            "Time a group's commit took (the durable sync).",
            &w.commit,
        ),
        (
            "agensh_store_checkpoint_seconds",
            "Time a checkpoint took to copy the WAL into the database file (beside the writer).",
            &w.checkpoint,
        ),
        (
            "agensh_store_publish_seconds",
            "Time after a group's commit spent answering its writes and publishing their events.",
            &w.publish,
        ),
    ];
    for (name, help, h) in histograms {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
        for (le, n) in h.cumulative() {
            let _ = writeln!(out, "{name}_bucket{{le=\"{le}\"}} {n}");
        }
        let _ = writeln!(out, "{name}_sum {}\n{name}_count {}", h.sum_secs, h.count());
    }
    let _ = writeln!(
        out,
        "# HELP agensh_store_write_groups_total Groups of writes committed.\n# TYPE agensh_store_write_groups_total counter\nagensh_store_write_groups_total {}",
        w.groups
    );
    let _ = writeln!(
        out,
        "# HELP agensh_store_writes_total Writes committed in groups.\n# TYPE agensh_store_writes_total counter\nagensh_store_writes_total {}",
        w.jobs
    );
    if let Some(t) = &w.writer {
        let _ = writeln!(
            out,
            "# HELP agensh_store_writer_cpu_seconds_total Time the store's writer thread ran on a CPU.\n# TYPE agensh_store_writer_cpu_seconds_total counter\nagensh_store_writer_cpu_seconds_total {}",
            t.on_cpu.as_secs_f64()
        );
        let _ = writeln!(
            out,
            "# HELP agensh_store_writer_run_queue_seconds_total Time the store's writer thread was ready to run but waited for a CPU.\n# TYPE agensh_store_writer_run_queue_seconds_total counter\nagensh_store_writer_run_queue_seconds_total {}",
            t.run_queue.as_secs_f64()
        );
    }
}

/// This process's resident memory, from /proc (Linux only).
pub fn resident_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}
