//! `agensh completions bash|zsh|fish|…`: a completion script for the shell, on stdout.

use anyhow::Result;
use clap::CommandFactory;

use crate::cli::{Cli, CompletionsArgs};

pub fn run(a: CompletionsArgs) -> Result<()> {
    let mut script = Vec::new();
    clap_complete::generate(a.shell, &mut Cli::command(), "agensh", &mut script);
    crate::output::print_bytes(&script);
    Ok(())
}
