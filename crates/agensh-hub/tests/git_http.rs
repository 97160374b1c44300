//! git smart HTTP at `/git/workspace.git` and the push policy hook, driven by real `git`
//! processes: clone, fetch and push with worker credentials; pushes into the bare
//! repository by path from a worker's checkout.

use std::borrow::BorrowMut;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Arc;
use std::time::Duration;

use agensh_domain::config::Config;
use agensh_domain::event::kinds;
use agensh_store::SqliteStore;
use agensh_testkit::{plain_git as git, wait_until, Org};

/// An organization over a workspace seeded by plain git with `README.md`, with `workers`
/// workers.
async fn start(workers: usize) -> Org {
    start_with(workers, Config::with_goal("test")).await
}

async fn start_with(workers: usize, config: Config) -> Org {
    Org::builder()
        .plain_git()
        .file("README.md", "hello\n")
        .config(config)
        .workers(workers)
        .start()
        .await
}

/// What these tests add to the test kit's organization.
trait GitOrg {
    /// The workspace URL with `user:token` credentials.
    fn git_url_as(&self, user: &str, token: &str) -> String;
    /// The workspace URL with `id`'s credentials (`admin`: the admin's).
    fn git_url(&self, id: &str) -> String;
    /// A scratch directory outside the organization.
    fn scratch(&self, name: &str) -> PathBuf;
    /// Clones over HTTP as `id` into the scratch directory `name`.
    async fn clone_as(&self, id: &str, name: &str) -> PathBuf;
}

impl GitOrg for Org {
    fn git_url_as(&self, user: &str, token: &str) -> String {
        let host = self.url().strip_prefix("http://").unwrap();
        format!("http://{user}:{token}@{host}/git/workspace.git")
    }

    fn git_url(&self, id: &str) -> String {
        if id == "admin" {
            self.git_url_as("admin", &self.hub().admin_token)
        } else {
            self.git_url_as(id, self.token(id))
        }
    }

    fn scratch(&self, name: &str) -> PathBuf {
        self.tmp.path().join(name)
    }

    async fn clone_as(&self, id: &str, name: &str) -> PathBuf {
        let dir = self.scratch(name);
        run_ok(git(self.tmp.path(), &["clone", "--quiet", &self.git_url(id)]).arg(&dir)).await;
        dir
    }
}

/// Runs a git command off the runtime's threads (the hub serves on them).
async fn run(mut cmd: impl BorrowMut<Command>) -> Output {
    let mut cmd = std::mem::replace(cmd.borrow_mut(), Command::new("true"));
    tokio::task::spawn_blocking(move || cmd.output().expect("git runs"))
        .await
        .unwrap()
}

async fn run_ok(cmd: impl BorrowMut<Command>) -> Output {
    let out = run(cmd).await;
    assert!(
        out.status.success(),
        "git failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Runs `cmd`, expects it to fail, returns its standard error.
async fn run_err(cmd: impl BorrowMut<Command>) -> String {
    let out = run(cmd).await;
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success(), "git succeeded unexpectedly: {err}");
    err
}

/// Writes `name` with `text` in `dir` and commits it.
async fn commit(dir: &Path, name: &str, text: &str) {
    std::fs::write(dir.join(name), text).unwrap();
    run_ok(git(dir, &["add", name])).await;
    run_ok(git(dir, &["commit", "--quiet", "-m", name])).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn workers_clone_and_push_only_their_own_branches() {
    let org = start(2).await;
    let c1 = org.clone_as("w01", "c1").await;
    assert_eq!(
        std::fs::read_to_string(c1.join("README.md")).unwrap(),
        "hello\n"
    );
    let main_before = org.resolve("refs/heads/main").await;

    commit(&c1, "a.txt", "a\n").await;
    run_ok(git(
        &c1,
        &["push", "--quiet", "origin", "HEAD:refs/heads/w01/feature"],
    ))
    .await;
    let head = String::from_utf8(run_ok(git(&c1, &["rev-parse", "HEAD"])).await.stdout).unwrap();
    assert_eq!(
        org.resolve("refs/heads/w01/feature").await.as_deref(),
        Some(head.trim())
    );

    let err = run_err(git(&c1, &["push", "origin", "HEAD:main"])).await;
    assert!(err.contains("pull request"), "{err}");
    assert!(err.contains("agensh pr open w01/<name>"), "{err}");
    assert_eq!(
        org.resolve("refs/heads/main").await,
        main_before,
        "main did not move"
    );

    let err = run_err(git(&c1, &["push", "origin", "HEAD:refs/heads/w02/x"])).await;
    assert!(err.contains("refs/heads/w01/<name>"), "{err}");
    assert!(org.resolve("refs/heads/w02/x").await.is_none());

    let err = run_err(git(&c1, &["push", "origin", "HEAD:refs/tags/v1"])).await;
    assert!(err.contains("refs/heads/w01/<name>"), "{err}");

    run_ok(git(
        &c1,
        &["push", "--quiet", "origin", ":refs/heads/w01/feature"],
    ))
    .await;
    assert!(org.resolve("refs/heads/w01/feature").await.is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn credentials_are_required_and_must_match() {
    let org = start(2).await;
    let wrong = org.git_url_as("w01", "agw_not_a_token");
    let err =
        run_err(git(org.tmp.path(), &["clone", "--quiet", &wrong]).arg(org.scratch("x"))).await;
    assert!(
        err.contains("401") || err.contains("Authentication failed"),
        "{err}"
    );
    // Another worker's token under my id.
    let swapped = org.git_url_as("w01", org.token("w02"));
    run_err(git(org.tmp.path(), &["clone", "--quiet", &swapped]).arg(org.scratch("y"))).await;

    let http = reqwest::Client::new();
    let info = format!(
        "{}/git/workspace.git/info/refs?service=git-upload-pack",
        org.hub().url
    );
    let resp = http.get(&info).send().await.unwrap();
    assert_eq!(resp.status(), 401);
    assert_eq!(
        resp.headers()["www-authenticate"].to_str().unwrap(),
        "Basic realm=\"agensh\""
    );
    let body: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(body["error"]["code"], "unauthorized");

    let resp = http
        .get(&info)
        .basic_auth("admin", Some(org.token("w01")))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 401, "a worker token is not the admin's");

    let resp = http
        .get(&info)
        .bearer_auth(org.token("w02"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(
        resp.headers()["content-type"].to_str().unwrap(),
        "application/x-git-upload-pack-advertisement"
    );

    // Nothing else of the repository is served.
    for path in [
        "HEAD",
        "objects/info/packs",
        "config",
        "hooks/pre-receive",
        "info/refs",
        "info/refs?service=git-upload-archive",
    ] {
        let resp = http
            .get(format!("{}/git/workspace.git/{path}", org.hub().url))
            .basic_auth("w01", Some(org.token("w01")))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 404, "{path}");
        let body: serde_json::Value = resp.json().await.unwrap();
        assert!(body["error"]["code"].is_string(), "{body}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_hub_without_a_workspace_serves_no_git() {
    let tmp = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(&tmp.path().join("store.sqlite")).unwrap();
    let hub = agensh_hub::start(Arc::new(store), Config::with_goal("test"), "127.0.0.1:0")
        .await
        .unwrap();
    let resp = reqwest::Client::new()
        .get(format!(
            "{}/git/workspace.git/info/refs?service=git-upload-pack",
            hub.url
        ))
        .basic_auth("admin", Some(&hub.admin_token))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 404);
    let body: serde_json::Value = resp.json().await.unwrap();
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("this hub serves no git workspace"),
        "{body}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn admin_pushes_main_and_workers_hear_of_it() {
    let org = start(2).await;
    let a = org.clone_as("admin", "a").await;
    commit(&a, "admin.txt", "by admin\n").await;
    run_ok(git(&a, &["push", "--quiet", "origin", "HEAD:main"])).await;
    let main = org.resolve("refs/heads/main").await.unwrap();
    let head = String::from_utf8(run_ok(git(&a, &["rev-parse", "HEAD"])).await.stdout).unwrap();
    assert_eq!(main, head.trim());

    // The push's answer ends only after the announcement is stored.
    let events = org
        .hub()
        .store()
        .pending_events("w02", 0, 10)
        .await
        .unwrap();
    let updated: Vec<_> = events
        .iter()
        .filter(|e| e.kind == kinds::MAIN_UPDATED)
        .collect();
    assert_eq!(updated.len(), 1, "{events:?}");
    assert_eq!(updated[0].payload["commit"], main.as_str(), "{events:?}");
    assert_eq!(updated[0].source.as_deref(), Some("admin"));

    // A push that leaves main alone announces nothing.
    commit(&a, "b.txt", "b\n").await;
    run_ok(git(
        &a,
        &["push", "--quiet", "origin", "HEAD:refs/heads/admin-side"],
    ))
    .await;
    let events = org
        .hub()
        .store()
        .pending_events("w02", 0, 10)
        .await
        .unwrap();
    assert_eq!(
        events
            .iter()
            .filter(|e| e.kind == kinds::MAIN_UPDATED)
            .count(),
        1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn workers_fetch_each_others_branches() {
    let org = start(2).await;
    let c1 = org.clone_as("w01", "c1").await;
    let c2 = org.clone_as("w02", "c2").await;
    commit(&c2, "two.txt", "from w02\n").await;
    run_ok(git(
        &c2,
        &["push", "--quiet", "origin", "HEAD:refs/heads/w02/y"],
    ))
    .await;

    run_ok(git(&c1, &["fetch", "--quiet", "origin"])).await;
    let out = run_ok(git(&c1, &["show", "origin/w02/y:two.txt"])).await;
    assert_eq!(String::from_utf8_lossy(&out.stdout), "from w02\n");
}

/// Bytes that do not compress.
fn noise(len: usize, mut seed: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        out.extend_from_slice(&seed.to_le_bytes());
    }
    out.truncate(len);
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn large_pushes_and_fetches_stream() {
    let org = start(2).await;
    let c1 = org.clone_as("w01", "c1").await;
    std::fs::write(c1.join("big.bin"), noise(6 << 20, 0x9e37_79b9_7f4a_7c15)).unwrap();
    run_ok(git(&c1, &["add", "big.bin"])).await;
    run_ok(git(&c1, &["commit", "--quiet", "-m", "big"])).await;
    run_ok(git(
        &c1,
        &["push", "--quiet", "origin", "HEAD:refs/heads/w01/big"],
    ))
    .await;
    assert!(org.resolve("refs/heads/w01/big").await.is_some());

    let c2 = org.clone_as("w02", "c2").await;
    run_ok(git(&c2, &["fetch", "--quiet", "origin"])).await;
    let out = run_ok(git(&c2, &["cat-file", "-s", "origin/w01/big:big.bin"])).await;
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        (6 << 20).to_string()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn local_pushes_follow_the_policy_by_checkout_directory() {
    let org = start(2).await;
    let bare = org.bare();
    let bare = bare.to_str().unwrap();

    // A worker's own checkout, as the node makes it.
    let workers = org.dir().join("workers");
    std::fs::create_dir_all(&workers).unwrap();
    run_ok(git(&workers, &["clone", "--quiet", bare, "w01"])).await;
    let w01 = workers.join("w01");
    commit(&w01, "local.txt", "local\n").await;
    run_ok(git(
        &w01,
        &["push", "--quiet", "origin", "HEAD:refs/heads/w01/local"],
    ))
    .await;
    assert!(org.resolve("refs/heads/w01/local").await.is_some());

    // From a subdirectory of the checkout, too.
    std::fs::create_dir_all(w01.join("src")).unwrap();
    run_ok(git(
        &w01.join("src"),
        &["push", "--quiet", "origin", "HEAD:refs/heads/w01/sub"],
    ))
    .await;

    let err = run_err(git(&w01, &["push", "origin", "HEAD:main"])).await;
    assert!(err.contains("pull request"), "{err}");
    let err = run_err(git(&w01, &["push", "origin", "HEAD:refs/heads/w02/x"])).await;
    assert!(err.contains("refs/heads/w01/<name>"), "{err}");

    // The environment names the pusher over the directory.
    let err = run_err(
        git(&w01, &["push", "origin", "HEAD:refs/heads/w01/x"]).env("AGENSH_PUSHER", "w02"),
    )
    .await;
    assert!(err.contains("w02 may not push refs/heads/w01/x"), "{err}");
    assert!(org.resolve("refs/heads/w01/x").await.is_none());

    // Outside any worker's checkout nobody is known.
    let outside = org.scratch("outside");
    run_ok(git(org.tmp.path(), &["clone", "--quiet", bare, "outside"])).await;
    commit(&outside, "o.txt", "o\n").await;
    let err = run_err(git(&outside, &["push", "origin", "HEAD:refs/heads/w01/o"])).await;
    assert!(err.contains("cannot tell which worker is pushing"), "{err}");
    assert!(err.contains("over HTTP"), "{err}");
    assert!(err.contains("workers/<id>/"), "{err}");
    assert!(err.contains("AGENSH_PUSHER"), "{err}");
    assert!(org.resolve("refs/heads/w01/o").await.is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn gzipped_requests_are_inflated_by_git() {
    let org = start(1).await;
    let main = org.resolve("refs/heads/main").await.unwrap();
    let request = format!("0032want {main}\n00000009done\n");
    let gz = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(gz.path(), &request).unwrap();
    let out = Command::new("gzip")
        .arg("-c")
        .arg(gz.path())
        .output()
        .unwrap();
    assert!(out.status.success());
    let resp = reqwest::Client::new()
        .post(format!(
            "{}/git/workspace.git/git-upload-pack",
            org.hub().url
        ))
        .basic_auth("w01", Some(org.token("w01")))
        .header("content-type", "application/x-git-upload-pack-request")
        .header("content-encoding", "gzip")
        .body(out.stdout)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(
        resp.headers()["content-type"].to_str().unwrap(),
        "application/x-git-upload-pack-result"
    );
    let body = resp.bytes().await.unwrap();
    assert!(body.starts_with(b"0008NAK\n"), "{body:?}");
    assert!(body.windows(4).any(|w| w == b"PACK"), "a pack follows");
}

/// git processes serving the organization whose state directory is `state`.
fn backends_in(state: &Path) -> usize {
    let state = state.canonicalize().unwrap();
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .bytes()
                .all(|b| b.is_ascii_digit())
        })
        .filter(|e| {
            let cmdline = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
            let cmdline = String::from_utf8_lossy(&cmdline);
            let cwd = std::fs::read_link(e.path().join("cwd")).unwrap_or_default();
            (cmdline.contains("http-backend") || cmdline.contains("receive-pack"))
                && cwd.starts_with(&state)
        })
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_backend_ends_when_the_client_goes_away() {
    let org = start(1).await;
    let state = org.dir().join(".agensh");
    let conn = stalled_push(&org, 1_000_000).await;
    drop(conn);
    wait_until(
        Duration::from_secs(10),
        "the backend to end after its client left",
        async || backends_in(&state) == 0,
    )
    .await;
}

/// Opens a push that sends its headers and a few bytes of a `len`-byte body, then
/// stalls; returns the connection once the backend runs.
async fn stalled_push(org: &Org, len: u64) -> tokio::net::TcpStream {
    use tokio::io::AsyncWriteExt;
    let state = org.dir().join(".agensh");
    let before = backends_in(&state);
    let mut conn = tokio::net::TcpStream::connect(org.hub().addr)
        .await
        .unwrap();
    let head = format!(
        "POST /git/workspace.git/git-receive-pack HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {}\r\nContent-Type: application/x-git-receive-pack-request\r\nContent-Length: {len}\r\n\r\n0000",
        org.hub().addr,
        org.token("w01")
    );
    conn.write_all(head.as_bytes()).await.unwrap();
    conn.flush().await.unwrap();
    wait_until(
        Duration::from_secs(10),
        "the backend to start",
        async || backends_in(&state) > before,
    )
    .await;
    conn
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_stalled_push_is_cut_off_and_its_backend_killed() {
    let mut config = Config::with_goal("test");
    config.hub.body_timeout_secs = 1;
    let org = start_with(1, config).await;
    let state = org.dir().join(".agensh");
    let conn = stalled_push(&org, 100_000).await;
    // The client stays connected, sending nothing: the stall timer ends it.
    wait_until(
        Duration::from_secs(10),
        "the stall timer to end the backend of a stalled push",
        async || backends_in(&state) == 0,
    )
    .await;
    drop(conn);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn git_requests_wait_in_line_for_a_backend() {
    let mut config = Config::with_goal("test");
    config.hub.git_processes = 1;
    config.hub.body_timeout_secs = 60;
    let org = start_with(1, config).await;
    let conn = stalled_push(&org, 100_000).await;
    // The only slot is taken: a clone waits.
    let url = org.git_url("w01");
    let target = org.scratch("waiting");
    let dir = org.tmp.path().to_path_buf();
    let clone =
        tokio::spawn(async move { run(git(&dir, &["clone", "--quiet", &url]).arg(&target)).await });
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    assert!(
        !clone.is_finished(),
        "the clone waits for the busy backend slot"
    );
    drop(conn);
    let out = tokio::time::timeout(std::time::Duration::from_secs(30), clone)
        .await
        .expect("the clone goes on once the slot is free")
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_push_past_the_pack_limit_is_refused_and_nothing_lands() {
    let mut config = Config::with_goal("test");
    config.limits.push_bytes = 1 << 20;
    let org = start_with(1, config).await;
    let c1 = org.clone_as("w01", "c1").await;
    std::fs::write(c1.join("big.bin"), noise(3 << 20, 0x2545_f491_4f6c_dd1d)).unwrap();
    run_ok(git(&c1, &["add", "big.bin"])).await;
    run_ok(git(&c1, &["commit", "--quiet", "-m", "big"])).await;
    let err = run_err(git(&c1, &["push", "origin", "HEAD:refs/heads/w01/big"])).await;
    // git's own refusal (receive.maxInputSize), in its protocol.
    assert!(err.contains("pack exceeds maximum allowed size"), "{err}");
    assert!(org.resolve("refs/heads/w01/big").await.is_none());

    // A push whose length is known up front is refused before git runs, with our advice.
    let resp = reqwest::Client::new()
        .post(format!(
            "{}/git/workspace.git/git-receive-pack",
            org.hub().url
        ))
        .bearer_auth(org.token("w01"))
        .header("content-type", "application/x-git-receive-pack-request")
        .body(vec![b'0'; (1 << 20) + 1])
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 413);
    let body: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(body["error"]["code"], "push_too_large");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("limits.push_bytes"),
        "{body}"
    );

    // Small pushes still go through.
    commit(&c1, "small.txt", "small\n").await;
    run_ok(git(&c1, &["reset", "--quiet", "--hard", "origin/main"])).await;
    commit(&c1, "small.txt", "small\n").await;
    run_ok(git(
        &c1,
        &["push", "--quiet", "origin", "HEAD:refs/heads/w01/small"],
    ))
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_namespace_past_its_quota_refuses_the_push_until_branches_are_deleted() {
    let mut config = Config::with_goal("test");
    config.limits.namespace_bytes = 3 << 20;
    let org = start_with(1, config).await;
    let c1 = org.clone_as("w01", "c1").await;
    std::fs::write(c1.join("a.bin"), noise(2 << 20, 1)).unwrap();
    run_ok(git(&c1, &["add", "a.bin"])).await;
    run_ok(git(&c1, &["commit", "--quiet", "-m", "a"])).await;
    run_ok(git(
        &c1,
        &["push", "--quiet", "origin", "HEAD:refs/heads/w01/a"],
    ))
    .await;

    run_ok(git(&c1, &["reset", "--quiet", "--hard", "origin/main"])).await;
    std::fs::write(c1.join("b.bin"), noise(2 << 20, 2)).unwrap();
    run_ok(git(&c1, &["add", "b.bin"])).await;
    run_ok(git(&c1, &["commit", "--quiet", "-m", "b"])).await;
    let err = run_err(git(&c1, &["push", "origin", "HEAD:refs/heads/w01/b"])).await;
    assert!(err.contains("limits.namespace_bytes"), "{err}");
    assert!(err.contains("git push origin --delete w01/<name>"), "{err}");
    assert!(org.resolve("refs/heads/w01/b").await.is_none());

    // Deleting the first branch makes room.
    run_ok(git(
        &c1,
        &["push", "--quiet", "origin", "--delete", "w01/a"],
    ))
    .await;
    run_ok(git(
        &c1,
        &["push", "--quiet", "origin", "HEAD:refs/heads/w01/b"],
    ))
    .await;
    assert!(org.resolve("refs/heads/w01/b").await.is_some());
}
