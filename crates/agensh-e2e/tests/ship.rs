//! `ship` through the node: the node's MCP proxy commits and pushes what is left in the
//! worker's checkout and forwards everything else to the hub unchanged; and scripted
//! agents behind it merge a passing part in one call while the merge gate refuses a
//! failing one.

mod support;

use agensh_client::mcp::McpClient;
use agensh_domain::config::Config;
use agensh_node::adapters::Agent;
use agensh_node::mcp_proxy::{McpProxy, ProxiedWorker};
use agensh_testkit::scenario::{step, Scenario, Step};
use serde_json::json;
use support::{entries, AgentOrg, Org};

/// A proxy in front of `org`'s hub for the workers `ids` (their checkouts made).
async fn proxy(org: &Org, ids: &[String]) -> McpProxy {
    let mut workers = Vec::new();
    for id in ids {
        let ctx = org.context(id).await;
        workers.push(ProxiedWorker {
            id: id.clone(),
            token: ctx.token,
            checkout: ctx.checkout,
        });
    }
    McpProxy::start(&org.hub().url, workers).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ship_through_the_proxy_commits_and_pushes_what_is_left_then_merges() {
    let org = support::start(1).await;
    let id = org.id(0);
    let p = proxy(&org, std::slice::from_ref(&id)).await;
    let checkout = org.context(&id).await.checkout;
    std::fs::write(checkout.join("feature.txt"), "done\n").unwrap();

    let mcp = McpClient::connect(p.url(), org.token(&id)).await.unwrap();
    let r = mcp
        .call_tool(
            "ship",
            json!({"title": "Add the feature", "summary": "files=feature.txt"}),
        )
        .await
        .unwrap();
    assert!(!r.is_error, "{}", r.text);
    let lines: Vec<&str> = r.text.lines().collect();
    assert!(
        lines[0].starts_with(
            "in your checkout: committed 1 changed file(s) left in your checkout and pushed "
        ),
        "{}",
        r.text
    );
    assert!(lines[0].ends_with(" to w01/work"), "{}", r.text);
    assert_eq!(lines[1], "shipped PR #1 into main; peers are told:");
    assert_eq!(org.on_main("feature.txt").await.as_deref(), Some("done"));
    assert_eq!(
        org.bare_git(&["log", "-1", "--format=%an %s", "w01/work"])
            .await,
        "w01 Add the feature"
    );
}

#[tokio::test]
async fn everything_but_ship_reaches_the_hub_and_comes_back_unchanged() {
    let org = support::start(1).await;
    let id = org.id(0);
    let p = proxy(&org, std::slice::from_ref(&id)).await;
    let post = |url: String, token: String, body: &'static str| async move {
        let resp = reqwest::Client::new()
            .post(url)
            .bearer_auth(token)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2025-06-18")
            .body(body)
            .send()
            .await
            .unwrap();
        let status = resp.status().as_u16();
        let session = resp.headers().contains_key("mcp-session-id");
        (status, session, resp.text().await.unwrap())
    };
    let hub = format!("{}/mcp", org.hub().url);
    let token = org.token(&id).to_string();
    for body in [
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#,
        r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"release","arguments":{"id":"G99"}}}"#,
        r#"{"jsonrpc":"2.0","id":3,"method":"nope"}"#,
    ] {
        let direct = post(hub.clone(), token.clone(), body).await;
        let proxied = post(p.url().to_string(), token.clone(), body).await;
        assert_eq!(proxied, direct, "{body}");
    }
    let initialize = r#"{"jsonrpc":"2.0","id":4,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#;
    let (status, session, _) = post(p.url().to_string(), token, initialize).await;
    assert_eq!(
        (status, session),
        (200, true),
        "the session header comes back"
    );
    let wrong = post(p.url().to_string(), "wrong".into(), initialize).await;
    assert_eq!(wrong, post(hub, "wrong".into(), initialize).await);
    assert_eq!(wrong.0, 401);
}

/// Each worker claims the first free part, writes it and its test, and ships in one call.
fn ship_a_part() -> String {
    Scenario::new()
        .parts(&["pass", "fail"])
        .part_path("parts/{part}.sh")
        .test_path("tests/test_{part}.sh")
        .templates("test {part} = pass\n", "sh parts/{part}.sh\n")
        .step(step::claim_free_part())
        .step(step::write_part())
        .step(Step::Call {
            tool: "ship".into(),
            args: json!({
                "title": "Add {part}",
                "summary": "files=parts/{part}.sh | evidence=tests/test_{part}.sh passes",
            }),
        })
        .step(step::end_turn())
        .to_toml()
}

/// Runs every part's test; the first that fails refuses the merge.
const GATE: &str = r#"for t in tests/test_*.sh; do echo "running $t"; sh "$t" || { echo "FAILED: $t"; exit 1; }; done"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn ship_merges_a_passing_part_in_one_call_and_the_gate_refuses_a_failing_one() {
    let mut config = Config::with_goal("test");
    config.merge.gate = GATE.to_string();
    let org = support::start_with(2, config).await;
    let (a, b) = (org.id(0), org.id(1));
    let p = proxy(&org, &[a.clone(), b.clone()]).await;
    let scenario = org.scenario("ship", &ship_a_part());
    for id in [&a, &b] {
        let mut ctx = org.context(id).await;
        ctx.mcp_proxy = Some(p.url().to_string());
        let mut agent = org.script_agent(&scenario);
        agent.start(&ctx).await.expect("the scripted agent starts");
        agent.turn("go").await.expect("the turn ends");
        agent.stop().await;
    }
    let log = org.log_entries();

    let shipped = entries(&log, "tool", &a);
    let ships: Vec<_> = shipped.iter().filter(|e| e["tool"] == "ship").collect();
    assert_eq!(ships.len(), 1, "one call");
    assert_eq!(ships[0]["is_error"], false, "{}", ships[0]["text"]);
    let text = ships[0]["text"].as_str().unwrap();
    assert!(text.contains("committed 2 changed file(s)"), "{text}");
    assert!(text.contains("merged PR #1 into main"), "{text}");
    assert!(text.contains("released G1: part pass"), "{text}");
    assert_eq!(
        org.on_main("parts/pass.sh").await.as_deref(),
        Some("test pass = pass")
    );

    let refused: Vec<_> = entries(&log, "tool", &b)
        .into_iter()
        .filter(|e| e["tool"] == "ship")
        .collect();
    assert_eq!(refused.len(), 1);
    assert_eq!(refused[0]["is_error"], true);
    let text = refused[0]["text"].as_str().unwrap();
    assert!(text.contains("refused (gate_failed)"), "{text}");
    assert!(
        text.contains("FAILED: tests/test_fail.sh"),
        "the gate's output: {text}"
    );
    assert!(text.contains("PR #2 stays open"), "{text}");
    assert!(!org.files_on_main().await.contains("parts/fail.sh"));
    let prs = org.client(&b).list_prs(None, None, None).await.unwrap();
    let open: Vec<_> = prs.iter().filter(|p| p.author == b).collect();
    assert_eq!(open[0].state, agensh_domain::pr::PrState::Open);
}
