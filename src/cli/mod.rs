//! Command-line interface: argument parsing, file reading, and the steps around the library's
//! calls (`train` evaluates a new bundle on held-out data and records the metrics in its metadata).

use clap::{Parser, Subcommand};

pub mod data;
pub mod eval;
pub mod inspect;
pub mod predict;
mod progress;
pub mod serve;
pub mod shard;
pub mod sweep;
pub mod train;

/// xmc: extreme multi-label classification.
#[derive(Debug, Parser)]
#[command(name = "xmc", version, about)]
pub struct Cli {
    /// The subcommand to run.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Trains a model and writes its bundle (or, with plan, shard and merge, trains it in shards).
    Train(shard::TrainCommand),
    /// Writes the top-k labels of every point of a data file.
    Predict(predict::PredictArgs),
    /// Scores a model on labelled data, or a prediction file against the truth.
    Eval(eval::EvalArgs),
    /// Shows a model bundle's metadata, sections and tree shape.
    Inspect(inspect::InspectArgs),
    /// Serves predictions over HTTP, hot-swapping the model when its file changes.
    Serve(serve::ServeArgs),
    /// Trains one model per λ and writes a table and a plot of precision, depth and latency.
    Sweep(sweep::SweepArgs),
    /// Data set tools: statistics and the synthetic generator.
    #[command(subcommand)]
    Data(data::DataCommand),
}

/// Runs the parsed command line.
pub fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Train(cmd) => shard::run_command(cmd),
        Command::Predict(args) => predict::run(args),
        Command::Eval(args) => eval::run(args),
        Command::Inspect(args) => inspect::run(args),
        Command::Serve(args) => serve::run(args),
        Command::Sweep(args) => sweep::run(args),
        Command::Data(cmd) => data::run(cmd),
    }
}

/// How the one-shot commands (`eval`, `predict`) open a model: every checksum, weight entry and
/// name is verified, so a corrupt bundle is refused rather than answered from.
pub(crate) const VERIFY: crate::bundle::OpenOptions = crate::bundle::OpenOptions {
    verify_checksums: true,
    prefault: false,
    yield_between_steps: false,
};
