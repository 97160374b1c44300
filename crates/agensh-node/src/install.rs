//! The presets' agent CLIs on this machine: where each is installed, which version, and
//! installing it from the npm registry at its pinned version.
//!
//! Layout: `<data>/agents/<name>/<version>/` is an npm prefix holding the package
//! (`node_modules/...`); an install goes to `<version>.partial` first and is renamed into
//! place only when npm succeeded and the program is there, so a broken install never
//! looks installed.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use agensh_domain::agents::Preset;
use agensh_domain::{Error, ErrorKind, Result};

/// Longest one `npm install` may take.
const NPM_TIMEOUT: Duration = Duration::from_secs(1800);

/// The install prefix of `preset` under the data directory `data`.
pub fn prefix(data: &Path, preset: &Preset) -> PathBuf {
    data.join("agents").join(preset.name).join(preset.version)
}

/// `x64` or `arm64`, as the npm packages name their native parts.
pub fn arch() -> &'static str {
    if cfg!(target_arch = "aarch64") {
        "arm64"
    } else {
        "x64"
    }
}

/// The program of `preset` as installed under `data`.
pub fn program(data: &Path, preset: &Preset) -> PathBuf {
    PathBuf::from(preset.program_in(&prefix(data, preset).to_string_lossy(), arch()))
}

/// What is installed of a preset.
#[derive(Debug, Clone, PartialEq)]
pub struct Installed {
    /// The version in the package's own `package.json`.
    pub version: String,
    pub program: PathBuf,
}

/// The preset's install under `data`, when its program is there.
pub fn installed(data: &Path, preset: &Preset) -> Option<Installed> {
    let program = program(data, preset);
    if !program.exists() {
        return None;
    }
    let manifest = prefix(data, preset)
        .join("node_modules")
        .join(preset.package)
        .join("package.json");
    let version = std::fs::read(&manifest)
        .ok()
        .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
        .and_then(|v| v.get("version")?.as_str().map(str::to_string))
        .unwrap_or_else(|| "unknown".into());
    Some(Installed { version, program })
}

/// The command that installs `names` (for messages).
pub fn install_hint(names: &[&str]) -> String {
    format!("agensh agents install {}", names.join(" "))
}

/// Installs `preset` under `data` with `npm` (which must be on PATH); nothing when it is
/// installed already. Its output goes to `log`.
pub async fn install(data: &Path, preset: &Preset, log: &Path) -> Result<Installed> {
    if let Some(i) = installed(data, preset) {
        return Ok(i);
    }
    let target = prefix(data, preset);
    let partial = target.with_extension("partial");
    let _ = std::fs::remove_dir_all(&partial);
    std::fs::create_dir_all(&partial)
        .map_err(|e| Error::internal(format!("cannot create {}: {e}", partial.display())))?;
    let out = std::fs::File::create(log)
        .map_err(|e| Error::internal(format!("cannot create {}: {e}", log.display())))?;
    let err = out
        .try_clone()
        .map_err(|e| Error::internal(format!("cannot write {}: {e}", log.display())))?;
    let spec = format!("{}@{}", preset.package, preset.version);
    let mut cmd = tokio::process::Command::new("npm");
    cmd.arg("install")
        .arg("--prefix")
        .arg(&partial)
        .args([
            "--no-audit",
            "--no-fund",
            "--no-update-notifier",
            "--loglevel=error",
        ])
        .arg(&spec)
        .stdin(Stdio::null())
        .stdout(Stdio::from(out))
        .stderr(Stdio::from(err))
        .kill_on_drop(true);
    let mut child = cmd.spawn().map_err(|e| {
        Error::new(
            ErrorKind::Invalid,
            "npm_missing",
            format!(
                "cannot run npm ({e}) — install Node.js 20 or newer with npm (e.g. apt-get install nodejs npm), then run this again"
            ),
        )
    })?;
    let status = match tokio::time::timeout(NPM_TIMEOUT, child.wait()).await {
        Ok(s) => s.map_err(|e| Error::internal(format!("npm: {e}")))?,
        Err(_) => {
            let _ = child.kill().await;
            return Err(Error::internal(format!(
                "npm install {spec} took longer than {} min — see {}",
                NPM_TIMEOUT.as_secs() / 60,
                log.display()
            )));
        }
    };
    let tail = || {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(8)..].join("\n")
    };
    if !status.success() {
        return Err(Error::internal(format!(
            "npm install {spec} failed ({status}); its last lines ({}):\n{}",
            log.display(),
            tail()
        )));
    }
    let program = preset.program_in(&partial.to_string_lossy(), arch());
    if !Path::new(&program).exists() {
        return Err(Error::internal(format!(
            "npm installed {spec} but {program} is not there (is this machine's architecture supported by the package?)"
        )));
    }
    let _ = std::fs::remove_dir_all(&target);
    std::fs::rename(&partial, &target).map_err(|e| {
        Error::internal(format!(
            "cannot move {} to {}: {e}",
            partial.display(),
            target.display()
        ))
    })?;
    installed(data, preset).ok_or_else(|| {
        Error::internal(format!(
            "{spec} was installed in {} but its program is missing",
            target.display()
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_install_is_found_by_its_program_and_manifest() {
        let tmp = tempfile::tempdir().unwrap();
        let p = agensh_domain::agents::preset("gemini").unwrap();
        assert_eq!(installed(tmp.path(), p), None);
        let prefix = prefix(tmp.path(), p);
        let bin = prefix.join("node_modules/.bin");
        std::fs::create_dir_all(&bin).unwrap();
        std::fs::write(bin.join("gemini"), "").unwrap();
        let pkg = prefix.join("node_modules/@google/gemini-cli");
        std::fs::create_dir_all(&pkg).unwrap();
        std::fs::write(pkg.join("package.json"), r#"{"version":"0.61.0"}"#).unwrap();
        let i = installed(tmp.path(), p).expect("installed");
        assert_eq!(i.version, "0.61.0");
        assert!(i
            .program
            .ends_with("agents/gemini/0.61.0/node_modules/.bin/gemini"));
    }
}
