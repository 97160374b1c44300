//! The `ship` tool over MCP and `POST /ship`: the success path and each refusal (branch
//! not pushed, nothing to merge, the gate refused with its output, a conflict, a summary
//! that breaks a limit), against a real hub over a seeded workspace.

mod common;

use agensh_client::mcp::{McpClient, ToolResult};
use agensh_domain::config::Config;
use agensh_domain::pr::PrState;
use agensh_domain::record::RecordKind;
use agensh_testkit::Org;
use agensh_workspace::ship::commit_and_push;
use serde_json::{json, Value};

/// An organization over a workspace seeded with `shared.txt`, with `n` workers and `gate`.
async fn start(n: usize, gate: &str) -> Org {
    let mut config: Config = common::config();
    config.merge.gate = gate.to_string();
    Org::builder()
        .file("shared.txt", "one\ntwo\nthree\n")
        .config(config)
        .workers(n)
        .start()
        .await
}

/// What these tests add to the test kit's organization.
trait ShipOrg {
    /// An MCP session of the `i`-th worker.
    async fn mcp(&self, i: usize) -> McpClient;
    /// Writes `files` in `id`'s checkout, commits and pushes them to `<id>/work`.
    async fn push(&self, id: &str, files: &[(&str, &str)]);
    /// `id`'s live claims.
    async fn claims(&self, id: &str) -> Vec<String>;
}

impl ShipOrg for Org {
    async fn mcp(&self, i: usize) -> McpClient {
        McpClient::connect(&format!("{}/mcp", self.url()), &self.workers[i].1)
            .await
            .unwrap()
    }

    async fn push(&self, id: &str, files: &[(&str, &str)]) {
        let dir = self.checkout(id).await;
        for (name, text) in files {
            std::fs::write(dir.join(name), text).unwrap();
        }
        commit_and_push(&dir, id, &format!("{id}/work"), "change")
            .await
            .unwrap();
    }

    async fn claims(&self, id: &str) -> Vec<String> {
        self.client("w01")
            .workers()
            .await
            .unwrap()
            .into_iter()
            .find(|w| w.id == id)
            .unwrap()
            .claims
            .into_iter()
            .map(|c| c.id)
            .collect()
    }
}

async fn ship(c: &McpClient, args: Value) -> ToolResult {
    c.call_tool("ship", args).await.unwrap()
}

fn refused(r: &ToolResult, code: &str) -> String {
    assert!(r.is_error, "refused, not {}", r.text);
    assert!(
        r.text.starts_with(&format!("refused ({code}): ")),
        "{}",
        r.text
    );
    r.text.clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ship_opens_merges_posts_the_summary_and_releases_the_claim_in_one_call() {
    let org = start(1, "test -f feature.txt").await;
    let w01 = org.client("w01");
    let claim = w01
        .post_record(&common::claim(
            "add the feature",
            Some("feature"),
            &["feature.txt"],
            None,
        ))
        .await
        .unwrap()
        .record;
    org.push("w01", &[("feature.txt", "done\n")]).await;

    let r = ship(
        &org.mcp(0).await,
        json!({"title": "Add the feature", "summary": "files=feature.txt | evidence=gate passed"}),
    )
    .await;
    assert!(!r.is_error, "{}", r.text);
    let lines: Vec<&str> = r.text.lines().collect();
    assert_eq!(lines[0], "shipped PR #1 into main; peers are told:");
    assert!(
        lines[1].starts_with("1. w01/work is on the hub at "),
        "{}",
        r.text
    );
    assert!(
        lines[1].ends_with("with 1 commit(s) main lacks"),
        "{}",
        r.text
    );
    assert_eq!(lines[2], "2. opened PR #1 \"Add the feature\"");
    assert!(
        lines[3].starts_with("3. merged PR #1 into main at "),
        "{}",
        r.text
    );
    assert!(lines[3].ends_with("(the gate passed)"), "{}", r.text);
    assert!(
        lines[4].starts_with("4. posted G2 PATCH_SUMMARY: files=feature.txt"),
        "{}",
        r.text
    );
    assert_eq!(
        lines[5],
        format!("5. released {}: add the feature", claim.id)
    );

    assert_eq!(org.on_main("feature.txt").await.as_deref(), Some("done"));
    let pr = &w01.list_prs(None, None, None).await.unwrap()[0];
    assert_eq!(pr.state, PrState::Merged);
    assert_eq!(
        pr.body.as_deref(),
        Some("files=feature.txt | evidence=gate passed")
    );
    let summary = w01.unfold("G2").await.unwrap().record;
    assert_eq!(summary.kind, RecordKind::PatchSummary);
    assert_eq!(
        summary.label.as_deref(),
        Some("feature"),
        "the claim's label"
    );
    let merge = pr.merge_commit.clone().unwrap();
    assert_eq!(
        summary.detail.as_deref(),
        Some(
            format!("PR #1 \"Add the feature\" merged into main at {merge} (branch w01/work)")
                .as_str()
        )
    );
    assert!(org.claims("w01").await.is_empty(), "the claim is released");
    // Its time from ship to merged is in /metrics.
    let metrics = reqwest::get(format!("{}/metrics", org.hub().url))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains("\nagensh_ship_to_merged_seconds_count 1\n"),
        "{metrics}"
    );
    assert!(
        metrics.contains("\nagensh_ship_to_merged_seconds{quantile=\"0.99\"} "),
        "{metrics}"
    );
}

#[tokio::test]
async fn a_title_and_summary_written_over_several_lines_ship_as_one_line_each() {
    let org = start(1, "").await;
    org.push("w01", &[("leap.txt", "done\n")]).await;
    let r = ship(
        &org.mcp(0).await,
        json!({"title": "leap:\nimplement", "summary": "files=numkit/leap.py\n\n  evidence=tests pass\n"}),
    )
    .await;
    assert!(!r.is_error, "{}", r.text);
    let pr = &org.client("w01").list_prs(None, None, None).await.unwrap()[0];
    assert_eq!(pr.title, "leap: implement");
    assert_eq!(
        pr.body.as_deref(),
        Some("files=numkit/leap.py\n\n  evidence=tests pass\n"),
        "the PR keeps the summary as written"
    );
    let summary = org.client("w01").unfold("G1").await.unwrap().record;
    assert_eq!(summary.text, "files=numkit/leap.py | evidence=tests pass");
}

#[tokio::test]
async fn a_branch_not_on_the_hub_is_refused_with_the_command_that_pushes_it() {
    let org = start(1, "").await;
    let r = ship(&org.mcp(0).await, json!({"title": "t", "summary": "s"})).await;
    let m = refused(&r, "unknown_branch");
    assert!(m.contains("git push origin HEAD:w01/work"), "{m}");
    assert!(m.contains("ship does this for you"), "{m}");
    assert!(org
        .client("w01")
        .list_prs(None, None, None)
        .await
        .unwrap()
        .is_empty());
}

#[tokio::test]
async fn a_branch_with_nothing_main_lacks_is_refused_as_nothing_to_merge() {
    let org = start(1, "").await;
    org.push("w01", &[]).await;
    let r = ship(&org.mcp(0).await, json!({"title": "t", "summary": "s"})).await;
    let m = refused(&r, "nothing_to_merge");
    assert!(m.contains("w01/work has no commits that main lacks"), "{m}");
    assert!(org
        .client("w01")
        .list_prs(None, None, None)
        .await
        .unwrap()
        .is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_gate_refuses_with_its_output_keeps_the_pr_and_the_claim_and_a_fix_ships() {
    let org = start(1, "echo checking the tests; test -f fixed.txt").await;
    let w01 = org.client("w01");
    let claim = w01
        .post_record(&common::claim("fix it", Some("fix"), &[], None))
        .await
        .unwrap()
        .record;
    org.push("w01", &[("broken.txt", "x\n")]).await;
    let mcp = org.mcp(0).await;
    let args = json!({"title": "Fix it", "summary": "fixed"});

    let m = refused(&ship(&mcp, args.clone()).await, "gate_failed");
    assert!(m.contains("ship stopped at merging: the merge gate"), "{m}");
    assert!(m.contains("checking the tests"), "the gate's output: {m}");
    assert!(m.contains("PR #1 stays open: fix the code"), "{m}");
    assert!(m.contains("Done before it: w01/work is on the hub"), "{m}");
    assert!(m.contains("opened PR #1"), "{m}");
    let prs = w01.list_prs(None, None, None).await.unwrap();
    assert_eq!((prs.len(), prs[0].state), (1, PrState::Open));
    assert_eq!(org.claims("w01").await, vec![claim.id.clone()]);
    assert!(org.on_main("broken.txt").await.is_none());

    org.push("w01", &[("fixed.txt", "y\n")]).await;
    let r = ship(&mcp, args).await;
    assert!(!r.is_error, "{}", r.text);
    assert!(
        r.text.contains("2. reused your open PR #1 \"Fix it\""),
        "{}",
        r.text
    );
    assert_eq!(w01.list_prs(None, None, None).await.unwrap().len(), 1);
    assert!(org.on_main("fixed.txt").await.is_some());
    assert!(org.claims("w01").await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conflict_with_main_is_refused_with_how_to_pull_and_resolve() {
    let org = start(2, "").await;
    org.push("w01", &[("shared.txt", "one\nTWO\nthree\n")])
        .await;
    org.push("w02", &[("shared.txt", "one\n2\nthree\n")]).await;
    let args = json!({"title": "t", "summary": "s"});
    let r = ship(&org.mcp(0).await, args.clone()).await;
    assert!(!r.is_error, "{}", r.text);

    let m = refused(&ship(&org.mcp(1).await, args).await, "merge_conflict");
    assert!(m.contains("shared.txt"), "{m}");
    assert!(
        m.contains("PR #2 stays open: pull main into your checkout (git pull origin main), resolve the conflicts, commit, and ship again"),
        "{m}"
    );
    assert_eq!(
        org.on_main("shared.txt").await.as_deref(),
        Some("one\nTWO\nthree")
    );
}

#[tokio::test]
async fn a_summary_that_breaks_a_limit_is_refused_before_anything_moves() {
    let org = start(1, "").await;
    org.push("w01", &[("a.txt", "a\n")]).await;
    let r = ship(
        &org.mcp(0).await,
        json!({"title": "t", "summary": "x".repeat(301)}),
    )
    .await;
    let m = refused(&r, "text_too_long");
    assert!(m.contains("nothing was done"), "{m}");
    assert!(org
        .client("w01")
        .list_prs(None, None, None)
        .await
        .unwrap()
        .is_empty());
}

#[tokio::test]
async fn a_claim_that_is_not_the_callers_is_refused_naming_its_live_claims() {
    let org = start(1, "").await;
    let mine = org
        .client("w01")
        .post_record(&common::claim("mine", None, &[], None))
        .await
        .unwrap()
        .record;
    org.push("w01", &[("a.txt", "a\n")]).await;
    let r = ship(
        &org.mcp(0).await,
        json!({"title": "t", "summary": "s", "claim": "G99"}),
    )
    .await;
    let m = refused(&r, "not_your_live_claim");
    assert!(m.contains(&format!("yours: {}", mine.id)), "{m}");
    assert!(org
        .client("w01")
        .list_prs(None, None, None)
        .await
        .unwrap()
        .is_empty());
}

#[tokio::test]
async fn rest_ship_answers_the_same_steps() {
    let org = start(1, "").await;
    org.push("w01", &[("a.txt", "a\n")]).await;
    let resp = reqwest::Client::new()
        .post(format!("{}/api/v1/ship", org.hub().url))
        .bearer_auth(org.token("w01"))
        .json(&json!({"title": "A", "summary": "added a"}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["opened"], true);
    assert_eq!(body["pr"]["state"], "merged");
    assert_eq!(body["summary"]["kind"], "PATCH_SUMMARY");
    assert_eq!(body["steps"].as_array().unwrap().len(), 5);
    assert_eq!(body["steps"][4], "no live claim of yours to release");
}
