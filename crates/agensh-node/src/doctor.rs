//! `agensh doctor`'s checks: what agensh needs on this machine, what it found, and what to
//! do about each missing piece. Required: git, and python with venv for the local model;
//! agent CLIs and the model itself are optional.

use std::process::Stdio;
use std::time::Duration;

use agensh_model::Size;
use serde::Serialize;
use tokio::process::Command;

/// Longest a program may take to tell its version.
const PROBE_TIMEOUT: Duration = Duration::from_secs(3);
const MIN_GIT: (u32, u32) = (2, 38);
const MIN_PYTHON: (u32, u32) = (3, 10);

/// One thing checked.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Check {
    pub name: String,
    /// agensh cannot work without it.
    pub required: bool,
    pub ok: bool,
    /// What was found: a version, a path, or why it is not usable.
    pub found: String,
    /// What to do when it is not ok.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
}

/// Every check, in the order `agensh doctor` shows them: git, python (and its venv), the
/// local model, node and npm, then each preset's agent CLI.
pub async fn checks() -> Vec<Check> {
    let mut checks = vec![git().await];
    checks.extend(python().await);
    checks.push(local_model());
    checks.push(npm().await);
    let data = agensh_model::data_dir().ok();
    for p in &agensh_domain::agents::PRESETS {
        checks.push(preset(data.as_deref(), p));
    }
    checks
}

/// The names of the required checks that failed.
pub fn missing(checks: &[Check]) -> Vec<&str> {
    checks
        .iter()
        .filter(|c| c.required && !c.ok)
        .map(|c| c.name.as_str())
        .collect()
}

/// `agensh doctor`'s lines: each check marked ok, MISSING (required) or `-`, with what was
/// found and, when it is not ok, what to do.
pub fn lines(checks: &[Check]) -> Vec<String> {
    let mut out = Vec::new();
    for c in checks {
        let mark = match (c.ok, c.required) {
            (true, _) => "ok     ",
            (false, true) => "MISSING",
            (false, false) => "-      ",
        };
        out.push(format!("{mark} {}: {}", c.name, c.found));
        if let (false, Some(fix)) = (c.ok, &c.fix) {
            out.push(format!("        → {fix}"));
        }
    }
    out
}

async fn git() -> Check {
    let want = format!("git {}.{} or newer", MIN_GIT.0, MIN_GIT.1);
    let fix = Some(format!(
        "install {want} (merge-tree --write-tree, http-backend) and put it on PATH, e.g. apt-get install git"
    ));
    let (ok, found) = match probe("git", &["--version"]).await {
        Ok(out) => match version_in(&out).and_then(|v| major_minor(&v).map(|mm| (v, mm))) {
            Some((v, mm)) if mm >= MIN_GIT => (true, v),
            Some((v, _)) => (false, format!("{v} is too old: agensh needs {want}")),
            None => (false, format!("`git --version` said {out:?}")),
        },
        Err(why) => (false, why),
    };
    Check {
        name: "git".into(),
        required: true,
        ok,
        found,
        fix,
    }
}

/// python (`AGENSH_PYTHON` or `python3`), then its venv module, as `agensh model install`
/// uses them.
async fn python() -> Vec<Check> {
    let python = std::env::var("AGENSH_PYTHON")
        .ok()
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| "python3".into());
    let want = format!("python {}.{} or newer", MIN_PYTHON.0, MIN_PYTHON.1);
    let version = probe(
        &python,
        &["-c", "import sys; print('%d.%d.%d' % sys.version_info[:3])"],
    )
    .await;
    let (ok, found) = match version {
        Ok(out) => match major_minor(out.trim()) {
            Some(mm) if mm >= MIN_PYTHON => (true, format!("{python} {}", out.trim())),
            _ => (
                false,
                format!(
                    "{python} {} is too old: the local model needs {want}",
                    out.trim()
                ),
            ),
        },
        Err(why) => (false, why),
    };
    let mut checks = vec![Check {
        name: "python".into(),
        required: true,
        ok,
        found,
        fix: Some(format!(
            "install {want} (e.g. apt-get install python3), or point AGENSH_PYTHON at one"
        )),
    }];
    if ok {
        let venv = probe(&python, &["-c", "import venv, ensurepip"]).await;
        checks.push(Check {
            name: "python venv".into(),
            required: true,
            ok: venv.is_ok(),
            found: match venv {
                Ok(_) => format!("{python} -m venv works"),
                Err(why) => format!("{python} cannot make a virtual environment: {why}"),
            },
            fix: Some("install the venv module, e.g. apt-get install python3-venv".into()),
        });
    }
    checks
}

fn local_model() -> Check {
    let (ok, found) = match agensh_model::data_dir() {
        Ok(dir) => {
            let sizes: Vec<String> = Size::ALL
                .iter()
                .map(|s| {
                    let st = agensh_model::status(&dir, *s);
                    format!(
                        "{s} {}",
                        if st.installed {
                            "installed"
                        } else {
                            "not installed"
                        }
                    )
                })
                .collect();
            let any = Size::ALL
                .iter()
                .any(|s| agensh_model::status(&dir, *s).installed);
            (any, format!("{} in {}", sizes.join(", "), dir.display()))
        }
        Err(e) => (false, e.to_string()),
    };
    Check {
        name: "local model".into(),
        required: false,
        ok,
        found,
        fix: Some(
            "agensh model install --size 1.5b (about 1.1 GB, once), or let `agensh run` install it on first use"
                .into(),
        ),
    }
}

/// npm, which `agensh agents install` needs (with Node.js 20 or newer to run the CLIs).
async fn npm() -> Check {
    let node = probe("node", &["--version"]).await;
    let npm = probe("npm", &["--version"]).await;
    let (ok, found) = match (&node, &npm) {
        (Ok(n), Ok(v)) => {
            let major: u32 = n
                .trim()
                .trim_start_matches('v')
                .split('.')
                .next()
                .and_then(|m| m.parse().ok())
                .unwrap_or(0);
            if major >= 20 {
                (true, format!("node {}, npm {}", n.trim(), v.trim()))
            } else {
                (
                    false,
                    format!(
                        "node {} is too old: the agent CLIs need 20 or newer",
                        n.trim()
                    ),
                )
            }
        }
        (Err(why), _) | (_, Err(why)) => (false, why.clone()),
    };
    Check {
        name: "node and npm".into(),
        required: false,
        ok,
        found,
        fix: Some("install Node.js 20 or newer with npm (only to run the agent CLIs: claude, codex, copilot, gemini)".into()),
    }
}

/// One preset's agent CLI: installed in agensh's data directory or not, its version.
fn preset(data: Option<&std::path::Path>, p: &agensh_domain::agents::Preset) -> Check {
    let found = data.and_then(|d| crate::install::installed(d, p));
    Check {
        name: format!("agent {}", p.name),
        required: false,
        ok: found.is_some(),
        found: match &found {
            Some(i) => format!("{} {} ({})", p.package, i.version, i.program.display()),
            None => format!("not installed ({} {})", p.package, p.version),
        },
        fix: Some(format!(
            "{} — then `agensh run --agent {}`",
            crate::install::install_hint(&[p.name]),
            p.name
        )),
    }
}

/// Runs `program args` with stdin closed and at most [`PROBE_TIMEOUT`]; its stdout (else
/// stderr) on success, or why it did not answer.
async fn probe(program: &str, args: &[&str]) -> std::result::Result<String, String> {
    let run = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .output();
    let shown = format!("`{program} {}`", args.join(" "));
    match tokio::time::timeout(PROBE_TIMEOUT, run).await {
        Err(_) => Err(format!(
            "{shown} did not answer in {} s",
            PROBE_TIMEOUT.as_secs()
        )),
        Ok(Err(e)) if e.kind() == std::io::ErrorKind::NotFound => {
            Err(format!("not found on PATH ({program})"))
        }
        Ok(Err(e)) => Err(format!("{shown} cannot run: {e}")),
        Ok(Ok(out)) if !out.status.success() => Err(format!(
            "{shown} failed ({}): {}",
            out.status,
            first_line(&String::from_utf8_lossy(&out.stderr))
        )),
        Ok(Ok(out)) => {
            let stdout = String::from_utf8_lossy(&out.stdout).trim().to_string();
            Ok(if stdout.is_empty() {
                String::from_utf8_lossy(&out.stderr).trim().to_string()
            } else {
                stdout
            })
        }
    }
}

fn first_line(s: &str) -> String {
    let line = s
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("");
    line.chars().take(80).collect()
}

/// The first word of `text` that looks like a version (`2.39.5`, `v0.61.0`).
fn version_in(text: &str) -> Option<String> {
    text.split(|c: char| c.is_whitespace() || c == ',' || c == '(' || c == ')')
        .map(|w| w.trim_start_matches('v'))
        .find(|w| w.contains('.') && w.chars().next().is_some_and(|c| c.is_ascii_digit()))
        .map(str::to_string)
}

/// `2.39.5` → (2, 39).
fn major_minor(version: &str) -> Option<(u32, u32)> {
    let mut it = version.split('.');
    let major = it.next()?.parse().ok()?;
    let minor: String = it
        .next()?
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    Some((major, minor.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_check_says_what_to_do() {
        let check = |name: &str, ok, required, fix: Option<&str>| Check {
            name: name.into(),
            required,
            ok,
            found: "found".into(),
            fix: fix.map(str::to_string),
        };
        let checks = [
            check("git", true, true, Some("install git")),
            check("python", false, true, Some("install python")),
            check("claude", false, false, None),
        ];
        assert_eq!(
            lines(&checks),
            [
                "ok      git: found",
                "MISSING python: found",
                "        → install python",
                "-       claude: found",
            ]
        );
    }

    #[test]
    fn only_required_checks_that_failed_are_missing() {
        let c = |name: &str, required, ok| Check {
            name: name.into(),
            required,
            ok,
            found: String::new(),
            fix: None,
        };
        let all = [
            c("git", true, false),
            c("npm", false, false),
            c("python", true, true),
        ];
        assert_eq!(missing(&all), ["git"]);
    }

    #[test]
    fn versions_are_found_in_what_programs_print() {
        assert_eq!(version_in("git version 2.39.5").as_deref(), Some("2.39.5"));
        assert_eq!(version_in("codex-acp v0.16.0").as_deref(), Some("0.16.0"));
        assert_eq!(version_in("0.61.0").as_deref(), Some("0.61.0"));
        assert_eq!(version_in("usage: pi [options]"), None);
        assert_eq!(major_minor("2.39.5"), Some((2, 39)));
        assert_eq!(major_minor("3.10rc1"), Some((3, 10)));
        assert!(major_minor("2.9.0").unwrap() < MIN_GIT);
    }
}
