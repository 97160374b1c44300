//! `workers`: every worker of the organization, its status and its live claims.

use agensh_domain::record::Record;
use agensh_domain::time::age;
use agensh_domain::Error;
use serde_json::{json, Value};

use super::common::{in_time, object};
use super::{Args, Done, Listing, Tool};
use crate::auth::Caller;
use crate::ops::workers;
use crate::state::AppState;

pub(super) const TOOL: Tool = Tool {
    name: "workers",
    title: "Who is who",
    read_only: true,
    description,
    schema,
    run: |s, caller, a| Box::pin(call(s, caller, a)),
};

fn description(_: &Listing) -> String {
    "Every worker of the organization: its status (starting, busy, idle, stalled, stopped, dead), its live claims, and when it \
     was last active. Use it to see who works on what before you claim, and whom to message."
        .to_string()
}

fn schema(_: &Listing) -> Value {
    object(json!({}), &[])
}

async fn call(s: &AppState, caller: &Caller, _: Args<'_>) -> Result<Done, Error> {
    let list = workers::list_workers(s).await?;
    let now = s.now();
    let mut lines = vec![format!("{} worker(s):", list.len())];
    for w in &list {
        let me = if w.id == caller.id { " (you)" } else { "" };
        let active = w.last_activity.map_or("never active".to_string(), |t| {
            format!("last active {} ago", age(t, now).trim_start_matches('+'))
        });
        let mut line = format!("{}{me} {} — {active}", w.id, w.status.as_str());
        if w.claims.is_empty() {
            line.push_str(" — no live claims");
        } else {
            let claims: Vec<String> = w.claims.iter().map(|c| claim_brief(c, now)).collect();
            line.push_str(&format!(" — claims: {}", claims.join("; ")));
        }
        lines.push(line);
    }
    Ok(Done::new(lines.join("\n"), json!({ "workers": list })))
}

/// One live claim in a worker's line: id, text, label, paths and when it expires.
fn claim_brief(c: &Record, now: i64) -> String {
    let mut s = format!("{} \"{}\"", c.id, c.text);
    if let Some(l) = &c.label {
        s.push_str(&format!(" #{l}"));
    }
    if !c.paths.is_empty() {
        s.push_str(&format!(" paths={}", c.paths.join(",")));
    }
    if let Some(l) = &c.lease {
        s.push_str(&format!(" (expires in {})", in_time(l.expires_at, now)));
    }
    s
}
