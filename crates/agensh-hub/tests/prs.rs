//! Pull requests over REST, merged by the hub in its bare repository: real `git`, real
//! HTTP, a seeded workspace and worker checkouts in a temporary organization directory.

mod common;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Output;
use std::time::{Duration, Instant};

use agensh_domain::config::Config;
use agensh_domain::event::{kinds, Event, Priority};
use agensh_domain::pr::{NewPr, PrState};
use agensh_domain::ErrorKind;
use agensh_testkit::Org;
use common::{api_error, expect_err};
use reqwest::Method;
use serde_json::{json, Value};

/// What `shared.txt` on the first `main` holds: lines that PRs edit to conflict.
const SHARED: &str = "one\ntwo\nthree\nfour\nfive\n";

/// An organization over a workspace seeded with `README.md` and `shared.txt`, with `n`
/// workers.
async fn start(n: usize, config: Config) -> Org {
    Org::builder()
        .file("README.md", "hello\n")
        .file("shared.txt", SHARED)
        .config(config)
        .workers(n)
        .start()
        .await
}

/// What these tests add to the test kit's organization.
trait PrOrg {
    /// `id` opens a PR from `branch`; returns its number.
    async fn open(&self, id: &str, branch: &str, title: &str) -> i64;
    /// Where `branch` points in the bare repository.
    async fn branch_head(&self, branch: &str) -> String;
    /// A raw request with `id`'s token; the status and the body as JSON.
    async fn raw(&self, method: Method, path: &str, id: &str, body: Option<Value>) -> (u16, Value);
    /// `id`'s pending events of `kind`.
    async fn events(&self, id: &str, kind: &str) -> Vec<Event>;
}

impl PrOrg for Org {
    async fn open(&self, id: &str, branch: &str, title: &str) -> i64 {
        let pr = self
            .client(id)
            .open_pr(&NewPr {
                branch: branch.into(),
                title: title.into(),
                body: Some(format!("{title}, by {id}")),
            })
            .await
            .unwrap_or_else(|e| panic!("{id} opens a PR from {branch}: {e:?}"));
        assert_eq!(pr.state, PrState::Open);
        assert_eq!(pr.author, id);
        pr.number
    }

    async fn branch_head(&self, branch: &str) -> String {
        self.resolve(&format!("refs/heads/{branch}"))
            .await
            .expect("the branch exists")
    }

    async fn raw(&self, method: Method, path: &str, id: &str, body: Option<Value>) -> (u16, Value) {
        let mut r = reqwest::Client::new()
            .request(method, format!("{}/api/v1{path}", self.url()))
            .bearer_auth(self.token(id));
        if let Some(b) = body {
            r = r.json(&b);
        }
        let resp = r.send().await.expect("request reaches the hub");
        let status = resp.status().as_u16();
        let text = resp.text().await.unwrap();
        (
            status,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        )
    }

    async fn events(&self, id: &str, kind: &str) -> Vec<Event> {
        self.client(id)
            .events(0, 0)
            .await
            .unwrap()
            .into_iter()
            .filter(|e| e.kind == kind)
            .collect()
    }
}

/// A `git` command in `dir` as worker `pusher` that ignores the user's configuration and
/// never prompts. The checkout's own `user.name` (the worker id) signs commits.
async fn git(dir: &Path, pusher: &str, args: &[&str]) -> Output {
    tokio::process::Command::new("git")
        .current_dir(dir)
        .args(args)
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("AGENSH_PUSHER", pusher)
        .env_remove("GIT_DIR")
        .env_remove("GIT_AUTHOR_NAME")
        .env_remove("GIT_COMMITTER_NAME")
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .expect("git runs")
}

async fn git_ok(dir: &Path, pusher: &str, args: &[&str]) -> String {
    let out = git(dir, pusher, args).await;
    assert!(
        out.status.success(),
        "git {args:?} in {} failed: {}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Writes `files` in the checkout `dir` and commits them as `subject`.
async fn commit(dir: &Path, id: &str, files: &[(&str, &str)], subject: &str) {
    for (name, text) in files {
        let path = dir.join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
    git_ok(dir, id, &["add", "--all"]).await;
    git_ok(dir, id, &["commit", "--quiet", "-m", subject]).await;
}

/// Pushes the checkout's HEAD to `branch` in the hub's repository.
async fn push(dir: &Path, id: &str, branch: &str) {
    git_ok(
        dir,
        id,
        &[
            "push",
            "--quiet",
            "origin",
            &format!("+HEAD:refs/heads/{branch}"),
        ],
    )
    .await;
}

fn config() -> Config {
    Config::with_goal("test")
}

fn config_with_gate(gate: &str, timeout_secs: u64) -> Config {
    let mut c = config();
    c.merge.gate = gate.to_string();
    c.merge.gate_timeout_secs = timeout_secs;
    c
}

/// `shared.txt` with its second line replaced.
fn shared_with(line2: &str) -> String {
    SHARED.replacen("two", line2, 1)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thirty_two_concurrent_merges_of_disjoint_prs_all_land() {
    const N: usize = 32;
    let org = start(N, config()).await;
    let main_before = org.main().await;
    let reflog = ["reflog", "show", "--format=%H", "refs/heads/main"];
    let moves_before = org.bare_git(&reflog).await.lines().count();
    let ids = org.ids();

    // Preparation, concurrently: a checkout, a commit and a push per worker.
    let started = Instant::now();
    agensh_workspace::checkout::create_many(&org.ws, &org.dir(), &ids, 8, |_, _| {})
        .await
        .unwrap();
    let mut set = tokio::task::JoinSet::new();
    for id in &ids {
        let (id, dir) = (
            id.clone(),
            agensh_workspace::checkout::checkout_dir(&org.dir(), id),
        );
        set.spawn(async move {
            let name = format!("{id}.txt");
            let text = format!("written by {id}\n");
            commit(
                &dir,
                &id,
                &[(name.as_str(), text.as_str())],
                &format!("Add {name}"),
            )
            .await;
            push(&dir, &id, &format!("{id}/feature")).await;
        });
    }
    while let Some(done) = set.join_next().await {
        done.unwrap();
    }
    let mut numbers = Vec::new();
    for id in &ids {
        numbers.push((
            id.clone(),
            org.open(id, &format!("{id}/feature"), &format!("Add {id}.txt"))
                .await,
        ));
    }
    eprintln!("prepared {N} PRs in {:?}", started.elapsed());

    // The merges, all at once, each by the PR's author with its own client.
    let started = Instant::now();
    let mut set = tokio::task::JoinSet::new();
    for (id, n) in &numbers {
        let (client, n) = (org.client(id), *n);
        set.spawn(async move { (n, client.merge_pr(n).await) });
    }
    let mut max_attempts = 0;
    let mut merged = Vec::new();
    while let Some(done) = set.join_next().await {
        let (n, answer) = done.unwrap();
        let answer = answer.unwrap_or_else(|e| panic!("PR #{n} merges: {e:?}"));
        assert_eq!(answer["outcome"], "merged", "{answer}");
        assert_eq!(answer["pr"]["state"], "merged", "{answer}");
        max_attempts = max_attempts.max(answer["attempts"].as_u64().unwrap());
        merged.push(n);
    }
    let took = started.elapsed();
    eprintln!(
        "{N} concurrent merges took {took:?}; the most attempts one merge needed: {max_attempts}"
    );
    assert_eq!(merged.len(), N);

    let files = org.files_on_main().await;
    for id in &ids {
        assert!(
            files.contains(&format!("{id}.txt")),
            "{id}.txt is on main: {files:?}"
        );
    }
    assert_eq!(
        org.bare_git(&["rev-list", "--merges", "--count", "main"])
            .await,
        N.to_string()
    );
    let first_parents: Vec<String> = org
        .bare_git(&["rev-list", "--first-parent", "main"])
        .await
        .lines()
        .map(str::to_string)
        .collect();
    assert_eq!(
        first_parents.len(),
        N + 1,
        "32 merges in a line on the first `main`"
    );
    assert_eq!(first_parents.last(), Some(&main_before));
    // The merge queue merged them in batches: fewer moves of main than merges.
    let moves = org.bare_git(&reflog).await.lines().count() - moves_before;
    assert!(moves < N, "{moves} moves of main for {N} merges");
    let metrics = reqwest::get(format!("{}/metrics", org.hub().url))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains(&format!("\nagensh_main_moves_total {moves}\n")),
        "{metrics}"
    );

    let prs = org
        .client("w01")
        .list_prs(None, None, Some(100))
        .await
        .unwrap();
    assert_eq!(prs.len(), N);
    let mut commits = BTreeSet::new();
    for pr in &prs {
        assert_eq!(pr.state, PrState::Merged, "PR #{}", pr.number);
        assert_eq!(pr.closed_by.as_deref(), Some(pr.author.as_str()));
        let c = pr
            .merge_commit
            .clone()
            .expect("a merged PR names its merge commit");
        assert!(
            first_parents.contains(&c),
            "PR #{}'s merge commit {c} is on main",
            pr.number
        );
        // The merge commit's second parent is the PR's branch.
        let head = org
            .resolve(&format!("refs/heads/{}", pr.branch))
            .await
            .unwrap();
        assert_eq!(org.bare_git(&["rev-parse", &format!("{c}^2")]).await, head);
        commits.insert(c);
    }
    assert_eq!(commits.len(), N, "every PR has its own merge commit");
    org.assert_fsck_clean().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conflicting_pr_is_refused_with_the_file_and_stays_open() {
    let org = start(3, config()).await;
    let shared1 = shared_with("two by w01");
    let shared2 = shared_with("two by w02");
    org.push_branch(
        "w01",
        "w01/edit",
        &[("shared.txt", &shared1)],
        "w01 edits line 2",
    )
    .await;
    org.push_branch(
        "w02",
        "w02/edit",
        &[("shared.txt", &shared2)],
        "w02 edits line 2",
    )
    .await;
    let first = org.open("w01", "w01/edit", "Line two, first").await;
    let second = org.open("w02", "w02/edit", "Line two, second").await;

    let merger = org.client("w03");
    merger.merge_pr(first).await.unwrap();
    let main_after_first = org.main().await;

    let e = expect_err(
        merger.merge_pr(second).await,
        ErrorKind::Conflict,
        "merge_conflict",
    );
    assert!(e.message.contains("shared.txt"), "{}", e.message);
    assert!(
        e.message.contains("w02/edit"),
        "names the branch to fix: {}",
        e.message
    );
    assert_eq!(org.main().await, main_after_first, "main did not move");
    let view = merger.view_pr(second).await.unwrap();
    assert_eq!(view["state"], "open", "{view}");
    assert!(view.get("merge_commit").is_none(), "{view}");

    // The author hears of it at once, with the reason.
    let failed = org.events("w02", kinds::PR_MERGE_FAILED).await;
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert_eq!(failed[0].priority, Priority::Urgent);
    assert_eq!(failed[0].payload["number"], second);
    assert_eq!(failed[0].payload["by"], "w03");
    assert_eq!(failed[0].payload["reason"]["code"], "merge_conflict");
    assert!(
        failed[0].payload["reason"]["message"]
            .as_str()
            .unwrap()
            .contains("shared.txt"),
        "{:?}",
        failed[0]
    );
    for other in ["w01", "w03"] {
        assert!(
            org.events(other, kinds::PR_MERGE_FAILED).await.is_empty(),
            "{other}"
        );
    }

    // The author's own attempt is refused the same way; it got the reason in the answer.
    let e = expect_err(
        org.client("w02").merge_pr(second).await,
        ErrorKind::Conflict,
        "merge_conflict",
    );
    assert!(e.message.contains("shared.txt"), "{}", e.message);
    assert_eq!(org.events("w02", kinds::PR_MERGE_FAILED).await.len(), 1);
    assert_eq!(org.main().await, main_after_first);
    org.assert_fsck_clean().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_passing_gate_on_the_merged_tree_lets_the_merge_through() {
    let org = start(3, config_with_gate("test -f feature.txt", 60)).await;
    // Opened before the gate's file exists anywhere: refused.
    org.push_branch(
        "w02",
        "w02/other",
        &[("other.txt", "other\n")],
        "Add other.txt",
    )
    .await;
    let other = org.open("w02", "w02/other", "Other").await;
    expect_err(
        org.client("w03").merge_pr(other).await,
        ErrorKind::Conflict,
        "gate_failed",
    );

    org.push_branch(
        "w01",
        "w01/feature",
        &[("feature.txt", "f\n")],
        "Add feature.txt",
    )
    .await;
    let feature = org.open("w01", "w01/feature", "Feature").await;
    let answer = org.client("w03").merge_pr(feature).await.unwrap();
    assert_eq!(answer["outcome"], "merged", "{answer}");
    assert_eq!(org.main().await, answer["commit"].as_str().unwrap());
    assert!(org.files_on_main().await.contains("feature.txt"));

    // The gate runs on the merged tree, not the branch: the branch of `other` still
    // lacks feature.txt, but merged with main it has it.
    let answer = org.client("w03").merge_pr(other).await.unwrap();
    assert_eq!(answer["outcome"], "merged", "{answer}");
    assert!(org.files_on_main().await.contains("other.txt"));
    // The scratch checkouts of the gate are gone.
    let worktrees = org.bare_git(&["worktree", "list", "--porcelain"]).await;
    assert_eq!(worktrees.matches("worktree ").count(), 1, "{worktrees}");
    org.assert_fsck_clean().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_gate_refuses_the_merge_with_the_tail_of_its_output() {
    let gate = "for i in $(seq 1 100); do echo line$i; done; echo boom; exit 1";
    let org = start(2, config_with_gate(gate, 60)).await;
    org.push_branch("w01", "w01/x", &[("x.txt", "x\n")], "Add x.txt")
        .await;
    let n = org.open("w01", "w01/x", "X").await;
    let main_before = org.main().await;

    let answer = org
        .raw(Method::POST, &format!("/prs/{n}/merge"), "w01", None)
        .await;
    let message = api_error(&answer, 409, "gate_failed");
    assert!(message.contains("boom"), "{message}");
    assert!(message.contains("line100"), "{message}");
    assert!(!message.contains("line50\n"), "only the tail: {message}");
    assert!(message.contains("exited with 1"), "{message}");
    assert!(message.contains("main did not move"), "{message}");

    assert_eq!(org.main().await, main_before, "main did not move");
    let view = org.client("w02").view_pr(n).await.unwrap();
    assert_eq!(view["state"], "open", "{view}");
    org.assert_fsck_clean().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pr_the_gate_refused_is_not_gated_again_until_its_branch_moves() {
    let runs = tempfile::tempdir().unwrap();
    let log = runs.path().join("runs");
    let gate = format!("echo run >> {}; test -f fixed.txt", log.display());
    let org = start(1, config_with_gate(&gate, 60)).await;
    org.push_branch("w01", "w01/x", &[("x.txt", "x\n")], "Add x.txt")
        .await;
    let n = org.open("w01", "w01/x", "X").await;
    let count = || {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .lines()
            .count()
    };
    expect_err(
        org.client("w01").merge_pr(n).await,
        ErrorKind::Conflict,
        "gate_failed",
    );
    assert_eq!(count(), 1);
    let again = org
        .raw(Method::POST, &format!("/prs/{n}/merge"), "w01", None)
        .await;
    let message = api_error(&again, 409, "gate_failed");
    assert!(message.contains("already refused"), "{message}");
    assert_eq!(
        count(),
        1,
        "the same branch on the same main is not gated again"
    );
    org.push_branch("w01", "w01/x", &[("fixed.txt", "ok\n")], "Fix it")
        .await;
    let answer = org.client("w01").merge_pr(n).await.unwrap();
    assert_eq!(answer["outcome"], "merged", "{answer}");
    assert_eq!(count(), 2, "a moved branch is gated again");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pr_list_shows_a_waiting_merges_place_batch_and_gate_run() {
    let hold = tempfile::tempdir().unwrap();
    let flag = hold.path().join("hold");
    std::fs::write(&flag, "").unwrap();
    let gate = format!("while [ -e {} ]; do sleep 0.05; done", flag.display());
    let org = start(1, config_with_gate(&gate, 60)).await;
    org.push_branch("w01", "w01/x", &[("x.txt", "x\n")], "Add x.txt")
        .await;
    let n = org.open("w01", "w01/x", "X").await;
    let merging = tokio::spawn({
        let c = org.client("w01");
        async move { c.merge_pr(n).await }
    });
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let place = loop {
        let prs = org.client("w01").list_prs(None, None, None).await.unwrap();
        if let Some(q) = prs[0].queue.clone() {
            break q;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "never shown in the queue"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(place.place, 1);
    assert!(
        place.batch.is_some() && place.gate_run.is_some(),
        "{place:?}"
    );
    std::fs::remove_file(&flag).unwrap();
    let answer = merging.await.unwrap().unwrap();
    assert_eq!(answer["outcome"], "merged", "{answer}");
    let prs = org.client("w01").list_prs(None, None, None).await.unwrap();
    assert_eq!(prs[0].queue, None, "a merged PR waits nowhere");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_printed_by_a_gate_are_redacted_before_workers_see_them() {
    let org = start(2, config_with_gate("cat leak.txt; exit 1", 60)).await;
    let stolen = format!("{} {}", org.hub().admin_token, org.token("w02"));
    org.push_branch("w01", "w01/x", &[("leak.txt", &stolen)], "Add leak.txt")
        .await;
    let n = org.open("w01", "w01/x", "X").await;
    let answer = org
        .raw(Method::POST, &format!("/prs/{n}/merge"), "w02", None)
        .await;
    let message = api_error(&answer, 409, "gate_failed");
    assert!(
        message.contains("[token redacted] [token redacted]"),
        "{message}"
    );
    assert!(!message.contains(&org.hub().admin_token), "{message}");
    let failed = org.events("w01", "pr.merge_failed").await;
    let payload = serde_json::to_string(&failed[0].payload).unwrap();
    assert!(!payload.contains(&org.hub().admin_token) && !payload.contains(org.token("w02")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gate_that_runs_too_long_is_killed_and_refuses_the_merge() {
    let org = start(1, config_with_gate("echo started; sleep 30", 1)).await;
    org.push_branch("w01", "w01/x", &[("x.txt", "x\n")], "Add x.txt")
        .await;
    let n = org.open("w01", "w01/x", "X").await;
    let main_before = org.main().await;
    let started = Instant::now();
    let e = expect_err(
        org.client("w01").merge_pr(n).await,
        ErrorKind::Conflict,
        "gate_failed",
    );
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
    assert!(e.message.contains("ran longer than 1 s"), "{}", e.message);
    assert!(e.message.contains("started"), "{}", e.message);
    assert_eq!(org.main().await, main_before);
    org.assert_fsck_clean().await;
}

fn config_with_approvals(n: u32) -> Config {
    let mut c = config();
    c.merge.required_approvals = n;
    c
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pr_merges_only_with_the_required_approvals() {
    let org = start(2, config_with_approvals(1)).await;
    org.push_branch("w01", "w01/x", &[("x.txt", "x\n")], "Add x.txt")
        .await;
    let n = org.open("w01", "w01/x", "X").await;
    let main_before = org.main().await;

    let answer = org
        .raw(Method::POST, &format!("/prs/{n}/merge"), "w01", None)
        .await;
    let message = api_error(&answer, 409, "needs_approval");
    assert!(message.contains("0 approving"), "{message}");
    assert!(message.contains("needs 1"), "{message}");
    assert_eq!(org.main().await, main_before);

    org.client("w02")
        .review_pr(n, "approve", "looks right")
        .await
        .unwrap();
    assert_eq!(org.client("w01").view_pr(n).await.unwrap()["approvals"], 1);
    let answer = org.client("w01").merge_pr(n).await.unwrap();
    assert_eq!(answer["outcome"], "merged", "{answer}");
    assert_eq!(org.main().await, answer["commit"].as_str().unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_push_after_an_approval_voids_it_and_only_the_approved_commit_merges() {
    let org = start(2, config_with_approvals(1)).await;
    let dir = org
        .push_branch("w01", "w01/x", &[("x.txt", "x\n")], "Add x.txt")
        .await;
    let n = org.open("w01", "w01/x", "X").await;
    let (author, reviewer) = (org.client("w01"), org.client("w02"));
    let reviewed = org.branch_head("w01/x").await;
    reviewer
        .review_pr(n, "approve", "x is right")
        .await
        .unwrap();
    // The PR shows which commit was approved.
    let view = author.view_pr(n).await.unwrap();
    assert_eq!(view["reviews"][0]["commit"], reviewed.as_str(), "{view}");
    assert_eq!(view["approvals"], 1);

    // The author pushes more after the approval: unreviewed code must not reach main.
    commit(&dir, "w01", &[("evil.txt", "unreviewed\n")], "More").await;
    push(&dir, "w01", "w01/x").await;
    assert_eq!(author.view_pr(n).await.unwrap()["approvals"], 0);
    let main_before = org.main().await;
    let e = expect_err(
        author.merge_pr(n).await,
        ErrorKind::Conflict,
        "needs_approval",
    );
    assert!(e.message.contains("earlier commit"), "{}", e.message);
    assert_eq!(org.main().await, main_before);

    // Approved again, on the new commit: it merges, with both files.
    reviewer
        .review_pr(n, "approve", "evil.txt is fine too")
        .await
        .unwrap();
    let merged = author.merge_pr(n).await.unwrap();
    assert_eq!(merged["outcome"], "merged", "{merged}");
    assert_eq!(merged["head"], org.branch_head("w01/x").await.as_str());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_later_request_for_changes_withdraws_the_reviewers_approval() {
    let org = start(3, config_with_approvals(1)).await;
    org.push_branch("w01", "w01/x", &[("x.txt", "x\n")], "Add x.txt")
        .await;
    let n = org.open("w01", "w01/x", "X").await;
    let main_before = org.main().await;
    let (author, reviewer) = (org.client("w01"), org.client("w02"));

    reviewer.review_pr(n, "approve", "fine").await.unwrap();
    reviewer
        .review_pr(n, "approve", "still fine")
        .await
        .unwrap();
    assert_eq!(
        author.view_pr(n).await.unwrap()["approvals"],
        1,
        "one reviewer counts once"
    );
    reviewer
        .review_pr(n, "request_changes", "wait, x.txt is wrong")
        .await
        .unwrap();
    let view = author.view_pr(n).await.unwrap();
    assert_eq!(view["approvals"], 0, "{view}");
    assert_eq!(view["reviews"].as_array().unwrap().len(), 3, "{view}");
    expect_err(
        author.merge_pr(n).await,
        ErrorKind::Conflict,
        "needs_approval",
    );
    assert_eq!(org.main().await, main_before);

    // Another reviewer's approval counts.
    org.client("w03")
        .review_pr(n, "approve", "x.txt is fine")
        .await
        .unwrap();
    assert_eq!(author.view_pr(n).await.unwrap()["approvals"], 1);
    author.merge_pr(n).await.unwrap();
    assert_ne!(org.main().await, main_before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_branch_names_are_refused_when_opening_a_pr() {
    let org = start(2, config()).await;
    org.push_branch("w02", "w02/x", &[("x.txt", "x\n")], "Add x.txt")
        .await;
    let main_before = org.main().await;
    let open = |branch: &str| {
        let body = json!({ "branch": branch, "title": "T", "body": "b" });
        org.raw(Method::POST, "/prs", "w01", Some(body))
    };

    let m = api_error(&open("w02/x").await, 403, "outside_namespace");
    assert!(
        m.contains("w01 may only open a PR from branches under w01/"),
        "{m}"
    );
    let m = api_error(&open("main").await, 403, "outside_namespace");
    assert!(m.contains("w01/"), "{m}");
    for bad in [
        "w01/../main",
        "refs/heads/w01/x",
        "w01/a\u{7}b",
        "w01/a\nb",
        "w01/x.lock",
        "w01//x",
        "-w01/x",
    ] {
        let m = api_error(&open(bad).await, 400, "bad_branch");
        assert!(m.contains("w01/"), "{bad:?}: {m}");
    }
    let m = api_error(&open("w01/nope").await, 404, "unknown_branch");
    assert!(m.contains("push it first"), "{m}");
    assert!(m.contains("git push origin HEAD:w01/nope"), "{m}");
    assert!(m.contains("ship does this for you"), "{m}");

    let prs = org.client("w01").list_prs(None, None, None).await.unwrap();
    assert!(prs.is_empty(), "nothing was opened: {prs:?}");
    assert_eq!(org.main().await, main_before);
    org.assert_fsck_clean().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_and_malformed_pr_numbers_are_refused() {
    let org = start(2, config()).await;
    let main_before = org.main().await;
    for (method, path) in [
        (Method::GET, "/prs/99"),
        (Method::POST, "/prs/99/merge"),
        (Method::POST, "/prs/99/close"),
    ] {
        let m = api_error(&org.raw(method, path, "w01", None).await, 404, "unknown_pr");
        assert!(m.contains("#99"), "{path}: {m}");
        assert!(m.contains("agensh pr list"), "{path}: {m}");
    }
    let review = json!({ "verdict": "approve", "text": "ok" });
    let answer = org
        .raw(Method::POST, "/prs/99/reviews", "w01", Some(review.clone()))
        .await;
    api_error(&answer, 404, "unknown_pr");
    let answer = org
        .raw(
            Method::POST,
            "/prs/99/comments",
            "w01",
            Some(json!({ "text": "hi" })),
        )
        .await;
    api_error(&answer, 404, "unknown_pr");

    for (method, path, body) in [
        (Method::GET, "/prs/abc", None),
        (Method::POST, "/prs/abc/merge", None),
        (Method::POST, "/prs/abc/close", None),
        (Method::POST, "/prs/abc/reviews", Some(review.clone())),
        (Method::POST, "/prs/0/merge", None),
        (Method::POST, "/prs/-1/merge", None),
    ] {
        let m = api_error(
            &org.raw(method, path, "w01", body).await,
            400,
            "bad_pr_number",
        );
        assert!(m.contains("agensh pr list"), "{path}: {m}");
    }
    assert_eq!(org.main().await, main_before);
    org.assert_fsck_clean().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_open_prs_with_existing_branches_merge() {
    let org = start(2, config()).await;
    let w01 = org.client("w01");

    // A merged PR.
    org.push_branch("w01", "w01/merged", &[("m.txt", "m\n")], "Add m.txt")
        .await;
    let merged = org.open("w01", "w01/merged", "M").await;
    w01.merge_pr(merged).await.unwrap();
    // A closed PR.
    org.push_branch("w01", "w01/closed", &[("c.txt", "c\n")], "Add c.txt")
        .await;
    let closed = org.open("w01", "w01/closed", "C").await;
    let m = api_error(
        &org.raw(Method::POST, &format!("/prs/{closed}/close"), "w02", None)
            .await,
        403,
        "not_your_pr",
    );
    assert!(m.contains("w01"), "{m}");
    assert_eq!(w01.close_pr(closed).await.unwrap().state, PrState::Closed);
    // An open PR whose branch was deleted after it was opened.
    let dir = org
        .push_branch("w01", "w01/gone", &[("g.txt", "g\n")], "Add g.txt")
        .await;
    let gone = org.open("w01", "w01/gone", "G").await;
    git_ok(
        &dir,
        "w01",
        &["push", "--quiet", "origin", ":refs/heads/w01/gone"],
    )
    .await;
    assert!(org.resolve("refs/heads/w01/gone").await.is_none());
    let main_before = org.main().await;

    for (n, state) in [(merged, "merged"), (closed, "closed")] {
        let path = format!("/prs/{n}/merge");
        let m = api_error(
            &org.raw(Method::POST, &path, "w02", None).await,
            409,
            "pr_not_open",
        );
        assert!(m.contains(&format!("#{n} is {state}")), "{m}");
        let path = format!("/prs/{n}/close");
        api_error(
            &org.raw(Method::POST, &path, "w01", None).await,
            409,
            "pr_not_open",
        );
    }
    let m = api_error(
        &org.raw(Method::POST, &format!("/prs/{gone}/merge"), "w02", None)
            .await,
        404,
        "unknown_branch",
    );
    assert!(m.contains("w01/gone"), "{m}");
    assert_eq!(w01.view_pr(gone).await.unwrap()["state"], "open");
    let view = w01.view_pr(gone).await.unwrap();
    assert!(
        view.get("branch_summary").is_none(),
        "no branch, no summary: {view}"
    );

    assert_eq!(org.main().await, main_before);
    let merged_pr = w01.view_pr(merged).await.unwrap();
    assert_eq!(merged_pr["state"], "merged");
    assert_eq!(w01.view_pr(closed).await.unwrap()["state"], "closed");
    org.assert_fsck_clean().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_branch_has_one_open_pr_and_nobody_reviews_their_own() {
    let org = start(2, config()).await;
    org.push_branch("w01", "w01/x", &[("x.txt", "x\n")], "Add x.txt")
        .await;
    let n = org.open("w01", "w01/x", "X").await;
    let main_before = org.main().await;

    let body = json!({ "branch": "w01/x", "title": "Again" });
    let m = api_error(
        &org.raw(Method::POST, "/prs", "w01", Some(body)).await,
        409,
        "pr_exists",
    );
    assert!(m.contains(&format!("#{n}")), "{m}");
    assert!(m.contains("push more commits"), "{m}");

    let review = json!({ "verdict": "approve", "text": "I like it" });
    let path = format!("/prs/{n}/reviews");
    let m = api_error(
        &org.raw(Method::POST, &path, "w01", Some(review)).await,
        400,
        "own_pr",
    );
    assert!(m.contains("ask a peer"), "{m}");
    let review = json!({ "verdict": "lgtm", "text": "ok" });
    api_error(
        &org.raw(Method::POST, &path, "w02", Some(review)).await,
        400,
        "bad_verdict",
    );

    let view = org.client("w01").view_pr(n).await.unwrap();
    assert!(view["reviews"].as_array().unwrap().is_empty(), "{view}");
    assert_eq!(
        org.client("w01")
            .list_prs(None, None, None)
            .await
            .unwrap()
            .len(),
        1
    );
    assert_eq!(org.main().await, main_before);
    org.assert_fsck_clean().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opening_a_pr_tells_peers_but_not_the_author() {
    let org = start(3, config()).await;
    org.push_branch("w01", "w01/x", &[("x.txt", "x\n")], "Add x.txt")
        .await;
    let n = org.open("w01", "w01/x", "X").await;
    for peer in ["w02", "w03"] {
        let opened = org.events(peer, kinds::PR_OPENED).await;
        assert_eq!(opened.len(), 1, "{peer}: {opened:?}");
        assert_eq!(opened[0].priority, Priority::Normal);
        assert_eq!(opened[0].payload["number"], n);
        assert_eq!(opened[0].payload["author"], "w01");
        assert_eq!(opened[0].payload["branch"], "w01/x");
    }
    assert!(org.events("w01", kinds::PR_OPENED).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_review_is_urgent_for_the_author_and_normal_news_for_peers() {
    let org = start(3, config()).await;
    org.push_branch("w01", "w01/x", &[("x.txt", "x\n")], "Add x.txt")
        .await;
    let n = org.open("w01", "w01/x", "X").await;
    org.client("w02")
        .review_pr(n, "request-changes", "rename x.txt")
        .await
        .unwrap();

    let review = org.events("w01", kinds::PR_REVIEW).await;
    assert_eq!(review.len(), 1, "{review:?}");
    assert_eq!(review[0].priority, Priority::Urgent);
    assert_eq!(review[0].payload["number"], n);
    assert_eq!(review[0].payload["reviewer"], "w02");
    assert_eq!(review[0].payload["verdict"], "request_changes");
    assert_eq!(review[0].payload["text"], "rename x.txt");
    assert!(
        org.events("w01", kinds::PR_REVIEWED).await.is_empty(),
        "the author hears it once"
    );

    let reviewed = org.events("w03", kinds::PR_REVIEWED).await;
    assert_eq!(reviewed.len(), 1, "{reviewed:?}");
    assert_eq!(reviewed[0].priority, Priority::Normal);
    assert_eq!(reviewed[0].payload["reviewer"], "w02");
    assert!(org.events("w03", kinds::PR_REVIEW).await.is_empty());
    for k in [kinds::PR_REVIEW, kinds::PR_REVIEWED] {
        assert!(
            org.events("w02", k).await.is_empty(),
            "the reviewer hears nothing: {k}"
        );
    }

    // Comments are normal news for everyone but their writer.
    org.client("w03").comment_pr(n, "agreed").await.unwrap();
    for peer in ["w01", "w02"] {
        let c = org.events(peer, kinds::PR_COMMENTED).await;
        assert_eq!(c.len(), 1, "{peer}: {c:?}");
        assert_eq!(c[0].priority, Priority::Normal);
        assert_eq!(c[0].payload["text"], "agreed");
    }
    assert!(org.events("w03", kinds::PR_COMMENTED).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_merge_tells_everyone_but_the_merger() {
    let org = start(3, config()).await;
    org.push_branch("w01", "w01/x", &[("x.txt", "x\n")], "Add x.txt")
        .await;
    let n = org.open("w01", "w01/x", "X").await;
    let answer = org.client("w02").merge_pr(n).await.unwrap();
    let commit = answer["commit"].as_str().unwrap();

    for peer in ["w01", "w03"] {
        let merged = org.events(peer, kinds::PR_MERGED).await;
        assert_eq!(merged.len(), 1, "{peer}: {merged:?}");
        assert_eq!(merged[0].priority, Priority::Normal);
        assert_eq!(merged[0].payload["number"], n);
        assert_eq!(merged[0].payload["merged_by"], "w02");
        assert_eq!(merged[0].payload["commit"], commit);
        let updated = org.events(peer, kinds::MAIN_UPDATED).await;
        assert_eq!(updated.len(), 1, "{peer}: {updated:?}");
        assert_eq!(updated[0].priority, Priority::Normal);
        assert_eq!(updated[0].payload["commit"], commit);
    }
    for k in [kinds::PR_MERGED, kinds::MAIN_UPDATED] {
        assert!(
            org.events("w02", k).await.is_empty(),
            "the merger hears nothing: {k}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pr_view_shows_commits_files_and_mergeability() {
    let org = start(3, config()).await;
    let dir = org
        .push_branch(
            "w01",
            "w01/x",
            &[("feature.txt", "a\nb\nc\n")],
            "Add feature",
        )
        .await;
    commit(
        &dir,
        "w01",
        &[("shared.txt", &shared_with("TWO"))],
        "Edit shared",
    )
    .await;
    push(&dir, "w01", "w01/x").await;
    let n = org.open("w01", "w01/x", "X").await;

    let view = org.client("w02").view_pr(n).await.unwrap();
    assert_eq!(view["number"], n, "{view}");
    assert_eq!(view["state"], "open", "{view}");
    assert_eq!(view["branch"], "w01/x", "{view}");
    assert_eq!(view["approvals"], 0, "{view}");
    let summary = &view["branch_summary"];
    assert_eq!(summary["base"], org.main().await.as_str(), "{view}");
    assert_eq!(
        summary["head"],
        org.resolve("refs/heads/w01/x").await.unwrap().as_str(),
        "{view}"
    );
    let commits: Vec<(&str, &str)> = summary["commits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["subject"].as_str().unwrap(),
                c["author"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        commits,
        [("Edit shared", "w01"), ("Add feature", "w01")],
        "{view}"
    );
    let files: Vec<(&str, u64, u64)> = summary["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["path"].as_str().unwrap(),
                f["added"].as_u64().unwrap(),
                f["removed"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        files,
        [("feature.txt", 3, 0), ("shared.txt", 1, 1)],
        "{view}"
    );
    assert_eq!(
        summary["mergeability"],
        json!({ "state": "mergeable" }),
        "{view}"
    );

    // A conflicting change lands on main.
    org.push_branch(
        "w02",
        "w02/y",
        &[("shared.txt", &shared_with("two, says w02"))],
        "Edit",
    )
    .await;
    let other = org.open("w02", "w02/y", "Y").await;
    org.client("w03").merge_pr(other).await.unwrap();
    let view = org.client("w02").view_pr(n).await.unwrap();
    assert_eq!(
        view["branch_summary"]["mergeability"],
        json!({ "state": "conflict", "files": ["shared.txt"] }),
        "{view}"
    );
    assert_eq!(view["branch_summary"]["base"], org.main().await.as_str());
    // A merged PR has no branch to compare.
    let merged = org.client("w02").view_pr(other).await.unwrap();
    assert!(merged.get("branch_summary").is_none(), "{merged}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pr_whose_commits_are_on_main_merges_as_up_to_date() {
    let org = start(2, config()).await;
    let dir = org
        .push_branch("w01", "w01/a", &[("a.txt", "a\n")], "Add a.txt")
        .await;
    let first = org.open("w01", "w01/a", "A").await;
    org.client("w02").merge_pr(first).await.unwrap();
    let main_before = org.main().await;

    // The same commit on a second branch: every commit of it is on main already.
    push(&dir, "w01", "w01/b").await;
    let n = org.open("w01", "w01/b", "B").await;
    let view = org.client("w02").view_pr(n).await.unwrap();
    assert_eq!(
        view["branch_summary"]["mergeability"]["state"], "up_to_date",
        "{view}"
    );
    assert!(
        view["branch_summary"]["commits"]
            .as_array()
            .unwrap()
            .is_empty(),
        "{view}"
    );

    let answer = org.client("w02").merge_pr(n).await.unwrap();
    assert_eq!(answer["outcome"], "up_to_date", "{answer}");
    assert_eq!(answer["pr"]["state"], "merged", "{answer}");
    assert_eq!(
        answer["pr"]["merge_commit"],
        main_before.as_str(),
        "{answer}"
    );
    assert_eq!(org.main().await, main_before, "main did not move");
    let merged = org
        .client("w01")
        .list_prs(Some("merged"), None, None)
        .await
        .unwrap();
    assert_eq!(merged.len(), 2, "{merged:?}");

    // A branch reset to main, on a hub that never merged anything, too.
    let org = start(2, config()).await;
    let main_before = org.main().await;
    let dir = org.checkout("w01").await;
    push(&dir, "w01", "w01/nothing").await;
    let n = org.open("w01", "w01/nothing", "Nothing").await;
    let answer = org.client("w01").merge_pr(n).await.unwrap();
    assert_eq!(answer["outcome"], "up_to_date", "{answer}");
    assert_eq!(org.main().await, main_before);
    assert_eq!(
        org.client("w01").view_pr(n).await.unwrap()["state"],
        "merged"
    );
    assert_eq!(org.events("w02", kinds::PR_MERGED).await.len(), 1);
    org.assert_fsck_clean().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_up_to_date_merge_does_not_announce_that_main_moved() {
    let org = start(2, config()).await;
    let dir = org.checkout("w01").await;
    push(&dir, "w01", "w01/nothing").await;
    let n = org.open("w01", "w01/nothing", "Nothing").await;
    let answer = org.client("w01").merge_pr(n).await.unwrap();
    assert_eq!(answer["outcome"], "up_to_date", "{answer}");
    assert_eq!(org.events("w02", kinds::PR_MERGED).await.len(), 1);
    let updated = org.events("w02", kinds::MAIN_UPDATED).await;
    assert!(updated.is_empty(), "main did not move: {updated:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn merging_the_same_pr_several_times_at_once_merges_it_once() {
    let org = start(4, config()).await;
    org.push_branch("w01", "w01/x", &[("x.txt", "x\n")], "Add x.txt")
        .await;
    let n = org.open("w01", "w01/x", "X").await;
    let main_before = org.main().await;
    let mut set = tokio::task::JoinSet::new();
    for id in org.ids() {
        let client = org.client(&id);
        set.spawn(async move { client.merge_pr(n).await });
    }
    let (mut merged, mut refused) = (Vec::new(), Vec::new());
    while let Some(done) = set.join_next().await {
        match done.unwrap() {
            Ok(answer) => merged.push(answer),
            Err(e) => refused.push(e),
        }
    }
    assert_eq!(merged.len(), 1, "{merged:?} {refused:?}");
    assert_eq!(merged[0]["outcome"], "merged", "{merged:?}");
    for e in &refused {
        assert_eq!(e.kind, ErrorKind::Conflict, "{e:?}");
        assert!(
            ["merge_in_progress", "pr_not_open"].contains(&e.code.as_str()),
            "{e:?}"
        );
    }
    let main = org.main().await;
    assert_eq!(main, merged[0]["commit"].as_str().unwrap());
    assert_eq!(
        org.bare_git(&["rev-list", "--count", &format!("{main_before}..main")])
            .await,
        "2",
        "one merge commit and the PR's commit"
    );
    let pr = org.client("w01").view_pr(n).await.unwrap();
    assert_eq!(pr["state"], "merged");
    assert_eq!(pr["merge_commit"], main.as_str());
    // Announced once, to everyone but the one merge that went through.
    let merger = merged[0]["pr"]["closed_by"].as_str().unwrap();
    for id in org.ids() {
        let want = usize::from(id != merger);
        assert_eq!(org.events(&id, kinds::PR_MERGED).await.len(), want, "{id}");
        assert_eq!(
            org.events(&id, kinds::MAIN_UPDATED).await.len(),
            want,
            "{id}"
        );
    }
    org.assert_fsck_clean().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pr_list_filters_by_state_and_author() {
    let org = start(2, config()).await;
    org.push_branch("w01", "w01/a", &[("a.txt", "a\n")], "Add a.txt")
        .await;
    org.push_branch("w01", "w01/b", &[("b.txt", "b\n")], "Add b.txt")
        .await;
    org.push_branch("w02", "w02/c", &[("c.txt", "c\n")], "Add c.txt")
        .await;
    let a = org.open("w01", "w01/a", "A").await;
    let b = org.open("w01", "w01/b", "B").await;
    let c = org.open("w02", "w02/c", "C").await;
    org.client("w02").merge_pr(a).await.unwrap();
    org.client("w02").close_pr(c).await.unwrap();

    let numbers = |prs: Vec<agensh_domain::pr::PullRequest>| -> Vec<i64> {
        prs.into_iter().map(|p| p.number).collect()
    };
    let w = org.client("w02");
    assert_eq!(
        numbers(w.list_prs(None, None, None).await.unwrap()),
        [c, b, a]
    );
    assert_eq!(
        numbers(w.list_prs(Some("open"), None, None).await.unwrap()),
        [b]
    );
    assert_eq!(
        numbers(w.list_prs(Some("merged"), None, None).await.unwrap()),
        [a]
    );
    assert_eq!(
        numbers(w.list_prs(Some("closed"), None, None).await.unwrap()),
        [c]
    );
    assert_eq!(
        numbers(w.list_prs(None, Some("w01"), None).await.unwrap()),
        [b, a]
    );
    assert_eq!(numbers(w.list_prs(None, None, Some(1)).await.unwrap()), [c]);
    api_error(
        &org.raw(Method::GET, "/prs?state=draft", "w01", None).await,
        400,
        "bad_state",
    );
    api_error(
        &org.raw(Method::GET, "/prs?limit=0", "w01", None).await,
        400,
        "bad_limit",
    );
    api_error(
        &org.raw(Method::GET, "/prs?limit=501", "w01", None).await,
        400,
        "bad_limit",
    );
}
