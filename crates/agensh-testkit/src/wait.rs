//! Waiting for something a test cannot be told about, with a limit.

use std::time::{Duration, Instant};

/// Waits until `ok` holds, looking every 20 ms; fails the test with "timed out waiting for
/// `what`" once `limit` has passed.
pub async fn wait_until(limit: Duration, what: &str, mut ok: impl AsyncFnMut() -> bool) {
    let started = Instant::now();
    while !ok().await {
        assert!(started.elapsed() < limit, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// [`wait_until`] for a test that runs no async runtime, looking every 100 ms.
pub fn wait_until_blocking(limit: Duration, what: &str, mut ok: impl FnMut() -> bool) {
    let started = Instant::now();
    while !ok() {
        assert!(started.elapsed() < limit, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn it_returns_once_the_condition_holds() {
        let mut n = 0;
        wait_until(Duration::from_secs(5), "three looks", async || {
            n += 1;
            n == 3
        })
        .await;
        assert_eq!(n, 3);
    }

    #[test]
    #[should_panic(expected = "timed out waiting for nothing")]
    fn it_fails_with_what_was_awaited() {
        wait_until_blocking(Duration::from_millis(10), "nothing", || false);
    }
}
