//! `agensh dashboard` (a one-time link to the dashboard, opened in a browser) and
//! `agensh status --watch` (the dashboard's counts and newest changes in the terminal,
//! from the same live stream).

use std::io::IsTerminal;

use agensh_client::show::watch::{follow, Watched};
use agensh_domain::text::{escape, Lines};
use agensh_protocol::dashboard::Frame;
use anyhow::{bail, Result};

use crate::cli::{DashboardArgs, Global};
use crate::output::{json, lines};

/// Prints a one-time login link to the running hub's dashboard, and opens it in a browser
/// when this machine has a display (and `--no-open` is not given).
pub async fn run(g: &Global, a: DashboardArgs) -> Result<()> {
    let conn = crate::connect::connect(g).await?;
    if conn.is_local() {
        conn.close().await;
        bail!(
            "no hub is running for {} — start the organization first (`agensh run` or `agensh hub`); the dashboard is served by its hub",
            g.dir.display()
        );
    }
    let link = conn.client.dashboard_link().await;
    conn.close().await;
    let link = link?;
    if a.json {
        json(&link);
        return Ok(());
    }
    outln!("{}", link.url);
    eprintln!("open it once within 10 minutes: it logs this browser in (an HTTP-only cookie) and is spent");
    if !a.no_open && has_display() {
        match std::process::Command::new("xdg-open")
            .arg(&link.url)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
        {
            Ok(_) => eprintln!("opened in your browser"),
            Err(e) => eprintln!("could not open a browser ({e}); open the link by hand"),
        }
    }
    Ok(())
}

fn has_display() -> bool {
    ["DISPLAY", "WAYLAND_DISPLAY"]
        .iter()
        .any(|v| std::env::var_os(v).is_some_and(|x| !x.is_empty()))
}

/// `agensh status --watch`: the counts and newest changes, redrawn as the hub's stream
/// brings them (a terminal), else each change on a line of its own (`--json`: each frame).
/// Reconnects after a break from where it was, so nothing is missed or shown twice.
pub async fn watch(g: &Global, as_json: bool) -> Result<()> {
    let conn = crate::connect::connect(g).await?;
    if conn.is_local() {
        conn.close().await;
        bail!(
            "no hub is running for {} — `status --watch` follows a running organization; start it with `agensh run` or `agensh hub`",
            g.dir.display()
        );
    }
    let dashboard = format!("{}/", conn.client.base());
    let tty = std::io::stderr().is_terminal() && !as_json;
    let mut drawn = 0usize;
    let show = |seen: &Watched, frame: &Frame, changes: Vec<String>| {
        if as_json {
            json(frame);
        } else if tty {
            let (_, cols) = console::Term::stderr().size_checked().unwrap_or((24, 100));
            drawn = agensh_node::view::redraw(&seen.render(&dashboard, cols as usize), drawn);
        } else {
            lines(changes.iter().map(|c| escape(c, Lines::One).into_owned()));
        }
    };
    tokio::select! {
        r = follow(&conn.client, show, |note| eprintln!("{note}")) => r?,
        _ = tokio::signal::ctrl_c() => {}
    }
    Ok(())
}
