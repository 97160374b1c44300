//! `release`: ends one of the caller's live claims.

use agensh_domain::Error;
use serde_json::{json, Value};

use super::common::{object, string};
use super::{Args, Done, Listing, Tool};
use crate::auth::Caller;
use crate::ops::board;
use crate::state::AppState;

pub(super) const TOOL: Tool = Tool {
    name: "release",
    title: "Release a claim",
    read_only: false,
    description,
    schema,
    run: |s, caller, a| Box::pin(call(s, caller, a)),
};

fn description(_: &Listing) -> String {
    "End one of your live claims when its work is merged or abandoned, so peers may take it. \
     Only the claim's author can release it."
        .to_string()
}

fn schema(_: &Listing) -> Value {
    object(
        json!({ "id": string("the claim's record id, like G14", 24) }),
        &["id"],
    )
}

async fn call(s: &AppState, caller: &Caller, a: Args<'_>) -> Result<Done, Error> {
    let id = a.ident("id", "the claim's record id, like G14")?;
    let r = board::release_claim(s, caller, &id).await?;
    Ok(Done::new(
        format!("released {}: {}", r.id, r.text),
        json!({ "record": r }),
    ))
}
