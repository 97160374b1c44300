//! The local half of shipping a change: in a worker's checkout, commit what is left and
//! push `HEAD` to the branch on the hub, as the worker. The node's MCP proxy and the
//! `agensh mcp` bridge run it before they forward a `ship` call, so the hub finds the
//! branch with every change on it.

use std::path::Path;

use agensh_domain::pr::{check_namespace, validate_branch};
use agensh_domain::{Error, Result};
use serde::Serialize;

use crate::git::Git;

/// What [`commit_and_push`] did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Pushed {
    /// The commit made of the leftover changes, when there were any.
    pub committed: Option<String>,
    /// How many files that commit changed (0 when nothing was committed).
    pub files: usize,
    /// The commit the branch points at on the hub now.
    pub head: String,
    pub branch: String,
}

impl Pushed {
    /// One line for the model: what was committed and pushed.
    pub fn describe(&self) -> String {
        let head = short(&self.head);
        match &self.committed {
            Some(_) => format!(
                "committed {} changed file(s) left in your checkout and pushed {head} to {}",
                self.files, self.branch
            ),
            None => format!("nothing left to commit; pushed {head} to {}", self.branch),
        }
    }
}

/// Whether a merge, rebase or cherry-pick is half done in the checkout whose git directory
/// is `git_dir`: then its changes are the user's to resolve, not to commit.
pub fn operation_in_progress(git_dir: &Path) -> bool {
    [
        "MERGE_HEAD",
        "rebase-merge",
        "rebase-apply",
        "CHERRY_PICK_HEAD",
    ]
    .iter()
    .any(|f| git_dir.join(f).exists())
}

/// The first 12 characters of a commit id.
fn short(sha: &str) -> &str {
    &sha[..sha.len().min(12)]
}

/// In the checkout `dir`, as `worker`: stages everything (`git add -A`), commits it with
/// `message` when anything changed, and pushes `HEAD` to `branch` on `origin` (the hub).
/// Each failure says what to do; a half-done merge or rebase is left alone.
pub async fn commit_and_push(
    dir: &Path,
    worker: &str,
    branch: &str,
    message: &str,
) -> Result<Pushed> {
    validate_branch(branch)?;
    check_namespace(worker, branch, "ship")?;
    let git = Git::worktree(dir).as_worker(worker);
    let git_dir = git
        .run(["rev-parse", "--absolute-git-dir"])
        .await
        .map_err(|e| {
            Error::invalid(
                "not_a_checkout",
                format!(
                    "{} is not a git checkout ({}) — ship from your checkout, or push your branch and ship again",
                    dir.display(),
                    e.message
                ),
            )
        })?;
    if operation_in_progress(Path::new(&git_dir)) {
        return Err(Error::conflict(
            "merge_in_checkout",
            "a merge or rebase is half done in your checkout — resolve the conflicts git status lists, git add the files, git commit, then ship again",
        ));
    }
    git.run(["add", "-A"])
        .await
        .map_err(|e| local("stage your changes", e))?;
    let staged = git
        .run(["diff", "--cached", "--name-only", "-z"])
        .await
        .map_err(|e| local("list your changes", e))?;
    let files = staged.split('\0').filter(|f| !f.is_empty()).count();
    let committed = if files == 0 {
        None
    } else {
        let subject = message.lines().next().unwrap_or("").trim();
        let subject = if subject.is_empty() { "ship" } else { subject };
        git.run(["commit", "--quiet", "--no-verify", "-m", subject])
            .await
            .map_err(|e| local("commit your changes", e))?;
        Some(git.run(["rev-parse", "HEAD"]).await?)
    };
    let head = git.run(["rev-parse", "HEAD"]).await?;
    let out = git
        .output([
            "push",
            "--quiet",
            "origin",
            &format!("HEAD:refs/heads/{branch}"),
        ])
        .await?;
    if !out.success() {
        let why = out.stderr.trim();
        let todo = if why.contains("non-fast-forward") || why.contains("fetch first") {
            format!(
                "the hub's {branch} has commits your checkout lacks — git pull origin {branch}, resolve, commit, and ship again"
            )
        } else {
            format!("fix what git says, push with git push origin HEAD:{branch}, and ship again")
        };
        return Err(Error::conflict(
            "push_failed",
            format!(
                "could not push {} to {branch}: {why} — {todo}",
                short(&head)
            ),
        ));
    }
    Ok(Pushed {
        committed,
        files,
        head,
        branch: branch.to_string(),
    })
}

/// A git step in the checkout that failed: what it was, git's message, what to do.
fn local(what: &str, e: Error) -> Error {
    Error::conflict(
        "checkout_git_failed",
        format!(
            "could not {what} in your checkout: {} — fix it (git status shows the state) and ship again",
            e.message
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkout::{self, checkout_dir};
    use crate::seed::{self, Source};
    use crate::Workspace;

    async fn org(tmp: &Path) -> (Workspace, std::path::PathBuf) {
        let src = tmp.join("src");
        std::fs::create_dir_all(&src).unwrap();
        std::fs::write(src.join("README.md"), "hello\n").unwrap();
        let ws = seed::create(
            &tmp.join("org/.agensh/workspace.git"),
            Source::Dir(&src),
            "g",
        )
        .await
        .unwrap();
        crate::hook::install_hooks(&ws).await.unwrap();
        let dir = checkout_dir(&tmp.join("org"), "w01");
        checkout::create(&ws, "w01", &dir).await.unwrap();
        (ws, dir)
    }

    #[tokio::test]
    async fn leftover_changes_are_committed_as_the_worker_and_pushed() {
        let tmp = tempfile::tempdir().unwrap();
        let (ws, dir) = org(tmp.path()).await;
        std::fs::write(dir.join("a.txt"), "a\n").unwrap();
        std::fs::write(dir.join("README.md"), "changed\n").unwrap();
        let p = commit_and_push(&dir, "w01", "w01/work", "add a\nmore")
            .await
            .unwrap();
        assert_eq!(p.files, 2);
        assert_eq!(p.committed.as_deref(), Some(p.head.as_str()));
        assert_eq!(ws.branch_head("w01/work").await.unwrap(), p.head);
        let log = ws
            .git()
            .run(["log", "-1", "--format=%an %s", "w01/work"])
            .await
            .unwrap();
        assert_eq!(log, "w01 add a");
        assert!(
            p.describe().contains("committed 2 changed file(s)"),
            "{}",
            p.describe()
        );
    }

    #[tokio::test]
    async fn a_clean_checkout_is_pushed_without_a_new_commit() {
        let tmp = tempfile::tempdir().unwrap();
        let (ws, dir) = org(tmp.path()).await;
        let p = commit_and_push(&dir, "w01", "w01/other", "t")
            .await
            .unwrap();
        assert_eq!((p.committed, p.files), (None, 0));
        assert_eq!(ws.branch_head("w01/other").await.unwrap(), p.head);
    }

    #[tokio::test]
    async fn a_branch_outside_the_workers_namespace_is_refused_before_git() {
        let tmp = tempfile::tempdir().unwrap();
        let (_ws, dir) = org(tmp.path()).await;
        std::fs::write(dir.join("a.txt"), "a\n").unwrap();
        let e = commit_and_push(&dir, "w01", "w02/work", "t")
            .await
            .unwrap_err();
        assert_eq!(e.code, "outside_namespace");
        let status = Git::worktree(&dir)
            .run(["status", "--porcelain"])
            .await
            .unwrap();
        assert_eq!(status, "?? a.txt", "nothing staged or committed");
    }

    #[tokio::test]
    async fn a_push_the_hub_rejects_says_to_pull_first() {
        let tmp = tempfile::tempdir().unwrap();
        let (_ws, dir) = org(tmp.path()).await;
        std::fs::write(dir.join("a.txt"), "a\n").unwrap();
        commit_and_push(&dir, "w01", "w01/work", "a").await.unwrap();
        let git = Git::worktree(&dir).as_worker("w01");
        git.run(["reset", "--quiet", "--hard", "HEAD~1"])
            .await
            .unwrap();
        std::fs::write(dir.join("b.txt"), "b\n").unwrap();
        let e = commit_and_push(&dir, "w01", "w01/work", "b")
            .await
            .unwrap_err();
        assert_eq!(e.code, "push_failed");
        assert!(
            e.message.contains("git pull origin w01/work"),
            "{}",
            e.message
        );
    }

    #[tokio::test]
    async fn a_half_done_merge_is_left_alone() {
        let tmp = tempfile::tempdir().unwrap();
        let (_ws, dir) = org(tmp.path()).await;
        std::fs::write(dir.join(".git/MERGE_HEAD"), "0000\n").unwrap();
        let e = commit_and_push(&dir, "w01", "w01/work", "t")
            .await
            .unwrap_err();
        assert_eq!(e.code, "merge_in_checkout");
    }
}
