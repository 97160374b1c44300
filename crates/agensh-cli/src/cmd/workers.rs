//! `agensh workers add|list|token`.

use agensh_client::{show, Client};
use agensh_workspace::checkout::{self, Created};
use agensh_workspace::Workspace;
use anyhow::Result;
use indicatif::{ProgressBar, ProgressStyle};

use crate::cli::{Global, WorkersArgs, WorkersCommand};
use crate::output::{json, json_or, now_ms, Usage};

/// Runs the command against the organization's hub (served here for the command when none
/// runs: see `connect::with_hub`).
pub async fn run(c: &Client, g: &Global, a: WorkersArgs) -> Result<()> {
    match a.command {
        WorkersCommand::Add {
            count,
            json: as_json,
        } => {
            let added = c.add_workers(count).await?;
            if as_json {
                json(&added);
            } else {
                for w in added {
                    outln!("{}", w.id);
                }
            }
        }
        WorkersCommand::List { json: as_json } => {
            let workers = c.workers().await?;
            json_or(as_json, &workers, |w| show::org::workers(w, now_ms()));
        }
        WorkersCommand::Token { id } => {
            outln!("{}", c.worker_token(&id).await?.token);
        }
        WorkersCommand::Checkout { ids, all, jobs } => {
            let ids = if all {
                c.workers().await?.into_iter().map(|w| w.id).collect()
            } else {
                ids
            };
            checkout(g, &ids, jobs).await?;
        }
    }
    Ok(())
}

/// Creates checkouts under `DIR/workers/` with a progress bar.
async fn checkout(g: &Global, ids: &[String], jobs: usize) -> Result<()> {
    if ids.is_empty() {
        return Err(
            Usage("name the workers to check out (e.g. w01 w02), or use --all".into()).into(),
        );
    }
    for id in ids {
        agensh_domain::ids::validate_worker_id(id)?;
    }
    let ws = Workspace::open(&agensh_hub::state_dir(&g.dir).join(agensh_workspace::REPO_DIR))?;
    let bar = ProgressBar::new(ids.len() as u64);
    bar.set_style(
        ProgressStyle::with_template("checkouts [{bar:40}] {pos}/{len} {per_sec} eta {eta}")
            .expect("template")
            .progress_chars("=> "),
    );
    let started = std::time::Instant::now();
    let made = checkout::create_many(&ws, &g.dir, ids, jobs, |_, _| bar.inc(1)).await?;
    bar.finish_and_clear();
    let new = made.iter().filter(|(_, c)| *c == Created::New).count();
    outln!(
        "{new} new checkout(s), {} already there, under {} ({:.1} s)",
        made.len() - new,
        g.dir.join("workers").display(),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}
