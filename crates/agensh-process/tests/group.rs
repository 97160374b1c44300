//! Process groups: what `spawn`, `kill`, `stop` and `has_members` promise, checked against
//! the kernel's own view in `/proc`.

use std::os::unix::process::ExitStatusExt;
use std::process::Stdio;
use std::time::{Duration, Instant};

use agensh_process::group::{self, Priority, ProcessGroup};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

/// The fields of `/proc/<pid>/stat` from the state (field 3) on, indexed by field number.
fn stat(pid: u32) -> Option<Vec<String>> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &s[s.rfind(')')? + 2..];
    let mut fields = vec![String::new(); 3];
    fields.extend(rest.split_whitespace().map(str::to_string));
    Some(fields)
}

/// Live (not zombie) processes in `group`.
fn live_members(group: ProcessGroup) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| stat(pid).is_some_and(|f| f[3] != "Z" && f[5] == group.id().to_string()))
        .collect()
}

/// Waits up to 10 s for `done`.
async fn eventually(mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if done() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    done()
}

/// Spawns `sh -c script` in its own group with stdout piped, and waits for it to print
/// `ready`.
async fn spawn_ready(script: &str, priority: Priority) -> group::GroupChild {
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg(script)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .kill_on_drop(true);
    let mut g = group::spawn(&mut cmd, priority).unwrap();
    let stdout = g.child.stdout.take().unwrap();
    let mut lines = BufReader::new(stdout).lines();
    let line = tokio::time::timeout(Duration::from_secs(10), lines.next_line())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(line.as_deref(), Some("ready"));
    g
}

#[tokio::test]
async fn the_child_leads_a_group_of_its_own() {
    let g = spawn_ready("echo ready; sleep 300", Priority::Normal).await;
    let pid = g.child.id().unwrap();
    assert_eq!(g.group.id(), pid);
    assert_eq!(stat(pid).unwrap()[5], pid.to_string());
    g.group.kill();
}

#[tokio::test]
async fn kill_ends_the_child_and_its_grandchildren() {
    let mut g = spawn_ready(
        "sleep 300 & sh -c 'sleep 300 & wait' & echo ready; wait",
        Priority::Normal,
    )
    .await;
    let group = g.group;
    assert!(
        eventually(|| live_members(group).len() >= 4).await,
        "the shell, its two children and a grandchild: {:?}",
        live_members(group)
    );
    group.kill();
    let status = g.child.wait().await.unwrap();
    assert_eq!(status.signal(), Some(libc::SIGKILL));
    assert!(
        eventually(|| live_members(group).is_empty()).await,
        "left in the group: {:?}",
        live_members(group)
    );
}

#[tokio::test]
async fn has_members_is_false_once_the_group_is_gone() {
    let mut cmd = Command::new("sleep");
    cmd.arg("300").kill_on_drop(true);
    let mut g = group::spawn(&mut cmd, Priority::Normal).unwrap();
    assert!(g.group.has_members());
    g.group.kill();
    g.child.wait().await.unwrap();
    assert!(!g.group.has_members());
}

#[tokio::test]
async fn stop_ends_a_child_that_obeys_sigterm_without_waiting_for_the_grace() {
    let mut cmd = Command::new("sleep");
    cmd.arg("300").kill_on_drop(true);
    let mut g = group::spawn(&mut cmd, Priority::Normal).unwrap();
    let t = Instant::now();
    let status = g.stop(Duration::from_secs(30)).await.unwrap();
    assert_eq!(status.signal(), Some(libc::SIGTERM));
    assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
}

#[tokio::test]
async fn stop_kills_a_group_that_ignores_sigterm_after_the_grace() {
    let mut g = spawn_ready(
        "trap '' TERM; sleep 300 & echo ready; wait",
        Priority::Normal,
    )
    .await;
    let group = g.group;
    let grace = Duration::from_millis(500);
    let t = Instant::now();
    let status = g.stop(grace).await.unwrap();
    assert!(t.elapsed() >= grace, "stopped after {:?}", t.elapsed());
    assert_eq!(status.signal(), Some(libc::SIGKILL));
    assert!(
        eventually(|| live_members(group).is_empty()).await,
        "the ignoring grandchild is killed too: {:?}",
        live_members(group)
    );
}

#[tokio::test]
async fn wait_timeout_gives_up_after_the_grace() {
    let mut cmd = Command::new("sleep");
    cmd.arg("300").kill_on_drop(true);
    let mut g = group::spawn(&mut cmd, Priority::Normal).unwrap();
    assert!(g.wait_timeout(Duration::from_millis(100)).await.is_none());
    g.group.kill();
    let status = g
        .wait_timeout(Duration::from_secs(10))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(status.signal(), Some(libc::SIGKILL));
}

/// (nice, scheduling policy) of a child spawned at `priority`, and of its own child.
async fn priority_of(priority: Priority) -> [(String, String); 2] {
    let mut g = spawn_ready("sleep 300 & echo ready; wait", priority).await;
    let leader = g.child.id().unwrap();
    let group = g.group;
    assert!(eventually(|| live_members(group).len() >= 2).await);
    let grandchild = live_members(group)
        .into_iter()
        .find(|&p| p != leader)
        .unwrap();
    let read = |pid: u32| {
        let f = stat(pid).unwrap();
        (f[19].clone(), f[41].clone())
    };
    let seen = [read(leader), read(grandchild)];
    g.group.kill();
    g.child.wait().await.unwrap();
    seen
}

#[tokio::test]
async fn idle_priority_is_sched_idle_at_nice_19_and_inherited() {
    let idle = (19.to_string(), libc::SCHED_IDLE.to_string());
    assert_eq!(priority_of(Priority::Idle).await, [idle.clone(), idle]);
}

#[tokio::test]
async fn low_priority_is_nice_19_under_the_normal_policy() {
    let low = (19.to_string(), libc::SCHED_OTHER.to_string());
    assert_eq!(priority_of(Priority::Low).await, [low.clone(), low]);
}

#[tokio::test]
async fn normal_priority_is_this_process_own() {
    let me = stat(std::process::id()).unwrap();
    let ours = (me[19].clone(), me[41].clone());
    assert_eq!(priority_of(Priority::Normal).await, [ours.clone(), ours]);
}

#[test]
fn group_zero_is_refused() {
    assert_eq!(ProcessGroup::from_id(0), None);
    assert_eq!(ProcessGroup::from_id(42).map(ProcessGroup::id), Some(42));
}

#[tokio::test]
async fn a_started_process_is_reniced_to_19_and_one_gone_is_no_error() {
    let mut child = Command::new("sleep").arg("300").spawn().unwrap();
    let pid = child.id().unwrap();
    group::renice(pid, 19);
    assert_eq!(stat(pid).unwrap()[19], "19");
    child.kill().await.unwrap();
    child.wait().await.unwrap();
    group::renice(pid, 19); // reaped: nothing happens
}
