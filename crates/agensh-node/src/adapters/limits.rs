//! A worker's limits (`run.worker_memory`, `run.worker_cpu_weight`) as an adapter applies
//! them: its agent process is put into the worker's cgroup as it starts
//! ([`AgentCgroup::attach`]), and when the agent dies, a kill by the memory limit is told
//! from any other crash ([`OomWatch::killed`]): the error says so
//! ([`MEMORY_KILLED`]) and the turn loop counts it and restarts the agent like any other
//! failure.

use std::sync::Arc;

use agensh_domain::size::MemorySize;
use agensh_domain::{Error, ErrorKind, Result};
use agensh_process::cgroup::WorkerCgroup;

/// The error code of an agent killed by its memory limit.
pub const MEMORY_KILLED: &str = "agent_memory_limit";

/// The worker's cgroup, shared by every start of its agent.
pub type AgentCgroup = Arc<WorkerCgroup>;

/// Puts the process `cmd` starts into `cgroup` (when the worker has one); what to watch to
/// tell later whether the memory limit killed it.
pub fn attach(
    cgroup: Option<&AgentCgroup>,
    cmd: &mut tokio::process::Command,
    what: &str,
) -> Result<Option<OomWatch>> {
    let Some(cg) = cgroup else {
        return Ok(None);
    };
    cg.attach(cmd).map_err(|e| {
        Error::new(
            ErrorKind::Internal,
            "agent_not_started",
            format!("cannot put the agent `{what}` into its worker's cgroup: {e}"),
        )
    })?;
    Ok(Some(OomWatch {
        cgroup: cg.clone(),
        before: cg.oom_kills(),
    }))
}

/// The kills by the memory limit counted before one start of an agent.
#[derive(Debug, Clone)]
pub struct OomWatch {
    cgroup: AgentCgroup,
    before: u64,
}

impl OomWatch {
    /// Processes of the worker's cgroup the kernel killed at its memory limit since the
    /// agent started; 0 when none (or the worker has no memory limit).
    pub fn killed(&self) -> u64 {
        if self.cgroup.limits().memory.is_none() {
            return 0;
        }
        self.cgroup.oom_kills().saturating_sub(self.before)
    }

    /// The memory limit, as the operator wrote it back (`512 MiB`).
    pub fn limit(&self) -> String {
        self.cgroup
            .limits()
            .memory
            .map_or("none".into(), |b| MemorySize::bytes(b).to_string())
    }
}

/// The error for an agent (`who`) whose process ended as `how` (`was killed by signal 9`)
/// during `during`, when the memory limit killed processes of its cgroup (`watch`): the
/// agent killed by its limit, or (a process it started was killed, and it ended otherwise)
/// `None`, with a note for the usual error.
pub fn memory_error(
    watch: Option<&OomWatch>,
    killed_by_sigkill: bool,
    who: &str,
    how: &str,
    during: &str,
    shown: &str,
) -> std::result::Result<Error, Option<String>> {
    let Some(w) = watch else { return Err(None) };
    let n = w.killed();
    if n == 0 {
        return Err(None);
    }
    let limit = w.limit();
    if killed_by_sigkill {
        return Ok(Error::new(
            ErrorKind::Internal,
            MEMORY_KILLED,
            format!(
                "agent killed by its memory limit ({limit}): {who} {how} during {during} — raise run.worker_memory or have the agent use less. {shown}"
            ),
        ));
    }
    Err(Some(format!(
        " (the memory limit ({limit}) killed {n} process(es) of its cgroup first)"
    )))
}
