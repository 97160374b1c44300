//! Checking a commit of `main` with a command (`organization.done_when`'s `command:`), in
//! a scratch clone of its own that cannot move `main`: the clone shares the repository's
//! objects read-only (`--shared`) and has no remote, so whatever the command does to git
//! stays in the clone, which is removed afterwards.

use std::time::{Duration, Instant};

use agensh_domain::{Error, Result};

use crate::merge::run_in_group;

use crate::Workspace;

/// How a check of a commit ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckRun {
    /// The command's exit code (none: a signal ended it).
    pub exit: Option<i32>,
    /// It ran past its timeout and was killed with everything it started.
    pub timed_out: bool,
    /// The end of its combined output.
    pub output_tail: String,
    pub took: Duration,
}

impl CheckRun {
    /// Exit 0 within the timeout.
    pub fn passed(&self) -> bool {
        self.exit == Some(0) && !self.timed_out
    }
}

impl Workspace {
    /// `main`'s commit now.
    pub async fn main_commit(&self) -> Result<String> {
        self.git()
            .resolve(&format!("refs/heads/{}", agensh_domain::pr::BASE))
            .await?
            .ok_or_else(|| Error::internal("the workspace has no main branch"))
    }

    /// Runs `command` (`sh -c`) on `commit`'s tree in a scratch clone, for at most
    /// `timeout`; the clone is removed afterwards.
    pub async fn check(&self, commit: &str, command: &str, timeout: Duration) -> Result<CheckRun> {
        let root = std::env::temp_dir().join("agensh-checks");
        std::fs::create_dir_all(&root)
            .map_err(|e| Error::internal(format!("cannot create {}: {e}", root.display())))?;
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let scratch = root.join(format!(
            "{}-{}-{n}",
            agensh_domain::goal::short(commit),
            std::process::id()
        ));
        let result = self.check_in(&scratch, commit, command, timeout).await;
        let _ = std::fs::remove_dir_all(&scratch);
        result
    }

    async fn check_in(
        &self,
        scratch: &std::path::Path,
        commit: &str,
        command: &str,
        timeout: Duration,
    ) -> Result<CheckRun> {
        let scratch_s = scratch.to_string_lossy().to_string();
        let source = self.git_dir().to_string_lossy().to_string();
        self.git()
            .run([
                "clone",
                "--quiet",
                "--shared",
                "--no-checkout",
                &source,
                &scratch_s,
            ])
            .await?;
        let clone = crate::Git::worktree(scratch);
        clone.run(["remote", "remove", "origin"]).await?;
        clone
            .run(["checkout", "--quiet", "--detach", commit])
            .await?;
        let started = Instant::now();
        let (exit, timed_out, output) =
            run_in_group(command, scratch, timeout, "the check", &[]).await?;
        Ok(CheckRun {
            exit,
            timed_out,
            output_tail: crate::merge::tail(&output),
            took: started.elapsed(),
        })
    }
}
