//! Helpers for tests that run the real `agensh` binary as separate processes.

#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use agensh_hub::HubInfo;

mod org;
mod run;
pub mod scenarios;

// Not every test file uses every helper.
#[allow(unused_imports)]
pub use org::*;
#[allow(unused_imports)]
pub use run::*;

/// The binary under test.
pub fn agensh() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_agensh"));
    c.env_remove("AGENSH_TOKEN")
        .env_remove("AGENSH_HUB")
        .env_remove("AGENSH_DIR")
        .env_remove("AGENSH_LISTEN")
        .env_remove("AGENSH_NODE_TOKEN")
        .env_remove("AGENSH_STORE")
        .stdin(Stdio::null());
    c
}

/// Runs `cmd` to its end; fails the test, with what it wrote on stderr, unless it succeeds;
/// its output.
pub fn succeed(cmd: &mut Command) -> Output {
    let out = cmd.output().expect("the command runs");
    assert!(out.status.success(), "{}", stderr(&out));
    out
}

/// Runs `agensh ARGS` in `dir` and returns its output.
pub fn run_in(dir: &Path, args: &[&str]) -> Output {
    agensh()
        .current_dir(dir)
        .args(args)
        .output()
        .expect("agensh runs")
}

/// An organization directory in a temporary folder, created with `agensh init`: (the
/// folder, the organization's directory). [`OrgDir`] makes more.
pub fn new_org(goal: &str) -> (tempfile::TempDir, PathBuf) {
    let org = OrgDir::new(goal);
    (org.tmp, org.dir)
}

/// What a finished command wrote on stdout, as text.
pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// What a finished command wrote on stderr, as text.
pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A hub process serving `dir` on a free loopback port; killed when dropped.
pub struct HubProcess {
    pub child: Child,
    pub info: HubInfo,
}

impl HubProcess {
    /// Starts `agensh hub DIR` and waits until it has written its hub.json.
    pub fn start(dir: &Path) -> HubProcess {
        Self::start_logging(dir, Stdio::null(), "info")
    }

    /// Starts the hub with its log (stderr) going to `log` at level `level`.
    pub fn start_logging(dir: &Path, log: impl Into<Stdio>, level: &str) -> HubProcess {
        Self::start_with(dir, "127.0.0.1:0", log, level)
    }

    /// Starts the hub on `listen` (a restart on the port it had: `127.0.0.1:PORT`).
    pub fn start_on(dir: &Path, listen: &str) -> HubProcess {
        Self::start_with(dir, listen, Stdio::null(), "info")
    }

    /// Starts the hub on the store `store` (`--store URL`: a PostgreSQL database).
    pub fn start_on_store(dir: &Path, store: &str) -> HubProcess {
        Self::start_args(
            dir,
            "127.0.0.1:0",
            Stdio::null(),
            "info",
            &["--store", store],
        )
    }

    fn start_with(dir: &Path, listen: &str, log: impl Into<Stdio>, level: &str) -> HubProcess {
        Self::start_args(dir, listen, log, level, &[])
    }

    fn start_args(
        dir: &Path,
        listen: &str,
        log: impl Into<Stdio>,
        level: &str,
        more: &[&str],
    ) -> HubProcess {
        let mut child = agensh()
            .args(["hub", dir.to_str().unwrap(), "--listen", listen])
            .args(more)
            .env("AGENSH_LOG", level)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("hub starts");
        let deadline = Instant::now() + Duration::from_secs(20);
        let info = loop {
            match agensh_hub::read_hub_info(dir) {
                Ok(info) if info.pid == child.id() => break Some(info),
                _ if Instant::now() >= deadline => break None,
                _ => std::thread::sleep(Duration::from_millis(20)),
            }
        };
        match info {
            Some(info) => HubProcess { child, info },
            None => {
                let _ = child.kill();
                let _ = child.wait();
                panic!("hub did not write hub.json in time");
            }
        }
    }

    /// SIGKILL, as a crash would.
    pub fn kill_9(mut self) {
        self.child.kill().expect("kill -9");
        self.child.wait().expect("reaped");
    }

    /// SIGTERM, as an operator would; returns the exit status.
    pub fn terminate(self) -> std::process::ExitStatus {
        self.signal("TERM")
    }

    /// Sends `signal` (e.g. `INT` for Ctrl-C) and waits for the exit status.
    pub fn signal(mut self, signal: &str) -> std::process::ExitStatus {
        let pid = self.child.id() as i32;
        let status = Command::new("kill")
            .args([&format!("-{signal}"), &pid.to_string()])
            .status()
            .expect("kill runs");
        assert!(status.success());
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(s) = self.child.try_wait().expect("wait") {
                return s;
            }
            assert!(Instant::now() < deadline, "hub did not stop on SIG{signal}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The `127.0.0.1:PORT` the hub listens on.
    pub fn listen(&self) -> String {
        self.info.url.trim_start_matches("http://").to_string()
    }

    pub fn admin(&self) -> agensh_client::Client {
        agensh_client::Client::new(&self.info.url, &self.info.admin_token)
    }
}

impl Drop for HubProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `agensh model replay` on a free loopback port; stopped when dropped.
pub struct Replay {
    child: Child,
    pub url: String,
    record: PathBuf,
}

impl Replay {
    pub fn start(dir: &Path, scenario: &str) -> Replay {
        let file = dir.join("scenario.toml");
        std::fs::write(&file, scenario).unwrap();
        let record = dir.join("record.jsonl");
        let mut child = agensh()
            .args(["model", "replay"])
            .arg(&file)
            .args(["--listen", "127.0.0.1:0", "--record"])
            .arg(&record)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("the replay server starts");
        let mut first = String::new();
        let mut out = BufReader::new(child.stdout.take().unwrap());
        out.read_line(&mut first).unwrap();
        // The rest of its output is read too: a server that finds its stdout closed exits,
        // as every agensh command does on a closed pipe.
        std::thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));
        let url = first
            .split_whitespace()
            .find(|w| w.starts_with("http://"))
            .map(|w| w.trim_end_matches(';'))
            .unwrap_or_else(|| panic!("no URL in {first:?}"))
            .to_string();
        Replay { child, url, record }
    }

    /// Every request it answered, as recorded.
    pub fn requests(&self) -> Vec<serde_json::Value> {
        std::fs::read_to_string(&self.record)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }
}

impl Drop for Replay {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Waits until `ok` holds, checking every 100 ms; fails the test after `limit`.
#[allow(unused_imports)]
pub use agensh_testkit::wait_until_blocking as wait_until;

/// The JSON lines of a file (a turn log, the scripted agent's log); none when it is missing.
pub fn json_lines(path: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// Sets `key = value` in the organization's agensh.toml, on the line `agensh init` wrote
/// for that key (the first line that starts with it).
pub fn set_setting(dir: &Path, key: &str, value: &str) {
    let path = dir.join("agensh.toml");
    let mut text = std::fs::read_to_string(&path).unwrap();
    let start = text
        .find(&format!("\n{key} = "))
        .unwrap_or_else(|| panic!("no {key} in agensh.toml"))
        + 1;
    let end = start + text[start..].find('\n').unwrap();
    text.replace_range(start..end, &format!("{key} = {value}"));
    std::fs::write(&path, text).unwrap();
}
