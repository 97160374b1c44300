//! Riding out a hub restart: a request that could not reach the hub is sent again, with
//! backoff, for a bounded time.
//!
//! Only what the hub certainly did not process is sent again: a connection that could not
//! be made (the hub is down or restarting), and a refusal the hub marks
//! `x-agensh-unprocessed` (over `hub.max_connections`: it answers before reading the
//! request). A request that reached the hub and then lost its answer is not: it may have
//! taken effect, and sending it again could, say, post a record twice.

use std::time::Duration;

use reqwest::{RequestBuilder, Response};

pub use agensh_protocol::rest::UNPROCESSED_HEADER;

/// How long the node and the MCP bridges keep trying to reach a hub that is down before an
/// agent sees an error: long enough for a hub to be restarted.
pub const HUB_RESTART_WINDOW: Duration = Duration::from_secs(60);

/// The first wait before trying again; it doubles up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(100);
const MAX_BACKOFF: Duration = Duration::from_secs(2);

/// Whether `r` says the hub did not process the request at all.
pub fn unprocessed(r: &Response) -> bool {
    r.headers().contains_key(UNPROCESSED_HEADER)
}

/// Sends `req`; while the hub cannot be reached (or answers that it processed nothing),
/// sends it again with backoff until `window` has passed. Returns the last answer or
/// error. A request whose body cannot be copied (a stream) is sent once.
pub async fn send(req: RequestBuilder, window: Duration) -> reqwest::Result<Response> {
    let started = tokio::time::Instant::now();
    let mut backoff = FIRST_BACKOFF;
    let mut req = req;
    loop {
        let again = req.try_clone();
        let answer = req.send().await;
        let retry = match &answer {
            Err(e) => e.is_connect(),
            Ok(r) => unprocessed(r),
        };
        let Some(next) = again.filter(|_| retry) else {
            return answer;
        };
        let waited = started.elapsed();
        if waited + backoff > window {
            return answer;
        }
        if backoff == FIRST_BACKOFF {
            tracing::info!(
                "the hub cannot be reached; trying again for up to {} s",
                window.as_secs()
            );
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(MAX_BACKOFF);
        req = next;
    }
}

/// `read` (a call that changes nothing) made again while the hub cannot be reached, every
/// 200 ms for up to `window`: a read whose connection broke after it was sent (the hub
/// killed meanwhile) is safe to send again too. For a process that starts while its hub
/// restarts (`agensh node`).
pub async fn read_until_reachable<T, F>(window: Duration, read: impl Fn() -> F) -> crate::Result<T>
where
    F: std::future::Future<Output = crate::Result<T>>,
{
    let deadline = std::time::Instant::now() + window;
    loop {
        match read().await {
            Err(e) if e.code == "unreachable" && std::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            r => return r,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A port nothing listens on (bound, then closed).
    fn closed_port() -> u16 {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    }

    #[tokio::test]
    async fn a_hub_that_comes_up_within_the_window_gets_the_request() {
        let port = closed_port();
        let server = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(700)).await;
            let l = tokio::net::TcpListener::bind(("127.0.0.1", port))
                .await
                .unwrap();
            let (mut s, _) = l.accept().await.unwrap();
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            let mut buf = [0u8; 1024];
            let _ = s.read(&mut buf).await.unwrap();
            s.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok")
                .await
                .unwrap();
        });
        let http = reqwest::Client::new();
        let started = std::time::Instant::now();
        let r = send(
            http.post(format!("http://127.0.0.1:{port}/x"))
                .body("hello"),
            Duration::from_secs(10),
        )
        .await
        .expect("the request goes through once the server is up");
        assert_eq!(r.text().await.unwrap(), "ok");
        assert!(started.elapsed() >= Duration::from_millis(600));
        server.await.unwrap();
    }

    #[tokio::test]
    async fn past_the_window_the_connection_error_comes_back() {
        let port = closed_port();
        let started = std::time::Instant::now();
        let e = send(
            reqwest::Client::new().get(format!("http://127.0.0.1:{port}/x")),
            Duration::from_millis(500),
        )
        .await
        .unwrap_err();
        assert!(e.is_connect());
        let took = started.elapsed();
        assert!(took >= Duration::from_millis(250), "{took:?}");
        assert!(took < Duration::from_secs(3), "{took:?}");
    }

    #[tokio::test]
    async fn an_answer_that_was_processed_is_not_sent_again() {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = l.local_addr().unwrap().port();
        let server = tokio::spawn(async move {
            let mut served = 0;
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            while let Ok(Ok((mut s, _))) =
                tokio::time::timeout(Duration::from_millis(800), l.accept()).await
            {
                let mut buf = [0u8; 1024];
                let _ = s.read(&mut buf).await.unwrap();
                served += 1;
                // The first answer says nothing was processed; the second is a plain 503.
                let head = if served == 1 {
                    "HTTP/1.1 503 Service Unavailable\r\nx-agensh-unprocessed: 1\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
                } else {
                    "HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
                };
                s.write_all(head.as_bytes()).await.unwrap();
            }
            served
        });
        let r = send(
            reqwest::Client::new()
                .post(format!("http://127.0.0.1:{port}/x"))
                .body("b"),
            Duration::from_secs(10),
        )
        .await
        .unwrap();
        assert_eq!(r.status().as_u16(), 503);
        assert!(!unprocessed(&r));
        assert_eq!(server.await.unwrap(), 2, "sent again once, then not");
    }
}
