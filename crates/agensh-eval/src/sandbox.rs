//! The evaluator's sandbox: what ProgramBench gets from a Docker container, made from Linux
//! namespaces instead, with no daemon and no privilege.
//!
//! One command runs in a fresh user, mount and PID namespace (and, unless it may use the
//! network, a network namespace with loopback only). Its root is built in a tmpfs: every
//! top-level directory of the host bound **read-only** (so the toolchains the workers used are
//! there, and nothing of the host can be changed), `/proc` of its own PID namespace, fresh
//! tmpfs on `/tmp` (or a directory of the caller's, kept between the steps of one branch),
//! `/run`, `/var/tmp` and `/dev/shm`, the home directory as an overlay whose changes vanish,
//! the paths the caller hides covered by an empty tmpfs, and `/workspace` — the caller's
//! directory, bound, or an overlay of it (a fresh copy for one test branch that costs nothing).
//! The command is `bash -c` in `/workspace` with exactly the environment given.
//!
//! How it is started: a single-threaded launcher process (`agensh __sandbox SPEC`, or the
//! `agensh-sandbox` binary in tests) calls [`launch`]. It unshares the namespaces, maps the
//! caller's user to root inside, and forks the namespace's PID 1, which builds the root,
//! pivots into it and runs the command. PID 1 dies with the launcher (`PR_SET_PDEATHSIG`),
//! and every process of the namespace dies with PID 1, so killing the launcher on a timeout
//! leaves nothing behind — like ProgramBench killing every process in the container.
//!
//! The caller's side is [`Sandbox::run`]: it starts the launcher, collects stdout and stderr,
//! and kills it after the step's timeout.

use std::ffi::CString;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tokio::io::AsyncReadExt;

/// Where `/workspace` comes from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Workspace {
    /// The directory itself, writable.
    Bind(PathBuf),
    /// An overlay: `lower` read-only beneath, changes written to `upper` (`work` is
    /// overlayfs's own scratch directory, on the same filesystem as `upper`).
    Overlay {
        lower: PathBuf,
        upper: PathBuf,
        work: PathBuf,
    },
}

/// One command to run in a sandbox.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Spec {
    pub workspace: Workspace,
    /// A host directory bound at `/tmp`; `None` gives a fresh tmpfs.
    pub tmp: Option<PathBuf>,
    /// Host paths covered by an empty read-only tmpfs (the reference executable's directory,
    /// agensh's data directory).
    pub hide: Vec<PathBuf>,
    /// Host directories shown read-only at the same path even where the sandbox has its own
    /// (the test environment when the data directory is under `/tmp`).
    #[serde(default)]
    pub expose: Vec<PathBuf>,
    /// The home directory, shown as an overlay whose changes are dropped afterwards (so
    /// caches of cargo or pip can be written and the host's are never changed).
    pub home: Option<PathBuf>,
    /// Whether the command may use the host's network; otherwise it has loopback only.
    pub network: bool,
    /// The whole environment of the command.
    pub env: Vec<(String, String)>,
    /// Run by `bash -c`.
    pub command: String,
    /// An empty host directory the launcher mounts a tmpfs on for the new root.
    pub scratch: PathBuf,
    /// The niceness of everything in the sandbox (0: as the caller; 10 for scoring in the
    /// background while workers run).
    #[serde(default)]
    pub nice: i32,
    /// Most processes at once; past it every process of the sandbox is killed (a fork bomb
    /// must not take the host's process ids).
    #[serde(default = "default_max_processes")]
    pub max_processes: usize,
}

/// [`Spec::max_processes`] unless said otherwise: far above what a build or a pytest-xdist
/// run starts, far below a host's process ids (32,768 by default).
pub const MAX_PROCESSES: usize = 2048;

fn default_max_processes() -> usize {
    MAX_PROCESSES
}

/// What a command did.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    /// The exit code, 128 + the signal for a command killed by one, −1 when it timed out.
    pub returncode: i32,
    pub stdout: String,
    pub stderr: String,
    pub timed_out: bool,
    pub wall_time: Duration,
}

impl Outcome {
    /// stdout followed by stderr, as ProgramBench logs a step's output.
    pub fn output(&self) -> String {
        format!("{}{}", self.stdout, self.stderr)
    }
}

/// Why a sandbox could not run a command at all (not the command failing).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot start the sandbox launcher {program}: {source}")]
    Start {
        program: PathBuf,
        source: std::io::Error,
    },
    #[error("the sandbox could not be set up: {0} — agensh's evaluator needs unprivileged user namespaces (check `unshare -Urm true`) and overlayfs")]
    Setup(String),
    #[error("cannot prepare {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// Written by the launcher's PID 1 to stderr when setting up fails, then it exits with
/// [`SETUP_FAILED`]; the caller tells a broken sandbox from a failing command by both.
const SETUP_MARK: &str = "agensh-sandbox-setup-failed: ";
const SETUP_FAILED: i32 = 125;

/// Output kept per stream; more is cut in the middle with a note (a runaway build log must
/// not fill the memory of the evaluator or its report).
pub const OUTPUT_LIMIT: usize = 4 << 20;

/// How to start the launcher: a program and the arguments before the spec.
#[derive(Debug, Clone)]
pub struct Sandbox {
    pub program: PathBuf,
    pub args: Vec<String>,
}

impl Sandbox {
    /// This very program re-executed as `PROGRAM __sandbox SPEC` (the `agensh` binary calls
    /// [`launch`] when its first argument is `__sandbox`).
    pub fn this_program() -> std::io::Result<Self> {
        Ok(Self {
            program: std::env::current_exe()?,
            args: vec!["__sandbox".into()],
        })
    }

    /// Runs `spec` and waits for it, at most `timeout`.
    pub async fn run(&self, spec: &Spec, timeout: Duration) -> Result<Outcome, Error> {
        std::fs::create_dir_all(&spec.scratch).map_err(|source| Error::Io {
            path: spec.scratch.clone(),
            source,
        })?;
        let json = serde_json::to_string(spec).expect("a spec serialises");
        let started = Instant::now();
        let mut cmd = tokio::process::Command::new(&self.program);
        cmd.args(&self.args)
            .arg(json)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        agensh_process::group::terminate_with_parent(&mut cmd);
        let mut child = cmd.spawn().map_err(|source| Error::Start {
            program: self.program.clone(),
            source,
        })?;
        let mut out = child.stdout.take().expect("piped");
        let mut err = child.stderr.take().expect("piped");
        let (mut o, mut e) = (Vec::new(), Vec::new());
        let work = async {
            let (_, _) = tokio::join!(read_capped(&mut out, &mut o), read_capped(&mut err, &mut e));
            child.wait().await
        };
        let status = tokio::time::timeout(timeout, work).await;
        let wall_time = started.elapsed();
        let status = match status {
            Ok(s) => s.map_err(|source| Error::Start {
                program: self.program.clone(),
                source,
            })?,
            Err(_) => {
                // The launcher's death takes PID 1 and with it every process of the sandbox.
                let _ = child.start_kill();
                let _ = child.wait().await;
                return Ok(Outcome {
                    returncode: -1,
                    stdout: String::new(),
                    stderr: String::new(),
                    timed_out: true,
                    wall_time,
                });
            }
        };
        let stdout = text(o);
        let stderr = text(e);
        let returncode = exit_code(status);
        if returncode == SETUP_FAILED {
            if let Some(why) = stderr.lines().find_map(|l| l.strip_prefix(SETUP_MARK)) {
                return Err(Error::Setup(why.to_string()));
            }
        }
        Ok(Outcome {
            returncode,
            stdout,
            stderr,
            timed_out: false,
            wall_time,
        })
    }
}

async fn read_capped(r: &mut (impl tokio::io::AsyncRead + Unpin), into: &mut Vec<u8>) {
    let mut buf = vec![0u8; 64 << 10];
    let mut dropped = 0usize;
    loop {
        match r.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                let room = OUTPUT_LIMIT.saturating_sub(into.len());
                into.extend_from_slice(&buf[..n.min(room)]);
                dropped += n.saturating_sub(room);
            }
        }
    }
    if dropped > 0 {
        into.extend_from_slice(
            format!("\n[agensh: {dropped} more bytes of output not kept]\n").as_bytes(),
        );
    }
}

fn text(b: Vec<u8>) -> String {
    String::from_utf8(b).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

fn exit_code(status: std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(c), _) => c,
        (None, Some(s)) => 128 + s,
        _ => -1,
    }
}

/// The launcher: runs `spec` in fresh namespaces and exits with the command's status. Must be
/// called by a single-threaded process (before any runtime starts threads).
pub fn launch(spec_json: &str) -> ! {
    let spec: Spec = match serde_json::from_str(spec_json) {
        Ok(s) => s,
        Err(e) => setup_failed(&format!("bad spec: {e}")),
    };
    if spec.nice != 0 {
        // Inherited by every process of the sandbox.
        // SAFETY: setpriority takes plain integers and touches no memory of ours.
        unsafe {
            libc::setpriority(libc::PRIO_PROCESS, 0, spec.nice);
        }
    }
    if let Err(e) = enter_namespaces(&spec) {
        setup_failed(&e);
    }
    // The child is PID 1 of the new PID namespace.
    // SAFETY: `launch` runs in a single-threaded process (its contract), so the child of
    // fork holds no lock another thread held, and goes on in plain Rust code.
    match unsafe { libc::fork() } {
        -1 => setup_failed(&format!("fork: {}", std::io::Error::last_os_error())),
        0 => pid1(&spec),
        child => {
            let mut status = 0;
            loop {
                // SAFETY: `status` is a live i32 waitpid writes into.
                let r = unsafe { libc::waitpid(child, &mut status, 0) };
                if r == child {
                    break;
                }
                if r == -1 && std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
                    std::process::exit(SETUP_FAILED);
                }
            }
            std::process::exit(wait_code(status))
        }
    }
}

fn wait_code(status: i32) -> i32 {
    if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else if libc::WIFSIGNALED(status) {
        128 + libc::WTERMSIG(status)
    } else {
        1
    }
}

fn setup_failed(why: &str) -> ! {
    eprintln!("{SETUP_MARK}{why}");
    std::process::exit(SETUP_FAILED)
}

fn enter_namespaces(spec: &Spec) -> Result<(), String> {
    // SAFETY: getuid and getgid cannot fail and touch no memory.
    let uid = unsafe { libc::getuid() };
    // SAFETY: as above.
    let gid = unsafe { libc::getgid() };
    let mut flags = libc::CLONE_NEWUSER | libc::CLONE_NEWNS | libc::CLONE_NEWPID;
    if !spec.network {
        flags |= libc::CLONE_NEWNET;
    }
    // SAFETY: unshare takes flags only; the process is single-threaded, as a user namespace
    // requires.
    if unsafe { libc::unshare(flags) } != 0 {
        return Err(format!(
            "unshare (user, mount, pid{} namespaces): {}",
            if spec.network { "" } else { ", network" },
            std::io::Error::last_os_error()
        ));
    }
    let write = |path: &str, text: String| {
        std::fs::write(path, text).map_err(|e| format!("write {path}: {e}"))
    };
    write("/proc/self/setgroups", "deny".into())?;
    write("/proc/self/uid_map", format!("0 {uid} 1"))?;
    write("/proc/self/gid_map", format!("0 {gid} 1"))?;
    Ok(())
}

/// PID 1 of the sandbox: builds the root, runs the command, reaps, exits with its status.
fn pid1(spec: &Spec) -> ! {
    // SAFETY: PR_SET_PDEATHSIG takes a signal number; no pointer is passed.
    unsafe {
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
    }
    if let Err(e) = build_root(spec) {
        setup_failed(&e);
    }
    let command = match CString::new(spec.command.as_str()) {
        Ok(c) => c,
        Err(_) => setup_failed("the command holds a NUL byte"),
    };
    let env: Vec<CString> = spec
        .env
        .iter()
        .filter_map(|(k, v)| CString::new(format!("{k}={v}")).ok())
        .collect();
    let bash = c"/bin/bash";
    let argv = [
        bash.as_ptr(),
        c"-c".as_ptr(),
        command.as_ptr(),
        std::ptr::null(),
    ];
    let mut envp: Vec<*const libc::c_char> = env.iter().map(|c| c.as_ptr()).collect();
    envp.push(std::ptr::null());
    // SIGCHLD is blocked and waited for with a timeout, so PID 1 both reaps and, between
    // children, counts the processes of its namespace.
    // SAFETY: a sigset_t of zeros is a valid value; sigemptyset initialises it below.
    let mut chld: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: `chld` is a live sigset_t; a null old-set pointer is allowed.
    unsafe {
        libc::sigemptyset(&mut chld);
        libc::sigaddset(&mut chld, libc::SIGCHLD);
        libc::sigprocmask(libc::SIG_BLOCK, &chld, std::ptr::null_mut());
    }
    // SAFETY: PID 1 is single-threaded (a child of the single-threaded launcher).
    let pid = unsafe { libc::fork() };
    if pid == -1 {
        setup_failed(&format!("fork: {}", std::io::Error::last_os_error()));
    }
    if pid == 0 {
        // SAFETY: `argv` and `envp` are null-terminated arrays of pointers to C strings
        // (`bash`, `command`, `env`) that outlive the call; execve returns only on failure.
        unsafe {
            libc::sigprocmask(libc::SIG_UNBLOCK, &chld, std::ptr::null_mut());
            libc::execve(bash.as_ptr(), argv.as_ptr(), envp.as_ptr());
        }
        eprintln!("cannot run /bin/bash: {}", std::io::Error::last_os_error());
        // SAFETY: _exit ends the forked child at once, running nothing of the parent's.
        unsafe { libc::_exit(127) }
    }
    let limit = spec.max_processes.max(8);
    loop {
        // Reap everything that ended; the command's own end ends the sandbox (the rest
        // dies with PID 1).
        loop {
            let mut status = 0;
            // SAFETY: `status` is a live i32 waitpid writes into.
            let r = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
            if r == pid {
                std::process::exit(wait_code(status));
            }
            if r <= 0 {
                break;
            }
        }
        let tick = libc::timespec {
            tv_sec: 0,
            tv_nsec: 100_000_000,
        };
        // SAFETY: `chld` and `tick` are live; a null siginfo pointer is allowed.
        unsafe {
            libc::sigtimedwait(&chld, std::ptr::null_mut(), &tick);
        }
        // A fork bomb (or a runaway recursion) must not take the host's process ids: past
        // the limit, everything in the namespace is killed.
        let running = processes();
        if running > limit {
            // SAFETY: kill takes integers; -1 is every process this PID 1 may signal, all
            // in its own namespace.
            unsafe {
                libc::kill(-1, libc::SIGKILL);
            }
            eprintln!(
                "agensh sandbox: {running} processes at once, more than the limit of {limit}: every process of this step was killed (a fork bomb or a runaway recursion? a build that needs more raises the evaluator's process limit)"
            );
            std::process::exit(128 + libc::SIGKILL);
        }
    }
}

/// The processes of this PID namespace (its own `/proc`).
fn processes() -> usize {
    std::fs::read_dir("/proc").map_or(0, |d| {
        d.flatten()
            .filter(|e| {
                e.file_name()
                    .to_str()
                    .is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit()))
            })
            .count()
    })
}

fn cstr(p: &Path) -> Result<CString, String> {
    use std::os::unix::ffi::OsStrExt;
    CString::new(p.as_os_str().as_bytes()).map_err(|_| format!("{} holds a NUL", p.display()))
}

fn mount(
    source: Option<&Path>,
    target: &Path,
    fstype: Option<&str>,
    flags: libc::c_ulong,
    data: Option<&str>,
) -> Result<(), String> {
    let src = source.map(cstr).transpose()?;
    let tgt = cstr(target)?;
    let fs = fstype.map(|f| CString::new(f).expect("no NUL"));
    let data = data
        .map(|d| CString::new(d).map_err(|_| "mount options hold a NUL".to_string()))
        .transpose()?;
    // SAFETY: every pointer is null or a C string (`src`, `tgt`, `fs`, `data`) that lives
    // to the end of the call.
    let r = unsafe {
        libc::mount(
            src.as_ref().map_or(std::ptr::null(), |s| s.as_ptr()),
            tgt.as_ptr(),
            fs.as_ref().map_or(std::ptr::null(), |s| s.as_ptr()),
            flags,
            data.as_ref()
                .map_or(std::ptr::null(), |d| d.as_ptr() as *const libc::c_void),
        )
    };
    if r != 0 {
        return Err(format!(
            "mount {} on {} ({}): {}",
            source.map_or("none".into(), |s| s.display().to_string()),
            target.display(),
            fstype.unwrap_or("bind"),
            std::io::Error::last_os_error()
        ));
    }
    Ok(())
}

/// Makes the mount at `target` and every mount below it read-only.
fn read_only(target: &Path) -> Result<(), String> {
    let t = cstr(target)?;
    let attr = libc::mount_attr {
        attr_set: libc::MOUNT_ATTR_RDONLY | libc::MOUNT_ATTR_NOSUID,
        attr_clr: 0,
        propagation: 0,
        userns_fd: 0,
    };
    // SAFETY: `t` is a C string and `attr` a mount_attr of the size passed, both live for
    // the call.
    let r = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            libc::AT_FDCWD,
            t.as_ptr(),
            libc::AT_RECURSIVE as libc::c_uint,
            &attr as *const libc::mount_attr,
            std::mem::size_of::<libc::mount_attr>(),
        )
    };
    if r != 0 {
        return Err(format!(
            "make {} read-only: {}",
            target.display(),
            std::io::Error::last_os_error()
        ));
    }
    Ok(())
}

fn bind(source: &Path, target: &Path) -> Result<(), String> {
    mount(
        Some(source),
        target,
        None,
        libc::MS_BIND | libc::MS_REC,
        None,
    )
}

fn tmpfs(target: &Path, mode: &str) -> Result<(), String> {
    mount(
        Some(Path::new("tmpfs")),
        target,
        Some("tmpfs"),
        libc::MS_NOSUID | libc::MS_NODEV,
        Some(mode),
    )
}

/// overlayfs options: a path with `,`, `:` or `\` is written with backslashes before them.
fn overlay_path(p: &Path) -> String {
    let mut s = String::new();
    for c in p.display().to_string().chars() {
        if matches!(c, ',' | ':' | '\\') {
            s.push('\\');
        }
        s.push(c);
    }
    s
}

fn overlay(lower: &Path, upper: &Path, work: &Path, target: &Path) -> Result<(), String> {
    let data = format!(
        "lowerdir={},upperdir={},workdir={}",
        overlay_path(lower),
        overlay_path(upper),
        overlay_path(work)
    );
    mount(
        Some(Path::new("overlay")),
        target,
        Some("overlay"),
        0,
        Some(&data),
    )
}

fn mkdir(p: &Path) -> Result<(), String> {
    std::fs::create_dir_all(p).map_err(|e| format!("mkdir {}: {e}", p.display()))
}

/// Brings the loopback interface of a new network namespace up.
fn loopback_up() -> Result<(), String> {
    // SAFETY: `fd` is a socket this block opens and closes; `req` is a zeroed ifreq (a valid
    // value) named "lo" within its bounds, passed to ioctl as the request it expects.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return Err(format!("socket: {}", std::io::Error::last_os_error()));
        }
        let mut req: libc::ifreq = std::mem::zeroed();
        for (i, b) in b"lo".iter().enumerate() {
            req.ifr_name[i] = *b as libc::c_char;
        }
        let mut r = libc::ioctl(fd, libc::SIOCGIFFLAGS, &mut req);
        if r == 0 {
            req.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short;
            r = libc::ioctl(fd, libc::SIOCSIFFLAGS, &req);
        }
        let err = std::io::Error::last_os_error();
        libc::close(fd);
        if r != 0 {
            return Err(format!("bring loopback up: {err}"));
        }
    }
    Ok(())
}

fn build_root(spec: &Spec) -> Result<(), String> {
    // Nothing mounted here reaches the host.
    mount(
        None,
        Path::new("/"),
        None,
        libc::MS_REC | libc::MS_PRIVATE,
        None,
    )?;
    if !spec.network {
        loopback_up()?;
    }
    tmpfs(&spec.scratch, "mode=0755")?;
    let root = spec.scratch.join("root");
    mkdir(&root)?;
    // The new root must be a mount point of its own to pivot into.
    bind(&root, &root)?;
    let special = ["proc", "tmp", "workspace", "run", "dev"];
    let entries = std::fs::read_dir("/").map_err(|e| format!("read /: {e}"))?;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(n) = name.to_str() else { continue };
        if special.contains(&n) {
            continue;
        }
        let host = Path::new("/").join(&name);
        let inside = root.join(&name);
        let Ok(meta) = std::fs::symlink_metadata(&host) else {
            continue;
        };
        if meta.file_type().is_symlink() {
            if let Ok(target) = std::fs::read_link(&host) {
                std::os::unix::fs::symlink(target, &inside)
                    .map_err(|e| format!("symlink {}: {e}", inside.display()))?;
            }
        } else if meta.is_dir() {
            mkdir(&inside)?;
            bind(&host, &inside)?;
            read_only(&inside)?;
        }
    }
    // /dev: the host's devices (writing a device is not writing the filesystem, so
    // /dev/null works read-only), with a private /dev/shm.
    let dev = root.join("dev");
    mkdir(&dev)?;
    bind(Path::new("/dev"), &dev)?;
    read_only(&dev)?;
    if dev.join("shm").is_dir() {
        tmpfs(&dev.join("shm"), "mode=1777")?;
    }
    let proc_dir = root.join("proc");
    mkdir(&proc_dir)?;
    mount(
        Some(Path::new("proc")),
        &proc_dir,
        Some("proc"),
        libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
        None,
    )?;
    let tmp = root.join("tmp");
    mkdir(&tmp)?;
    match &spec.tmp {
        Some(dir) => bind(dir, &tmp)?,
        None => tmpfs(&tmp, "mode=1777")?,
    }
    let run = root.join("run");
    mkdir(&run)?;
    tmpfs(&run, "mode=0755")?;
    if root.join("var/tmp").is_dir() {
        tmpfs(&root.join("var/tmp"), "mode=1777")?;
    }
    if let Some(home) = &spec.home {
        let inside = root.join(home.strip_prefix("/").unwrap_or(home));
        if home.is_dir() && inside.is_dir() {
            let (upper, work) = (spec.scratch.join("home"), spec.scratch.join("home-work"));
            mkdir(&upper)?;
            mkdir(&work)?;
            overlay(home, &upper, &work, &inside)?;
        }
    }
    let ws = root.join("workspace");
    mkdir(&ws)?;
    match &spec.workspace {
        Workspace::Bind(dir) => bind(dir, &ws)?,
        Workspace::Overlay { lower, upper, work } => overlay(lower, upper, work, &ws)?,
    }
    for shown in &spec.expose {
        let inside = root.join(shown.strip_prefix("/").unwrap_or(shown));
        if shown.is_dir() {
            mkdir(&inside)?;
            bind(shown, &inside)?;
            read_only(&inside)?;
        }
    }
    for hidden in &spec.hide {
        let inside = root.join(hidden.strip_prefix("/").unwrap_or(hidden));
        if inside.is_dir() {
            tmpfs(&inside, "mode=0755,size=4k")?;
            read_only(&inside)?;
        }
    }
    // Into the new root; the old one is let go of entirely.
    std::env::set_current_dir(&root).map_err(|e| format!("chdir {}: {e}", root.display()))?;
    let dot = c".";
    // SAFETY: `dot` is a static C string.
    if unsafe { libc::syscall(libc::SYS_pivot_root, dot.as_ptr(), dot.as_ptr()) } != 0 {
        return Err(format!("pivot_root: {}", std::io::Error::last_os_error()));
    }
    // SAFETY: as above.
    if unsafe { libc::umount2(dot.as_ptr(), libc::MNT_DETACH) } != 0 {
        return Err(format!(
            "detach the old root: {}",
            std::io::Error::last_os_error()
        ));
    }
    std::env::set_current_dir("/workspace").map_err(|e| format!("chdir /workspace: {e}"))?;
    Ok(())
}
