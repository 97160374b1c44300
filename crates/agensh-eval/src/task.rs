//! A ProgramBench task: `task.yaml`, `tests.json`, and each test branch's files.
//!
//! A task is a directory (`agensh eval --task DIR`) or an instance id of the installed
//! `programbench` package (its `data/tasks/<id>`). A branch's tests are, in the order looked
//! for: `<blobs>/<id>/tests/<branch>.tar.gz` (ProgramBench's blob layout, `--blobs` or
//! `PROGRAMBENCH_BLOB_DIR`), `<task>/tests/<branch>.tar.gz`, or the directory
//! `<task>/tests/<branch>/` unpacked (as the package ships its fixture). Either way their
//! contents land at the workspace's root (`eval/run.sh`, `eval/tests/...`).

use std::path::{Path, PathBuf};

use agensh_domain::programbench::TestsJson;
use serde::{Deserialize, Serialize};

/// `task.yaml`: the keys ProgramBench's tasks carry; others are kept out of the way.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TaskYaml {
    #[serde(default)]
    pub repository: String,
    #[serde(default)]
    pub commit: String,
    #[serde(default)]
    pub language: String,
    #[serde(default)]
    pub difficulty: Option<String>,
    /// sha256 of files removed from a submission before it is compiled (the reference
    /// executable and its look-alikes).
    #[serde(default)]
    pub eval_clean_hashes: Vec<String>,
}

/// Where one branch's tests come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TestFiles {
    Archive(PathBuf),
    Dir(PathBuf),
}

#[derive(Debug, Clone)]
pub struct Task {
    /// The directory's name: `owner__repo.commit7`.
    pub instance_id: String,
    pub dir: PathBuf,
    pub yaml: TaskYaml,
    pub tests: TestsJson,
    /// `<blobs>/<id>` when a blob directory was given and has this task.
    pub blob_dir: Option<PathBuf>,
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0} is neither a task directory (with task.yaml) nor a task id of the installed programbench package — give a directory holding task.yaml and tests.json, or an id such as testorg__calculator.abc1234")]
    NotFound(String),
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path} is not a valid task.yaml: {detail}")]
    Yaml { path: PathBuf, detail: String },
    #[error("{path} is not a valid tests.json: {detail}")]
    TestsJson { path: PathBuf, detail: String },
    #[error("{id}: eval_clean_hashes holds {hash:?}, which is not a sha256 (64 hex digits)")]
    Hash { id: String, hash: String },
    #[error("the tests of branch {branch} of {id} are not here: looked for {looked} — pass --blobs DIR (ProgramBench's blob directory: DIR/{id}/tests/{branch}.tar.gz) or set PROGRAMBENCH_BLOB_DIR")]
    NoTests {
        id: String,
        branch: String,
        looked: String,
    },
}

impl Task {
    /// Loads `what`: a directory, or an id found under `package_tasks` (the installed
    /// package's `data/tasks`). `blobs` is a ProgramBench blob directory.
    pub fn load(
        what: &str,
        package_tasks: Option<&Path>,
        blobs: Option<&Path>,
    ) -> Result<Self, Error> {
        let as_dir = PathBuf::from(what);
        let dir = if as_dir.join("task.yaml").is_file() {
            as_dir
        } else if let Some(d) = package_tasks
            .map(|t| t.join(what))
            .filter(|d| !what.contains('/') && d.join("task.yaml").is_file())
        {
            d
        } else {
            return Err(Error::NotFound(what.to_string()));
        };
        let dir = dir.canonicalize().map_err(|source| Error::Read {
            path: dir.clone(),
            source,
        })?;
        let instance_id = dir
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default()
            .to_string();
        let yaml_path = dir.join("task.yaml");
        let text = read(&yaml_path)?;
        let yaml: TaskYaml = if text.trim().is_empty() {
            TaskYaml::default()
        } else {
            serde_saphyr::from_str(&text).map_err(|e| Error::Yaml {
                path: yaml_path.clone(),
                detail: e.to_string(),
            })?
        };
        for h in &yaml.eval_clean_hashes {
            if h.len() != 64 || !h.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(Error::Hash {
                    id: instance_id.clone(),
                    hash: h.clone(),
                });
            }
        }
        // Without tests.json a task has no branches, as ProgramBench's loader says.
        let tests_path = dir.join("tests.json");
        let tests = if tests_path.is_file() {
            serde_json::from_str(&read(&tests_path)?).map_err(|e| Error::TestsJson {
                path: tests_path.clone(),
                detail: e.to_string(),
            })?
        } else {
            TestsJson::default()
        };
        let blob_dir = blobs.map(|b| b.join(&instance_id)).filter(|d| d.is_dir());
        Ok(Self {
            instance_id,
            dir,
            yaml,
            tests,
            blob_dir,
        })
    }

    /// The active branches, in tests.json's order (ProgramBench evaluates these).
    pub fn active_branches(&self) -> Vec<String> {
        self.tests.active_branches()
    }

    /// The expected test names of `branch`.
    pub fn expected(&self, branch: &str) -> Option<&[String]> {
        self.tests.branches.get(branch).map(|b| b.tests.as_slice())
    }

    /// Where `branch`'s tests are.
    pub fn test_files(&self, branch: &str) -> Result<TestFiles, Error> {
        let mut places = Vec::new();
        if let Some(b) = &self.blob_dir {
            places.push(TestFiles::Archive(
                b.join("tests").join(format!("{branch}.tar.gz")),
            ));
        }
        places.push(TestFiles::Archive(
            self.dir.join("tests").join(format!("{branch}.tar.gz")),
        ));
        places.push(TestFiles::Dir(self.dir.join("tests").join(branch)));
        for p in &places {
            let found = match p {
                TestFiles::Archive(f) => f.is_file(),
                TestFiles::Dir(d) => d.is_dir(),
            };
            if found {
                return Ok(p.clone());
            }
        }
        Err(Error::NoTests {
            id: self.instance_id.clone(),
            branch: branch.to_string(),
            looked: places
                .iter()
                .map(|p| match p {
                    TestFiles::Archive(f) | TestFiles::Dir(f) => f.display().to_string(),
                })
                .collect::<Vec<_>>()
                .join(", "),
        })
    }
}

fn read(path: &Path) -> Result<String, Error> {
    std::fs::read_to_string(path).map_err(|source| Error::Read {
        path: path.to_path_buf(),
        source,
    })
}
