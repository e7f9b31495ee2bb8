//! Batch prediction throughput against the number of threads, on real data.
//!
//! Opens the bundle in `XMC_BENCH_MODEL`, or trains `config/debian-deps.toml`'s model (the
//! serving model: one tree, branching 8) on `train.txt.gz` of `XMC_BENCH_DATA` (default
//! `debian-deps` under `XMC_DATASETS`). Then, for each thread count of `XMC_BENCH_THREADS`
//! (comma-separated; default 1, 2, 4, … up to the cores this process may use, and that count),
//! it predicts every point of the test split (k = 5, the model's beam, the early-stopping
//! search) on a rayon pool of that many threads, `XMC_BENCH_PASSES` times (default 5) after one
//! pass unmeasured, through `predict_all`, which `xmc predict` runs (each thread with its own
//! `Scratch`). It prints, per thread count, the median pass's queries a second, the speedup
//! over the first count and its efficiency (speedup over the thread ratio), and whether the
//! labels and scores equal the first count's bit for bit.
//!
//! Run with `cargo bench --bench scaling`. It prints figures and asserts nothing about time.

mod common;

use std::path::PathBuf;
use std::time::Instant;
use xmc::bundle::{Bundle, OpenOptions};
use xmc::config::TrainConfig;
use xmc::data::{self, Dataset};
use xmc::model::evaluate::predict_all;
use xmc::model::{Model, PredictOptions, Prediction};
use xmc::train::{self, Quiet, TrainInputs};

/// A digest of every point's labels and score bits, in order.
fn digest(preds: &[Prediction]) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    let mut mix = |x: u64| h = (h ^ x).wrapping_mul(0x0000_0100_0000_01b3);
    for p in preds {
        mix(p.labels.len() as u64);
        for (l, s) in p.labels.iter().zip(&p.scores) {
            mix(u64::from(l.0));
            mix(u64::from(s.to_bits()));
        }
    }
    h
}

fn thread_counts() -> anyhow::Result<Vec<usize>> {
    if let Ok(list) = std::env::var("XMC_BENCH_THREADS") {
        return list
            .split(',')
            .map(|t| {
                t.trim()
                    .parse::<usize>()
                    .ok()
                    .filter(|&n| n > 0)
                    .ok_or_else(|| anyhow::anyhow!("XMC_BENCH_THREADS: bad thread count {t:?}"))
            })
            .collect();
    }
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut counts: Vec<usize> = std::iter::successors(Some(1usize), |&t| Some(t * 2))
        .take_while(|&t| t < cores)
        .collect();
    counts.push(cores);
    Ok(counts)
}

fn main() -> anyhow::Result<()> {
    let Some(dir) = common::data_dir("scaling", "debian-deps") else {
        return Ok(());
    };
    let passes: usize = match std::env::var("XMC_BENCH_PASSES") {
        Ok(p) => p
            .parse()
            .ok()
            .filter(|&n| n > 0)
            .ok_or_else(|| anyhow::anyhow!("XMC_BENCH_PASSES: bad count {p:?}"))?,
        Err(_) => 5,
    };
    let counts = thread_counts()?;
    let mut test: Dataset = data::read_xc_file(&dir.join("test.txt.gz"))?;
    data::l2_normalize_rows(&mut test.features);
    let model = match std::env::var("XMC_BENCH_MODEL") {
        Ok(path) => Model::open(path.as_ref(), &OpenOptions::default())?,
        Err(_) => {
            let config = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("config/debian-deps.toml");
            let cfg = TrainConfig::load(Some(&config), &[])?;
            let mut ds = data::read_xc_file(&dir.join("train.txt.gz"))?;
            data::l2_normalize_rows(&mut ds.features);
            let trained = train::train(&ds, &cfg, TrainInputs::default(), &Quiet)?;
            Model::from_bundle(Bundle::from_bytes(&trained.to_bytes()?)?)?
        }
    };
    let opts = PredictOptions::default();
    let n = test.n_points();
    println!(
        "model {} {}, {} test points of {}, k = {}, beam {}, {} passes per thread count",
        model.meta().name,
        model.meta().version,
        n,
        dir.display(),
        opts.k,
        model.meta().beam,
        passes
    );
    println!();
    println!(
        "| threads | queries/s (median pass) | µs per query per thread | speedup | efficiency | same predictions |"
    );
    println!("|---:|---:|---:|---:|---:|---|");
    let mut first: Option<(usize, f64, u64)> = None;
    for &t in &counts {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(t).build()?;
        let pass = || -> anyhow::Result<Vec<Prediction>> {
            pool.install(|| predict_all(&model, &test, &opts))
                .map_err(|(i, e)| anyhow::anyhow!("test point {}: {e}", i + 1))
        };
        let preds = pass()?;
        let sum = digest(&preds);
        let mut rates = Vec::with_capacity(passes);
        for _ in 0..passes {
            let start = Instant::now();
            let preds = pass()?;
            rates.push(n as f64 / start.elapsed().as_secs_f64());
            std::hint::black_box(preds);
        }
        rates.sort_by(f64::total_cmp);
        let rate = rates[rates.len() / 2];
        let (t0, rate0, sum0) = *first.get_or_insert((t, rate, sum));
        let speedup = rate / rate0;
        println!(
            "| {t} | {rate:.0} | {:.2} | {speedup:.2}× | {:.0}% | {} |",
            t as f64 * 1e6 / rate,
            100.0 * speedup / (t as f64 / t0 as f64),
            if sum == sum0 { "yes" } else { "NO" }
        );
    }
    Ok(())
}
