//! git's smart HTTP, served by running `git http-backend` as a CGI program.
//!
//! The request body streams into the CGI's standard input and its standard output
//! streams back as the response body, so packs of any size pass without being held in
//! memory. Dropping the [`CgiBody`] before the end (the client went away), or a request
//! body that breaks off, kills the CGI and everything it runs (its process group).

use std::io;
use std::pin::Pin;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use agensh_domain::{Error, Result};
use agensh_process::{GroupChild, Priority, ProcessGroup};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt, ReadBuf};
use tokio::process::{Child, ChildStdin, ChildStdout};
use tokio::task::JoinHandle;

use crate::{git, Workspace, REPO_DIR};

/// The largest CGI header block accepted before the body.
const MAX_HEADER_BYTES: usize = 64 * 1024;
/// How much of the CGI's standard error is kept for an error message.
const MAX_STDERR_KEPT: usize = 4 * 1024;

/// A request body: anything that reads asynchronously.
pub type RequestBody = Pin<Box<dyn AsyncRead + Send>>;

/// One HTTP request for `git http-backend`.
pub struct CgiRequest {
    /// `GET` or `POST`.
    pub method: String,
    /// The path below the repository, e.g. `/info/refs` or `/git-upload-pack`.
    pub path_info: String,
    /// The query string without `?` (e.g. `service=git-upload-pack`), or empty.
    pub query_string: String,
    pub content_type: Option<String>,
    /// The body's length when the client said it (not for chunked requests).
    pub content_length: Option<u64>,
    /// The `Content-Encoding` header (git gzips some requests; http-backend inflates them).
    pub content_encoding: Option<String>,
    /// The `Git-Protocol` header (e.g. `version=2`), passed as `GIT_PROTOCOL`.
    pub git_protocol: Option<String>,
    /// The authenticated user (`REMOTE_USER`); http-backend allows receive-pack only
    /// when it is set.
    pub remote_user: String,
    /// Who pushes, for the push policy hook (`AGENSH_PUSHER`).
    pub pusher: Option<String>,
    /// The largest pack a push may send (git's `receive.maxInputSize`: receive-pack
    /// refuses a larger one with its own message).
    pub max_pack_bytes: Option<u64>,
    /// The most bytes the pusher's branches may hold beyond main, for the push policy
    /// hook (`AGENSH_NAMESPACE_BYTES`).
    pub namespace_bytes: Option<u64>,
    /// The request body, streamed into http-backend; `None` for no body.
    pub body: Option<RequestBody>,
}

/// http-backend's answer: status and headers parsed from its CGI output, and the rest
/// of its output as a stream.
pub struct CgiResponse {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: CgiBody,
}

/// The response body: what the CGI printed after its headers. Owns the CGI process;
/// dropping it before the end kills the process and everything it started.
pub struct CgiBody {
    head: Vec<u8>,
    head_pos: usize,
    stdout: ChildStdout,
    backend: Arc<Mutex<Backend>>,
    _feeder: Option<AbortOnDrop>,
}

impl AsyncRead for CgiBody {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.head_pos < this.head.len() {
            let n = buf.remaining().min(this.head.len() - this.head_pos);
            buf.put_slice(&this.head[this.head_pos..this.head_pos + n]);
            this.head_pos += n;
            if this.head_pos == this.head.len() {
                this.head = Vec::new();
                this.head_pos = 0;
            }
            return Poll::Ready(Ok(()));
        }
        let before = buf.filled().len();
        let polled = Pin::new(&mut this.stdout).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = polled {
            if buf.filled().len() == before && buf.remaining() > 0 {
                // End of output: the backend answered in full; let it exit in peace.
                this.backend.lock().expect("backend lock").answered = true;
            }
        }
        polled
    }
}

/// The running `git http-backend`, leader of its own process group (http-backend runs
/// upload-pack or receive-pack, which run pack-objects and hooks).
struct Backend {
    /// Never waited for here, so its pid (the group's id) cannot be reused while it is held.
    _child: Child,
    group: ProcessGroup,
    /// Its output ended: it finished answering and needs no killing.
    answered: bool,
}

impl Backend {
    /// Kills the whole process group, unless the answer is complete.
    fn kill(&mut self) {
        if self.answered {
            return;
        }
        self.group.kill();
        self.answered = true;
    }
}

impl Drop for Backend {
    fn drop(&mut self) {
        // The leader is reaped in the background by tokio once dropped.
        self.kill();
    }
}

struct AbortOnDrop(JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Runs `git http-backend` for `req` against the workspace's bare repository and
/// returns once it has printed its headers; the body streams from the returned
/// [`CgiResponse`].
pub async fn serve(ws: &Workspace, req: CgiRequest) -> Result<CgiResponse> {
    let root = ws.git_dir().parent().ok_or_else(|| {
        Error::internal(format!(
            "the workspace {} has no parent directory",
            ws.git_dir().display()
        ))
    })?;
    let repo_name = ws
        .git_dir()
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or(REPO_DIR);

    let mut cmd = git::cgi_command(root, ["http-backend"]);
    cmd.env("GIT_PROJECT_ROOT", root)
        .env("GIT_HTTP_EXPORT_ALL", "1")
        .env("PATH_INFO", format!("/{repo_name}{}", req.path_info))
        .env("REQUEST_METHOD", &req.method)
        .env("QUERY_STRING", &req.query_string)
        .env("REMOTE_USER", &req.remote_user)
        .env("REMOTE_ADDR", "127.0.0.1")
        .env("GATEWAY_INTERFACE", "CGI/1.1")
        .env("SERVER_PROTOCOL", "HTTP/1.1")
        .stdin(if req.body.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(ct) = &req.content_type {
        cmd.env("CONTENT_TYPE", ct);
    }
    if let Some(len) = req.content_length {
        cmd.env("CONTENT_LENGTH", len.to_string());
    }
    if let Some(enc) = &req.content_encoding {
        cmd.env("HTTP_CONTENT_ENCODING", enc);
    }
    if let Some(p) = &req.git_protocol {
        cmd.env("GIT_PROTOCOL", p);
    }
    if let Some(p) = &req.pusher {
        cmd.env("AGENSH_PUSHER", p);
    }
    if let Some(n) = req.max_pack_bytes {
        cmd.env("GIT_CONFIG_COUNT", "1")
            .env("GIT_CONFIG_KEY_0", "receive.maxInputSize")
            .env("GIT_CONFIG_VALUE_0", n.to_string());
    }
    if let Some(n) = req.namespace_bytes {
        cmd.env("AGENSH_NAMESPACE_BYTES", n.to_string());
    }

    let GroupChild { mut child, group } = agensh_process::group::spawn(&mut cmd, Priority::Normal)
        .map_err(|e| {
            Error::internal(format!(
                "cannot run git http-backend: {e} — install git 2.38 or newer and put it on PATH"
            ))
        })?;
    let stdin = child.stdin.take();
    let stderr = child.stderr.take().expect("stderr is piped");
    let mut stdout = child.stdout.take().expect("stdout is piped");
    let backend = Arc::new(Mutex::new(Backend {
        _child: child,
        group,
        answered: false,
    }));

    let feeder = match (req.body, stdin) {
        (Some(body), Some(stdin)) => Some(AbortOnDrop(tokio::spawn(feed(
            body,
            stdin,
            backend.clone(),
        )))),
        _ => None,
    };

    let stderr_kept = Arc::new(Mutex::new(Vec::new()));
    let drained = tokio::spawn(drain_stderr(stderr, stderr_kept.clone()));

    let mut buf = Vec::with_capacity(8 * 1024);
    let header_end = loop {
        if let Some(end) = find_header_end(&buf) {
            break end;
        }
        if buf.len() > MAX_HEADER_BYTES {
            return Err(Error::internal(
                "git http-backend printed a header block larger than 64 KiB",
            ));
        }
        let mut chunk = [0u8; 8 * 1024];
        let n = stdout
            .read(&mut chunk)
            .await
            .map_err(|e| Error::internal(format!("cannot read from git http-backend: {e}")))?;
        if n == 0 {
            // It ended; let its last words arrive before quoting them.
            let _ = tokio::time::timeout(std::time::Duration::from_secs(1), drained).await;
            let err =
                String::from_utf8_lossy(&stderr_kept.lock().expect("stderr lock")).into_owned();
            return Err(Error::internal(format!(
                "git http-backend ended without an answer: {}",
                err.trim()
            )));
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let (status, headers) = parse_headers(&buf[..header_end.0])?;
    let head = buf[header_end.1..].to_vec();
    Ok(CgiResponse {
        status,
        headers,
        body: CgiBody {
            head,
            head_pos: 0,
            stdout,
            backend,
            _feeder: feeder,
        },
    })
}

/// Streams the request body into http-backend. When the body fails (the client went
/// away mid-request) the backend is killed: it would otherwise wait, or spin, for the
/// rest of a body that will never come, and the server notices a vanished client only
/// when it next writes.
async fn feed(mut body: RequestBody, mut stdin: ChildStdin, backend: Arc<Mutex<Backend>>) {
    let mut chunk = vec![0u8; 64 * 1024];
    loop {
        let n = match body.read(&mut chunk).await {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) => {
                tracing::debug!("git request body failed, stopping the backend: {e}");
                backend.lock().expect("backend lock").kill();
                return;
            }
        };
        if let Err(e) = stdin.write_all(&chunk[..n]).await {
            // The backend stopped reading (it answered, or failed); it ends on its own.
            tracing::debug!("git http-backend stopped reading the request: {e}");
            return;
        }
    }
    let _ = stdin.shutdown().await;
    // Dropping stdin closes the backend's input.
}

/// Logs what http-backend (and the hooks it runs, when not speaking over the sideband)
/// print on standard error, keeping the start of it for error messages.
async fn drain_stderr(mut stderr: tokio::process::ChildStderr, kept: Arc<Mutex<Vec<u8>>>) {
    let mut chunk = [0u8; 4096];
    loop {
        match stderr.read(&mut chunk).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                let text = String::from_utf8_lossy(&chunk[..n]);
                tracing::debug!("git http-backend: {}", text.trim_end());
                let mut k = kept.lock().expect("stderr lock");
                let room = MAX_STDERR_KEPT.saturating_sub(k.len());
                k.extend_from_slice(&chunk[..n.min(room)]);
            }
        }
    }
}

/// Where the CGI header block ends: (end of headers, start of body).
fn find_header_end(buf: &[u8]) -> Option<(usize, usize)> {
    let mut i = 0;
    while i < buf.len() {
        if buf[i] == b'\n' {
            if buf.get(i + 1) == Some(&b'\n') {
                return Some((i, i + 2));
            }
            if buf.get(i + 1) == Some(&b'\r') && buf.get(i + 2) == Some(&b'\n') {
                return Some((i, i + 3));
            }
        }
        i += 1;
    }
    None
}

/// Parses CGI headers: `Status: 404 Not Found` gives the status (200 without one).
fn parse_headers(block: &[u8]) -> Result<(u16, Vec<(String, String)>)> {
    let text = std::str::from_utf8(block)
        .map_err(|_| Error::internal("git http-backend printed headers that are not UTF-8"))?;
    let mut status = 200;
    let mut headers = Vec::new();
    for line in text.split('\n') {
        let line = line.trim_end_matches('\r');
        if line.is_empty() {
            continue;
        }
        let (name, value) = line.split_once(':').ok_or_else(|| {
            Error::internal(format!(
                "git http-backend printed a malformed header line: {line:?}"
            ))
        })?;
        let value = value.trim();
        if name.eq_ignore_ascii_case("status") {
            status = value
                .split_whitespace()
                .next()
                .and_then(|s| s.parse::<u16>().ok())
                .filter(|s| (100..1000).contains(s))
                .ok_or_else(|| {
                    Error::internal(format!("git http-backend printed a bad status: {value:?}"))
                })?;
        } else {
            headers.push((name.trim().to_string(), value.to_string()));
        }
    }
    Ok((status, headers))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_end_handles_both_line_endings() {
        assert_eq!(find_header_end(b"A: b\r\n\r\nbody"), Some((5, 8)));
        assert_eq!(find_header_end(b"A: b\n\nbody"), Some((4, 6)));
        assert_eq!(find_header_end(b"A: b\r\n"), None);
    }

    #[test]
    fn status_and_headers_are_parsed() {
        let (status, headers) = parse_headers(
            b"Status: 404 Not Found\r\nContent-Type: text/plain\r\nExpires: Fri, 01 Jan 1980 00:00:00 GMT",
        )
        .unwrap();
        assert_eq!(status, 404);
        assert_eq!(
            headers,
            vec![
                ("Content-Type".to_string(), "text/plain".to_string()),
                (
                    "Expires".to_string(),
                    "Fri, 01 Jan 1980 00:00:00 GMT".to_string()
                )
            ]
        );
        assert_eq!(parse_headers(b"Content-Type: x").unwrap().0, 200);
        assert!(parse_headers(b"Status: nope").is_err());
        assert!(parse_headers(b"garbage").is_err());
    }

    #[tokio::test]
    async fn info_refs_is_served_from_a_bare_repository() {
        let dir = tempfile::tempdir().unwrap();
        let git_dir = dir.path().join("workspace.git");
        let ok = std::process::Command::new("git")
            .args(["init", "--quiet", "--bare", "-b", "main"])
            .arg(&git_dir)
            .status()
            .unwrap()
            .success();
        assert!(ok);
        let ws = Workspace::open(&git_dir).unwrap();
        let resp = serve(
            &ws,
            CgiRequest {
                method: "GET".into(),
                path_info: "/info/refs".into(),
                query_string: "service=git-upload-pack".into(),
                content_type: None,
                content_length: None,
                content_encoding: None,
                git_protocol: None,
                remote_user: "w01".into(),
                pusher: Some("w01".into()),
                max_pack_bytes: None,
                namespace_bytes: None,
                body: None,
            },
        )
        .await
        .unwrap();
        assert_eq!(resp.status, 200);
        assert!(resp.headers.iter().any(
            |(k, v)| k == "Content-Type" && v == "application/x-git-upload-pack-advertisement"
        ));
        let mut body = Vec::new();
        let mut b = resp.body;
        b.read_to_end(&mut body).await.unwrap();
        assert!(String::from_utf8_lossy(&body).contains("# service=git-upload-pack"));
    }
}
