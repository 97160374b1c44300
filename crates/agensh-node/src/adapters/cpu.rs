//! How agent processes share the CPU with the harness ([`AgentCpu`], `run.agent_cpu`).
//!
//! One post to a channel wakes every worker at once. The node then hands a prompt to each
//! agent, and each agent, as it wakes, wants the CPU too. The scheduler shares a core by
//! weight per runnable thread: 1,024 for a thread at nice 0, 15 at nice 19 — hundreds of
//! agents at nice 19 still outweigh the node's threads, and the prompts to the last workers
//! wait behind the first workers' agents. Under `SCHED_IDLE` an agent runs only on cycles
//! no normal thread wants, so the node hands out every prompt first (docs/PERFORMANCE.md,
//! "The node"). When the harness is idle, which is nearly always, agents get every cycle.

pub use agensh_domain::config::AgentCpu;

/// Makes the process `cmd` starts (and everything it starts: children inherit both) run
/// at `cpu` relative to this process.
pub fn apply(cmd: &mut tokio::process::Command, cpu: AgentCpu) {
    if cpu == AgentCpu::Normal {
        return;
    }
    let idle = cpu == AgentCpu::Background;
    // SAFETY: between fork and exec the closure makes only async-signal-safe system calls
    // and touches no memory shared with the parent.
    unsafe {
        cmd.pre_exec(move || {
            // Nice 19 (the kernel caps it there): for the `low` setting, and so that an
            // agent that leaves SCHED_IDLE is still below the harness.
            if libc::setpriority(libc::PRIO_PROCESS, 0, 19) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            if idle {
                // Any process may move itself to SCHED_IDLE; where a sandbox forbids the
                // call, the agent still starts, at nice 19.
                let param = libc::sched_param { sched_priority: 0 };
                libc::sched_setscheduler(0, libc::SCHED_IDLE, &param);
            }
            Ok(())
        });
    }
}
