//! Every process an agent started, however it detached: a mark in the environment.
//!
//! A process group holds what an agent starts until something leaves it: a shell tool run
//! in a new session (`setsid`), a daemon's double fork. What such processes keep is their
//! environment, inherited from the agent. [`Mark`] is a variable unique to one start of one
//! agent; [`Mark::kill_all`] finds every process whose environment carries it (in
//! `/proc/*/environ`) and kills it, whatever its group, session or parent. A process that
//! starts another with an empty environment on purpose escapes the mark; its group still
//! catches it unless it also leaves that.
//!
//! Linux only (`/proc`); elsewhere nothing is found and only the group is killed.

use std::io::Read;

/// The variable that carries the mark.
pub const MARK_VAR: &str = "AGENSH_AGENT_RUN";

/// One start of one agent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mark {
    value: String,
}

impl Mark {
    /// A new mark for `name` (e.g. the worker's id), unique in this boot: the name, this
    /// process's id, the time, and a counter.
    pub fn new(name: &str) -> Mark {
        use std::sync::atomic::{AtomicU64, Ordering};
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let clean: String = name
            .chars()
            .filter(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '_')
            .take(64)
            .collect();
        Mark {
            value: format!(
                "{clean}.{}.{nanos}.{}",
                std::process::id(),
                NEXT.fetch_add(1, Ordering::Relaxed)
            ),
        }
    }

    /// The variable and its value, to set in the agent's environment.
    pub fn env(&self) -> (&'static str, &str) {
        (MARK_VAR, &self.value)
    }

    /// The ids of the live processes that carry the mark (this process never).
    pub fn processes(&self) -> Vec<u32> {
        let entry = format!("{MARK_VAR}={}", self.value).into_bytes();
        let me = std::process::id();
        let Ok(dir) = std::fs::read_dir("/proc") else {
            return Vec::new();
        };
        let mut found = Vec::new();
        let mut buf = Vec::new();
        for e in dir.flatten() {
            let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
                continue;
            };
            if pid == me {
                continue;
            }
            buf.clear();
            // A process that is gone, or not ours to read, is skipped.
            let Ok(mut f) = std::fs::File::open(e.path().join("environ")) else {
                continue;
            };
            if f.read_to_end(&mut buf).is_err() {
                continue;
            }
            if buf.split(|b| *b == 0).any(|v| v == entry.as_slice()) {
                found.push(pid);
            }
        }
        found
    }

    /// Kills (SIGKILL) every process that carries the mark, until none is left or a few
    /// rounds have passed (a process may start another while the first round runs). How
    /// many were killed.
    pub fn kill_all(&self) -> usize {
        let mut killed = 0;
        for _ in 0..5 {
            let pids = self.processes();
            if pids.is_empty() {
                break;
            }
            for pid in pids {
                if let Ok(pid) = libc::pid_t::try_from(pid) {
                    // SAFETY: kill takes plain integers and touches no memory of ours.
                    if unsafe { libc::kill(pid, libc::SIGKILL) } == 0 {
                        killed += 1;
                    }
                }
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        killed
    }
}
