//! The hub keeps its repository packed: loose objects piled up before it starts are
//! packed by its maintenance (which runs at start, then every minute).

use std::sync::Arc;
use std::time::{Duration, Instant};

use agensh_domain::config::Config;
use agensh_store::SqliteStore;
use agensh_workspace::pack::LOOSE_LIMIT;
use agensh_workspace::seed::{self, Source};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_hub_packs_loose_objects_that_piled_up() {
    let tmp = tempfile::tempdir().unwrap();
    let state = tmp.path().join("org/.agensh");
    std::fs::create_dir_all(&state).unwrap();
    let src = tmp.path().join("seed");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("README.md"), "hello\n").unwrap();
    let ws = seed::create(&state.join("workspace.git"), Source::Dir(&src), "test")
        .await
        .unwrap();
    // More loose objects than the limit, as many small merges and pushes would leave.
    let blobs: String = (0..=LOOSE_LIMIT).map(|i| format!("blob {i}\n")).collect();
    let dir = tmp.path().join("blobs");
    std::fs::create_dir_all(&dir).unwrap();
    let mut paths = String::new();
    for (i, line) in blobs.lines().enumerate() {
        let p = dir.join(i.to_string());
        std::fs::write(&p, line).unwrap();
        paths.push_str(&format!("{}\n", p.display()));
    }
    let out = ws
        .git()
        .output_with_input(
            ["hash-object", "-w", "--stdin-paths"],
            Some(paths.as_bytes()),
        )
        .await
        .unwrap();
    assert!(out.success(), "{}", out.stderr);
    assert_eq!(ws.object_counts().await.unwrap().loose, LOOSE_LIMIT + 1);

    let store = SqliteStore::open(&state.join("store.sqlite")).unwrap();
    let hub = agensh_hub::start_with_workspace(
        Arc::new(store),
        Some(ws.clone()),
        Config::with_goal("g"),
        "127.0.0.1:0",
    )
    .await
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let c = ws.object_counts().await.unwrap();
        if c.loose == 0 {
            assert_eq!(c.packs, 1, "{c:?}");
            break;
        }
        assert!(Instant::now() < deadline, "still loose after 20 s: {c:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for id in out.stdout.lines() {
        ws.git().run(["cat-file", "-e", id]).await.unwrap();
    }
    hub.shutdown().await;
}
