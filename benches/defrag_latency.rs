//! Per-query latency of several models on the same queries, interleaved query by query.
//!
//! On a shared machine, timing one model's pass after another's compares two different loads.
//! This bench opens every bundle in `XMC_AB_MODELS` (comma-separated paths) and, for each test
//! query of `XMC_AB_DATA` (an XC file), predicts it with every model in turn, rotating which goes
//! first, so that background load falls on all of them alike. After one warm-up pass it prints,
//! per model, the mean, p50 and p99 latency of `Model::predict_into` (k = 5, the model's default
//! options, one thread) in µs and the mean's ratio to the first model's.
//!
//! Run with `XMC_AB_DATA=... XMC_AB_MODELS=a.xmcb,b.xmcb cargo bench --bench defrag_latency`. It
//! prints figures and asserts nothing about time.

use std::time::Instant;
use xmc::bundle::OpenOptions;
use xmc::data;
use xmc::model::{Model, PredictOptions, Prediction, Scratch};

fn main() -> anyhow::Result<()> {
    let (Ok(data_path), Ok(models)) =
        (std::env::var("XMC_AB_DATA"), std::env::var("XMC_AB_MODELS"))
    else {
        println!("set XMC_AB_DATA (an XC file) and XMC_AB_MODELS (comma-separated bundles)");
        return Ok(());
    };
    let test = data::read_xc_file(data_path.as_ref())?;
    let paths: Vec<&str> = models.split(',').collect();
    let models: Vec<Model> = paths
        .iter()
        .map(|p| Model::open(p.as_ref(), &OpenOptions::default()))
        .collect::<Result<_, _>>()?;
    let opts = PredictOptions::default();
    let mut scratch: Vec<Scratch> = models.iter().map(|_| Scratch::default()).collect();
    let mut out = Prediction::default();
    let m = models.len();
    let mut times: Vec<Vec<f64>> = vec![Vec::with_capacity(test.n_points()); m];
    for pass in 0..2 {
        for i in 0..test.n_points() {
            let (idx, val) = test.feature_row(i);
            for r in 0..m {
                let j = (i + r) % m;
                let start = Instant::now();
                models[j].predict_into(idx, val, &opts, &mut scratch[j], &mut out)?;
                if pass == 1 {
                    times[j].push(start.elapsed().as_secs_f64() * 1e6);
                }
            }
        }
    }
    let mean = |t: &[f64]| t.iter().sum::<f64>() / t.len().max(1) as f64;
    let base = mean(&times[0]);
    for (path, t) in paths.iter().zip(&mut times) {
        t.sort_by(f64::total_cmp);
        let pct = |p: f64| t[((p * t.len() as f64).ceil() as usize).clamp(1, t.len()) - 1];
        let mu = mean(t);
        println!(
            "{path}: mean {mu:.2} µs, p50 {:.2} µs, p99 {:.2} µs, mean ratio {:.3}",
            pct(0.5),
            pct(0.99),
            mu / base
        );
    }
    Ok(())
}
