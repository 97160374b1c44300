//! What the store tests share: each case runs against the SQLite store and the PostgreSQL
//! store (`stores!` makes one test per store), on a real PostgreSQL server (`pg`, the test
//! kit's).

#![allow(dead_code)]

pub mod rows;

pub use agensh_testkit::pg;

use std::ops::Deref;
use std::sync::Arc;

use agensh_store::{PostgresStore, SqliteStore, Store};

/// Which implementation a test runs against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Sqlite,
    Postgres,
}

/// A fresh, empty store of one kind: a SQLite file in a temporary directory, or a new
/// database on the test server. Derefs to the store.
pub struct TestStore {
    pub kind: Kind,
    pub store: Arc<dyn Store>,
    /// The SQLite file or the database URL.
    pub spec: String,
    _dir: Option<tempfile::TempDir>,
}

impl TestStore {
    pub async fn new(kind: Kind) -> TestStore {
        match kind {
            Kind::Sqlite => {
                let dir = tempfile::tempdir().expect("temp dir");
                let path = dir.path().join("store.db");
                let store = SqliteStore::open(&path).expect("store opens");
                TestStore {
                    kind,
                    store: Arc::new(store),
                    spec: path.display().to_string(),
                    _dir: Some(dir),
                }
            }
            Kind::Postgres => {
                let url = pg::database().await;
                let store = PostgresStore::connect(&url).await.expect("store connects");
                TestStore {
                    kind,
                    store: Arc::new(store),
                    spec: url,
                    _dir: None,
                }
            }
        }
    }

    /// Another store value on the same file or database (a hub restarted, or a second
    /// hub process).
    pub async fn reopen(&self) -> Arc<dyn Store> {
        match self.kind {
            Kind::Sqlite => Arc::new(
                SqliteStore::open(std::path::Path::new(&self.spec)).expect("store reopens"),
            ),
            Kind::Postgres => Arc::new(
                PostgresStore::connect(&self.spec)
                    .await
                    .expect("store reconnects"),
            ),
        }
    }
}

impl Deref for TestStore {
    type Target = dyn Store;
    fn deref(&self) -> &(dyn Store + 'static) {
        &*self.store
    }
}

/// For each `async fn case(t: TestStore)` named, a module `case` with two tests,
/// `sqlite` and `postgres`, that run it against each store.
#[macro_export]
macro_rules! stores {
    ($($case:ident),* $(,)?) => {
        $(
            mod $case {
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn sqlite() {
                    super::$case($crate::common::TestStore::new($crate::common::Kind::Sqlite).await).await
                }
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn postgres() {
                    super::$case($crate::common::TestStore::new($crate::common::Kind::Postgres).await).await
                }
            }
        )*
    };
}

/// Fails, listing what differs, unless the schema the migrations made (`got`) is the one
/// `src/ENGINE/schema.sql` describes (`want`); both as `describe` maps (object → its SQL).
pub fn assert_schema_sql_matches(
    engine: &str,
    got: &std::collections::BTreeMap<String, String>,
    want: &std::collections::BTreeMap<String, String>,
) {
    let only = |a: &std::collections::BTreeMap<String, String>,
                b: &std::collections::BTreeMap<String, String>|
     -> Vec<String> {
        a.iter()
            .filter(|(k, v)| b.get(*k) != Some(v))
            .map(|(k, v)| format!("{k}: {v}"))
            .collect()
    };
    assert!(
        got == want,
        "the migrations and src/{engine}/schema.sql differ — a schema change is a new file in \
         src/{engine}/migrations/ (listed in MIGRATIONS) and the same change in schema.sql.\n\
         only from the migrations: {:#?}\nonly in schema.sql: {:#?}",
        only(got, want),
        only(want, got)
    );
}
