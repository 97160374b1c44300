//! What the two stores' writer threads share: the priority they ask for. Every durable
//! write of the organization waits for one writer thread (SQLite's `sqlite/conn.rs`,
//! PostgreSQL's `postgres/writer.rs`), so each asks to go ahead of the process's other
//! threads.

/// The writer thread's nice value where the process may raise it (root, or CAP_SYS_NICE,
/// or an `RLIMIT_NICE` that allows it): every durable write in the organization waits for
/// this one thread, so on a busy machine it goes ahead of the hub's other threads (and of
/// nodes and agents at nice 0) as soon as it has work.
const WRITER_NICE: i32 = -10;

/// Gives the calling thread [`WRITER_NICE`] where allowed; elsewhere it stays at the
/// process's priority (said once, at debug level).
pub(crate) fn prefer_this_thread() {
    // SAFETY: gettid and setpriority take no pointers and change only this thread's
    // nice value.
    let (tid, done) = unsafe {
        let tid = libc::gettid();
        (
            tid,
            libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, WRITER_NICE) == 0,
        )
    };
    if done {
        tracing::debug!("store: the writer thread ({tid}) runs at nice {WRITER_NICE}");
    } else {
        tracing::debug!(
            "store: the writer thread stays at the process's priority ({}); raising it needs CAP_SYS_NICE",
            std::io::Error::last_os_error()
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_writer_thread_goes_ahead_where_allowed_and_runs_as_before_elsewhere() {
        let (before, after, allowed) = std::thread::spawn(|| {
            // SAFETY: plain syscalls about the calling thread.
            let tid = unsafe { libc::gettid() } as libc::id_t;
            // SAFETY: getpriority takes integers and touches no memory.
            let nice = || unsafe { libc::getpriority(libc::PRIO_PROCESS, tid) };
            let before = nice();
            // Whether this process may lower a thread's nice value: CAP_SYS_NICE (bit 23)
            // in its effective capabilities.
            let status = std::fs::read_to_string("/proc/self/status").unwrap();
            let caps = status
                .lines()
                .find_map(|l| l.strip_prefix("CapEff:"))
                .map(|c| u64::from_str_radix(c.trim(), 16).unwrap())
                .unwrap();
            // Or an RLIMIT_NICE of at least 20 - WRITER_NICE.
            let mut limit = libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            };
            // SAFETY: `limit` is a live rlimit getrlimit writes into.
            let by_limit = unsafe { libc::getrlimit(libc::RLIMIT_NICE, &mut limit) } == 0
                && limit.rlim_cur >= (20 - WRITER_NICE) as libc::rlim_t;
            let allowed = caps & (1 << 23) != 0 || by_limit;
            prefer_this_thread();
            (before, nice(), allowed)
        })
        .join()
        .unwrap();
        if allowed {
            assert_eq!(after, WRITER_NICE);
        } else {
            assert_eq!(after, before);
        }
    }
}
