//! Running `git`: one place that sets the environment, captures output and turns a
//! failure into an error that quotes git's own message.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use agensh_domain::{Error, Result};
use tokio::io::AsyncWriteExt;
use tokio::process::Command;

/// The identity commits made by the hub carry.
pub const HUB_NAME: &str = "agensh hub";
pub const HUB_EMAIL: &str = "hub@agensh.invalid";

/// A git invocation context: a repository (bare, or a work tree) and its environment.
#[derive(Debug, Clone)]
pub struct Git {
    /// `--git-dir` for a bare repository, or the work tree to run in.
    dir: PathBuf,
    bare: bool,
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
        }
    }

    /// Runs git inside the work tree `dir`.
    pub fn worktree(dir: &Path) -> Self {
        Git {
            dir: dir.to_path_buf(),
            bare: false,
        }
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
        c.args([
            "-c",
            "core.quotePath=false",
            "-c",
            "advice.detachedHead=false",
        ])
        .args(args)
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("LC_ALL", "C")
        .stdin(Stdio::null())
        .kill_on_drop(true);
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
