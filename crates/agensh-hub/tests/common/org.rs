//! The organization for tests that call every operation: the test kit's [`Org`] with the
//! hub, workers w01 and w02, and the state the OpenAPI document's examples name — claim G1
//! of w01 (and G2 of w02, which the example claim overlaps), branches `w01/work` and
//! `w01/ship` pushed, a direct message waiting for w01.

use agensh_domain::config::Config;
use agensh_workspace::ship::commit_and_push;
use reqwest::Method;
use serde_json::json;

pub use agensh_testkit::Org;

/// With the default test configuration.
pub async fn example() -> Org {
    example_with(super::config()).await
}

pub async fn example_with(config: Config) -> Org {
    let org = Org::builder()
        .file("README.md", "hello\n")
        .config(config)
        .workers(2)
        .start()
        .await;
    assert_eq!(org.ids(), ["w01", "w02"]);

    let dir = org.checkout("w01").await;
    std::fs::write(dir.join("parser.txt"), "parse\n").unwrap();
    commit_and_push(&dir, "w01", "w01/work", "Parser skeleton")
        .await
        .unwrap();
    std::fs::write(dir.join("roman.txt"), "roman\n").unwrap();
    commit_and_push(&dir, "w01", "w01/ship", "roman: implement")
        .await
        .unwrap();

    let claim = json!({"kind": "CLAIM", "text": "rewriting the parser", "label": "parser", "paths": ["src/parser.rs"]});
    let (status, posted) = org
        .call(
            Method::POST,
            "/api/v1/board/records",
            Some("w01"),
            Some(claim),
        )
        .await;
    assert_eq!((status, &posted["record"]["id"]), (201, &json!("G1")));
    let other = json!({"kind": "CLAIM", "text": "parser errors", "label": "parser"});
    let (status, _) = org
        .call(
            Method::POST,
            "/api/v1/board/records",
            Some("w02"),
            Some(other),
        )
        .await;
    assert_eq!(status, 201);
    let dm = json!({"to": "w01", "text": "can you review my PR?"});
    let (status, _) = org
        .call(Method::POST, "/api/v1/messages", Some("w02"), Some(dm))
        .await;
    assert_eq!(status, 201);
    org
}
