//! How agent processes share the CPU with the harness ([`AgentCpu`], `run.agent_cpu`).
//!
//! One post to a channel wakes every worker at once. The node then hands a prompt to each
//! agent, and each agent, as it wakes, wants the CPU too. The scheduler shares a core by
//! weight per runnable thread: 1,024 for a thread at nice 0, 15 at nice 19 — hundreds of
//! agents at nice 19 still outweigh the node's threads, and the prompts to the last workers
//! wait behind the first workers' agents. Under `SCHED_IDLE` an agent yields to the node's
//! threads, so the node hands out every prompt first (docs/PERFORMANCE.md, "The node").
//! When the harness is idle, which is nearly always, agents get every cycle.
//!
//! Per process that holds only roughly: each agent is weighed and owed time on its own,
//! and a thousand agents that waited through a burst (the launch) take a large share of
//! the next ones. In the node's cgroups the group of all agents is one entity at the least
//! weight ([`group_share`]), which holds (docs/PERFORMANCE.md, "Agents without cgroups").

pub use agensh_domain::config::AgentCpu;
use agensh_process::cgroup::CpuShare;
use agensh_process::Priority;

/// The priority an agent process (and everything it starts) runs at for `cpu`.
pub fn priority(cpu: AgentCpu) -> Priority {
    match cpu {
        AgentCpu::Background => Priority::Idle,
        AgentCpu::Low => Priority::Low,
        AgentCpu::Normal => Priority::Normal,
    }
}

/// Where workers run in cgroups, the share of the CPU all of them together get next to the
/// node: under the cpu controller, a thread's `SCHED_IDLE` or nice counts only inside its
/// own cgroup, so the group of all agents carries `cpu` — idle (`cpu.idle`) for
/// `background`, the least weight for `low` (as nice 19 is next to nice 0), an equal share
/// for `normal`. How the workers share it among themselves is `run.worker_cpu_weight`.
pub fn group_share(cpu: AgentCpu) -> CpuShare {
    match cpu {
        AgentCpu::Background => CpuShare {
            weight: 1,
            idle: true,
        },
        AgentCpu::Low => CpuShare {
            weight: 1,
            idle: false,
        },
        AgentCpu::Normal => CpuShare::EQUAL,
    }
}
