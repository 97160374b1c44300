//! Creating the organization's bare repository and its first `main`.

use std::path::Path;

use agensh_domain::{Error, Result};

use crate::git::Git;
use crate::Workspace;

/// Where `main` comes from.
#[derive(Debug, Clone, Copy)]
pub enum Source<'a> {
    /// Nothing: `main` starts with one empty commit.
    Empty,
    /// A directory's files (its `.gitignore` rules apply), as one commit.
    Dir(&'a Path),
    /// An existing git repository: the history of its current branch.
    Repo(&'a Path),
}

impl<'a> Source<'a> {
    /// Picks `Repo` for a git repository (a work tree or a bare one), else `Dir`.
    pub fn detect(path: &'a Path) -> Result<Source<'a>> {
        if !path.is_dir() {
            return Err(Error::invalid(
                "bad_source",
                format!(
                    "{} is not a directory — give --from a directory or a git repository",
                    path.display()
                ),
            ));
        }
        if path.join(".git").exists()
            || (path.join("HEAD").is_file() && path.join("objects").is_dir())
        {
            Ok(Source::Repo(path))
        } else {
            Ok(Source::Dir(path))
        }
    }
}

/// Creates the bare repository at `git_dir` with `main` seeded from `source`.
pub async fn create(git_dir: &Path, source: Source<'_>, goal: &str) -> Result<Workspace> {
    let git_dir = &crate::absolute(git_dir)?;
    if git_dir.exists() {
        return Err(Error::conflict(
            "workspace_exists",
            format!(
                "{} already exists — this organization has a workspace already",
                git_dir.display()
            ),
        ));
    }
    let parent = git_dir.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(parent)
        .map_err(|e| Error::internal(format!("cannot create {}: {e}", parent.display())))?;
    Git::worktree(parent)
        .run([
            std::ffi::OsStr::new("init"),
            std::ffi::OsStr::new("--quiet"),
            std::ffi::OsStr::new("--bare"),
            std::ffi::OsStr::new("--initial-branch=main"),
            git_dir.as_os_str(),
        ])
        .await?;
    let ws = Workspace {
        git_dir: git_dir.to_path_buf(),
        queue: Default::default(),
    };
    let git = ws.git();
    for (k, v) in [
        ("core.logAllRefUpdates", "always"),
        ("receive.denyDeleteCurrent", "true"),
        ("http.receivepack", "true"),
        ("uploadpack.allowFilter", "true"),
        ("gc.auto", "0"),
    ] {
        git.run(["config", k, v]).await?;
    }
    let message = format!("Start the organization\n\nGoal: {goal}\n");
    let commit = match source {
        Source::Empty => {
            let tree = git
                .output_with_input(["mktree"], Some(b""))
                .await?
                .stdout
                .trim()
                .to_string();
            git.run(["commit-tree", &tree, "-m", &message]).await?
        }
        Source::Dir(dir) => commit_directory(&ws, dir, &message).await?,
        Source::Repo(repo) => {
            let out = git
                .output([
                    std::ffi::OsStr::new("fetch"),
                    std::ffi::OsStr::new("--quiet"),
                    std::ffi::OsStr::new("--no-tags"),
                    repo.as_os_str(),
                    std::ffi::OsStr::new("+HEAD:refs/heads/main"),
                ])
                .await?;
            if !out.success() {
                return Err(Error::invalid(
                    "bad_source",
                    format!(
                        "cannot take the history of {}: {} — is it a git repository with at least one commit?",
                        repo.display(),
                        out.stderr.trim()
                    ),
                ));
            }
            git.resolve("refs/heads/main")
                .await?
                .ok_or_else(|| Error::internal("main is missing after the fetch"))?
        }
    };
    git.run(["update-ref", "refs/heads/main", &commit]).await?;
    // One pack rather than a loose file per object: checkouts read it much faster.
    ws.pack_all().await?;
    // The push policy holds from the first moment, hub running or not.
    crate::hook::install_hooks(&ws).await?;
    Ok(ws)
}

/// Commits every file under `dir` (honouring its .gitignore) without touching `dir`.
async fn commit_directory(ws: &Workspace, dir: &Path, message: &str) -> Result<String> {
    let dir = &crate::absolute(dir)?;
    let index = ws.git_dir().join("seed-index");
    let mut add = ws.git().command(["--work-tree"]);
    add.arg(dir)
        .args(["add", "--all", "."])
        .current_dir(dir)
        .env("GIT_INDEX_FILE", &index);
    let out = add
        .output()
        .await
        .map_err(|e| Error::internal(format!("cannot run git add: {e}")))?;
    if !out.status.success() {
        let _ = std::fs::remove_file(&index);
        return Err(Error::invalid(
            "bad_source",
            format!(
                "cannot import {}: {} — check the files are readable",
                dir.display(),
                String::from_utf8_lossy(&out.stderr).trim()
            ),
        ));
    }
    let mut write = ws.git().command(["write-tree"]);
    write.env("GIT_INDEX_FILE", &index);
    let tree = write
        .output()
        .await
        .map_err(|e| Error::internal(format!("cannot run git write-tree: {e}")))?;
    let _ = std::fs::remove_file(&index);
    let tree = String::from_utf8_lossy(&tree.stdout).trim().to_string();
    ws.git().run(["commit-tree", &tree, "-m", message]).await
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn files_on_main(ws: &Workspace) -> Vec<String> {
        let out = ws
            .git()
            .run(["ls-tree", "-r", "--name-only", "main"])
            .await
            .unwrap();
        out.lines().map(str::to_string).collect()
    }

    #[tokio::test]
    async fn empty_source_gives_main_one_empty_commit() {
        let tmp = tempfile::tempdir().unwrap();
        let ws = create(&tmp.path().join("ws.git"), Source::Empty, "build it")
            .await
            .unwrap();
        assert!(files_on_main(&ws).await.is_empty());
        let log = ws
            .git()
            .run(["log", "--format=%s%n%b", "main"])
            .await
            .unwrap();
        assert!(log.contains("Goal: build it"), "{log}");
    }

    #[tokio::test]
    async fn directory_source_commits_its_files_but_not_ignored_ones() {
        let tmp = tempfile::tempdir().unwrap();
        let src = tmp.path().join("src");
        std::fs::create_dir_all(src.join("lib")).unwrap();
        std::fs::write(src.join("README.md"), "hi").unwrap();
        std::fs::write(src.join("lib/a.rs"), "fn a() {}").unwrap();
        std::fs::write(src.join(".gitignore"), "target/\n").unwrap();
        std::fs::create_dir_all(src.join("target")).unwrap();
        std::fs::write(src.join("target/junk"), "x").unwrap();
        let ws = create(
            &tmp.path().join("ws.git"),
            Source::detect(&src).unwrap(),
            "g",
        )
        .await
        .unwrap();
        assert_eq!(
            files_on_main(&ws).await,
            vec![".gitignore", "README.md", "lib/a.rs"]
        );
        assert!(
            !src.join(".git").exists(),
            "the source directory is left alone"
        );
    }

    #[tokio::test]
    async fn repository_source_keeps_its_history() {
        let tmp = tempfile::tempdir().unwrap();
        let src = tmp.path().join("repo");
        std::fs::create_dir_all(&src).unwrap();
        let g = Git::worktree(&src);
        g.run(["init", "--quiet", "-b", "trunk"]).await.unwrap();
        for i in 0..3 {
            std::fs::write(src.join("f.txt"), format!("{i}")).unwrap();
            g.run(["add", "f.txt"]).await.unwrap();
            g.run(["commit", "--quiet", "-m", &format!("c{i}")])
                .await
                .unwrap();
        }
        let ws = create(
            &tmp.path().join("ws.git"),
            Source::detect(&src).unwrap(),
            "g",
        )
        .await
        .unwrap();
        let log = ws.git().run(["log", "--format=%s", "main"]).await.unwrap();
        assert_eq!(log, "c2\nc1\nc0");
    }

    #[tokio::test]
    async fn a_repository_without_commits_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let src = tmp.path().join("repo");
        std::fs::create_dir_all(&src).unwrap();
        Git::worktree(&src).run(["init", "--quiet"]).await.unwrap();
        let e = create(
            &tmp.path().join("ws.git"),
            Source::detect(&src).unwrap(),
            "g",
        )
        .await
        .unwrap_err();
        assert_eq!(e.code, "bad_source");
    }
}
