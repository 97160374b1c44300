//! `agensh doctor`: what agensh needs on this machine, what it found, and what to do about
//! each missing piece (the checks are `agensh_node::doctor`'s). Fails (exit 4) only when
//! something required is missing: git, and python with venv for the local model. Agent
//! CLIs and the model itself are optional.

use agensh_node::doctor;
use anyhow::{bail, Result};

use crate::cli::DoctorArgs;
use crate::output::{json, lines};

pub async fn run(a: DoctorArgs) -> Result<()> {
    let checks = doctor::checks().await;
    let missing = doctor::missing(&checks);
    if a.json {
        json(&serde_json::json!({ "ok": missing.is_empty(), "checks": checks }));
    } else {
        lines(doctor::lines(&checks));
    }
    if !missing.is_empty() {
        bail!(
            "agensh needs {} on this machine — see what to do above",
            missing.join(", ")
        );
    }
    Ok(())
}
