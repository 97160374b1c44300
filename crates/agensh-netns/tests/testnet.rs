//! The namespace plumbing itself, as root (a tier of scripts/test: `--ignored`): hosts reach
//! each other over the bridge and nothing else, and every namespace and process is gone
//! after a drop, after a `kill -9` of the process that made them (the watchdog), and, for
//! a run whose watchdog died too, at the next start.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use agensh_netns::Testnet;

fn netns_list() -> String {
    let out = Command::new("ip").args(["netns", "list"]).output().unwrap();
    String::from_utf8_lossy(&out.stdout).to_string()
}

fn must() {
    if let Err(e) = agensh_netns::check() {
        panic!("{e}");
    }
}

/// This test binary run again as a helper inside a host (`ROLE=serve|connect ADDR`) or as
/// the owner of a testnet (`ROLE=hold`).
fn helper(role: &str, arg: &str) -> Command {
    let mut c = Command::new(std::env::current_exe().unwrap());
    c.args([
        "--exact",
        "helper_role",
        "--ignored",
        "--nocapture",
        "--test-threads=1",
    ])
    .env("AGENSH_NETNS_ROLE", role)
    .env("AGENSH_NETNS_ARG", arg);
    c
}

/// Not a test of its own: what `helper` runs.
#[test]
#[ignore = "a helper process of the other tests"]
fn helper_role() {
    let arg = std::env::var("AGENSH_NETNS_ARG").unwrap_or_default();
    match std::env::var("AGENSH_NETNS_ROLE").as_deref() {
        Ok("serve") => {
            let l = TcpListener::bind(&arg).unwrap();
            println!("LISTENING");
            let (mut s, _) = l.accept().unwrap();
            s.write_all(b"hello over the bridge").unwrap();
        }
        Ok("connect") => {
            match TcpStream::connect_timeout(&arg.parse().unwrap(), Duration::from_secs(3)) {
                Ok(mut s) => {
                    let mut text = String::new();
                    match s.read_to_string(&mut text) {
                        Ok(_) => println!("GOT {text}"),
                        Err(e) => println!("REFUSED {e}"),
                    }
                }
                Err(e) => println!("REFUSED {e}"),
            }
        }
        Ok("hold") => {
            let net = Testnet::create("agnt-hold", &["a", "b"], Duration::from_secs(120)).unwrap();
            println!("PREFIX {}", net.prefix());
            std::thread::sleep(Duration::from_secs(120));
        }
        _ => {}
    }
}

/// What `readlink` says of each of `links` (`/proc/self/ns/net`, …) in `cmd`'s process.
fn namespaces(mut cmd: Command, links: &[&str]) -> Vec<String> {
    let out = cmd.arg("readlink").args(links).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

#[test]
#[ignore = "needs root and iproute2: the multi-host tier of scripts/test"]
fn a_process_in_a_host_has_its_network_and_the_machines_files_and_cgroups() {
    must();
    let net = Testnet::create("agnm", &["a"], Duration::from_secs(120)).unwrap();
    let links = [
        "/proc/self/ns/net",
        "/proc/self/ns/mnt",
        "/proc/self/ns/cgroup",
    ];
    let outside = namespaces(Command::new("env"), &links);
    let inside = namespaces(net.command("a", "env"), &links);
    assert_eq!(inside.len(), 3, "{inside:?}");
    assert_ne!(inside[0], outside[0], "the host's own network");
    // The same mounts (a node there sees /sys/fs/cgroup and makes its agents' cgroups) and
    // the same cgroup namespace as a program outside.
    assert_eq!(inside[1..], outside[1..]);
}

#[test]
#[ignore = "needs root and iproute2: the multi-host tier of scripts/test"]
fn hosts_reach_each_other_over_the_bridge_and_nothing_is_left_after_a_drop() {
    must();
    let net = Testnet::create("agnt", &["a", "b"], Duration::from_secs(120)).unwrap();
    let a = net.host("a").clone();
    let prefix = net.prefix().to_string();
    assert!(netns_list().contains(&format!("{prefix}-a")));
    let mut server = net
        .command("a", std::env::current_exe().unwrap())
        .args([
            "--exact",
            "helper_role",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("AGENSH_NETNS_ROLE", "serve")
        .env("AGENSH_NETNS_ARG", format!("{}:7000", a.addr))
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(server.stdout.take().unwrap());
    let mut line = String::new();
    while !line.contains("LISTENING") {
        line.clear();
        assert!(out.read_line(&mut line).unwrap() > 0, "the server ended");
    }
    let connect = |host: Option<&str>, addr: String| {
        let mut c = match host {
            Some(h) => {
                let mut c = net.command(h, std::env::current_exe().unwrap());
                c.args([
                    "--exact",
                    "helper_role",
                    "--ignored",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env("AGENSH_NETNS_ROLE", "connect")
                .env("AGENSH_NETNS_ARG", addr);
                c
            }
            None => helper("connect", &addr),
        };
        String::from_utf8_lossy(&c.output().unwrap().stdout).to_string()
    };
    // The root namespace is not on the bridge: only the hosts reach each other.
    let root = connect(None, format!("{}:7000", a.addr));
    assert!(!root.contains("GOT hello"), "{root}");
    let got = connect(Some("b"), format!("{}:7000", a.addr));
    assert!(got.contains("GOT hello over the bridge"), "{got}");
    // A process inside a host is counted there, and killed at the drop.
    let mut sleeper = net.command("b", "sleep").arg("600").spawn().unwrap();
    // `nsenter` enters the namespace just after it starts.
    let seen = Instant::now();
    while !net.pids("b").contains(&sleeper.id()) {
        assert!(
            seen.elapsed() < Duration::from_secs(10),
            "sleep is not in host b"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    drop(net);
    assert!(!netns_list().contains(&prefix), "{}", netns_list());
    let status = sleeper.try_wait().unwrap().expect("sleep was killed");
    use std::os::unix::process::ExitStatusExt as _;
    assert_eq!(status.signal(), Some(9), "{status}");
    let _ = server.wait();
}

#[test]
#[ignore = "needs root and iproute2: the multi-host tier of scripts/test"]
fn the_watchdog_removes_everything_when_its_owner_is_killed_and_leftovers_go_at_the_next_start() {
    must();
    let mut owner = helper("hold", "").stdout(Stdio::piped()).spawn().unwrap();
    let mut out = BufReader::new(owner.stdout.take().unwrap());
    let mut line = String::new();
    let prefix = loop {
        line.clear();
        assert!(out.read_line(&mut line).unwrap() > 0, "the owner ended");
        // libtest may have written `test helper_role ... ` before it on the line.
        if let Some((_, p)) = line.trim().split_once("PREFIX ") {
            break p.to_string();
        }
    };
    assert!(netns_list().contains(&prefix));
    owner.kill().unwrap();
    owner.wait().unwrap();
    let started = Instant::now();
    while netns_list().contains(&prefix) {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "left: {}",
            netns_list()
        );
        std::thread::sleep(Duration::from_millis(100));
    }

    // A run whose watchdog died too: its namespace (the pid in its name is gone) is removed
    // when the next testnet of its kind is made; one of a live process is not.
    let dead = {
        let mut c = Command::new("true").spawn().unwrap();
        let pid = c.id();
        c.wait().unwrap();
        pid
    };
    let stale = format!("agnt-left-{dead}-0-a");
    let live = format!("agnt-left-{}-9-a", std::process::id());
    for ns in [&stale, &live] {
        assert!(Command::new("ip")
            .args(["netns", "add", ns])
            .status()
            .unwrap()
            .success());
    }
    let net = Testnet::create("agnt-left", &["x"], Duration::from_secs(60)).unwrap();
    let list = netns_list();
    assert!(!list.contains(&stale), "{list}");
    assert!(list.contains(&live), "{list}");
    drop(net);
    Command::new("ip")
        .args(["netns", "del", &live])
        .status()
        .unwrap();
}
