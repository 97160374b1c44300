//! A mark in the environment finds what an agent started even after it left the group.

use std::time::Duration;

use agensh_process::{group, Mark, Priority};

#[tokio::test]
async fn a_detached_job_survives_the_group_but_not_the_mark() {
    let mark = Mark::new("w01");
    let (var, value) = mark.env();
    let mut cmd = tokio::process::Command::new("sh");
    // The job leaves the group and the session; the leader waits as an agent would.
    cmd.args([
        "-c",
        "setsid sh -c 'sleep 600' </dev/null >/dev/null 2>&1 & sleep 600",
    ])
    .env(var, value);
    let mut g = group::spawn(&mut cmd, Priority::Normal).expect("spawns");
    // Both sleeps and the detached shell carry the mark once they run; the job has left
    // the group once it leads a session of its own (until its setsid(2), stopping the
    // group would still reach it).
    let mut seen = Vec::new();
    for _ in 0..250 {
        seen = mark.processes();
        if seen.len() >= 3 && seen.iter().any(|&p| session_of(p) == Some(p)) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        seen.len() >= 3 && seen.iter().any(|&p| session_of(p) == Some(p)),
        "the leader, its sleep and the detached job in a session of its own: {seen:?}"
    );
    g.stop(Duration::from_millis(200)).await.expect("stops");
    tokio::time::sleep(Duration::from_millis(100)).await;
    let left = mark.processes();
    assert!(!left.is_empty(), "the detached job outlives its group");
    assert!(mark.kill_all() >= 1);
    assert_eq!(
        mark.processes(),
        Vec::<u32>::new(),
        "nothing carries the mark"
    );
    // Another mark finds nothing of this one.
    assert!(Mark::new("w01").processes().is_empty());
}

/// The session of process `pid` (the fourth field after the name in /proc/PID/stat).
fn session_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after_name = &stat[stat.rfind(')')? + 1..];
    after_name.split_whitespace().nth(3)?.parse().ok()
}
