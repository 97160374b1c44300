//! `agensh store version`: the schema version of an organization's store — its SQLite file
//! or its PostgreSQL database — read without changing it; a store a newer agensh wrote is
//! named as such, and the hub refuses it. `agensh store migrate`: an organization's SQLite
//! store moved into a real PostgreSQL database, and its hub carrying on there.

mod common;

use std::time::Duration;

use agensh_domain::record::{NewRecord, RecordKind};
use agensh_store::migrate::{latest, VERSION_TABLE};
use agensh_store::postgres::migrate::MIGRATIONS as PG_MIGRATIONS;
use agensh_store::sqlite::migrate::MIGRATIONS;
use agensh_testkit::pg;
use common::{agensh, new_org, HubProcess};

fn version(dir: &std::path::Path, json: bool) -> std::process::Output {
    let mut c = agensh();
    c.args(["store", "version", dir.to_str().unwrap()]);
    if json {
        c.arg("--json");
    }
    c.output().expect("agensh runs")
}

#[test]
fn a_new_organization_is_at_the_newest_schema() {
    let (_tmp, dir) = new_org("x");
    let out = version(&dir, true);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let newest = latest(MIGRATIONS);
    assert_eq!(v["version"], newest);
    assert_eq!(v["latest"], newest);
    assert_eq!(v["unversioned"], false);
    assert_eq!(v["too_new"], false);
    assert_eq!(v["applied"].as_array().unwrap().len(), newest as usize);
    assert_eq!(v["applied"][0]["name"], "initial");
    assert!(v["pending"].as_array().unwrap().is_empty());

    let text = version(&dir, false);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains(&format!("schema {newest}: up to date")),
        "{text}"
    );
}

#[test]
fn a_store_from_a_newer_agensh_is_named_and_the_hub_refuses_it() {
    let (_tmp, dir) = new_org("x");
    let next = latest(MIGRATIONS) + 1;
    rusqlite::Connection::open(dir.join(".agensh/store.sqlite"))
        .unwrap()
        .execute(
            &format!(
                "INSERT INTO {VERSION_TABLE}(version, name, applied_at) VALUES (?1, 'later', 0)"
            ),
            [next],
        )
        .unwrap();
    let want = format!(
        "this store was written by a newer agensh (schema {next}, this one knows {}): upgrade agensh",
        latest(MIGRATIONS)
    );
    let out = version(&dir, false);
    assert_eq!(out.status.code(), Some(4), "a local failure");
    assert!(String::from_utf8_lossy(&out.stderr).contains(&want));
    assert!(String::from_utf8_lossy(&out.stdout).contains("written by a newer agensh"));

    let hub = agensh()
        .args(["hub", dir.to_str().unwrap(), "--listen", "127.0.0.1:0"])
        .output()
        .unwrap();
    assert_eq!(
        hub.status.code(),
        Some(4),
        "a local failure: install the newer agensh"
    );
    assert!(
        String::from_utf8_lossy(&hub.stderr).contains(&want),
        "{}",
        String::from_utf8_lossy(&hub.stderr)
    );
}

#[test]
fn a_directory_without_a_store_says_how_to_make_one() {
    let tmp = tempfile::tempdir().unwrap();
    let out = version(tmp.path(), true);
    assert_eq!(out.status.code(), Some(4));
    let err: serde_json::Value = serde_json::from_slice(&out.stderr).unwrap();
    assert_eq!(err["error"]["code"], "no_store");
    assert!(err["error"]["message"]
        .as_str()
        .unwrap()
        .contains("agensh init DIR"));
}

/// A new database on the test server, its URL with a password in it (the server trusts
/// 127.0.0.1, so any password works; none may ever be printed).
fn database() -> String {
    let url = tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(pg::database());
    url.replacen("postgres://agensh@", "postgres://agensh:s3cret@", 1)
}

fn shown(url: &str) -> String {
    url.replacen(":s3cret@", ":***@", 1)
}

fn run(args: &[&str]) -> std::process::Output {
    agensh().args(args).output().expect("agensh runs")
}

fn text(out: &std::process::Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn no_password(out: &std::process::Output) {
    let (o, e) = text(out);
    assert!(!o.contains("s3cret") && !e.contains("s3cret"), "{o}\n{e}");
}

/// A SQLite store file with rows of every kind: the store crate's fixtures, version by
/// version.
fn full_store(dir: &std::path::Path) -> std::path::PathBuf {
    let path = dir.join("store.sqlite");
    drop(agensh_store::SqliteStore::open(&path).unwrap());
    let conn = rusqlite::Connection::open(&path).unwrap();
    let fixtures = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../agensh-store/tests/fixtures/store");
    for v in 1..=latest(MIGRATIONS) {
        let f = fixtures.join(format!("v{v:04}.sql"));
        if f.exists() {
            conn.execute_batch(&std::fs::read_to_string(&f).unwrap())
                .unwrap();
        }
    }
    path
}

#[test]
fn the_version_of_a_postgresql_store_is_read_from_the_url_the_hub_would_use() {
    let url = database();
    let (_tmp, dir) = new_org("x");
    let d = dir.to_str().unwrap();
    // An empty database: the hub makes schema 1 when it opens it.
    let out = run(&["store", "version", d, "--store", &url, "--json"]);
    assert!(out.status.success(), "{:?}", text(&out));
    no_password(&out);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["store"], shown(&url));
    assert_eq!(v["engine"], "postgres");
    assert_eq!(
        (v["version"].as_u64(), v["unversioned"].as_bool()),
        (Some(0), Some(false))
    );
    assert_eq!(v["pending"][0]["name"], "initial");

    // After a store opened it (here the move), from AGENSH_STORE and from hub.store alike.
    let src = tempfile::tempdir().unwrap();
    let file = full_store(src.path());
    let out = run(&[
        "store",
        "migrate",
        "--from",
        file.to_str().unwrap(),
        "--to",
        &url,
        "--json",
    ]);
    assert!(out.status.success(), "{:?}", text(&out));
    let out = agensh()
        .args(["store", "version", d])
        .env("AGENSH_STORE", &url)
        .output()
        .unwrap();
    no_password(&out);
    let (o, _) = text(&out);
    assert!(
        o.starts_with(&format!(
            "store {}\nschema {}: up to date\n",
            shown(&url),
            latest(PG_MIGRATIONS)
        )),
        "{o}"
    );
    assert!(o.contains("     1  initial"), "{o}");
    let toml = dir.join("agensh.toml");
    let conf = std::fs::read_to_string(&toml).unwrap();
    assert!(conf.contains("\nstore = \"\"\n"), "{conf}");
    std::fs::write(
        &toml,
        conf.replacen("\nstore = \"\"\n", &format!("\nstore = \"{url}\"\n"), 1),
    )
    .unwrap();
    let out = run(&["store", "version", d, "--json"]);
    assert!(out.status.success(), "{:?}", text(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (v["store"].as_str(), v["version"].as_u64()),
        (
            Some(shown(&url).as_str()),
            Some(latest(PG_MIGRATIONS) as u64)
        )
    );
    no_password(&out);

    // A password given as a query parameter is hidden too.
    let bare = url.replacen(":s3cret@", "@", 1);
    let out = run(&[
        "store",
        "version",
        d,
        "--store",
        &format!("{bare}?password=s3cret"),
    ]);
    assert!(out.status.success(), "{:?}", text(&out));
    assert!(
        text(&out)
            .0
            .starts_with(&format!("store {bare}?password=***\n")),
        "{:?}",
        text(&out)
    );
    no_password(&out);
}

#[test]
fn a_postgresql_store_that_does_not_answer_exits_3_without_its_password() {
    let (_tmp, dir) = new_org("x");
    let out = run(&[
        "store",
        "version",
        dir.to_str().unwrap(),
        "--store",
        "postgres://agensh:s3cret@127.0.0.1:1/org",
    ]);
    assert_eq!(out.status.code(), Some(3), "{:?}", text(&out));
    let (_, err) = text(&out);
    assert!(
        err.contains(
            "cannot connect to the PostgreSQL store (database org on 127.0.0.1:1 as agensh)"
        ),
        "{err}"
    );
    no_password(&out);
}

#[test]
fn migrate_moves_a_store_file_and_refuses_a_database_that_is_not_empty() {
    let src = tempfile::tempdir().unwrap();
    let file = full_store(src.path());
    let url = database();
    let f = file.to_str().unwrap();
    let out = run(&[
        "store", "migrate", "--from", f, "--to", &url, "--json", "--batch", "7",
    ]);
    assert!(out.status.success(), "{:?}", text(&out));
    no_password(&out);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["to"], shown(&url));
    assert_eq!(v["from"], f);
    assert_eq!(
        (v["source_schema"].as_u64(), v["target_schema"].as_u64()),
        (
            Some(latest(MIGRATIONS) as u64),
            Some(latest(PG_MIGRATIONS) as u64)
        )
    );
    let tables = v["tables"].as_object().unwrap();
    assert_eq!(tables.len(), agensh_store::transfer::TABLES.len());
    assert_eq!(
        (tables["records"].as_u64(), tables["events"].as_u64()),
        (Some(9), Some(16))
    );
    assert_eq!(
        v["rows"].as_u64(),
        Some(tables.values().map(|n| n.as_u64().unwrap()).sum())
    );
    assert_eq!(v["sequences"]["public.model_requests_id_seq"], 4);

    // Again into the same database: refused (exit 1), nothing changed.
    let again = run(&["store", "migrate", "--from", f, "--to", &url, "--json"]);
    assert_eq!(again.status.code(), Some(1), "{:?}", text(&again));
    no_password(&again);
    let err: serde_json::Value = serde_json::from_slice(&again.stderr).unwrap();
    assert_eq!(err["error"]["code"], "target_not_empty");
    assert!(
        err["error"]["message"]
            .as_str()
            .unwrap()
            .contains("records: 9"),
        "{err}"
    );
    let counts = tokio::runtime::Runtime::new().unwrap().block_on(async {
        let (c, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(conn);
        let r = c
            .query_one(
                "SELECT (SELECT count(*) FROM records), (SELECT count(*) FROM events)",
                &[],
            )
            .await
            .unwrap();
        (r.get::<_, i64>(0), r.get::<_, i64>(1))
    });
    assert_eq!(counts, (9, 16));
}

#[test]
fn migrate_says_what_is_wrong_with_its_arguments_by_exit_code() {
    let src = tempfile::tempdir().unwrap();
    let file = full_store(src.path());
    let f = file.to_str().unwrap();
    let not_pg = run(&["store", "migrate", "--from", f, "--to", "/tmp/other.sqlite"]);
    assert_eq!(not_pg.status.code(), Some(2));
    assert!(text(&not_pg).1.contains("--to takes a PostgreSQL URL"));
    let url = database();
    let back = run(&["store", "migrate", "--from", &url, "--to", &url]);
    assert_eq!(back.status.code(), Some(2), "{:?}", text(&back));
    assert!(text(&back).1.contains("not back"), "{:?}", text(&back));
    no_password(&back);
    let missing = run(&[
        "store",
        "migrate",
        "--from",
        "/nonexistent",
        "--to",
        &url,
        "--json",
    ]);
    assert_eq!(missing.status.code(), Some(4), "{:?}", text(&missing));
    let err: serde_json::Value = serde_json::from_slice(&missing.stderr).unwrap();
    assert_eq!(err["error"]["code"], "no_store");
    let down = run(&[
        "store",
        "migrate",
        "--from",
        f,
        "--to",
        "postgres://agensh:s3cret@127.0.0.1:1/org",
    ]);
    assert_eq!(down.status.code(), Some(3), "{:?}", text(&down));
    no_password(&down);
    rusqlite::Connection::open(&file)
        .unwrap()
        .execute_batch("CREATE TABLE webhooks (url TEXT)")
        .unwrap();
    let unknown = run(&["store", "migrate", "--from", f, "--to", &url]);
    assert_eq!(unknown.status.code(), Some(4), "{:?}", text(&unknown));
    assert!(
        text(&unknown).1.contains("a table `webhooks`"),
        "{:?}",
        text(&unknown)
    );
}

/// The path from one machine to many: an organization served from SQLite, its hub
/// stopped, its store moved, and a hub on PostgreSQL carrying on — same admin token, same
/// records and numbers, grep, and events delivered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_organization_moves_to_postgresql_and_its_hub_carries_on_there() {
    let (_tmp, dir) = new_org("move me");
    let d = dir.to_str().unwrap().to_string();
    let url = pg::database()
        .await
        .replacen("postgres://agensh@", "postgres://agensh:s3cret@", 1);

    let hub = HubProcess::start(&dir);
    let admin_token = hub.info.admin_token.clone();
    let workers = hub.admin().add_workers(2).await.unwrap();
    let w1 = agensh_client::Client::new(&hub.info.url, &workers[0].token);
    let mut claim = NewRecord::new(RecordKind::Claim, "parser: error recovery");
    claim.label = Some("parser".into());
    let g1 = w1.post_record(&claim).await.unwrap().record.id;
    w1.post_record(&NewRecord::new(
        RecordKind::Fact,
        "the lexer keeps line numbers",
    ))
    .await
    .unwrap();
    let w2 = agensh_client::Client::new(&hub.info.url, &workers[1].token);
    let seen = w2.events(0, 0).await.unwrap();
    let last = seen.last().expect("w2 was told of w1's records").seq;

    // Refused while the hub runs: what it wrote meanwhile would be lost.
    let out = tokio::task::spawn_blocking({
        let (d, url) = (d.clone(), url.clone());
        move || run(&["store", "migrate", "--from", &d, "--to", &url])
    })
    .await
    .unwrap();
    assert_eq!(out.status.code(), Some(4), "{:?}", text(&out));
    assert!(text(&out).1.contains("stop it first"), "{:?}", text(&out));
    assert!(hub.terminate().success());

    // The form: `--from sqlite`, the organization of --dir.
    let out = tokio::task::spawn_blocking({
        let (d, url) = (d.clone(), url.clone());
        move || {
            run(&[
                "--dir", &d, "store", "migrate", "--from", "sqlite", "--to", &url,
            ])
        }
    })
    .await
    .unwrap();
    assert!(out.status.success(), "{:?}", text(&out));
    no_password(&out);
    let (o, _) = text(&out);
    assert!(
        o.contains(&format!(
            "into {} (schema {})",
            shown(&url),
            latest(PG_MIGRATIONS)
        )),
        "{o}"
    );
    assert!(o.contains("next: start the hub on it"), "{o}");

    let hub = HubProcess::start_on_store(&dir, &url);
    assert_eq!(
        hub.info.admin_token, admin_token,
        "the organization's admin token moved"
    );
    let w1 = agensh_client::Client::new(&hub.info.url, &workers[0].token);
    let w2 = agensh_client::Client::new(&hub.info.url, &workers[1].token);
    let found: Vec<String> = w2
        .grep("parser", None, None)
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.id)
        .collect();
    assert_eq!(found, [g1]);
    assert_eq!(w2.grep("line*", None, None).await.unwrap().len(), 1);
    // w2's queue carried over: nothing new since what it saw.
    assert!(w2.events(last, 0).await.unwrap().is_empty());
    let waiting = tokio::spawn(async move { w2.events(last, 10).await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let g3 = w1
        .post_record(&NewRecord::new(
            RecordKind::Observed,
            "posted on PostgreSQL",
        ))
        .await
        .unwrap()
        .record
        .id;
    assert_eq!(g3, "G3", "numbered after the moved records");
    let got = tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .expect("delivered while waiting")
        .unwrap()
        .unwrap();
    assert_eq!(got[0].seq, last + 1, "the next event number");
    assert_eq!(got[0].kind, "board.record");
    assert_eq!(got[0].payload["id"], "G3");
    assert!(hub.terminate().success());
}
