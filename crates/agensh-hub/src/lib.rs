//! The agensh hub: owns the organization's shared state and serves it.
//!
//! REST+JSON under `/api/v1` (see docs/API.md), `/healthz`, and `/metrics` in the
//! Prometheus text format. The store behind it is any [`agensh_store::Store`].
//! Agents reach the organization tools over MCP (streamable HTTP) at `/mcp` ([`mcp`]).
//! [`org`] finds and makes an organization directory (its state, its running hub).

pub mod auth;
pub mod clock;
pub mod dashboard;
pub mod error;
pub mod gateway;
pub mod goal;
pub mod limits;
pub mod mcp;
pub mod metrics;
pub mod ops;
pub mod org;
pub mod origin;
pub mod paths;
pub mod receipts;
pub mod routes;
pub mod serve;
pub mod state;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use agensh_domain::config::Config;
use agensh_domain::Error;
use agensh_process::{Shutdown, ShutdownTrigger};
use agensh_store::Store;
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use serde::{Deserialize, Serialize};

use crate::clock::{Clock, SystemClock};
use crate::metrics::{inc, Metrics};
use crate::state::{AppState, Inner};

/// The state directory inside an organization directory.
pub const STATE_DIR: &str = ".agensh";
/// The store file inside the state directory.
pub const STORE_FILE: &str = "store.sqlite";
/// Where a running hub tells clients how to reach it.
pub const HUB_JSON: &str = "hub.json";

/// What `.agensh/hub.json` holds (mode 0600: it carries the admin token).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct HubInfo {
    pub url: String,
    pub admin_token: String,
    pub pid: u32,
}

/// A hub serving in the background of this process.
pub struct RunningHub {
    /// Base URL, e.g. `http://127.0.0.1:7420`.
    pub url: String,
    pub admin_token: String,
    pub addr: SocketAddr,
    state: AppState,
    stop: ShutdownTrigger,
    server: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl RunningHub {
    /// Stops accepting requests, answers waiting long-polls, flushes activity and
    /// waits for the server to finish.
    pub async fn shutdown(self) {
        self.stop.fire();
        let _ = self.server.await;
        // A model request answered just before the end is recorded in the background.
        if !self.state.background.drained(Duration::from_secs(10)).await {
            tracing::warn!("background writes still running 10 s after shutdown were left");
        }
        self.state.flush_activity().await;
    }

    /// The store the hub serves.
    pub fn store(&self) -> Arc<dyn Store> {
        self.state.store.clone()
    }

    /// The run's clock: the dashboard's time left, and the end a node on another host is
    /// given when it registers (`PUT /api/v1/run` sets the same).
    pub fn set_run_clock(&self, clock: agensh_protocol::dashboard::RunClock) {
        *self.state.dashboard.run.lock().expect("run lock") = Some(clock);
    }

    /// The organization's goal now (`organization.done_when`).
    pub fn goal(&self) -> agensh_domain::goal::GoalStatus {
        self.state.goal.status()
    }

    /// The goal's state once it is met; none until then.
    pub fn goal_met(
        &self,
    ) -> tokio::sync::watch::Receiver<Option<agensh_domain::goal::GoalStatus>> {
        self.state.goal.met()
    }

    /// The task pack's fragments (`organization.pack`, read from the organization's
    /// directory), given to nodes on other hosts when they register.
    pub fn set_pack(&self, pack: Vec<String>) {
        *self.state.pack.write().expect("pack lock") = pack;
    }
}

/// Starts a hub on `listen` over `store` with `config`, without a git workspace.
pub async fn start(
    store: Arc<dyn Store>,
    config: Config,
    listen: &str,
) -> Result<RunningHub, Error> {
    start_with_workspace(store, None, config, listen).await
}

/// Starts a hub on `listen` over `store` and the git `workspace` with `config`, on the
/// machine's clock.
pub async fn start_with_workspace(
    store: Arc<dyn Store>,
    workspace: Option<agensh_workspace::Workspace>,
    config: Config,
    listen: &str,
) -> Result<RunningHub, Error> {
    start_with_clock(store, workspace, config, listen, Arc::new(SystemClock)).await
}

/// Starts a hub like [`start_with_workspace`] that reads the time from `clock`: tests pass a
/// [`clock::ManualClock`] to let leases run out without waiting for them.
pub async fn start_with_clock(
    store: Arc<dyn Store>,
    workspace: Option<agensh_workspace::Workspace>,
    config: Config,
    listen: &str,
    clock: Arc<dyn Clock>,
) -> Result<RunningHub, Error> {
    if let Some(ws) = &workspace {
        agensh_workspace::hook::install_hooks(ws).await?;
        // Forget scratch worktrees of gates that a crash left behind.
        ws.git().run(["worktree", "prune"]).await?;
    }
    let admin_token = store.admin_token().await?;
    let tokens: HashMap<String, String> = store
        .worker_tokens()
        .await?
        .into_iter()
        .map(|(id, token)| (token, id))
        .collect();
    let node_tokens: HashMap<String, String> = store
        .node_tokens()
        .await?
        .into_iter()
        .map(|(name, token)| (token, name))
        .collect();
    let listener = bind(listen).await.map_err(|e| {
        Error::invalid(
            "cannot_listen",
            format!("cannot listen on {listen}: {e} — pick another address with --listen (port 0 picks a free one)"),
        )
    })?;
    let addr = listener
        .local_addr()
        .map_err(|e| Error::internal(format!("no local address: {e}")))?;
    let gateway = gateway::Gateway::new(&config.gateway, &config.budget, |var| {
        std::env::var(var).ok()
    })?;
    gateway
        .budgets
        .load(&store.model_usage(None).await?, &store.budgets().await?);
    let (stop, shutdown) = ShutdownTrigger::new();
    let body_limit = config.hub.body_limit;
    let config_origins = config.hub.allowed_origins.clone();
    let serve_limits = serve::ServeLimits::of(&config.hub);
    let limiter = limits::Limiter::new(config.limits.clone());
    let git_slots = Arc::new(tokio::sync::Semaphore::new(config.hub.git_processes));
    let goal = goal::Goal::new(&config)?;
    let state = AppState {
        inner: Arc::new(Inner {
            store,
            workspace,
            config,
            admin_token: admin_token.clone(),
            tokens: RwLock::new(tokens),
            node_tokens: RwLock::new(node_tokens),
            activity: Mutex::new(HashMap::new()),
            progress: Mutex::new(HashMap::new()),
            agents: Mutex::new(HashMap::new()),
            metrics: Metrics::default(),
            merging: Mutex::new(std::collections::HashSet::new()),
            gate_refused: Mutex::new(HashMap::new()),
            shutdown: shutdown.clone(),
            clock,
            gateway,
            turns: Mutex::new(HashMap::new()),
            hosts: origin::HostPolicy::new(addr, &config_origins),
            limiter,
            git_slots,
            background: state::Background::default(),
            dashboard: dashboard::Dashboard::new(&admin_token, addr.to_string()),
            pack: RwLock::new(Vec::new()),
            goal,
            delivery: receipts::Delivery::default(),
        }),
    };
    // One route table shared by every connection (a clone is a reference count): with
    // 1,024 open long-polls a table per connection cost the hub about 30 MiB
    // (docs/PERFORMANCE.md, Hub).
    let app = router(state.clone(), body_limit);
    let server = tokio::spawn(serve::serve(
        listener,
        app,
        serve_limits,
        state.clone(),
        shutdown.clone(),
    ));
    if let Some(ws) = state.workspace.clone() {
        tokio::spawn(maintain_workspace(ws, shutdown.clone()));
    }
    tokio::spawn(dashboard::feed::run(state.clone()));
    goal::start(state.clone()).await?;
    receipts::start(state.clone());
    let flusher = state.clone();
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(2));
        let mut shutdown = shutdown;
        loop {
            tokio::select! {
                _ = tick.tick() => {
                    flusher.flush_activity().await;
                    flusher.limiter.sweep(flusher.now());
                }
                _ = shutdown.wait() => break,
            }
        }
    });
    tracing::info!("hub listening on http://{addr}");
    Ok(RunningHub {
        url: format!("http://{addr}"),
        admin_token,
        addr,
        state,
        stop,
        server,
    })
}

/// How often the hub checks whether its repository needs packing.
const MAINTAIN_EVERY: Duration = Duration::from_secs(60);

/// Packs the repository's loose objects now and then (merges and small pushes write one
/// file per object), so checkouts and merges keep reading packs.
async fn maintain_workspace(ws: agensh_workspace::Workspace, mut shutdown: Shutdown) {
    let mut tick = tokio::time::interval(MAINTAIN_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => match ws.maintain().await {
                Ok(agensh_workspace::pack::Maintained::Nothing) => {}
                Ok(done) => tracing::info!("workspace maintenance: {done:?}"),
                Err(e) => tracing::warn!("workspace maintenance failed: {e}"),
            },
            _ = shutdown.wait() => break,
        }
    }
}

/// Binds `listen` with a backlog deep enough for 1,024 workers connecting at once.
async fn bind(listen: &str) -> std::io::Result<tokio::net::TcpListener> {
    let addr = tokio::net::lookup_host(listen)
        .await?
        .next()
        .ok_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::NotFound,
                "the address resolves to nothing",
            )
        })?;
    let socket = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(4096)
}

/// The hub's whole HTTP surface.
pub fn router(state: AppState, body_limit: usize) -> Router {
    Router::new()
        .nest("/api/v1", routes::api(body_limit))
        .merge(routes::git::routes())
        .merge(mcp::routes())
        .merge(gateway::routes())
        .merge(dashboard::routes())
        .route("/healthz", get(healthz))
        .route("/metrics", get(metrics_text))
        .fallback(error::not_found)
        .method_not_allowed_fallback(error::method_not_allowed)
        .layer(axum::extract::DefaultBodyLimit::max(body_limit))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            serve::stall_bodies,
        ))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            serve::time_requests,
        ))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            limits::limit_requests,
        ))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            guard_host,
        ))
        .layer(axum::middleware::from_fn_with_state(state.clone(), observe))
        .with_state(state)
}

/// Refuses a request whose `Host` or `Origin` the hub does not answer ([`origin`]).
async fn guard_host(State(s): State<AppState>, req: Request, next: Next) -> Response {
    let checked = {
        let headers = req.headers();
        let header = |name| headers.get(name).map(|v| v.to_str().unwrap_or("\u{fffd}"));
        s.hosts.check(
            header(axum::http::header::HOST),
            header(axum::http::header::ORIGIN),
        )
    };
    if let Err(e) = checked {
        return error::ApiError(e).into_response();
    }
    next.run(req).await
}

/// Counts and logs every request: method, path, status, time. Never headers (tokens).
async fn observe(State(s): State<AppState>, req: Request, next: Next) -> Response {
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    let started = std::time::Instant::now();
    let resp = next.run(req).await;
    let status = resp.status();
    inc(&s.metrics.requests);
    if status.is_client_error() {
        inc(&s.metrics.client_errors);
    } else if status.is_server_error() {
        inc(&s.metrics.server_errors);
    }
    tracing::debug!(%method, %path, status = status.as_u16(), micros = started.elapsed().as_micros() as u64, "request");
    resp
}

async fn healthz() -> &'static str {
    "ok\n"
}

async fn metrics_text(State(s): State<AppState>) -> Response {
    let workers = s.tokens.read().expect("tokens lock").len();
    let mut body = s.metrics.render(workers, metrics::resident_bytes());
    if let Some(w) = s.store.write_stats() {
        metrics::render_store(&mut body, &w);
    }
    if let Some(ws) = &s.workspace {
        metrics::render_main_moves(&mut body, ws.main_moves());
        metrics::render_gates(&mut body, ws.gate_stats());
    }
    goal::render_metrics(&mut body, &s.goal.status());
    receipts::render_metrics(&mut body, &s.delivery);
    ([("content-type", "text/plain; version=0.0.4")], body).into_response()
}

/// The state directory of the organization at `dir`.
pub fn state_dir(dir: &Path) -> PathBuf {
    dir.join(STATE_DIR)
}

/// Writes `.agensh/hub.json` with mode 0600.
pub fn write_hub_info(dir: &Path, info: &HubInfo) -> std::io::Result<()> {
    use std::io::Write;
    let path = state_dir(dir).join(HUB_JSON);
    let tmp = path.with_extension("json.tmp");
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(0o600);
    }
    let mut f = opts.open(&tmp)?;
    f.write_all(
        serde_json::to_string_pretty(info)
            .expect("hub info serializes")
            .as_bytes(),
    )?;
    f.sync_all()?;
    std::fs::rename(tmp, path)
}

/// Reads `.agensh/hub.json` of the organization at `dir`.
pub fn read_hub_info(dir: &Path) -> std::io::Result<HubInfo> {
    let text = std::fs::read_to_string(state_dir(dir).join(HUB_JSON))?;
    serde_json::from_str(&text).map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
}
