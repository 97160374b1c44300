//! Hosts on one machine for multi-host tests and benchmarks (issue 17): network namespaces
//! joined by a bridge of their own, each host with an address of a private range, and the
//! processes a test starts inside them.
//!
//! Everything is made inside namespaces this module names — `KIND-PID-N-sw` holds the
//! bridge (`br0`) and one end of each host's veth pair, `KIND-PID-N-HOST` the other end
//! (`eth0`) and the host's processes — so nothing outside them is touched, and deleting the
//! namespaces deletes every interface with them. Cleanup is certain:
//!
//! - a **watchdog**: a shell in a process group of its own, started before anything is
//!   made, that waits for a pipe only this process holds (closed however it ends: a panic,
//!   `kill -9`) or for its time limit, then runs the teardown script: the registered stop
//!   commands ([`Testnet::at_teardown`]), `kill -9` of every process in the namespaces,
//!   `ip netns del`, and the removal of registered directories;
//! - the **drop guard**: dropping the [`Testnet`] closes the pipe and waits for that same
//!   teardown;
//! - **leftovers** of a run of the same kind whose process is gone (a machine where the
//!   watchdog was killed too) are removed by [`Testnet::create`] before it makes anything.
//!
//! A process enters its host's network namespace only (`nsenter --net`), not a mount
//! namespace of its own as `ip netns exec` would make (with `/sys` mounted again, empty of
//! cgroups): it sees the machine's `/sys/fs/cgroup` as a program on a host of its own sees
//! its own, so a node makes cgroups for its agents as it would there. Without them its
//! agents fall back to `SCHED_IDLE` one by one, which on Linux's EEVDF scheduler lets a
//! thousand agents owed CPU time since the launch hold back every node's prompts for the
//! first posts (docs/PERFORMANCE.md, "Agents without cgroups").
//!
//! Needs root, `ip` (iproute2) and `nsenter` (util-linux); [`check`] says what is missing.
//! A throwaway PostgreSQL server inside a host is agensh-testkit's `pg::Postgres`.

use std::io::Write as _;
use std::net::Ipv4Addr;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

/// Most hosts on one bridge (addresses .2 to .254 of a /24).
pub const MAX_HOSTS: usize = 250;

/// Whether this machine can make network namespaces: root (for `CAP_SYS_ADMIN` and
/// `CAP_NET_ADMIN`) and `ip` from iproute2. The error says what is needed.
pub fn check() -> Result<(), String> {
    if !is_root() {
        return Err("network namespaces need root (CAP_SYS_ADMIN and CAP_NET_ADMIN): run this as root, as CI does (e.g. `sudo -E cargo test …`)".into());
    }
    for (program, version, package) in [
        ("ip", "-V", "iproute2"),
        ("nsenter", "--version", "util-linux"),
    ] {
        if !Command::new(program)
            .arg(version)
            .output()
            .is_ok_and(|o| o.status.success())
        {
            return Err(format!("the `{program}` command ({package}) is missing: install it (Debian/Ubuntu: apt-get install {package}; scripts/test does so as root)"));
        }
    }
    Ok(())
}

/// The command line prefix that runs a program inside network namespace `netns` (named by
/// `ip netns add`), and in nothing else of its own.
pub fn enter(netns: &str) -> [String; 3] {
    [
        "nsenter".to_string(),
        format!("--net=/run/netns/{netns}"),
        "--".to_string(),
    ]
}

/// Whether this process runs as root (its effective uid, from /proc).
pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(2).map(|u| u == "0"))
        })
        .unwrap_or(false)
}

/// One host: a network namespace with one address on the bridge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Host {
    /// The name the test gave it.
    pub name: String,
    /// Its network namespace (`/run/netns/NETNS`; [`Testnet::command`] enters it).
    pub netns: String,
    /// Its address on the bridge.
    pub addr: Ipv4Addr,
}

/// Hosts on a bridge of their own, torn down when dropped (and by a watchdog when this
/// process dies).
pub struct Testnet {
    prefix: String,
    switch: String,
    hosts: Vec<Host>,
    /// Holds the teardown script.
    dir: PathBuf,
    /// Shell lines run first at teardown (stopping servers cleanly).
    stops: Vec<String>,
    /// Directories removed last.
    remove: Vec<PathBuf>,
    watchdog: Option<Watchdog>,
}

impl Testnet {
    /// Makes `hosts` (short names: letters, digits, `-`) on one bridge, at addresses of
    /// 10.X.Y.0/24. `kind` names what makes them (e.g. `agmh`): namespaces of an earlier
    /// run of the same kind whose process is gone are removed first. The watchdog tears
    /// everything down after `limit` even while this process runs (a test that hangs).
    pub fn create(kind: &str, hosts: &[&str], limit: Duration) -> Result<Testnet, String> {
        check()?;
        let plain = |s: &str| {
            !s.is_empty()
                && s.len() <= 24
                && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        };
        if !plain(kind) || hosts.iter().any(|h| !plain(h) || *h == "sw") {
            return Err(format!(
                "names of the kind and hosts are 1 to 24 letters, digits or '-' (not \"sw\"): {kind:?}, {hosts:?}"
            ));
        }
        if hosts.is_empty() || hosts.len() > MAX_HOSTS {
            return Err(format!("1 to {MAX_HOSTS} hosts, not {}", hosts.len()));
        }
        remove_leftovers(kind);
        static N: AtomicU32 = AtomicU32::new(0);
        let pid = std::process::id();
        let prefix = format!("{kind}-{pid}-{}", N.fetch_add(1, Ordering::Relaxed));
        let dir = std::env::temp_dir().join(format!("{prefix}-net"));
        std::fs::create_dir_all(&dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        // A subnet of 10/8 from the pid: the namespaces are isolated, so it cannot clash
        // with anything, but two runs side by side stay apart in their logs.
        let (a, b) = (100 + (pid % 100) as u8, (pid / 100 % 256) as u8);
        let mut net = Testnet {
            switch: format!("{prefix}-sw"),
            hosts: hosts
                .iter()
                .enumerate()
                .map(|(i, h)| Host {
                    name: h.to_string(),
                    netns: format!("{prefix}-{h}"),
                    addr: Ipv4Addr::new(10, a, b, (i + 2) as u8),
                })
                .collect(),
            prefix,
            dir: dir.clone(),
            stops: Vec::new(),
            remove: vec![dir],
            watchdog: None,
        };
        net.write_teardown()?;
        net.start_watchdog(limit)?;
        net.build()?;
        Ok(net)
    }

    fn build(&self) -> Result<(), String> {
        let sw = self.switch.as_str();
        ip(&["netns", "add", sw])?;
        ip(&["-n", sw, "link", "set", "lo", "up"])?;
        ip(&["-n", sw, "link", "add", "br0", "type", "bridge"])?;
        ip(&["-n", sw, "link", "set", "br0", "up"])?;
        for (i, h) in self.hosts.iter().enumerate() {
            let port = format!("v{i}");
            let ns = h.netns.as_str();
            ip(&["netns", "add", ns])?;
            ip(&[
                "-n", sw, "link", "add", &port, "type", "veth", "peer", "name", "eth0", "netns", ns,
            ])?;
            ip(&["-n", sw, "link", "set", &port, "master", "br0", "up"])?;
            ip(&[
                "-n",
                ns,
                "addr",
                "add",
                &format!("{}/24", h.addr),
                "dev",
                "eth0",
            ])?;
            ip(&["-n", ns, "link", "set", "eth0", "up"])?;
            ip(&["-n", ns, "link", "set", "lo", "up"])?;
        }
        Ok(())
    }

    /// The hosts, in the order given.
    pub fn hosts(&self) -> &[Host] {
        &self.hosts
    }

    /// The host named `name`. Panics when there is none (a test's own mistake).
    pub fn host(&self, name: &str) -> &Host {
        self.hosts
            .iter()
            .find(|h| h.name == name)
            .unwrap_or_else(|| panic!("no host {name:?} in this testnet"))
    }

    /// The prefix of every namespace this testnet made.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// `program` to run inside host `name` (`nsenter --net`, which execs it: the child's
    /// pid is the program's). Only the network is the host's: the file system, `/sys` and
    /// its cgroups are the machine's, as they would be on a host of its own.
    pub fn command(&self, name: &str, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let [nsenter, net, end] = enter(&self.host(name).netns);
        let mut c = Command::new(nsenter);
        c.args([net, end]).arg(program);
        c
    }

    /// The pids of every process inside host `name`.
    pub fn pids(&self, name: &str) -> Vec<u32> {
        netns_pids(&self.host(name).netns)
    }

    /// A shell line the teardown runs first, before every process in the namespaces is
    /// killed (e.g. a server's clean stop), bounded by 20 s.
    pub fn at_teardown(&mut self, line: &str) -> Result<(), String> {
        self.stops.push(line.to_string());
        self.write_teardown()
    }

    /// A directory the teardown removes, after every process is gone.
    pub fn remove_at_teardown(&mut self, dir: &Path) -> Result<(), String> {
        self.remove.push(dir.to_path_buf());
        self.write_teardown()
    }

    fn teardown_path(&self) -> PathBuf {
        self.dir.join("teardown.sh")
    }

    /// The script the watchdog and the drop guard run (rewritten as stops are added).
    fn write_teardown(&self) -> Result<(), String> {
        let mut s = String::from("#!/bin/sh\n");
        for stop in &self.stops {
            s.push_str(&format!(
                "timeout 20 sh -c {} >/dev/null 2>&1\n",
                quote(stop)
            ));
        }
        let all: Vec<&str> = self
            .hosts
            .iter()
            .map(|h| h.netns.as_str())
            .chain([self.switch.as_str()])
            .collect();
        s.push_str(&teardown_lines(&all));
        for d in &self.remove {
            s.push_str(&format!("rm -rf {}\n", quote(&d.to_string_lossy())));
        }
        let tmp = self.dir.join("teardown.sh.new");
        std::fs::write(&tmp, s)
            .and_then(|_| std::fs::rename(&tmp, self.teardown_path()))
            .map_err(|e| format!("cannot write the teardown script: {e}"))
    }

    /// The watchdog that runs the teardown script when this process ends, or after `limit`.
    fn start_watchdog(&mut self, limit: Duration) -> Result<(), String> {
        let script = format!("sh {}", quote(&self.teardown_path().to_string_lossy()));
        self.watchdog = Some(Watchdog::start(&script, Some(limit), "the testnet")?);
        Ok(())
    }

    /// Tears everything down now (and waits for it): what dropping does.
    pub fn teardown(&mut self) {
        if let Some(mut watchdog) = self.watchdog.take() {
            watchdog.fire();
        }
    }
}

impl Drop for Testnet {
    fn drop(&mut self) {
        self.teardown();
    }
}

/// A shell in a process group of its own that runs a cleanup script once its standard input
/// closes: when this process ends, however it ends (a panic, `kill -9`), or when
/// [`Watchdog::fire`] (or dropping it) closes the pipe only this process holds.
pub struct Watchdog {
    child: Child,
    stdin: Option<ChildStdin>,
}

impl Watchdog {
    /// Starts the watchdog of `script` (a line for `sh`); with `limit`, it also runs the
    /// script after that long. `what` names what it cleans up, for the error.
    pub fn start(script: &str, limit: Option<Duration>, what: &str) -> Result<Watchdog, String> {
        let wait = match limit {
            Some(limit) => format!("timeout {} cat >/dev/null", limit.as_secs().max(1)),
            None => "cat >/dev/null".to_string(),
        };
        let mut child = Command::new("sh")
            .args(["-c", &format!("{wait}; {script}")])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .map_err(|e| format!("cannot start {what}'s watchdog: {e}"))?;
        let stdin = child.stdin.take();
        Ok(Watchdog { child, stdin })
    }

    /// Runs the script now and waits for it to finish (once; what dropping does).
    pub fn fire(&mut self) {
        if let Some(mut stdin) = self.stdin.take() {
            let _ = stdin.flush();
            drop(stdin);
            let _ = self.child.wait();
        }
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.fire();
    }
}

/// Shell lines that kill every process in `namespaces` and delete them.
fn teardown_lines(namespaces: &[&str]) -> String {
    let mut s = String::new();
    for _ in 0..2 {
        // Twice: a process forked while the first pass ran is caught by the second.
        for ns in namespaces {
            s.push_str(&format!(
                "ip netns pids {} 2>/dev/null | xargs -r kill -9 2>/dev/null\n",
                quote(ns)
            ));
        }
    }
    for ns in namespaces {
        s.push_str(&format!("ip netns del {} 2>/dev/null\n", quote(ns)));
    }
    s
}

/// Removes the namespaces of earlier runs of `kind` (`KIND-PID-…`) whose process is gone,
/// killing what still runs in them. Namespaces of a run still going are left alone.
pub fn remove_leftovers(kind: &str) -> Vec<String> {
    let Ok(out) = Command::new("ip").args(["netns", "list"]).output() else {
        return Vec::new();
    };
    let stale: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|name| {
            let Some(rest) = name.strip_prefix(kind).and_then(|r| r.strip_prefix('-')) else {
                return false;
            };
            match rest.split('-').next().and_then(|p| p.parse::<u32>().ok()) {
                Some(pid) => !Path::new(&format!("/proc/{pid}")).exists(),
                None => false,
            }
        })
        .map(str::to_string)
        .collect();
    if !stale.is_empty() {
        let names: Vec<&str> = stale.iter().map(String::as_str).collect();
        let _ = Command::new("sh")
            .args(["-c", &teardown_lines(&names)])
            .status();
    }
    stale
}

/// The pids inside network namespace `netns`.
fn netns_pids(netns: &str) -> Vec<u32> {
    Command::new("ip")
        .args(["netns", "pids", netns])
        .output()
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// Runs `ip ARGS`; its error output on failure.
fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run ip: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// `s` as one single-quoted shell word.
pub fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shell_words_are_quoted_whole() {
        assert_eq!(quote("a b"), "'a b'");
        assert_eq!(quote("it's"), "'it'\\''s'");
    }

    #[test]
    fn the_teardown_kills_before_it_deletes() {
        let s = teardown_lines(&["x-1-0-a", "x-1-0-sw"]);
        let kill = s.find("xargs -r kill -9").unwrap();
        let del = s.find("ip netns del 'x-1-0-a'").unwrap();
        assert!(kill < del, "{s}");
        assert!(s.contains("ip netns del 'x-1-0-sw'"), "{s}");
    }
}
