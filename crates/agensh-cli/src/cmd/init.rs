//! `agensh init DIR --goal TEXT`: creates the organization directory.

use std::path::Path;

use agensh_domain::config::Config;
use agensh_domain::issue::NewIssue;
use agensh_workspace::seed::{self, Source};
use anyhow::{bail, Context, Result};

use crate::cli::{Global, InitArgs};
use crate::cmd::config::CONFIG_FILE;
use crate::output::Local;

pub async fn run(g: &Global, a: InitArgs) -> Result<()> {
    let dir = g.org_dir(&a.dir);
    let config = Config::with_goal(&a.goal);
    config.validate().map_err(Local)?;
    // Read and check the issues before anything is created: a bad file creates nothing.
    let issues = match &a.issues {
        Some(path) => crate::cmd::issue::read_seed_file(path)?,
        None => Vec::new(),
    };
    create_with_issues(&dir, &config, a.from.as_deref(), &issues).await?;
    outln!("created organization in {}", dir.display());
    if !issues.is_empty() {
        outln!(
            "opened {} issue(s): agensh --dir {} issue list",
            issues.len(),
            dir.display()
        );
    }
    outln!(
        "next: agensh hub {}   (then, in another terminal: agensh --dir {} workers add 4)",
        dir.display(),
        dir.display()
    );
    Ok(())
}

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
        Some(src) => Source::detect(src)?,
        None => Source::Empty,
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
    let state = agensh_hub::state_dir(dir);
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
    let state = agensh_hub::state_dir(dir);
    if state.exists() {
        return Ok(false);
    }
    let seed = (!config.organization.seed.is_empty()).then(|| dir.join(&config.organization.seed));
    let source = match &seed {
        Some(src) => Source::detect(src).with_context(|| {
            format!(
                "organization.seed in {} names {}",
                dir.join(CONFIG_FILE).display(),
                src.display()
            )
        })?,
        None => Source::Empty,
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
    source: Source<'_>,
    issues: &[NewIssue],
) -> Result<()> {
    std::fs::create_dir_all(state).with_context(|| format!("cannot create {}", state.display()))?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(state, std::fs::Permissions::from_mode(0o700))?;
    }
    let store = crate::cmd::hub::open_store(state, &config.hub.store).await?;
    // Creating the admin token now makes the store complete before the first hub starts.
    store.admin_token().await?;
    if !issues.is_empty() {
        let now = crate::output::now_ms();
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
