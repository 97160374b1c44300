//! An organization for a test: a temporary directory holding `org/` (its state directory
//! `.agensh/` with the bare repository `workspace.git` and the hub's `store.sqlite`, and the
//! workers' checkouts under `workers/`), the hub serving it, and its workers.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use agensh_client::Client;
use agensh_domain::config::Config;
use agensh_hub::RunningHub;
use agensh_store::SqliteStore;
use agensh_workspace::seed::{self, Source};
use agensh_workspace::{checkout, Git, Workspace};
use reqwest::Method;
use serde_json::Value;
use tempfile::TempDir;

/// How to make an [`Org`]: by default a workspace with an empty first commit, a hub with
/// `Config::with_goal("test")` and no workers.
#[derive(Debug, Clone)]
pub struct NewOrg {
    files: Vec<(String, String)>,
    config: Config,
    workers: usize,
    hub: bool,
    plain_git: bool,
}

impl NewOrg {
    /// `path` (directories made as needed) with `text` in the first commit of `main`.
    pub fn file(mut self, path: &str, text: &str) -> Self {
        self.files.push((path.to_string(), text.to_string()));
        self
    }

    /// The hub's configuration (a merge gate, limits, …).
    pub fn config(mut self, config: Config) -> Self {
        self.config = config;
        self
    }

    /// `n` workers added through the hub (`w01`, `w02`, …).
    pub fn workers(mut self, n: usize) -> Self {
        self.workers = n;
        self
    }

    /// The workspace alone: no hub (and so no workers).
    pub fn no_hub(mut self) -> Self {
        self.hub = false;
        self
    }

    /// `main` seeded by plain git (`git init --bare`, a commit `seed` by `Test`, a push)
    /// instead of agensh's `seed::create`: a repository with none of agensh's settings,
    /// opened as it is.
    pub fn plain_git(mut self) -> Self {
        self.plain_git = true;
        self
    }

    /// Makes the organization; panics with what failed.
    pub async fn start(self) -> Org {
        assert!(
            self.hub || self.workers == 0,
            "workers are added through a hub: drop no_hub() or workers()"
        );
        let tmp = tempfile::tempdir().expect("a temporary directory");
        let state = tmp.path().join("org").join(".agensh");
        std::fs::create_dir_all(&state).unwrap();
        let seed_dir = tmp.path().join("seed");
        std::fs::create_dir_all(&seed_dir).unwrap();
        for (path, text) in &self.files {
            let path = seed_dir.join(path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        }
        let bare = state.join("workspace.git");
        let ws = if self.plain_git {
            let (dir, seed, repo) = (tmp.path().to_path_buf(), seed_dir.clone(), bare.clone());
            tokio::task::spawn_blocking(move || seed_with_plain_git(&dir, &seed, &repo))
                .await
                .expect("the seeding finishes");
            Workspace::open(&bare).expect("the workspace opens")
        } else {
            let source = if self.files.is_empty() {
                Source::Empty
            } else {
                Source::Dir(&seed_dir)
            };
            seed::create(&bare, source, "test")
                .await
                .expect("the workspace is seeded")
        };
        let mut org = Org {
            tmp,
            ws,
            workers: Vec::new(),
            hub: None,
        };
        if !self.hub {
            return org;
        }
        let store = SqliteStore::open(&state.join("store.sqlite")).expect("the store opens");
        let hub = agensh_hub::start_with_workspace(
            Arc::new(store),
            Some(org.ws.clone()),
            self.config,
            "127.0.0.1:0",
        )
        .await
        .expect("the hub starts");
        if self.workers > 0 {
            org.workers = Client::new(&hub.url, &hub.admin_token)
                .add_workers(self.workers)
                .await
                .expect("the workers are added")
                .into_iter()
                .map(|w| (w.id, w.token))
                .collect();
        }
        org.hub = Some(hub);
        org
    }
}

/// A plain `git` in `dir` (no agensh runner): no credential helper, never a prompt, none
/// of the user's configuration, commits as `Test <test@example.invalid>`, no pusher named.
pub fn plain_git(dir: &Path, args: &[&str]) -> std::process::Command {
    let mut c = std::process::Command::new("git");
    c.current_dir(dir)
        .args(["-c", "credential.helper=", "-c", "init.defaultBranch=main"])
        .args(args)
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_AUTHOR_NAME", "Test")
        .env("GIT_AUTHOR_EMAIL", "test@example.invalid")
        .env("GIT_COMMITTER_NAME", "Test")
        .env("GIT_COMMITTER_EMAIL", "test@example.invalid")
        .env_remove("AGENSH_PUSHER")
        .env_remove("GIT_DIR");
    c
}

/// The bare repository `bare` with `main` holding `seed`'s files, made by plain git.
fn seed_with_plain_git(tmp: &Path, seed: &Path, bare: &Path) {
    let ok = |mut cmd: std::process::Command| {
        let out = cmd.output().expect("git runs");
        assert!(
            out.status.success(),
            "git failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let mut init = plain_git(tmp, &["init", "--quiet", "--bare", "-b", "main"]);
    init.arg(bare);
    ok(init);
    ok(plain_git(seed, &["init", "--quiet", "-b", "main"]));
    ok(plain_git(seed, &["add", "."]));
    ok(plain_git(
        seed,
        &["commit", "--quiet", "--allow-empty", "-m", "seed"],
    ));
    let mut push = plain_git(seed, &["push", "--quiet"]);
    push.arg(bare).arg("main");
    ok(push);
}

/// An organization directory with a seeded workspace, the hub serving it (unless built
/// with [`NewOrg::no_hub`]) and its workers.
pub struct Org {
    /// Holds `org/` and whatever a test puts beside it; removed when the value is dropped.
    pub tmp: TempDir,
    /// The organization's bare repository.
    pub ws: Workspace,
    /// (id, token) of each worker, in id order.
    pub workers: Vec<(String, String)>,
    hub: Option<RunningHub>,
}

impl Org {
    /// Starts describing an organization; [`NewOrg::start`] makes it.
    pub fn builder() -> NewOrg {
        NewOrg {
            files: Vec::new(),
            config: Config::with_goal("test"),
            workers: 0,
            hub: true,
            plain_git: false,
        }
    }

    /// The organization directory (`org/` in the temporary directory).
    pub fn dir(&self) -> PathBuf {
        self.tmp.path().join("org")
    }

    /// The bare repository's path.
    pub fn bare(&self) -> PathBuf {
        self.ws.git_dir().to_path_buf()
    }

    /// The running hub; panics for an organization built without one.
    pub fn hub(&self) -> &RunningHub {
        self.hub
            .as_ref()
            .expect("this organization was built without a hub (no_hub())")
    }

    /// The hub's base URL.
    pub fn url(&self) -> &str {
        &self.hub().url
    }

    /// Stops the hub (as `RunningHub::shutdown` does), then removes the directory.
    pub async fn shutdown(mut self) {
        if let Some(hub) = self.hub.take() {
            hub.shutdown().await;
        }
    }

    /// The id of the `i`-th worker (from 0).
    pub fn id(&self, i: usize) -> String {
        self.workers[i].0.clone()
    }

    /// Every worker's id, in order.
    pub fn ids(&self) -> Vec<String> {
        self.workers.iter().map(|(id, _)| id.clone()).collect()
    }

    /// Worker `id`'s token.
    pub fn token(&self, id: &str) -> &str {
        &self
            .workers
            .iter()
            .find(|(w, _)| w == id)
            .unwrap_or_else(|| panic!("no worker {id}"))
            .1
    }

    /// A client with the admin token, acting as nobody.
    pub fn admin(&self) -> Client {
        Client::new(self.url(), &self.hub().admin_token)
    }

    /// A client with worker `id`'s own token.
    pub fn client(&self, id: &str) -> Client {
        Client::new(self.url(), self.token(id))
    }

    /// A JSON request with the admin token, acting as `as_worker` when given: the status
    /// and the body as JSON (`null` when it is not).
    pub async fn call(
        &self,
        method: Method,
        path: &str,
        as_worker: Option<&str>,
        body: Option<Value>,
    ) -> (u16, Value) {
        let mut r = reqwest::Client::new()
            .request(method, format!("{}{path}", self.url()))
            .bearer_auth(&self.hub().admin_token);
        if let Some(w) = as_worker {
            r = r.header("x-agensh-as", w);
        }
        if let Some(b) = body {
            r = r.json(&b);
        }
        let resp = r.send().await.expect("the request reaches the hub");
        let status = resp.status().as_u16();
        (status, resp.json().await.unwrap_or(Value::Null))
    }

    /// Worker `id`'s checkout under `org/workers/`, made on first use (on `<id>/work`).
    pub async fn checkout(&self, id: &str) -> PathBuf {
        let dir = checkout::checkout_dir(&self.dir(), id);
        checkout::create(&self.ws, id, &dir)
            .await
            .unwrap_or_else(|e| panic!("{id}'s checkout: {e:?}"));
        dir
    }

    /// Worker `id` starts `branch` in its checkout from the current `main`, writes `files`
    /// (directories made as needed), commits them as `subject` and pushes the branch (by
    /// path, as `id`); returns the checkout.
    pub async fn push_branch(
        &self,
        id: &str,
        branch: &str,
        files: &[(&str, &str)],
        subject: &str,
    ) -> PathBuf {
        let dir = self.checkout(id).await;
        let git = Git::worktree(&dir).as_worker(id);
        let run = async |args: &[&str]| {
            let mut cmd = git.command(args);
            cmd.env("AGENSH_PUSHER", id)
                .env_remove("GIT_AUTHOR_NAME")
                .env_remove("GIT_AUTHOR_EMAIL")
                .env_remove("GIT_COMMITTER_NAME")
                .env_remove("GIT_COMMITTER_EMAIL");
            let out = cmd.output().await.expect("git runs");
            assert!(
                out.status.success(),
                "git {args:?} in {} failed: {}",
                dir.display(),
                String::from_utf8_lossy(&out.stderr)
            );
        };
        run(&["fetch", "--quiet", "origin"]).await;
        run(&["checkout", "--quiet", "-B", branch, "origin/main"]).await;
        for (path, text) in files {
            let path = dir.join(path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        }
        run(&["add", "--all"]).await;
        run(&["commit", "--quiet", "-m", subject]).await;
        let refspec = format!("+HEAD:refs/heads/{branch}");
        run(&["push", "--quiet", "origin", &refspec]).await;
        dir
    }

    /// The commit `refname` points at in the bare repository, if it exists.
    pub async fn resolve(&self, refname: &str) -> Option<String> {
        self.ws.git().resolve(refname).await.expect("git resolves")
    }

    /// The commit of `main`.
    pub async fn main(&self) -> String {
        self.resolve("refs/heads/main").await.expect("main exists")
    }

    /// Runs git in the bare repository; fails unless it succeeds; its trimmed output.
    pub async fn bare_git(&self, args: &[&str]) -> String {
        let out = self.ws.git().output(args).await.expect("git runs");
        assert!(out.success(), "git {args:?} failed: {}", out.stderr);
        out.stdout.trim().to_string()
    }

    /// The files on `main`.
    pub async fn files_on_main(&self) -> BTreeSet<String> {
        self.bare_git(&["ls-tree", "-r", "--name-only", "main"])
            .await
            .lines()
            .map(str::to_string)
            .collect()
    }

    /// The text of `path` on `main` (trimmed), or `None` when `main` has no such file.
    pub async fn on_main(&self, path: &str) -> Option<String> {
        let out = self
            .ws
            .git()
            .output(["show", &format!("main:{path}")])
            .await
            .expect("git runs");
        out.success().then(|| out.stdout.trim().to_string())
    }

    /// Fails unless `git fsck --strict` finds nothing at all to say about the bare
    /// repository (dangling objects aside).
    pub async fn assert_fsck_clean(&self) {
        let out = self
            .ws
            .git()
            .output(["fsck", "--strict", "--no-dangling", "--no-progress"])
            .await
            .expect("git runs");
        let text = format!("{}{}", out.stdout, out.stderr);
        assert!(out.success(), "git fsck failed:\n{text}");
        assert!(text.trim().is_empty(), "git fsck complains:\n{text}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_org_has_its_files_on_main_workers_and_their_branches() {
        let org = Org::builder()
            .file("README.md", "hello\n")
            .file("src/a.txt", "a\n")
            .workers(2)
            .start()
            .await;
        assert_eq!(org.ids(), ["w01", "w02"]);
        assert_eq!(org.client("w02").whoami().await.unwrap().id, "w02");
        assert_eq!(
            org.files_on_main().await,
            BTreeSet::from(["README.md".to_string(), "src/a.txt".to_string()])
        );
        assert_eq!(org.on_main("README.md").await.as_deref(), Some("hello"));
        assert_eq!(org.on_main("nothing.txt").await, None);

        let main = org.main().await;
        let dir = org
            .push_branch("w01", "w01/x", &[("b/c.txt", "c\n")], "Add c")
            .await;
        assert!(dir.join("b/c.txt").is_file());
        let log = org.bare_git(&["log", "--format=%an %s", "w01/x"]).await;
        assert!(log.starts_with("w01 Add c\n"), "{log}");
        assert_eq!(org.main().await, main, "main did not move");
        let (status, workers) = org.call(Method::GET, "/api/v1/workers", None, None).await;
        assert_eq!(status, 200, "{workers}");
        org.assert_fsck_clean().await;
        org.shutdown().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_workspace_alone_seeded_by_plain_git() {
        let org = Org::builder()
            .file("README.md", "hello\n")
            .plain_git()
            .no_hub()
            .start()
            .await;
        assert_eq!(
            org.bare_git(&["log", "--format=%an %s", "main"]).await,
            "Test seed"
        );
        let hub = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| org.url().len()));
        assert!(hub.is_err(), "no hub");
    }
}
