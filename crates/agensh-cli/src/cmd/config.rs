//! `agensh config [--dir DIR] [FLAGS]`: the configuration `agensh run` would use, and where
//! each value came from. [`load`] is also how every other command reads its configuration,
//! so the two never disagree.

use std::collections::BTreeMap;
use std::path::Path;

use agensh_domain::config::{Config, FlagValue, Resolved, Source};
use agensh_hub::org::CONFIG_FILE;
use anyhow::{Context, Result};

use crate::cli::{ConfigArgs, Global};
use crate::output::{json, Local};

pub fn run(g: &Global, a: ConfigArgs) -> Result<()> {
    let path = g.dir.join(CONFIG_FILE);
    let mut resolved = resolve(&g.dir, &a.flags.values())?;
    resolved.redact_secrets();
    if a.json {
        json(&serde_json::json!({
            "file": path,
            "settings": resolved.settings,
        }));
        return Ok(());
    }
    outln!("# {}", path.display());
    let shown: Vec<(String, &Source)> = resolved
        .settings
        .iter()
        .map(|s| (format!("{} = {}", s.key, s.value), &s.source))
        .collect();
    let width = shown
        .iter()
        .map(|(l, _)| l.chars().count())
        .max()
        .unwrap_or(0);
    for (line, source) in shown {
        outln!("{line:<width$}  # {}", describe(source));
    }
    Ok(())
}

fn describe(source: &Source) -> String {
    match source {
        Source::Default => "default".into(),
        Source::File => CONFIG_FILE.into(),
        Source::Env(v) => format!("environment {v}"),
        Source::Flag(f) => format!("flag {f}"),
    }
}

/// The effective configuration of the organization in `dir`: its agensh.toml, then the
/// `AGENSH_*` environment, then `flags`.
pub fn load(dir: &Path, flags: &[FlagValue]) -> Result<Config> {
    Ok(resolve(dir, flags)?.config)
}

/// As [`load`], with where each value came from.
pub fn resolve(dir: &Path, flags: &[FlagValue]) -> Result<Resolved> {
    let path = dir.join(CONFIG_FILE);
    let text = std::fs::read_to_string(&path).with_context(|| {
        format!(
            "cannot read {} — is {} an organization? create one with `agensh init {} --goal \"...\"`",
            path.display(),
            dir.display(),
            dir.display()
        )
    })?;
    let env: BTreeMap<String, String> = std::env::vars()
        .filter(|(k, _)| k.starts_with("AGENSH_"))
        .collect();
    Config::resolve(&text, &env, flags).map_err(|e| Local(e).into())
}
