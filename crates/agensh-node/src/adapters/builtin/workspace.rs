//! The workspace tools: files and a shell inside the worker's checkout, never outside it.
//!
//! Every path the model gives is resolved against the checkout: absolute paths outside it,
//! `..` escapes and symlinks that lead outside are refused (the nearest existing ancestor is
//! canonicalized, so a link anywhere on the way counts), and nothing is written inside
//! `.git/`. Commands run with `sh -c` in the checkout, each in its own process group, so a
//! timeout (or the end of the agent) kills everything a command started.
//!
//! Failures are results, not errors: every function answers with text for the model.

use std::collections::VecDeque;
use std::path::{Component, Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agensh_process::{GroupChild, Priority, ProcessGroup};
use tokio::io::AsyncReadExt;

use super::content;
use super::history::cut_text;

/// Entries `list_files` shows at most.
pub const LIST_CAP: usize = 400;
/// Lines `read_file` shows when the model gives no `max_lines`.
pub const READ_LINES: usize = 250;
/// Longest timeout the model may ask for a command.
pub const MAX_COMMAND_SECS: u64 = 3_600;
/// How long a finished command's background processes may keep writing to its output.
const DRAIN_GRACE: Duration = Duration::from_millis(300);
/// Directories `list_files` names but does not descend into.
const NOT_LISTED: &[&str] = &["node_modules", "target", "__pycache__", ".venv", "venv"];

/// What a tool answered: the text for the model, and whether it worked.
#[derive(Debug, Clone, PartialEq)]
pub struct Output {
    pub text: String,
    pub ok: bool,
}

impl Output {
    pub fn ok(text: impl Into<String>) -> Self {
        Output {
            text: text.into(),
            ok: true,
        }
    }

    pub fn error(text: impl Into<String>) -> Self {
        let text = text.into();
        let text = if text.starts_with("error:") {
            text
        } else {
            format!("error: {text}")
        };
        Output { text, ok: false }
    }
}

/// The checkout and the commands started in it.
pub struct Workspace {
    /// The checkout, canonical.
    root: PathBuf,
    /// The checkout as given (absolute, not canonical): absolute paths may use either.
    alias: PathBuf,
    env: Vec<(String, String)>,
    /// Process groups of commands whose processes may still run.
    groups: Arc<Mutex<Vec<ProcessGroup>>>,
    /// Characters of one output kept (the caller cuts again for the model).
    output_cap: usize,
    /// The worker's cgroup commands run in (its memory limit), when the node has cgroups.
    cgroup: Option<crate::adapters::limits::AgentCgroup>,
    /// Raised when the turn is interrupted: a running command is stopped.
    interrupt: crate::adapters::Interrupt,
}

impl Workspace {
    /// The workspace of the checkout `dir`; commands get `env` added.
    pub fn new(dir: &Path, env: Vec<(String, String)>, output_cap: usize) -> std::io::Result<Self> {
        let alias = std::path::absolute(dir)?;
        let root = std::fs::canonicalize(dir)?;
        Ok(Workspace {
            root,
            alias,
            env,
            groups: Arc::new(Mutex::new(Vec::new())),
            output_cap: output_cap.max(200),
            cgroup: None,
            interrupt: Default::default(),
        })
    }

    /// The same workspace with its running command stopped when `interrupt` is raised.
    pub fn with_interrupt(mut self, interrupt: crate::adapters::Interrupt) -> Self {
        self.interrupt = interrupt;
        self
    }

    /// The same workspace with its commands started in the worker's cgroup `cgroup`.
    pub fn with_cgroup(mut self, cgroup: Option<crate::adapters::limits::AgentCgroup>) -> Self {
        self.cgroup = cgroup;
        self
    }

    /// The checkout, canonical.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The path `path` names inside the checkout, canonical up to its first component that
    /// does not exist yet; the refusal text when it leaves the checkout (or, for `write`,
    /// lies inside `.git`).
    pub fn resolve(&self, path: &str, write: bool) -> Result<PathBuf, String> {
        let leaves = || {
            // Small models often glue the checkout's parent to a file name: suggest the
            // relative path of the same file name.
            let name = Path::new(path.trim())
                .file_name()
                .map(|n| n.to_string_lossy().to_string())
                .filter(|n| !n.is_empty() && n != "..");
            match name {
                Some(n) => format!(
                    "error: path {path:?} leaves your checkout; use a path relative to your checkout, e.g. {n:?}"
                ),
                None => format!("error: path {path:?} leaves your checkout; use a path relative to your checkout"),
            }
        };
        if path.contains('\0') {
            return Err(format!("error: path {path:?} contains a NUL character"));
        }
        let given = Path::new(path.trim());
        let joined = if given.is_absolute() {
            given.to_path_buf()
        } else {
            self.root.join(given)
        };
        // `..` and `.` lexically; what is checked below is exactly what is then used.
        let mut norm = PathBuf::new();
        for c in joined.components() {
            match c {
                Component::Prefix(_) | Component::RootDir => norm.push(c.as_os_str()),
                Component::CurDir => {}
                Component::ParentDir => {
                    norm.pop();
                }
                Component::Normal(n) => norm.push(n),
            }
        }
        let norm = if norm.starts_with(&self.root) {
            norm
        } else if norm.starts_with(&self.alias) {
            self.root
                .join(norm.strip_prefix(&self.alias).expect("checked prefix"))
        } else {
            return Err(leaves());
        };
        // Symlinks: canonicalize the nearest ancestor that exists (a dangling link too).
        let mut existing = norm.clone();
        let mut rest: Vec<std::ffi::OsString> = Vec::new();
        while std::fs::symlink_metadata(&existing).is_err() {
            match existing.file_name() {
                Some(name) => rest.push(name.to_os_string()),
                None => return Err(leaves()),
            }
            if !existing.pop() {
                return Err(leaves());
            }
        }
        let canon = std::fs::canonicalize(&existing).map_err(|_| {
            format!("error: path {path:?} goes through a symlink that points nowhere; use a path inside your checkout")
        })?;
        if !canon.starts_with(&self.root) {
            return Err(format!(
                "error: path {path:?} leaves your checkout (through a symlink); use a path inside it"
            ));
        }
        let mut full = canon;
        for name in rest.iter().rev() {
            full.push(name);
        }
        if write {
            let rel = full.strip_prefix(&self.root).unwrap_or(Path::new(""));
            if rel.components().any(|c| c.as_os_str() == ".git") {
                return Err(format!(
                    "error: path {path:?} is inside .git; change the repository with git commands (run), not by writing files there"
                ));
            }
        }
        Ok(full)
    }

    /// `path` relative to the checkout, for messages.
    fn shown(&self, p: &Path) -> String {
        match p.strip_prefix(&self.root) {
            Ok(r) if r.as_os_str().is_empty() => ".".to_string(),
            Ok(r) => r.display().to_string(),
            Err(_) => p.display().to_string(),
        }
    }

    /// A tree listing of `path` (the checkout by default): one path per line, directories
    /// with a trailing `/`, `.git` left out, at most [`LIST_CAP`] entries.
    pub fn list_files(&self, path: Option<&str>) -> Output {
        let dir = match self.resolve(path.unwrap_or("."), false) {
            Ok(d) => d,
            Err(e) => return Output::error(e),
        };
        match std::fs::metadata(&dir) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => {
                return Output::error(format!(
                    "{} is a file, not a directory; use read_file",
                    self.shown(&dir)
                ))
            }
            Err(_) => {
                return Output::error(format!(
                    "no directory {:?} in your checkout; list_files with no path shows the top",
                    path.unwrap_or(".")
                ))
            }
        }
        let mut lines = Vec::new();
        let mut more = 0usize;
        walk(&dir, &self.root, &mut lines, &mut more);
        if lines.is_empty() {
            return Output::ok(format!("{} is empty", self.shown(&dir)));
        }
        let mut text = lines.join("\n");
        if more > 0 {
            text.push_str(&format!(
                "\n[… {more} more entries not shown; list a subdirectory]"
            ));
        }
        Output::ok(text)
    }

    /// Lines `offset_line`.. (1-based) of a text file, at most `max_lines`.
    pub fn read_file(
        &self,
        path: &str,
        offset_line: Option<u64>,
        max_lines: Option<u64>,
    ) -> Output {
        let file = match self.resolve(path, false) {
            Ok(f) => f,
            Err(e) => return Output::error(e),
        };
        let bytes = match std::fs::read(&file) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Output::error(format!(
                    "no file {path:?} in your checkout; list_files shows what exists"
                ))
            }
            Err(_) if file.is_dir() => {
                return Output::error(format!("{path:?} is a directory; use list_files"))
            }
            Err(e) => return Output::error(format!("cannot read {path:?}: {e}")),
        };
        if bytes[..bytes.len().min(8192)].contains(&0) {
            return Output::error(format!(
                "{path:?} is a binary file ({} bytes); inspect it with run (e.g. file, xxd | head)",
                bytes.len()
            ));
        }
        let text = String::from_utf8_lossy(&bytes);
        if text.is_empty() {
            return Output::ok(format!("{}: empty file", self.shown(&file)));
        }
        let lines: Vec<&str> = text.lines().collect();
        let total = lines.len();
        let from = offset_line.unwrap_or(1).max(1) as usize;
        if from > total {
            return Output::error(format!(
                "{path:?} has {total} lines; offset_line {from} is past its end"
            ));
        }
        let n = max_lines.unwrap_or(READ_LINES as u64).max(1) as usize;
        let to = (from - 1 + n).min(total);
        let mut out = format!("{}: lines {from}-{to} of {total}\n", self.shown(&file));
        out.push_str(&lines[from - 1..to].join("\n"));
        if to < total {
            out.push_str(&format!(
                "\n[… {} more lines; read_file with offset_line={}]",
                total - to,
                to + 1
            ));
        }
        Output::ok(out)
    }

    /// Creates or replaces a file (and its parent directories). Framing the model pasted
    /// around the content is left out ([`content::clean`]); a placeholder instead of the
    /// content, or the file's current content again, is refused.
    pub fn write_file(&self, path: &str, content: &str) -> Output {
        let file = match self.resolve(path, true) {
            Ok(f) => f,
            Err(e) => return Output::error(e),
        };
        if let Some(what) = content::placeholder(content, true) {
            return Output::error(format!(
                "the content for {path:?} contains {what}, not the file's text; nothing was written. Write the complete text of the file (read_file shows what it holds now)"
            ));
        }
        let cleaned = content::clean(path, content);
        let content = cleaned.text.as_str();
        if std::fs::read(&file).is_ok_and(|now| now == content.as_bytes()) {
            return Output::error(format!(
                "{path:?} already holds exactly this content; nothing changed. If a check still fails, the code needs a different change: read the failure with run, then write something else"
            ));
        }
        if file == self.root || file.is_dir() {
            return Output::error(format!(
                "{path:?} is a directory; give a file path like {path}/name.txt"
            ));
        }
        if let Some(parent) = file.parent() {
            if let Err(e) = std::fs::create_dir_all(parent) {
                return Output::error(format!("cannot create the directory of {path:?}: {e}"));
            }
        }
        match std::fs::write(&file, content) {
            Ok(()) => Output::ok(format!(
                "wrote {} bytes ({} lines) to {}{}",
                content.len(),
                content.lines().count(),
                self.shown(&file),
                cleaned.note()
            )),
            Err(e) => Output::error(format!("cannot write {path:?}: {e}")),
        }
    }

    /// Replaces the one occurrence of `old` in a file with `new`, both without framing the
    /// model pasted around them; an edit that would change nothing, or a placeholder, is
    /// refused.
    pub fn edit_file(&self, path: &str, old: &str, new: &str) -> Output {
        let file = match self.resolve(path, true) {
            Ok(f) => f,
            Err(e) => return Output::error(e),
        };
        if old.is_empty() {
            return Output::error(
                "old is empty; give the exact text to replace (or use write_file for a new file)",
            );
        }
        if let Some(what) = content::placeholder(new, true) {
            return Output::error(format!(
                "new contains {what}, not real text; nothing was changed. Give the exact replacement text"
            ));
        }
        if let Some(what) = content::placeholder(old, false) {
            return Output::error(format!(
                "old contains {what}, which is not in any file; nothing was changed. Copy old exactly from the file (read_file shows it)"
            ));
        }
        let cleaned_new = content::clean(path, new);
        let cleaned_old = content::clean(path, old);
        let (old, mut new) = (cleaned_old.text.as_str(), cleaned_new.text.as_str());
        // A fence's last newline belongs to the fence, not to a fragment that has none.
        if !cleaned_new.removed.is_empty() && !old.ends_with('\n') {
            new = new.strip_suffix('\n').unwrap_or(new);
        }
        if old == new {
            return Output::error(format!(
                "old and new are the same text, so this edit changes nothing ({path:?} is unchanged). To fix a failure, change the code: read the error with run, then give a new text that differs from old"
            ));
        }
        let text = match std::fs::read(&file) {
            Ok(b) => match String::from_utf8(b) {
                Ok(t) => t,
                Err(_) => {
                    return Output::error(format!("{path:?} is not UTF-8 text; use write_file"))
                }
            },
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Output::error(format!(
                    "no file {path:?} in your checkout; create it with write_file"
                ))
            }
            Err(e) => return Output::error(format!("cannot read {path:?}: {e}")),
        };
        let found: Vec<usize> = text.match_indices(old).map(|(i, _)| i).collect();
        match found.len() {
            0 => Output::error(format!(
                "old text not found in {path:?}; read_file it and copy the exact text, spaces included"
            )),
            1 => {
                let at = found[0];
                let line = text[..at].matches('\n').count() + 1;
                let edited = format!("{}{new}{}", &text[..at], &text[at + old.len()..]);
                match std::fs::write(&file, edited) {
                    Ok(()) => Output::ok(format!(
                        "edited {}: replaced 1 occurrence at line {line}{}",
                        self.shown(&file),
                        cleaned_new.note()
                    )),
                    Err(e) => Output::error(format!("cannot write {path:?}: {e}")),
                }
            }
            n => Output::error(format!(
                "old text found {n} times in {path:?}; add context to make it unique"
            )),
        }
    }

    /// A claimed part's files, named for the model: each of `paths` (a directory: the
    /// files under it) and the tests of each (named `test_<stem>.*` or `<stem>_test.*`),
    /// with their sizes, which do not exist yet, and the next step. Their text is not put
    /// into the conversation here: small mode's code request shows it when the model
    /// writes a file ([`Self::code_sources`]), so the conversation stays short and its
    /// cached prompt valid.
    pub fn part_files(&self, paths: &[String]) -> String {
        let mut listed = Vec::new();
        let mut more = 0;
        walk(&self.root, &self.root, &mut listed, &mut more);
        let files_in = |rel: &str| -> Vec<String> {
            let prefix = format!("{}/", rel.trim_end_matches('/'));
            listed
                .iter()
                .filter(|l| {
                    l.starts_with(&prefix)
                        && !l.ends_with('/')
                        && !l.ends_with('@')
                        && !l.ends_with(" (not listed)")
                })
                .cloned()
                .collect()
        };
        let mut files: Vec<String> = Vec::new();
        let mut missing = Vec::new();
        for p in paths {
            let Ok(full) = self.resolve(p, false) else {
                continue;
            };
            let rel = self.shown(&full);
            if full.is_file() {
                files.push(rel);
            } else if full.is_dir() {
                files.extend(files_in(&rel));
            } else {
                missing.push(rel);
            }
        }
        let stems: Vec<String> = files
            .iter()
            .chain(&missing)
            .filter_map(|f| Path::new(f).file_stem())
            .map(|s| s.to_string_lossy().to_string())
            .collect();
        let tests: Vec<String> = tests_of(&listed, &stems)
            .into_iter()
            .filter(|t| !files.contains(t))
            .collect();
        let sized = |rel: &String| match std::fs::read_to_string(self.root.join(rel)) {
            Ok(t) if t.lines().count() == 1 => format!("{rel} (1 line)"),
            Ok(t) => format!("{rel} ({} lines)", t.lines().count()),
            Err(_) => rel.clone(),
        };
        let mut out = Vec::new();
        if !files.is_empty() {
            let named: Vec<String> = files.iter().map(sized).collect();
            out.push(format!("Your part's files: {}.", named.join(", ")));
        }
        if !tests.is_empty() {
            let named: Vec<String> = tests.iter().map(sized).collect();
            out.push(format!("Their tests: {}.", named.join(", ")));
        }
        if !missing.is_empty() {
            out.push(format!("Not there yet: {}.", missing.join(", ")));
        }
        if let Some(first) = files.iter().chain(&missing).next() {
            out.push(format!(
                "Next: write_file with path {first}; you are then shown the file and its tests and send its whole text."
            ));
        }
        out.join("\n")
    }

    /// What the code request of small mode shows for `path` ([`super::code::request`]):
    /// the file's text now (`None` when it does not exist) and its tests (named
    /// `test_<stem>.*` or `<stem>_test.*`, anywhere in the checkout), each path with its text,
    /// at most `budget` characters of tests in all.
    pub fn code_sources(
        &self,
        path: &str,
        budget: usize,
    ) -> std::result::Result<CodeSources, String> {
        let file = self.resolve(path, true)?;
        let current = match std::fs::read(&file) {
            Ok(bytes) => Some(String::from_utf8(bytes).map_err(|_| {
                format!("{path:?} is not a text file; write_file replaces text files only")
            })?),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(format!("cannot read {path:?}: {e}")),
        };
        let mut listed = Vec::new();
        let mut more = 0;
        walk(&self.root, &self.root, &mut listed, &mut more);
        let stem = Path::new(path)
            .file_stem()
            .map(|s| s.to_string_lossy().to_string())
            .unwrap_or_default();
        let shown = self.shown(&file);
        let mut tests = Vec::new();
        let mut used = 0;
        for rel in tests_of(&listed, &[stem]) {
            if rel == shown {
                continue;
            }
            let Ok(text) = std::fs::read_to_string(self.root.join(&rel)) else {
                continue;
            };
            if used + text.len() > budget {
                continue;
            }
            used += text.len();
            tests.push((rel, text));
        }
        Ok(CodeSources { current, tests })
    }

    /// Runs `command` with `sh -c` in the checkout, in its own process group; stdout and
    /// stderr combined. On timeout the whole group is killed with SIGKILL. A command with a
    /// placeholder in it is refused.
    pub async fn run(&self, command: &str, timeout: Duration) -> Output {
        if let Some(what) = content::placeholder(command, false) {
            return Output::error(format!(
                "the command contains {what}, not real text; it was not run. Write out the whole command"
            ));
        }
        let started = Instant::now();
        let (tx, mut rx) = match tokio::net::unix::pipe::pipe() {
            Ok(p) => p,
            Err(e) => return Output::error(format!("cannot create a pipe for the command: {e}")),
        };
        let spawned = (|| {
            let w = tx.into_blocking_fd()?;
            let w2 = w.try_clone()?;
            let mut cmd = tokio::process::Command::new("sh");
            cmd.arg("-c")
                .arg(command)
                .current_dir(&self.root)
                .env_remove("GIT_DIR")
                .env_remove("GIT_WORK_TREE")
                .env_remove("AGENSH_PUSHER")
                .env("GIT_TERMINAL_PROMPT", "0")
                .envs(self.env.iter().map(|(k, v)| (k, v)))
                .stdin(Stdio::null())
                .stdout(Stdio::from(w))
                .stderr(Stdio::from(w2))
                .kill_on_drop(true);
            if let Some(cg) = &self.cgroup {
                cg.attach(&mut cmd)?;
            }
            // `cmd` holds the write ends; they close when it is dropped here.
            agensh_process::group::spawn(&mut cmd, Priority::Normal)
        })();
        let oom_before = self.cgroup.as_ref().map(|c| c.oom_kills());
        let GroupChild { mut child, group } = match spawned {
            Ok(c) => c,
            Err(e) => return Output::error(format!("cannot start sh: {e}")),
        };
        self.groups.lock().expect("groups lock").push(group);
        // Dropped before the command ends (the turn was cancelled): the group dies too.
        let mut guard = GroupGuard { group, armed: true };

        let capture = Arc::new(Mutex::new(Capture::new(self.output_cap)));
        let sink = capture.clone();
        let reader = tokio::spawn(async move {
            let mut buf = vec![0u8; 8192];
            loop {
                match rx.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => sink.lock().expect("capture lock").push(&buf[..n]),
                }
            }
        });
        // None: the command was stopped, by its timeout or by an interruption of the turn.
        let status = tokio::select! {
            s = child.wait() => Some(s),
            _ = tokio::time::sleep(timeout) => None,
            _ = self.interrupt.raised() => None,
        };
        let interrupted = status.is_none() && self.interrupt.is_raised();
        let ok = matches!(&status, Some(Ok(s)) if s.success());
        let (head, more) = match status {
            Some(status) => {
                let waited = tokio::time::timeout(DRAIN_GRACE, reader).await;
                let lingering = waited.is_err();
                let mut head = match status {
                    Ok(s) => describe_status(s),
                    Err(e) => format!("exit status unknown ({e})"),
                };
                if let Some(note) = self.memory_note(oom_before) {
                    head.push_str(&note);
                }
                let more = if lingering {
                    "\n[background processes of this command still run; their later output is not shown — redirect it to a file]"
                } else {
                    ""
                };
                (head, more)
            }
            None => {
                group.kill();
                let _ = tokio::time::timeout(Duration::from_secs(5), child.wait()).await;
                let _ = tokio::time::timeout(Duration::from_secs(1), reader).await;
                let head = if interrupted {
                    format!(
                        "stopped after {} s because the turn was interrupted for urgent news: killed the command and every process it started (its process group); the output so far:",
                        started.elapsed().as_secs()
                    )
                } else {
                    format!(
                        "timed out after {} s: killed the command and every process it started (its process group); the output so far:",
                        timeout.as_secs_f64().round() as u64
                    )
                };
                (head, "")
            }
        };
        guard.armed = false;
        self.prune_groups();
        let body = capture.lock().expect("capture lock").text(self.output_cap);
        let body = body.trim_end();
        let body = if body.trim().is_empty() {
            "(no output)"
        } else {
            body
        };
        tracing::debug!(
            "builtin run took {} ms: {command:.100}",
            started.elapsed().as_millis()
        );
        let hint = if ok { None } else { module_path_hint(body) };
        let hint = hint.map_or(String::new(), |h| format!("\n\n{h}"));
        Output {
            text: format!("{head}\n{body}{more}{hint}"),
            ok,
        }
    }

    /// What the worker's memory limit did to a command, when it killed processes since
    /// `before` (the cgroup's count when the command started).
    fn memory_note(&self, before: Option<u64>) -> Option<String> {
        let cg = self.cgroup.as_ref()?;
        let limit = cg.limits().memory?;
        let killed = cg.oom_kills().saturating_sub(before?);
        (killed > 0).then(|| {
            format!(
                " — the worker's memory limit ({}) killed {killed} process(es) of it: use less memory (smaller inputs, fewer parallel jobs)",
                agensh_domain::size::MemorySize::bytes(limit)
            )
        })
    }

    /// Forgets groups with no process left.
    fn prune_groups(&self) {
        self.groups
            .lock()
            .expect("groups lock")
            .retain(|g| g.has_members());
    }

    /// Kills every process group a command started that may still run.
    pub fn kill_all(&self) {
        for g in self.groups.lock().expect("groups lock").drain(..) {
            g.kill();
        }
    }

    /// A handle that kills the same groups, for [`Drop`] of the agent.
    pub fn groups(&self) -> Arc<Mutex<Vec<ProcessGroup>>> {
        self.groups.clone()
    }
}

/// Kills every group in `groups`.
pub fn kill_groups(groups: &Mutex<Vec<ProcessGroup>>) {
    if let Ok(mut g) = groups.lock() {
        for group in g.drain(..) {
            group.kill();
        }
    }
}

struct GroupGuard {
    group: ProcessGroup,
    armed: bool,
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        if self.armed {
            self.group.kill();
        }
    }
}

/// A hint for Python's `No module named 'tests/test_x'`: a module named by its file path
/// (`python3 -m unittest tests/test_x`), which small models write; the dotted name works.
fn module_path_hint(output: &str) -> Option<String> {
    let rest = output.split("No module named '").nth(1)?;
    let name = rest.split('\'').next()?;
    if !name.contains('/') {
        return None;
    }
    let dotted = name
        .trim_start_matches("./")
        .trim_end_matches(".py")
        .replace('/', ".");
    Some(format!(
        "hint: {name:?} is a file path, not a module name; name the module with dots: {dotted} (e.g. python3 -m unittest {dotted})"
    ))
}

fn describe_status(s: std::process::ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (s.code(), s.signal()) {
        (Some(c), _) => format!("exit code: {c}"),
        (None, Some(sig)) => format!("killed by signal {sig}"),
        _ => format!("ended: {s}"),
    }
}

/// A command's output: the first `cap` bytes and the last `cap`, and how many were dropped
/// between them.
struct Capture {
    head: Vec<u8>,
    tail: VecDeque<u8>,
    dropped: usize,
    cap: usize,
}

impl Capture {
    fn new(cap: usize) -> Self {
        Capture {
            head: Vec::new(),
            tail: VecDeque::new(),
            dropped: 0,
            cap,
        }
    }

    fn push(&mut self, mut bytes: &[u8]) {
        if self.head.len() < self.cap {
            let n = (self.cap - self.head.len()).min(bytes.len());
            self.head.extend_from_slice(&bytes[..n]);
            bytes = &bytes[n..];
        }
        self.tail.extend(bytes);
        if self.tail.len() > self.cap {
            let over = self.tail.len() - self.cap;
            self.tail.drain(..over);
            self.dropped += over;
        }
    }

    /// The output cut to about `cap` characters, head and tail.
    fn text(&self, cap: usize) -> String {
        let head = String::from_utf8_lossy(&self.head).to_string();
        let tail: Vec<u8> = self.tail.iter().copied().collect();
        let tail = String::from_utf8_lossy(&tail).to_string();
        if self.dropped == 0 {
            return cut_text(&format!("{head}{tail}"), cap);
        }
        let keep_head = cap / 3;
        let keep_tail = cap - keep_head;
        let h: String = head.chars().take(keep_head).collect();
        let tail_chars = tail.chars().count();
        let t: String = tail
            .chars()
            .skip(tail_chars.saturating_sub(keep_tail))
            .collect();
        let cut = head.chars().count() - h.chars().count()
            + self.dropped
            + (tail_chars - t.chars().count());
        super::history::join_cut(&h, cut, &t)
    }
}

/// Depth-first listing under `dir`, paths relative to `root`.
/// A file to write whole and its tests ([`Workspace::code_sources`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CodeSources {
    /// Its text now; `None` when it does not exist yet.
    pub current: Option<String>,
    /// Its tests: each path and text.
    pub tests: Vec<(String, String)>,
}

/// The files of a `walk` listing that are the tests of a file with one of `stems`: named
/// `test_<stem>.*` or `<stem>_test.*`.
fn tests_of(listed: &[String], stems: &[String]) -> Vec<String> {
    listed
        .iter()
        .filter(|rel| !rel.ends_with('/'))
        .filter(|rel| {
            let name = Path::new(rel.as_str())
                .file_name()
                .map(|n| n.to_string_lossy().to_string())
                .unwrap_or_default();
            stems.iter().any(|stem| {
                name.starts_with(&format!("test_{stem}."))
                    || name.starts_with(&format!("{stem}_test."))
            })
        })
        .cloned()
        .collect()
}

fn walk(dir: &Path, root: &Path, lines: &mut Vec<String>, more: &mut usize) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    let mut entries: Vec<(String, PathBuf, std::fs::FileType)> = rd
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().to_string();
            let ft = e.file_type().ok()?;
            (name != ".git").then(|| (name, e.path(), ft))
        })
        .collect();
    entries.sort_by(|a, b| a.0.cmp(&b.0));
    for (name, path, ft) in entries {
        let rel = path
            .strip_prefix(root)
            .map(|p| p.display().to_string())
            .unwrap_or(name.clone());
        if lines.len() >= LIST_CAP {
            *more += 1;
            if ft.is_dir() {
                *more += count_entries(&path);
            }
            continue;
        }
        if ft.is_symlink() {
            lines.push(format!("{rel}@"));
        } else if ft.is_dir() {
            if NOT_LISTED.contains(&name.as_str()) {
                lines.push(format!("{rel}/ (not listed)"));
            } else {
                lines.push(format!("{rel}/"));
                walk(&path, root, lines, more);
            }
        } else {
            lines.push(rel);
        }
    }
}

/// Entries under `dir` (bounded), for the "more" count of a listing.
fn count_entries(dir: &Path) -> usize {
    let mut n = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd.flatten() {
            n += 1;
            if n > 100_000 {
                return n;
            }
            if e.file_type().map(|t| t.is_dir()).unwrap_or(false) && e.file_name() != ".git" {
                stack.push(e.path());
            }
        }
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ws() -> (tempfile::TempDir, Workspace) {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("co");
        std::fs::create_dir_all(dir.join(".git")).unwrap();
        std::fs::write(dir.join("a.txt"), "one\ntwo\nthree\n").unwrap();
        let ws = Workspace::new(&dir, vec![], 2000).unwrap();
        (tmp, ws)
    }

    #[test]
    fn paths_stay_inside_the_checkout() {
        let (tmp, ws) = ws();
        assert!(ws.resolve("a.txt", false).is_ok());
        assert!(ws.resolve("./sub/../a.txt", true).is_ok());
        assert!(ws.resolve("new/dir/file.txt", true).is_ok());
        let abs_inside = ws.root().join("a.txt");
        assert!(ws.resolve(abs_inside.to_str().unwrap(), false).is_ok());
        let e = ws.resolve("../x", true).unwrap_err();
        assert_eq!(
            e,
            "error: path \"../x\" leaves your checkout; use a path relative to your checkout, e.g. \"x\""
        );
        assert!(ws.resolve("sub/../../x", false).is_err());
        assert!(ws.resolve("/etc/passwd", false).is_err());
        std::os::unix::fs::symlink(tmp.path(), ws.root().join("out")).unwrap();
        assert!(ws.resolve("out/x", true).unwrap_err().contains("symlink"));
        std::os::unix::fs::symlink("/nonexistent/zzz", ws.root().join("dangling")).unwrap();
        assert!(ws.resolve("dangling", true).is_err());
        assert!(ws
            .resolve(".git/config", true)
            .unwrap_err()
            .contains(".git"));
        assert!(ws.resolve(".git/config", false).is_ok());
    }

    #[test]
    fn read_write_and_edit() {
        let (_tmp, ws) = ws();
        let r = ws.read_file("a.txt", Some(2), Some(1));
        assert!(r.ok);
        assert_eq!(
            r.text,
            "a.txt: lines 2-2 of 3\ntwo\n[… 1 more lines; read_file with offset_line=3]"
        );
        assert!(ws.write_file("d/e/f.txt", "x\n").ok);
        assert_eq!(
            std::fs::read_to_string(ws.root().join("d/e/f.txt")).unwrap(),
            "x\n"
        );
        let e = ws.edit_file("a.txt", "zzz", "y");
        assert!(!e.ok && e.text.contains("not found"), "{}", e.text);
        std::fs::write(ws.root().join("b.txt"), "x x").unwrap();
        let e = ws.edit_file("b.txt", "x", "y");
        assert!(!e.ok && e.text.contains("found 2 times"), "{}", e.text);
        let e = ws.edit_file("a.txt", "two", "TWO");
        assert!(e.ok, "{}", e.text);
        assert_eq!(
            std::fs::read_to_string(ws.root().join("a.txt")).unwrap(),
            "one\nTWO\nthree\n"
        );
        let l = ws.list_files(None);
        assert_eq!(l.text, "a.txt\nb.txt\nd/\nd/e/\nd/e/f.txt");
    }

    #[test]
    fn a_parts_files_and_their_tests_are_named_with_the_next_step() {
        let (_tmp, ws) = ws();
        std::fs::create_dir_all(ws.root().join("pkg")).unwrap();
        std::fs::create_dir_all(ws.root().join("tests")).unwrap();
        std::fs::write(ws.root().join("pkg/caesar.py"), "def shift(s):\n    pass\n").unwrap();
        std::fs::write(ws.root().join("tests/test_caesar.py"), "assert True\n").unwrap();
        std::fs::write(ws.root().join("tests/test_roman.py"), "other\n").unwrap();
        let text = ws.part_files(&["pkg/caesar.py".into(), "pkg/new.py".into()]);
        assert_eq!(
            text,
            "Your part's files: pkg/caesar.py (2 lines).\n\
             Their tests: tests/test_caesar.py (1 line).\n\
             Not there yet: pkg/new.py.\n\
             Next: write_file with path pkg/caesar.py; you are then shown the file and its tests and send its whole text."
        );
        let text = ws.part_files(&["pkg".into()]);
        assert!(
            text.starts_with(
                "Your part's files: pkg/caesar.py (2 lines).\nTheir tests: tests/test_caesar.py"
            ),
            "{text}"
        );
        assert_eq!(ws.part_files(&["../elsewhere".into()]), "");
    }

    #[test]
    fn an_edit_that_changes_nothing_is_refused() {
        let (_tmp, ws) = ws();
        let e = ws.edit_file("a.txt", "two", "two");
        assert!(!e.ok, "{}", e.text);
        assert!(e.text.contains("changes nothing"), "{}", e.text);
        assert!(
            e.text.contains("give a new text that differs"),
            "{}",
            e.text
        );
        let w = ws.write_file("a.txt", "one\ntwo\nthree\n");
        assert!(
            !w.ok && w.text.contains("already holds exactly this content"),
            "{}",
            w.text
        );
        assert_eq!(
            std::fs::read_to_string(ws.root().join("a.txt")).unwrap(),
            "one\ntwo\nthree\n"
        );
    }

    #[test]
    fn placeholders_are_refused_as_content_and_in_commands() {
        let (_tmp, ws) = ws();
        let w = ws.write_file("p.py", "<250 chars>");
        assert!(!w.ok, "{}", w.text);
        assert!(w.text.contains("the placeholder <250 chars>"), "{}", w.text);
        assert!(w.text.contains("Write the complete text"), "{}", w.text);
        assert!(!ws.root().join("p.py").exists());
        let e = ws.edit_file("a.txt", "two", "<12 chars>");
        assert!(!e.ok && e.text.contains("not real text"), "{}", e.text);
        assert_eq!(
            std::fs::read_to_string(ws.root().join("a.txt")).unwrap(),
            "one\ntwo\nthree\n"
        );
    }

    #[tokio::test]
    async fn a_command_with_a_placeholder_is_not_run() {
        let (_tmp, ws) = ws();
        let o = ws
            .run("echo <40 chars> > ran.txt", Duration::from_secs(10))
            .await;
        assert!(!o.ok && o.text.contains("it was not run"), "{}", o.text);
        assert!(!ws.root().join("ran.txt").exists());
    }

    #[test]
    fn a_pasted_header_and_fence_are_left_out_of_what_is_written() {
        let (_tmp, ws) = ws();
        let w = ws.write_file("c.py", "c.py: lines 1-1 of 1\n```python\nx = 1\n```\n");
        assert!(w.ok, "{}", w.text);
        assert!(
            w.text
                .contains("left out the read_file header line and the ``` fence lines"),
            "{}",
            w.text
        );
        assert_eq!(
            std::fs::read_to_string(ws.root().join("c.py")).unwrap(),
            "x = 1\n"
        );
        let e = ws.edit_file("c.py", "x = 1", "```\nx = 2\n```");
        assert!(e.ok, "{}", e.text);
        assert_eq!(
            std::fs::read_to_string(ws.root().join("c.py")).unwrap(),
            "x = 2\n"
        );
    }

    /// Needs cgroups this process may create (root, or a delegated cgroup): elsewhere it
    /// fails saying so.
    #[tokio::test]
    async fn a_command_over_the_workers_memory_limit_is_killed_and_the_model_is_told() {
        use agensh_process::cgroup::{CpuShare, NodeCgroups, WorkerLimits};
        let node = NodeCgroups::open(
            &format!("test-builtin-{}", std::process::id()),
            CpuShare::EQUAL,
        )
        .unwrap_or_else(|e| panic!("this test needs cgroups it may create: {e}"));
        let limits = WorkerLimits {
            memory: Some(64 << 20),
            cpu: CpuShare::EQUAL,
        };
        let cg = std::sync::Arc::new(node.worker("w01", limits).unwrap());
        let (_tmp, ws) = ws();
        let ws = ws.with_cgroup(Some(cg.clone()));
        let o = ws
            .run(
                "python3 -c \"x = bytearray(b'\\x01') * (256 << 20)\"",
                Duration::from_secs(60),
            )
            .await;
        assert!(!o.ok, "{}", o.text);
        assert!(
            o.text
                .contains("the worker's memory limit (64 MiB) killed 1 process(es) of it"),
            "{}",
            o.text
        );
        // Under the limit nothing is said.
        let o = ws.run("echo fine", Duration::from_secs(10)).await;
        assert_eq!(o.text, "exit code: 0\nfine");
    }

    #[tokio::test]
    async fn run_combines_output_and_reports_the_exit_code() {
        let (_tmp, ws) = ws();
        let o = ws
            .run("echo out; echo err >&2; exit 3", Duration::from_secs(10))
            .await;
        assert!(!o.ok);
        assert_eq!(o.text, "exit code: 3\nout\nerr");
        let o = ws.run("true", Duration::from_secs(10)).await;
        assert_eq!(o.text, "exit code: 0\n(no output)");
        assert!(o.ok);
    }

    #[tokio::test]
    async fn a_module_named_by_its_path_gets_the_dotted_name_as_a_hint() {
        let (_tmp, ws) = ws();
        let o = ws
            .run(
                "echo \"ModuleNotFoundError: No module named 'tests/test_primes'\"; exit 1",
                Duration::from_secs(10),
            )
            .await;
        assert!(
            o.text.ends_with("name the module with dots: tests.test_primes (e.g. python3 -m unittest tests.test_primes)"),
            "{}",
            o.text
        );
        let plain = ws
            .run(
                "echo \"No module named 'numpy'\"; exit 1",
                Duration::from_secs(10),
            )
            .await;
        assert!(!plain.text.contains("hint:"), "{}", plain.text);
    }

    #[test]
    fn code_sources_are_the_file_and_its_tests() {
        let (_tmp, ws) = ws();
        std::fs::create_dir_all(ws.root().join("kit")).unwrap();
        std::fs::create_dir_all(ws.root().join("tests")).unwrap();
        std::fs::write(ws.root().join("kit/leap.py"), "def leap(y): pass\n").unwrap();
        std::fs::write(ws.root().join("tests/test_leap.py"), "import unittest\n").unwrap();
        std::fs::write(ws.root().join("tests/test_other.py"), "x\n").unwrap();
        let src = ws.code_sources("kit/leap.py", 10_000).unwrap();
        assert_eq!(src.current.as_deref(), Some("def leap(y): pass\n"));
        assert_eq!(
            src.tests,
            vec![(
                "tests/test_leap.py".to_string(),
                "import unittest\n".to_string()
            )]
        );
        assert_eq!(ws.code_sources("kit/new.py", 10_000).unwrap().current, None);
        assert!(ws.code_sources("../outside.py", 10_000).is_err());
    }

    #[test]
    fn capture_keeps_head_and_tail() {
        let mut c = Capture::new(10);
        for i in 0..100 {
            c.push(format!("{i}\n").as_bytes());
        }
        let t = c.text(10);
        assert!(t.starts_with("0\n1"), "{t}");
        assert!(t.ends_with("99\n"), "{t}");
        assert!(t.contains("characters cut"), "{t}");
    }
}
