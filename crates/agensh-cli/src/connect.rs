//! Finding the hub and the identity to use: `--hub`/`AGENSH_HUB` or `.agensh/hub.json`
//! for the URL; `--token`/`AGENSH_TOKEN`, else the admin token from hub.json.

use agensh_client::Client;
use anyhow::{anyhow, Result};

use crate::cli::Global;

/// A client for the hub the global options point at.
pub fn client(g: &Global) -> Result<Client> {
    let info = agensh_hub::read_hub_info(&g.dir).ok();
    let url = match (&g.hub, &info) {
        (Some(u), _) => u.clone(),
        (None, Some(i)) => i.url.clone(),
        (None, None) => {
            return Err(anyhow!(
                "no hub found: give --hub URL, set AGENSH_HUB, or run in an organization directory with a running hub ({} has no .agensh/hub.json — start one with `agensh hub {}`)",
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
