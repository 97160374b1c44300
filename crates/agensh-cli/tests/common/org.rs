//! An organization directory made by the real `agensh init`, for tests that run the binary:
//! its seed, its issues and its agensh.toml settings, the scenario its scripted agents
//! read, and what the run leaves behind (turn logs, the bare repository, the store).

use std::path::{Path, PathBuf};
use std::process::Command;

use agensh_testkit::scenario::Scenario;
use serde_json::Value;
use tempfile::TempDir;

use super::{agensh, json_lines, run_in, set_setting, stderr, stdout};

/// How to make an [`OrgDir`]: by default `agensh init ORG --goal GOAL` and nothing else.
pub struct NewOrgDir {
    goal: String,
    name: String,
    seed: Vec<(String, String)>,
    issues: Option<String>,
    settings: Vec<(String, Option<String>, String)>,
}

impl NewOrgDir {
    /// The directory's name in the temporary folder (`org` unless given).
    pub fn named(mut self, name: &str) -> Self {
        self.name = name.to_string();
        self
    }

    /// A file of the seed (`src/` beside the organization, given to `init --from`).
    pub fn seed(mut self, path: &str, text: &str) -> Self {
        self.seed.push((path.to_string(), text.to_string()));
        self
    }

    /// Issues to open at init (`init --issues FILE`, the file written as `issues.toml`).
    pub fn issues(mut self, toml: &str) -> Self {
        self.issues = Some(toml.to_string());
        self
    }

    /// `key = value` in agensh.toml, on the line `init` wrote for it (see [`set_setting`]).
    pub fn setting(mut self, key: &str, value: &str) -> Self {
        self.settings
            .push((key.to_string(), None, value.to_string()));
        self
    }

    /// Several [`setting`](Self::setting)s, in order.
    pub fn settings(mut self, settings: &[(&str, &str)]) -> Self {
        for (key, value) in settings {
            self = self.setting(key, value);
        }
        self
    }

    /// `key = value` in agensh.toml's `[section]` table (see [`set_setting_in`]).
    pub fn setting_in(mut self, section: &str, key: &str, value: &str) -> Self {
        self.settings.push((
            key.to_string(),
            Some(section.to_string()),
            value.to_string(),
        ));
        self
    }

    /// Runs `agensh init` (failing the test if it fails), then sets the settings.
    pub fn init(self) -> OrgDir {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().join(&self.name);
        let mut init = agensh();
        init.args(["init", dir.to_str().unwrap(), "--goal", &self.goal]);
        if !self.seed.is_empty() {
            let src = tmp.path().join("src");
            let files: Vec<(&str, &str)> = self
                .seed
                .iter()
                .map(|(p, t)| (p.as_str(), t.as_str()))
                .collect();
            write_files(&src, &files);
            init.arg("--from").arg(&src);
        }
        if let Some(issues) = &self.issues {
            let file = tmp.path().join("issues.toml");
            std::fs::write(&file, issues).unwrap();
            init.arg("--issues").arg(&file);
        }
        let out = init.output().expect("init runs");
        assert!(out.status.success(), "init failed: {}", stderr(&out));
        for (key, section, value) in &self.settings {
            match section {
                None => set_setting(&dir, key, value),
                Some(section) => set_setting_in(&dir, section, key, value),
            }
        }
        OrgDir { tmp, dir }
    }
}

/// An organization directory in a temporary folder, made with `agensh init`.
pub struct OrgDir {
    /// Holds the organization and whatever a test puts beside it; removed when dropped.
    pub tmp: TempDir,
    /// The organization's directory (`org/` in the temporary folder unless named).
    pub dir: PathBuf,
}

impl OrgDir {
    /// Starts describing an organization whose goal is `goal`; [`NewOrgDir::init`] makes it.
    pub fn builder(goal: &str) -> NewOrgDir {
        NewOrgDir {
            goal: goal.to_string(),
            name: "org".to_string(),
            seed: Vec::new(),
            issues: None,
            settings: Vec::new(),
        }
    }

    /// `agensh init ORG --goal GOAL` and nothing else.
    pub fn new(goal: &str) -> OrgDir {
        Self::builder(goal).init()
    }

    /// The temporary folder the organization is in.
    pub fn tmp(&self) -> &Path {
        self.tmp.path()
    }

    /// `name` in the temporary folder, beside the organization.
    pub fn beside(&self, name: &str) -> PathBuf {
        self.tmp.path().join(name)
    }

    /// Writes the scripted agent's scenario as `scenario.toml` beside the organization.
    pub fn scenario(&self, scenario: &Scenario) -> PathBuf {
        self.scenario_text(&scenario.to_toml())
    }

    /// Writes a scenario file's text as `scenario.toml` beside the organization.
    pub fn scenario_text(&self, text: &str) -> PathBuf {
        let path = self.beside("scenario.toml");
        std::fs::write(&path, text).unwrap();
        path
    }

    /// Runs `agensh ARGS` in the organization; fails the test unless it succeeds; its stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        ok_in(&self.dir, args)
    }

    /// Every entry of `worker`'s turn log (none when it has none).
    pub fn turn_log(&self, worker: &str) -> Vec<Value> {
        turn_log(&self.dir, worker)
    }

    /// The bare repository's path.
    pub fn bare(&self) -> PathBuf {
        bare(&self.dir)
    }

    /// Runs git on the bare repository; fails unless it succeeds; its output.
    pub fn bare_git(&self, args: &[&str]) -> String {
        let bare = self.bare();
        let mut all = vec!["--git-dir", bare.to_str().unwrap()];
        all.extend(args);
        git(self.tmp.path(), &all)
    }

    /// The commit `main` is at, trimmed.
    pub fn main_commit(&self) -> String {
        self.bare_git(&["rev-parse", "main"]).trim().to_string()
    }

    /// `git fsck` of the bare repository finds nothing wrong.
    pub fn assert_fsck_clean(&self) {
        self.bare_git(&["fsck", "--no-progress"]);
    }

    /// The organization's store, opened directly (no hub needs to run).
    pub fn store(&self) -> agensh_store::SqliteStore {
        agensh_store::SqliteStore::open(&self.dir.join(".agensh/store.sqlite"))
            .expect("the store opens")
    }
}

/// Writes `files` (path, text) under `dir`, making directories as needed.
pub fn write_files(dir: &Path, files: &[(&str, &str)]) {
    for (path, text) in files {
        let path = dir.join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
}

/// Runs `agensh ARGS` in `dir`; fails the test unless it succeeds; its stdout.
pub fn ok_in(dir: &Path, args: &[&str]) -> String {
    let out = run_in(dir, args);
    assert!(out.status.success(), "{args:?}: {}", stderr(&out));
    stdout(&out)
}

/// Every entry of `worker`'s turn log under `dir` (an organization's or a node's
/// directory); none when it has none.
pub fn turn_log(dir: &Path, worker: &str) -> Vec<Value> {
    json_lines(&dir.join(".agensh/logs").join(worker).join("turns.jsonl"))
}

/// The entries of `worker`'s turn log that are finished turns (they have a `turn`).
pub fn finished_turns(dir: &Path, worker: &str) -> Vec<Value> {
    turn_log(dir, worker)
        .into_iter()
        .filter(|l| l.get("turn").is_some())
        .collect()
}

/// The bare repository of the organization in `dir`.
pub fn bare(dir: &Path) -> PathBuf {
    dir.join(".agensh/workspace.git")
}

/// Runs `git ARGS` in `dir`; fails the test unless it succeeds; its output.
pub fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .current_dir(dir)
        .args(args)
        .output()
        .unwrap();
    assert!(out.status.success(), "git {args:?}: {}", stderr(&out));
    stdout(&out)
}

/// Sets `key = value` in the `[section]` table of the organization's agensh.toml, on the
/// first line of the table that starts with the key.
pub fn set_setting_in(dir: &Path, section: &str, key: &str, value: &str) {
    let path = dir.join("agensh.toml");
    let mut text = std::fs::read_to_string(&path).unwrap();
    let at = text
        .find(&format!("[{section}]\n"))
        .unwrap_or_else(|| panic!("no [{section}] in agensh.toml"));
    let line = text[at..]
        .find(&format!("\n{key} = "))
        .map(|i| at + i + 1)
        .unwrap_or_else(|| panic!("no {key} in [{section}] of agensh.toml"));
    let end = line + text[line..].find('\n').unwrap();
    text.replace_range(line..end, &format!("{key} = {value}"));
    std::fs::write(path, text).unwrap();
}

/// A future run to its end, for tests that run no runtime: on one runtime all the tests of
/// a file share, so that a client's connections outlive the call that made them.
pub fn block_on<F: std::future::Future>(future: F) -> F::Output {
    static RUNTIME: std::sync::OnceLock<tokio::runtime::Runtime> = std::sync::OnceLock::new();
    RUNTIME
        .get_or_init(|| tokio::runtime::Runtime::new().expect("a runtime"))
        .block_on(future)
}
