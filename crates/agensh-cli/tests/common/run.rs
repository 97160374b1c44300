//! `agensh run` as a process: started with the scripted agent (or any other), waited for
//! with a limit, its output and its JSON summary; and `agensh node` against a hub process.

use std::ffi::OsStr;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::{agensh, stderr, HubProcess};

/// How to start `agensh run DIR`: on a free loopback port, its summary as JSON on stdout.
pub struct AgenshRun(Command);

impl AgenshRun {
    /// `agensh run DIR --listen 127.0.0.1:0 --json`.
    pub fn new(dir: &Path) -> AgenshRun {
        let mut c = agensh();
        c.arg("run")
            .arg(dir)
            .args(["--listen", "127.0.0.1:0", "--json"]);
        AgenshRun(c)
    }

    /// [`new`](Self::new) with the scripted agent on `scenario`
    /// (`--agent script --scenario FILE`).
    pub fn script(dir: &Path, scenario: &Path) -> AgenshRun {
        Self::new(dir)
            .args(["--agent", "script", "--scenario"])
            .arg(scenario)
    }

    /// `--workers N`.
    pub fn workers(self, n: usize) -> Self {
        self.args(["--workers", &n.to_string()])
    }

    /// `--hours H`.
    pub fn hours(self, hours: &str) -> Self {
        self.args(["--hours", hours])
    }

    /// The scripted agents log what they did to `log` (`AGENSH_SCRIPT_LOG`).
    pub fn script_log(self, log: &Path) -> Self {
        self.env("AGENSH_SCRIPT_LOG", log)
    }

    pub fn arg(mut self, arg: impl AsRef<OsStr>) -> Self {
        self.0.arg(arg);
        self
    }

    pub fn args<S: AsRef<OsStr>>(mut self, args: impl IntoIterator<Item = S>) -> Self {
        self.0.args(args);
        self
    }

    pub fn env(mut self, key: &str, value: impl AsRef<OsStr>) -> Self {
        self.0.env(key, value);
        self
    }

    /// Starts it, stdout and stderr piped.
    pub fn spawn(mut self) -> RunProcess {
        let child = self
            .0
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("agensh run starts");
        RunProcess(Some(child))
    }

    /// Runs it to its end (no limit) and returns its output.
    pub fn output(mut self) -> Output {
        self.0.output().expect("agensh run runs")
    }
}

/// A started `agensh run`; killed (-9) when dropped before it was waited for, so a failed
/// test leaves no run behind.
pub struct RunProcess(Option<Child>);

impl RunProcess {
    fn child(&mut self) -> &mut Child {
        self.0.as_mut().expect("the run was waited for already")
    }

    /// The process id.
    pub fn id(&mut self) -> u32 {
        self.child().id()
    }

    /// Whether it has ended (and its exit status then).
    pub fn try_wait(&mut self) -> Option<std::process::ExitStatus> {
        self.child().try_wait().expect("wait")
    }

    /// Sends it `signal` (e.g. `INT`, as Ctrl-C does).
    pub fn signal(&mut self, signal: &str) {
        let status = Command::new("kill")
            .args([&format!("-{signal}"), &self.id().to_string()])
            .status()
            .expect("kill runs");
        assert!(status.success());
    }

    /// SIGKILL (of hub and node together when they run in it), and reaped.
    pub fn kill_9(mut self) {
        let mut child = self.0.take().expect("the run was waited for already");
        child.kill().unwrap();
        child.wait().unwrap();
    }

    /// SIGKILL, then what it wrote until then (read to the end of its output).
    pub fn kill_9_with_output(mut self) -> Output {
        let mut child = self.0.take().expect("the run was waited for already");
        let _ = child.kill();
        child.wait_with_output().unwrap()
    }

    /// Waits for its end, however long it takes; its output.
    pub fn output(mut self) -> Output {
        let child = self.0.take().expect("the run was waited for already");
        child.wait_with_output().unwrap()
    }

    /// Waits for its end and returns its output; kills it and fails the test after `limit`.
    pub fn wait(self, limit: Duration) -> Output {
        self.wait_watching(limit, Duration::from_millis(100), || {})
    }

    /// [`wait`](Self::wait), calling `look` every `every` while it runs.
    pub fn wait_watching(
        mut self,
        limit: Duration,
        every: Duration,
        mut look: impl FnMut(),
    ) -> Output {
        let child = self.0.take().expect("the run was waited for already");
        let started = Instant::now();
        let pid = child.id();
        let waiter = std::thread::spawn(move || child.wait_with_output().unwrap());
        while !waiter.is_finished() {
            look();
            if started.elapsed() > limit {
                let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
                panic!("agensh run did not end within {limit:?}");
            }
            std::thread::sleep(every);
        }
        waiter.join().unwrap()
    }

    /// Waits for it to end well (exit 0) within `limit`; its JSON summary.
    pub fn finish(self, limit: Duration) -> Value {
        let out = self.wait(limit);
        assert!(out.status.success(), "run failed: {}", stderr(&out));
        run_summary(&out)
    }
}

impl Drop for RunProcess {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The JSON summary `agensh run --json` printed on stdout.
pub fn run_summary(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "summary is not JSON ({e}): {}\nstderr: {}",
            String::from_utf8_lossy(&out.stdout),
            stderr(out)
        )
    })
}

/// `agensh node --workers N --agent script --scenario S --hours H` in `dir`, against the hub
/// process `hub` with its admin token, run to its end; fails the test unless it succeeds.
pub fn run_node(dir: &Path, hub: &HubProcess, workers: usize, scenario: &Path, hours: &str) {
    let node = agensh()
        .current_dir(dir)
        .args(["--hub", &hub.info.url, "--token", &hub.info.admin_token])
        .args(["node", "--workers", &workers.to_string()])
        .args(["--agent", "script", "--scenario"])
        .arg(scenario)
        .args(["--hours", hours])
        .output()
        .unwrap();
    assert!(node.status.success(), "{}", stderr(&node));
}
