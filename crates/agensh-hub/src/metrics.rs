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
    pub greps: AtomicU64,
    pub merges: AtomicU64,
    pub merge_conflicts: AtomicU64,
    pub gate_failures: AtomicU64,
    pub long_polls_waiting: AtomicU64,
    /// Long-polls that found nothing pending and began to wait (cancelled ones included).
    pub long_polls: AtomicU64,
}

/// Adds one to a counter.
pub fn inc(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

impl Metrics {
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
        out
    }
}

/// This process's resident memory, from /proc (Linux only).
pub fn resident_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}
