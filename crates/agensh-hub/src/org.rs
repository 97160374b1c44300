//! An organization directory as the command line finds and makes it: `agensh.toml`, and
//! `.agensh/` with the store, the git workspace and `hub.json` of the hub serving it.
//! Its functions answer with the command's own messages (`anyhow`, with context), as the
//! node's `setup` does.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use agensh_domain::config::{Config, Source};
use agensh_domain::issue::NewIssue;
use agensh_store::Store;
use agensh_workspace::seed::{self, Source as Seed};
use agensh_workspace::Workspace;
use anyhow::{bail, Context, Result};

use crate::{read_hub_info, state_dir, write_hub_info, HubInfo, RunningHub, HUB_JSON, STORE_FILE};

/// The configuration file at the root of an organization directory.
pub const CONFIG_FILE: &str = "agensh.toml";

/// Writes agensh.toml, creates `.agensh/` (mode 0700), the store, and the git workspace
/// with `main` seeded from `from` (a directory or a git repository) or empty.
pub async fn create(dir: &Path, config: &Config, from: Option<&Path>) -> Result<()> {
    create_with_issues(dir, config, from, &[]).await
}

/// [`create`], and `issues` opened in the new store (author `admin`), all or none.
pub async fn create_with_issues(
    dir: &Path,
    config: &Config,
    from: Option<&Path>,
    issues: &[NewIssue],
) -> Result<()> {
    let source = match from {
        Some(src) => Seed::detect(src)?,
        None => Seed::Empty,
    };
    let toml_path = dir.join(CONFIG_FILE);
    if toml_path.exists() {
        bail!(
            "{} already exists — {} is an organization already; edit it, or init another directory",
            toml_path.display(),
            dir.display()
        );
    }
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let state = state_dir(dir);
    if state.exists() {
        bail!(
            "{} already exists without an agensh.toml — remove it (it is a half-made organization) and run init again",
            state.display()
        );
    }
    let made = fill_state_dir(&state, config, source, issues).await;
    if made.is_err() {
        // Leave nothing half-made behind: the next init starts clean.
        let _ = std::fs::remove_dir_all(&state);
    }
    made?;
    std::fs::write(&toml_path, config.template())
        .with_context(|| format!("cannot write {}", toml_path.display()))?;
    Ok(())
}

/// For `agensh run` on a directory that has an agensh.toml but no state yet (an example, a
/// configuration written by hand): creates `.agensh/` with `main` seeded from
/// `organization.seed` (relative to the directory). Returns whether it created anything.
pub async fn create_state_if_missing(dir: &Path, config: &Config) -> Result<bool> {
    let state = state_dir(dir);
    if state.exists() {
        return Ok(false);
    }
    let seed = (!config.organization.seed.is_empty()).then(|| dir.join(&config.organization.seed));
    let source = match &seed {
        Some(src) => Seed::detect(src).with_context(|| {
            format!(
                "organization.seed in {} names {}",
                dir.join(CONFIG_FILE).display(),
                src.display()
            )
        })?,
        None => Seed::Empty,
    };
    let made = fill_state_dir(&state, config, source, &[]).await;
    if made.is_err() {
        let _ = std::fs::remove_dir_all(&state);
    }
    made?;
    Ok(true)
}

/// Creates `.agensh/` (mode 0700) with the store and the seeded git workspace.
async fn fill_state_dir(
    state: &Path,
    config: &Config,
    source: Seed<'_>,
    issues: &[NewIssue],
) -> Result<()> {
    std::fs::create_dir_all(state).with_context(|| format!("cannot create {}", state.display()))?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(state, std::fs::Permissions::from_mode(0o700))?;
    }
    let store = open_store(state, &config.hub.store).await?;
    // Creating the admin token now makes the store complete before the first hub starts.
    store.admin_token().await?;
    if !issues.is_empty() {
        let now = agensh_domain::time::unix_ms(std::time::SystemTime::now());
        store
            .open_issues(agensh_domain::ids::ADMIN, issues.to_vec(), now)
            .await?;
    }
    let repo = state.join(agensh_workspace::REPO_DIR);
    seed::create(&repo, source, &config.organization.goal)
        .await
        .with_context(|| format!("cannot create the git workspace in {}", repo.display()))?;
    Ok(())
}

/// The organization's store: the PostgreSQL database `configured` names (`hub.store`),
/// else the SQLite file in its state directory `state`.
pub async fn open_store(state: &Path, configured: &str) -> Result<Arc<dyn Store>> {
    if configured.is_empty() {
        let file = state.join(STORE_FILE);
        agensh_store::open_store(&file.to_string_lossy())
            .await
            .with_context(|| format!("cannot open {}", file.display()))
    } else {
        let store = agensh_store::open_store(configured)
            .await
            .context("cannot open the store hub.store names")?;
        tracing::info!(
            "store: PostgreSQL, {}",
            agensh_store::postgres::redact(configured)
        );
        Ok(store)
    }
}

/// The SQLite store `from` names (an organization directory or the file itself; `agensh
/// store migrate --from`) and the organization directory it belongs to, if any.
pub fn sqlite_store(from: &Path) -> (PathBuf, Option<PathBuf>) {
    if from.is_dir() {
        let file = state_dir(from).join(STORE_FILE);
        return (file, Some(from.to_path_buf()));
    }
    let org = from
        .parent()
        .filter(|p| p.file_name().is_some_and(|n| n == ".agensh"))
        .and_then(Path::parent)
        .map(Path::to_path_buf);
    (from.to_path_buf(), org)
}

/// The SQLite store file of the organization in `dir`: `configured` (`hub.store`) when
/// it names one, else the organization's own.
pub fn sqlite_file(dir: &Path, configured: &str) -> PathBuf {
    if configured.trim().is_empty() {
        state_dir(dir).join(STORE_FILE)
    } else {
        PathBuf::from(configured)
    }
}

/// The organization's store (`configured`: `hub.store`) and git workspace (none, with a
/// warning, for an organization made by an older `agensh init`).
pub async fn open_state(
    dir: &Path,
    configured: &str,
) -> Result<(Arc<dyn Store>, Option<Workspace>)> {
    let store = open_store(&state_dir(dir), configured).await?;
    let repo = state_dir(dir).join(agensh_workspace::REPO_DIR);
    let workspace = if repo.exists() {
        Some(Workspace::open(&repo)?)
    } else {
        tracing::warn!(
            "{} has no git workspace (made by an older agensh init): pull requests and git over HTTP are off",
            dir.display()
        );
        None
    };
    Ok((store, workspace))
}

/// What `.agensh/hub.json` of `dir` says, when the hub it names still runs (a hub that was
/// killed leaves the file behind).
pub fn running_hub(dir: &Path) -> Option<HubInfo> {
    read_hub_info(dir)
        .ok()
        .filter(|i| Path::new(&format!("/proc/{}", i.pid)).exists())
}

/// Refuses to serve the organization in `dir` when another process serves it already.
pub fn refuse_if_running(dir: &Path) -> Result<()> {
    if let Some(info) = running_hub(dir) {
        if info.pid != std::process::id() {
            bail!(
                "a hub is already running for {} (pid {}, {}) — stop it first, or use it",
                dir.display(),
                info.pid,
                info.url
            );
        }
    }
    Ok(())
}

/// Writes `.agensh/hub.json` of `dir` for `hub`, served by this process: how the commands
/// run in `dir` reach it.
pub fn announce(dir: &Path, hub: &RunningHub) -> Result<()> {
    let info = HubInfo {
        url: hub.url.clone(),
        admin_token: hub.admin_token.clone(),
        pid: std::process::id(),
    };
    write_hub_info(dir, &info).context("cannot write .agensh/hub.json")
}

/// Removes `.agensh/hub.json` of `dir`, once its hub has stopped.
pub fn retire(dir: &Path) {
    let _ = std::fs::remove_file(state_dir(dir).join(HUB_JSON));
}

/// The line that says the organization's goal was met already, when it was and the run is
/// not to go on anyway (`run.keep_going`): `agensh run` has nothing to do.
pub async fn met_already(store: &dyn Store, config: &Config) -> Result<Option<String>> {
    if config.run.keep_going {
        return Ok(None);
    }
    let Some(g) = crate::goal::stored(store, config).await? else {
        return Ok(None);
    };
    Ok(match (g.met(), &g.met_commit) {
        (true, Some(commit)) => Some(format!(
            "the goal of this organization was met already, at {} ({}): nothing to do — --keep-going runs the workers anyway, or change organization.done_when",
            agensh_domain::goal::short(commit),
            g.conditions.join("; ")
        )),
        _ => None,
    })
}

/// Refuses to start an organization whose gateway upstreams' keys are not in this
/// environment (the hub would refuse every request to them), naming each variable.
pub fn upstream_keys_set(config: &Config) -> Result<()> {
    let missing = crate::gateway::missing_keys(&config.gateway, |v| std::env::var(v).ok());
    if let Some((name, var)) = missing.first() {
        bail!(
            "the gateway upstream \"{name}\" reads its key from {var}, which is not set — export {var}=… (or set its api_key_env = \"\"){}",
            if missing.len() > 1 {
                format!("; {} more upstream(s) lack theirs", missing.len() - 1)
            } else {
                String::new()
            }
        );
    }
    Ok(())
}

/// The address the hub of `agensh run` listens on: `listen` when it is free. When it is in
/// use (another organization's hub) and came from agensh.toml or the default, a free port
/// on the same host instead, with a note saying so; a taken address given by a flag or the
/// environment is an error. Checked before the run creates anything.
pub fn hub_listen(listen: &str, source: &Source) -> Result<(String, Option<String>)> {
    let taken = match std::net::TcpListener::bind(listen) {
        Ok(_) => return Ok((listen.to_string(), None)),
        Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => e,
        Err(e) => bail!("cannot listen on {listen}: {e} — set hub.listen in agensh.toml or pass --listen HOST:PORT (port 0 picks a free one)"),
    };
    let given = match source {
        Source::Flag(flag) => Some(format!("the flag {flag}")),
        Source::Env(var) => Some(format!("the environment variable {var}")),
        Source::File | Source::Default => None,
    };
    if let Some(given) = given {
        bail!("cannot listen on {listen} ({taken}), given by {given}: another process (another organization's hub?) listens there — pick another port, or port 0 for a free one");
    }
    let host = listen
        .rsplit_once(':')
        .map_or(listen, |(h, _)| h)
        .trim_start_matches('[')
        .trim_end_matches(']');
    let free = std::net::TcpListener::bind((host, 0))
        .and_then(|l| l.local_addr())
        .with_context(|| format!("{listen} is in use and no other port on {host} is free"))?;
    let note = format!(
        "{listen} is in use (another organization's hub?); this run's hub listens on {free} instead"
    );
    Ok((free.to_string(), Some(note)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sqlite_store_is_named_by_its_organization_or_its_file() {
        let org = tempfile::tempdir().unwrap();
        let file = state_dir(org.path()).join(STORE_FILE);
        assert_eq!(
            sqlite_store(org.path()),
            (file.clone(), Some(org.path().to_path_buf()))
        );
        assert_eq!(
            sqlite_store(&file),
            (file.clone(), Some(org.path().to_path_buf()))
        );
        let elsewhere = Path::new("/x/store.sqlite");
        assert_eq!(sqlite_store(elsewhere), (elsewhere.to_path_buf(), None));
        assert_eq!(sqlite_file(org.path(), " "), file);
        assert_eq!(
            sqlite_file(org.path(), "/y.sqlite"),
            PathBuf::from("/y.sqlite")
        );
    }

    #[test]
    fn a_taken_default_port_is_traded_for_a_free_one_and_a_given_one_refused() {
        let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = taken.local_addr().unwrap().to_string();
        let (got, note) = hub_listen(&addr, &Source::Default).unwrap();
        assert_ne!(got, addr);
        assert!(got.starts_with("127.0.0.1:"), "{got}");
        assert!(note.unwrap().contains(&got));
        std::net::TcpListener::bind(&got).expect("the port it took is free");
        assert_ne!(hub_listen(&addr, &Source::File).unwrap().0, addr);
        let e = hub_listen(&addr, &Source::Flag("--listen".into()))
            .unwrap_err()
            .to_string();
        assert!(e.contains(&addr) && e.contains("the flag --listen"), "{e}");
        // A free address is kept as it is.
        drop(taken);
        assert_eq!(hub_listen(&addr, &Source::Default).unwrap(), (addr, None));
    }
}
