//! The shared git workspace.
//!
//! One bare repository per organization (`.agensh/workspace.git`) holds `main` and every
//! worker's branches (`<id>/...`). This crate drives it through the `git` command line:
//! seeding it (`seed`), giving each worker a checkout that shares its objects
//! (`checkout`), merging pull requests in place with `merge-tree` and a compare-and-swap
//! of `main` (`merge`), enforcing who may push what (`hook`), and serving git's smart HTTP
//! through `git http-backend` (`http`), keeping its objects packed (`pack`), and, in a
//! worker's checkout, committing what is left and pushing it before a `ship` (`ship`), and
//! checking a commit of `main` with the goal's command in a clone that cannot move it (`check`).
//! A node on another host clones and pushes over the hub's smart HTTP instead (`remote`).

pub mod check;
pub mod checkout;
pub mod git;
pub mod hook;
pub mod http;
pub mod merge;
pub mod pack;
pub mod remote;
pub mod seed;
pub mod ship;
pub(crate) mod train;

use std::path::{Path, PathBuf};

pub use git::Git;

/// The bare repository's directory name inside `.agensh/`.
pub const REPO_DIR: &str = "workspace.git";

/// The organization's bare repository.
#[derive(Debug, Clone)]
pub struct Workspace {
    git_dir: PathBuf,
    /// Merges into `main` wait here and go in batches (`merge`); clones share it.
    queue: std::sync::Arc<merge::MergeQueue>,
}

impl Workspace {
    /// The workspace whose bare repository is at `git_dir` (it must exist).
    pub fn open(git_dir: &Path) -> agensh_domain::Result<Self> {
        if !git_dir.join("HEAD").exists() {
            return Err(agensh_domain::Error::not_found(
                "no_workspace",
                format!(
                    "there is no git workspace at {} — create the organization with `agensh init DIR --goal ... [--from SRC]`",
                    git_dir.display()
                ),
            ));
        }
        Ok(Workspace {
            git_dir: absolute(git_dir)?,
            queue: Default::default(),
        })
    }

    /// The bare repository's path.
    pub fn git_dir(&self) -> &Path {
        &self.git_dir
    }

    pub(crate) fn queue(&self) -> &merge::MergeQueue {
        &self.queue
    }

    /// A git runner for the bare repository.
    pub fn git(&self) -> Git {
        Git::bare(&self.git_dir)
    }
}

/// `path` made absolute against the current directory, so git finds it from anywhere.
pub(crate) fn absolute(path: &Path) -> agensh_domain::Result<PathBuf> {
    std::path::absolute(path).map_err(|e| {
        agensh_domain::Error::internal(format!("cannot resolve {}: {e}", path.display()))
    })
}
