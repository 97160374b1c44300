//! `agensh issue …` and `agensh init --issues FILE` as a person uses them: the real binary,
//! a real store, a real hub process (or the state served in-process when none runs).

mod common;

use common::{agensh, run_in, stderr, stdout, HubProcess};
use serde_json::Value;

fn init(dir: &std::path::Path, issues: &std::path::Path) -> std::process::Output {
    agensh()
        .args(["init", dir.to_str().unwrap(), "--goal", "x", "--issues"])
        .arg(issues)
        .output()
        .unwrap()
}

const SEED: &str = r#"
[[issue]]
title = "Parser loses line numbers"
body = """
parse("a\nb") reports line 1 for b.
Expected: line 2."""
labels = ["bug", "parser"]

[[issue]]
title = "Document the CLI"
"#;

#[test]
fn init_seeds_issues_from_a_toml_or_json_file() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("issues.toml");
    std::fs::write(&file, SEED).unwrap();
    let dir = tmp.path().join("org");
    let out = init(&dir, &file);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("opened 2 issue(s)"),
        "{}",
        stdout(&out)
    );
    // No hub runs: the command serves the organization's state itself.
    let out = run_in(&dir, &["issue", "list", "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let list: Value = serde_json::from_str(&stdout(&out)).unwrap();
    let titles: Vec<&str> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["title"].as_str().unwrap())
        .collect();
    assert_eq!(titles, ["Document the CLI", "Parser loses line numbers"]);
    assert_eq!(list[1]["author"], "admin");
    assert_eq!(list[1]["labels"], serde_json::json!(["bug", "parser"]));
    let shown = stdout(&run_in(&dir, &["issue", "view", "1"]));
    assert!(
        shown.contains("#1 Parser loses line numbers [open]"),
        "{shown}"
    );
    assert!(shown.contains("labels: bug, parser"), "{shown}");
    assert!(shown.contains("Expected: line 2."), "{shown}");

    let json = tmp.path().join("issues.json");
    std::fs::write(
        &json,
        r#"[{"title": "One"}, {"title": "Two", "labels": ["docs"]}]"#,
    )
    .unwrap();
    let dir2 = tmp.path().join("org2");
    let out = init(&dir2, &json);
    assert!(out.status.success(), "{}", stderr(&out));
    let shown = stdout(&run_in(&dir2, &["issue", "list", "--label", "docs"]));
    assert!(shown.starts_with("#2"), "{shown}");
    assert!(shown.contains("[docs] Two"), "{shown}");
}

#[test]
fn a_bad_issues_file_names_the_entry_and_creates_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("issues.toml");
    std::fs::write(
        &file,
        format!("{SEED}\n[[issue]]\ntitle = \"Too many\"\nlabels = [\"a,b\"]\n"),
    )
    .unwrap();
    let dir = tmp.path().join("org");
    let out = init(&dir, &file);
    assert_eq!(out.status.code(), Some(4), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("issue 3 (\"Too many\")"), "{err}");
    assert!(err.contains("nothing was created"), "{err}");
    assert!(!dir.exists(), "init created {}", dir.display());

    std::fs::write(&file, "[[issue]]\ntitel = \"typo\"\n").unwrap();
    let out = init(&dir, &file);
    assert_eq!(out.status.code(), Some(4), "{}", stderr(&out));
    assert!(stderr(&out).contains("titel"), "{}", stderr(&out));
    assert!(!dir.exists());
    let out = init(&dir, &tmp.path().join("missing.toml"));
    assert_eq!(out.status.code(), Some(4), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("cannot read the issues file"),
        "{}",
        stderr(&out)
    );
    assert!(!dir.exists());
}

#[test]
fn issues_are_opened_claimed_labelled_commented_closed_and_reopened() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("issues.toml");
    std::fs::write(&file, SEED).unwrap();
    let dir = tmp.path().join("org");
    assert!(init(&dir, &file).status.success());
    let _hub = HubProcess::start(&dir);
    assert!(run_in(&dir, &["workers", "add", "2"]).status.success());
    let ok = |args: &[&str]| {
        let out = run_in(&dir, args);
        assert!(out.status.success(), "{args:?}: {}", stderr(&out));
        stdout(&out)
    };

    assert_eq!(
        ok(&[
            "issue",
            "open",
            "Add --json",
            "--label",
            "cli",
            "--body",
            "for scripts"
        ]),
        "opened issue #3: Add --json\n"
    );
    let out = run_in(&dir, &["issue", "claim", "3"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("--as ID"), "{}", stderr(&out));
    assert!(ok(&["--as", "w01", "issue", "claim", "3"]).starts_with("issue #3 is yours (w01)"));
    // w02, with its own token, cannot take w01's issue.
    let token = ok(&["workers", "token", "w02"]).trim().to_string();
    let out = run_in(&dir, &["--token", &token, "issue", "claim", "3"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("assigned to w01 already"),
        "{}",
        stderr(&out)
    );
    assert_eq!(
        ok(&["issue", "label", "3", "--add", "p1", "--remove", "cli"]),
        "issue #3 labels: p1\n"
    );
    assert_eq!(
        ok(&["--as", "w02", "issue", "comment", "3", "same here"]),
        "commented on issue #3\n"
    );
    let listed = ok(&["issue", "list", "--assignee", "w01"]);
    assert!(
        listed.starts_with("#3    open   w01    [p1] Add --json (1 comments,"),
        "{listed}"
    );
    let view = ok(&["issue", "view", "3"]);
    assert!(view.contains("assigned to w01"), "{view}");
    assert!(view.contains("comment by w02"), "{view}");
    assert_eq!(ok(&["issue", "close", "3"]), "closed issue #3\n");
    assert!(ok(&["issue", "list"])
        .lines()
        .all(|l| !l.starts_with("#3 ")));
    assert!(ok(&["issue", "list", "--state", "closed"]).starts_with("#3 "));
    let reopened: Value = serde_json::from_str(&ok(&["issue", "reopen", "3", "--json"])).unwrap();
    assert_eq!(reopened["state"], "open");
    assert_eq!(
        ok(&["issue", "assign", "3", "none"]),
        "issue #3 is assigned to nobody\n"
    );
    assert_eq!(
        ok(&["issue", "assign", "3", "w02"]),
        "issue #3 is assigned to w02\n"
    );

    // Refusals say what to do, in the CLI's words.
    let out = run_in(&dir, &["issue", "open", "bad\u{1b}[2J"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(stderr(&out).contains("one plain line"), "{}", stderr(&out));
    let out = run_in(&dir, &["issue", "view", "77"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("there is no issue #77"),
        "{}",
        stderr(&out)
    );
    let out = run_in(&dir, &["issue", "label", "3"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let out = run_in(&dir, &["issue", "list", "--state", "done", "--json"]);
    assert_eq!(out.status.code(), Some(1));
    let err: Value = serde_json::from_str(stderr(&out).trim()).unwrap();
    assert_eq!(err["error"]["code"], "bad_state");
}
