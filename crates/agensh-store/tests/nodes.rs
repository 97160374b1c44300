//! Nodes in the store, against both stores: issued once per name, registered with the
//! same workers every time (their own first, then free ones, then new ones), never more
//! than they may run, and revoked with new tokens for their workers.

mod common;

use common::TestStore;

stores!(nodes_get_the_same_workers_each_time_and_lose_them_when_revoked);

const NOW: i64 = 1_700_000_000_000;

fn ids(ws: &[agensh_domain::worker::NewWorker]) -> Vec<&str> {
    ws.iter().map(|w| w.id.as_str()).collect()
}

async fn nodes_get_the_same_workers_each_time_and_lose_them_when_revoked(s: TestStore) {
    s.add_workers(2, NOW).await.unwrap();
    let a = s.add_node("node-a", 3, NOW).await.unwrap();
    assert!(a.token.starts_with("agn_"), "{}", a.token);
    let again = s.add_node("node-a", 1, NOW).await.unwrap_err();
    assert_eq!(again.code, "node_exists", "{}", again.message);

    let first = s.register_node("node-a", 2, NOW + 1).await.unwrap();
    assert_eq!(ids(&first), ["w01", "w02"], "free workers first");
    let second = s.register_node("node-a", 2, NOW + 2).await.unwrap();
    assert_eq!(second, first, "the same workers and tokens every time");
    let more = s.register_node("node-a", 3, NOW + 3).await.unwrap();
    assert_eq!(ids(&more), ["w01", "w02", "w03"], "then a new one");
    let e = s.register_node("node-a", 4, NOW).await.unwrap_err();
    assert_eq!(e.code, "too_many_workers", "{}", e.message);

    s.add_node("node-b", 2, NOW).await.unwrap();
    let b = s.register_node("node-b", 2, NOW).await.unwrap();
    assert_eq!(
        ids(&b),
        ["w04", "w05"],
        "another node's workers are not free"
    );

    let listed = s.list_nodes().await.unwrap();
    let names: Vec<(&str, usize, Vec<String>)> = listed
        .iter()
        .map(|n| (n.name.as_str(), n.workers, n.assigned.clone()))
        .collect();
    assert_eq!(
        names,
        [
            ("node-a", 3, vec!["w01".into(), "w02".into(), "w03".into()]),
            ("node-b", 2, vec!["w04".into(), "w05".into()]),
        ]
    );
    assert_eq!(listed[0].registered_at, Some(NOW + 3));
    assert_eq!(s.node_tokens().await.unwrap().len(), 2);

    let renewed = s.revoke_node("node-a").await.unwrap();
    assert_eq!(ids(&renewed), ["w01", "w02", "w03"]);
    for (new, old) in renewed.iter().zip(&more) {
        assert_ne!(new.token, old.token, "{} has a new token", new.id);
    }
    let tokens = s.worker_tokens().await.unwrap();
    assert!(tokens.contains(&("w01".to_string(), renewed[0].token.clone())));
    assert_eq!(s.list_nodes().await.unwrap().len(), 1);
    let e = s.register_node("node-a", 1, NOW).await.unwrap_err();
    assert_eq!(e.code, "unknown_node", "{}", e.message);
    let e = s.revoke_node("node-a").await.unwrap_err();
    assert_eq!(e.code, "unknown_node", "{}", e.message);
    // Its workers are free again: a new node gets them.
    s.add_node("node-c", 1, NOW).await.unwrap();
    assert_eq!(
        ids(&s.register_node("node-c", 1, NOW).await.unwrap()),
        ["w01"]
    );
}
