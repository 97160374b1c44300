//! Child processes in a process group of their own, so that everything a child starts
//! (a shell's commands, an agent's tools, pack-objects under http-backend) is signalled,
//! stopped and counted with it.
//!
//! Together with [`crate::resources`], this holds the `unsafe` for agensh's child processes:
//! every signal, priority change and `pre_exec` of theirs goes through here (the evaluator's
//! sandbox forks and enters namespaces itself, with its own `unsafe`).

use std::io;
use std::process::ExitStatus;
use std::time::Duration;

use tokio::process::{Child, Command};

/// How much of the CPU a child gets next to this process. Its descendants inherit it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Priority {
    /// This process's own priority.
    #[default]
    Normal,
    /// Nice 19: the child yields to this process by weight only.
    Low,
    /// `SCHED_IDLE` and nice 19: the least weight there is (3, where a nice-0 thread has
    /// 1,024), and a normal thread that wakes takes the CPU from it at once. Each such
    /// process is weighed, and owed time, on its own, though: hundreds of them still take a
    /// share, the more so right after a burst in which they waited (a cgroup with `cpu.idle`
    /// holds a whole group of them to that weight: [`crate::cgroup`]).
    /// Where `SCHED_IDLE` is refused (a sandbox), the child still starts, at nice 19.
    Idle,
}

/// A process group, numbered after the process that leads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ProcessGroup(libc::pid_t);

/// A spawned child and the process group it leads.
#[derive(Debug)]
pub struct GroupChild {
    /// The leader: its pipes, its exit status.
    pub child: Child,
    /// The group of the leader and of everything it starts (unless they leave it).
    pub group: ProcessGroup,
}

/// Spawns `cmd` as the leader of a new process group, at `priority`.
pub fn spawn(cmd: &mut Command, priority: Priority) -> io::Result<GroupChild> {
    cmd.process_group(0);
    set_priority(cmd, priority);
    let child = cmd.spawn()?;
    // A child that was just spawned and never waited for always has its id.
    let group = child
        .id()
        .and_then(ProcessGroup::from_id)
        .ok_or_else(|| io::Error::other("the child was spawned without a process id"))?;
    Ok(GroupChild { child, group })
}

impl GroupChild {
    /// Waits up to `grace` for the leader to exit: its status, or `None` when it still runs.
    pub async fn wait_timeout(&mut self, grace: Duration) -> Option<io::Result<ExitStatus>> {
        tokio::time::timeout(grace, self.child.wait()).await.ok()
    }

    /// Stops the whole group: SIGTERM to every member, up to `grace` for the leader to
    /// exit, then SIGKILL to whatever is left in the group. The leader's exit status.
    pub async fn stop(&mut self, grace: Duration) -> io::Result<ExitStatus> {
        self.group.terminate();
        let status = match self.wait_timeout(grace).await {
            Some(status) => status,
            None => {
                self.group.kill();
                self.child.wait().await
            }
        };
        self.group.kill();
        status
    }
}

impl ProcessGroup {
    /// The group numbered `pgid`; `None` for 0, which `killpg` would take as this
    /// process's own group.
    pub fn from_id(pgid: u32) -> Option<ProcessGroup> {
        libc::pid_t::try_from(pgid)
            .ok()
            .filter(|&id| id > 0)
            .map(ProcessGroup)
    }

    /// The group's number (the pid of its leader).
    pub fn id(self) -> u32 {
        self.0 as u32
    }

    /// Sends SIGTERM to every member. A group that is gone is not an error.
    pub fn terminate(self) {
        self.signal(libc::SIGTERM);
    }

    /// Sends SIGKILL to every member. A group that is gone is not an error.
    pub fn kill(self) {
        self.signal(libc::SIGKILL);
    }

    /// Whether any process is still in the group, exited ones not yet reaped included.
    pub fn has_members(self) -> bool {
        // Signal 0 only checks; EPERM means members exist that this process may not signal.
        self.signal(0) || io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
    }

    /// Reaps the members that are children of this process and have exited, without
    /// waiting (for a subreaper, see [`become_subreaper`]). Only for children that tokio
    /// does not wait for: it would lose their exit status.
    pub fn reap_exited(self) {
        // SAFETY: waitpid with a null status pointer writes no memory.
        while unsafe { libc::waitpid(-self.0, std::ptr::null_mut(), libc::WNOHANG) } > 0 {}
    }

    /// Sends `sig` to the group; whether it reached a member.
    fn signal(self, sig: libc::c_int) -> bool {
        // SAFETY: killpg takes plain integers and touches no memory of ours.
        unsafe { libc::killpg(self.0, sig) == 0 }
    }
}

/// Sends SIGTERM to the single process `pid` (not its group). A process that is gone is
/// not an error.
pub fn terminate_process(pid: u32) {
    if let Ok(pid) = libc::pid_t::try_from(pid) {
        if pid > 0 {
            // SAFETY: kill takes plain integers and touches no memory of ours.
            unsafe {
                libc::kill(pid, libc::SIGTERM);
            }
        }
    }
}

/// Sets the nice value of the single process `pid` (the kernel caps it at 19), after it
/// was spawned: unlike a `pre_exec` hook this keeps the spawn a `posix_spawn`, not a fork
/// of a process that may hold thousands of files and workers. A process that is gone is
/// not an error.
pub fn renice(pid: u32, nice: i32) {
    // SAFETY: setpriority takes plain integers and touches no memory of ours.
    unsafe {
        libc::setpriority(libc::PRIO_PROCESS, pid, nice);
    }
}

/// Makes this process the reaper of its orphaned descendants (Linux), so that processes
/// whose parent died are still its own to count, kill and reap.
#[cfg(target_os = "linux")]
pub fn become_subreaper() -> io::Result<()> {
    // SAFETY: prctl with PR_SET_CHILD_SUBREAPER takes plain integers.
    if unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Makes the process `cmd` starts get SIGTERM when this process dies (Linux: the
/// parent-death signal, which follows the spawning thread, a runtime worker that lives as
/// long as the runtime), and exit at once if this process died before it started.
pub fn terminate_with_parent(cmd: &mut Command) {
    #[cfg(target_os = "linux")]
    {
        let parent = std::process::id() as libc::pid_t;
        // SAFETY: between fork and exec the closure makes only async-signal-safe system
        // calls (prctl, getppid, _exit) and touches no memory shared with the parent.
        unsafe {
            cmd.pre_exec(move || {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
                if libc::getppid() != parent {
                    libc::_exit(1);
                }
                Ok(())
            });
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = cmd;
}

/// Makes the process `cmd` starts run at `priority`.
fn set_priority(cmd: &mut Command, priority: Priority) {
    if priority == Priority::Normal {
        return;
    }
    // SAFETY: between fork and exec the closure makes only async-signal-safe system calls
    // and touches no memory shared with the parent.
    unsafe {
        cmd.pre_exec(move || {
            // Nice 19 (the kernel caps it there): for `Low`, and so that a child that
            // leaves SCHED_IDLE is still below this process.
            if libc::setpriority(libc::PRIO_PROCESS, 0, 19) != 0 {
                return Err(io::Error::last_os_error());
            }
            #[cfg(target_os = "linux")]
            if priority == Priority::Idle {
                // Any process may move itself to SCHED_IDLE; where a sandbox forbids the
                // call, the child still starts, at nice 19.
                let param = libc::sched_param { sched_priority: 0 };
                libc::sched_setscheduler(0, libc::SCHED_IDLE, &param);
            }
            Ok(())
        });
    }
}
