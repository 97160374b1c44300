//! `agensh mcp`'s work: a stdio bridge to the hub's MCP endpoint, for agents that only take
//! stdio MCP servers. It reads newline-delimited JSON-RPC messages on stdin, POSTs each to
//! `<hub>/mcp` with the token (keeping the session id the hub hands out), and writes every
//! answer as one line on stdout; notifications get no line. It ends cleanly on EOF.
//! Logs go to stderr only: stdout carries nothing but protocol messages.
//!
//! Requests run concurrently (a merge with a gate may take minutes; a ping must not wait for
//! it), except `initialize`, which is answered before the next line is read.
//!
//! A `tools/call` of `ship` gets the same local pre-step as through the node's MCP proxy
//! ([`crate::mcp_proxy`]), in the bridge's working directory (the agent's checkout):
//! what is left is committed and pushed as the worker before the call goes to the hub.

use std::io::{BufRead, Write};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agensh_protocol::framing::{decode_line, encode_line, sse_events};
use agensh_protocol::jsonrpc::{code, ErrorObject, Message, Response};
use agensh_protocol::rest::ErrorBody;
use serde_json::Value;
use tokio::sync::mpsc;

use crate::mcp_proxy::{ship_prestep, unreachable_answer, with_note, Prestep, SHIP};

/// The hub the bridge talks to, and as whom.
#[derive(Debug, Clone)]
pub struct Hub {
    /// The hub's base URL.
    pub url: String,
    /// A worker's token, or the admin's.
    pub token: String,
    /// The worker the admin acts as (`X-Agensh-As`).
    pub as_worker: Option<String>,
    /// How long a message keeps trying to reach a hub that is down (`--hub-wait`).
    pub hub_wait: Duration,
}

/// Why the bridge stopped other than at EOF.
#[derive(Debug)]
pub enum Error {
    /// The HTTP client could not be made.
    Http(reqwest::Error),
    /// stdout could not be written.
    Stdout(String),
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::Http(e) => e.fmt(f),
            Error::Stdout(s) => f.write_str(s),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Http(e) => e.source(),
            Error::Stdout(_) => None,
        }
    }
}

struct Bridge {
    http: reqwest::Client,
    /// The hub's base URL.
    hub: String,
    endpoint: String,
    token: String,
    as_worker: Option<String>,
    /// How long a message keeps trying to reach a hub that is down (`--hub-wait`).
    hub_wait: Duration,
    /// The `Mcp-Session-Id` the hub handed out at `initialize`.
    session: Mutex<Option<String>>,
    /// The protocol version the hub answered at `initialize`.
    version: Mutex<Option<String>>,
}

/// Bridges this process's stdin and stdout to `hub`'s MCP endpoint until stdin ends.
pub async fn run(hub: Hub) -> Result<(), Error> {
    let bridge = Arc::new(Bridge {
        http: hub_http().map_err(Error::Http)?,
        endpoint: format!("{}/mcp", hub.url),
        hub: hub.url,
        token: hub.token,
        as_worker: hub.as_worker,
        hub_wait: hub.hub_wait,
        session: Mutex::new(None),
        version: Mutex::new(None),
    });
    tracing::info!("bridging stdio to {}", bridge.endpoint);

    // stdin is read on a thread of its own: a blocking read never stalls the runtime.
    let (line_tx, mut lines) = mpsc::channel::<String>(64);
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            match line {
                Ok(l) => {
                    if line_tx.blocking_send(l).is_err() {
                        break;
                    }
                }
                Err(e) => {
                    tracing::warn!("stdin: {e}");
                    break;
                }
            }
        }
    });
    let (out, mut out_rx) = mpsc::unbounded_channel::<Vec<u8>>();
    let writer = tokio::task::spawn_blocking(move || -> std::io::Result<()> {
        let stdout = std::io::stdout();
        while let Some(line) = out_rx.blocking_recv() {
            let mut w = stdout.lock();
            w.write_all(&line)?;
            w.flush()?;
        }
        Ok(())
    });

    let mut inflight = tokio::task::JoinSet::new();
    while let Some(line) = lines.recv().await {
        while inflight.try_join_next().is_some() {}
        let line = line.trim().to_string();
        if line.is_empty() {
            continue;
        }
        let message = match decode_line::<Message>(&line) {
            Ok(m) => m,
            Err(e) => {
                // The hub answers what it cannot read (parse error, invalid request).
                tracing::debug!("{e}");
                None
            }
        };
        let initialize = matches!(&message, Some(Message::Request(r)) if r.method == "initialize");
        let (bridge, out) = (bridge.clone(), out.clone());
        let task = async move {
            for answer in bridge.forward(line, message).await {
                let _ = out.send(answer);
            }
        };
        if initialize {
            task.await;
        } else {
            inflight.spawn(task);
        }
    }
    // EOF: answer what is in flight, end the session, and stop.
    while inflight.join_next().await.is_some() {}
    bridge.end_session().await;
    drop(out);
    writer
        .await
        .map_err(|e| Error::Stdout(format!("stdout writer: {e}")))?
        .map_err(|e| Error::Stdout(format!("cannot write to stdout: {e}")))?;
    Ok(())
}

/// The bridge's HTTP client: a new connection for every message, none kept idle.
///
/// A kept connection to a hub that was just killed may still look open when the next
/// message goes out on it; that message then fails as one the hub *may* have processed,
/// and is not sent again, so a tool call made while the hub restarts would end at once
/// with an error instead of waiting for the hub ([`agensh_client::retry::send`]). On a new
/// connection a dead hub is a refused connect, which is waited out. One agent's messages
/// are few: a connect each costs nothing that matters. No idle connection is kept, and
/// every request says `Connection: close`: without it a connection that is handed back as
/// the next request waits for its own connect goes to that request, skipping the limit
/// (the test below failed so, once in a loaded run).
fn hub_http() -> reqwest::Result<reqwest::Client> {
    let mut close = reqwest::header::HeaderMap::new();
    close.insert(
        reqwest::header::CONNECTION,
        reqwest::header::HeaderValue::from_static("close"),
    );
    reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(10))
        .pool_max_idle_per_host(0)
        .default_headers(close)
        .build()
}

impl Bridge {
    /// Sends one message to the hub; returns the lines to write (none for a notification).
    async fn forward(&self, line: String, message: Option<Message>) -> Vec<Vec<u8>> {
        let ship = matches!(&message, Some(Message::Request(r))
            if r.method == "tools/call" && r.params.as_ref().is_some_and(|p| p["name"] == SHIP));
        let id = match message {
            Some(Message::Request(r)) => Some(r.id),
            _ => None,
        };
        let mut note = None;
        if ship {
            match self.prestep(&line).await {
                Ok(Prestep::Forward) => {}
                Ok(Prestep::Noted(n)) => note = Some(n),
                Ok(Prestep::Answer(mut answer)) => {
                    answer.push(b'\n');
                    return vec![answer];
                }
                Err(msg) => {
                    tracing::warn!("{msg}");
                    if let Some(id) = &id {
                        return vec![encode_line(&Response::error(
                            id.clone(),
                            ErrorObject::new(code::HUB_UNREACHABLE, msg),
                        ))];
                    }
                }
            }
        }
        let mut req = self
            .http
            .post(&self.endpoint)
            .bearer_auth(&self.token)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(line.clone());
        if let Some(s) = self.session.lock().expect("session").clone() {
            req = req.header("mcp-session-id", s);
        }
        if let Some(v) = self.version.lock().expect("version").clone() {
            req = req.header("mcp-protocol-version", v);
        }
        if let Some(w) = &self.as_worker {
            req = req.header("x-agensh-as", w);
        }
        let fail = |code: i64, msg: String| -> Vec<Vec<u8>> {
            tracing::warn!("{msg}");
            match &id {
                Some(id) => vec![encode_line(&Response::error(
                    id.clone(),
                    ErrorObject::new(code, msg),
                ))],
                None => Vec::new(),
            }
        };
        // A hub that is down (restarting) is tried again for a while before the agent
        // hears of it; a tool call then gets a tool error the model can read.
        let resp = match agensh_client::retry::send(req, self.hub_wait).await {
            Ok(r) => r,
            Err(e) => {
                let message = if e.is_connect() {
                    format!(
                        "the agensh hub at {} has not answered for {} s: {e} — is `agensh hub` running? (check --hub / AGENSH_HUB)",
                        self.endpoint,
                        self.hub_wait.as_secs()
                    )
                } else {
                    format!(
                        "the connection to the agensh hub at {} broke before its answer ({e}); the call may or may not have taken effect — check before repeating it",
                        self.endpoint
                    )
                };
                tracing::warn!("{message}");
                return unreachable_answer(line.as_bytes(), &message)
                    .map(|mut a| {
                        a.push(b'\n');
                        vec![a]
                    })
                    .unwrap_or_default();
            }
        };
        let status = resp.status();
        if let Some(s) = resp
            .headers()
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
        {
            *self.session.lock().expect("session") = Some(s.to_string());
        }
        let sse = resp
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|ct| ct.starts_with("text/event-stream"));
        let body = match resp.text().await {
            Ok(b) => match &note {
                Some(n) if status.is_success() && !sse => {
                    String::from_utf8_lossy(&with_note(b.as_bytes(), n)).into_owned()
                }
                _ => b,
            },
            Err(e) => {
                return fail(
                    code::HUB_UNREACHABLE,
                    format!("the hub's answer broke off: {e}"),
                )
            }
        };
        if body.trim().is_empty() {
            if status.is_success() {
                return Vec::new();
            }
            return fail(code::HUB_REFUSED, format!("the hub answered HTTP {status}"));
        }
        let values: Vec<Value> = if sse {
            sse_events(body.as_bytes())
                .iter()
                .filter_map(|e| serde_json::from_str(&e.data).ok())
                .collect()
        } else {
            match serde_json::from_str(&body) {
                Ok(v) => vec![v],
                Err(_) => {
                    return fail(
                        code::INTERNAL_ERROR,
                        format!(
                            "the hub answered HTTP {status} with something that is not JSON: {}",
                            body.chars().take(200).collect::<String>()
                        ),
                    )
                }
            }
        };
        let mut lines = Vec::new();
        for v in values {
            if v.get("jsonrpc").is_some() {
                if let Ok(Message::Response(Response {
                    result: Ok(result), ..
                })) = Message::from_value(v.clone())
                {
                    if let Some(version) = result.get("protocolVersion").and_then(Value::as_str) {
                        *self.version.lock().expect("version") = Some(version.to_string());
                    }
                }
                lines.push(encode_line(&v));
            } else if let Ok(refused) = serde_json::from_value::<ErrorBody>(v) {
                // The hub's REST error shape: 401 unauthorized, 403 impersonation, …
                let msg = format!(
                    "the hub refused ({}): {}",
                    refused.error.code, refused.error.message
                );
                lines.extend(fail(code::HUB_REFUSED, msg));
            }
        }
        lines
    }

    /// `ship`'s local pre-step in this process's working directory, as the worker the
    /// bridge acts for (the `X-Agensh-As` one, else the token's).
    async fn prestep(&self, line: &str) -> std::result::Result<Prestep, String> {
        let worker = match &self.as_worker {
            Some(w) => w.clone(),
            None => {
                agensh_client::Client::new(&self.hub, &self.token)
                    .whoami()
                    .await
                    .map_err(|e| format!("cannot tell which worker ships: {}", e.message))?
                    .id
            }
        };
        if worker == agensh_domain::ids::ADMIN {
            // The admin ships nothing of its own: the hub says so.
            return Ok(Prestep::Forward);
        }
        let cwd = std::env::current_dir()
            .map_err(|e| format!("cannot read the working directory to ship from: {e}"))?;
        Ok(ship_prestep(line.as_bytes(), &worker, &cwd).await)
    }

    /// Ends the hub session, best effort.
    async fn end_session(&self) {
        let Some(session) = self.session.lock().expect("session").clone() else {
            return;
        };
        let mut req = self
            .http
            .delete(&self.endpoint)
            .bearer_auth(&self.token)
            .header("mcp-session-id", session)
            .timeout(Duration::from_secs(2));
        if let Some(w) = &self.as_worker {
            req = req.header("x-agensh-as", w);
        }
        if let Err(e) = req.send().await {
            tracing::debug!("could not end the MCP session: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    const OK: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";

    /// A hub that answers one message, then dies (its listener gone) with the connection
    /// that carried the answer still open: a message arriving on that connection is
    /// dropped unanswered, as a killed process's would be. It comes back 300 ms later.
    #[tokio::test]
    async fn a_message_after_the_hub_died_waits_for_it_instead_of_failing_on_an_old_connection() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let (died_tx, died) = tokio::sync::oneshot::channel();
        let server = tokio::spawn(async move {
            let (mut first, _) = listener.accept().await.unwrap();
            let mut buf = vec![0u8; 4096];
            let _ = first.read(&mut buf).await.unwrap();
            first.write_all(OK).await.unwrap();
            drop(listener);
            died_tx.send(()).unwrap();
            // What reaches the old connection now is dropped unanswered.
            let dropped = tokio::spawn(async move {
                let n = first.read(&mut buf).await.unwrap_or(0);
                drop(first);
                n
            });
            tokio::time::sleep(Duration::from_millis(300)).await;
            let back = TcpListener::bind(("127.0.0.1", port)).await.unwrap();
            let (mut s, _) = back.accept().await.unwrap();
            let mut buf = vec![0u8; 4096];
            let _ = s.read(&mut buf).await.unwrap();
            s.write_all(OK).await.unwrap();
            dropped.await.unwrap()
        });
        let http = hub_http().unwrap();
        let url = format!("http://127.0.0.1:{port}/mcp");
        let first = http.post(&url).body("first").send().await.unwrap();
        assert_eq!(first.text().await.unwrap(), "ok");
        died.await.unwrap();
        let second =
            agensh_client::retry::send(http.post(&url).body("second"), Duration::from_secs(10))
                .await
                .expect("the message waits for the hub to come back");
        assert_eq!(second.text().await.unwrap(), "ok");
        let on_old_connection = server.await.unwrap();
        assert_eq!(
            on_old_connection, 0,
            "nothing went out on the old connection"
        );
    }
}
