//! The hub's HTTP/1.1 server loop: every way in has a cap and a timeout.
//!
//! - **Connections**: at most `hub.max_connections` open at once; one more is answered
//!   `503` with `Retry-After` and closed, without reading it (a flood of connections costs
//!   the hub a few hundred refusals at a time, not a task each).
//! - **Headers and idle keep-alive**: a client has `hub.header_timeout_secs` to send a
//!   request's headers; hyper starts the same timer when a kept-alive connection goes
//!   idle, so a silent connection is closed after that long too.
//! - **Request bodies**: a body that stalls — no byte for `hub.body_timeout_secs` — fails
//!   ([`StallBody`]), so the handler answers or stops (a push's `http-backend` is killed).
//! - **Responses**: a client that stops reading its answer for `hub.body_timeout_secs` is
//!   cut off ([`WriteDeadline`]).
//! - **Whole requests**: `hub.request_timeout_secs` (see [`request_timeout`] for the
//!   routes with their own bound).

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use agensh_domain::{Error, ErrorKind};
use agensh_process::Shutdown;
use axum::body::{Body, Bytes, HttpBody};
use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;

use crate::error::ApiError;
use crate::metrics::inc;
use crate::state::AppState;

/// How long connections may take to finish after the hub stops accepting new ones.
const GRACE: Duration = Duration::from_secs(10);
/// Refusals being written at once; past that a connection over the cap is just closed.
const REFUSALS_AT_ONCE: usize = 256;
/// How long a refusal may take to be written and read.
const REFUSAL_TIME: Duration = Duration::from_secs(2);

/// The timeouts and caps of one server.
#[derive(Debug, Clone, Copy)]
pub struct ServeLimits {
    pub max_connections: usize,
    pub header_timeout: Duration,
    /// Longest a request body may stall, and a response wait to be read.
    pub body_timeout: Duration,
}

impl ServeLimits {
    /// The limits `agensh.toml` sets.
    pub fn of(hub: &agensh_domain::config::HubConfig) -> Self {
        ServeLimits {
            max_connections: hub.max_connections,
            header_timeout: Duration::from_secs(hub.header_timeout_secs),
            body_timeout: Duration::from_secs(hub.body_timeout_secs),
        }
    }
}

/// Serves `app` on `listener` until `shutdown` fires, then lets open connections finish
/// (long-polls answer at once on shutdown) for at most [`GRACE`].
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: ServeLimits,
    state: AppState,
    mut shutdown: Shutdown,
) -> io::Result<()> {
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let refusals = Arc::new(Semaphore::new(REFUSALS_AT_ONCE));
    let (closing, closed) = tokio::sync::watch::channel(false);
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = shutdown.wait() => break,
        };
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(e) => {
                // Out of file descriptors, or a connection reset before it was taken:
                // wait a moment instead of spinning, and go on.
                tracing::warn!("cannot accept a connection: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        match slots.clone().try_acquire_owned() {
            Ok(permit) => {
                inc(&state.metrics.connections);
                let app = app.clone();
                let closed = closed.clone();
                tokio::spawn(async move {
                    connection(stream, app, limits, closed).await;
                    drop(permit);
                });
            }
            Err(_) => {
                inc(&state.metrics.connections_refused);
                if let Ok(permit) = refusals.clone().try_acquire_owned() {
                    let max = limits.max_connections;
                    tokio::spawn(async move {
                        let _ = tokio::time::timeout(REFUSAL_TIME, refuse(stream, max)).await;
                        drop(permit);
                    });
                }
            }
        }
    }
    drop(listener);
    let _ = closing.send(true);
    let all = u32::try_from(limits.max_connections).unwrap_or(u32::MAX);
    if tokio::time::timeout(GRACE, slots.acquire_many(all))
        .await
        .is_err()
    {
        tracing::warn!(
            "connections still open {} s after shutdown were dropped",
            GRACE.as_secs()
        );
    }
    Ok(())
}

/// Serves one connection: HTTP/1.1 with the header timer, responses that must be read.
async fn connection(
    stream: TcpStream,
    app: Router,
    limits: ServeLimits,
    mut closed: tokio::sync::watch::Receiver<bool>,
) {
    let _ = stream.set_nodelay(true);
    let io = TokioIo::new(WriteDeadline::new(stream, limits.body_timeout));
    let service = hyper_util::service::TowerToHyperService::new(app);
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        .keep_alive(true);
    let conn = builder.serve_connection(io, service);
    tokio::pin!(conn);
    tokio::select! {
        r = conn.as_mut() => {
            if let Err(e) = r {
                tracing::debug!("connection ended: {e}");
            }
            return;
        }
        _ = closed.wait_for(|c| *c) => {}
    }
    conn.as_mut().graceful_shutdown();
    let _ = conn.await;
}

/// Answers a connection over the cap with `503` and closes it. The request's head is
/// read first (for at most a second), so an HTTP client sees an answer to its request
/// rather than an answer it never asked for.
async fn refuse(mut stream: TcpStream, max: usize) {
    let mut head = Vec::new();
    let mut buf = [0u8; 4096];
    let _ = tokio::time::timeout(Duration::from_secs(1), async {
        while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 16 * 1024 {
            match tokio::io::AsyncReadExt::read(&mut stream, &mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => head.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await;
    let body = serde_json::json!({ "error": {
        "code": "too_many_connections",
        "message": format!("the hub has {max} connections open, its limit (hub.max_connections in agensh.toml) — retry in a moment, and reuse connections instead of opening new ones"),
    }})
    .to_string();
    let head = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nretry-after: 1\r\n{}: 1\r\nconnection: close\r\ncontent-length: {}\r\n\r\n",
        agensh_protocol::rest::UNPROCESSED_HEADER,
        body.len()
    );
    if stream.write_all(head.as_bytes()).await.is_err()
        || stream.write_all(body.as_bytes()).await.is_err()
    {
        return;
    }
    let _ = stream.shutdown().await;
    // Read what the client sent until it closes, so closing does not reset the
    // connection under the answer before the client has read it.
    let mut sink = [0u8; 4096];
    loop {
        match tokio::io::AsyncReadExt::read(&mut stream, &mut sink).await {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
    }
}

/// A connection whose writes fail when the peer has not taken a byte for `limit`: a
/// client that stops reading its answer cannot hold the connection (and what streams to
/// it, like a fetch's `http-backend`) open.
pub struct WriteDeadline<T> {
    inner: T,
    limit: Duration,
    stalled: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl<T> WriteDeadline<T> {
    pub fn new(inner: T, limit: Duration) -> Self {
        WriteDeadline {
            inner,
            limit,
            stalled: None,
        }
    }

    /// Arms the timer on a write that could not proceed; fails once it has run out.
    fn pending(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        let limit = self.limit;
        let timer = self
            .stalled
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(limit)));
        match timer.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the client stopped reading its answer",
            ))),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for WriteDeadline<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for WriteDeadline<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        match Pin::new(&mut this.inner).poll_write(cx, buf) {
            Poll::Pending => this.pending(cx),
            done => {
                this.stalled = None;
                done
            }
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        match Pin::new(&mut this.inner).poll_write_vectored(cx, bufs) {
            Poll::Pending => this.pending(cx),
            done => {
                this.stalled = None;
                done
            }
        }
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        match Pin::new(&mut this.inner).poll_flush(cx) {
            Poll::Pending => this.pending(cx).map_ok(|_| ()),
            done => {
                this.stalled = None;
                done
            }
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

/// A request body that fails when no byte has arrived for `limit`.
pub struct StallBody {
    inner: Body,
    limit: Duration,
    timer: Pin<Box<tokio::time::Sleep>>,
    /// Whether the body has been read from yet: the timer starts at the first read, so a
    /// handler that reads late does not find it run out.
    reading: bool,
}

impl StallBody {
    pub fn new(inner: Body, limit: Duration) -> Self {
        StallBody {
            inner,
            limit,
            timer: Box::pin(tokio::time::sleep(limit)),
            reading: false,
        }
    }
}

/// The error of a stalled body; its text reaches whoever reads the body.
#[derive(Debug)]
pub struct Stalled(pub Duration);

impl std::fmt::Display for Stalled {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the request body stalled: no byte for {} s (hub.body_timeout_secs in agensh.toml) — send the body without pauses",
            self.0.as_secs()
        )
    }
}

impl std::error::Error for Stalled {}

impl HttpBody for StallBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, axum::Error>>> {
        let this = self.get_mut();
        if !this.reading {
            this.reading = true;
            let deadline = tokio::time::Instant::now() + this.limit;
            this.timer.as_mut().reset(deadline);
        }
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Pending => match this.timer.as_mut().poll(cx) {
                Poll::Ready(()) => Poll::Ready(Some(Err(axum::Error::new(Stalled(this.limit))))),
                Poll::Pending => Poll::Pending,
            },
            ready => {
                let deadline = tokio::time::Instant::now() + this.limit;
                this.timer.as_mut().reset(deadline);
                ready
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// Middleware: every request body gets the stall timer.
pub async fn stall_bodies(State(s): State<AppState>, req: Request, next: Next) -> Response {
    let limit = Duration::from_secs(s.config.hub.body_timeout_secs);
    let req = req.map(|b| Body::new(StallBody::new(b, limit)));
    next.run(req).await
}

/// How long a request may take before the hub gives up on it, or `None` when something
/// else bounds it: git (`hub.git_timeout_secs`, in [`crate::routes::git`]), the model
/// gateway (its upstream timeouts), merges and MCP (a merge waits for its gate,
/// `merge.gate_timeout_secs`). Long-polls get their longest wait on top.
pub fn request_timeout(
    config: &agensh_domain::config::Config,
    method: &Method,
    path: &str,
) -> Option<Duration> {
    let base = config.hub.request_timeout_secs;
    if path.starts_with("/git/") || path.starts_with("/v1/") || path == crate::paths::MCP {
        return None;
    }
    if path.starts_with("/api/v1/prs/") && path.ends_with("/merge") || path == "/api/v1/ship" {
        return None;
    }
    let long_poll =
        (path == "/api/v1/events" && method == Method::GET) || path == "/api/v1/events/poll";
    let secs = if long_poll {
        base + config.hub.max_wait_secs
    } else {
        base
    };
    Some(Duration::from_secs(secs))
}

/// Middleware: answers `503 request_timeout` for a request that takes longer than
/// [`request_timeout`] allows.
pub async fn time_requests(State(s): State<AppState>, req: Request, next: Next) -> Response {
    let Some(limit) = request_timeout(&s.config, req.method(), req.uri().path()) else {
        return next.run(req).await;
    };
    match tokio::time::timeout(limit, next.run(req)).await {
        Ok(r) => r,
        Err(_) => {
            inc(&s.metrics.request_timeouts);
            let mut r = ApiError(Error::new(
                ErrorKind::Internal,
                "request_timeout",
                format!(
                    "the request took longer than {} s (hub.request_timeout_secs in agensh.toml) and was stopped — if it read a body, send it without pauses; else retry, and ask for less at once",
                    limit.as_secs()
                ),
            ))
            .into_response();
            *r.status_mut() = axum::http::StatusCode::SERVICE_UNAVAILABLE;
            r.headers_mut().insert(
                axum::http::header::RETRY_AFTER,
                HeaderValue::from_static("1"),
            );
            r
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agensh_domain::config::Config;

    #[test]
    fn timeouts_leave_out_what_has_its_own_bound() {
        let c = Config::with_goal("g");
        let t = |m: Method, p: &str| request_timeout(&c, &m, p).map(|d| d.as_secs());
        assert_eq!(t(Method::POST, "/api/v1/board/records"), Some(120));
        assert_eq!(t(Method::GET, "/api/v1/events"), Some(180));
        assert_eq!(t(Method::POST, "/api/v1/events/poll"), Some(180));
        assert_eq!(t(Method::POST, "/api/v1/events"), Some(120));
        assert_eq!(t(Method::POST, "/git/workspace.git/git-receive-pack"), None);
        assert_eq!(t(Method::POST, "/v1/chat/completions"), None);
        assert_eq!(t(Method::POST, "/mcp"), None);
        assert_eq!(t(Method::POST, "/api/v1/prs/3/merge"), None);
        assert_eq!(t(Method::POST, "/api/v1/ship"), None);
    }
}
