//! The flat model's two scorers against one label tree, per query, one thread, in process.
//!
//! Opens a flat model (`XMC_BENCH_FLAT`) and a T = 1 tree (`XMC_BENCH_TREE`), bundles trained on
//! the same data, or trains both with the defaults (`model = "flat"`, and the default tree) on
//! `train.txt.gz` of the data set (`XMC_BENCH_SET`, default `citeulike-t`, under
//! `XMC_DATASETS`; or `XMC_BENCH_DATA`, a directory). The queries are its test split
//! (`test.txt.gz`, or `test.jsonl.gz` through the models' text vectorizer), the first
//! `XMC_BENCH_QUERIES` of them (default all). Each query runs, in rotating order, through:
//!
//! - `scan`: the flat model scored by the pass over every label (`Model::set_flat_scan`);
//! - `flat`: the flat model scored through the query's postings and the bias order;
//! - `tree`: the label tree (k = 5, its beam, the early-stopping search).
//!
//! over `XMC_BENCH_PASSES` passes (default 3) after one unmeasured pass. It prints, per scorer,
//! the labels scored and the postings (weight entries) read per query, and the mean, p50 and p99
//! latency of `Model::predict_into` in µs, then whether `scan` and `flat` gave the same labels
//! and score bits on every query.
//!
//! Run with `cargo bench --bench flat`. It prints figures and asserts nothing about time.

mod common;

use std::time::Instant;
use xmc::bundle::OpenOptions;
use xmc::cli::train::load_for_model;
use xmc::config::TrainConfig;
use xmc::data::{self, Dataset};
use xmc::model::{Model, PredictOptions, Prediction, Scratch};
use xmc::train::{self, Quiet, TrainInputs};
use xmc::tree::view::{SearchLimits, SearchScratch};

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let n = sorted.len();
    sorted[((p * n as f64).ceil() as usize).clamp(1, n) - 1]
}

fn env_usize(name: &str) -> anyhow::Result<Option<usize>> {
    std::env::var(name)
        .ok()
        .map(|v| {
            v.parse()
                .map_err(|_| anyhow::anyhow!("{name}: not a count: {v:?}"))
        })
        .transpose()
}

/// The bundle in `var`, or a model trained on `train` with `sets`.
fn model(
    var: &str,
    train: &dyn Fn() -> anyhow::Result<Dataset>,
    sets: &[&str],
) -> anyhow::Result<Model> {
    if let Ok(path) = std::env::var(var) {
        return Ok(Model::open(path.as_ref(), &OpenOptions::default())?);
    }
    let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
    let cfg = TrainConfig::load(None, &sets)?;
    let start = Instant::now();
    let trained = train::train(&train()?, &cfg, TrainInputs::default(), &Quiet)?;
    println!("trained {sets:?} in {:.1} s", start.elapsed().as_secs_f64());
    Ok(Model::from_bundle(xmc::bundle::Bundle::from_bytes(
        &trained.to_bytes()?,
    )?)?)
}

fn main() -> anyhow::Result<()> {
    let set = std::env::var("XMC_BENCH_SET").unwrap_or_else(|_| "citeulike-t".into());
    let Some(dir) = common::data_dir("flat", &set) else {
        return Ok(());
    };
    let train = || -> anyhow::Result<Dataset> {
        let mut ds = data::read_xc_file(&dir.join("train.txt.gz"))?;
        data::l2_normalize_rows(&mut ds.features);
        Ok(ds)
    };
    let mut flat = model("XMC_BENCH_FLAT", &train, &["model=flat"])?;
    let tree = model("XMC_BENCH_TREE", &train, &[])?;
    let test_path = ["test.txt.gz", "test.jsonl.gz"]
        .iter()
        .map(|f| dir.join(f))
        .find(|p| p.exists())
        .ok_or_else(|| anyhow::anyhow!("{} has no test split", dir.display()))?;
    let test = load_for_model(&test_path, None, &flat, false)?;
    let n = env_usize("XMC_BENCH_QUERIES")?
        .unwrap_or(usize::MAX)
        .min(test.n_points());
    let passes = env_usize("XMC_BENCH_PASSES")?.unwrap_or(3).max(1);
    println!(
        "{set}: {n} queries, {} labels, flat model {} MB, tree {} MB, {passes} passes",
        flat.meta().n_labels,
        flat.bundle().file_len() / 1_000_000,
        tree.bundle().file_len() / 1_000_000,
    );

    // Postings read by the flat scorer, per query (the scan reads the same ones, and every bias).
    let ftree = &flat.trees()[0];
    let order = flat.flat_order(0);
    let mut s = SearchScratch::default();
    let mut postings = 0u64;
    let limits = SearchLimits {
        k: 5,
        beam: usize::MAX,
        deadline: None,
    };
    let loss = flat.meta().loss;
    for i in 0..n {
        let (idx, val) = test.feature_row(i);
        postings += u64::from(
            ftree
                .flat_search(order, idx, val, &[], loss, &limits, &mut s)
                .postings,
        );
    }

    let opts = PredictOptions::default();
    let names = ["scan", "flat", "tree"];
    let mut times: [Vec<f64>; 3] = Default::default();
    let mut scored = [0u64; 3];
    let mut scratch = Scratch::default();
    let mut out: [Prediction; 3] = Default::default();
    let mut differ = 0usize;
    for pass in 0..=passes {
        for i in 0..n {
            let (idx, val) = test.feature_row(i);
            for r in 0..3 {
                let which = (i + r) % 3;
                if which < 2 {
                    flat.set_flat_scan(which == 0);
                }
                let m = if which == 2 { &tree } else { &flat };
                let start = Instant::now();
                m.predict_into(idx, val, &opts, &mut scratch, &mut out[which])?;
                let t = start.elapsed().as_secs_f64() * 1e6;
                if pass > 0 {
                    times[which].push(t);
                    scored[which] += u64::from(out[which].outputs_evaluated);
                }
            }
            let bits = |p: &Prediction| p.scores.iter().map(|s| s.to_bits()).collect::<Vec<_>>();
            if pass == 0 && (out[0].labels != out[1].labels || bits(&out[0]) != bits(&out[1])) {
                differ += 1;
            }
        }
    }
    let q = (n * passes) as f64;
    println!("scorer  labels/query  postings/query  mean_us  p50_us  p99_us");
    for (w, name) in names.iter().enumerate() {
        let t = &mut times[w];
        t.sort_by(f64::total_cmp);
        let mean = t.iter().sum::<f64>() / t.len() as f64;
        let post = if w == 2 {
            "-".to_string()
        } else {
            format!("{:.0}", postings as f64 / n as f64)
        };
        println!(
            "{name:6}  {:12.0}  {post:>14}  {mean:7.1}  {:6.1}  {:6.1}",
            scored[w] as f64 / q,
            percentile(t, 0.5),
            percentile(t, 0.99),
        );
    }
    println!(
        "flat / tree: mean {:.2}x, p99 {:.2}x; flat / scan: mean {:.2}x",
        mean_of(&times[1]) / mean_of(&times[2]),
        percentile(&times[1], 0.99) / percentile(&times[2], 0.99),
        mean_of(&times[1]) / mean_of(&times[0]),
    );
    println!("scan and flat answers differ on {differ} of {n} queries");
    Ok(())
}

fn mean_of(t: &[f64]) -> f64 {
    t.iter().sum::<f64>() / t.len() as f64
}
