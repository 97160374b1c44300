//! Nodes on other hosts: the operator issues a node token; the node registers with it and
//! receives the same workers every time, never more than it may run; the token does
//! nothing else; revoking it ends the node's token and the worker tokens it was given.

mod common;

use agensh_domain::record::RecordKind;
use agensh_domain::ErrorKind;
use common::*;
use reqwest::Method;

fn ids(r: &agensh_domain::node::Registered) -> Vec<&str> {
    r.workers.iter().map(|w| w.id.as_str()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_gets_the_same_workers_on_every_registration_and_never_more_than_allowed() {
    let hub = TestHub::start().await;
    let admin = hub.admin();
    admin.add_workers(2).await.unwrap();
    let a = admin.add_node("host-a", 3).await.unwrap();
    assert!(a.token.starts_with("agn_") && a.token.len() == 44, "{a:?}");
    let node = hub.client(&a.token);

    // Workers no node has first, then new ones.
    let first = node.register_node(2).await.unwrap();
    assert_eq!(ids(&first), ["w01", "w02"]);
    assert_eq!(first.node, "host-a");
    assert_eq!(first.goal, hub.config.organization.goal);
    let more = node.register_node(3).await.unwrap();
    assert_eq!(ids(&more), ["w01", "w02", "w03"]);
    assert_eq!(more.workers[..2], first.workers[..]);
    assert_eq!(more.organization_size, 3);
    // The same workers and tokens again, also when it asks for fewer.
    assert_eq!(node.register_node(3).await.unwrap().workers, more.workers);
    assert_eq!(
        node.register_node(1).await.unwrap().workers,
        more.workers[..1]
    );
    let e = expect_err(
        node.register_node(4).await,
        ErrorKind::Forbidden,
        "too_many_workers",
    );
    assert!(e.message.contains("may run 3"), "{}", e.message);
    assert_eq!(admin.workers().await.unwrap().len(), 3, "nothing created");

    // Another node never gets host-a's workers.
    let b = admin.add_node("host-b", 2).await.unwrap();
    let got = hub.client(&b.token).register_node(2).await.unwrap();
    assert_eq!(ids(&got), ["w04", "w05"]);

    // The workers it was given act with their own tokens at once.
    let w03 = hub.client(&more.workers[2].token);
    w03.post_record(&rec(RecordKind::Fact, "w03 runs on host-a"))
        .await
        .unwrap();

    expect_err(
        admin.add_node("host-a", 1).await,
        ErrorKind::Conflict,
        "node_exists",
    );
    expect_err(
        admin.add_node("no spaces", 1).await,
        ErrorKind::Invalid,
        "bad_node_name",
    );
    let listed = admin.nodes().await.unwrap();
    assert_eq!(listed.len(), 2);
    assert_eq!(listed[0].name, "host-a");
    assert_eq!(listed[0].workers, 3);
    assert_eq!(listed[0].assigned, ["w01", "w02", "w03"]);
    assert!(listed[0].registered_at.is_some());
    let text = serde_json::to_string(&listed).unwrap();
    assert!(
        !text.contains(&a.token) && !text.contains(&b.token),
        "no token listed"
    );

    // A hub started again knows the node, its token and its workers.
    let hub = hub.restart().await;
    let again = hub.client(&a.token).register_node(3).await.unwrap();
    assert_eq!(again.workers, more.workers);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_token_does_nothing_but_register() {
    let hub = TestHub::start().await;
    let admin = hub.admin();
    let a = admin.add_node("host-a", 1).await.unwrap();
    let b = admin.add_node("host-b", 1).await.unwrap();
    let mine = hub.client(&a.token).register_node(1).await.unwrap();
    let theirs = hub.client(&b.token).register_node(1).await.unwrap();
    let (w_mine, w_theirs) = (&mine.workers[0].id, &theirs.workers[0].id);
    hub.client(&theirs.workers[0].token)
        .post_record(&rec(RecordKind::Fact, "a secret of host-b"))
        .await
        .unwrap();

    // Admin routes, and reads as a worker: the node token is refused, and says what to do.
    let calls: Vec<(Method, String, Option<&str>)> = vec![
        (Method::GET, "/api/v1/workers".into(), None),
        (
            Method::POST,
            "/api/v1/workers".into(),
            Some(r#"{"count":1}"#),
        ),
        (
            Method::GET,
            format!("/api/v1/workers/{w_theirs}/token"),
            None,
        ),
        (Method::GET, "/api/v1/nodes".into(), None),
        (
            Method::POST,
            "/api/v1/nodes".into(),
            Some(r#"{"name":"x","workers":1}"#),
        ),
        (Method::POST, "/api/v1/nodes/host-b/revoke".into(), None),
        (Method::GET, "/api/v1/board/recent".into(), None),
        (Method::GET, "/api/v1/events".into(), None),
        (Method::GET, "/api/v1/whoami".into(), None),
        (
            Method::PUT,
            "/api/v1/budget".into(),
            Some(r#"{"tokens":1}"#),
        ),
    ];
    for (method, path, body) in calls {
        let ans = hub.raw(method.clone(), &path, Some(&a.token), body).await;
        let message = api_error(&ans, 403, "node_token");
        assert!(
            message.contains("worker token the registration gave"),
            "{method} {path}: {message}"
        );
    }
    // Not as another worker either, named or through a batch without its token.
    for worker in [w_mine, w_theirs] {
        let ans = reqwest::Client::new()
            .get(format!("{}/api/v1/events", hub.url()))
            .bearer_auth(&a.token)
            .header("x-agensh-as", worker.as_str())
            .send()
            .await
            .unwrap();
        assert_eq!(ans.status().as_u16(), 403, "as {worker}");
    }
    let poll = format!(r#"{{"workers":[{{"id":"{w_theirs}","after":0}}],"wait":0}}"#);
    let ans = hub
        .raw(
            Method::POST,
            "/api/v1/events/poll",
            Some(&a.token),
            Some(&poll),
        )
        .await;
    api_error(&ans, 403, "node_token");
    // Its own worker's token does not read the other node's worker's events.
    let ans = hub
        .raw(
            Method::POST,
            "/api/v1/events/poll",
            Some(&mine.workers[0].token),
            Some(&poll),
        )
        .await;
    api_error(&ans, 403, "needs_token");
    // Git does not take it; MCP refuses it as every route does.
    let git = reqwest::Client::new()
        .get(format!(
            "{}/git/workspace.git/info/refs?service=git-upload-pack",
            hub.url()
        ))
        .basic_auth(w_mine, Some(&a.token))
        .send()
        .await
        .unwrap();
    assert!(
        [401, 404].contains(&git.status().as_u16()),
        "{}",
        git.status()
    );
    let mcp = reqwest::Client::new()
        .post(format!("{}/mcp", hub.url()))
        .bearer_auth(&a.token)
        .json(&serde_json::json!({"jsonrpc":"2.0","id":1,"method":"tools/list"}))
        .send()
        .await
        .unwrap();
    assert_eq!(mcp.status().as_u16(), 403);

    // Only a node token registers.
    for token in [&hub.hub.admin_token, &mine.workers[0].token] {
        let ans = hub
            .raw(
                Method::POST,
                "/api/v1/nodes/register",
                Some(token),
                Some(r#"{"workers":1}"#),
            )
            .await;
        api_error(&ans, 403, "node_only");
    }
    let ans = hub
        .raw(
            Method::POST,
            "/api/v1/nodes/register",
            Some("agn_0000000000000000000000000000000000000000"),
            Some(r#"{"workers":1}"#),
        )
        .await;
    api_error(&ans, 401, "unauthorized");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_node_and_the_worker_tokens_it_was_given_stop_working() {
    let hub = TestHub::start().await;
    let admin = hub.admin();
    let a = admin.add_node("host-a", 2).await.unwrap();
    let got = hub.client(&a.token).register_node(2).await.unwrap();
    let renewed = admin.revoke_node("host-a").await.unwrap();
    assert_eq!(renewed, ["w01", "w02"]);
    expect_err(
        hub.client(&a.token).register_node(2).await,
        ErrorKind::Unauthorized,
        "unauthorized",
    );
    expect_err(
        hub.client(&got.workers[0].token).whoami().await,
        ErrorKind::Unauthorized,
        "unauthorized",
    );
    assert!(admin.nodes().await.unwrap().is_empty());
    expect_err(
        admin.revoke_node("host-a").await,
        ErrorKind::NotFound,
        "unknown_node",
    );
    // Its workers go to the next node, with their new tokens.
    let c = admin.add_node("host-c", 2).await.unwrap();
    let next = hub.client(&c.token).register_node(2).await.unwrap();
    assert_eq!(ids(&next), ["w01", "w02"]);
    assert_ne!(next.workers[0].token, got.workers[0].token);
    let me = hub.client(&next.workers[0].token).whoami().await.unwrap();
    assert_eq!(me.id, "w01");
    // Still so after a restart.
    let hub = hub.restart().await;
    expect_err(
        hub.client(&got.workers[1].token).whoami().await,
        ErrorKind::Unauthorized,
        "unauthorized",
    );
}
