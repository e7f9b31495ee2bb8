//! `xmc data ...`: data set statistics, the synthetic generator and the text vectorizer.

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
    /// Writes the XC form of a JSON Lines file: xmc's own tf-idf features and label ids, from a
    /// model's vectorizer or from one fitted with a config, so other systems can be trained on
    /// exactly xmc's features.
    Vectorize(VectorizeArgs),
}

/// Arguments of `xmc data vectorize`. Give `--model`, or `--config` and/or `--set text.KEY=V`.
#[derive(Debug, Args)]
pub struct VectorizeArgs {
    /// A model trained from text: its vectorizer and label ids are used.
    #[arg(long, conflicts_with_all = ["config", "set", "fit"])]
    pub model: Option<PathBuf>,
    /// A config file whose `[train.text]` table sets the vectorizer fitted here (default: the
    /// defaults).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Overrides a config key, e.g. `--set text.min_df=1`. Repeatable.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub set: Vec<String>,
    /// Fit the vectorizer and label ids on this JSONL file instead of on the input (e.g. the
    /// training file, to vectorize its test file).
    #[arg(long)]
    pub fit: Option<PathBuf>,
    /// Write the label names, one per line, line i naming label i.
    #[arg(long)]
    pub label_names: Option<PathBuf>,
    /// Write the feature names (the terms), one per line, line i naming feature i.
    #[arg(long)]
    pub feature_names: Option<PathBuf>,
    /// The JSON Lines file (plain or gzip).
    pub input: PathBuf,
    /// The XC file to write (gzip when it ends in `.gz`).
    pub output: PathBuf,
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
        DataCommand::Vectorize(args) => vectorize(args),
    }
}

fn write_lines<'a>(
    path: &std::path::Path,
    lines: impl Iterator<Item = &'a str>,
) -> anyhow::Result<()> {
    let file =
        std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
    let mut w = std::io::BufWriter::new(file);
    for line in lines {
        writeln!(w, "{line}")?;
    }
    w.flush()
        .with_context(|| format!("writing {}", path.display()))
}

fn vectorize(args: VectorizeArgs) -> anyhow::Result<()> {
    use crate::text::corpus::{fit_and_vectorize, fit_file, vectorize_file};
    use crate::text::{LabelMap, TextView};
    let start = std::time::Instant::now();
    let model;
    let fitted;
    let mut fitted_here = None;
    let (view, labels): (&TextView, LabelMap) = match &args.model {
        Some(path) => {
            model = crate::model::Model::open(path, &super::VERIFY)
                .with_context(|| format!("opening model {}", path.display()))?;
            let view = model
                .text()
                .with_context(|| format!("{} was not trained from text", path.display()))?;
            let labels =
                LabelMap::from_names(model.label_names().into_iter().flat_map(|n| n.iter()));
            (view, labels)
        }
        None => {
            let cfg = crate::config::TrainConfig::load(args.config.as_deref(), &args.set)?;
            super::train::init_threads(&cfg);
            match args.fit.as_deref() {
                // Fitted on the input itself: one pass, as `xmc train` makes its rows.
                None => {
                    let t = fit_and_vectorize(&args.input, &cfg.text)
                        .with_context(|| format!("reading {}", args.input.display()))?;
                    fitted = t.fitted.view()?;
                    let labels = t.labels;
                    fitted_here = Some((t.fit_seconds, t.corpus));
                    (&fitted, labels)
                }
                Some(source) => {
                    let (f, labels) = fit_file(source, &cfg.text)
                        .with_context(|| format!("reading {}", source.display()))?;
                    fitted = f.view()?;
                    (&fitted, labels)
                }
            }
        }
    };
    let (fit_s, corpus) = match fitted_here {
        Some(done) => done,
        None => {
            let fit_s = start.elapsed().as_secs_f64();
            let corpus = vectorize_file(&args.input, view, &labels, false)
                .with_context(|| format!("reading {}", args.input.display()))?;
            (fit_s, corpus)
        }
    };
    let total_s = start.elapsed().as_secs_f64();
    data::write_xc_file(&corpus.dataset, &args.output)
        .with_context(|| format!("writing {}", args.output.display()))?;
    if let Some(path) = &args.label_names {
        write_lines(path, labels.names().iter().map(String::as_str))?;
    }
    if let Some(path) = &args.feature_names {
        let terms = view.terms();
        write_lines(path, terms.iter().map(String::as_str))?;
    }
    eprintln!(
        "{}: {} documents, {} features, {} labels ({} label occurrences unknown); \
         fit {:.3} s, vectorize {:.3} s, fit + vectorize {:.3} s",
        args.input.display(),
        corpus.dataset.n_points(),
        corpus.dataset.n_features(),
        corpus.dataset.n_labels(),
        corpus.unknown_labels,
        fit_s,
        corpus.seconds,
        total_s
    );
    Ok(())
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
