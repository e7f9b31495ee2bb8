//! `xmc data ...`: data set statistics and the synthetic generator.

use std::io::Write as _;
use std::path::PathBuf;

use anyhow::Context;
use clap::{Args, Subcommand};

use crate::data::{self, DataStats, SynthParams};

/// Data set subcommands.
#[derive(Debug, Subcommand)]
pub enum DataCommand {
    /// Prints the statistics of an XC file (plain or gzip).
    Stats(StatsArgs),
    /// Generates a synthetic XC data set (and optionally a test split from the same model).
    Synth(SynthArgs),
}

/// Arguments of `xmc data stats`.
#[derive(Debug, Args)]
pub struct StatsArgs {
    /// The XC file.
    pub file: PathBuf,
    /// Prints JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// Arguments of `xmc data synth`; defaults are `SynthParams::DEFAULT`.
#[derive(Debug, Args)]
pub struct SynthArgs {
    /// Training points.
    #[arg(long, default_value_t = SynthParams::DEFAULT.n)]
    pub n: usize,
    /// Features.
    #[arg(long, default_value_t = SynthParams::DEFAULT.d)]
    pub d: usize,
    /// Labels.
    #[arg(long, default_value_t = SynthParams::DEFAULT.l)]
    pub l: usize,
    /// Power-law exponent of label frequencies.
    #[arg(long, default_value_t = SynthParams::DEFAULT.zipf)]
    pub zipf: f64,
    /// Mean labels per point.
    #[arg(long, default_value_t = SynthParams::DEFAULT.labels_per_point)]
    pub labels_per_point: f64,
    /// Feature profile size per label.
    #[arg(long, default_value_t = SynthParams::DEFAULT.features_per_label)]
    pub features_per_label: usize,
    /// Feature draws per point.
    #[arg(long, default_value_t = SynthParams::DEFAULT.features_per_point)]
    pub features_per_point: usize,
    /// Probability that a feature draw is noise.
    #[arg(long, default_value_t = SynthParams::DEFAULT.noise)]
    pub noise: f64,
    /// Random seed.
    #[arg(long, default_value_t = SynthParams::DEFAULT.seed)]
    pub seed: u64,
    /// Output file for the training split (gzip when it ends in `.gz`).
    #[arg(long)]
    pub out: PathBuf,
    /// Test points drawn from the same model.
    #[arg(long, default_value_t = 0, requires = "out_test")]
    pub n_test: usize,
    /// Output file for the test split.
    #[arg(long)]
    pub out_test: Option<PathBuf>,
}

/// Runs a data subcommand.
pub fn run(cmd: DataCommand) -> anyhow::Result<()> {
    match cmd {
        DataCommand::Stats(args) => stats(args),
        DataCommand::Synth(args) => synth(args),
    }
}

fn stats(args: StatsArgs) -> anyhow::Result<()> {
    let ds = data::read_xc_file(&args.file)
        .with_context(|| format!("reading {}", args.file.display()))?;
    let stats = DataStats::of(&ds);
    if args.json {
        writeln!(
            std::io::stdout(),
            "{}",
            serde_json::to_string_pretty(&stats)?
        )?;
    } else {
        print!("{stats}");
    }
    Ok(())
}

fn synth(args: SynthArgs) -> anyhow::Result<()> {
    let params = SynthParams {
        n: args.n,
        d: args.d,
        l: args.l,
        zipf: args.zipf,
        labels_per_point: args.labels_per_point,
        features_per_label: args.features_per_label,
        features_per_point: args.features_per_point,
        noise: args.noise,
        seed: args.seed,
    };
    let (train, test) = data::generate_split(&params, args.n, args.n_test);
    data::write_xc_file(&train, &args.out)
        .with_context(|| format!("writing {}", args.out.display()))?;
    if let Some(path) = &args.out_test {
        data::write_xc_file(&test, path).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}
