//! `agensh init DIR --goal TEXT`: creates the organization directory.

use std::path::Path;

use agensh_domain::config::Config;
use agensh_store::{SqliteStore, Store};
use anyhow::{bail, Context, Result};

use crate::cli::InitArgs;

/// The configuration file at the root of an organization directory.
pub const CONFIG_FILE: &str = "agensh.toml";

pub async fn run(a: InitArgs) -> Result<()> {
    let config = Config::with_goal(&a.goal);
    config.validate()?;
    create(&a.dir, &config).await?;
    println!("created organization in {}", a.dir.display());
    println!(
        "next: agensh hub {}   (then, in another terminal: agensh --dir {} workers add 4)",
        a.dir.display(),
        a.dir.display()
    );
    Ok(())
}

/// Writes agensh.toml, creates `.agensh/` (mode 0700) and the store.
pub async fn create(dir: &Path, config: &Config) -> Result<()> {
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
    std::fs::create_dir_all(&state)
        .with_context(|| format!("cannot create {}", state.display()))?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o700))?;
    }
    let store = SqliteStore::open(&state.join(agensh_hub::STORE_FILE))?;
    // Creating the admin token now makes the store complete before the first hub starts.
    store.admin_token().await?;
    std::fs::write(&toml_path, config.template())
        .with_context(|| format!("cannot write {}", toml_path.display()))?;
    Ok(())
}

/// Reads `DIR/agensh.toml`, with advice when it is missing.
pub fn load_config(dir: &Path) -> Result<Config> {
    let path = dir.join(CONFIG_FILE);
    let text = std::fs::read_to_string(&path).with_context(|| {
        format!(
            "cannot read {} — is {} an organization? create one with `agensh init {} --goal \"...\"`",
            path.display(),
            dir.display(),
            dir.display()
        )
    })?;
    Ok(Config::parse(&text)?)
}
