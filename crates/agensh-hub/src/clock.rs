//! Where the hub reads the time: every timestamp it stores and every lease, expiry and
//! activity check it makes comes from one [`Clock`], so tests can set the time instead of
//! sleeping through it.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// A source of the current time in Unix milliseconds.
pub trait Clock: Send + Sync + 'static {
    /// Unix milliseconds now.
    fn now_ms(&self) -> i64;
}

/// The machine's wall clock: what a real hub runs on.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> i64 {
        agensh_domain::time::unix_ms(SystemTime::now())
    }
}

/// A clock that moves only when told to; clones share the same time, so a test keeps one
/// clone and hands another to the hub.
#[derive(Debug, Clone)]
pub struct ManualClock {
    ms: Arc<AtomicI64>,
}

impl ManualClock {
    /// A clock standing at `ms` (Unix milliseconds).
    pub fn at(ms: i64) -> ManualClock {
        ManualClock {
            ms: Arc::new(AtomicI64::new(ms)),
        }
    }

    /// A clock standing at the machine's time now, so its timestamps look ordinary.
    pub fn starting_now() -> ManualClock {
        ManualClock::at(SystemClock.now_ms())
    }

    /// Sets the time to `ms` (Unix milliseconds), forwards or backwards.
    pub fn set(&self, ms: i64) {
        self.ms.store(ms, Ordering::SeqCst);
    }

    /// Moves the time forward by `by`.
    pub fn advance(&self, by: Duration) {
        let by = i64::try_from(by.as_millis()).expect("an advance of less than 292 million years");
        self.ms.fetch_add(by, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> i64 {
        self.ms.load(Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manual_clock_moves_only_when_told_and_clones_share_it() {
        let clock = ManualClock::at(1_000);
        let shared = clock.clone();
        assert_eq!(shared.now_ms(), 1_000);
        clock.advance(Duration::from_millis(1_500));
        assert_eq!(shared.now_ms(), 2_500);
        clock.set(500);
        assert_eq!(shared.now_ms(), 500);
    }

    #[test]
    fn system_clock_reads_the_wall_clock() {
        let before = agensh_domain::time::unix_ms(SystemTime::now());
        let now = SystemClock.now_ms();
        let after = agensh_domain::time::unix_ms(SystemTime::now());
        assert!(
            (before..=after).contains(&now),
            "{before} <= {now} <= {after}"
        );
    }
}
