//! `xmc predict`: writes the top-k labels of every point of a data file.

use super::VERIFY;
use super::train::load_for_model;
use crate::model::evaluate::predict_all;
use crate::model::{Model, PredictOptions};
use anyhow::Context;
use clap::Args;
use std::io::Write;
use std::path::PathBuf;

/// Arguments of `xmc predict`.
#[derive(Debug, Args)]
pub struct PredictArgs {
    /// The model bundle.
    #[arg(long)]
    pub model: PathBuf,
    /// The data to predict (XC format, or JSON Lines with `text` for a model trained from text;
    /// labels, if any, are ignored).
    #[arg(long)]
    pub data: PathBuf,
    /// The format of `--data` (default: detected from its content).
    #[arg(long, value_enum)]
    pub format: Option<crate::text::jsonl::DataFormat>,
    /// Labels per point.
    #[arg(long, default_value_t = 5)]
    pub k: usize,
    /// Beam width (default: the model's).
    #[arg(long)]
    pub beam: Option<usize>,
    /// The depth-aware early-stopping search (`false`: the level-wise beam search).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub early_stop: bool,
    /// Further prediction options, as `xmc eval --set` takes them (`rerank_ova=on|off`,
    /// `rerank=on|off`, `candidates=N`, ...). Repeatable.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub set: Vec<String>,
    /// The prediction file to write: one line per point, `label:score ...`, best first.
    #[arg(long)]
    pub out: PathBuf,
}

/// Runs `xmc predict`, spreading the points over all cores.
pub fn run(args: PredictArgs) -> anyhow::Result<()> {
    let model = Model::open(&args.model, &VERIFY)
        .with_context(|| format!("opening model {}", args.model.display()))?;
    let ds = load_for_model(&args.data, args.format, &model, false)?;
    let options = PredictOptions {
        beam: args.beam,
        early_stop: args.early_stop,
        ..super::eval::predict_options(&args.set, args.k)?
    };
    let preds = predict_all(&model, &ds, &options).map_err(|(i, e)| {
        anyhow::anyhow!(e).context(format!("{} point {}", args.data.display(), i + 1))
    })?;
    let file = std::fs::File::create(&args.out)
        .with_context(|| format!("creating {}", args.out.display()))?;
    let mut w = std::io::BufWriter::new(file);
    for p in &preds {
        let line: Vec<String> = p
            .labels
            .iter()
            .zip(&p.scores)
            .map(|(l, s)| format!("{}:{}", l.0, s))
            .collect();
        writeln!(w, "{}", line.join(" "))?;
    }
    w.flush()?;
    Ok(())
}
