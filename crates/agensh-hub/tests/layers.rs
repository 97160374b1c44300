//! The hub's layers: the handlers (`routes/` for REST, `mcp/` for MCP) sit on the service
//! layer (`ops/`), which sits on the rest (state, auth, limits, goal, gateway, dashboard,
//! ...). Below the handlers nothing names them: outside `routes/`, `mcp/`, and the
//! router's wiring in `serve.rs` and `lib.rs`, no file of `src/` reaches `crate::routes` or
//! `crate::mcp` — not through `super::`, not in a `use crate::{…}` group, not in a doc
//! link. What both need belongs below them (`ops/`, `paths.rs`, `auth.rs`).

use std::path::{Path, PathBuf};

/// The modules of the handlers, which only the wiring and they themselves may name.
const HANDLERS: [&str; 2] = ["routes", "mcp"];

/// The files (relative to `src/`, `/`-separated) and folders (ending in `/`) that may.
const MAY_NAME_THEM: [&str; 4] = ["routes/", "mcp/", "serve.rs", "lib.rs"];

/// Every `.rs` file below `dir`.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("src/ is readable") {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// How deep the module of the file at `rel` (relative to `src/`) is below the crate root:
/// `lib.rs` 0, `limits.rs` and `dashboard/mod.rs` 1, `dashboard/feed.rs` 2.
fn depth(rel: &str) -> usize {
    let parts: Vec<&str> = rel.split('/').collect();
    let last = *parts.last().expect("a file name");
    match last {
        "lib.rs" | "main.rs" if parts.len() == 1 => 0,
        "mod.rs" => parts.len() - 1,
        _ => parts.len(),
    }
}

/// A piece of Rust text as a path reads it: identifiers, `::`, braces and commas, each with
/// its line; anything else ends a path.
#[derive(Debug, PartialEq)]
enum Token<'a> {
    Ident(&'a str),
    Sep,
    Open,
    Close,
    Comma,
    Other,
}

fn tokens(text: &str) -> Vec<(usize, Token<'_>)> {
    let bytes = text.as_bytes();
    let mut out = Vec::new();
    let (mut i, mut line) = (0, 1);
    while i < bytes.len() {
        let c = bytes[i];
        if c == b'\n' {
            line += 1;
            i += 1;
        } else if c.is_ascii_whitespace() {
            i += 1;
        } else if c.is_ascii_alphanumeric() || c == b'_' {
            let start = i;
            while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_') {
                i += 1;
            }
            out.push((line, Token::Ident(&text[start..i])));
        } else if text[i..].starts_with("::") {
            out.push((line, Token::Sep));
            i += 2;
        } else {
            out.push((
                line,
                match c {
                    b'{' => Token::Open,
                    b'}' => Token::Close,
                    b',' => Token::Comma,
                    _ => Token::Other,
                },
            ));
            i += text[i..].chars().next().map_or(1, char::len_utf8);
        }
    }
    out
}

/// Where `text`, the file of a module `depth` levels below the crate root, names one of
/// [`HANDLERS`] from the crate root: `crate::routes`, `super::mcp` (with as many `super`s
/// as climb to the root, or more: a `mod tests` inside the file is one level deeper), or
/// `routes`/`mcp` as an entry of a `crate::{…}` group. Each as (line, what it names).
fn upward(text: &str, depth: usize) -> Vec<(usize, String)> {
    let t = tokens(text);
    let mut found = Vec::new();
    let mut i = 0;
    while i < t.len() {
        // A path from the crate root: `crate ::`, or `super ::` repeated up to the root.
        let root_end = match &t[i].1 {
            Token::Ident("crate") if t.get(i + 1).map(|x| &x.1) == Some(&Token::Sep) => Some(i + 2),
            Token::Ident("super") => {
                let mut j = i;
                let mut supers = 0;
                while t.get(j).map(|x| &x.1) == Some(&Token::Ident("super"))
                    && t.get(j + 1).map(|x| &x.1) == Some(&Token::Sep)
                {
                    supers += 1;
                    j += 2;
                }
                (supers > 0 && supers >= depth).then_some(j)
            }
            _ => None,
        };
        let Some(at) = root_end else {
            i += 1;
            continue;
        };
        match t.get(at) {
            Some((line, Token::Ident(name))) if HANDLERS.contains(name) => {
                found.push((*line, format!("crate::{name}")));
            }
            Some((_, Token::Open)) => {
                // The entries of the group: the first identifier after `{` or `,` at its
                // own level names a module of the root.
                let mut level = 0;
                let mut entry_start = true;
                for (line, tok) in &t[at..] {
                    match tok {
                        Token::Open => {
                            level += 1;
                            entry_start = level == 1;
                        }
                        Token::Close => {
                            level -= 1;
                            if level == 0 {
                                break;
                            }
                        }
                        Token::Comma if level == 1 => entry_start = true,
                        Token::Ident(name) if entry_start && level == 1 => {
                            if HANDLERS.contains(name) {
                                found.push((*line, format!("crate::{{{name}}}")));
                            }
                            entry_start = false;
                        }
                        _ => entry_start = false,
                    }
                }
            }
            _ => {}
        }
        i = at;
    }
    found
}

#[test]
fn nothing_below_the_handlers_names_routes_or_mcp() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files.sort();
    assert!(files.len() > 20, "src/ holds the hub's files");
    let mut broken = Vec::new();
    for path in &files {
        let rel = path
            .strip_prefix(&src)
            .expect("below src/")
            .to_string_lossy()
            .replace('\\', "/");
        if MAY_NAME_THEM
            .iter()
            .any(|m| rel == *m || (m.ends_with('/') && rel.starts_with(m)))
        {
            continue;
        }
        let text = std::fs::read_to_string(path).expect("a source file");
        for (line, what) in upward(&text, depth(&rel)) {
            broken.push(format!("- src/{rel}:{line} names {what}"));
        }
    }
    assert!(
        broken.is_empty(),
        "below the handlers nothing may name routes or mcp (only routes/, mcp/, serve.rs and \
         lib.rs may) — move what both need into ops/ (an operation), paths.rs (a path) or \
         the module it belongs to, and call it from there:\n{}",
        broken.join("\n")
    );
}

#[test]
fn the_check_finds_each_way_of_naming_them() {
    let named = |text: &str, depth: usize| -> Vec<String> {
        upward(text, depth).into_iter().map(|(_, w)| w).collect()
    };
    assert_eq!(named("use crate::routes::workers;", 1), ["crate::routes"]);
    assert_eq!(named("if path == crate::mcp::PATH {", 1), ["crate::mcp"]);
    assert_eq!(
        named("let w = crate :: routes::workers::list_workers(s);", 2),
        ["crate::routes"]
    );
    assert_eq!(
        named("use crate::{auth::{Caller, X}, state,\n mcp::PATH};", 1),
        ["crate::{mcp}"]
    );
    assert_eq!(named("use super::routes::git;", 1), ["crate::routes"]);
    assert_eq!(named("use super::super::mcp;", 2), ["crate::mcp"]);
    assert_eq!(named("/// See [`crate::mcp`].", 1), ["crate::mcp"]);
    assert_eq!(
        upward("fn f() {}\nuse crate::routes;", 1),
        [(2, "crate::routes".to_string())]
    );
    // Not the handlers: a module's own `routes`, a field, another module of the crate.
    assert!(named("Router::new().merge(super::routes())", 2).is_empty());
    assert!(named("use crate::ops::routes_like; s.gateway.routes", 1).is_empty());
    assert!(named("use crate::{ops::mcp, auth};", 1).is_empty());
    assert!(named("pub fn routes() -> Router { todo!() }", 1).is_empty());
    assert_eq!(depth("lib.rs"), 0);
    assert_eq!(depth("limits.rs"), 1);
    assert_eq!(depth("dashboard/mod.rs"), 1);
    assert_eq!(depth("dashboard/feed.rs"), 2);
}
