//! Checkouts of a hub on another host (DESIGN §8): cloned, fetched and pushed over the
//! hub's git smart HTTP only, with the worker's id and token.
//!
//! The token is never in a URL, a command line or a log: it sits in a file of the node's
//! own (mode 0600), and each checkout's `.git/config` names a credential helper that reads
//! it. So `git remote -v` shows a plain `http://HOST/git/workspace.git`, and the agent's own
//! `git fetch`/`pull`/`push` in the checkout authenticate exactly as the node's do. The
//! helper list is emptied first, so a credential store in the user's configuration never
//! receives the token.

use std::io::Write;
use std::path::{Path, PathBuf};

use agensh_domain::ids::validate_worker_id;
use agensh_domain::{Error, Result};

use crate::checkout::{work_branch, Created};
use crate::git::{Git, NetworkJobs};

/// Where the hub at `hub_url` serves the workspace over smart HTTP.
pub fn repo_url(hub_url: &str) -> String {
    format!("{}/git/{}", hub_url.trim_end_matches('/'), crate::REPO_DIR)
}

/// Writes `token` to `file` (created or replaced, mode 0600; its directory 0700).
pub fn write_token(file: &Path, token: &str) -> Result<()> {
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
    let fail = |what: &str, e: std::io::Error| {
        Error::internal(format!("cannot {what} {}: {e}", file.display()))
    };
    if let Some(dir) = file.parent() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|e| fail("create the directory of", e))?;
    }
    let partial = file.with_extension("partial");
    let _ = std::fs::remove_file(&partial);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&partial)
        .map_err(|e| fail("write", e))?;
    f.write_all(token.as_bytes())
        .and_then(|()| f.sync_all())
        .map_err(|e| fail("write", e))?;
    std::fs::set_permissions(&partial, std::fs::Permissions::from_mode(0o600))
        .map_err(|e| fail("restrict", e))?;
    std::fs::rename(&partial, file).map_err(|e| fail("write", e))
}

/// The credential helper (git's `credential.helper`) that answers `get` with `worker` and
/// the token in `token_file`, and ignores `store` and `erase`.
pub fn credential_helper(worker: &str, token_file: &Path) -> String {
    let path = token_file.to_string_lossy().replace('\'', r"'\''");
    format!(
        "!f() {{ test \"$1\" = get || exit 0; echo username={worker}; printf 'password=%s\\n' \"$(cat '{path}')\"; }}; f"
    )
}

/// What a checkout of a remote hub needs: the repository's URL, the token file of each
/// worker, and the node's limit of git network operations.
#[derive(Debug, Clone)]
pub struct Remote {
    pub url: String,
    /// The directory of the workers' token files (`<dir>/<id>`).
    pub credentials: PathBuf,
    pub jobs: NetworkJobs,
}

impl Remote {
    /// The remote of the hub at `hub_url`, with token files under `credentials`.
    pub fn new(hub_url: &str, credentials: PathBuf, jobs: NetworkJobs) -> Self {
        Remote {
            url: repo_url(hub_url),
            credentials,
            jobs,
        }
    }

    /// The file holding `worker`'s token.
    pub fn token_file(&self, worker: &str) -> PathBuf {
        self.credentials.join(worker)
    }

    /// Gives `worker` (whose token is `token`) a checkout at `dir` on `<worker>/work`,
    /// cloned over HTTP: the hub's `<worker>/work` when it has one (a worker that started
    /// before, its checkout gone), else a new branch from `main`. An existing checkout is
    /// kept as it is; only its token file is rewritten (a token renewed by the operator
    /// reaches it). The clone waits for a slot of [`Remote::jobs`].
    pub async fn create(&self, worker: &str, token: &str, dir: &Path) -> Result<Created> {
        validate_worker_id(worker)?;
        let dir = &crate::absolute(dir)?;
        let token_file = crate::absolute(&self.token_file(worker))?;
        write_token(&token_file, token)?;
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
        // Cloned into a scratch name and renamed into place, so a node killed mid-clone
        // leaves no half checkout that would be taken for a whole one.
        let partial = parent.join(format!(".{worker}.partial"));
        if partial.exists() {
            std::fs::remove_dir_all(&partial).map_err(|e| {
                Error::internal(format!("cannot remove {}: {e}", partial.display()))
            })?;
        }
        let empty_template = parent.join(".agensh-empty-template");
        std::fs::create_dir_all(&empty_template).map_err(|e| {
            Error::internal(format!("cannot create {}: {e}", empty_template.display()))
        })?;
        let branch = work_branch(worker);
        let helper = credential_helper(worker, &token_file);
        let mut args: Vec<std::ffi::OsString> = vec!["clone".into(), "--quiet".into()];
        args.push(format!("--template={}", empty_template.display()).into());
        let config = [
            // Empty first: no helper of the user's configuration sees the token.
            ("credential.helper".to_string(), String::new()),
            ("credential.helper".to_string(), helper),
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
            agensh_domain::pr::BASE.into(),
            self.url.clone().into(),
            partial.as_os_str().to_owned(),
        ]);
        let out = self.jobs.run(Git::worktree(parent).output(&args)).await?;
        if !out.success() {
            let _ = std::fs::remove_dir_all(&partial);
            return Err(Error::internal(format!(
                "cannot clone {} for {worker}: {} — check the hub is reachable from this host and the node's token is still valid",
                self.url,
                out.stderr.trim()
            )));
        }
        let g = Git::worktree(&partial);
        let resume = g
            .resolve(&format!("refs/remotes/origin/{branch}"))
            .await?
            .is_some();
        if resume {
            g.run([
                "checkout",
                "--quiet",
                "--no-track",
                "-b",
                &branch,
                &format!("origin/{branch}"),
            ])
            .await?;
        } else {
            g.run(["checkout", "--quiet", "-b", &branch]).await?;
        }
        if dir.exists() {
            let _ = std::fs::remove_dir(dir);
        }
        std::fs::rename(&partial, dir).map_err(|e| {
            Error::internal(format!(
                "cannot move the checkout to {}: {e}",
                dir.display()
            ))
        })?;
        Ok(Created::New)
    }
}
