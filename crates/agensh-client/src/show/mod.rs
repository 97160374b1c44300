//! The hub's data as people read it: pure functions from domain and protocol types to the
//! lines the command line prints (`agensh pr view`, `status`, `budget`, …) and the run's
//! live view draws. No IO: the caller passes `now` and prints the lines it is given, each
//! through its own escape of what could act on a terminal.

pub mod board;
pub mod issue;
pub mod org;
pub mod pr;
pub mod watch;

use std::collections::BTreeMap;
use std::time::Duration;

use agensh_protocol::rest::ModelUsage;

/// `1h02m03s`, `4m05s`, `9s`.
pub fn clock(d: Duration) -> String {
    let s = d.as_secs();
    match (s / 3600, s / 60 % 60, s % 60) {
        (0, 0, s) => format!("{s}s"),
        (0, m, s) => format!("{m}m{s:02}s"),
        (h, m, s) => format!("{h}h{m:02}m{s:02}s"),
    }
}

/// `950`, `12.3k`, `1.2M`.
pub fn count(n: u64) -> String {
    match n {
        0..=999 => n.to_string(),
        1_000..=999_999 => format!("{:.1}k", n as f64 / 1e3),
        _ => format!("{:.1}M", n as f64 / 1e6),
    }
}

/// The gateway's usage summed per worker over its models (the key `""` holds the whole
/// organization's).
pub fn per_worker(rows: &[ModelUsage]) -> BTreeMap<String, ModelUsage> {
    let mut out: BTreeMap<String, ModelUsage> = BTreeMap::new();
    for r in rows {
        for key in [r.worker.as_str(), ""] {
            let t = out.entry(key.to_string()).or_insert_with(|| ModelUsage {
                worker: key.to_string(),
                ..ModelUsage::default()
            });
            t.requests += r.requests;
            t.input_tokens += r.input_tokens;
            t.cached_input_tokens += r.cached_input_tokens;
            t.output_tokens += r.output_tokens;
            t.cost_usd += r.cost_usd;
            if !t.model.split(", ").any(|m| m == r.model) {
                if !t.model.is_empty() {
                    t.model.push_str(", ");
                }
                t.model.push_str(&r.model);
            }
        }
    }
    out
}

/// Usage counted by the gateway, as JSON.
pub fn gateway_json(u: Option<&ModelUsage>) -> serde_json::Value {
    let u = u.cloned().unwrap_or_default();
    serde_json::json!({
        "requests": u.requests, "input_tokens": u.input_tokens,
        "cached_input_tokens": u.cached_input_tokens, "output_tokens": u.output_tokens,
        "cost_usd": u.cost_usd,
    })
}

/// Usage counted by the gateway, in words.
pub fn gateway_text(u: &ModelUsage) -> String {
    format!(
        "{} model request(s) through the gateway: tokens in {} (cached {}) out {}; cost ${:.4}",
        u.requests, u.input_tokens, u.cached_input_tokens, u.output_tokens, u.cost_usd
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clocks_and_counts() {
        assert_eq!(clock(Duration::from_secs(9)), "9s");
        assert_eq!(clock(Duration::from_secs(245)), "4m05s");
        assert_eq!(clock(Duration::from_secs(3_723)), "1h02m03s");
        assert_eq!(count(950), "950");
        assert_eq!(count(12_300), "12.3k");
        assert_eq!(count(1_200_000), "1.2M");
    }

    #[test]
    fn usage_is_summed_per_worker_and_for_the_organization() {
        let row = |worker: &str, model: &str, tokens: u64| ModelUsage {
            worker: worker.into(),
            model: model.into(),
            requests: 1,
            input_tokens: tokens,
            ..ModelUsage::default()
        };
        let all = per_worker(&[row("w01", "a", 10), row("w01", "b", 5), row("w02", "a", 1)]);
        assert_eq!(all["w01"].input_tokens, 15);
        assert_eq!(all["w01"].model, "a, b");
        assert_eq!(all[""].requests, 3);
        assert_eq!(all[""].model, "a, b");
        assert_eq!(
            gateway_text(&all[""]),
            "3 model request(s) through the gateway: tokens in 16 (cached 0) out 0; cost $0.0000"
        );
    }
}
