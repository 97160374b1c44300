//! `agensh model install|serve|status`: the local language model (agensh-model does the
//! work; this file parses, reports progress and prints).

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use agensh_model::{
    data_dir, install, installed, serve_log, status, InstallProgress, Installed, ModelServer,
    ProgressLines, ServeOptions, Size, Starting, XLLAMACPP_VERSION,
};
use anyhow::{bail, Context, Result};
use indicatif::{ProgressBar, ProgressStyle};

use crate::cli::{ModelArgs, ModelCommand};
use crate::cmd::hub::stop_signal;
use crate::output::{json, lines};

pub async fn run(a: ModelArgs) -> Result<()> {
    match a.command {
        ModelCommand::Install { size, force } => install_cmd(size.parse()?, force).await,
        ModelCommand::Serve {
            size,
            listen,
            parallel,
            context,
        } => serve(size.parse()?, &listen, parallel, context).await,
        ModelCommand::Status { json: as_json } => status_cmd(as_json),
        ModelCommand::Replay {
            scenario,
            listen,
            record,
        } => replay(&scenario, &listen, record).await,
    }
}

/// `agensh model replay`: serves a scenario until Ctrl-C, then says what it served.
async fn replay(scenario: &Path, listen: &str, record: Option<PathBuf>) -> Result<()> {
    let scenario = agensh_replay::Scenario::load(scenario)?;
    let steps = scenario.steps.len();
    // The handlers go in before the address is printed: a client that stops the server as
    // soon as it has been answered must find it listening for the signal.
    let stop = stop_signal()?;
    // A server for 1,024 workers holds as many connections.
    crate::cmd::hub::raise_open_file_limit();
    let server = agensh_replay::ReplayServer::start(scenario, listen, record).await?;
    let url = server.url();
    outln!("replaying {steps} step(s) at {url}; Ctrl-C stops");
    outln!("  Anthropic Messages: ANTHROPIC_BASE_URL={url}");
    outln!("  OpenAI Chat Completions and Responses: base URL {url}/v1");
    outln!("  Gemini: GOOGLE_GEMINI_BASE_URL={url}");
    stop.await;
    let served = server.served();
    server.stop().await;
    lines(served.iter().map(|(key, s)| s.line(key)));
    Ok(())
}

async fn install_cmd(size: Size, force: bool) -> Result<()> {
    let dir = data_dir()?;
    if let Some(i) = installed(&dir, size).filter(|_| !force) {
        outln!("{}", i.found_line());
        return Ok(());
    }
    let started = Instant::now();
    let i = install_with_bar(&dir, size, force).await?;
    lines(i.made_lines(started.elapsed().as_secs_f64()));
    Ok(())
}

/// Installs with a progress bar on stderr.
async fn install_with_bar(dir: &Path, size: Size, force: bool) -> Result<Installed> {
    let mut bar = StepBar::new();
    let result = install(dir, size, force, &mut |p| bar.update(p)).await;
    bar.finish();
    Ok(result?)
}

/// The local model for `agensh run`/`node` (`agensh_model::start_local`), with a progress
/// bar on stderr while it is installed the first time.
pub async fn start_local(
    size: Size,
    parallel: u32,
    context_per_request: u32,
) -> Result<ModelServer> {
    let mut bar = None;
    let started =
        agensh_model::start_local(size, parallel, context_per_request, &mut |s| match s {
            Starting::Installing { data_dir, bytes } => {
                eprintln!(
                    "installing the local {size} model into {} (once; about {} MB)",
                    data_dir.display(),
                    bytes >> 20
                );
                bar = Some(StepBar::new());
            }
            Starting::Install(p) => {
                if let Some(b) = &mut bar {
                    b.update(p);
                }
            }
            Starting::InstallEnded => {
                if let Some(b) = &bar {
                    b.finish();
                }
            }
        })
        .await;
    Ok(started?)
}

/// One progress bar that changes shape with each step: a spinner for steps of unknown
/// length, items, or bytes with speed and time left (downloading, joining). Plain lines
/// when not on a terminal (agensh_model::ProgressLines).
struct StepBar {
    bar: ProgressBar,
    step: String,
    /// Off a terminal, the lines said instead.
    text: Option<ProgressLines>,
}

impl StepBar {
    fn new() -> Self {
        let tty = std::io::stderr().is_terminal();
        StepBar {
            bar: ProgressBar::new(0),
            step: String::new(),
            text: (!tty).then(ProgressLines::default),
        }
    }

    fn update(&mut self, p: InstallProgress) {
        for line in self.text.as_mut().map(|t| t.lines(&p)).unwrap_or_default() {
            eprintln!("{line}");
        }
        if p.step != self.step {
            self.step = p.step.clone();
            let template = if p.bytes {
                "{msg} [{bar:40}] {bytes}/{total_bytes} {bytes_per_sec} eta {eta}"
            } else if p.total > 0 {
                "{spinner} {msg} [{bar:40}] {pos}/{len} {elapsed}"
            } else {
                "{spinner} {msg} {elapsed}"
            };
            self.bar.reset();
            self.bar.set_message(p.step);
            self.bar.set_style(
                ProgressStyle::with_template(template)
                    .expect("template")
                    .progress_chars("=> "),
            );
            self.bar.enable_steady_tick(Duration::from_millis(120));
        }
        self.bar.set_length(p.total);
        self.bar.set_position(p.done);
    }

    fn finish(&self) {
        self.bar.finish_and_clear();
    }
}

async fn serve(size: Size, listen: &str, parallel: u32, context: u32) -> Result<()> {
    let dir = data_dir()?;
    let Some(inst) = installed(&dir, size) else {
        bail!(
            "the {size} model is not installed in {}: run `agensh model install --size {size}` first",
            dir.display()
        );
    };
    let (host, port) = parse_listen(listen)?;
    let log = serve_log(&dir, size);
    let opts = ServeOptions {
        host,
        port,
        parallel,
        context_per_request: context,
        log_file: Some(log.clone()),
        ..ServeOptions::default()
    };
    eprintln!("loading the {size} model (log: {})", log.display());
    let started = Instant::now();
    let signal = stop_signal()?;
    tokio::pin!(signal);
    let mut server = tokio::select! {
        s = ModelServer::start(&inst, &opts) => s?,
        _ = &mut signal => return Ok(()),
    };
    let url = server.base_url();
    outln!(
        "serving {} at {url} (ready in {:.1} s; {parallel} request(s) at once, {context} tokens of context each)",
        server.model_name(),
        started.elapsed().as_secs_f64()
    );
    outln!(
        "point any OpenAI-compatible client at {url} with model \"{}\" (any API key); Ctrl-C stops",
        server.model_name()
    );
    let exited = tokio::select! {
        _ = &mut signal => None,
        st = server.wait() => Some(st),
    };
    match exited {
        None => {
            server.stop().await;
            eprintln!("stopped");
            Ok(())
        }
        Some(st) => {
            let st = st.map_or_else(|e| e.to_string(), |s| s.to_string());
            bail!(
                "the model server exited on its own ({st}); see its log: {}",
                log.display()
            )
        }
    }
}

/// "HOST:PORT" or "[V6]:PORT" → (host, port).
fn parse_listen(listen: &str) -> Result<(String, u16)> {
    let (host, port) = listen
        .rsplit_once(':')
        .with_context(|| format!("--listen {listen}: want HOST:PORT, e.g. 127.0.0.1:8080"))?;
    let port = port
        .parse::<u16>()
        .with_context(|| format!("--listen {listen}: the port must be a number 0-65535"))?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host.is_empty() {
        bail!("--listen {listen}: the host is empty, e.g. 127.0.0.1:{port}");
    }
    Ok((host.to_string(), port))
}

fn status_cmd(as_json: bool) -> Result<()> {
    let dir = data_dir()?;
    let all: Vec<_> = Size::ALL.iter().map(|s| status(&dir, *s)).collect();
    if as_json {
        json(&serde_json::json!({
            "data_dir": dir,
            "server_package": format!("xllamacpp {XLLAMACPP_VERSION}"),
            "models": all,
        }));
        return Ok(());
    }
    outln!("data directory: {}", dir.display());
    lines(all.iter().map(|s| s.line()));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::parse_listen;

    #[test]
    fn listen_addresses() {
        assert_eq!(
            parse_listen("127.0.0.1:8080").unwrap(),
            ("127.0.0.1".into(), 8080)
        );
        assert_eq!(parse_listen("0.0.0.0:0").unwrap(), ("0.0.0.0".into(), 0));
        assert_eq!(parse_listen("[::1]:9000").unwrap(), ("::1".into(), 9000));
        for bad in ["8080", "127.0.0.1:x", ":8080", "h:70000"] {
            assert!(parse_listen(bad).is_err(), "{bad}");
        }
    }
}
