//! The test environment: what ProgramBench's official images give a test run, installed by
//! agensh into its data directory — a Python virtual environment with pytest and the
//! plugins its generated `run.sh` files and its grader use, at pinned versions, and the
//! `programbench` package itself (its task data, and the grader's pytest plugin, which the
//! evaluator places in each branch's `/tmp` exactly as ProgramBench does).
//!
//! Layout: `<data>/programbench-1.2.5/venv/` (the same venv CI's scorer tier uses), with
//! `agensh-eval-env.json` in it once everything imported, and
//! `<data>/programbench-1.2.5/programbench_pytest_timeout.py`, the plugin's source as the
//! package defines it.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// The `programbench` package whose steps the evaluator repeats.
pub const PROGRAMBENCH_VERSION: &str = "1.2.5";

/// What the venv holds. pytest is the version the package's own sample evaluations report;
/// `pytest-rerunfailures` is the version the grader pins (a later one writes an empty
/// `<testcase/>` per rerun, which reads as a pass); pytest-xdist and pytest-timeout are
/// the plugins every official test image carries.
pub const PACKAGES: &[&str] = &[
    "programbench==1.2.5",
    "pytest==9.0.3",
    "pytest-xdist==3.8.0",
    "pytest-timeout==2.4.0",
    "pytest-rerunfailures==16.4",
];

/// The grader's plugin module, as `-p` names it.
pub const PLUGIN_MODULE: &str = "programbench_pytest_timeout";

const MARKER: &str = "agensh-eval-env.json";

/// An installed test environment.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TestEnv {
    /// The venv; its `bin` goes first on the test run's `PATH`.
    pub venv: PathBuf,
    /// The installed `programbench` package's directory (its `data/tasks/<id>` are tasks).
    pub package_dir: PathBuf,
    /// The grader plugin's file.
    pub plugin: PathBuf,
    /// The packages it was made with ([`PACKAGES`] at the time).
    pub packages: Vec<String>,
}

impl TestEnv {
    pub fn bin(&self) -> PathBuf {
        self.venv.join("bin")
    }

    pub fn python(&self) -> PathBuf {
        self.bin().join("python")
    }

    /// The directory of the package's task `id`, if it has one.
    pub fn task_dir(&self, id: &str) -> Option<PathBuf> {
        let d = self.package_dir.join("data").join("tasks").join(id);
        d.join("task.yaml").is_file().then_some(d)
    }

    /// Every task id the package holds, sorted.
    pub fn task_ids(&self) -> Vec<String> {
        let mut ids: Vec<String> = std::fs::read_dir(self.package_dir.join("data").join("tasks"))
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| e.path().join("task.yaml").is_file())
            .filter_map(|e| e.file_name().to_str().map(String::from))
            .collect();
        ids.sort();
        ids
    }
}

/// Where the environment lives under `data_dir`.
pub fn home(data_dir: &Path) -> PathBuf {
    data_dir.join(format!("programbench-{PROGRAMBENCH_VERSION}"))
}

/// The environment under `data_dir`, if it is complete and made with today's [`PACKAGES`].
pub fn installed(data_dir: &Path) -> Option<TestEnv> {
    let venv = home(data_dir).join("venv");
    let text = std::fs::read_to_string(venv.join(MARKER)).ok()?;
    let env: TestEnv = serde_json::from_str(&text).ok()?;
    let current = env
        .packages
        .iter()
        .map(String::as_str)
        .eq(PACKAGES.iter().copied());
    (current && env.python().exists() && env.plugin.is_file() && env.package_dir.is_dir())
        .then_some(env)
}

/// Why the environment could not be made.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Python(#[from] agensh_model::Error),
    #[error("the test environment's python cannot {what}: {detail}")]
    Check { what: &'static str, detail: String },
    #[error("cannot write {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// Makes the environment (or finds it made): a venv, `pip install` of [`PACKAGES`], then
/// the package's directory and plugin source read from the venv's python. `on_step` hears
/// what is being done and pip's lines.
pub async fn ensure(data_dir: &Path, mut on_step: impl FnMut(&str)) -> Result<TestEnv, Error> {
    if let Some(env) = installed(data_dir) {
        return Ok(env);
    }
    let home = home(data_dir);
    let venv = home.join("venv");
    let python = venv.join("bin").join("python");
    std::fs::create_dir_all(&home).map_err(|source| Error::Write {
        path: home.clone(),
        source,
    })?;
    if !python.exists() {
        on_step("creating the Python virtual environment");
        let base = agensh_model::find_python().await?;
        agensh_model::create_venv(&base, &venv).await?;
    }
    on_step("installing programbench, pytest and its plugins");
    let mut args = vec!["install", "-q"];
    args.extend(PACKAGES);
    agensh_model::pip(&python, &args, &PACKAGES.join(" "), &mut on_step).await?;
    on_step("reading the package");
    let package_dir = PathBuf::from(
        python_says(
            &python,
            "import os, programbench; print(os.path.dirname(programbench.__file__))",
            "import programbench",
        )
        .await?
        .trim(),
    );
    let source = python_says(
        &python,
        "import sys; from programbench.eval import pytest_timeout_retry as p; \
         sys.stdout.write(p.PYTEST_TIMEOUT_RETRY_PLUGIN_SOURCE)",
        "read the grader's pytest plugin from programbench",
    )
    .await?;
    python_says(
        &python,
        "import pytest, xdist, pytest_timeout, pytest_rerunfailures",
        "import pytest and its plugins",
    )
    .await?;
    let plugin = home.join(format!("{PLUGIN_MODULE}.py"));
    write(&plugin, source.as_bytes())?;
    let env = TestEnv {
        venv: venv.clone(),
        package_dir,
        plugin,
        packages: PACKAGES.iter().map(|p| p.to_string()).collect(),
    };
    let json = serde_json::to_vec_pretty(&env).expect("serialises");
    write(&venv.join(MARKER), &json)?;
    Ok(env)
}

fn write(path: &Path, bytes: &[u8]) -> Result<(), Error> {
    std::fs::write(path, bytes).map_err(|source| Error::Write {
        path: path.to_path_buf(),
        source,
    })
}

async fn python_says(python: &Path, code: &str, what: &'static str) -> Result<String, Error> {
    let out = tokio::process::Command::new(python)
        .args(["-c", code])
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .map_err(|e| Error::Check {
            what,
            detail: e.to_string(),
        })?;
    if !out.status.success() {
        return Err(Error::Check {
            what,
            detail: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}
