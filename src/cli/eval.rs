//! `xmc eval`: scores a model on labelled data, or a prediction file against the truth.

use super::VERIFY;
use super::train::load_for_model;
use crate::data;
use crate::eval::{self, EvalReport, Evaluator, PropensityParams, predfile};
use crate::model::evaluate::evaluate_model;
use crate::model::{Model, PredictOptions};
use anyhow::{Context, bail};
use clap::Args;
use std::io::Write as _;
use std::path::{Path, PathBuf};

/// Arguments of `xmc eval`. Give `--model` and `--data`, or `--truth` and `--pred`.
#[derive(Debug, Args)]
pub struct EvalArgs {
    /// The model bundle to evaluate (with `--data`).
    #[arg(long, requires = "data", conflicts_with_all = ["truth", "pred"])]
    pub model: Option<PathBuf>,
    /// Labelled data to predict (XC format, or JSON Lines for a model trained from text), with
    /// `--model`.
    #[arg(long)]
    pub data: Option<PathBuf>,
    /// The format of `--data` (default: detected from its content).
    #[arg(long, value_enum)]
    pub format: Option<crate::text::jsonl::DataFormat>,
    /// The true labels (XC format), with `--pred`.
    #[arg(long, requires = "pred")]
    pub truth: Option<PathBuf>,
    /// A prediction file (`label:score ...` per line, best first), with `--truth`.
    #[arg(long)]
    pub pred: Option<PathBuf>,
    /// Report every k of 1, 3, 5 up to this, and this k itself.
    #[arg(long, default_value_t = 5)]
    pub k: usize,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Training data whose label counts give the propensities (`--truth` mode; default: the truth
    /// file's own counts). In `--model` mode the model's stored training counts are used.
    #[arg(long)]
    pub train: Option<PathBuf>,
    /// Propensity parameter A (Jain et al. 2016).
    #[arg(long, default_value_t = PropensityParams::DEFAULT.a)]
    pub propensity_a: f64,
    /// Propensity parameter B.
    #[arg(long, default_value_t = PropensityParams::DEFAULT.b)]
    pub propensity_b: f64,
    /// Prediction options for `--model` mode: `beam=N`, `early_stop=true|false`,
    /// `deadline_us=N`, `k=N`, the number of labels the search looks for (default: the
    /// largest reported cut-off), `block_candidates=N` for BP models, for models with FIAT
    /// `impute=on|off` and (with `fiat.input`) `impute_weight=W`, for REFRAG models
    /// `rerank=on|off`, `candidates=N`, `rerank_alpha=A`, `rerank_gamma=G`,
    /// and for models with an OVA reranker `rerank_ova=on|off`, `rerank_ova_alpha=A`.
    /// Repeatable.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub set: Vec<String>,
    /// Erase this share of each point's features at random before predicting (`--model` mode),
    /// to measure robustness to missing features (FIAT).
    #[arg(long, default_value_t = 0.0)]
    pub erase: f64,
    /// The seed of `--erase`.
    #[arg(long, default_value_t = 0)]
    pub erase_seed: u64,
}

/// The cut-offs reported for `--k K`: 1, 3 and 5 always (so the standard keys exist), then K.
pub fn cutoffs(k: usize) -> Vec<usize> {
    let mut ks = vec![1, 3, 5];
    if k > 0 && !ks.contains(&k) {
        ks.push(k);
    }
    ks
}

fn print(report: &EvalReport, json: bool) -> anyhow::Result<()> {
    if json {
        writeln!(
            std::io::stdout(),
            "{}",
            serde_json::to_string(&report.quality_json())?
        )?;
    } else {
        print!("{report}");
    }
    Ok(())
}

/// A number in [0, 1] given for option `key`.
fn unit_interval(key: &str, value: &str) -> anyhow::Result<f32> {
    let a: f32 = value
        .parse()
        .with_context(|| format!("`{key}`: `{value}` is not a number"))?;
    if !(0.0..=1.0).contains(&a) {
        bail!("`{key}` must be in [0, 1], got {a}");
    }
    Ok(a)
}

/// A finite number of at least 0 for `key`.
fn non_negative(key: &str, value: &str) -> anyhow::Result<f32> {
    let g: f32 = value
        .parse()
        .with_context(|| format!("`{key}`: `{value}` is not a number"))?;
    if !g.is_finite() || g < 0.0 {
        bail!("`{key}` must be finite and >= 0, got {g}");
    }
    Ok(g)
}

/// Parses `--set` prediction options; the search looks for `default_k` labels unless `k=N` says
/// otherwise.
pub fn predict_options(set: &[String], default_k: usize) -> anyhow::Result<PredictOptions> {
    let mut opts = PredictOptions {
        k: default_k,
        ..PredictOptions::default()
    };
    let on_off = |key: &str, value: &str| -> anyhow::Result<bool> {
        match value {
            "true" | "on" => Ok(true),
            "false" | "off" => Ok(false),
            _ => bail!("`{key}`: `{value}` is not true/false or on/off"),
        }
    };
    for s in set {
        let (key, value) = s
            .split_once('=')
            .with_context(|| format!("`--set {s}`: expected KEY=VALUE"))?;
        let value = value.trim();
        match key.trim() {
            "beam" => {
                let beam: usize = value
                    .parse()
                    .with_context(|| format!("`beam`: `{value}` is not a positive integer"))?;
                if beam == 0 {
                    bail!("`beam` must be at least 1");
                }
                opts.beam = Some(beam);
            }
            "early_stop" => {
                opts.early_stop = match value {
                    "true" | "on" => true,
                    "false" | "off" => false,
                    _ => bail!("`early_stop`: `{value}` is not true/false or on/off"),
                }
            }
            "k" => {
                let k: usize = value
                    .parse()
                    .with_context(|| format!("`k`: `{value}` is not a positive integer"))?;
                if k == 0 {
                    bail!("`k` must be at least 1");
                }
                opts.k = k;
            }
            "deadline_us" => {
                opts.deadline_us = Some(value.parse().with_context(|| {
                    format!("`deadline_us`: `{value}` is not a non-negative integer")
                })?);
            }
            "block_candidates" => {
                let b: usize = value.parse().with_context(|| {
                    format!("`block_candidates`: `{value}` is not a positive integer")
                })?;
                if b == 0 {
                    bail!("`block_candidates` must be at least 1");
                }
                opts.block_candidates = Some(b);
            }
            "rerank" => opts.rerank = Some(on_off("rerank", value)?),
            "impute" => opts.impute = Some(on_off("impute", value)?),
            "impute_weight" => opts.impute_weight = Some(non_negative("impute_weight", value)?),
            "candidates" => {
                let c: usize = value.parse().with_context(|| {
                    format!("`candidates`: `{value}` is not a positive integer")
                })?;
                if c == 0 {
                    bail!("`candidates` must be at least 1");
                }
                opts.candidates = Some(c);
            }
            "rerank_alpha" => opts.rerank_alpha = Some(unit_interval("rerank_alpha", value)?),
            "rerank_ova" => opts.rerank_ova = Some(on_off("rerank_ova", value)?),
            "rerank_ova_alpha" => {
                opts.rerank_ova_alpha = Some(unit_interval("rerank_ova_alpha", value)?);
            }
            "rerank_gamma" => opts.rerank_gamma = Some(non_negative("rerank_gamma", value)?),
            other => {
                bail!(
                    "unknown prediction option `{other}` (known: beam, early_stop, deadline_us, k, \
                     block_candidates, rerank, impute, impute_weight, candidates, rerank_alpha, rerank_gamma, \
                     rerank_ova, rerank_ova_alpha)"
                )
            }
        }
    }
    if opts.deadline_us.is_some() && !opts.early_stop {
        bail!("`deadline_us` needs `early_stop=true`: the level-wise beam search has no deadline");
    }
    Ok(opts)
}

/// Runs `xmc eval`.
pub fn run(args: EvalArgs) -> anyhow::Result<()> {
    let ks = cutoffs(args.k);
    match (&args.model, &args.data, &args.truth, &args.pred) {
        (Some(model), Some(data), None, None) => {
            let opts = predict_options(&args.set, ks.iter().copied().max().unwrap_or(5))?;
            let model = Model::open(model, &VERIFY)
                .with_context(|| format!("opening model {}", model.display()))?;
            if !(0.0..=1.0).contains(&args.erase) {
                bail!("--erase must be in [0, 1], got {}", args.erase);
            }
            let mut ds = load_for_model(data, args.format, &model, true)?;
            if args.erase > 0.0 {
                ds = crate::defrag::erase_features(&ds, args.erase, args.erase_seed);
            }
            if ds.n_labels() > model.meta().n_labels {
                bail!(
                    "{} has L = {} but the model knows {} labels",
                    data.display(),
                    ds.n_labels(),
                    model.meta().n_labels
                );
            }
            let report = evaluate_model(&model, &ds, &opts, &ks)
                .map_err(|(i, e)| anyhow::anyhow!("{} point {}: {e}", data.display(), i + 1))?;
            print(&report, args.json)
        }
        (None, None, Some(truth), Some(pred)) => {
            let report = eval_files(truth, pred, args.train.as_deref(), &args, &ks)?;
            print(&report, args.json)
        }
        _ => bail!("give --model and --data, or --truth and --pred"),
    }
}

fn eval_files(
    truth: &Path,
    pred: &Path,
    train: Option<&Path>,
    args: &EvalArgs,
    ks: &[usize],
) -> anyhow::Result<EvalReport> {
    let truth_ds =
        data::read_xc_file(truth).with_context(|| format!("reading {}", truth.display()))?;
    let preds = predfile::read_predictions(pred, None)?;
    if preds.len() != truth_ds.n_points() {
        bail!(
            "{} has {} lines but {} has {} points",
            pred.display(),
            preds.len(),
            truth.display(),
            truth_ds.n_points()
        );
    }
    let (counts, n) = match train {
        Some(t) => {
            let ds = data::read_xc_file(t).with_context(|| format!("reading {}", t.display()))?;
            (crate::data::label_counts(&ds.labels), ds.n_points())
        }
        None => (
            crate::data::label_counts(&truth_ds.labels),
            truth_ds.n_points(),
        ),
    };
    let props = eval::propensities(
        &counts,
        n,
        PropensityParams {
            a: args.propensity_a,
            b: args.propensity_b,
        },
    );
    let mut e = Evaluator::new(ks, &props);
    let mut ranked = Vec::new();
    for (i, p) in preds.iter().enumerate() {
        ranked.clear();
        ranked.extend(p.iter().map(|&(l, _)| l));
        e.add(&ranked, truth_ds.label_row(i), None, None);
    }
    Ok(e.finish())
}
