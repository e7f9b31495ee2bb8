//! `xmc data ...`.

use clap::Subcommand;

/// Data set subcommands.
#[derive(Debug, Subcommand)]
pub enum DataCommand {}

/// Runs a data subcommand.
pub fn run(cmd: DataCommand) -> anyhow::Result<()> {
    match cmd {}
}
