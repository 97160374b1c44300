//! Worker cgroups for real: a child over its memory limit is killed by it and counted, one
//! under it is not, the CPU weight is written, and nothing is left behind.
//!
//! These need a machine where cgroups can be made (root, or a delegated cgroup v2 subtree
//! with the memory controller): elsewhere they fail and say why, never pass unseen.

use std::os::unix::process::ExitStatusExt;
use std::process::Stdio;
use std::time::Duration;

use agensh_process::cgroup::{CpuShare, NodeCgroups, Version, WorkerLimits};
use tokio::io::AsyncWriteExt;
use tokio::process::Command;

fn open(test: &str) -> NodeCgroups {
    let node = NodeCgroups::open(
        &format!("test-{test}-{}", std::process::id()),
        CpuShare::EQUAL,
    )
    .unwrap_or_else(|e| {
        panic!(
            "this test needs cgroups it may create (run it as root or in a delegated cgroup): {e}"
        )
    });
    assert_version(node.version());
    node
}

/// Where the run says which cgroup version the machine has (`AGENSH_TEST_CGROUP_VERSION`,
/// `v1` or `v2`: scripts/test on this machine, scripts/cgroup-v2-vm in its guest), the node
/// must have used that one, not fallen back to the other.
fn assert_version(got: Version) {
    let want = match std::env::var("AGENSH_TEST_CGROUP_VERSION").as_deref() {
        Ok("v1") => Version::V1,
        Ok("v2") => Version::V2,
        Ok(other) => panic!("AGENSH_TEST_CGROUP_VERSION is v1 or v2, not {other:?}"),
        Err(_) => return,
    };
    assert_eq!(
        got, want,
        "the node's cgroups are not the version this machine has"
    );
}

/// A child that allocates `mib` MiB, writes to every page, says so, then waits for its
/// input to end.
fn allocating(mib: u64) -> Command {
    let mut cmd = Command::new("python3");
    cmd.args([
        "-c",
        &format!(
            "import sys\nx = bytearray(b'\\x01') * ({mib} << 20)\nprint(len(x), flush=True)\nsys.stdin.read()\n"
        ),
    ])
    .stdin(Stdio::piped())
    .stdout(Stdio::piped())
    .kill_on_drop(true);
    cmd
}

#[tokio::test]
async fn a_child_over_its_memory_limit_is_killed_by_it_and_one_under_it_is_not() {
    let node = open("memory");
    let tops = node.tops().to_vec();
    let limits = WorkerLimits {
        memory: Some(64 << 20),
        cpu: CpuShare {
            weight: 250,
            idle: false,
        },
    };
    let over = node.worker("over", limits).unwrap();
    let under = node.worker("under", limits).unwrap();
    let dirs: Vec<_> = over.dirs().iter().chain(under.dirs()).cloned().collect();
    assert!(dirs.iter().all(|d| d.is_dir()), "{dirs:?}");

    // The weight is written: cpu.weight on v2, cpu.shares (weight × 1024 / 100) on v1.
    let (file, want) = match node.version() {
        Version::V2 => ("cpu.weight", "250"),
        Version::V1 => ("cpu.shares", "2560"),
    };
    let cpu_dir = over.dirs().last().unwrap();
    if cpu_dir.join(file).exists() {
        let got = std::fs::read_to_string(cpu_dir.join(file)).unwrap();
        assert_eq!(got.trim(), want, "{}", cpu_dir.display());
    } else {
        panic!("no cpu controller for {}: {}", file, cpu_dir.display());
    }

    // The limit is written: memory.max on v2, memory.limit_in_bytes on v1.
    let mem_dir = &over.dirs()[0];
    let file = match node.version() {
        Version::V2 => "memory.max",
        Version::V1 => "memory.limit_in_bytes",
    };
    let got = std::fs::read_to_string(mem_dir.join(file)).unwrap();
    assert_eq!(
        got.trim(),
        (64u64 << 20).to_string(),
        "{}",
        mem_dir.display()
    );

    // Over: 256 MiB touched under a 64 MiB limit (and no swap) ends in SIGKILL.
    assert_eq!(over.oom_kills(), 0);
    let mut cmd = allocating(256);
    over.attach(&mut cmd).unwrap();
    let mut child = cmd.spawn().unwrap();
    let status = tokio::time::timeout(Duration::from_secs(60), child.wait())
        .await
        .expect("the child over its limit ended")
        .unwrap();
    assert_eq!(
        status.signal(),
        Some(libc::SIGKILL),
        "killed by the memory limit: {status}"
    );
    assert!(over.oom_kills() > 0, "the kill is counted as the limit's");

    // Under: 16 MiB fits; the child is in the cgroup while it runs and ends well.
    let mut cmd = allocating(16);
    under.attach(&mut cmd).unwrap();
    let mut child = cmd.spawn().unwrap();
    let pid = child.id().unwrap();
    let mut out = child.stdout.take().unwrap();
    let mut line = [0u8; 32];
    let n = tokio::time::timeout(
        Duration::from_secs(30),
        tokio::io::AsyncReadExt::read(&mut out, &mut line),
    )
    .await
    .expect("the child under its limit allocated")
    .unwrap();
    assert!(n > 0, "the child under its limit said nothing");
    assert!(
        under.processes().contains(&pid),
        "{pid} is in {:?}",
        under.dirs()
    );
    let cgroup = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap();
    let leaf = under.dir().file_name().unwrap().to_str().unwrap();
    assert!(
        cgroup
            .lines()
            .any(|l| l.ends_with(&format!("/workers/{leaf}"))),
        "{cgroup}"
    );
    child.stdin.take().unwrap().shutdown().await.unwrap();
    drop(child.stdin.take());
    let status = child.wait().await.unwrap();
    assert!(status.success(), "{status}");
    assert_eq!(under.oom_kills(), 0, "nothing was killed under the limit");

    // Removed when dropped, and the node's tree with them.
    drop((over, under));
    assert!(dirs.iter().all(|d| !d.exists()), "{dirs:?}");
    drop(node);
    assert!(tops.iter().all(|t| !t.exists()), "{tops:?}");
}

#[tokio::test]
async fn a_worker_cgroup_is_removed_with_processes_left_in_it_and_a_leftover_is_cleaned() {
    let node = open("leftover");
    let w = node
        .worker(
            "w01",
            WorkerLimits {
                memory: None,
                cpu: CpuShare::EQUAL,
            },
        )
        .unwrap();
    // A process that detached from its parent still dies with its cgroup.
    let mut cmd = Command::new("sh");
    cmd.args(["-c", "setsid sleep 300 >/dev/null 2>&1 & echo $!"])
        .stdout(Stdio::piped());
    w.attach(&mut cmd).unwrap();
    let out = cmd.output().await.unwrap();
    let pid: u32 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
    assert!(w.processes().contains(&pid), "{pid}: {:?}", w.processes());
    let dirs = w.dirs().to_vec();
    std::mem::forget(w); // as a node killed with -9 would leave it

    // A node of the same name, started again, kills what was left and starts clean.
    let again = NodeCgroups::open(
        &format!("test-leftover-{}", std::process::id()),
        CpuShare::EQUAL,
    )
    .unwrap();
    assert!(dirs.iter().all(|d| !d.exists()), "{dirs:?}");
    assert!(
        !std::path::Path::new(&format!("/proc/{pid}")).exists()
            || std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .unwrap_or_default()
                .contains(") Z "),
        "the leftover process {pid} was killed"
    );
    drop(node);
    let tops = again.tops().to_vec();
    drop(again);
    assert!(tops.iter().all(|t| !t.exists()), "{tops:?}");
}
