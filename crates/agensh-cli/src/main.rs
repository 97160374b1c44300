//! `agensh`: the command line. It parses arguments and hands each command to the library
//! that does the work (the hub, the client); nothing else lives here.

#[macro_use]
mod output;
mod cli;
mod cmd;
mod connect;

use std::ffi::OsString;
use std::io::IsTerminal;

use clap::parser::ValueSource;
use clap::{ArgMatches, CommandFactory, FromArgMatches, ValueEnum};

use crate::cli::{Cli, ColorWhen, Command, GLOBAL_IDS};
use crate::connect::with_hub;
use crate::output::{Exit, Failure, Style, Usage};

/// Exit codes: see [`output::AFTER_HELP`] (shown by `agensh --help`).
fn main() {
    let args: Vec<OsString> = std::env::args_os().collect();
    // The evaluator's sandbox launcher: this same binary, before any thread starts.
    if args.get(1).is_some_and(|a| a == "__sandbox") {
        let spec = args.get(2).and_then(|s| s.to_str()).unwrap_or_default();
        agensh_eval::sandbox::launch(spec)
    }
    let clap_color = match color_in(&args) {
        Some(ColorWhen::Always) => clap::ColorChoice::Always,
        Some(ColorWhen::Never) => clap::ColorChoice::Never,
        _ => clap::ColorChoice::Auto,
    };
    let matches = match Cli::command().color(clap_color).try_get_matches_from(&args) {
        Ok(m) => m,
        Err(e) if e.use_stderr() && args.iter().any(|a| a == "--json") => {
            output::set_style(Style {
                json_errors: true,
                color: false,
            });
            output::write_failure(&Failure {
                exit: Exit::Usage,
                code: "usage".into(),
                message: clap_message(&e),
            });
            std::process::exit(Exit::Usage as i32)
        }
        Err(e) => e.exit(),
    };
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    let no_color = std::env::var("NO_COLOR").ok();
    let color = cli
        .global
        .color
        .enabled(std::io::stderr().is_terminal(), no_color.as_deref());
    output::set_style(Style {
        json_errors: wants_json(&matches),
        color,
    });
    // indicatif draws through console: its bars follow the same choice.
    console::set_colors_enabled(color);
    console::set_colors_enabled_stderr(color);
    if let Err(e) = check_globals(&cli.command, &matches) {
        output::fail(&e.into());
    }
    init_logging(&cli, color);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime starts");
    if let Err(e) = runtime.block_on(run(cli)) {
        output::fail(&e);
    }
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    let g = cli.global;
    match cli.command {
        Command::Init(a) => cmd::init::run(&g, a).await,
        Command::Hub(a) => cmd::hub::run(&g, a).await,
        Command::Workers(a) => with_hub(&g, async |c| cmd::workers::run(c, &g, a).await).await,
        Command::Nodes(a) => with_hub(&g, async |c| cmd::nodes::run(c, a).await).await,
        Command::Board(a) => with_hub(&g, async |c| cmd::board::run(c, a).await).await,
        Command::Msg(a) => with_hub(&g, async |c| cmd::msg::run(c, a).await).await,
        Command::Events(a) => cmd::events::run(&g, a).await,
        Command::Notice(a) => cmd::events::notice(&g, a).await,
        Command::Budget(a) => cmd::budget::run(&g, a).await,
        Command::Pr(a) => with_hub(&g, async |c| cmd::pr::run(c, &g, a).await).await,
        Command::Issue(a) => with_hub(&g, async |c| cmd::issue::run(c, &g, a).await).await,
        Command::Mcp(a) => cmd::mcp::run(&g, a).await,
        Command::Agent(a) => cmd::agent::run(a).await,
        Command::Agents(a) => cmd::agents::run(a).await,
        Command::Model(a) => cmd::model::run(a).await,
        Command::Eval(a) => cmd::eval::run(a).await,
        Command::Bench(a) => cmd::bench::run(&g, a).await,
        Command::Run(a) => cmd::run::run(&g, a).await,
        Command::Node(a) => cmd::node::node(&g, a).await,
        Command::Status(a) if a.watch => cmd::dashboard::watch(&g, a.json).await,
        Command::Status(a) => cmd::status::status(&g, a).await,
        Command::Dashboard(a) => cmd::dashboard::run(&g, a).await,
        Command::Config(a) => cmd::config::run(&g, a),
        Command::Store(a) => cmd::store::run(&g, a).await,
        Command::Doctor(a) => cmd::doctor::run(a).await,
        Command::Completions(a) => cmd::completions::run(a),
    }
}

/// `--color` as given, looked up before clap parses (clap's own messages follow it too).
fn color_in(args: &[OsString]) -> Option<ColorWhen> {
    let mut it = args.iter().filter_map(|a| a.to_str());
    while let Some(a) = it.next() {
        let value = match a.strip_prefix("--color") {
            Some("") => it.next(),
            Some(v) => v.strip_prefix('='),
            None => None,
        };
        if let Some(v) = value {
            return ColorWhen::from_str(v, true).ok();
        }
    }
    None
}

/// clap's error without its `error: ` prefix and colour.
fn clap_message(e: &clap::Error) -> String {
    let text = e.render().to_string();
    text.trim()
        .strip_prefix("error: ")
        .unwrap_or(text.trim())
        .to_string()
}

/// Whether the (sub)command that runs was given `--json`.
fn wants_json(m: &ArgMatches) -> bool {
    matches!(m.try_get_one::<bool>("json"), Ok(Some(true)))
        || m.subcommand().is_some_and(|(_, sub)| wants_json(sub))
}

/// Refuses a global option given on the command line to a command that would ignore it.
fn check_globals(command: &Command, m: &ArgMatches) -> Result<(), Usage> {
    let name = m.subcommand_name().unwrap_or("agensh");
    for (id, flag) in GLOBAL_IDS {
        if m.value_source(id) == Some(ValueSource::CommandLine) && !command.uses().contains(&id) {
            return Err(Usage(format!(
                "`agensh {name}` does not use {flag} — leave it out"
            )));
        }
    }
    Ok(())
}

fn init_logging(cli: &Cli, color: bool) {
    let default = if matches!(cli.command, Command::Hub(_)) {
        "info"
    } else {
        "warn"
    };
    let filter = tracing_subscriber::EnvFilter::try_from_env("AGENSH_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(color)
        .with_writer(std::io::stderr)
        .init();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_argument_has_help() {
        fn walk(cmd: &clap::Command, path: &str, missing: &mut Vec<String>) {
            for arg in cmd.get_arguments() {
                let id = arg.get_id().as_str();
                if id == "help" || id == "version" {
                    continue;
                }
                if arg.get_help().is_none() && arg.get_long_help().is_none() {
                    missing.push(format!("{path} {id}"));
                }
            }
            for sub in cmd.get_subcommands() {
                if sub.get_about().is_none() && sub.get_long_about().is_none() {
                    missing.push(format!("{path} {} (the command)", sub.get_name()));
                }
                walk(sub, &format!("{path} {}", sub.get_name()), missing);
            }
        }
        let mut missing = Vec::new();
        walk(&Cli::command(), "agensh", &mut missing);
        assert!(missing.is_empty(), "arguments without help: {missing:#?}");
    }

    #[test]
    fn the_grammar_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn color_is_found_before_parsing() {
        let args = |a: &[&str]| a.iter().map(OsString::from).collect::<Vec<_>>();
        assert_eq!(
            color_in(&args(&["agensh", "--color", "never", "x"])),
            Some(ColorWhen::Never)
        );
        assert_eq!(
            color_in(&args(&["agensh", "board", "--color=always"])),
            Some(ColorWhen::Always)
        );
        assert_eq!(color_in(&args(&["agensh", "board"])), None);
    }

    #[test]
    fn auto_colour_needs_a_terminal_and_no_no_color() {
        assert!(ColorWhen::Auto.enabled(true, None));
        assert!(ColorWhen::Auto.enabled(true, Some("")));
        assert!(!ColorWhen::Auto.enabled(true, Some("1")));
        assert!(!ColorWhen::Auto.enabled(false, None));
        assert!(ColorWhen::Always.enabled(false, Some("1")));
        assert!(!ColorWhen::Never.enabled(true, None));
    }
}
