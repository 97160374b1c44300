//! Checks that the code keeps the promises `ARCHITECTURE.md` makes.
//!
//! [`Workspace`] is what `cargo metadata --format-version 1` says about the packages and
//! their dependency graph; [`CodeMap`] is what `ARCHITECTURE.md` says: one `## crates/<dir>`
//! section per crate, a "Dependency rules" table, a "Test dependency rules" table and a
//! "Test-only crates" table. [`check`] compares the two and lists every broken promise as a
//! [`Violation`].

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde_json::Value;

/// One package of the workspace or its dependency graph.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Package {
    pub name: String,
    /// The `rust-version` it declares, if any (`1.88`, `1.85.1`).
    pub rust_version: Option<String>,
    /// The directory holding its `Cargo.toml`.
    pub dir: String,
    /// Whether it is a member of the workspace.
    pub member: bool,
}

/// A dependency edge: the package it points to, whether any of its kinds is a normal
/// (not dev, not build) dependency, and whether all of them are dev.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Edge {
    to: String,
    normal: bool,
    dev_only: bool,
}

/// The packages and the resolved dependency graph of a workspace.
#[derive(Debug, Clone, Default)]
pub struct Workspace {
    /// By package id.
    packages: BTreeMap<String, Package>,
    /// By package id.
    edges: BTreeMap<String, Vec<Edge>>,
    /// The root directory, to name member directories relative to it.
    root: String,
}

/// What went wrong, parsing either input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError(pub String);

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ParseError {}

fn field<'a>(v: &'a Value, key: &str) -> Result<&'a Value, ParseError> {
    v.get(key).ok_or_else(|| {
        ParseError(format!(
            "cargo metadata has no `{key}` — run it with --format-version 1"
        ))
    })
}

fn string(v: &Value, key: &str) -> Result<String, ParseError> {
    field(v, key)?
        .as_str()
        .map(str::to_string)
        .ok_or_else(|| ParseError(format!("cargo metadata's `{key}` is not a string")))
}

fn array<'a>(v: &'a Value, key: &str) -> Result<&'a Vec<Value>, ParseError> {
    field(v, key)?
        .as_array()
        .ok_or_else(|| ParseError(format!("cargo metadata's `{key}` is not a list")))
}

impl Workspace {
    /// Reads the JSON of `cargo metadata --format-version 1` (with its `resolve` graph).
    pub fn from_metadata(json: &str) -> Result<Workspace, ParseError> {
        let v: Value = serde_json::from_str(json)
            .map_err(|e| ParseError(format!("cargo metadata is not JSON: {e}")))?;
        let root = string(&v, "workspace_root")?;
        let members: BTreeSet<String> = array(&v, "workspace_members")?
            .iter()
            .filter_map(|m| m.as_str().map(str::to_string))
            .collect();
        let mut packages = BTreeMap::new();
        for p in array(&v, "packages")? {
            let id = string(p, "id")?;
            let manifest = string(p, "manifest_path")?;
            let dir = manifest
                .strip_suffix("/Cargo.toml")
                .unwrap_or(&manifest)
                .to_string();
            packages.insert(
                id.clone(),
                Package {
                    name: string(p, "name")?,
                    rust_version: p
                        .get("rust_version")
                        .and_then(Value::as_str)
                        .map(str::to_string),
                    dir,
                    member: members.contains(&id),
                },
            );
        }
        let resolve = field(&v, "resolve")?;
        if resolve.is_null() {
            return Err(ParseError(
                "cargo metadata has no dependency graph — run it without --no-deps".into(),
            ));
        }
        let mut edges = BTreeMap::new();
        for node in array(resolve, "nodes")? {
            let id = string(node, "id")?;
            let mut out = Vec::new();
            for d in array(node, "deps")? {
                let kinds = array(d, "dep_kinds")?;
                let normal = kinds
                    .iter()
                    .any(|k| k.get("kind").is_none_or(Value::is_null));
                let dev_only = kinds
                    .iter()
                    .all(|k| k.get("kind").and_then(Value::as_str) == Some("dev"));
                out.push(Edge {
                    to: string(d, "pkg")?,
                    normal,
                    dev_only,
                });
            }
            edges.insert(id, out);
        }
        Ok(Workspace {
            packages,
            edges,
            root,
        })
    }

    /// The workspace's members, by name.
    pub fn members(&self) -> BTreeSet<String> {
        self.packages
            .values()
            .filter(|p| p.member)
            .map(|p| p.name.clone())
            .collect()
    }

    /// A member by name.
    pub fn member(&self, name: &str) -> Option<&Package> {
        self.packages.values().find(|p| p.member && p.name == name)
    }

    /// A member's directory relative to the workspace root (`crates/agensh-hub`).
    pub fn member_dir(&self, name: &str) -> Option<String> {
        let p = self.member(name)?;
        Some(
            p.dir
                .strip_prefix(&self.root)
                .unwrap_or(&p.dir)
                .trim_start_matches('/')
                .to_string(),
        )
    }

    fn id_of(&self, name: &str) -> Option<&String> {
        self.packages
            .iter()
            .find(|(_, p)| p.member && p.name == name)
            .map(|(id, _)| id)
    }

    /// The names of the direct normal dependencies of member `name`.
    pub fn direct(&self, name: &str) -> BTreeSet<String> {
        let Some(id) = self.id_of(name) else {
            return BTreeSet::new();
        };
        self.edges
            .get(id)
            .into_iter()
            .flatten()
            .filter(|e| e.normal)
            .filter_map(|e| self.packages.get(&e.to).map(|p| p.name.clone()))
            .collect()
    }

    /// Every package member `name` reaches through normal dependencies, with the chain
    /// that reaches it (`agensh-client → agensh-store → rusqlite`).
    pub fn reached(&self, name: &str) -> BTreeMap<String, Vec<String>> {
        self.walk(name, |e, _own| e.normal)
    }

    /// Every package `cargo tree -p <name>` shows: what member `name` reaches through any
    /// dependency of its own (dev dependencies included, as its tests need them), then
    /// through normal and build dependencies, with the chain that reaches it (a dev edge is
    /// marked: `agensh-node → agensh-hub (dev) → agensh-store → rusqlite`).
    pub fn reached_with_tests(&self, name: &str) -> BTreeMap<String, Vec<String>> {
        self.walk(name, |e, own| own || !e.dev_only)
    }

    /// Every package reached from member `name` along the edges `follow` takes (given the
    /// edge and whether it leaves `name` itself), each with the first chain found to it; a
    /// dev-only edge in a chain is marked `(dev)`.
    fn walk(
        &self,
        name: &str,
        follow: impl Fn(&Edge, bool) -> bool,
    ) -> BTreeMap<String, Vec<String>> {
        let mut found = BTreeMap::new();
        let Some(start) = self.id_of(name) else {
            return found;
        };
        let mut stack = vec![(start.clone(), vec![name.to_string()])];
        let mut seen = BTreeSet::from([start.clone()]);
        while let Some((id, chain)) = stack.pop() {
            for e in self.edges.get(&id).into_iter().flatten() {
                if !follow(e, &id == start) || !seen.insert(e.to.clone()) {
                    continue;
                }
                let Some(p) = self.packages.get(&e.to) else {
                    continue;
                };
                let mut next = chain.clone();
                next.push(if e.dev_only {
                    format!("{} (dev)", p.name)
                } else {
                    p.name.clone()
                });
                found.entry(p.name.clone()).or_insert_with(|| next.clone());
                stack.push((e.to.clone(), next));
            }
        }
        found
    }

    /// Every package any member needs to build any target (dev dependencies included).
    fn all_needed(&self) -> BTreeSet<&String> {
        let mut seen: BTreeSet<&String> = BTreeSet::new();
        let mut stack: Vec<&String> = self
            .packages
            .iter()
            .filter(|(_, p)| p.member)
            .map(|(id, _)| id)
            .collect();
        while let Some(id) = stack.pop() {
            if !seen.insert(id) {
                continue;
            }
            for e in self.edges.get(id).into_iter().flatten() {
                stack.push(&e.to);
            }
        }
        seen
    }
}

/// One row of the "Dependency rules" table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    pub krate: String,
    /// The only direct normal dependencies allowed; `None` when any are.
    pub only: Option<BTreeSet<String>>,
    /// Packages it must never reach through normal dependencies.
    pub never: BTreeSet<String>,
}

/// What `ARCHITECTURE.md` says about the crates.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CodeMap {
    /// Directories of the `## crates/<dir>` sections, in order.
    pub sections: Vec<String>,
    /// Every `crates/<dir>` the text mentions anywhere.
    pub mentioned: BTreeSet<String>,
    /// Every crate name (`agensh-…`) the text mentions outside a path.
    pub named: BTreeSet<String>,
    pub rules: Vec<Rule>,
    /// The rows of the "Test dependency rules" table: (crate, what it must never reach, not
    /// even through the dev dependencies of its own tests).
    pub test_rules: Vec<(String, BTreeSet<String>)>,
    /// The rows of the "Test-only crates" table: (a crate for tests only, the crates that
    /// may still have it as a normal dependency). Any other crate may use it only through
    /// dev-dependencies.
    pub test_only: Vec<(String, BTreeSet<String>)>,
}

/// The heading of the table [`CodeMap::parse`] reads the rules from.
pub const RULES_HEADING: &str = "## Dependency rules";

/// The heading of the table [`CodeMap::parse`] reads the rules that hold for tests too.
pub const TEST_RULES_HEADING: &str = "## Test dependency rules";

/// The heading of the table [`CodeMap::parse`] reads the crates for tests only from.
pub const TEST_ONLY_HEADING: &str = "## Test-only crates";

/// The rows of the first table after `heading`, split into trimmed cells (header and
/// separator rows left out), or `None` when `text` has no such heading.
fn table_rows(text: &str, heading: &str) -> Option<Vec<Vec<String>>> {
    let start = text.find(heading)?;
    let rows = text[start..]
        .lines()
        .skip(1)
        .skip_while(|l| !l.trim_start().starts_with('|'))
        .take_while(|l| l.trim_start().starts_with('|'))
        .map(|row| {
            row.trim()
                .trim_matches('|')
                .split('|')
                .map(|c| c.trim().to_string())
                .collect::<Vec<String>>()
        })
        .filter(|cells| {
            let first = cells[0].trim_matches('`');
            first != "crate" && !first.starts_with("---")
        })
        .collect();
    Some(rows)
}

fn list(cell: &str) -> BTreeSet<String> {
    cell.split(',')
        .map(|s| s.trim().trim_matches('`').to_string())
        .filter(|s| !s.is_empty())
        .collect()
}

/// The rows of the two-column table after `heading`: a crate and a list of crates each.
/// `what` says what the table is, `row` how to write a row, for the errors.
fn crate_lists(
    text: &str,
    heading: &str,
    what: &str,
    row: &str,
) -> Result<Vec<(String, BTreeSet<String>)>, ParseError> {
    let Some(table) = table_rows(text, heading) else {
        return Err(ParseError(format!(
            "ARCHITECTURE.md has no \"{heading}\" section — add {what}"
        )));
    };
    table
        .into_iter()
        .map(|cells| {
            if cells.len() != 2 {
                return Err(ParseError(format!(
                    "row `| {} |` of \"{heading}\" has {} cells — write {row}",
                    cells.join(" | "),
                    cells.len()
                )));
            }
            Ok((cells[0].trim_matches('`').to_string(), list(&cells[1])))
        })
        .collect()
}

impl CodeMap {
    /// Reads the sections, the `crates/<dir>` mentions and the three tables. The rules
    /// table's rows are `| crate | depends only on | never reaches |`; `any` in the middle
    /// column allows every dependency, `nothing` none, and an empty last cell forbids
    /// nothing. The test rules' rows are `| crate | never reaches, tests included |`, the
    /// test-only crates' `| crate | a normal dependency only of |`.
    pub fn parse(text: &str) -> Result<CodeMap, ParseError> {
        let mut map = CodeMap::default();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("## crates/") {
                let dir: String = rest
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '_')
                    .collect();
                map.sections.push(dir);
            }
            let mut rest = line;
            while let Some(at) = rest.find("crates/") {
                let after = &rest[at + "crates/".len()..];
                let dir: String = after
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '_')
                    .collect();
                if !dir.is_empty() && (at == 0 || !rest.as_bytes()[at - 1].is_ascii_alphanumeric())
                {
                    map.mentioned.insert(dir.clone());
                }
                rest = &after[dir.len()..];
            }
            let bytes = line.as_bytes();
            for (at, _) in line.match_indices("agensh-") {
                let before = if at == 0 { b' ' } else { bytes[at - 1] };
                if before.is_ascii_alphanumeric() || matches!(before, b'/' | b'.' | b'_' | b'-') {
                    continue;
                }
                let name: String = line[at..]
                    .chars()
                    .take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '-')
                    .collect();
                map.named.insert(name.trim_end_matches('-').to_string());
            }
        }
        let Some(table) = table_rows(text, RULES_HEADING) else {
            return Err(ParseError(format!(
                "ARCHITECTURE.md has no \"{RULES_HEADING}\" section — add the table of which crate may depend on what"
            )));
        };
        for cells in table {
            if cells.len() != 3 {
                return Err(ParseError(format!(
                    "rules row `| {} |` has {} cells — write | crate | depends only on | never reaches |",
                    cells.join(" | "),
                    cells.len()
                )));
            }
            let only = match cells[1].as_str() {
                "any" => None,
                "nothing" => Some(BTreeSet::new()),
                other => Some(list(other)),
            };
            map.rules.push(Rule {
                krate: cells[0].trim_matches('`').to_string(),
                only,
                never: list(&cells[2]),
            });
        }
        if map.rules.is_empty() {
            return Err(ParseError(format!(
                "the \"{RULES_HEADING}\" section has no table rows"
            )));
        }
        map.test_rules = crate_lists(
            text,
            TEST_RULES_HEADING,
            "the table of what a crate must not reach even in its tests",
            "| crate | never reaches, tests included |",
        )?;
        map.test_only = crate_lists(
            text,
            TEST_ONLY_HEADING,
            "the table of the crates for tests only and the crates that may still depend on them",
            "| crate | a normal dependency only of |",
        )?;
        Ok(map)
    }
}

/// A broken promise, said so that the fix is obvious.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation(pub String);

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Parses `1.88` or `1.85.1` into comparable numbers.
fn version(v: &str) -> Vec<u64> {
    let mut parts: Vec<u64> = v.split('.').map(|p| p.parse().unwrap_or(0)).collect();
    parts.resize(3, 0);
    parts
}

/// Compares the workspace with its code map. `has_readme` tells whether a member's
/// directory (relative to the root) holds a README.md.
pub fn check(ws: &Workspace, map: &CodeMap, has_readme: &dyn Fn(&str) -> bool) -> Vec<Violation> {
    let mut out = Vec::new();
    let members = ws.members();
    let dirs: BTreeMap<String, String> = members
        .iter()
        .filter_map(|m| Some((ws.member_dir(m)?, m.clone())))
        .collect();

    for (dir, name) in &dirs {
        let Some(dir_name) = dir.strip_prefix("crates/") else {
            continue;
        };
        if !map.sections.iter().any(|s| s == dir_name) {
            out.push(Violation(format!(
                "ARCHITECTURE.md has no `## {dir}` section for the crate {name} — describe what it owns and must not depend on"
            )));
        }
        if !has_readme(dir) {
            out.push(Violation(format!(
                "{dir} has no README.md — a few lines on what the crate is for"
            )));
        }
    }
    for dir in map.mentioned.iter() {
        if !dirs.contains_key(&format!("crates/{dir}")) {
            out.push(Violation(format!(
                "ARCHITECTURE.md names crates/{dir}, which is not a crate of the workspace — remove or rename it"
            )));
        }
    }

    for name in &map.named {
        if !members.contains(name) && !dirs.contains_key(&format!("crates/{name}")) {
            out.push(Violation(format!(
                "ARCHITECTURE.md names {name}, which is not a crate of the workspace — remove or rename it"
            )));
        }
    }

    for rule in &map.rules {
        if !members.contains(&rule.krate) {
            out.push(Violation(format!(
                "the dependency rules name {}, which is not a crate of the workspace",
                rule.krate
            )));
            continue;
        }
        if let Some(only) = &rule.only {
            for dep in ws.direct(&rule.krate) {
                if !only.contains(&dep) {
                    out.push(Violation(format!(
                        "{} depends on {dep}, which its row in ARCHITECTURE.md's dependency rules does not allow — drop the dependency or add it to the row (and say why in the dependency table)",
                        rule.krate
                    )));
                }
            }
        }
        let reached = ws.reached(&rule.krate);
        for banned in &rule.never {
            if let Some(chain) = reached.get(banned) {
                out.push(Violation(format!(
                    "{} must never reach {banned}, but does: {}",
                    rule.krate,
                    chain.join(" → ")
                )));
            }
        }
    }
    for (krate, never) in &map.test_rules {
        if !members.contains(krate) {
            out.push(Violation(format!(
                "the test dependency rules name {krate}, which is not a crate of the workspace"
            )));
            continue;
        }
        let reached = ws.reached_with_tests(krate);
        for banned in never {
            if let Some(chain) = reached.get(banned) {
                out.push(Violation(format!(
                    "{krate} must never reach {banned}, not even in its tests, but does: {} — move the tests that need it to agensh-e2e",
                    chain.join(" → ")
                )));
            }
        }
    }
    for (krate, allowed) in &map.test_only {
        for name in std::iter::once(krate).chain(allowed) {
            if !members.contains(name) {
                out.push(Violation(format!(
                    "the test-only crates name {name}, which is not a crate of the workspace"
                )));
            }
        }
        for m in &members {
            if m == krate || allowed.contains(m) {
                continue;
            }
            if let Some(chain) = ws.reached(m).get(krate) {
                out.push(Violation(format!(
                    "{m} reaches {krate} through normal dependencies ({}), but {krate} is for tests only — make it a [dev-dependencies] entry",
                    chain.join(" → ")
                )));
            }
        }
    }
    for m in &members {
        if !map.rules.iter().any(|r| &r.krate == m) {
            out.push(Violation(format!(
                "{m} has no row in ARCHITECTURE.md's dependency rules — say what it may depend on"
            )));
        }
    }

    let needed = ws.all_needed();
    let newest = needed
        .iter()
        .filter_map(|id| {
            let p = ws.packages.get(*id)?;
            Some((p.rust_version.as_deref()?, &p.name))
        })
        .max_by(|a, b| version(a.0).cmp(&version(b.0)));
    for m in &members {
        let p = ws.member(m).expect("a member");
        match (&p.rust_version, newest) {
            (None, _) => out.push(Violation(format!(
                "{m} declares no rust-version — add `rust-version.workspace = true` to its Cargo.toml"
            ))),
            (Some(own), Some((need, by))) if version(own) < version(need) => {
                out.push(Violation(format!(
                    "{m} says rust-version {own}, but {by} needs {need} — raise the workspace's rust-version"
                )))
            }
            _ => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A made-up workspace: `packages` are (name, rust_version, member), `deps` are
    /// (from, to, kind) with kind `None` for normal dependencies.
    fn workspace(
        packages: &[(&str, Option<&str>, bool)],
        deps: &[(&str, &str, Option<&str>)],
    ) -> Workspace {
        let id = |n: &str| format!("{n}-id");
        let pkgs: Vec<Value> = packages
            .iter()
            .map(|(n, rv, member)| {
                let dir = if *member { format!("/ws/crates/{n}") } else { format!("/reg/{n}") };
                json!({"id": id(n), "name": n, "rust_version": rv, "manifest_path": format!("{dir}/Cargo.toml")})
            })
            .collect();
        let nodes: Vec<Value> = packages
            .iter()
            .map(|(n, _, _)| {
                let d: Vec<Value> = deps
                    .iter()
                    .filter(|(from, _, _)| from == n)
                    .map(|(_, to, kind)| json!({"pkg": id(to), "dep_kinds": [{"kind": kind}]}))
                    .collect();
                json!({"id": id(n), "deps": d})
            })
            .collect();
        let members: Vec<String> = packages.iter().filter(|p| p.2).map(|p| id(p.0)).collect();
        let meta = json!({"packages": pkgs, "workspace_members": members, "workspace_root": "/ws", "resolve": {"nodes": nodes}});
        Workspace::from_metadata(&meta.to_string()).unwrap()
    }

    const MAP: &str = "\
## crates/core — the core
## crates/app — the app, see crates/core
## Dependency rules
| crate | depends only on | never reaches |
| --- | --- | --- |
| core | serde | |
| app | any | sqlite |
## Test dependency rules
| crate | never reaches, tests included |
| --- | --- |
| core | db |
## Test-only crates
| crate | a normal dependency only of |
| --- | --- |
| core | app |
";

    fn violations(ws: &Workspace, map: &str) -> Vec<String> {
        check(ws, &CodeMap::parse(map).unwrap(), &|_| true)
            .into_iter()
            .map(|v| v.0)
            .collect()
    }

    fn clean() -> Workspace {
        workspace(
            &[
                ("core", Some("1.88"), true),
                ("app", Some("1.88"), true),
                ("serde", Some("1.60"), false),
            ],
            &[("core", "serde", None), ("app", "core", None)],
        )
    }

    #[test]
    fn a_workspace_that_keeps_its_map_has_no_violations() {
        assert_eq!(violations(&clean(), MAP), Vec::<String>::new());
    }

    #[test]
    fn a_dependency_outside_the_allowed_list_is_reported() {
        let ws = workspace(
            &[
                ("core", Some("1.88"), true),
                ("app", Some("1.88"), true),
                ("serde", None, false),
                ("tokio", None, false),
            ],
            &[
                ("core", "serde", None),
                ("core", "tokio", None),
                ("app", "core", None),
            ],
        );
        let v = violations(&ws, MAP);
        assert_eq!(v.len(), 1, "{v:?}");
        assert!(v[0].starts_with("core depends on tokio"), "{v:?}");
    }

    #[test]
    fn a_dev_dependency_is_not_a_dependency_of_the_crate() {
        let ws = workspace(
            &[
                ("core", Some("1.88"), true),
                ("app", Some("1.88"), true),
                ("serde", None, false),
                ("tempfile", None, false),
            ],
            &[
                ("core", "serde", None),
                ("core", "tempfile", Some("dev")),
                ("app", "core", None),
            ],
        );
        assert_eq!(violations(&ws, MAP), Vec::<String>::new());
    }

    #[test]
    fn a_banned_crate_reached_through_a_chain_is_reported_with_the_chain() {
        let ws = workspace(
            &[
                ("core", Some("1.88"), true),
                ("app", Some("1.88"), true),
                ("serde", None, false),
                ("sqlite", None, false),
            ],
            &[
                ("core", "serde", None),
                ("serde", "sqlite", None),
                ("app", "core", None),
            ],
        );
        let v = violations(&ws, MAP);
        assert_eq!(
            v,
            vec!["app must never reach sqlite, but does: app → core → serde → sqlite".to_string()]
        );
    }

    #[test]
    fn a_banned_crate_reached_through_a_dev_dependency_of_the_crates_tests_is_reported() {
        let ws = workspace(
            &[
                ("core", Some("1.88"), true),
                ("app", Some("1.88"), true),
                ("serde", None, false),
                ("store", None, false),
                ("db", None, false),
            ],
            &[
                ("core", "serde", None),
                ("core", "store", Some("dev")),
                ("store", "db", Some("build")),
                ("app", "core", None),
            ],
        );
        let v = violations(&ws, MAP);
        assert_eq!(
            v,
            vec!["core must never reach db, not even in its tests, but does: core → store (dev) → db — move the tests that need it to agensh-e2e".to_string()]
        );
    }

    #[test]
    fn the_dev_dependencies_of_a_dependency_are_not_reached() {
        let ws = workspace(
            &[
                ("core", Some("1.88"), true),
                ("app", Some("1.88"), true),
                ("serde", None, false),
                ("db", None, false),
            ],
            &[
                ("core", "serde", None),
                ("serde", "db", Some("dev")),
                ("app", "core", None),
            ],
        );
        assert_eq!(violations(&ws, MAP), Vec::<String>::new());
    }

    #[test]
    fn a_map_without_test_rules_is_an_error_that_says_what_to_add() {
        let map = MAP.split("## Test dependency rules").next().unwrap();
        let err = CodeMap::parse(map).unwrap_err();
        assert!(
            err.0.contains("no \"## Test dependency rules\" section"),
            "{err}"
        );
    }

    /// [`MAP`] with a test kit, `kit`, that `bench` may link and `app` and `core` use in
    /// their tests.
    fn with_kit(extra: &[(&str, &str, Option<&str>)]) -> (Workspace, String) {
        let mut deps = vec![
            ("core", "serde", None),
            ("app", "core", None),
            ("kit", "core", None),
            ("app", "kit", Some("dev")),
            ("core", "kit", Some("dev")),
            ("bench", "kit", None),
        ];
        deps.extend_from_slice(extra);
        let ws = workspace(
            &[
                ("core", Some("1.88"), true),
                ("app", Some("1.88"), true),
                ("kit", Some("1.88"), true),
                ("bench", Some("1.88"), true),
                ("serde", None, false),
            ],
            &deps,
        );
        let map = MAP
            .replace(
                "## Dependency rules",
                "## crates/kit — for tests\n## crates/bench — benchmarks\n## Dependency rules",
            )
            .replace(
                "| app | any | sqlite |",
                "| app | any | sqlite |\n| kit | any | |\n| bench | any | |",
            )
            .replace("| core | app |", "| kit | bench |");
        (ws, map)
    }

    #[test]
    fn a_test_only_crate_in_tests_and_in_the_crates_allowed_is_no_violation() {
        let (ws, map) = with_kit(&[]);
        assert_eq!(violations(&ws, &map), Vec::<String>::new());
    }

    #[test]
    fn a_test_only_crate_as_a_normal_dependency_is_reported_with_the_chain() {
        let (ws, map) = with_kit(&[("app", "kit", None)]);
        assert_eq!(
            violations(&ws, &map),
            vec!["app reaches kit through normal dependencies (app → kit), but kit is for tests only — make it a [dev-dependencies] entry".to_string()]
        );
        // Through a crate that may depend on it: the chain says which.
        let (ws, map) = with_kit(&[("app", "bench", None)]);
        assert_eq!(
            violations(&ws, &map),
            vec!["app reaches kit through normal dependencies (app → bench → kit), but kit is for tests only — make it a [dev-dependencies] entry".to_string()]
        );
    }

    #[test]
    fn a_test_only_table_naming_no_crate_of_the_workspace_is_reported() {
        let (ws, map) = with_kit(&[]);
        let map = map.replace("| kit | bench |", "| kit | bench, gone |");
        assert_eq!(
            violations(&ws, &map),
            vec![
                "the test-only crates name gone, which is not a crate of the workspace".to_string()
            ]
        );
        let map = MAP.split("## Test-only crates").next().unwrap();
        let err = CodeMap::parse(map).unwrap_err();
        assert!(
            err.0.contains("no \"## Test-only crates\" section"),
            "{err}"
        );
    }

    #[test]
    fn a_crate_missing_from_the_map_and_a_map_entry_without_a_crate_are_reported() {
        let ws = workspace(
            &[
                ("core", Some("1.88"), true),
                ("app", Some("1.88"), true),
                ("extra", Some("1.88"), true),
                ("serde", None, false),
            ],
            &[("core", "serde", None), ("app", "core", None)],
        );
        let map =
            format!("{MAP}\nSee crates/gone for more, and agensh-lost; not .git/agensh-x/.\n");
        let v = violations(&ws, &map);
        assert!(
            v.iter().any(|s| s.contains("no `## crates/extra` section")),
            "{v:?}"
        );
        assert!(v.iter().any(|s| s.starts_with("extra has no row")), "{v:?}");
        assert!(v.iter().any(|s| s.contains("names crates/gone")), "{v:?}");
        assert!(v.iter().any(|s| s.contains("names agensh-lost")), "{v:?}");
        assert!(
            !v.iter().any(|s| s.contains("agensh-x")),
            "a path is not a crate name: {v:?}"
        );
    }

    #[test]
    fn a_rust_version_older_than_a_test_dependency_needs_is_reported() {
        let ws = workspace(
            &[
                ("core", Some("1.85"), true),
                ("app", Some("1.85"), true),
                ("serde", None, false),
                ("rmcp", Some("1.88"), false),
            ],
            &[
                ("core", "serde", None),
                ("app", "core", None),
                ("app", "rmcp", Some("dev")),
            ],
        );
        let v = violations(&ws, MAP);
        assert_eq!(v.len(), 2, "{v:?}");
        assert!(v[0].contains("rmcp needs 1.88"), "{v:?}");
    }

    #[test]
    fn versions_compare_as_numbers_whatever_their_length() {
        assert_eq!(version("1.88"), version("1.88.0"));
        assert!(version("1.88") < version("1.88.1"));
        assert!(version("1.9") < version("1.88"));
    }

    #[test]
    fn a_crate_without_a_readme_or_rust_version_is_reported() {
        let ws = workspace(
            &[
                ("core", None, true),
                ("app", Some("1.88"), true),
                ("serde", None, false),
            ],
            &[("core", "serde", None), ("app", "core", None)],
        );
        let map = CodeMap::parse(MAP).unwrap();
        let v: Vec<String> = check(&ws, &map, &|dir| dir != "crates/app")
            .into_iter()
            .map(|v| v.0)
            .collect();
        assert!(
            v.iter()
                .any(|s| s.starts_with("crates/app has no README.md")),
            "{v:?}"
        );
        assert!(
            v.iter()
                .any(|s| s.starts_with("core declares no rust-version")),
            "{v:?}"
        );
    }

    #[test]
    fn a_map_without_rules_is_an_error_that_says_what_to_add() {
        let err = CodeMap::parse("## crates/core — x\n").unwrap_err();
        assert!(
            err.0.contains("no \"## Dependency rules\" section"),
            "{err}"
        );
    }
}
