//! `agensh`: the command line. It parses arguments and hands each command to the library
//! that does the work (the hub, the client); nothing else lives here.

mod cli;
mod cmd;
mod connect;
mod output;

use clap::Parser;

use crate::cli::{Cli, Command};

/// Exit codes: 0 success, 1 the hub refused the request, 2 bad usage, 3 the hub could
/// not be reached or failed inside.
fn main() {
    let cli = Cli::parse();
    init_logging(&cli);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime starts");
    let result = runtime.block_on(run(cli));
    if let Err(e) = result {
        eprintln!("error: {e:#}");
        std::process::exit(output::exit_code(&e));
    }
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    let g = cli.global;
    match cli.command {
        Command::Init(a) => cmd::init::run(a).await,
        Command::Hub(a) => cmd::hub::run(a).await,
        Command::Workers(a) => cmd::workers::run(&g, a).await,
        Command::Board(a) => cmd::board::run(&g, a).await,
        Command::Msg(a) => cmd::msg::run(&g, a).await,
        Command::Events(a) => cmd::events::run(&g, a).await,
        Command::Notice(a) => cmd::events::notice(&g, a).await,
        Command::Pr(a) => cmd::pr::run(&g, a).await,
        Command::Mcp(a) => cmd::mcp::run(&g, a).await,
        Command::Agent(a) => cmd::agent::run(a).await,
        Command::Model(a) => cmd::model::run(a).await,
        Command::Run(a) => cmd::run::run(a).await,
        Command::Node(a) => cmd::run::node(&g, a).await,
        Command::Status(a) => cmd::run::status(&g, a).await,
    }
}

fn init_logging(cli: &Cli) {
    let default = if matches!(cli.command, Command::Hub(_)) {
        "info"
    } else {
        "warn"
    };
    let filter = tracing_subscriber::EnvFilter::try_from_env("AGENSH_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
}
