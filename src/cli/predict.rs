//! `xmc predict`: writes the top-k labels of every point of a data file.

use super::VERIFY;
use super::train::load_for_model;
use crate::model::evaluate::predict_all;
use crate::model::{Model, Names, PredictOptions};
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
    /// How labels are written: `auto` (names when the model has label names that can stand in a
    /// line, else ids), `names` or `ids` (the form `xmc eval --pred` reads).
    #[arg(long, value_enum, default_value_t = LabelOutput::Auto)]
    pub labels: LabelOutput,
    /// The prediction file to write: one line per point, `label:score label:score ...`, best
    /// first, where `label` is a label name or id (see `--labels`).
    #[arg(long)]
    pub out: PathBuf,
}

/// How `xmc predict` writes a label.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum LabelOutput {
    /// Names when the model has label names and none is empty or holds whitespace, else ids.
    Auto,
    /// Label names; an error for a model without them.
    Names,
    /// Label ids.
    Ids,
}

/// Runs `xmc predict`, spreading the points over all cores.
pub fn run(args: PredictArgs) -> anyhow::Result<()> {
    let model = Model::open(&args.model, &VERIFY)
        .with_context(|| format!("opening model {}", args.model.display()))?;
    let names = match (args.labels, model.label_names()) {
        (LabelOutput::Ids, _) | (LabelOutput::Auto, None) => None,
        (LabelOutput::Names, Some(names)) => Some(writable(names)?),
        (LabelOutput::Auto, Some(names)) => match writable(names) {
            Ok(names) => Some(names),
            Err(e) => {
                eprintln!("xmc predict: writing label ids: {e:#}");
                None
            }
        },
        (LabelOutput::Names, None) => anyhow::bail!(
            "{} has no label names; write ids with --labels ids",
            args.model.display()
        ),
    };
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
        for (i, (l, s)) in p.labels.iter().zip(&p.scores).enumerate() {
            let sep = if i == 0 { "" } else { " " };
            match names.and_then(|n| n.get(l.0 as usize)) {
                Some(name) => write!(w, "{sep}{name}:{s}")?,
                None => write!(w, "{sep}{}:{s}", l.0)?,
            }
        }
        writeln!(w)?;
    }
    w.flush()?;
    Ok(())
}

/// The model's label names, if each can stand in a prediction line: not empty, and without
/// whitespace, which separates the line's `label:score` tokens. (A `:` in a name is fine: the
/// score follows the last one.)
fn writable(names: &Names) -> anyhow::Result<&Names> {
    match names
        .iter()
        .enumerate()
        .find(|(_, n)| n.is_empty() || n.chars().any(char::is_whitespace))
    {
        Some((i, n)) => anyhow::bail!(
            "label {i}'s name {n:?} cannot be written in a prediction line (it is empty or \
             holds whitespace); write ids with --labels ids"
        ),
        None => Ok(names),
    }
}
