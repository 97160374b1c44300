//! Shared test harness for the adapter and scripted-agent tests: the test kit's
//! organization (a real hub in-process over a seeded workspace) with agents' contexts, the
//! `agensh` binary (for `agensh agent script`), and helpers to read the scripted agent's log
//! and to look for processes in /proc.

// Each test file uses a different part of this module.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use agensh_domain::config::Config;
use agensh_node::adapters::acp::AcpAgent;
use agensh_node::adapters::AgentContext;
use serde_json::Value;

pub use agensh_testkit::Org;

pub mod replay;
pub mod worker;

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

/// An organization over a workspace seeded with `README.md` and `PARTS.md`, with `n`
/// workers.
pub async fn start(n: usize) -> Org {
    start_with(n, Config::with_goal("test")).await
}

/// [`start`] with the hub's configuration `config` (a merge gate, say).
pub async fn start_with(n: usize, config: Config) -> Org {
    Org::builder()
        .file("README.md", "hello\n")
        .file("PARTS.md", PARTS_MD)
        .config(config)
        .workers(n)
        .start()
        .await
}

/// What these tests add to the test kit's organization: agents in it.
pub trait AgentOrg {
    /// `id`'s checkout (made on first use) and the context an adapter gets for it.
    async fn context(&self, id: &str) -> AgentContext;
    /// Writes a scenario file and returns its path.
    fn scenario(&self, name: &str, text: &str) -> PathBuf;
    /// Where the scripted agents of a test log their tool calls.
    fn script_log(&self) -> PathBuf;
    /// The scripted agent on `scenario`, logging to [`AgentOrg::script_log`].
    fn script_agent(&self, scenario: &Path) -> AcpAgent;
    /// Every line of the script log.
    fn log_entries(&self) -> Vec<Value>;
}

impl AgentOrg for Org {
    async fn context(&self, id: &str) -> AgentContext {
        let checkout = self.checkout(id).await;
        AgentContext {
            worker: id.to_string(),
            checkout,
            hub_url: self.url().to_string(),
            token: self.token(id).to_string(),
            mcp_proxy: None,
            state_dir: self.dir().join(".agensh").join("logs").join(id),
            agent_home: self.dir().join(".agensh").join("agents").join(id),
            agensh: agensh_bin(),
            heartbeat: Default::default(),
            interrupt: Default::default(),
        }
    }

    fn scenario(&self, name: &str, text: &str) -> PathBuf {
        let path = self.tmp.path().join(format!("{name}.toml"));
        std::fs::write(&path, text).unwrap();
        path
    }

    fn script_log(&self) -> PathBuf {
        self.tmp.path().join("script.jsonl")
    }

    fn script_agent(&self, scenario: &Path) -> AcpAgent {
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

    fn log_entries(&self) -> Vec<Value> {
        std::fs::read_to_string(self.script_log())
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).expect("log lines are JSON"))
            .collect()
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
