//! `xmc eval ...`.

use clap::Args;

/// Arguments of `xmc eval`.
#[derive(Debug, Args)]
pub struct EvalArgs {}

/// Runs `xmc eval`.
pub fn run(_args: EvalArgs) -> anyhow::Result<()> {
    anyhow::bail!("xmc eval needs --truth and --pred")
}
