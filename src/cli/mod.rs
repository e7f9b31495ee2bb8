//! Command-line interface: argument parsing that calls the library and nothing else.

use clap::{Parser, Subcommand};

pub mod data;
pub mod eval;

/// xmc: extreme multi-label classification.
#[derive(Debug, Parser)]
#[command(name = "xmc", version, about)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Data set tools: statistics and the synthetic generator.
    #[command(subcommand)]
    Data(data::DataCommand),
    /// Scores predictions against the truth.
    Eval(eval::EvalArgs),
}

/// Runs the parsed command line.
pub fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Data(cmd) => data::run(cmd),
        Command::Eval(args) => eval::run(args),
    }
}
