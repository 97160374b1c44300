//! git smart HTTP at `/git/workspace.git/`: clone, fetch and push the organization's
//! workspace with a worker id and token.
//!
//! Requests go to `git http-backend` (see `agensh_workspace::http`) with the
//! authenticated id as `REMOTE_USER` and `AGENSH_PUSHER`, so the bare repository's
//! `pre-receive` hook applies the push policy. Bodies stream both ways (packs are big), so
//! the hub's body limit does not apply here.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use agensh_domain::ids::ADMIN;
use agensh_domain::{Error, ErrorKind};
use agensh_workspace::http::{CgiBody, CgiRequest};
use axum::body::{Body, Bytes, HttpBody};
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{header, HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use tokio::io::{AsyncRead, ReadBuf};

use crate::auth::{constant_time_eq, decode_base64};
use crate::error::ApiError;
use crate::state::AppState;

/// Where the workspace is served.
pub const PREFIX: &str = "/git/workspace.git";

/// The branch whose moves are announced as `main.updated`.
const MAIN_REF: &str = "refs/heads/main";

/// The git smart HTTP routes (full paths, to be merged at the root).
pub fn routes() -> Router<AppState> {
    Router::new()
        .route(&format!("{PREFIX}/info/refs"), get(info_refs))
        .route(&format!("{PREFIX}/git-upload-pack"), post(upload_pack))
        .route(&format!("{PREFIX}/git-receive-pack"), post(receive_pack))
        .layer(DefaultBodyLimit::disable())
}

async fn info_refs(State(s): State<AppState>, req: Request) -> Response {
    // Only the smart protocol: the dumb one would serve the repository's files.
    let smart = req.uri().query().is_some_and(|q| {
        q.split('&')
            .any(|kv| kv == "service=git-upload-pack" || kv == "service=git-receive-pack")
    });
    if !smart {
        return ApiError(Error::not_found(
            "no_such_endpoint",
            "the hub serves git's smart HTTP only — use git 1.6.6 or newer (info/refs?service=git-upload-pack)",
        ))
        .into_response();
    }
    serve(s, "/info/refs", req).await
}

async fn upload_pack(State(s): State<AppState>, req: Request) -> Response {
    serve(s, "/git-upload-pack", req).await
}

async fn receive_pack(State(s): State<AppState>, req: Request) -> Response {
    serve(s, "/git-receive-pack", req).await
}

async fn serve(s: AppState, path_info: &str, req: Request) -> Response {
    let Some(ws) = s.workspace.clone() else {
        return ApiError(Error::not_found(
            "no_workspace",
            "this hub serves no git workspace — start it in an organization made by `agensh init DIR --goal ...`",
        ))
        .into_response();
    };
    let id = match authenticate(&s, req.headers()) {
        Ok(id) => id,
        Err(message) => return unauthorized(message),
    };
    if id != ADMIN {
        s.touch(&id);
    }
    let worker_push = path_info == "/git-receive-pack" && id != ADMIN;
    let push_bytes =
        (worker_push && s.config.limits.push_bytes > 0).then_some(s.config.limits.push_bytes);
    if let (Some(limit), Some(len)) = (
        push_bytes,
        req.headers()
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok()),
    ) {
        if len > limit {
            return ApiError(too_big_push(len, limit)).into_response();
        }
    }
    // One http-backend per slot (`hub.git_processes`); the others wait in line, for at
    // most the request timeout.
    let queue = std::time::Duration::from_secs(s.config.hub.request_timeout_secs);
    let slot = match tokio::time::timeout(queue, s.git_slots.clone().acquire_owned()).await {
        Ok(Ok(slot)) => slot,
        _ => {
            return ApiError(
                Error::new(
                    ErrorKind::RateLimited,
                    "git_busy",
                    format!(
                        "all {} git processes of the hub (hub.git_processes in agensh.toml) have been busy for {} s — retry in a moment",
                        s.config.hub.git_processes,
                        queue.as_secs()
                    ),
                )
                .retry_after(5),
            )
            .into_response()
        }
    };
    let deadline =
        tokio::time::Instant::now() + std::time::Duration::from_secs(s.config.hub.git_timeout_secs);

    let (parts, body) = req.into_parts();
    let headers = &parts.headers;
    let text = |name: HeaderName| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    let is_post = parts.method == axum::http::Method::POST;
    let receive = path_info == "/git-receive-pack";
    // Only the admin may move main (the hook refuses workers), so only its pushes are
    // watched; a worker's push racing a merge is then never taken for a move of main.
    let watch_main = receive && id == ADMIN;
    let main_before = if watch_main {
        match ws.git().resolve(MAIN_REF).await {
            Ok(c) => c,
            Err(e) => return ApiError(e).into_response(),
        }
    } else {
        None
    };

    let cgi = CgiRequest {
        method: parts.method.as_str().to_string(),
        path_info: path_info.to_string(),
        query_string: parts.uri.query().unwrap_or("").to_string(),
        content_type: text(header::CONTENT_TYPE),
        content_length: text(header::CONTENT_LENGTH).and_then(|v| v.parse().ok()),
        content_encoding: text(header::CONTENT_ENCODING),
        git_protocol: text(HeaderName::from_static("git-protocol")),
        remote_user: id.clone(),
        pusher: Some(id.clone()),
        max_pack_bytes: push_bytes,
        namespace_bytes: (worker_push && s.config.limits.namespace_bytes > 0)
            .then_some(s.config.limits.namespace_bytes),
        // git's own limit answers a large pack in its protocol; this one, with room for
        // the commands before the pack, stops a body past it however it is sent.
        body: is_post
            .then(|| Box::pin(BodyReader::new(body, push_bytes.map(|n| n + (1 << 20)))) as _),
    };
    let resp =
        match tokio::time::timeout_at(deadline, agensh_workspace::http::serve(&ws, cgi)).await {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => return ApiError(e).into_response(),
            Err(_) => return ApiError(git_timeout(&s)).into_response(),
        };

    let finish: Option<Finish> = watch_main.then(|| {
        let hub = s.clone();
        let ws = ws.clone();
        let by = id.clone();
        Box::pin(async move {
            match ws.git().resolve(MAIN_REF).await {
                Ok(Some(after)) if Some(&after) != main_before.as_ref() => {
                    if let Err(e) = hub.store.main_updated(&by, &after, hub.now()).await {
                        tracing::warn!("could not announce the push to main: {e}");
                    }
                    hub.goal.nudge();
                }
                Ok(_) => {}
                Err(e) => tracing::warn!("could not read main after a push: {e}"),
            }
        }) as Finish
    });

    let mut out = Response::new(Body::from_stream(ResponseStream {
        body: resp.body,
        space: vec![0u8; 32 * 1024].into_boxed_slice(),
        finish,
        finishing: false,
        deadline: Box::pin(tokio::time::sleep_until(deadline)),
        _slot: slot,
    }));
    *out.status_mut() = StatusCode::from_u16(resp.status).unwrap_or(StatusCode::BAD_GATEWAY);
    for (name, value) in resp.headers {
        if let (Ok(n), Ok(v)) = (
            HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_str(&value),
        ) {
            out.headers_mut().append(n, v);
        }
    }
    out
}

fn too_big_push(len: u64, limit: u64) -> Error {
    Error::new(
        ErrorKind::TooLarge,
        "push_too_large",
        format!(
            "the push sends {len} bytes; one push may send at most {limit} (limits.push_bytes in agensh.toml) — push smaller steps, and keep large or generated files out of git"
        ),
    )
}

fn git_timeout(s: &AppState) -> Error {
    Error::new(
        ErrorKind::Internal,
        "git_timeout",
        format!(
            "the git request took longer than {} s (hub.git_timeout_secs in agensh.toml) and was stopped — push or fetch less at once",
            s.config.hub.git_timeout_secs
        ),
    )
}

/// The id a request authenticates as: HTTP Basic with a worker id (or `admin`) and its
/// token, or a Bearer token.
fn authenticate(s: &AppState, headers: &HeaderMap) -> Result<String, &'static str> {
    let value = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .ok_or("credentials required — use your worker id and token: http://<id>:<token>@<hub>/git/workspace.git")?;
    let (scheme, rest) = value.split_once(' ').unwrap_or((value, ""));
    let rest = rest.trim();
    if scheme.eq_ignore_ascii_case("bearer") {
        return lookup(s, None, rest).ok_or("the token is not valid for this hub");
    }
    if !scheme.eq_ignore_ascii_case("basic") {
        return Err("use HTTP Basic authentication with your worker id and token");
    }
    let decoded = decode_base64(rest).ok_or("the Basic credentials are not valid base64")?;
    let decoded = String::from_utf8(decoded).map_err(|_| "the Basic credentials are not UTF-8")?;
    let (user, token) = decoded
        .split_once(':')
        .ok_or("the Basic credentials need a user and a token")?;
    lookup(s, Some(user), token)
        .ok_or("the worker id and token do not match — check `agensh workers token ID`")
}

/// The id `token` belongs to, if it is `user`'s (when a user is named).
fn lookup(s: &AppState, user: Option<&str>, token: &str) -> Option<String> {
    let id = if constant_time_eq(token.as_bytes(), s.admin_token.as_bytes()) {
        ADMIN.to_string()
    } else {
        s.tokens.read().expect("tokens lock").get(token).cloned()?
    };
    match user {
        Some(u) if u != id => None,
        _ => Some(id),
    }
}

fn unauthorized(message: &str) -> Response {
    let mut r =
        ApiError(Error::new(ErrorKind::Unauthorized, "unauthorized", message)).into_response();
    r.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        HeaderValue::from_static("Basic realm=\"agensh\""),
    );
    r
}

/// The request body as an `AsyncRead`, frame by frame, without buffering it whole;
/// it fails past `limit` bytes.
struct BodyReader {
    body: Body,
    chunk: Bytes,
    read: u64,
    limit: Option<u64>,
}

impl BodyReader {
    fn new(body: Body, limit: Option<u64>) -> Self {
        BodyReader {
            body,
            chunk: Bytes::new(),
            read: 0,
            limit,
        }
    }
}

impl AsyncRead for BodyReader {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            if !this.chunk.is_empty() {
                let n = buf.remaining().min(this.chunk.len());
                buf.put_slice(&this.chunk.split_to(n));
                return Poll::Ready(Ok(()));
            }
            match Pin::new(&mut this.body).poll_frame(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(None) => return Poll::Ready(Ok(())),
                Poll::Ready(Some(Err(e))) => return Poll::Ready(Err(io::Error::other(e))),
                Poll::Ready(Some(Ok(frame))) => {
                    if let Ok(data) = frame.into_data() {
                        this.read += data.len() as u64;
                        if let Some(limit) = this.limit.filter(|l| this.read > *l) {
                            return Poll::Ready(Err(io::Error::other(format!(
                                "the push sent more than {limit} bytes"
                            ))));
                        }
                        this.chunk = data;
                    }
                }
            }
        }
    }
}

/// Work to do once the response has been sent whole (or abandoned).
type Finish = Pin<Box<dyn Future<Output = ()> + Send>>;

/// http-backend's output as the response body stream. At the end it runs `finish`
/// before ending the response, so a pusher sees the push's effects announced when its
/// `git push` returns; if the client goes away first, `finish` still runs, detached.
struct ResponseStream {
    body: CgiBody,
    space: Box<[u8]>,
    finish: Option<Finish>,
    finishing: bool,
    /// `hub.git_timeout_secs` after the request came: past it the answer is cut off and
    /// the backend killed.
    deadline: Pin<Box<tokio::time::Sleep>>,
    /// The http-backend slot, given back when the answer ends or is dropped.
    _slot: tokio::sync::OwnedSemaphorePermit,
}

impl futures_core::Stream for ResponseStream {
    type Item = io::Result<Bytes>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        if !this.finishing && this.deadline.as_mut().poll(cx).is_ready() {
            // `finish` still runs (when the stream is dropped): a move of main is announced.
            this.finishing = true;
            return Poll::Ready(Some(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the git request took longer than hub.git_timeout_secs",
            ))));
        }
        if !this.finishing {
            let mut buf = ReadBuf::new(&mut this.space);
            match Pin::new(&mut this.body).poll_read(cx, &mut buf) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Err(e)) => {
                    this.finishing = true;
                    return Poll::Ready(Some(Err(e)));
                }
                Poll::Ready(Ok(())) if !buf.filled().is_empty() => {
                    return Poll::Ready(Some(Ok(Bytes::copy_from_slice(buf.filled()))));
                }
                Poll::Ready(Ok(())) => this.finishing = true,
            }
        }
        match this.finish.as_mut() {
            None => Poll::Ready(None),
            Some(f) => match f.as_mut().poll(cx) {
                Poll::Pending => Poll::Pending,
                Poll::Ready(()) => {
                    this.finish = None;
                    Poll::Ready(None)
                }
            },
        }
    }
}

impl Drop for ResponseStream {
    fn drop(&mut self) {
        if let Some(f) = self.finish.take() {
            if let Ok(rt) = tokio::runtime::Handle::try_current() {
                rt.spawn(f);
            }
        }
    }
}
