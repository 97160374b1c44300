//! Shared test harness: a real hub over a real SQLite file in a temporary directory,
//! reached over HTTP with the typed client or with raw requests.

// Each test file uses a different part of this module.
#![allow(dead_code)]

pub mod org;

use std::path::PathBuf;
use std::sync::Arc;

use agensh_client::Client;
use agensh_domain::config::Config;
use agensh_domain::record::{NewRecord, Record, RecordKind};
use agensh_domain::view::ViewEntry;
use agensh_domain::{Error, ErrorKind};
use agensh_hub::clock::{Clock, ManualClock, SystemClock};
use agensh_hub::RunningHub;
use agensh_store::SqliteStore;
use serde_json::Value;
use tempfile::TempDir;

/// A hub serving a store file inside its own temporary directory.
pub struct TestHub {
    pub dir: TempDir,
    pub hub: RunningHub,
    pub config: Config,
    /// The clock the hub reads (kept across restarts).
    clock: Arc<dyn Clock>,
}

/// The configuration every test starts from.
pub fn config() -> Config {
    Config::with_goal("test")
}

async fn start_hub(path: &std::path::Path, config: Config, clock: Arc<dyn Clock>) -> RunningHub {
    let store = SqliteStore::open(path).expect("store opens");
    agensh_hub::start_with_clock(Arc::new(store), None, config, "127.0.0.1:0", clock)
        .await
        .expect("hub starts")
}

impl TestHub {
    /// A hub with the default test configuration.
    pub async fn start() -> Self {
        Self::with_config(config()).await
    }

    /// A hub with `config`.
    pub async fn with_config(config: Config) -> Self {
        Self::with_clock(config, Arc::new(SystemClock)).await
    }

    /// A hub with the default test configuration whose time stands still until the
    /// returned clock is moved.
    pub async fn with_manual_clock() -> (Self, ManualClock) {
        let clock = ManualClock::starting_now();
        (
            Self::with_clock(config(), Arc::new(clock.clone())).await,
            clock,
        )
    }

    /// A hub with `config` whose time stands still until the returned clock is moved.
    pub async fn with_config_and_manual_clock(config: Config) -> (Self, ManualClock) {
        let clock = ManualClock::starting_now();
        (
            Self::with_clock(config, Arc::new(clock.clone())).await,
            clock,
        )
    }

    async fn with_clock(config: Config, clock: Arc<dyn Clock>) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let hub = start_hub(
            &dir.path().join("store.sqlite"),
            config.clone(),
            clock.clone(),
        )
        .await;
        TestHub {
            dir,
            hub,
            config,
            clock,
        }
    }

    /// The store file.
    pub fn store_path(&self) -> PathBuf {
        self.dir.path().join("store.sqlite")
    }

    pub fn url(&self) -> &str {
        &self.hub.url
    }

    /// A client with the admin token, acting as nobody.
    pub fn admin(&self) -> Client {
        Client::new(&self.hub.url, &self.hub.admin_token)
    }

    /// A client with the admin token acting as worker `id`.
    pub fn admin_as(&self, id: &str) -> Client {
        self.admin().acting_as(Some(id.to_string()))
    }

    /// A client with `token`.
    pub fn client(&self, token: &str) -> Client {
        Client::new(&self.hub.url, token)
    }

    /// Adds `n` workers and returns a client for each, in id order (w01, w02, …).
    pub async fn workers(&self, n: usize) -> Vec<Client> {
        self.tokens(n)
            .await
            .iter()
            .map(|t| self.client(t))
            .collect()
    }

    /// Adds `n` workers and returns their tokens, in id order.
    pub async fn tokens(&self, n: usize) -> Vec<String> {
        self.admin()
            .add_workers(n)
            .await
            .expect("workers are added")
            .into_iter()
            .map(|w| w.token)
            .collect()
    }

    /// Stops the hub, drops its store, reopens the same file and starts a new hub on it.
    pub async fn restart(self) -> Self {
        let TestHub {
            dir,
            hub,
            config,
            clock,
        } = self;
        hub.shutdown().await;
        let hub = start_hub(
            &dir.path().join("store.sqlite"),
            config.clone(),
            clock.clone(),
        )
        .await;
        TestHub {
            dir,
            hub,
            config,
            clock,
        }
    }

    /// Sends a raw request; returns the status and the body parsed as JSON (or a string).
    pub async fn raw(
        &self,
        method: reqwest::Method,
        path: &str,
        token: Option<&str>,
        json_body: Option<&str>,
    ) -> (u16, Value) {
        let mut r = reqwest::Client::new().request(method, format!("{}{path}", self.hub.url));
        if let Some(t) = token {
            r = r.bearer_auth(t);
        }
        if let Some(b) = json_body {
            r = r
                .header("content-type", "application/json")
                .body(b.to_string());
        }
        let resp = r.send().await.expect("request reaches the hub");
        let status = resp.status().as_u16();
        let text = resp.text().await.expect("body is read");
        let body = serde_json::from_str(&text).unwrap_or(Value::String(text));
        (status, body)
    }

    /// The value of a metric in `/metrics`.
    pub async fn metric(&self, name: &str) -> u64 {
        let text = reqwest::get(format!("{}/metrics", self.hub.url))
            .await
            .expect("metrics reachable")
            .text()
            .await
            .expect("metrics body");
        metric_value(&text, name).unwrap_or_else(|| panic!("no metric {name} in:\n{text}"))
    }
}

impl TestHub {
    /// Waits until the metric `name` reads `want` (the hub's own count, not a guess at how
    /// long it takes); fails with `what` after 10 s.
    pub async fn wait_for_metric(&self, name: &str, want: u64, what: &str) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            let got = self.metric(name).await;
            if got == want {
                return;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{what}: {name} stayed at {got}, not {want}"
            );
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
    }
}

/// The value of the sample line `name <value>` in a Prometheus text exposition.
pub fn metric_value(text: &str, name: &str) -> Option<u64> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

/// Checks a raw answer is `status` with exactly `{"error":{"code":code,"message":…}}`;
/// returns the message.
pub fn api_error(answer: &(u16, Value), status: u16, code: &str) -> String {
    let (got_status, body) = answer;
    assert_eq!(*got_status, status, "status; body: {body}");
    let obj = body
        .as_object()
        .unwrap_or_else(|| panic!("error body is not a JSON object: {body}"));
    assert_eq!(obj.len(), 1, "error body has only \"error\": {body}");
    let err = &body["error"];
    assert_eq!(err["code"], code, "error code; body: {body}");
    let message = err["message"]
        .as_str()
        .unwrap_or_else(|| panic!("error message is a string: {body}"));
    assert!(!message.trim().is_empty(), "error message is empty: {body}");
    message.to_string()
}

/// Unwraps the error of a typed call and checks its kind and code.
pub fn expect_err<T: std::fmt::Debug>(r: Result<T, Error>, kind: ErrorKind, code: &str) -> Error {
    let e = r.expect_err("the call fails");
    assert_eq!((e.kind, e.code.as_str()), (kind, code), "{e:?}");
    e
}

/// A record with kind and text.
pub fn rec(kind: RecordKind, text: &str) -> NewRecord {
    NewRecord::new(kind, text)
}

/// A record with kind, text and label.
pub fn labeled(kind: RecordKind, text: &str, label: &str) -> NewRecord {
    let mut r = NewRecord::new(kind, text);
    r.label = Some(label.to_string());
    r
}

/// A CLAIM with label, paths and lease.
pub fn claim(
    text: &str,
    label: Option<&str>,
    paths: &[&str],
    lease_secs: Option<u64>,
) -> NewRecord {
    let mut r = NewRecord::new(RecordKind::Claim, text);
    r.label = label.map(str::to_string);
    r.paths = paths.iter().map(|p| p.to_string()).collect();
    r.lease_secs = lease_secs;
    r
}

/// The ids of view entries, in order.
pub fn view_ids(v: &[ViewEntry]) -> Vec<String> {
    v.iter().map(|e| e.record.id.clone()).collect()
}

/// The ids of records, in order.
pub fn record_ids(v: &[Record]) -> Vec<String> {
    v.iter().map(|r| r.id.clone()).collect()
}

/// Fails unless the board holds nothing: empty recent view, and `word` found nowhere.
pub async fn assert_board_empty(c: &Client, word: &str) {
    let view = c.recent(None).await.expect("recent view");
    assert!(
        view.is_empty(),
        "nothing was stored, but the view has {:?}",
        view_ids(&view)
    );
    let found = c.grep(word, None, None).await.expect("grep");
    assert!(
        found.is_empty(),
        "nothing was stored, but grep {word} finds {:?}",
        record_ids(&found)
    );
}
