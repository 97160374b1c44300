//! What one worker may ask of the hub, and how fast (`[limits]` in agensh.toml).
//!
//! Every limit is a token bucket ([`Bucket`]): it holds up to `burst` units and refills at
//! `rate` units per second, so a worker can go fast for a while and then at the rate. The
//! defaults never bind an agent that works as agents do (a tool call every second or so);
//! they stop one worker from starving the others or filling the disk. The admin token (the
//! operator, and nodes acting for their workers) is never limited.

use serde::{Deserialize, Serialize};

use crate::error::{Error, ErrorKind, Result};

/// `[limits]`: per-worker rates and quotas. 0 turns a limit off.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LimitsConfig {
    /// Requests per second one worker may make, on average (REST, MCP tool calls and git).
    pub requests_per_sec: f64,
    /// How many requests one worker may make at once above that rate.
    pub burst: u64,
    /// Board records one worker may write per hour (all of the hour's may come at once).
    pub records_per_hour: u64,
    /// Bytes of board records (text, label, detail, paths) one worker may write per hour.
    pub record_bytes_per_hour: u64,
    /// Messages (channel posts and direct messages) one worker may send per hour.
    pub messages_per_hour: u64,
    /// Largest pack one push may send, in bytes.
    pub push_bytes: u64,
    /// Most bytes of objects that only one worker's branches hold (what its pushes added
    /// beyond `main`), counted on disk.
    pub namespace_bytes: u64,
}

impl Default for LimitsConfig {
    fn default() -> Self {
        LimitsConfig {
            requests_per_sec: 50.0,
            burst: 200,
            records_per_hour: 1_200,
            record_bytes_per_hour: 4 << 20,
            messages_per_hour: 1_200,
            push_bytes: 64 << 20,
            namespace_bytes: 1 << 30,
        }
    }
}

impl LimitsConfig {
    /// Checks the section; the error names the field and its range.
    pub fn validate(&self) -> Result<()> {
        if !self.requests_per_sec.is_finite() || self.requests_per_sec < 0.0 {
            return Err(Error::invalid(
                "bad_config",
                "agensh.toml: limits.requests_per_sec must be 0 (no limit) or a positive number",
            ));
        }
        if self.requests_per_sec > 0.0 && self.burst == 0 {
            return Err(Error::invalid(
                "bad_config",
                "agensh.toml: limits.burst must be at least 1 when limits.requests_per_sec is set",
            ));
        }
        Ok(())
    }

    /// The request bucket of one worker, or `None` when requests are not limited.
    pub fn requests(&self) -> Option<Bucket> {
        (self.requests_per_sec > 0.0).then(|| Bucket::new(self.burst as f64, self.requests_per_sec))
    }

    /// An hourly quota as a bucket: the hour's amount at once, refilled over the hour.
    pub fn hourly(per_hour: u64) -> Option<Bucket> {
        (per_hour > 0).then(|| Bucket::new(per_hour as f64, per_hour as f64 / 3_600.0))
    }

    /// The commented `[limits]` section of the template.
    pub fn template(&self) -> String {
        format!(
            r#"
[limits]
# What one worker may ask of the hub (the admin token is never limited; 0: no limit).
# Past a limit the hub answers HTTP 429 with Retry-After (MCP: a tool error) telling the
# agent to slow down; nothing is stored.
# Requests per second on average, and how many may come at once above it. Expensive
# calls weigh more: a grep 5, a board read 2, a push or fetch 5.
requests_per_sec = {rps}
burst = {burst}
# Board records, their bytes, and messages per hour.
records_per_hour = {records}
record_bytes_per_hour = {record_bytes}
messages_per_hour = {messages}
# Largest pack one push may send, and most bytes of objects only one worker's branches
# hold (what it pushed beyond main), in bytes.
push_bytes = {push}
namespace_bytes = {namespace}
"#,
            rps = toml::Value::Float(self.requests_per_sec),
            burst = self.burst,
            records = self.records_per_hour,
            record_bytes = self.record_bytes_per_hour,
            messages = self.messages_per_hour,
            push = self.push_bytes,
            namespace = self.namespace_bytes,
        )
    }
}

/// A token bucket: up to `capacity` units, refilled at `rate` units per second. Pure: the
/// caller passes the time (Unix ms).
#[derive(Debug, Clone, PartialEq)]
pub struct Bucket {
    capacity: f64,
    rate: f64,
    level: f64,
    at_ms: Option<i64>,
}

impl Bucket {
    /// A full bucket.
    pub fn new(capacity: f64, rate: f64) -> Self {
        Bucket {
            capacity,
            rate,
            level: capacity,
            at_ms: None,
        }
    }

    fn refill(&mut self, now_ms: i64) {
        if let Some(at) = self.at_ms {
            let secs = (now_ms - at).max(0) as f64 / 1_000.0;
            self.level = (self.level + secs * self.rate).min(self.capacity);
        }
        self.at_ms = Some(now_ms);
    }

    /// Takes `cost` units at `now_ms`, or says how many seconds to wait until it could
    /// (at least 1). A cost above the capacity is taken from a full bucket, so one large
    /// thing is slow, never impossible.
    pub fn take(&mut self, cost: f64, now_ms: i64) -> std::result::Result<(), u64> {
        self.refill(now_ms);
        let need = cost.min(self.capacity);
        if self.level >= need {
            self.level -= cost;
            return Ok(());
        }
        let secs = if self.rate > 0.0 {
            ((need - self.level) / self.rate).ceil()
        } else {
            3_600.0
        };
        Err((secs as u64).max(1))
    }

    /// Whether the bucket is full at `now_ms` (nothing taken lately: it can be forgotten).
    pub fn is_full(&mut self, now_ms: i64) -> bool {
        self.refill(now_ms);
        self.level >= self.capacity
    }
}

/// The refusal of one limit: HTTP 429, `Retry-After: retry_after`, and a message that
/// tells the agent what it did and to slow down.
pub fn refused(code: &str, what: &str, setting: &str, retry_after: u64) -> Error {
    Error::new(
        ErrorKind::RateLimited,
        code,
        format!(
            "{what} ({setting} in agensh.toml) — slow down: wait {retry_after} s before trying again, and do fewer, larger steps"
        ),
    )
    .retry_after(retry_after)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bucket_allows_its_burst_then_its_rate() {
        let mut b = Bucket::new(3.0, 1.0);
        for _ in 0..3 {
            assert_eq!(b.take(1.0, 0), Ok(()));
        }
        assert_eq!(b.take(1.0, 0), Err(1));
        // Half a second refills half a unit: still short.
        assert_eq!(b.take(1.0, 500), Err(1));
        assert_eq!(b.take(1.0, 1_000), Ok(()));
        assert_eq!(b.take(1.0, 1_000), Err(1));
    }

    #[test]
    fn the_wait_grows_with_the_shortfall() {
        let mut b = Bucket::new(10.0, 0.5);
        assert_eq!(b.take(10.0, 0), Ok(()));
        // 5 units at half a unit per second: 10 s.
        assert_eq!(b.take(5.0, 0), Err(10));
    }

    #[test]
    fn a_cost_above_capacity_needs_a_full_bucket_and_leaves_it_in_debt() {
        let mut b = Bucket::new(4.0, 1.0);
        assert_eq!(b.take(10.0, 0), Ok(()));
        // Six units of debt plus one: seven seconds.
        assert_eq!(b.take(1.0, 0), Err(7));
        assert_eq!(b.take(1.0, 7_000), Ok(()));
    }

    #[test]
    fn a_bucket_never_fills_past_capacity() {
        let mut b = Bucket::new(2.0, 100.0);
        assert!(b.is_full(0));
        assert_eq!(b.take(2.0, 0), Ok(()));
        assert!(!b.is_full(0));
        assert!(b.is_full(60_000));
        assert_eq!(b.take(2.0, 60_000), Ok(()));
        assert_eq!(b.take(1.0, 60_000), Err(1));
    }

    #[test]
    fn hourly_quotas_refill_over_the_hour_and_zero_is_off() {
        assert!(LimitsConfig::hourly(0).is_none());
        let mut b = LimitsConfig::hourly(3_600).unwrap();
        assert_eq!(b.take(3_600.0, 0), Ok(()));
        assert_eq!(b.take(1.0, 0), Err(1));
        assert_eq!(b.take(60.0, 0), Err(60));
        assert_eq!(b.take(60.0, 60_000), Ok(()));
    }

    #[test]
    fn refusals_are_429s_that_say_how_long_to_wait() {
        let e = refused(
            "rate_limited",
            "w01 made more than 50 requests per second",
            "limits.requests_per_sec",
            3,
        );
        assert_eq!(e.kind, ErrorKind::RateLimited);
        assert_eq!(e.retry_after_secs, Some(3));
        assert!(e.message.contains("wait 3 s"), "{}", e.message);
        assert!(
            e.message.contains("limits.requests_per_sec"),
            "{}",
            e.message
        );
    }

    #[test]
    fn the_config_is_checked() {
        assert!(LimitsConfig::default().validate().is_ok());
        let bad = LimitsConfig {
            requests_per_sec: -1.0,
            ..LimitsConfig::default()
        };
        assert!(bad.validate().is_err());
        let bad = LimitsConfig {
            burst: 0,
            ..LimitsConfig::default()
        };
        assert!(bad.validate().is_err());
        let off = LimitsConfig {
            requests_per_sec: 0.0,
            burst: 0,
            ..LimitsConfig::default()
        };
        assert!(off.validate().is_ok());
        assert!(off.requests().is_none());
    }
}
