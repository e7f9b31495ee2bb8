//! `xmc sweep`: one model per λ, a table (Markdown and JSON) and a plot (SVG).

use super::eval::predict_options;
use super::train::load_data;
use crate::config::TrainConfig;
use crate::model::PredictOptions;
use crate::sweep::{self, SweepOptions};
use anyhow::{Context, bail};
use clap::Args;
use std::io::Write as _;
use std::path::PathBuf;

/// Arguments of `xmc sweep`.
#[derive(Debug, Args)]
pub struct SweepArgs {
    /// The TOML config file (its `[train]` table); `lambda` is set per model.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// The training data.
    #[arg(long)]
    pub train: PathBuf,
    /// The test data the models are measured on.
    #[arg(long)]
    pub test: PathBuf,
    /// The output directory: `sweep.md`, `sweep.json`, `sweep.svg`.
    #[arg(long)]
    pub out: PathBuf,
    /// The λ' values (λ = 2λ'/(1 + λ')), comma-separated.
    #[arg(long, value_delimiter = ',', default_values_t = sweep::DEFAULT_LAMBDA_PRIMES.to_vec())]
    pub lambda_primes: Vec<f64>,
    /// Interleaved latency rounds; the table reports the median of the rounds' means.
    #[arg(long, default_value_t = 3)]
    pub repeats: usize,
    /// Overrides a training key, e.g. `--set max_leaf=50`. Repeatable.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub set: Vec<String>,
    /// Prediction options, as for `xmc eval --set` (`beam=N`). Repeatable.
    #[arg(long = "predict-set", value_name = "KEY=VALUE")]
    pub predict_set: Vec<String>,
}

/// Runs `xmc sweep`.
pub fn run(args: SweepArgs) -> anyhow::Result<()> {
    let cfg = TrainConfig::load(args.config.as_deref(), &args.set)?;
    super::train::init_threads(&cfg);
    let predict = predict_options(&args.predict_set, PredictOptions::default().k)?;
    if predict.deadline_us.is_some() {
        bail!("`deadline_us` would make the sweep's latencies meaningless");
    }
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("creating {}", args.out.display()))?;
    let train_ds = load_data(&args.train, cfg.normalize)?;
    let test_ds = load_data(&args.test, false)?;
    let options = SweepOptions {
        lambda_primes: args.lambda_primes.clone(),
        repeats: args.repeats,
        predict,
    };
    let rows = sweep::run(&cfg, &train_ds, &test_ds, &options, &mut |line| {
        eprintln!("{line}");
    })?;

    let name = args
        .train
        .parent()
        .and_then(|p| p.file_name())
        .map_or_else(|| "data".to_string(), |n| n.to_string_lossy().into_owned());
    let md = format!(
        "# λ sweep on {name}\n\n{} train points, {} test points, {} labels; T = {}, max_leaf = {}, \
         beam = {}, k = {}; latency: in process, one thread, median of {} interleaved rounds.\n\n{}",
        train_ds.n_points(),
        test_ds.n_points(),
        train_ds.n_labels(),
        cfg.trees,
        cfg.max_leaf,
        options.predict.beam.unwrap_or(cfg.beam),
        options.predict.k,
        options.repeats.max(1),
        sweep::markdown(&rows)
    );
    let json = serde_json::json!({
        "dataset": name,
        "train": args.train.display().to_string(),
        "test": args.test.display().to_string(),
        "config": cfg,
        "repeats": options.repeats.max(1),
        "k": options.predict.k,
        "beam": options.predict.beam.unwrap_or(cfg.beam),
        "rows": rows,
    });
    let write = |file: &str, text: &str| -> anyhow::Result<()> {
        let path = args.out.join(file);
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))
    };
    write("sweep.md", &md)?;
    write("sweep.json", &serde_json::to_string_pretty(&json)?)?;
    sweep::plot::write_svg(
        &rows,
        &format!("λ sweep on {name}"),
        &args.out.join("sweep.svg"),
    )?;
    write!(std::io::stdout(), "{md}")?;
    eprintln!("wrote {}/sweep.{{md,json,svg}}", args.out.display());
    Ok(())
}
