//! `agensh init DIR --goal TEXT`: creates the organization directory.

use agensh_domain::config::Config;
use agensh_hub::org;
use anyhow::Result;

use crate::cli::{Global, InitArgs};
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
    org::create_with_issues(&dir, &config, a.from.as_deref(), &issues).await?;
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
