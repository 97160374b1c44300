//! The local model as `agensh run` and `agensh node` use it: installed the first time,
//! then served on a free loopback port with one slot per worker.

use std::path::{Path, PathBuf};

use crate::error::Result;
use crate::install::{install, installed, InstallProgress, Installed};
use crate::serve::{ModelServer, ServeOptions};
use crate::spec::{data_dir, Size, XLLAMACPP_VERSION};

/// What [`start_local`] is doing, for a progress bar.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Starting {
    /// The model is not installed: it is installed into `data_dir` first (once), about
    /// `bytes` of it.
    Installing { data_dir: PathBuf, bytes: u64 },
    /// A step of that install.
    Install(InstallProgress),
    /// The install ended (done or failed); the server starts next.
    InstallEnded,
}

/// Where the server of `size` logs, under the data directory `dir`.
pub fn serve_log(dir: &Path, size: Size) -> PathBuf {
    dir.join("models").join(format!("serve-{size}.log"))
}

impl Installed {
    /// The virtual environment the server package is in (`<venv>/bin/python` → `<venv>`).
    pub fn venv(&self) -> &Path {
        self.python
            .parent()
            .and_then(Path::parent)
            .unwrap_or(&self.python)
    }

    /// What `agensh model install` says of an installation it found in place.
    pub fn found_line(&self) -> String {
        format!(
            "the {} model is installed already: {} (sha256 {} verified) — --force installs it again",
            self.size,
            self.model_file.display(),
            self.size.spec().sha256
        )
    }

    /// What `agensh model install` says of an installation it made in `secs` seconds.
    pub fn made_lines(&self, secs: f64) -> Vec<String> {
        let (size, spec) = (self.size, self.size.spec());
        vec![
            format!(
                "installed the {size} model in {secs:.0} s: {}",
                self.model_file.display()
            ),
            format!(
                "sha256 {} verified, {} bytes; server xllamacpp {XLLAMACPP_VERSION} in {}",
                spec.sha256,
                spec.bytes,
                self.venv().display()
            ),
            format!("serve it: agensh model serve --size {size}"),
        ]
    }
}

/// The local model for `agensh run`/`node`: installed the first time (`on` hears how it
/// goes), then served on a free loopback port with `parallel` slots (at least one), each
/// with `context_per_request` tokens. The server stops when the returned value is stopped
/// or dropped; its log is [`serve_log`].
pub async fn start_local(
    size: Size,
    parallel: u32,
    context_per_request: u32,
    on: &mut (dyn FnMut(Starting) + Send),
) -> Result<ModelServer> {
    let dir = data_dir()?;
    let inst = match installed(&dir, size) {
        Some(i) => i,
        None => {
            on(Starting::Installing {
                data_dir: dir.clone(),
                bytes: size.spec().bytes,
            });
            let made = install(&dir, size, false, &mut |p| on(Starting::Install(p))).await;
            on(Starting::InstallEnded);
            made?
        }
    };
    let opts = ServeOptions {
        parallel: parallel.max(1),
        context_per_request,
        log_file: Some(serve_log(&dir, size)),
        ..ServeOptions::default()
    };
    ModelServer::start(&inst, &opts).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_venv_is_two_levels_above_its_python_and_each_size_logs_apart() {
        let i = Installed {
            size: Size::ALL[0],
            python: PathBuf::from("/d/models/venv/bin/python"),
            model_file: PathBuf::from("/d/models/m.gguf"),
        };
        assert_eq!(i.venv(), Path::new("/d/models/venv"));
        let logs: Vec<PathBuf> = Size::ALL
            .iter()
            .map(|s| serve_log(Path::new("/d"), *s))
            .collect();
        assert_eq!(logs[0].parent(), Some(Path::new("/d/models")));
        assert_ne!(logs[0], logs[logs.len() - 1]);
    }
}
