//! The SQLite store's checkpoints run on a thread of their own, beside the writer: commits
//! only append to the WAL, and the WAL's pages reach the database file without any commit
//! waiting for them.

use agensh_domain::record::{NewRecord, RecordKind};
use agensh_store::{SqliteStore, Store};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_wal_reaches_the_database_file_with_no_commit_checkpointing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store.db");
    let store = SqliteStore::open(&path).unwrap();
    let w = store.add_workers(1, 1).await.unwrap().remove(0).id;
    let size = || std::fs::metadata(&path).unwrap().len();
    // Let the checkpointer copy what opening wrote, then measure from there.
    tokio::time::sleep(std::time::Duration::from_millis(1200)).await;
    let before = size();
    let counted = store.write_stats().unwrap().checkpoint.count();
    // A few dozen commits: a few hundred WAL pages, far below the point (1,000 pages by
    // SQLite's default) where a commit would checkpoint on its own.
    for i in 0..40 {
        store
            .append_record(
                &w,
                NewRecord::new(RecordKind::Fact, format!("fact {i} {}", "x".repeat(90))),
                2,
                600,
            )
            .await
            .unwrap();
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while size() <= before {
        assert!(
            std::time::Instant::now() < deadline,
            "the database file stayed at {before} bytes: nothing copied the WAL into it"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(store.write_stats().unwrap().checkpoint.count() > counted);
    // Every record is there, read back through a fresh connection.
    drop(store);
    let again = SqliteStore::open(&path).unwrap();
    assert_eq!(again.stats().await.unwrap().records, 40);
}
