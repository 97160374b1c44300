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

/// What [`install_each`] says as it goes.
pub enum Installing {
    /// npm is about to install `spec` (`package@version`) of the preset `name`.
    Npm { name: &'static str, spec: String },
    /// A preset is done: installed (its version, program and time) or failed, in a line.
    Done(String),
}

/// What [`install_each`] did: a JSON object per preset installed and per failure, and the
/// directory of the install logs (`agents install --json`).
pub struct Installs {
    pub done: Vec<serde_json::Value>,
    pub failed: Vec<serde_json::Value>,
    pub logs: PathBuf,
}

/// Installs each of `presets` under `data` in turn (`agensh agents install`), each with its
/// log in `<data>/agents/install-<name>.log`; one failure does not stop the others.
pub async fn install_each(
    data: &Path,
    presets: Vec<&Preset>,
    mut on: impl FnMut(Installing),
) -> std::io::Result<Installs> {
    let logs = data.join("agents");
    std::fs::create_dir_all(&logs)?;
    let (mut done, mut failed) = (Vec::new(), Vec::new());
    for p in presets {
        let spec = format!("{}@{}", p.package, p.version);
        let started = std::time::Instant::now();
        if installed(data, p).is_none() {
            on(Installing::Npm { name: p.name, spec });
        }
        let log = logs.join(format!("install-{}.log", p.name));
        match install(data, p, &log).await {
            Ok(i) => {
                let secs = started.elapsed().as_secs_f64();
                on(Installing::Done(format!(
                    "{:8} {} {} in {:.0} s: {}",
                    p.name,
                    p.package,
                    i.version,
                    secs,
                    i.program.display()
                )));
                done.push(serde_json::json!({ "name": p.name, "package": p.package, "version": i.version, "program": i.program, "secs": secs }));
            }
            Err(e) => {
                on(Installing::Done(format!(
                    "{:8} FAILED: {}",
                    p.name, e.message
                )));
                failed.push(serde_json::json!({ "name": p.name, "error": e.message }));
            }
        }
    }
    Ok(Installs { done, failed, logs })
}

/// `preset` in `agensh agents list --json`: its package, pinned version, and what of it is
/// installed under `data`.
pub fn row(data: &Path, p: &Preset) -> serde_json::Value {
    let i = installed(data, p);
    serde_json::json!({
        "name": p.name,
        "title": p.title,
        "package": p.package,
        "pinned": p.version,
        "installed": i.as_ref().map(|i| i.version.clone()),
        "program": i.as_ref().map(|i| i.program.clone()),
        "prefix": prefix(data, p),
        "api": p.api.as_str(),
    })
}

/// `preset` in `agensh agents list`: its version and program as installed (`i`), or the
/// command that installs it.
pub fn line(p: &Preset, i: Option<&Installed>) -> String {
    match i {
        Some(i) => format!(
            "{:8} {} {}: {}",
            p.name,
            p.package,
            i.version,
            i.program.display()
        ),
        None => format!(
            "{:8} not installed ({} {}) → agensh agents install {}",
            p.name, p.package, p.version, p.name
        ),
    }
}

/// The command that installs `names` (for messages).
pub fn install_hint(names: &[&str]) -> String {
    format!("agensh agents install {}", names.join(" "))
}

/// Installs `preset` under `data` with `npm` (which must be on PATH); nothing when it is
/// installed already. Its output goes to `log`.
pub async fn install(data: &Path, preset: &Preset, log: &Path) -> Result<Installed> {
    install_with(std::ffi::OsStr::new("npm"), data, preset, log).await
}

/// How many times npm is run when it fails in a way that may pass (see [`transient`]).
const NPM_ATTEMPTS: u32 = 3;
/// The wait before the second attempt; it triples for each one after.
const NPM_RETRY_WAIT: Duration = if cfg!(test) {
    Duration::from_millis(10)
} else {
    Duration::from_secs(5)
};

/// Whether npm's output says the failure may pass on its own: the registry's listing of a
/// package lagging behind a package that depends on it (`ETARGET`, seen on a registry
/// mirror), a broken or slow connection, or a server error.
fn transient(npm_output: &str) -> bool {
    const SIGNS: [&str; 10] = [
        "code ETARGET",
        "code ECONNRESET",
        "code ETIMEDOUT",
        "code EAI_AGAIN",
        "code ESOCKETTIMEDOUT",
        "code E500",
        "code E502",
        "code E503",
        "code E504",
        "code EINTEGRITY",
    ];
    SIGNS.iter().any(|s| npm_output.contains(s))
}

async fn install_with(
    npm: &std::ffi::OsStr,
    data: &Path,
    preset: &Preset,
    log: &Path,
) -> Result<Installed> {
    if let Some(i) = installed(data, preset) {
        return Ok(i);
    }
    let target = prefix(data, preset);
    let partial = target.with_extension("partial");
    let spec = format!("{}@{}", preset.package, preset.version);
    let mut attempt = 1;
    let mut wait = NPM_RETRY_WAIT;
    let status = loop {
        let status = npm_install(npm, &partial, &spec, log, attempt > 1).await?;
        if status.success() || attempt >= NPM_ATTEMPTS {
            break status;
        }
        let output = std::fs::read_to_string(log).unwrap_or_default();
        if !transient(&output) {
            break status;
        }
        tracing::warn!(
            "npm install {spec} failed in a way that may pass ({status}); trying again in {} s (attempt {} of {NPM_ATTEMPTS}) — see {}",
            wait.as_secs(),
            attempt + 1,
            log.display()
        );
        tokio::time::sleep(wait).await;
        wait *= 3;
        attempt += 1;
    };
    let tail = || {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(8)..].join("\n")
    };
    if !status.success() {
        let tries = if attempt > 1 {
            format!(", {attempt} attempts")
        } else {
            String::new()
        };
        return Err(Error::internal(format!(
            "npm install {spec} failed ({status}{tries}); its last lines ({}):\n{}",
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

/// One `npm install` of `spec` into a new `partial` prefix, its output in `log`;
/// `revalidate` makes npm ask the registry again for what it has cached.
async fn npm_install(
    npm: &std::ffi::OsStr,
    partial: &Path,
    spec: &str,
    log: &Path,
    revalidate: bool,
) -> Result<std::process::ExitStatus> {
    let _ = std::fs::remove_dir_all(partial);
    std::fs::create_dir_all(partial)
        .map_err(|e| Error::internal(format!("cannot create {}: {e}", partial.display())))?;
    let out = std::fs::File::create(log)
        .map_err(|e| Error::internal(format!("cannot create {}: {e}", log.display())))?;
    let err = out
        .try_clone()
        .map_err(|e| Error::internal(format!("cannot write {}: {e}", log.display())))?;
    let mut cmd = tokio::process::Command::new(npm);
    cmd.arg("install").arg("--prefix").arg(partial).args([
        "--no-audit",
        "--no-fund",
        "--no-update-notifier",
        "--loglevel=error",
    ]);
    if revalidate {
        cmd.arg("--prefer-online");
    }
    cmd.arg(spec)
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
    match tokio::time::timeout(NPM_TIMEOUT, child.wait()).await {
        Ok(s) => s.map_err(|e| Error::internal(format!("npm: {e}"))),
        Err(_) => {
            let _ = child.kill().await;
            Err(Error::internal(format!(
                "npm install {spec} took longer than {} min — see {}",
                NPM_TIMEOUT.as_secs() / 60,
                log.display()
            )))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_list_line_has_the_version_and_program_or_the_install_command() {
        let p = &agensh_domain::agents::PRESETS[0];
        let i = Installed {
            version: "1.2.3".into(),
            program: PathBuf::from("/d/bin/x"),
        };
        assert_eq!(
            line(p, Some(&i)),
            format!("{:8} {} 1.2.3: /d/bin/x", p.name, p.package)
        );
        assert!(line(p, None).ends_with(&format!("→ agensh agents install {}", p.name)));
    }

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

    #[test]
    fn a_lagging_registry_or_a_broken_connection_may_pass_a_missing_package_does_not() {
        assert!(transient(
            "npm error code ETARGET\nnpm error notarget No matching version found for @aws-sdk/token-providers@3.1178.0."
        ));
        assert!(transient(
            "npm error code ECONNRESET\nnpm error network aborted"
        ));
        assert!(transient(
            "npm error code E503\nnpm error 503 Service Unavailable"
        ));
        assert!(!transient(
            "npm error code E404\nnpm error 404 Not Found - GET …/nothing"
        ));
        assert!(!transient("npm error code EACCES"));
    }

    /// A stand-in for npm (the registry's lag cannot be had on demand): fails as a lagging
    /// registry does `fails` times, then installs gemini's program and manifest. Each run
    /// appends its arguments to `calls`.
    fn fake_npm(dir: &Path, fails: u32, code: &str) -> PathBuf {
        let npm = dir.join("npm");
        let calls = dir.join("calls");
        std::fs::write(
            &npm,
            format!(
                r#"#!/bin/sh
echo "$*" >> {calls}
n=$(wc -l < {calls})
if [ "$n" -le {fails} ]; then echo "npm error code {code}"; exit 1; fi
prefix=$3
mkdir -p "$prefix/node_modules/.bin" "$prefix/node_modules/@google/gemini-cli"
: > "$prefix/node_modules/.bin/gemini"
echo '{{"version":"0.61.0"}}' > "$prefix/node_modules/@google/gemini-cli/package.json"
"#,
                calls = calls.display()
            ),
        )
        .unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&npm, std::fs::Permissions::from_mode(0o755)).unwrap();
        npm
    }

    #[tokio::test]
    async fn an_install_that_failed_in_a_way_that_may_pass_is_tried_again_revalidating() {
        let tmp = tempfile::tempdir().unwrap();
        let npm = fake_npm(tmp.path(), 2, "ETARGET");
        let p = agensh_domain::agents::preset("gemini").unwrap();
        let data = tmp.path().join("data");
        let i = install_with(npm.as_os_str(), &data, p, &tmp.path().join("log"))
            .await
            .expect("installed at the third attempt");
        assert_eq!(i.version, "0.61.0");
        let calls = std::fs::read_to_string(tmp.path().join("calls")).unwrap();
        let calls: Vec<&str> = calls.lines().collect();
        assert_eq!(calls.len(), 3, "{calls:?}");
        assert!(!calls[0].contains("--prefer-online"));
        assert!(calls[1].contains("--prefer-online") && calls[2].contains("--prefer-online"));
        assert!(!prefix(&data, p).with_extension("partial").exists());
    }

    /// Installs gemini with an npm that fails `fails` times with `code`: the error, and how
    /// many times npm ran.
    async fn failing_install(fails: u32, code: &str) -> (Error, usize) {
        let tmp = tempfile::tempdir().unwrap();
        let npm = fake_npm(tmp.path(), fails, code);
        let p = agensh_domain::agents::preset("gemini").unwrap();
        let data = tmp.path().join("data");
        let e = install_with(npm.as_os_str(), &data, p, &tmp.path().join("log"))
            .await
            .unwrap_err();
        let calls = std::fs::read_to_string(tmp.path().join("calls")).unwrap();
        (e, calls.lines().count())
    }

    #[tokio::test]
    async fn an_install_that_failed_for_good_is_not_tried_again() {
        let (e, runs) = failing_install(5, "E404").await;
        assert!(e.message.contains("failed"), "{}", e.message);
        assert_eq!(runs, 1);
    }

    #[tokio::test]
    async fn an_install_still_failing_after_its_attempts_says_how_many() {
        let (e, runs) = failing_install(5, "ETARGET").await;
        assert_eq!(runs, 3);
        assert!(e.message.contains("3 attempts"), "{}", e.message);
        assert!(e.message.contains("code ETARGET"), "{}", e.message);
    }
}
