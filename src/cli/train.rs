//! `xmc train`: reads data, trains, evaluates on held-out data if given, writes the bundle.

use super::progress::Bars;
use crate::bundle::{Bundle, OpenOptions};
use crate::config::TrainConfig;
use crate::data::{self, Dataset};
use crate::model::evaluate::evaluate_model;
use crate::model::{Model, PredictOptions};
use crate::router::CvPoint;
use crate::text::corpus::{TextTraining, fit_and_vectorize, vectorize_file};
use crate::text::jsonl::{DataFormat, detect_format};
use crate::text::{LabelMap, TextView};
use crate::train::{self, Progress, Quiet, TrainInputs, Trained};
use anyhow::Context;
use clap::Args;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Arguments of `xmc train`.
#[derive(Debug, Args)]
pub struct TrainArgs {
    /// The TOML config file (its `[train]` table).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// The training data, plain or gzip: XC format (header optional), or JSON Lines with `text`
    /// and `labels` (label names), which trains the model's own text vectorizer.
    #[arg(long)]
    pub train: PathBuf,
    /// The format of `--train` and `--test` (default: JSON Lines when a file's first non-blank
    /// byte is `{`, else XC).
    #[arg(long, value_enum)]
    pub format: Option<DataFormat>,
    /// Held-out data: its metrics are recorded in the bundle's metadata.
    #[arg(long)]
    pub test: Option<PathBuf>,
    /// Where to write the bundle.
    #[arg(long)]
    pub out: PathBuf,
    /// Label names, one per line; default: `labels.txt[.gz]` beside the training file, if present.
    #[arg(long)]
    pub label_names: Option<PathBuf>,
    /// Feature names, one per line; default: `features.txt[.gz]` beside the training file, if
    /// present.
    #[arg(long)]
    pub feature_names: Option<PathBuf>,
    /// Overrides a config key, e.g. `--set trees=3`. Repeatable.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub set: Vec<String>,
    /// No progress bars.
    #[arg(long)]
    pub quiet: bool,
}

/// Finds `{stem}.txt` or `{stem}.txt.gz` beside the training file.
pub(crate) fn names_beside(train: &Path, stem: &str) -> Option<PathBuf> {
    let dir = train.parent()?;
    [format!("{stem}.txt"), format!("{stem}.txt.gz")]
        .iter()
        .map(|n| dir.join(n))
        .find(|p| p.is_file())
}

/// Reads the names file given on the command line, or else the one named `{stem}` beside the
/// training file, if there is one.
fn load_names(
    given: Option<&Path>,
    train: &Path,
    stem: &str,
) -> anyhow::Result<Option<Vec<String>>> {
    let path = given
        .map(Path::to_path_buf)
        .or_else(|| names_beside(train, stem));
    path.map(|p| {
        data::read_names(&p).with_context(|| format!("reading names from {}", p.display()))
    })
    .transpose()
}

/// Sizes the global rayon pool to the config's `threads` (0: one per core). A second call finds
/// the pool already built (e.g. in tests) and keeps it.
pub fn init_threads(cfg: &TrainConfig) {
    if cfg.threads > 0 {
        let _ = rayon::ThreadPoolBuilder::new()
            .num_threads(cfg.threads)
            .build_global();
    }
}

/// Reads a data file, L2-normalizing rows when the config asks for it.
pub fn load_data(path: &Path, normalize: bool) -> anyhow::Result<Dataset> {
    let mut ds = data::read_xc_file(path).with_context(|| format!("reading {}", path.display()))?;
    if normalize {
        data::l2_normalize_rows(&mut ds.features);
    }
    Ok(ds)
}

/// The format of `path`: `given`, or else detected from its content.
pub fn data_format(path: &Path, given: Option<DataFormat>) -> anyhow::Result<DataFormat> {
    match given {
        Some(f) => Ok(f),
        None => detect_format(path).with_context(|| format!("reading {}", path.display())),
    }
}

/// Reads a JSONL file as `model`'s rows: vectorized by the model's own text vectorizer, label
/// names mapped to the model's ids. Names the model does not know are dropped (they can never be
/// predicted, so they count as misses in P@k), and said on stderr.
pub fn load_jsonl_for(
    path: &Path,
    view: &TextView,
    labels: &LabelMap,
    need_labels: bool,
) -> anyhow::Result<Dataset> {
    let corpus = vectorize_file(path, view, labels, need_labels)
        .with_context(|| format!("reading {}", path.display()))?;
    if corpus.unknown_labels > 0 {
        eprintln!(
            "{}: {} label occurrences name labels the model does not know; they count as misses",
            path.display(),
            corpus.unknown_labels
        );
    }
    Ok(corpus.dataset)
}

/// Reads a data file to run `model` on: XC as it is, JSON Lines through the model's text
/// vectorizer and label names.
pub fn load_for_model(
    path: &Path,
    format: Option<DataFormat>,
    model: &Model,
    need_labels: bool,
) -> anyhow::Result<Dataset> {
    match data_format(path, format)? {
        DataFormat::Xc => load_data(path, false),
        DataFormat::Jsonl => {
            let view = model.text().with_context(|| {
                format!(
                    "{} is JSON Lines, but the model was not trained from text",
                    path.display()
                )
            })?;
            let labels =
                LabelMap::from_names(model.label_names().into_iter().flat_map(|n| n.iter()));
            load_jsonl_for(path, view, &labels, need_labels)
        }
    }
}

/// The training inputs of XC data `ds`: its names, if known, and its statistics.
pub fn xc_inputs(
    ds: &Dataset,
    label_names: Option<Vec<String>>,
    feature_names: Option<Vec<String>>,
) -> anyhow::Result<TrainInputs> {
    Ok(TrainInputs {
        label_names,
        feature_names,
        train_stats: serde_json::to_value(data::DataStats::of(ds))?,
        text: None,
    })
}

/// One line on a text fit: documents, terms, labels and the time it took.
pub fn text_summary(t: &TextTraining) -> String {
    let vectorize_s = t.corpus.seconds;
    format!(
        "text: {} documents, {} terms kept of {} seen, {} labels; fit {:.2} s, \
         vectorize {:.2} s (fit + vectorize {:.2} s)",
        t.corpus.dataset.n_points(),
        t.fitted.meta.terms,
        t.fitted.meta.terms_seen,
        t.labels.len(),
        t.fit_seconds,
        vectorize_s,
        t.fit_seconds + vectorize_s
    )
}

/// The training set and inputs of a text fit: its rows, L2-normalized when `normalize` (as
/// every query is), the label names and the vectorizer.
pub fn text_inputs(t: TextTraining, normalize: bool) -> anyhow::Result<(Dataset, TrainInputs)> {
    let mut ds = t.corpus.dataset;
    if normalize {
        data::l2_normalize_rows(&mut ds.features);
    }
    let inputs = TrainInputs {
        label_names: Some(t.labels.names().to_vec()),
        feature_names: None,
        train_stats: serde_json::to_value(data::DataStats::of(&ds))?,
        text: Some(t.fitted),
    };
    Ok((ds, inputs))
}

/// The warning for a BP model whose cross-validation found no λ within the tolerance.
pub fn bp_warning(trained: &Trained) -> Option<String> {
    let cv = trained.meta.bp.as_ref()?.cv.as_ref()?;
    if cv.grid.iter().any(|p| p.within) {
        return None;
    }
    let worst = cv
        .grid
        .iter()
        .find(|p| p.lambda == cv.chosen)
        .map_or(f64::NAN, CvPoint::worst_loss);
    Some(format!(
        "warning: no bp_lambda kept the cross-validated P@1 loss within bp_tolerance = {:.4} \
         on every fold; chose bp_lambda = {}, whose worst fold lost {:.4}",
        cv.tolerance, cv.chosen, worst
    ))
}

/// Runs `xmc train`.
pub fn run(args: TrainArgs) -> anyhow::Result<()> {
    let cfg = TrainConfig::load(args.config.as_deref(), &args.set)?;
    init_threads(&cfg);
    let start = Instant::now();
    let format = data_format(&args.train, args.format)?;
    let (ds, inputs) = match format {
        DataFormat::Xc => {
            let ds = load_data(&args.train, cfg.normalize)?;
            let inputs = xc_inputs(
                &ds,
                load_names(args.label_names.as_deref(), &args.train, "labels")?,
                load_names(args.feature_names.as_deref(), &args.train, "features")?,
            )?;
            (ds, inputs)
        }
        DataFormat::Jsonl => {
            if args.label_names.is_some() || args.feature_names.is_some() {
                anyhow::bail!(
                    "--label-names and --feature-names are for XC data: JSON Lines names its \
                     labels, and the vocabulary names the features"
                );
            }
            let t = fit_and_vectorize(&args.train, &cfg.text)
                .with_context(|| format!("reading {}", args.train.display()))?;
            eprintln!("{}", text_summary(&t));
            text_inputs(t, cfg.normalize)?
        }
    };
    let read_s = start.elapsed().as_secs_f64();
    let bars = Bars::new();
    let progress: &dyn Progress = if args.quiet { &Quiet } else { &bars };
    let start = Instant::now();
    let mut trained = train::train(&ds, &cfg, inputs, progress)?;
    bars.finish();
    let train_s = start.elapsed().as_secs_f64();
    if let Some(warning) = bp_warning(&trained) {
        eprintln!("{warning}");
    }
    trained
        .meta
        .created
        .seconds
        .insert("read".into(), read_s.into());
    if let Some(test) = &args.test {
        let model = Model::from_bundle(Bundle::from_bytes(&trained.to_bytes()?)?)?;
        let test_ds = load_for_model(test, args.format, &model, true)?;
        let report = evaluate_model(&model, &test_ds, &PredictOptions::default(), &[1, 3, 5])
            .map_err(|(i, e)| anyhow::anyhow!("{} point {}: {e}", test.display(), i + 1))?;
        // Latency is a property of this machine and run, not of the model: it goes with the
        // other timings in `created`, so that the rest of the metadata stays reproducible.
        let mut quality = report.quality_json();
        if let Some(obj) = quality.as_object_mut() {
            let timings: Vec<String> = obj
                .keys()
                .filter(|k| k.starts_with("latency_"))
                .cloned()
                .collect();
            for k in timings {
                if let Some(v) = obj.remove(&k) {
                    trained
                        .meta
                        .created
                        .seconds
                        .insert(format!("heldout_{k}"), v);
                }
            }
        }
        trained.meta.heldout = Some(quality);
    }
    trained.write(&args.out)?;
    let model = Model::open(&args.out, &OpenOptions::default())?;
    eprintln!(
        "wrote {} ({} bytes, version {}) in {:.2} s of training",
        args.out.display(),
        model.bundle().file_len(),
        model.meta().version,
        train_s
    );
    Ok(())
}
