//! `agensh store version`: the schema version of an organization's store, read without
//! changing it; a store a newer agensh wrote is named as such, and the hub refuses it.

mod common;

use agensh_store::migrate::{latest, VERSION_TABLE};
use agensh_store::sqlite::migrate::MIGRATIONS;
use common::{agensh, new_org};

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

#[test]
fn an_organization_on_postgresql_is_named_without_its_password() {
    let (_tmp, dir) = new_org("x");
    let out = agensh()
        .args(["store", "version", dir.to_str().unwrap()])
        .env(
            "AGENSH_STORE",
            "postgres://agensh:s3cret@db.internal:5432/org",
        )
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(4));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("is PostgreSQL (database org on db.internal:5432 as agensh"),
        "{err}"
    );
    assert!(!err.contains("s3cret"), "{err}");
}
