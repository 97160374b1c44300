//! Stored text never reaches the terminal raw: a record or message that holds a terminal
//! escape, a carriage return or a right-to-left override (stored before the hub refused
//! them, or written into the store by another program) is printed with those characters
//! escaped, as people read it and as `--json` writes it.

mod common;

use common::{ok_in as ok, *};

/// What an old store may hold: a terminal title change, a screen clear, a carriage return
/// that hides what came before it, and a right-to-left override.
const HOSTILE: &str = "ok \u{1b}]0;owned\u{7}\u{1b}[2J\rfake \u{202E}txt.exe";

/// Whether `s` holds anything a terminal acts on, but for line feeds.
fn raw_controls(s: &str) -> Vec<char> {
    s.chars()
        .filter(|c| (c.is_control() && *c != '\n') || ('\u{202A}'..='\u{202E}').contains(c))
        .collect()
}

#[test]
fn an_escape_already_in_the_store_is_printed_escaped() {
    let (_tmp, dir) = new_org("x");
    ok(
        &dir,
        &["board", "post", "FACT", "placeholder", "--detail", "d"],
    );
    ok(&dir, &["msg", "send", "#general", "placeholder"]);
    let db = rusqlite::Connection::open(dir.join(".agensh").join(agensh_hub::STORE_FILE))
        .expect("the store opens");
    db.execute(
        "UPDATE records SET text = ?1, detail = ?1 WHERE seq = 1",
        [HOSTILE],
    )
    .unwrap();
    db.execute("UPDATE messages SET text = ?1 WHERE seq = 1", [HOSTILE])
        .unwrap();
    drop(db);

    for args in [
        &["board", "read", "--all"][..],
        &["board", "unfold", "G1"],
        &["msg", "read", "--all"],
    ] {
        let out = ok(&dir, args);
        assert_eq!(raw_controls(&out), Vec::<char>::new(), "{args:?}: {out:?}");
        assert!(
            out.contains(r"ok \u{1b}]0;owned\u{7}\u{1b}[2J\u{d}fake \u{202e}txt.exe"),
            "{args:?}: {out}"
        );
    }

    for args in [
        &["board", "read", "--all", "--json"][..],
        &["board", "unfold", "G1", "--json"],
        &["msg", "read", "--all", "--json"],
    ] {
        let out = ok(&dir, args);
        assert_eq!(raw_controls(&out), Vec::<char>::new(), "{args:?}: {out:?}");
        let value: serde_json::Value = serde_json::from_str(&out).expect("the output is JSON");
        assert!(value.to_string().contains("\\u001b]0;owned"), "{value}");
        assert!(out.contains(r"\u202etxt.exe"), "{args:?}: {out}");
    }
}
