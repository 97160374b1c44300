//! Control groups for the agents of a node: one per worker, with a memory limit and a CPU
//! weight, so one agent that runs away with memory is killed alone (and can be told from
//! any other crash) instead of taking the machine, and the workers share the CPU as asked.
//!
//! [`NodeCgroups::open`] finds where this process may create cgroups and makes
//! `agensh-<name>/workers/` there; [`NodeCgroups::worker`] makes one worker's cgroup below
//! it; [`WorkerCgroup::attach`] puts a child into it as the child starts (before it runs a
//! line of its own code: a `pre_exec` step writes `0`, "the writing process", into the
//! cgroup's `cgroup.procs` through a file opened before the fork — `CLONE_INTO_CGROUP`
//! would need `clone3` by hand, for the same effect here); [`WorkerCgroup::oom_kills`]
//! counts the kills by the memory limit, so an agent that died can be told apart from any
//! other crash.
//!
//! Where:
//! - **cgroup v2** (the unified hierarchy, `/sys/fs/cgroup` or any `cgroup2` mount in
//!   `/proc/self/mountinfo`) when its memory controller is there: below this process's own
//!   cgroup (`/proc/self/cgroup`, `0::/path`) — the subtree a service manager delegates
//!   (systemd's `Delegate=yes`). `+memory +cpu` are enabled in the `cgroup.subtree_control`
//!   of the parents; a cgroup with processes cannot enable them for its children (the "no
//!   internal processes" rule), so when this process's own cgroup refuses, this process
//!   moves into a leaf of its own, `agensh-<name>/node`, first.
//! - **cgroup v1** when the memory controller is only there (a `cgroup` mount with the
//!   `memory` option; the `cpu` one too when mounted): below this process's cgroup in each
//!   hierarchy. `memory.limit_in_bytes` (and `memory.memsw.limit_in_bytes`: no swap
//!   either), `cpu.shares` from the weight (100 ↦ 1,024, v1's default).
//! - Neither (not root, nothing delegated, read-only): [`Unavailable`] says why and what to
//!   do; the caller decides whether to run without limits.
//!
//! `agensh-<name>` is left by nobody: [`NodeCgroups::open`] kills and removes what a node of
//! the same name left (one killed with -9; a node's name is stable across its restarts);
//! dropping [`NodeCgroups`] kills what is left in the workers' cgroups and
//! removes them all (on v2 but for the node's own leaf, which holds this process until it
//! exits; the next start removes it, and systemd removes a delegated subtree itself).
//!
//! Linux only; elsewhere [`NodeCgroups::open`] is always [`Unavailable`].

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use tokio::process::Command;

/// How a group of processes shares the CPU with its siblings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CpuShare {
    /// cgroup v2 `cpu.weight`, 1 to 10,000 (100: an equal share); v1 `cpu.shares` is
    /// `weight × 1024 / 100`.
    pub weight: u32,
    /// Runs only on cycles nothing else in the parent wants (`cpu.idle`, where the kernel
    /// has it; else the least weight).
    pub idle: bool,
}

impl CpuShare {
    /// An equal share: weight 100, not idle.
    pub const EQUAL: CpuShare = CpuShare {
        weight: 100,
        idle: false,
    };
}

/// The limits of one worker's cgroup.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkerLimits {
    /// The most memory (bytes) its processes may use together, swap none; `None`: no limit.
    pub memory: Option<u64>,
    /// Its share of the CPU next to the other workers.
    pub cpu: CpuShare,
}

/// Which cgroup version a node's cgroups are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    V1,
    V2,
}

/// Why cgroups cannot be made here, with what to do about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unavailable {
    /// What was found or failed.
    pub reason: String,
}

impl fmt::Display for Unavailable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "cannot create cgroups for the workers' agents: {} — run the node as root, under systemd with Delegate=yes (e.g. `systemd-run --scope -p Delegate=yes agensh …`), or in a container with a writable cgroup (cgroup v2 with the memory controller, or a writable v1 memory hierarchy)",
            self.reason
        )
    }
}

impl std::error::Error for Unavailable {}

fn unavailable(reason: impl Into<String>) -> Unavailable {
    Unavailable {
        reason: reason.into(),
    }
}

/// The cgroups of one node: `agensh-<name>/workers/<worker>` in one hierarchy (v2) or in
/// the memory and cpu hierarchies (v1). Dropping it removes them.
#[derive(Debug)]
pub struct NodeCgroups {
    version: Version,
    /// `agensh-<name>` in each hierarchy used: v2 one; v1 memory, then cpu when mounted.
    tops: Vec<PathBuf>,
    /// Whether the memory hierarchy of the v2 tree has the cpu controller.
    cpu: bool,
}

/// One worker's cgroup (the same name in each hierarchy used).
#[derive(Debug)]
pub struct WorkerCgroup {
    version: Version,
    /// The worker's directory in each hierarchy; the first is the memory one.
    dirs: Vec<PathBuf>,
    limits: WorkerLimits,
}

/// Whether [`NodeCgroups::open`] can be expected to work here, without creating anything:
/// a hierarchy with the memory controller holds this process's cgroup, and this process may
/// write there. For a refusal before anything else starts; `open` still has the last word.
pub fn check() -> Result<Version, Unavailable> {
    if !cfg!(target_os = "linux") {
        return Err(unavailable("cgroups are Linux's"));
    }
    let read = |p: &str| {
        std::fs::read_to_string(p).map_err(|e| unavailable(format!("cannot read {p}: {e}")))
    };
    let mounts = parse_mountinfo(&read("/proc/self/mountinfo")?);
    let own = parse_proc_cgroup(&read("/proc/self/cgroup")?);
    let (version, dirs) = match find(&mounts, &own)? {
        Found::V2 { base, .. } => (Version::V2, vec![base]),
        Found::V1 { memory, cpu } => (Version::V1, std::iter::once(memory).chain(cpu).collect()),
    };
    for dir in dirs {
        use std::os::unix::ffi::OsStrExt;
        let path = std::ffi::CString::new(dir.as_os_str().as_bytes())
            .map_err(|_| unavailable(format!("{} is not a usable path", dir.display())))?;
        // SAFETY: access only reads the NUL-terminated path it is given.
        if unsafe { libc::access(path.as_ptr(), libc::W_OK) } != 0 {
            let e = io::Error::last_os_error();
            return Err(unavailable(format!(
                "cannot create cgroups in {}: {e}",
                dir.display()
            )));
        }
    }
    Ok(version)
}

impl NodeCgroups {
    /// Finds where this process may create cgroups and makes `agensh-<name>/workers` there,
    /// its CPU share next to this process `agents` (how all agents together yield to the
    /// node). What a node of the same name left is killed and removed first.
    pub fn open(name: &str, agents: CpuShare) -> Result<NodeCgroups, Unavailable> {
        if !cfg!(target_os = "linux") {
            return Err(unavailable("cgroups are Linux's"));
        }
        let read = |p: &str| {
            std::fs::read_to_string(p).map_err(|e| unavailable(format!("cannot read {p}: {e}")))
        };
        let mounts = parse_mountinfo(&read("/proc/self/mountinfo")?);
        let own = parse_proc_cgroup(&read("/proc/self/cgroup")?);
        let top_name = format!("agensh-{}", clean_name(name));
        match find(&mounts, &own)? {
            Found::V2 { base, cpu } => open_v2(&base, &top_name, cpu, agents),
            Found::V1 { memory, cpu } => open_v1(&memory, cpu.as_deref(), &top_name, agents),
        }
    }

    /// Which cgroup version the node's cgroups are.
    pub fn version(&self) -> Version {
        self.version
    }

    /// `agensh-<name>` in each hierarchy used: the memory one first.
    pub fn tops(&self) -> &[PathBuf] {
        &self.tops
    }

    /// Where they are, for the operator: `cgroup v2 at /sys/fs/cgroup/…/agensh-x`.
    pub fn describe(&self) -> String {
        let at: Vec<String> = self.tops.iter().map(|t| t.display().to_string()).collect();
        match self.version {
            Version::V2 => format!("cgroup v2 at {}", at.join(", ")),
            Version::V1 => format!("cgroup v1 at {}", at.join(" and ")),
        }
    }

    /// Makes the cgroup of `worker` with `limits` (a leftover of the same name is emptied
    /// and made again).
    pub fn worker(&self, worker: &str, limits: WorkerLimits) -> io::Result<WorkerCgroup> {
        let name = clean_name(worker);
        let mut dirs = Vec::new();
        for top in &self.tops {
            let dir = top.join("workers").join(&name);
            if dir.exists() {
                remove_tree(&dir)?;
            }
            std::fs::create_dir(&dir).map_err(|e| {
                io::Error::new(e.kind(), format!("cannot create {}: {e}", dir.display()))
            })?;
            dirs.push(dir);
        }
        let cg = WorkerCgroup {
            version: self.version,
            dirs,
            limits,
        };
        if let Err(e) = cg.apply(self.cpu) {
            let _ = cg.remove();
            return Err(e);
        }
        Ok(cg)
    }
}

impl Drop for NodeCgroups {
    fn drop(&mut self) {
        for top in &self.tops {
            let _ = remove_tree(&top.join("workers"));
            // The node's own leaf (v2) holds this process: it stays, and so does the top.
            let _ = std::fs::remove_dir(top);
        }
    }
}

impl WorkerCgroup {
    /// The limits it was made with.
    pub fn limits(&self) -> WorkerLimits {
        self.limits
    }

    /// Its directory in the memory hierarchy (the only one, on v2).
    pub fn dir(&self) -> &Path {
        &self.dirs[0]
    }

    /// Its directory in each hierarchy: the memory one first, then (v1) the cpu one.
    pub fn dirs(&self) -> &[PathBuf] {
        &self.dirs
    }

    /// Writes the limits into the cgroup files.
    fn apply(&self, cpu: bool) -> io::Result<()> {
        let mem = &self.dirs[0];
        match self.version {
            Version::V2 => {
                let max = self
                    .limits
                    .memory
                    .map_or("max".to_string(), |b| b.to_string());
                write(&mem.join("memory.max"), &max)?;
                if self.limits.memory.is_some() && mem.join("memory.swap.max").exists() {
                    write(&mem.join("memory.swap.max"), "0")?;
                }
                if cpu {
                    set_share(mem, Version::V2, self.limits.cpu)?;
                }
            }
            Version::V1 => {
                if let Some(b) = self.limits.memory {
                    write(&mem.join("memory.limit_in_bytes"), &b.to_string())?;
                    // Memory and swap together: the same number, so no swap.
                    let memsw = mem.join("memory.memsw.limit_in_bytes");
                    if memsw.exists() {
                        write(&memsw, &b.to_string())?;
                    }
                }
                if let Some(cpu) = self.dirs.get(1) {
                    set_share(cpu, Version::V1, self.limits.cpu)?;
                }
            }
        }
        Ok(())
    }

    /// Makes the process `cmd` starts join this cgroup before it runs any code of its own
    /// (everything it starts is in it too). The `cgroup.procs` files are opened here, so a
    /// cgroup that is gone fails now; the child writes `0` (itself) into each between fork
    /// and exec, and the spawn fails if it cannot — an agent never runs outside its limit.
    pub fn attach(&self, cmd: &mut Command) -> io::Result<()> {
        use std::os::fd::AsRawFd;
        let mut files = Vec::new();
        for dir in &self.dirs {
            let path = dir.join("cgroup.procs");
            let f = std::fs::OpenOptions::new()
                .write(true)
                .open(&path)
                .map_err(|e| {
                    io::Error::new(e.kind(), format!("cannot open {}: {e}", path.display()))
                })?;
            files.push(f);
        }
        // SAFETY: between fork and exec the closure makes only write(2) on descriptors
        // opened above (kept alive by the closure, closed at exec: O_CLOEXEC) and allocates
        // nothing; an error is built from errno without allocating.
        unsafe {
            cmd.pre_exec(move || {
                for f in &files {
                    if libc::write(f.as_raw_fd(), b"0".as_ptr().cast(), 1) != 1 {
                        return Err(io::Error::last_os_error());
                    }
                }
                Ok(())
            });
        }
        Ok(())
    }

    /// Kills by the memory limit so far (processes of the cgroup the kernel's OOM killer
    /// ended): v2 `memory.events` `oom_kill`; v1 `memory.oom_control` `oom_kill`, or where
    /// the kernel does not count them, `memory.failcnt` (times the limit was hit).
    pub fn oom_kills(&self) -> u64 {
        let mem = &self.dirs[0];
        let (file, key) = match self.version {
            Version::V2 => ("memory.events", "oom_kill"),
            Version::V1 => ("memory.oom_control", "oom_kill"),
        };
        let text = std::fs::read_to_string(mem.join(file)).unwrap_or_default();
        if let Some(n) = counter(&text, key) {
            return n;
        }
        if self.version == Version::V1 {
            return std::fs::read_to_string(mem.join("memory.failcnt"))
                .ok()
                .and_then(|t| t.trim().parse().ok())
                .unwrap_or(0);
        }
        0
    }

    /// The ids of the processes in the cgroup now.
    pub fn processes(&self) -> Vec<u32> {
        let mut pids: Vec<u32> = self
            .dirs
            .iter()
            .flat_map(|d| read_pids(&d.join("cgroup.procs")))
            .collect();
        pids.sort_unstable();
        pids.dedup();
        pids
    }

    /// Kills (SIGKILL) every process in the cgroup, however it detached: `cgroup.kill`
    /// where the kernel has it, else each member, a few rounds. How many were signalled.
    pub fn kill_all(&self) -> usize {
        kill_members(&self.dirs)
    }

    /// Kills what is left in the cgroup and removes it (after its processes are gone).
    pub fn remove(&self) -> io::Result<()> {
        let mut first = None;
        for d in &self.dirs {
            if let Err(e) = remove_tree(d) {
                first.get_or_insert(e);
            }
        }
        first.map_or(Ok(()), Err)
    }
}

impl Drop for WorkerCgroup {
    fn drop(&mut self) {
        if let Err(e) = self.remove() {
            eprintln!("agensh: {e}");
        }
    }
}

/// Where cgroups were found.
#[derive(Debug, PartialEq)]
enum Found {
    /// This process's cgroup in the unified hierarchy; whether it has the cpu controller.
    V2 { base: PathBuf, cpu: bool },
    /// This process's cgroup in the v1 memory hierarchy and, when mounted, the cpu one.
    V1 {
        memory: PathBuf,
        cpu: Option<PathBuf>,
    },
}

/// A line of `/proc/self/mountinfo` that matters here.
#[derive(Debug, Clone, PartialEq)]
struct Mount {
    /// The directory of the filesystem mounted (for cgroups: a cgroup's path).
    root: String,
    point: PathBuf,
    fstype: String,
    /// The filesystem's own options (for cgroup v1: its controllers).
    options: Vec<String>,
}

/// The cgroup mounts of `/proc/self/mountinfo`.
fn parse_mountinfo(text: &str) -> Vec<Mount> {
    text.lines()
        .filter_map(|line| {
            let (left, right) = line.split_once(" - ")?;
            let f: Vec<&str> = left.split(' ').collect();
            let r: Vec<&str> = right.split(' ').collect();
            let fstype = r.first()?.to_string();
            if fstype != "cgroup" && fstype != "cgroup2" {
                return None;
            }
            Some(Mount {
                root: unescape(f.get(3)?),
                point: PathBuf::from(unescape(f.get(4)?)),
                fstype,
                options: r.get(2)?.split(',').map(str::to_string).collect(),
            })
        })
        .collect()
}

/// mountinfo writes a space, tab, newline and backslash as `\040`, `\011`, `\012`, `\134`.
fn unescape(s: &str) -> String {
    let mut out = String::new();
    let mut rest = s;
    while let Some(i) = rest.find('\\') {
        out.push_str(&rest[..i]);
        let code = rest
            .get(i + 1..i + 4)
            .and_then(|c| u8::from_str_radix(c, 8).ok());
        match code {
            Some(b) => {
                out.push(b as char);
                rest = &rest[i + 4..];
            }
            None => {
                out.push('\\');
                rest = &rest[i + 1..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// `/proc/self/cgroup`: (controllers, path) per hierarchy; v2's line has no controllers.
fn parse_proc_cgroup(text: &str) -> Vec<(Vec<String>, String)> {
    text.lines()
        .filter_map(|l| {
            let mut parts = l.splitn(3, ':');
            let _id = parts.next()?;
            let controllers = parts.next()?;
            let path = parts.next()?.to_string();
            let controllers = controllers
                .split(',')
                .filter(|c| !c.is_empty())
                .map(str::to_string)
                .collect();
            Some((controllers, path))
        })
        .collect()
}

/// This process's cgroup directory under `mount`, for its `path` in that hierarchy.
fn cgroup_dir(mount: &Mount, path: &str) -> Option<PathBuf> {
    let root = mount.root.trim_end_matches('/');
    // A path outside the mounted part of the hierarchy (another namespace's) is not here.
    let below = path.strip_prefix(root)?;
    if !below.is_empty() && !below.starts_with('/') {
        return None;
    }
    Some(mount.point.join(below.trim_start_matches('/')))
}

fn find(mounts: &[Mount], own: &[(Vec<String>, String)]) -> Result<Found, Unavailable> {
    let v2_path = own.iter().find(|(c, _)| c.is_empty()).map(|(_, p)| p);
    let v2 = v2_path.and_then(|path| {
        mounts
            .iter()
            .filter(|m| m.fstype == "cgroup2")
            .find_map(|m| cgroup_dir(m, path))
            .filter(|d| d.is_dir())
    });
    let controllers = |d: &Path| {
        std::fs::read_to_string(d.join("cgroup.controllers"))
            .unwrap_or_default()
            .split_whitespace()
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    if let Some(base) = &v2 {
        let have = controllers(base);
        if have.iter().any(|c| c == "memory") {
            return Ok(Found::V2 {
                base: base.clone(),
                cpu: have.iter().any(|c| c == "cpu"),
            });
        }
    }
    let v1 = |controller: &str| {
        let path = own
            .iter()
            .find(|(c, _)| c.iter().any(|c| c == controller))
            .map(|(_, p)| p)?;
        mounts
            .iter()
            .filter(|m| m.fstype == "cgroup" && m.options.iter().any(|o| o == controller))
            .find_map(|m| cgroup_dir(m, path))
            .filter(|d| d.is_dir())
    };
    if let Some(memory) = v1("memory") {
        return Ok(Found::V1 {
            memory,
            cpu: v1("cpu"),
        });
    }
    Err(unavailable(match &v2 {
        Some(base) => format!(
            "the memory controller is not available in {} (cgroup.controllers: \"{}\") and no cgroup v1 memory hierarchy is mounted",
            base.display(),
            controllers(base).join(" ")
        ),
        None => "no cgroup v2 hierarchy with this process's cgroup and no cgroup v1 memory hierarchy is mounted".to_string(),
    }))
}

fn open_v2(
    base: &Path,
    top_name: &str,
    cpu: bool,
    agents: CpuShare,
) -> Result<NodeCgroups, Unavailable> {
    sweep(base, top_name);
    let top = base.join(top_name);
    make_dir(&top)?;
    let cg = NodeCgroups {
        version: Version::V2,
        tops: vec![top.clone()],
        cpu,
    };
    let enable = if cpu { "+memory +cpu" } else { "+memory" };
    let base_control = base.join("cgroup.subtree_control");
    if let Err(e) = write(&base_control, enable) {
        // EBUSY: this process's own cgroup has processes (this one at least) and so cannot
        // give controllers to children; move into a leaf of our own and try again.
        if e.raw_os_error() != Some(libc::EBUSY) {
            return Err(unavailable(format!("{e}")));
        }
        let leaf = top.join("node");
        make_dir(&leaf)?;
        write(&leaf.join("cgroup.procs"), "0").map_err(|e| {
            unavailable(format!(
                "cannot move this process into its own leaf {}: {e}",
                leaf.display()
            ))
        })?;
        write(&base_control, enable).map_err(|e| {
            unavailable(format!(
                "{e} — other processes share this process's cgroup {}; start the node in a cgroup of its own",
                base.display()
            ))
        })?;
    }
    let workers = top.join("workers");
    write(&top.join("cgroup.subtree_control"), enable).map_err(|e| unavailable(format!("{e}")))?;
    make_dir(&workers)?;
    write(&workers.join("cgroup.subtree_control"), enable)
        .map_err(|e| unavailable(format!("{e}")))?;
    if cpu {
        set_share(&workers, Version::V2, agents).map_err(|e| unavailable(format!("{e}")))?;
    }
    Ok(cg)
}

fn open_v1(
    memory: &Path,
    cpu: Option<&Path>,
    top_name: &str,
    agents: CpuShare,
) -> Result<NodeCgroups, Unavailable> {
    let mut tops = Vec::new();
    for base in std::iter::once(memory).chain(cpu) {
        sweep(base, top_name);
        let top = base.join(top_name);
        make_dir(&top)?;
        make_dir(&top.join("workers"))?;
        tops.push(top);
    }
    let cg = NodeCgroups {
        version: Version::V1,
        tops,
        cpu: cpu.is_some(),
    };
    // On v1 the node stays in its own cgroup, a sibling of the top: the agents' share
    // next to it is the top's.
    if let Some(top) = cg.tops.get(1) {
        set_share(top, Version::V1, agents).map_err(|e| unavailable(format!("{e}")))?;
    }
    Ok(cg)
}

/// Removes what an earlier node of the same name left in `base` (one killed with -9): its
/// agents are killed too. Other names are left alone: they may be live nodes.
fn sweep(base: &Path, top_name: &str) {
    let top = base.join(top_name);
    if !top.is_dir() {
        return;
    }
    if let Err(err) = remove_tree(&top) {
        // A leaf holding this very process (v2, a node opened again by the same process)
        // cannot go; anything else is worth a word.
        if tree_pids(&top) != [std::process::id()] {
            eprintln!(
                "agensh: could not remove the leftover cgroup {}: {err}",
                top.display()
            );
        }
    }
}

/// The processes in `dir` and every cgroup below it.
fn tree_pids(dir: &Path) -> Vec<u32> {
    let mut pids = read_pids(&dir.join("cgroup.procs"));
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                pids.extend(tree_pids(&e.path()));
            }
        }
    }
    pids
}

/// Kills every process in `dir` and below (never this one), then removes the cgroups,
/// deepest first, waiting up to 2 s for killed processes to leave.
fn remove_tree(dir: &Path) -> io::Result<()> {
    if !dir.exists() {
        return Ok(());
    }
    let mut below = Ok(());
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                if let Err(err) = remove_tree(&e.path()) {
                    below = below.and(Err(err));
                }
            }
        }
    }
    below?;
    let until = Instant::now() + Duration::from_secs(2);
    loop {
        let pids = read_pids(&dir.join("cgroup.procs"));
        if pids.contains(&std::process::id()) {
            return Err(io::Error::other(format!(
                "cannot remove {}: this process is in it",
                dir.display()
            )));
        }
        if !pids.is_empty() {
            kill_members(&[dir.to_path_buf()]);
        }
        match std::fs::remove_dir(dir) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) if Instant::now() >= until => {
                return Err(io::Error::new(
                    e.kind(),
                    format!("cannot remove the cgroup {}: {e}", dir.display()),
                ))
            }
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

/// SIGKILL to every process in the cgroups `dirs` (not below them), a few rounds.
fn kill_members(dirs: &[PathBuf]) -> usize {
    let me = std::process::id();
    let mut killed = 0;
    for dir in dirs {
        let kill_file = dir.join("cgroup.kill");
        if kill_file.exists() && write(&kill_file, "1").is_ok() {
            killed += read_pids(&dir.join("cgroup.procs")).len();
            continue;
        }
        for _ in 0..5 {
            let pids: Vec<u32> = read_pids(&dir.join("cgroup.procs"))
                .into_iter()
                .filter(|p| *p != me)
                .collect();
            if pids.is_empty() {
                break;
            }
            for pid in pids {
                if let Ok(pid) = libc::pid_t::try_from(pid) {
                    // SAFETY: kill takes plain integers and touches no memory of ours.
                    if unsafe { libc::kill(pid, libc::SIGKILL) } == 0 {
                        killed += 1;
                    }
                }
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    killed
}

fn read_pids(path: &Path) -> Vec<u32> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect()
}

/// `key N` from a flat-keyed cgroup file (`memory.events`, `memory.oom_control`).
fn counter(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let (k, v) = l.split_once(' ')?;
        (k == key).then(|| v.trim().parse().ok()).flatten()
    })
}

/// The CPU share of the cgroup `dir`.
fn set_share(dir: &Path, version: Version, share: CpuShare) -> io::Result<()> {
    let weight = share.weight.clamp(1, 10_000);
    match version {
        Version::V2 => write(&dir.join("cpu.weight"), &weight.to_string())?,
        Version::V1 => {
            let shares = (u64::from(weight) * 1024 / 100).clamp(2, 262_144);
            write(&dir.join("cpu.shares"), &shares.to_string())?
        }
    }
    if share.idle {
        let idle = dir.join("cpu.idle");
        if idle.exists() {
            write(&idle, "1")?;
        } else {
            match version {
                Version::V2 => write(&dir.join("cpu.weight"), "1")?,
                Version::V1 => write(&dir.join("cpu.shares"), "2")?,
            }
        }
    }
    Ok(())
}

fn make_dir(dir: &Path) -> Result<(), Unavailable> {
    match std::fs::create_dir(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(unavailable(format!("cannot create {}: {e}", dir.display()))),
    }
}

/// Writes `value` to the cgroup file `path`; the error names the file.
fn write(path: &Path, value: &str) -> io::Result<()> {
    std::fs::write(path, value).map_err(|e| {
        io::Error::new(
            e.kind(),
            format!("cannot write \"{value}\" to {}: {e}", path.display()),
        )
    })
}

/// A name safe as one path component of a cgroup.
fn clean_name(name: &str) -> String {
    let clean: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .take(64)
        .collect();
    match clean.trim_start_matches('.') {
        "" => "_".to_string(),
        c => c.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MOUNTINFO: &str = "\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
50 31 0:40 /kubepods/pod1 /mnt/my\\040cg rw - cgroup2 cgroup2 rw,nsdelegate
";

    #[test]
    fn cgroup_mounts_are_read_from_mountinfo() {
        let m = parse_mountinfo(MOUNTINFO);
        assert_eq!(m.len(), 4, "{m:?}");
        assert_eq!(m[0].fstype, "cgroup");
        assert_eq!(m[0].options, ["rw", "cpu"]);
        assert_eq!(m[1].point, PathBuf::from("/sys/fs/cgroup/memory"));
        assert_eq!(m[3].root, "/kubepods/pod1");
        assert_eq!(m[3].point, PathBuf::from("/mnt/my cg"));
    }

    #[test]
    fn own_cgroups_are_read_per_hierarchy() {
        let own =
            parse_proc_cgroup("4:memory:/process_api/abc\n1:cpu,cpuacct:/\n0::/user.slice/x\n");
        assert_eq!(
            own[0],
            (vec!["memory".to_string()], "/process_api/abc".to_string())
        );
        assert_eq!(own[1].0, ["cpu", "cpuacct"]);
        assert_eq!(own[2], (Vec::new(), "/user.slice/x".to_string()));
    }

    #[test]
    fn a_path_is_found_below_the_mounted_root_only() {
        let m = &parse_mountinfo(MOUNTINFO)[3];
        assert_eq!(
            cgroup_dir(m, "/kubepods/pod1/c2"),
            Some(PathBuf::from("/mnt/my cg/c2"))
        );
        assert_eq!(
            cgroup_dir(m, "/kubepods/pod1"),
            Some(PathBuf::from("/mnt/my cg/"))
        );
        assert_eq!(cgroup_dir(m, "/kubepods/pod10"), None);
        assert_eq!(cgroup_dir(m, "/other"), None);
    }

    #[test]
    fn counters_are_read_by_key() {
        let events = "low 0\nhigh 0\nmax 12\noom 3\noom_kill 2\noom_group_kill 0\n";
        assert_eq!(counter(events, "oom_kill"), Some(2));
        assert_eq!(counter(events, "oom"), Some(3));
        assert_eq!(
            counter("oom_kill_disable 0\nunder_oom 0\n", "oom_kill"),
            None
        );
    }

    #[test]
    fn names_are_one_safe_path_component() {
        assert_eq!(clean_name("w01"), "w01");
        assert_eq!(clean_name("../x/y"), "_x_y");
        assert_eq!(clean_name(".."), "_");
        assert_eq!(clean_name(""), "_");
    }
}
