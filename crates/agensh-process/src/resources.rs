//! What this process may use and has used: its limits on open files and processes, and
//! its CPU time.

use std::io;
use std::time::Duration;

/// A resource limit: the soft limit in force and the hard limit it may be raised to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limit {
    /// The limit in force.
    pub soft: u64,
    /// The most the soft limit may be raised to without privileges.
    pub hard: u64,
}

/// The limits read here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Resource {
    OpenFiles,
    Processes,
}

/// This process's limit on open files.
pub fn open_file_limit() -> io::Result<Limit> {
    Ok(limit(Resource::OpenFiles)?.into())
}

/// The limit on processes of this process's user.
pub fn process_limit() -> io::Result<Limit> {
    Ok(limit(Resource::Processes)?.into())
}

/// Lifts the soft limit on open files to the hard limit (children inherit it) and returns
/// the limit now in force: every waiting worker holds a connection, and 1,024 workers need
/// more than the common default of 1,024 files.
pub fn raise_open_file_limit() -> io::Result<Limit> {
    let mut lim = limit(Resource::OpenFiles)?;
    if lim.rlim_cur < lim.rlim_max {
        lim.rlim_cur = lim.rlim_max;
        // SAFETY: setrlimit only reads the struct we pass.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) } != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(lim.into())
}

/// CPU time this process has used so far, user and system together.
pub fn cpu_time() -> Duration {
    // SAFETY: rusage is plain integers (all-zero is valid); getrusage only writes it.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut usage);
        usage
    };
    let time = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    time(usage.ru_utime) + time(usage.ru_stime)
}

/// Clock ticks per second, the unit of the CPU times in `/proc/<pid>/stat`.
pub fn clock_ticks_per_second() -> u64 {
    // SAFETY: sysconf reads a constant.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    ticks.max(1) as u64
}

fn limit(resource: Resource) -> io::Result<libc::rlimit> {
    let which = match resource {
        Resource::OpenFiles => libc::RLIMIT_NOFILE,
        Resource::Processes => libc::RLIMIT_NPROC,
    };
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit only writes the struct we pass.
    if unsafe { libc::getrlimit(which, &mut lim) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(lim)
}

impl From<libc::rlimit> for Limit {
    // `rlim_t` is not `u64` on every target.
    #[allow(clippy::useless_conversion)]
    fn from(lim: libc::rlimit) -> Limit {
        Limit {
            soft: u64::from(lim.rlim_cur),
            hard: u64::from(lim.rlim_max),
        }
    }
}

/// Whether this process runs as root (some agents need to be told they are sandboxed).
pub fn is_root() -> bool {
    // SAFETY: geteuid takes no arguments and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raising_the_open_file_limit_lifts_the_soft_limit_to_the_hard_one() {
        let raised = raise_open_file_limit().unwrap();
        assert_eq!(raised.soft, raised.hard);
        assert_eq!(open_file_limit().unwrap(), raised);
    }

    #[test]
    fn cpu_time_grows_with_work() {
        let before = cpu_time();
        let t = std::time::Instant::now();
        let mut x = 0u64;
        while t.elapsed() < Duration::from_millis(50) {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(1));
        }
        assert!(cpu_time() > before);
    }

    #[test]
    fn the_process_limit_and_clock_ticks_are_read() {
        let nproc = process_limit().unwrap();
        assert!(nproc.soft > 0 && nproc.soft <= nproc.hard);
        assert!(clock_ticks_per_second() > 0);
    }
}
