//! Worker checkouts: `DIR/workers/<id>/`, each on its own branch `<id>/work`, sharing the
//! hub repository's objects (git alternates), so 1,024 checkouts cost about 1,024 working
//! trees and not 1,024 copies of history.

use std::path::{Path, PathBuf};

use agensh_domain::ids::validate_worker_id;
use agensh_domain::{Error, Result};

use crate::git::Git;
use crate::Workspace;

/// The branch a worker's checkout starts on.
pub fn work_branch(worker: &str) -> String {
    format!("{worker}/work")
}

/// Where `worker`'s checkout lives under the organization directory `org`.
pub fn checkout_dir(org: &Path, worker: &str) -> PathBuf {
    org.join("workers").join(worker)
}

/// What `create` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Created {
    /// A new checkout on a new (or resumed) work branch.
    New,
    /// The checkout was there already; nothing changed.
    Existing,
}

/// Gives `worker` a checkout at `dir` on `<worker>/work`.
///
/// The checkout's `origin` is the hub's bare repository by path; objects are shared through
/// alternates (`git clone --shared`). If `<worker>/work` already exists in the hub (a
/// worker restarted elsewhere), the checkout resumes it; otherwise it starts from `main`.
/// Commits carry the worker's id as author.
pub async fn create(ws: &Workspace, worker: &str, dir: &Path) -> Result<Created> {
    validate_worker_id(worker)?;
    let dir = &crate::absolute(dir)?;
    if dir.join(".git").exists() {
        return Ok(Created::Existing);
    }
    if dir.exists()
        && std::fs::read_dir(dir)
            .map(|mut d| d.next().is_some())
            .unwrap_or(true)
    {
        return Err(Error::conflict(
            "checkout_dir_not_empty",
            format!(
                "{} exists and is not a checkout — move it away and try again",
                dir.display()
            ),
        ));
    }
    let parent = dir.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(parent)
        .map_err(|e| Error::internal(format!("cannot create {}: {e}", parent.display())))?;
    let branch = work_branch(worker);
    let resume = ws
        .git()
        .resolve(&format!("refs/heads/{branch}"))
        .await?
        .is_some();
    let start = if resume {
        branch.as_str()
    } else {
        agensh_domain::pr::BASE
    };
    // One clone does it all: configuration with -c and no sample hooks (an empty
    // template), so a checkout costs two git processes (see docs/PERFORMANCE.md).
    let empty_template = ws.git_dir().join("agensh-empty-template");
    std::fs::create_dir_all(&empty_template)
        .map_err(|e| Error::internal(format!("cannot create {}: {e}", empty_template.display())))?;
    let mut args: Vec<std::ffi::OsString> =
        vec!["clone".into(), "--quiet".into(), "--shared".into()];
    args.push(format!("--template={}", empty_template.display()).into());
    let config = [
        ("user.name".to_string(), worker.to_string()),
        ("user.email".to_string(), crate::git::worker_email(worker)),
        ("push.default".to_string(), "current".to_string()),
        (format!("branch.{branch}.remote"), "origin".to_string()),
        (
            format!("branch.{branch}.merge"),
            format!("refs/heads/{branch}"),
        ),
    ];
    for (k, v) in config {
        args.push("-c".into());
        args.push(format!("{k}={v}").into());
    }
    args.extend([
        "--branch".into(),
        start.into(),
        ws.git_dir().as_os_str().to_owned(),
        dir.as_os_str().to_owned(),
    ]);
    Git::worktree(parent).run(&args).await?;
    if !resume {
        Git::worktree(dir)
            .run(["checkout", "--quiet", "-b", &branch])
            .await?;
    }
    Ok(Created::New)
}

/// Keeps `patterns` (gitignore syntax) out of git in the checkout at `dir` through its
/// `.git/info/exclude`, never the tree's own `.gitignore`: files an agent writes for
/// itself are not carried into pull requests. Patterns already there are not added again.
pub fn exclude(dir: &Path, patterns: &[&str]) -> Result<()> {
    let info = dir.join(".git").join("info");
    std::fs::create_dir_all(&info)
        .map_err(|e| Error::internal(format!("cannot create {}: {e}", info.display())))?;
    let file = info.join("exclude");
    let mut text = std::fs::read_to_string(&file).unwrap_or_default();
    let before = text.len();
    for p in patterns {
        if !text.lines().any(|l| l.trim() == *p) {
            if !text.is_empty() && !text.ends_with('\n') {
                text.push('\n');
            }
            text.push_str(p);
            text.push('\n');
        }
    }
    if text.len() != before {
        std::fs::write(&file, text)
            .map_err(|e| Error::internal(format!("cannot write {}: {e}", file.display())))?;
    }
    Ok(())
}

/// Creates the checkouts of `workers` under `org/workers/`, `jobs` at a time, calling
/// `done` after each one (for a progress bar). Stops at the first failure.
pub async fn create_many(
    ws: &Workspace,
    org: &Path,
    workers: &[String],
    jobs: usize,
    done: impl Fn(&str, &Created),
) -> Result<Vec<(String, Created)>> {
    let limit = std::sync::Arc::new(tokio::sync::Semaphore::new(jobs.max(1)));
    let mut set = tokio::task::JoinSet::new();
    for w in workers {
        let (ws, w, dir, limit) = (ws.clone(), w.clone(), checkout_dir(org, w), limit.clone());
        set.spawn(async move {
            let _permit = limit.acquire_owned().await.expect("semaphore open");
            let created = create(&ws, &w, &dir).await;
            (w, created)
        });
    }
    let mut out = Vec::with_capacity(workers.len());
    while let Some(joined) = set.join_next().await {
        let (w, created) =
            joined.map_err(|e| Error::internal(format!("checkout task failed: {e}")))?;
        let created = created?;
        done(&w, &created);
        out.push((w, created));
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::seed::{self, Source};

    async fn workspace(tmp: &Path) -> Workspace {
        let src = tmp.join("src");
        std::fs::create_dir_all(&src).unwrap();
        std::fs::write(src.join("README.md"), "hello\n").unwrap();
        seed::create(
            &tmp.join("org/.agensh/workspace.git"),
            Source::Dir(&src),
            "g",
        )
        .await
        .unwrap()
    }

    #[tokio::test]
    async fn excluded_files_stay_out_of_git_status() {
        let tmp = tempfile::tempdir().unwrap();
        let ws = workspace(tmp.path()).await;
        let dir = tmp.path().join("org/workers/w01");
        create(&ws, "w01", &dir).await.unwrap();
        std::fs::create_dir_all(dir.join(".claude")).unwrap();
        std::fs::write(dir.join(".claude/settings.local.json"), "{}").unwrap();
        std::fs::write(dir.join("kept.txt"), "x").unwrap();
        exclude(&dir, &[".claude/settings.local.json"]).unwrap();
        exclude(&dir, &[".claude/settings.local.json"]).unwrap();
        let status = Git::worktree(&dir)
            .run(["status", "--porcelain", "--untracked-files=all"])
            .await
            .unwrap();
        assert_eq!(status.trim(), "?? kept.txt");
        let text = std::fs::read_to_string(dir.join(".git/info/exclude")).unwrap();
        assert_eq!(text.matches("settings.local.json").count(), 1, "{text}");
    }

    #[tokio::test]
    async fn a_checkout_is_on_the_workers_branch_with_main_files() {
        let tmp = tempfile::tempdir().unwrap();
        let ws = workspace(tmp.path()).await;
        let dir = checkout_dir(&tmp.path().join("org"), "w01");
        assert_eq!(create(&ws, "w01", &dir).await.unwrap(), Created::New);
        assert_eq!(
            std::fs::read_to_string(dir.join("README.md")).unwrap(),
            "hello\n"
        );
        let g = Git::worktree(&dir);
        assert_eq!(
            g.run(["branch", "--show-current"]).await.unwrap(),
            "w01/work"
        );
        assert_eq!(g.run(["config", "user.name"]).await.unwrap(), "w01");
    }

    #[tokio::test]
    async fn a_checkout_shares_objects_instead_of_copying_history() {
        let tmp = tempfile::tempdir().unwrap();
        let ws = workspace(tmp.path()).await;
        let dir = checkout_dir(&tmp.path().join("org"), "w01");
        create(&ws, "w01", &dir).await.unwrap();
        let alternates = std::fs::read_to_string(dir.join(".git/objects/info/alternates")).unwrap();
        assert!(alternates.contains("workspace.git"), "{alternates}");
        let count = Git::worktree(&dir).run(["count-objects"]).await.unwrap();
        assert!(
            count.starts_with("0 objects"),
            "no objects of its own: {count}"
        );
    }

    #[tokio::test]
    async fn creating_an_existing_checkout_changes_nothing() {
        let tmp = tempfile::tempdir().unwrap();
        let ws = workspace(tmp.path()).await;
        let dir = checkout_dir(&tmp.path().join("org"), "w01");
        create(&ws, "w01", &dir).await.unwrap();
        std::fs::write(dir.join("wip.txt"), "unsaved work").unwrap();
        assert_eq!(create(&ws, "w01", &dir).await.unwrap(), Created::Existing);
        assert!(dir.join("wip.txt").exists());
    }

    #[tokio::test]
    async fn a_pushed_work_branch_is_resumed() {
        let tmp = tempfile::tempdir().unwrap();
        let ws = workspace(tmp.path()).await;
        let org = tmp.path().join("org");
        let first = checkout_dir(&org, "w01");
        create(&ws, "w01", &first).await.unwrap();
        std::fs::write(first.join("a.txt"), "a").unwrap();
        let g = Git::worktree(&first);
        g.run(["add", "a.txt"]).await.unwrap();
        g.run(["commit", "--quiet", "-m", "a"]).await.unwrap();
        let mut push = g.command(["push", "--quiet", "origin", "w01/work"]);
        push.env("AGENSH_PUSHER", "w01");
        assert!(push.status().await.unwrap().success());
        std::fs::remove_dir_all(&first).unwrap();
        create(&ws, "w01", &first).await.unwrap();
        assert!(first.join("a.txt").exists());
    }

    #[tokio::test]
    async fn a_non_checkout_directory_is_not_overwritten() {
        let tmp = tempfile::tempdir().unwrap();
        let ws = workspace(tmp.path()).await;
        let dir = checkout_dir(&tmp.path().join("org"), "w01");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("notes.txt"), "mine").unwrap();
        let e = create(&ws, "w01", &dir).await.unwrap_err();
        assert_eq!(e.code, "checkout_dir_not_empty");
    }
}
