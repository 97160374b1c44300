//! The built-in agent's own log, `builtin.jsonl` in the adapter's state directory: one JSON
//! object per line — session start (the system prompt), requests (sizes), replies, tool
//! calls, compactions, style switches and turn ends. Never the API key.

use std::io::Write;
use std::path::{Path, PathBuf};

use serde_json::Value;

/// The log's file name in the state directory.
pub const LOG_FILE: &str = "builtin.jsonl";

pub struct Log {
    file: Option<std::fs::File>,
    path: PathBuf,
}

impl Log {
    /// Appends to `path`; a log that cannot be opened is skipped with a warning.
    pub fn open(path: &Path) -> Log {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(|e| tracing::warn!("cannot open {}: {e}", path.display()))
            .ok();
        Log {
            file,
            path: path.to_path_buf(),
        }
    }

    /// Writes `entry` (an object) with the time added.
    pub fn write(&mut self, mut entry: Value) {
        let Some(f) = self.file.as_mut() else {
            return;
        };
        if let Some(o) = entry.as_object_mut() {
            o.insert(
                "at".into(),
                agensh_domain::time::unix_ms(std::time::SystemTime::now()).into(),
            );
        }
        let mut line = entry.to_string();
        line.push('\n');
        if let Err(e) = f.write_all(line.as_bytes()) {
            tracing::warn!("cannot write {}: {e}", self.path.display());
            self.file = None;
        }
    }
}
