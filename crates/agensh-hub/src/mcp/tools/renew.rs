//! `renew`: extends the lease of one of the caller's live claims.

use agensh_domain::record::MAX_LEASE_SECS;
use agensh_domain::Error;
use serde_json::{json, Value};

use super::common::{integer, lease_state, object, string};
use super::{Args, Done, Listing, Tool};
use crate::auth::Caller;
use crate::ops::board;
use crate::state::AppState;

pub(super) const TOOL: Tool = Tool {
    name: "renew",
    title: "Renew a claim",
    read_only: false,
    description,
    schema,
    run: |s, caller, a| Box::pin(call(s, caller, a)),
};

fn description(l: &Listing) -> String {
    format!(
        "Extend one of your live claims: its lease becomes lease_secs from now (default {} s, 1–{MAX_LEASE_SECS}). \
         Renew long work before the lease runs out — an expired claim no longer tells peers the work is taken.",
        l.lease()
    )
}

fn schema(l: &Listing) -> Value {
    object(
        json!({
            "id": string("the claim's record id, like G14", 24),
            "lease_secs": integer(&format!("seconds from now (default {})", l.lease()), 1, MAX_LEASE_SECS),
        }),
        &["id"],
    )
}

async fn call(s: &AppState, caller: &Caller, a: Args<'_>) -> Result<Done, Error> {
    let id = a.ident("id", "the claim's record id, like G14")?;
    let lease = a.opt_u64("lease_secs", "seconds from now, 1 to 86400")?;
    let r = board::renew_claim(s, caller, &id, lease).await?;
    let state = r
        .lease
        .as_ref()
        .map_or(String::new(), |l| lease_state(l, s.now()));
    Ok(Done::new(
        format!("renewed {}: {state}", r.id),
        json!({ "record": r }),
    ))
}
