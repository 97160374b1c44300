//! Percentiles over samples.

use std::time::Duration;

/// The `p`-th percentile (0–100) of `samples`, nearest-rank; zero when empty.
pub fn percentile(samples: &[Duration], p: f64) -> Duration {
    if samples.is_empty() {
        return Duration::ZERO;
    }
    let mut v = samples.to_vec();
    v.sort();
    let rank = ((p / 100.0) * v.len() as f64).ceil() as usize;
    v[rank.clamp(1, v.len()) - 1]
}

/// Milliseconds with two decimals.
pub fn ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 100_000.0).round() / 100.0
}

/// CPU seconds (user and system) of `/proc/<pid>` (`self` for this process) and of its
/// children it waited for; 0 for a process that is gone.
pub fn cpu_secs(pid: &str) -> f64 {
    let tick = agensh_process::resources::clock_ticks_per_second() as f64;
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            // From the state (field 3) on; utime, stime, cutime, cstime are fields 14–17.
            let f: Vec<&str> = s[s.rfind(')')? + 2..].split_whitespace().collect();
            let n = |i: usize| f.get(i - 3).and_then(|x| x.parse::<f64>().ok());
            Some(n(14)? + n(15)? + n(16)? + n(17)?)
        })
        .unwrap_or(0.0)
        / tick
}

/// The `agensh` binary to benchmark, as an absolute path (benchmarks start it from other
/// directories): `given`, else the one next to this benchmark binary; an error that says
/// how to build it when it is not there.
/// The flags of every benchmark that runs `agensh`.
#[derive(clap::Args)]
pub struct Common {
    /// The `agensh` binary (default: next to this one).
    #[arg(long)]
    pub agensh: Option<std::path::PathBuf>,
    /// Print the results as JSON.
    #[arg(long)]
    pub json: bool,
}

pub fn agensh_binary(given: Option<&std::path::Path>) -> anyhow::Result<std::path::PathBuf> {
    let path = match given {
        Some(p) => std::path::absolute(p)?,
        None => std::env::current_exe()?.with_file_name("agensh"),
    };
    if !path.is_file() {
        anyhow::bail!(
            "no agensh binary at {} — build it with `cargo build --release -p agensh` or give --agensh PATH",
            path.display()
        );
    }
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let s: Vec<Duration> = (1..=100).map(Duration::from_millis).collect();
        assert_eq!(percentile(&s, 50.0), Duration::from_millis(50));
        assert_eq!(percentile(&s, 99.0), Duration::from_millis(99));
        assert_eq!(percentile(&s, 100.0), Duration::from_millis(100));
        assert_eq!(percentile(&[], 50.0), Duration::ZERO);
    }
}
