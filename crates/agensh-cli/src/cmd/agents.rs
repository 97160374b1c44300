//! `agensh agents install [NAME…]` and `agensh agents list`: the presets' agent CLIs.

use std::io::IsTerminal;
use std::time::Duration;

use agensh_domain::agents::{presets_named, PRESETS};
use agensh_model::data_dir;
use agensh_node::install::{install_each, installed, line, row, Installing};
use anyhow::Result;
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::json;

use crate::cli::{AgentsArgs, AgentsCommand};
use crate::output::{json as print_json, lines};

pub async fn run(a: AgentsArgs) -> Result<()> {
    match a.command {
        AgentsCommand::Install { names, json } => install_cmd(&names, json).await,
        AgentsCommand::List { json } => list(json),
    }
}

async fn install_cmd(names: &[String], as_json: bool) -> Result<()> {
    let presets = presets_named(names)?;
    let data = data_dir()?;
    let bar = bar(presets.len() as u64);
    // A hidden bar prints nothing: off a terminal each line goes to stderr itself.
    let all = install_each(&data, presets, |step| match step {
        Installing::Npm { name, spec } => {
            bar.set_message(format!("npm install {spec}"));
            if bar.is_hidden() {
                eprintln!("installing {name} ({spec})…");
            }
        }
        Installing::Done(line) => {
            if bar.is_hidden() {
                eprintln!("{line}");
            } else {
                bar.println(line);
            }
            bar.inc(1);
        }
    })
    .await?;
    bar.finish_and_clear();
    if as_json {
        print_json(&json!({ "installed": all.done, "failed": all.failed, "dir": all.logs }));
    }
    if !all.failed.is_empty() {
        anyhow::bail!(
            "{} of the agents could not be installed — see the messages above",
            all.failed.len()
        );
    }
    Ok(())
}

/// A bar over the packages with a spinner (npm reports no progress of its own); hidden off
/// a terminal, where each package gets a plain line instead.
fn bar(len: u64) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(len);
    bar.set_style(
        ProgressStyle::with_template("{spinner} [{pos}/{len}] {elapsed:>4} {msg}")
            .expect("a valid template"),
    );
    bar.enable_steady_tick(Duration::from_millis(120));
    bar
}

fn list(as_json: bool) -> Result<()> {
    let data = data_dir()?;
    if as_json {
        let rows: Vec<_> = PRESETS.iter().map(|p| row(&data, p)).collect();
        print_json(&json!({ "agents": rows }));
    } else {
        lines(
            PRESETS
                .iter()
                .map(|p| line(p, installed(&data, p).as_ref())),
        );
    }
    Ok(())
}
