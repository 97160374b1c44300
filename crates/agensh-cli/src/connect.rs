//! Finding the hub and the identity to use: `--hub`/`AGENSH_HUB` or `.agensh/hub.json`
//! for the URL; `--token`/`AGENSH_TOKEN`, else the admin token from hub.json.
//!
//! When no hub serves the organization (none was ever started, or the run that served it
//! ended) but its state is in `--dir`, [`connect`] serves that state in this process for
//! the one command, on a free port of 127.0.0.1: the board, the messages and the pull
//! requests stay readable (and writable) after a run, with nothing to start by hand.

use std::path::Path;

use agensh_client::Client;
use agensh_hub::org::running_hub;
use agensh_hub::{state_dir, RunningHub, STORE_FILE};
use anyhow::{anyhow, Result};

use crate::cli::Global;

/// A client for the hub the global options point at.
pub fn client(g: &Global) -> Result<Client> {
    let info = running_hub(&g.dir);
    let url = match (&g.hub, &info) {
        (Some(u), _) => u.clone(),
        (None, Some(i)) => i.url.clone(),
        (None, None) => {
            return Err(anyhow!(
                "no hub found: give --hub URL, set AGENSH_HUB, or run in an organization directory with a running hub ({} has no .agensh/hub.json of a running hub — start one with `agensh hub {}`)",
                g.dir.display(),
                g.dir.display()
            ))
        }
    };
    let token = match (&g.token, &info) {
        (Some(t), _) => t.clone(),
        (None, Some(i)) => i.admin_token.clone(),
        (None, None) => {
            return Err(anyhow!(
                "no token: set AGENSH_TOKEN to a worker's token (`agensh workers token ID` prints one), or run where .agensh/hub.json is readable"
            ))
        }
    };
    Ok(Client::new(&url, &token).acting_as(g.as_worker.clone()))
}

/// A client, and the hub this process serves for it when none was running.
pub struct Connection {
    /// The client to call.
    pub client: Client,
    /// The organization's hub, served by this process for this command.
    local: Option<RunningHub>,
}

impl Connection {
    /// Whether this process serves the organization's state for this command only (no
    /// hub was running).
    pub fn is_local(&self) -> bool {
        self.local.is_some()
    }

    /// Ends the hub this process served, if any, after its last answer is written.
    pub async fn close(self) {
        if let Some(hub) = self.local {
            hub.shutdown().await;
        }
    }
}

/// As [`client`]; when no hub is given or running but `--dir` holds an organization's
/// state, that state served in this process for this command (a note on stderr says so).
pub async fn connect(g: &Global) -> Result<Connection> {
    let store_file = state_dir(&g.dir).join(STORE_FILE);
    if g.hub.is_some() || running_hub(&g.dir).is_some() || !store_file.is_file() {
        return Ok(Connection {
            client: client(g)?,
            local: None,
        });
    }
    let hub = serve_here(&g.dir).await?;
    eprintln!(
        "note: no hub is running for {}; serving its state in this process for this command",
        g.dir.display()
    );
    let token = g.token.clone().unwrap_or_else(|| hub.admin_token.clone());
    Ok(Connection {
        client: Client::new(&hub.url, &token).acting_as(g.as_worker.clone()),
        local: Some(hub),
    })
}

/// Runs `f` with a client of the organization's hub, served by this process for the
/// command when none runs ([`connect`]), and ends that hub after `f`'s last answer.
pub async fn with_hub<T>(g: &Global, f: impl AsyncFnOnce(&Client) -> Result<T>) -> Result<T> {
    let conn = connect(g).await?;
    let result = f(&conn.client).await;
    conn.close().await;
    result
}

/// A hub over the organization's state on a free port of 127.0.0.1.
async fn serve_here(dir: &Path) -> Result<RunningHub> {
    let config = crate::cmd::config::load(dir, &[])?;
    let (store, workspace) = agensh_hub::org::open_state(dir, &config.hub.store).await?;
    Ok(agensh_hub::start_with_workspace(store, workspace, config, "127.0.0.1:0").await?)
}
