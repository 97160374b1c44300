//! How fast the model server is on this machine, measured with one request alone, and the
//! number of workers that speed carries ([`workers_for`]).

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::error::{Error, Result};

/// Prompt tokens a typical step of the built-in agent makes the server read (the new part
/// of the conversation; the server's prompt cache holds the rest), measured in the turn
/// logs of the local model.
pub const STEP_PROMPT_TOKENS: f64 = 600.0;
/// Tokens a typical step generates (one action with its arguments).
pub const STEP_GENERATED_TOKENS: f64 = 120.0;
/// The longest a step should take for each of the workers that share the server: past
/// about a minute per step, a 20-minute run gets too few steps per worker to finish a part.
pub const STEP_TARGET_SECS: f64 = 60.0;

/// Longest the probe request may take (a slow machine reading the prompt the first time).
const PROBE_TIMEOUT: Duration = Duration::from_secs(180);
/// Tokens the probe generates.
const PROBE_GENERATED: u64 = 32;

/// The server's speed for one request alone.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Throughput {
    /// Prompt tokens read per second.
    pub prompt_per_sec: f64,
    /// Tokens generated per second.
    pub generated_per_sec: f64,
}

impl Throughput {
    /// Seconds a typical step takes with the server to itself.
    pub fn step_secs(&self) -> f64 {
        STEP_PROMPT_TOKENS / self.prompt_per_sec.max(1e-3)
            + STEP_GENERATED_TOKENS / self.generated_per_sec.max(1e-3)
    }
}

/// A worker count and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerCount {
    pub workers: usize,
    /// One line for the user: the measured speed and the rule that gave the count.
    pub reason: String,
}

/// The workers one server of speed `t` carries, between 1 and `most`: as many as share
/// it while each one's typical step ([`STEP_PROMPT_TOKENS`] read, [`STEP_GENERATED_TOKENS`]
/// generated) still takes at most [`STEP_TARGET_SECS`], the server's time shared evenly.
/// More would keep the server no busier and make every worker slower.
pub fn workers_for(t: &Throughput, most: usize) -> WorkerCount {
    let alone = t.step_secs();
    let fit = (STEP_TARGET_SECS / alone).floor() as usize;
    let workers = fit.clamp(1, most.max(1));
    let shared = alone * workers as f64;
    let limit = if fit > most {
        format!(" (at most {most})")
    } else {
        String::new()
    };
    WorkerCount {
        workers,
        reason: format!(
            "{workers} worker(s){limit}: the model server reads {:.0} prompt tokens/s and generates {:.1} tokens/s here, so a typical step ({STEP_PROMPT_TOKENS:.0} tokens in, {STEP_GENERATED_TOKENS:.0} out) takes {alone:.0} s alone and {shared:.0} s with {workers} sharing it; the rule keeps a step under {STEP_TARGET_SECS:.0} s",
            t.prompt_per_sec, t.generated_per_sec
        ),
    }
}

/// Measures the server at `base_url` (`…/v1`) serving `model`: one chat request with a
/// prompt of a few hundred tokens, read without the prompt cache, and
/// [`PROBE_GENERATED`] tokens generated. Uses llama.cpp's `timings` when the answer has
/// them, else the request's time.
pub async fn measure(base_url: &str, model: &str) -> Result<Throughput> {
    let filler: String = (0..24)
        .map(|i| {
            format!(
                "def step_{i}(value):\n    return value * {i} + {}\n\n",
                i * 7
            )
        })
        .collect();
    let body = json!({
        "model": model,
        "messages": [
            { "role": "system", "content": "You are a careful Python reviewer." },
            { "role": "user", "content": format!("{filler}\nDescribe what these functions do.") },
        ],
        "max_tokens": PROBE_GENERATED,
        "temperature": 0,
        "cache_prompt": false,
        "ignore_eos": true,
    });
    let url = format!("{}/chat/completions", base_url.trim_end_matches('/'));
    let failed = |detail: String| Error::Probe {
        url: url.clone(),
        detail,
    };
    let client = reqwest::Client::builder()
        .no_proxy()
        .timeout(PROBE_TIMEOUT)
        .build()
        .map_err(|e| failed(e.to_string()))?;
    let started = Instant::now();
    let answer = client
        .post(&url)
        .json(&body)
        .send()
        .await
        .map_err(|e| failed(e.to_string()))?;
    let status = answer.status();
    let answer: Value = answer.json().await.map_err(|e| failed(e.to_string()))?;
    if !status.is_success() {
        return Err(failed(format!("HTTP {status}: {answer:.300}")));
    }
    throughput_of(&answer, started.elapsed()).ok_or_else(|| {
        failed(format!(
            "the answer has neither timings nor usage: {answer:.300}"
        ))
    })
}

/// The speed in a chat answer: llama.cpp's `timings` (prompt and generation measured
/// apart), else `usage` over the whole request's time (both rates then count it whole).
fn throughput_of(answer: &Value, took: Duration) -> Option<Throughput> {
    let rate = |v: &Value, key: &str| v.get(key).and_then(Value::as_f64).filter(|r| *r > 0.0);
    if let Some(t) = answer.get("timings") {
        if let (Some(p), Some(g)) = (
            rate(t, "prompt_per_second"),
            rate(t, "predicted_per_second"),
        ) {
            return Some(Throughput {
                prompt_per_sec: p,
                generated_per_sec: g,
            });
        }
    }
    let usage = answer.get("usage")?;
    let secs = took.as_secs_f64().max(1e-3);
    Some(Throughput {
        prompt_per_sec: rate(usage, "prompt_tokens")? / secs,
        generated_per_sec: rate(usage, "completion_tokens")? / secs,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn speed(prompt: f64, generated: f64) -> Throughput {
        Throughput {
            prompt_per_sec: prompt,
            generated_per_sec: generated,
        }
    }

    #[test]
    fn the_worker_count_keeps_each_step_under_the_target() {
        // The 1.5B model on 2 cores: 600/60 + 120/10 = 22 s a step alone; 2 × 22 < 60.
        let c = workers_for(&speed(60.0, 10.0), 8);
        assert_eq!(c.workers, 2, "{}", c.reason);
        assert!(c.reason.contains("60 prompt tokens/s"), "{}", c.reason);
        assert!(c.reason.contains("10.0 tokens/s"), "{}", c.reason);
        assert!(
            c.reason.contains("22 s alone and 44 s with 2"),
            "{}",
            c.reason
        );
        // The 0.5B model on 2 cores: 600/80 + 120/15 = 15.5 s; 3 × 15.5 < 60.
        assert_eq!(workers_for(&speed(80.0, 15.0), 8).workers, 3);
    }

    #[test]
    fn a_slow_server_still_gets_one_worker_and_a_fast_one_at_most_the_slots() {
        assert_eq!(workers_for(&speed(10.0, 2.0), 8).workers, 1);
        let fast = workers_for(&speed(2_000.0, 100.0), 8);
        assert_eq!(fast.workers, 8);
        assert!(fast.reason.contains("(at most 8)"), "{}", fast.reason);
    }

    #[test]
    fn llama_cpp_timings_are_preferred_over_usage() {
        let answer = json!({
            "usage": { "prompt_tokens": 300, "completion_tokens": 32 },
            "timings": { "prompt_per_second": 61.5, "predicted_per_second": 9.8 },
        });
        let t = throughput_of(&answer, Duration::from_secs(8)).unwrap();
        assert_eq!(t, speed(61.5, 9.8));
        let t =
            throughput_of(&json!({ "usage": answer["usage"] }), Duration::from_secs(8)).unwrap();
        assert_eq!(t, speed(37.5, 4.0));
        assert_eq!(throughput_of(&json!({}), Duration::from_secs(1)), None);
    }
}
