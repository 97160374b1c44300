//! Running `git`: the one place that starts git (for the hub, the node and the scripted
//! agent alike), sets its environment, captures output and turns a failure into an error
//! that quotes git's own message.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use agensh_domain::{Error, Result};
use tokio::io::AsyncWriteExt;
use tokio::process::Command;

/// The identity commits made by the hub carry.
pub const HUB_NAME: &str = "agensh hub";
/// The e-mail address of [`HUB_NAME`].
pub const HUB_EMAIL: &str = "hub@agensh.invalid";

/// Variables that point git at another repository than the one it is run for (set for a
/// hook, or by a git that runs agensh); no git run here inherits them.
const REPOSITORY_VARS: [&str; 2] = ["GIT_DIR", "GIT_WORK_TREE"];

/// All a CGI git sees of this process's environment: hooks need a PATH for sh and its
/// tools; git needs HOME only for user config.
const CGI_PASSED_VARS: [&str; 3] = ["PATH", "HOME", "TMPDIR"];

/// A git invocation context: a repository (bare, or a work tree) and its environment.
#[derive(Debug, Clone)]
pub struct Git {
    /// `--git-dir` for a bare repository, or the work tree to run in.
    dir: PathBuf,
    bare: bool,
    /// Run as this worker's own git (see [`Git::as_worker`]).
    worker: Option<String>,
    /// Run at nice 19 (see [`Git::background`]).
    background: bool,
}

/// The e-mail address of `worker`'s commits.
pub fn worker_email(worker: &str) -> String {
    format!("{worker}@agensh.invalid")
}

/// A `git` command for a CGI program (`http-backend`) run in `dir`: nothing of this
/// process's environment but PATH, HOME and TMPDIR, and the settings every git run gets.
/// The caller adds the request's variables.
pub fn cgi_command<I, S>(dir: &Path, args: I) -> Command
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let mut c = Command::new("git");
    c.args(args).env_clear().current_dir(dir);
    for var in CGI_PASSED_VARS {
        if let Some(v) = std::env::var_os(var) {
            c.env(var, v);
        }
    }
    clean(&mut c);
    c
}

/// The settings every git run gets: never a prompt, no system configuration, the C locale
/// (messages are matched), and no repository inherited from the environment.
fn clean(c: &mut Command) {
    for var in REPOSITORY_VARS {
        c.env_remove(var);
    }
    c.env("GIT_TERMINAL_PROMPT", "0")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("LC_ALL", "C");
}

/// At most so many git network operations (clone, fetch, push) at once; the others wait
/// in the order they asked (tokio's semaphore is fair). A node with hundreds of workers
/// puts every clone, fetch and push of its own through one, so they never start hundreds
/// of git processes at once (`run.git_jobs`).
#[derive(Debug, Clone)]
pub struct NetworkJobs {
    slots: std::sync::Arc<tokio::sync::Semaphore>,
    limit: usize,
}

impl NetworkJobs {
    /// At most `limit` (at least 1) at once.
    pub fn new(limit: usize) -> Self {
        let limit = limit.max(1);
        NetworkJobs {
            slots: std::sync::Arc::new(tokio::sync::Semaphore::new(limit)),
            limit,
        }
    }

    /// No limit (a bridge or a test that runs one operation at a time anyway).
    pub fn unlimited() -> Self {
        Self::new(tokio::sync::Semaphore::MAX_PERMITS)
    }

    /// How many may run at once.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Runs `job` when a slot is free, after those that asked before it.
    pub async fn run<T>(&self, job: impl std::future::Future<Output = T>) -> T {
        let _slot = self
            .slots
            .acquire()
            .await
            .expect("the semaphore is never closed");
        job.await
    }
}

/// What a finished git command printed.
#[derive(Debug, Clone)]
pub struct Output {
    pub status: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl Output {
    pub fn success(&self) -> bool {
        self.status == Some(0)
    }
}

impl Git {
    /// Runs git against the bare repository at `git_dir`.
    pub fn bare(git_dir: &Path) -> Self {
        Git {
            dir: git_dir.to_path_buf(),
            bare: true,
            worker: None,
            background: false,
        }
    }

    /// Runs git inside the work tree `dir`.
    pub fn worktree(dir: &Path) -> Self {
        Git {
            dir: dir.to_path_buf(),
            bare: false,
            worker: None,
            background: false,
        }
    }

    /// The same repository, its [`Git::output`]s reniced to 19 once started (not in a
    /// `pre_exec` hook, which would make the spawn a fork of a process that may hold
    /// thousands of files and workers): bookkeeping that gives way to everything else.
    pub fn background(mut self) -> Self {
        self.background = true;
        self
    }

    /// The same repository, run as `worker`'s own git (the scripted agent's): the user's
    /// global configuration is ignored and `worker` authors and commits what it makes.
    pub fn as_worker(mut self, worker: &str) -> Self {
        self.worker = Some(worker.to_string());
        self
    }

    /// A `git` command with a clean, predictable environment.
    pub fn command<I, S>(&self, args: I) -> Command
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let mut c = Command::new("git");
        if self.bare {
            c.arg("--git-dir").arg(&self.dir);
            // Commits the hub makes itself (merges, the first commit) are signed as the
            // hub; in a worker's checkout its own user.name applies.
            c.env("GIT_AUTHOR_NAME", HUB_NAME)
                .env("GIT_AUTHOR_EMAIL", HUB_EMAIL)
                .env("GIT_COMMITTER_NAME", HUB_NAME)
                .env("GIT_COMMITTER_EMAIL", HUB_EMAIL);
        } else {
            c.current_dir(&self.dir);
        }
        if let Some(worker) = &self.worker {
            c.env("GIT_CONFIG_GLOBAL", "/dev/null")
                .arg("-c")
                .arg(format!("user.name={worker}"))
                .arg("-c")
                .arg(format!("user.email={}", worker_email(worker)));
        }
        c.args([
            "-c",
            "core.quotePath=false",
            "-c",
            "advice.detachedHead=false",
        ])
        .args(args)
        .stdin(Stdio::null())
        .kill_on_drop(true);
        clean(&mut c);
        c
    }

    /// Runs git with `args` and returns what it printed, whatever its exit status.
    pub async fn output<I, S>(&self, args: I) -> Result<Output>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        self.output_with_input(args, None).await
    }

    /// Like [`Git::output`], writing `input` to git's standard input.
    pub async fn output_with_input<I, S>(&self, args: I, input: Option<&[u8]>) -> Result<Output>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let mut cmd = self.command(args);
        cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
        if input.is_some() {
            cmd.stdin(Stdio::piped());
        }
        let mut child = cmd.spawn().map_err(|e| {
            Error::internal(format!(
                "cannot run git in {}: {e} — check the directory exists and git 2.38 or newer is on PATH",
                self.dir.display()
            ))
        })?;
        if self.background {
            if let Some(pid) = child.id() {
                agensh_process::group::renice(pid, 19);
            }
        }
        if let Some(bytes) = input {
            let mut stdin = child.stdin.take().expect("stdin is piped");
            stdin
                .write_all(bytes)
                .await
                .map_err(|e| Error::internal(format!("cannot write to git: {e}")))?;
        }
        let out = child
            .wait_with_output()
            .await
            .map_err(|e| Error::internal(format!("git did not finish: {e}")))?;
        Ok(Output {
            status: out.status.code(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        })
    }

    /// Runs git and returns its trimmed standard output; a non-zero exit is an error
    /// that quotes git's message.
    pub async fn run<I, S>(&self, args: I) -> Result<String>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let args: Vec<std::ffi::OsString> =
            args.into_iter().map(|a| a.as_ref().to_owned()).collect();
        let out = self.output(&args).await?;
        if out.success() {
            Ok(out.stdout.trim_end().to_string())
        } else {
            Err(Error::internal(format!(
                "git {} failed: {}",
                args.iter()
                    .map(|a| a.to_string_lossy())
                    .collect::<Vec<_>>()
                    .join(" "),
                out.stderr.trim()
            )))
        }
    }

    /// The commit a ref points at, or `None` when it does not exist.
    pub async fn resolve(&self, refname: &str) -> Result<Option<String>> {
        let out = self
            .output([
                "rev-parse",
                "--verify",
                "--quiet",
                &format!("{refname}^{{commit}}"),
            ])
            .await?;
        Ok(out.success().then(|| out.stdout.trim().to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The environment a shell started by `cmd` (through a git alias) sees.
    async fn env_of(mut cmd: Command) -> Vec<(String, String)> {
        let out = cmd.output().await.unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[tokio::test]
    async fn a_cgi_git_sees_only_path_home_tmpdir_and_git_settings() {
        let dir = tempfile::tempdir().unwrap();
        let env = env_of(cgi_command(dir.path(), ["-c", "alias.env=!env", "env"])).await;
        let shell = ["PWD", "OLDPWD", "SHLVL", "_"];
        let foreign: Vec<&String> = env
            .iter()
            .map(|(k, _)| k)
            .filter(|k| !k.starts_with("GIT_") && !shell.contains(&k.as_str()))
            .filter(|k| !CGI_PASSED_VARS.contains(&k.as_str()) && k.as_str() != "LC_ALL")
            .collect();
        assert!(foreign.is_empty(), "{foreign:?}");
        assert!(env.contains(&("GIT_TERMINAL_PROMPT".into(), "0".into())));
        assert!(env.contains(&("LC_ALL".into(), "C".into())));
    }

    #[tokio::test]
    async fn a_worker_git_commits_as_the_worker_without_global_configuration() {
        let dir = tempfile::tempdir().unwrap();
        let g = Git::worktree(dir.path()).as_worker("w07");
        g.run(["init", "--quiet"]).await.unwrap();
        g.run(["commit", "--quiet", "--allow-empty", "-m", "x"])
            .await
            .unwrap();
        let who = g
            .run(["log", "-1", "--format=%an <%ae> %cn <%ce>"])
            .await
            .unwrap();
        assert_eq!(who, "w07 <w07@agensh.invalid> w07 <w07@agensh.invalid>");
        let env = env_of(g.command(["-c", "alias.env=!env", "env"])).await;
        assert!(env.contains(&("GIT_CONFIG_GLOBAL".into(), "/dev/null".into())));
    }
}
