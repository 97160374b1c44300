//! Serving an installed model: the server is a child process in its own process group,
//! tied to us by its stdin (it exits at EOF, so it dies with us even on kill -9).

use std::collections::VecDeque;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agensh_process::{GroupChild, Priority};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncSeekExt, BufReader};
use tokio::process::{ChildStdin, Command};
use tokio::time::Instant;

use crate::error::{Error, Result};
use crate::install::Installed;

/// The server script, run with the venv's python.
const SCRIPT: &str = include_str!("serve.py");
/// How long loading the model and answering `/health` may take.
const START_TIMEOUT: Duration = Duration::from_secs(180);
/// How long `stop` waits after SIGTERM before SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(5);
/// A server log larger than this when the server starts is moved to `<log>.1` (replacing
/// the one there) and a new one begun: at most about twice this much log is kept.
pub const LOG_ROTATE_BYTES: u64 = 16 << 20;

/// Refuses a server whose model and KV cache (`n_ctx` tokens) would not fit in 90% of the
/// `available` memory, saying what to lower: the kernel would kill it, or the machine swap.
fn check_memory(
    spec: &crate::spec::ModelSpec,
    opts: &ServeOptions,
    n_ctx: u32,
    available: u64,
) -> Result<()> {
    let kv = u64::from(n_ctx) * spec.kv_bytes_per_token;
    let need = kv + spec.bytes;
    if need > available / 10 * 9 {
        let gb = |b: u64| b as f64 / 1e9;
        return Err(Error::BadOption(format!(
            "{} requests at once × {} tokens of context need {:.1} GB of KV cache, {:.1} GB with the model, and {:.1} GB of memory is available — lower model.context_tokens in agensh.toml or run fewer workers per model server",
            opts.parallel,
            opts.context_per_request,
            gb(kv),
            gb(need),
            gb(available)
        )));
    }
    Ok(())
}

/// Most host memory the server keeps cached prompts in (llama.cpp's default).
const MAX_PROMPT_CACHE_MIB: u64 = 8192;
/// Least prompt cache worth having: a few conversations of a few thousand tokens.
const MIN_PROMPT_CACHE_MIB: u64 = 256;
/// Shortest run of tokens the server reuses from a cached prompt after a change earlier in
/// it (llama.cpp's `n_cache_reuse`): a compacted conversation keeps most of its cache.
const CACHE_REUSE_TOKENS: u32 = 256;

/// The host-memory prompt cache for a machine with `available` bytes free once the server
/// needs `need` for its model and KV cache: a quarter of what is left, between
/// [`MIN_PROMPT_CACHE_MIB`] and [`MAX_PROMPT_CACHE_MIB`].
fn prompt_cache_mib(available: u64, need: u64) -> u32 {
    let quarter = (available.saturating_sub(need) / 4) >> 20;
    quarter.clamp(MIN_PROMPT_CACHE_MIB, MAX_PROMPT_CACHE_MIB) as u32
}

/// `MemAvailable` from /proc/meminfo, in bytes (none where there is no such file).
fn mem_available() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kib: u64 = info
        .lines()
        .find_map(|l| l.strip_prefix("MemAvailable:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kib * 1024)
}

/// Moves `path` to `path.1` when it is larger than `limit` bytes (best effort: a log that
/// cannot be moved is appended to as before).
fn rotate(path: &std::path::Path, limit: u64) {
    if std::fs::metadata(path).is_ok_and(|m| m.len() > limit) {
        let mut old = path.as_os_str().to_owned();
        old.push(".1");
        if let Err(e) = std::fs::rename(path, &old) {
            tracing::warn!("cannot rotate the server log {}: {e}", path.display());
        }
    }
}

/// Lines of the server's log an error quotes.
const LOG_TAIL: usize = 25;
const READY_LINE: &str = "AGENSH_LISTENING ";

/// How to serve.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServeOptions {
    /// Address to listen on; default 127.0.0.1.
    pub host: String,
    /// 0 picks a free port (see [`ModelServer::base_url`]).
    pub port: u16,
    /// Requests served at once (llama.cpp slots).
    pub parallel: u32,
    /// Context window of each request, in tokens; the server's total is this × parallel.
    pub context_per_request: u32,
    /// CPU threads; 0 = the cores this process may use (its CPU affinity and quota).
    pub threads: u32,
    /// Host memory for cached prompts, in MiB, so a worker's next request reads only what
    /// is new; 0 = sized for the machine (a quarter of the memory the model and its KV
    /// cache leave, 256 MiB to 8 GiB).
    pub prompt_cache_mib: u32,
    /// Append the server's log here; None keeps its last lines in memory for errors.
    pub log_file: Option<PathBuf>,
}

impl Default for ServeOptions {
    fn default() -> Self {
        ServeOptions {
            host: "127.0.0.1".into(),
            port: 0,
            parallel: 4,
            context_per_request: 8192,
            threads: 0,
            prompt_cache_mib: 0,
            log_file: None,
        }
    }
}

enum Log {
    File(PathBuf),
    Memory(
        Arc<Mutex<VecDeque<String>>>,
        Option<tokio::task::JoinHandle<()>>,
    ),
}

/// A running model server. Stop it with [`ModelServer::stop`]; dropping it kills it.
pub struct ModelServer {
    process: GroupChild,
    /// Never written: the server exits when this closes.
    stdin: Option<ChildStdin>,
    host: String,
    port: u16,
    alias: &'static str,
    log: Log,
    threads: u32,
    prompt_cache_mib: u32,
}

impl ModelServer {
    /// Starts the server for `inst` and waits until `GET /health` answers 200 (up to
    /// 180 s). If the process exits first, or does not get ready in time, the error
    /// quotes the end of its log.
    pub async fn start(inst: &Installed, opts: &ServeOptions) -> Result<ModelServer> {
        if opts.parallel == 0 {
            return Err(Error::BadOption("parallel must be at least 1".into()));
        }
        if opts.context_per_request < 256 {
            return Err(Error::BadOption(format!(
                "a context of {} tokens per request is too small: use at least 256",
                opts.context_per_request
            )));
        }
        let n_ctx = opts
            .context_per_request
            .checked_mul(opts.parallel)
            .filter(|n| *n <= 1 << 24)
            .ok_or_else(|| {
                Error::BadOption("context × parallel is too large for one server".into())
            })?;
        if opts.host.is_empty() {
            return Err(Error::BadOption("the host is empty: use 127.0.0.1".into()));
        }
        let spec = inst.size.spec();
        let available = mem_available();
        if let Some(available) = available {
            check_memory(spec, opts, n_ctx, available)?;
        }
        let prompt_cache_mib = match opts.prompt_cache_mib {
            0 => prompt_cache_mib(
                available.unwrap_or(0),
                u64::from(n_ctx) * spec.kv_bytes_per_token + spec.bytes,
            ),
            mib => mib,
        };
        let threads = match opts.threads {
            0 => std::thread::available_parallelism().map_or(1, |n| n.get() as u32),
            t => t,
        };
        let alias = inst.size.spec().alias;
        let cfg = serde_json::json!({
            "model": inst.model_file,
            "n_ctx": n_ctx,
            "parallel": opts.parallel,
            "threads": threads,
            "host": opts.host,
            "port": opts.port,
            "alias": alias,
            "cache_ram_mib": prompt_cache_mib,
            "cache_reuse": CACHE_REUSE_TOKENS,
        });
        let mut cmd = Command::new(&inst.python);
        cmd.arg("-u")
            .arg("-c")
            .arg(SCRIPT)
            .arg(cfg.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped());
        match &opts.log_file {
            Some(path) => {
                if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                    std::fs::create_dir_all(dir).map_err(Error::io("cannot create", dir))?;
                }
                rotate(path, LOG_ROTATE_BYTES);
                let f = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(path)
                    .map_err(Error::io("cannot open the server log", path))?;
                cmd.stderr(f);
            }
            None => {
                cmd.stderr(Stdio::piped());
            }
        }
        let mut process =
            agensh_process::group::spawn(&mut cmd, Priority::Normal).map_err(|source| {
                Error::Spawn {
                    python: inst.python.clone(),
                    source,
                }
            })?;
        let child = &mut process.child;
        let log = match &opts.log_file {
            Some(path) => Log::File(path.clone()),
            None => {
                let ring = Arc::new(Mutex::new(VecDeque::new()));
                let stderr = child.stderr.take().expect("piped");
                let keep = ring.clone();
                let drain = tokio::spawn(async move {
                    let mut lines = BufReader::new(stderr).lines();
                    while let Ok(Some(line)) = lines.next_line().await {
                        tracing::trace!(target: "agensh_model::server", "{line}");
                        let mut q = keep.lock().expect("not poisoned");
                        if q.len() == LOG_TAIL {
                            q.pop_front();
                        }
                        q.push_back(line);
                    }
                });
                Log::Memory(ring, Some(drain))
            }
        };
        let stdout = child.stdout.take().expect("piped");
        // From here on, dropping `server` (an error, or the caller giving up) kills it.
        let mut server = ModelServer {
            stdin: child.stdin.take(),
            process,
            host: opts.host.clone(),
            port: opts.port,
            alias,
            log,
            threads,
            prompt_cache_mib,
        };
        let deadline = Instant::now() + START_TIMEOUT;

        let mut lines = BufReader::new(stdout).lines();
        loop {
            match tokio::time::timeout_at(deadline, lines.next_line()).await {
                Err(_) => return Err(server.fail(false).await),
                Ok(Ok(Some(line))) => {
                    if let Some(url) = line.strip_prefix(READY_LINE) {
                        if let Some(port) = url
                            .trim()
                            .rsplit(':')
                            .next()
                            .and_then(|p| p.trim_end_matches('/').parse::<u16>().ok())
                        {
                            server.port = port;
                        }
                        break;
                    }
                }
                Ok(_) => return Err(server.fail(true).await),
            }
        }
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });

        let client = reqwest::Client::builder()
            .no_proxy()
            .timeout(Duration::from_secs(5))
            .build()
            .expect("a plain HTTP client builds");
        let health = format!("http://{}:{}/health", url_host(&server.host), server.port);
        loop {
            if let Ok(Some(_)) = server.process.child.try_wait() {
                return Err(server.fail(true).await);
            }
            if let Ok(r) = client.get(&health).send().await {
                if r.status().is_success() {
                    break;
                }
            }
            if Instant::now() >= deadline {
                return Err(server.fail(false).await);
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        tracing::debug!(url = %server.base_url(), pid = ?server.pid(), "model server ready");
        Ok(server)
    }

    /// The OpenAI-compatible base URL, e.g. `http://127.0.0.1:8080/v1`.
    pub fn base_url(&self) -> String {
        format!("http://{}:{}/v1", url_host(&self.host), self.port)
    }

    /// The model name the server answers to, e.g. `qwen2.5-coder-1.5b-instruct`.
    pub fn model_name(&self) -> &str {
        self.alias
    }

    /// The CPU threads it computes with.
    pub fn threads(&self) -> u32 {
        self.threads
    }

    /// The host memory it keeps cached prompts in, in MiB.
    pub fn prompt_cache_mib(&self) -> u32 {
        self.prompt_cache_mib
    }

    /// The port it listens on (the one picked, when asked for 0).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The server's process id (also its process group), while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.process.child.id()
    }

    /// Resolves when the server exits on its own (a crash, or killed from outside).
    /// Cancel-safe: use it in a `select!` next to a stop signal.
    pub async fn wait(&mut self) -> std::io::Result<std::process::ExitStatus> {
        self.process.child.wait().await
    }

    /// SIGTERM to the process group, SIGKILL after a grace period, and wait for it.
    pub async fn stop(mut self) {
        if !matches!(self.process.child.try_wait(), Ok(None)) {
            return;
        }
        self.stdin = None;
        let _ = self.process.stop(STOP_GRACE).await;
    }

    /// Kills the server (if it still runs) and builds the error for a failed start.
    async fn fail(&mut self, exited: bool) -> Error {
        if exited {
            // Its output closed: it is exiting. Give it a moment, so its exit status (not
            // a kill of ours) is what the error reports.
            let _ = tokio::time::timeout(Duration::from_secs(3), self.process.child.wait()).await;
        }
        let running = matches!(self.process.child.try_wait(), Ok(None));
        if running {
            self.process.group.kill();
        }
        let status =
            match tokio::time::timeout(Duration::from_secs(5), self.process.child.wait()).await {
                Ok(Ok(s)) => s.to_string(),
                _ => "status unknown".into(),
            };
        let tail = self.log_tail().await;
        if exited && !running {
            Error::ServerExited { status, tail }
        } else if exited {
            Error::ServerExited {
                status: "it closed its output".into(),
                tail,
            }
        } else {
            Error::ServerTimeout {
                secs: START_TIMEOUT.as_secs(),
                tail,
            }
        }
    }

    async fn log_tail(&mut self) -> String {
        let lines: Vec<String> = match &mut self.log {
            Log::Memory(ring, drain) => {
                if let Some(d) = drain.take() {
                    let _ = tokio::time::timeout(Duration::from_secs(2), d).await;
                }
                ring.lock().expect("not poisoned").iter().cloned().collect()
            }
            Log::File(path) => match read_end(path).await {
                Ok(text) => {
                    let all: Vec<&str> = text.lines().collect();
                    let from = all.len().saturating_sub(LOG_TAIL);
                    all[from..].iter().map(|s| s.to_string()).collect()
                }
                Err(e) => vec![format!("(cannot read {}: {e})", path.display())],
            },
        };
        if lines.is_empty() {
            "(empty)".into()
        } else {
            lines.join("\n")
        }
    }
}

impl Drop for ModelServer {
    fn drop(&mut self) {
        if matches!(self.process.child.try_wait(), Ok(None)) {
            self.process.group.kill();
        }
    }
}

impl std::fmt::Debug for ModelServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModelServer")
            .field("base_url", &self.base_url())
            .field("model", &self.alias)
            .field("pid", &self.process.child.id())
            .finish()
    }
}

/// The host to put in a URL: a wildcard address becomes loopback, IPv6 gets brackets.
fn url_host(host: &str) -> String {
    match host {
        "0.0.0.0" => "127.0.0.1".into(),
        "::" | "[::]" => "[::1]".into(),
        h if h.contains(':') && !h.starts_with('[') => format!("[{h}]"),
        h => h.into(),
    }
}

/// The last 16 KiB of a file, as text.
async fn read_end(path: &std::path::Path) -> std::io::Result<String> {
    let mut f = tokio::fs::File::open(path).await?;
    let len = f.metadata().await?.len();
    f.seek(std::io::SeekFrom::Start(len.saturating_sub(16 << 10)))
        .await?;
    let mut buf = Vec::new();
    f.read_to_end(&mut buf).await?;
    Ok(String::from_utf8_lossy(&buf).into_owned())
}

#[cfg(test)]
mod tests {
    use super::{check_memory, mem_available, prompt_cache_mib, rotate, url_host, ServeOptions};
    use crate::spec::Size;

    #[test]
    fn a_kv_cache_larger_than_memory_is_refused_with_what_to_lower() {
        let spec = Size::B15.spec();
        let opts = ServeOptions {
            parallel: 16,
            context_per_request: 8192,
            ..ServeOptions::default()
        };
        // 16 × 8192 tokens × 28 KiB ≈ 3.8 GB of KV cache, plus the 1.1 GB model.
        let e = check_memory(spec, &opts, 16 * 8192, 4_000_000_000)
            .unwrap_err()
            .to_string();
        assert!(e.contains("3.8 GB of KV cache"), "{e}");
        assert!(e.contains("model.context_tokens"), "{e}");
        check_memory(spec, &opts, 16 * 8192, 24_000_000_000).unwrap();
        assert!(mem_available().is_some_and(|b| b > 0));
    }

    #[test]
    fn a_log_over_the_limit_moves_aside_and_a_small_one_stays() {
        let tmp = tempfile::tempdir().unwrap();
        let log = tmp.path().join("serve-0.5b.log");
        std::fs::write(&log, "small\n").unwrap();
        rotate(&log, 100);
        assert_eq!(std::fs::read_to_string(&log).unwrap(), "small\n");
        std::fs::write(&log, "x".repeat(101)).unwrap();
        std::fs::write(tmp.path().join("serve-0.5b.log.1"), "older").unwrap();
        rotate(&log, 100);
        assert!(!log.exists());
        assert_eq!(
            std::fs::read_to_string(tmp.path().join("serve-0.5b.log.1")).unwrap(),
            "x".repeat(101)
        );
        rotate(&log, 100); // nothing there: nothing happens
        assert!(!log.exists());
    }

    #[test]
    fn the_prompt_cache_takes_a_quarter_of_what_the_model_leaves_within_bounds() {
        const GIB: u64 = 1 << 30;
        assert_eq!(prompt_cache_mib(24 * GIB, 4 * GIB), 5 * 1024);
        assert_eq!(prompt_cache_mib(64 * GIB, 4 * GIB), 8192);
        assert_eq!(prompt_cache_mib(4 * GIB, 4 * GIB), 256);
        assert_eq!(prompt_cache_mib(0, 4 * GIB), 256);
    }

    #[test]
    fn url_hosts() {
        assert_eq!(url_host("127.0.0.1"), "127.0.0.1");
        assert_eq!(url_host("0.0.0.0"), "127.0.0.1");
        assert_eq!(url_host("::"), "[::1]");
        assert_eq!(url_host("::1"), "[::1]");
        assert_eq!(url_host("localhost"), "localhost");
    }
}
