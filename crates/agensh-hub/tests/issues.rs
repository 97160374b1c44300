//! Issues over REST and MCP on a real hub over a seeded workspace: who may assign, claim,
//! close and reopen, refusals that say what to do, and issues closed by a pull request that
//! says `closes #N` when the hub merges it — through `POST /prs/{n}/merge` and through
//! `ship`.

mod common;

use agensh_client::mcp::McpClient;
use common::org::{self, Org};
use reqwest::Method;
use serde_json::{json, Value};

/// A JSON request with worker `i`'s own token (no admin rights).
async fn as_worker(
    org: &Org,
    i: usize,
    method: Method,
    path: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let mut r = reqwest::Client::new()
        .request(method, format!("{}{path}", org.hub().url))
        .bearer_auth(&org.workers[i].1);
    if let Some(b) = body {
        r = r.json(&b);
    }
    let resp = r.send().await.unwrap();
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

async fn admin_open(org: &Org, title: &str, labels: &[&str]) -> i64 {
    let (status, issue) = org
        .call(
            Method::POST,
            "/api/v1/issues",
            None,
            Some(json!({"title": title, "labels": labels})),
        )
        .await;
    assert_eq!(status, 201, "{issue}");
    assert_eq!(issue["author"], "admin");
    issue["number"].as_i64().unwrap()
}

async fn issue(org: &Org, n: i64) -> Value {
    let (status, v) = org
        .call(Method::GET, &format!("/api/v1/issues/{n}"), None, None)
        .await;
    assert_eq!(status, 200, "{v}");
    v
}

fn code(answer: &(u16, Value)) -> (u16, &str) {
    (answer.0, answer.1["error"]["code"].as_str().unwrap_or(""))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_claim_for_themselves_only_and_refusals_say_what_to_do() {
    let org = org::example().await;
    let n = admin_open(&org, "Parser loses line numbers", &["bug"]).await;
    let path = format!("/api/v1/issues/{n}/assign");

    let r = as_worker(
        &org,
        0,
        Method::POST,
        &path,
        Some(json!({"assignee": "w02"})),
    )
    .await;
    assert_eq!(code(&r), (403, "not_yourself"), "{}", r.1);
    assert!(
        r.1["error"]["message"]
            .as_str()
            .unwrap()
            .contains("only to itself"),
        "{}",
        r.1
    );
    let r = as_worker(
        &org,
        0,
        Method::POST,
        &path,
        Some(json!({"assignee": "w01"})),
    )
    .await;
    assert_eq!(r.0, 200, "{}", r.1);
    assert_eq!(r.1["assignee"], "w01");
    let r = as_worker(
        &org,
        1,
        Method::POST,
        &path,
        Some(json!({"assignee": "w02"})),
    )
    .await;
    assert_eq!(code(&r), (409, "issue_assigned"), "{}", r.1);
    // w02 is no author nor assignee: it may comment, not close.
    let r = as_worker(
        &org,
        1,
        Method::POST,
        &format!("/api/v1/issues/{n}/close"),
        None,
    )
    .await;
    assert_eq!(code(&r), (403, "not_your_issue"), "{}", r.1);
    let r = as_worker(
        &org,
        1,
        Method::POST,
        &format!("/api/v1/issues/{n}/comments"),
        Some(json!({"text": "same on CRLF files"})),
    )
    .await;
    assert_eq!(r.0, 201, "{}", r.1);
    // The admin hands it to w02: w02 gets an urgent event.
    let r = org
        .call(Method::POST, &path, None, Some(json!({"assignee": "w02"})))
        .await;
    assert_eq!(r.0, 200, "{}", r.1);
    let (status, events) = as_worker(&org, 1, Method::GET, "/api/v1/events", None).await;
    assert_eq!(status, 200, "{events}");
    let assigned: Vec<&Value> = events["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "issue.assigned")
        .collect();
    assert_eq!(assigned.len(), 1, "{events}");
    assert_eq!(assigned[0]["priority"], "urgent");
    // Labels, then the filters of the list.
    let r = as_worker(
        &org,
        1,
        Method::POST,
        &format!("/api/v1/issues/{n}/labels"),
        Some(json!({"add": ["parser"], "remove": ["bug"]})),
    )
    .await;
    assert_eq!((r.0, &r.1["labels"]), (200, &json!(["parser"])), "{}", r.1);
    let other = admin_open(&org, "Document the CLI", &["docs"]).await;
    let list = |q: &'static str| {
        let org = &org;
        async move {
            let (status, v) = org
                .call(Method::GET, &format!("/api/v1/issues{q}"), None, None)
                .await;
            assert_eq!(status, 200, "{q}: {v}");
            v.as_array()
                .unwrap()
                .iter()
                .map(|i| i["number"].as_i64().unwrap())
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(list("").await, [other, n]);
    assert_eq!(list("?assignee=none").await, [other]);
    assert_eq!(list("?assignee=w02").await, [n]);
    assert_eq!(list("?label=parser").await, [n]);
    assert_eq!(list("?before=2").await, [n]);
    assert_eq!(list("?state=closed").await, Vec::<i64>::new());

    // Bad input: a clear error with its code.
    for (q, want) in [
        ("?state=done", "bad_state"),
        ("?assignee=bob", "bad_assignee"),
        ("?limit=0", "bad_limit"),
        ("?before=0", "bad_before"),
    ] {
        let r = org
            .call(Method::GET, &format!("/api/v1/issues{q}"), None, None)
            .await;
        assert_eq!(code(&r), (400, want), "{q}: {}", r.1);
    }
    let r = org.call(Method::GET, "/api/v1/issues/x", None, None).await;
    assert_eq!(code(&r), (400, "bad_issue_number"), "{}", r.1);
    let r = org.call(Method::GET, "/api/v1/issues/77", None, None).await;
    assert_eq!(code(&r), (404, "unknown_issue"), "{}", r.1);
    let r = org
        .call(
            Method::POST,
            "/api/v1/issues",
            None,
            Some(json!({"title": "x".repeat(201)})),
        )
        .await;
    assert_eq!(code(&r), (400, "title_too_long"), "{}", r.1);
    let r = org
        .call(
            Method::POST,
            &path,
            None,
            Some(json!({"assignee": "admin"})),
        )
        .await;
    assert_eq!(code(&r), (400, "bad_worker_id"), "{}", r.1);
    org.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_finds_claims_comments_and_closes_an_issue_over_mcp() {
    let org = org::example().await;
    let taken = admin_open(&org, "Taken already", &[]).await;
    let free = admin_open(&org, "Add a --json flag", &["cli"]).await;
    org.call(
        Method::POST,
        &format!("/api/v1/issues/{taken}/assign"),
        None,
        Some(json!({"assignee": "w01"})),
    )
    .await;
    let mcp = McpClient::connect(&format!("{}/mcp", org.hub().url), org.token("w02"))
        .await
        .unwrap();
    let r = mcp
        .call_tool("issue_list", json!({"assignee": "none"}))
        .await
        .unwrap();
    assert!(!r.is_error, "{}", r.text);
    let lines: Vec<&str> = r.text.lines().collect();
    assert_eq!(lines[0], "1 issue(s), newest first:");
    assert!(
        lines[1].starts_with(&format!(
            "#{free} [open] unassigned [cli] \"Add a --json flag\" (0 comment(s)"
        )),
        "{}",
        r.text
    );
    let r = mcp
        .call_tool("issue_claim", json!({"number": taken}))
        .await
        .unwrap();
    assert!(r.is_error, "{}", r.text);
    assert!(
        r.text.starts_with("refused (issue_assigned): "),
        "{}",
        r.text
    );
    let r = mcp
        .call_tool("issue_claim", json!({"number": format!("#{free}")}))
        .await
        .unwrap();
    assert!(!r.is_error, "{}", r.text);
    assert!(r.text.contains("is yours"), "{}", r.text);
    assert!(r.text.contains(&format!("closes #{free}")), "{}", r.text);
    let r = mcp
        .call_tool(
            "issue_comment",
            json!({"number": free, "text": "working on it"}),
        )
        .await
        .unwrap();
    assert!(!r.is_error, "{}", r.text);
    let r = mcp
        .call_tool("issue_view", json!({"number": free}))
        .await
        .unwrap();
    assert!(r.text.contains("assigned to w02"), "{}", r.text);
    assert!(r.text.contains("comment by w02"), "{}", r.text);
    let r = mcp
        .call_tool(
            "issue_open",
            json!({"title": "Found: crash on empty input", "labels": ["bug"]}),
        )
        .await
        .unwrap();
    assert!(!r.is_error, "{}", r.text);
    assert!(r.text.starts_with("opened issue #3"), "{}", r.text);
    let r = mcp
        .call_tool("issue_close", json!({"number": free}))
        .await
        .unwrap();
    assert!(!r.is_error, "{}", r.text);
    let v = issue(&org, free).await;
    assert_eq!(
        (&v["state"], &v["closed_by"]),
        (&json!("closed"), &json!("w02"))
    );
    let r = mcp
        .call_tool("issue_open", json!({"title": "bad\u{1b}[2J"}))
        .await
        .unwrap();
    assert!(r.text.starts_with("refused (bad_title): "), "{}", r.text);
    org.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn merging_a_pr_that_says_closes_n_closes_issue_n() {
    let org = org::example().await;
    let a = admin_open(&org, "Parser skeleton", &[]).await;
    let b = admin_open(&org, "Roman numerals", &[]).await;
    let untouched = admin_open(&org, "Not named", &[]).await;
    let r = as_worker(
        &org,
        0,
        Method::POST,
        &format!("/api/v1/issues/{a}/assign"),
        Some(json!({"assignee": "w01"})),
    )
    .await;
    assert_eq!(r.0, 200, "{}", r.1);

    // Through POST /prs/{n}/merge: the body says it.
    let (status, pr) = as_worker(
        &org,
        0,
        Method::POST,
        "/api/v1/prs",
        Some(json!({"branch": "w01/work", "title": "Parser skeleton", "body": format!("Fixes #{a}; also closes #99.")})),
    )
    .await;
    assert_eq!(status, 201, "{pr}");
    let (status, merged) = as_worker(
        &org,
        0,
        Method::POST,
        &format!("/api/v1/prs/{}/merge", pr["number"]),
        None,
    )
    .await;
    assert_eq!(status, 200, "{merged}");
    let v = issue(&org, a).await;
    assert_eq!(v["state"], "closed", "{v}");
    assert_eq!(v["closed_by"], format!("pr#{}", pr["number"]));
    // The assignee hears that its issue was closed by the PR.
    let (_, events) = as_worker(&org, 0, Method::GET, "/api/v1/events", None).await;
    let closed: Vec<&Value> = events["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "issue.closed")
        .collect();
    assert_eq!(closed.len(), 1, "{events}");
    assert_eq!(closed[0]["payload"]["number"], a);

    // Through ship: the title says it.
    let mcp = McpClient::connect(&format!("{}/mcp", org.hub().url), org.token("w01"))
        .await
        .unwrap();
    let r = mcp
        .call_tool(
            "ship",
            json!({"title": format!("roman: implement, closes #{b}"), "summary": "files=roman.txt | evidence=none", "branch": "w01/ship"}),
        )
        .await
        .unwrap();
    assert!(!r.is_error, "{}", r.text);
    let v = issue(&org, b).await;
    assert_eq!(v["state"], "closed", "{v}");
    assert!(v["closed_by"].as_str().unwrap().starts_with("pr#"), "{v}");
    assert_eq!(issue(&org, untouched).await["state"], "open");
    org.shutdown().await;
}
