//! An organization with a seeded git workspace, for tests that call every operation: the
//! hub, workers w01 and w02, and the state the OpenAPI document's examples name — claim G1
//! of w01 (and G2 of w02, which the example claim overlaps), branches `w01/work` and
//! `w01/ship` pushed, a direct message waiting for w01.

use std::sync::Arc;

use agensh_domain::config::Config;
use agensh_hub::RunningHub;
use agensh_store::SqliteStore;
use agensh_workspace::{checkout, ship::commit_and_push};
use reqwest::Method;
use serde_json::{json, Value};
use tempfile::TempDir;

pub struct Org {
    pub tmp: TempDir,
    pub hub: RunningHub,
    /// The tokens of w01 and w02.
    pub tokens: Vec<String>,
}

impl Org {
    /// With the default test configuration.
    pub async fn start() -> Org {
        Org::with_config(super::config()).await
    }

    pub async fn with_config(config: Config) -> Org {
        let tmp = tempfile::tempdir().unwrap();
        let state = tmp.path().join("org").join(".agensh");
        std::fs::create_dir_all(&state).unwrap();
        let seed = tmp.path().join("seed");
        std::fs::create_dir_all(&seed).unwrap();
        std::fs::write(seed.join("README.md"), "hello\n").unwrap();
        let ws = agensh_workspace::seed::create(
            &state.join("workspace.git"),
            agensh_workspace::seed::Source::Dir(&seed),
            "test",
        )
        .await
        .unwrap();
        let store = SqliteStore::open(&state.join("store.sqlite")).unwrap();
        let hub = agensh_hub::start_with_workspace(
            Arc::new(store),
            Some(ws.clone()),
            config,
            "127.0.0.1:0",
        )
        .await
        .unwrap();
        let mut org = Org {
            tmp,
            hub,
            tokens: Vec::new(),
        };
        let (status, workers) = org
            .call(
                Method::POST,
                "/api/v1/workers",
                None,
                Some(json!({"count": 2})),
            )
            .await;
        assert_eq!(status, 201, "{workers}");
        assert_eq!(workers[1]["id"], "w02");
        org.tokens = workers
            .as_array()
            .unwrap()
            .iter()
            .map(|w| w["token"].as_str().unwrap().to_string())
            .collect();

        let dir = checkout::checkout_dir(&org.tmp.path().join("org"), "w01");
        checkout::create(&ws, "w01", &dir).await.unwrap();
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

    /// A JSON request with the admin token, acting as `as_worker`.
    pub async fn call(
        &self,
        method: Method,
        path: &str,
        as_worker: Option<&str>,
        body: Option<Value>,
    ) -> (u16, Value) {
        let mut r = reqwest::Client::new()
            .request(method, format!("{}{path}", self.hub.url))
            .bearer_auth(&self.hub.admin_token);
        if let Some(w) = as_worker {
            r = r.header("x-agensh-as", w);
        }
        if let Some(b) = body {
            r = r.json(&b);
        }
        let resp = r.send().await.unwrap();
        let status = resp.status().as_u16();
        (status, resp.json().await.unwrap_or(Value::Null))
    }
}
