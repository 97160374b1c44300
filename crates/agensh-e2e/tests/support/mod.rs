//! Shared test harness for the adapter and scripted-agent tests: a real hub in-process over
//! a seeded workspace, worker checkouts, the `agensh` binary (for `agensh agent script`),
//! and helpers to read the scripted agent's log and to look for processes in /proc.

// Each test file uses a different part of this module.
#![allow(dead_code)]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use agensh_client::Client;
use agensh_domain::config::Config;
use agensh_hub::RunningHub;
use agensh_node::adapters::acp::AcpAgent;
use agensh_node::adapters::AgentContext;
use agensh_store::SqliteStore;
use agensh_workspace::seed::Source;
use agensh_workspace::Workspace;
use serde_json::Value;
use tempfile::TempDir;

pub mod replay;

/// What `PARTS.md` on the first `main` holds; scenarios append a line per part to it, so
/// merges of parallel branches conflict there.
pub const PARTS_MD: &str = "# parts\n";

/// The `agensh` binary, built (or brought up to date) once per test process with
/// `cargo build -p agensh`, next to this test binary (`target/<profile>/agensh`).
pub fn agensh_bin() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let exe = std::env::current_exe().expect("test binary path");
        // target/<profile>/deps/<test> → target/<profile>
        let profile_dir = exe
            .parent()
            .and_then(Path::parent)
            .expect("test binary under target/<profile>/deps")
            .to_path_buf();
        let target_dir = profile_dir.parent().expect("target dir").to_path_buf();
        let bin = profile_dir.join("agensh");
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| env!("CARGO").to_string());
        let mut cmd = std::process::Command::new(&cargo);
        cmd.args(["build", "--quiet", "-p", "agensh", "--bin", "agensh"])
            .arg("--target-dir")
            .arg(&target_dir)
            .current_dir(env!("CARGO_MANIFEST_DIR"));
        if profile_dir.file_name().and_then(|n| n.to_str()) == Some("release") {
            cmd.arg("--release");
        }
        match cmd.status() {
            Ok(s) if s.success() => {}
            Ok(s) => panic!(
                "`cargo build -p agensh` failed ({s}) — the tests need the agensh binary at {}",
                bin.display()
            ),
            Err(e) if bin.exists() => {
                eprintln!("cannot run {cargo} ({e}); using the existing {}", bin.display())
            }
            Err(e) => panic!(
                "the agensh binary is missing at {} and {cargo} cannot run ({e}) — run `cargo build -p agensh` first",
                bin.display()
            ),
        }
        assert!(bin.exists(), "no agensh binary at {}", bin.display());
        bin
    })
    .clone()
}

/// An organization directory with a seeded workspace, a hub serving it, and workers.
pub struct Org {
    pub tmp: TempDir,
    pub hub: RunningHub,
    pub ws: Workspace,
    /// (id, token) of each worker, in id order.
    pub workers: Vec<(String, String)>,
}

impl Org {
    /// A hub over a workspace seeded with `README.md` and `PARTS.md`, with `n` workers.
    pub async fn start(n: usize) -> Org {
        Org::start_with(n, Config::with_goal("test")).await
    }

    /// [`Org::start`] with the hub's configuration `config` (a merge gate, say).
    pub async fn start_with(n: usize, config: Config) -> Org {
        let tmp = tempfile::tempdir().unwrap();
        let state = tmp.path().join("org").join(".agensh");
        std::fs::create_dir_all(&state).unwrap();
        let seed = tmp.path().join("seed");
        std::fs::create_dir_all(&seed).unwrap();
        std::fs::write(seed.join("README.md"), "hello\n").unwrap();
        std::fs::write(seed.join("PARTS.md"), PARTS_MD).unwrap();
        let ws = agensh_workspace::seed::create(
            &state.join("workspace.git"),
            Source::Dir(&seed),
            "test",
        )
        .await
        .unwrap();
        let store = SqliteStore::open(&state.join("store.sqlite")).unwrap();
        let hub = agensh_hub::start_with_workspace(
            Arc::new(store),
            Some(ws.clone()),
            config,
            "127.0.0.1:0",
        )
        .await
        .unwrap();
        let workers = Client::new(&hub.url, &hub.admin_token)
            .add_workers(n)
            .await
            .unwrap()
            .into_iter()
            .map(|w| (w.id, w.token))
            .collect();
        Org {
            tmp,
            hub,
            ws,
            workers,
        }
    }

    pub fn dir(&self) -> PathBuf {
        self.tmp.path().join("org")
    }

    pub fn id(&self, i: usize) -> String {
        self.workers[i].0.clone()
    }

    pub fn token(&self, id: &str) -> &str {
        &self
            .workers
            .iter()
            .find(|(w, _)| w == id)
            .unwrap_or_else(|| panic!("no worker {id}"))
            .1
    }

    /// A REST client with `id`'s token.
    pub fn client(&self, id: &str) -> Client {
        Client::new(&self.hub.url, self.token(id))
    }

    /// `id`'s checkout (made on first use) and the context an adapter gets for it.
    pub async fn context(&self, id: &str) -> AgentContext {
        let checkout = agensh_workspace::checkout::checkout_dir(&self.dir(), id);
        agensh_workspace::checkout::create(&self.ws, id, &checkout)
            .await
            .unwrap();
        AgentContext {
            worker: id.to_string(),
            checkout,
            hub_url: self.hub.url.clone(),
            token: self.token(id).to_string(),
            mcp_proxy: None,
            state_dir: self.dir().join(".agensh").join("logs").join(id),
            agent_home: self.dir().join(".agensh").join("agents").join(id),
            agensh: agensh_bin(),
            heartbeat: Default::default(),
        }
    }

    /// Writes a scenario file and returns its path.
    pub fn scenario(&self, name: &str, text: &str) -> PathBuf {
        let path = self.tmp.path().join(format!("{name}.toml"));
        std::fs::write(&path, text).unwrap();
        path
    }

    /// Where the scripted agents of a test log their tool calls.
    pub fn script_log(&self) -> PathBuf {
        self.tmp.path().join("script.jsonl")
    }

    /// The scripted agent on `scenario`, logging to [`Org::script_log`].
    pub fn script_agent(&self, scenario: &Path) -> AcpAgent {
        AcpAgent::new(
            vec![
                agensh_bin().display().to_string(),
                "agent".into(),
                "script".into(),
                "--scenario".into(),
                scenario.display().to_string(),
            ],
            vec![(
                "AGENSH_SCRIPT_LOG".into(),
                self.script_log().display().to_string(),
            )],
        )
    }

    /// Every line of the script log.
    pub fn log_entries(&self) -> Vec<Value> {
        std::fs::read_to_string(self.script_log())
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).expect("log lines are JSON"))
            .collect()
    }

    /// Runs git in the bare repository; its trimmed output.
    pub async fn bare_git(&self, args: &[&str]) -> String {
        let out = tokio::process::Command::new("git")
            .arg("--git-dir")
            .arg(self.ws.git_dir())
            .args(args)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .output()
            .await
            .unwrap();
        assert!(
            out.status.success(),
            "git {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// The files on `main`.
    pub async fn files_on_main(&self) -> BTreeSet<String> {
        self.bare_git(&["ls-tree", "-r", "--name-only", "main"])
            .await
            .lines()
            .map(str::to_string)
            .collect()
    }

    /// A file's text on `main`.
    pub async fn on_main(&self, path: &str) -> String {
        self.bare_git(&["show", &format!("main:{path}")]).await
    }
}

/// Log entries of `event` (`tool`, `permission`, `client_request`, `turn_end`) by `worker`.
pub fn entries<'a>(log: &'a [Value], event: &str, worker: &str) -> Vec<&'a Value> {
    log.iter()
        .filter(|e| e["event"] == event && e["worker"] == worker)
        .collect()
}

/// The tool calls `worker` made, by tool name, in order.
pub fn tools_called(log: &[Value], worker: &str) -> Vec<String> {
    entries(log, "tool", worker)
        .iter()
        .map(|e| e["tool"].as_str().unwrap_or("").to_string())
        .collect()
}

/// The processes of group `pgid` still alive a moment after it was killed (a killed
/// process takes a few milliseconds to exit); empty when the group is gone.
pub async fn group_left_after_kill(pgid: u32) -> Vec<(u32, char, String)> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(3);
    loop {
        let left = live_group_members(pgid);
        if left.is_empty() || std::time::Instant::now() > deadline {
            return left;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// Processes (pid, state, command name) in process group `pgid` that are not zombies.
pub fn live_group_members(pgid: u32) -> Vec<(u32, char, String)> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // pid (comm) state ppid pgrp ...; comm may contain spaces and parentheses.
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        let comm = stat[open + 1..close].to_string();
        let rest = &stat[close + 1..];
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let state = fields.first().and_then(|s| s.chars().next()).unwrap_or('?');
        let pgrp: u32 = fields.get(2).and_then(|s| s.parse().ok()).unwrap_or(0);
        if (pid == pgid || pgrp == pgid) && state != 'Z' && state != 'X' {
            found.push((pid, state, comm));
        }
    }
    found
}
