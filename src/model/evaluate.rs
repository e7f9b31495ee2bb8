//! Predicting and scoring a whole data set: every point in parallel ([`predict_all`]), or one
//! query at a time on this thread, timed and scored ([`evaluate_model`]).

use super::{Model, PredictOptions, Prediction, QueryError, Scratch};
use crate::data::Dataset;
use crate::eval::{self, EvalReport, Evaluator, PropensityParams, QueryStats};
use rayon::prelude::*;
use std::time::Instant;

/// Predicts every point of `ds` on the current rayon pool, each thread with its own
/// [`Scratch`], and returns the predictions in point order; on a bad point, its index and
/// error.
pub fn predict_all(
    model: &Model,
    ds: &Dataset,
    options: &PredictOptions,
) -> Result<Vec<Prediction>, (usize, QueryError)> {
    let mut out = vec![Prediction::default(); ds.n_points()];
    predict_rows(model, &mut out, |i| ds.feature_row(i), options)?;
    Ok(out)
}

/// Predicts `out.len()` points on the current rayon pool, point `i` given by `row(i)` (feature
/// ids and values), into `out[i]`, each thread with its own [`Scratch`]; on a bad point, its
/// index and error. [`predict_all`] over rows that are not a [`Dataset`] (e.g. a caller's CSR
/// arrays, read in place).
pub fn predict_rows<'a>(
    model: &Model,
    out: &mut [Prediction],
    row: impl Fn(usize) -> (&'a [u32], &'a [f32]) + Sync,
    options: &PredictOptions,
) -> Result<(), (usize, QueryError)> {
    out.par_iter_mut()
        .enumerate()
        .try_for_each_init(Scratch::default, |scratch, (i, p)| {
            let (idx, val) = row(i);
            model
                .predict_into(idx, val, options, scratch, p)
                .map_err(|e| (i, e))
        })
}

/// Predicts every point of `ds` one at a time on the calling thread, feeds the metrics
/// (propensities from the model's training label counts), and adds the per-query latency
/// (`latency_us_mean`, `latency_us_p50`, `latency_us_p99`) to the report.
///
/// The search asks for `options.k` labels. A cut-off in `ks` above it scores the shorter list
/// (P@5 of a top-1 search counts its one label out of five), so callers that want every cut-off
/// fully scored pass `options.k >= max(ks)`.
pub fn evaluate_model(
    model: &Model,
    ds: &Dataset,
    options: &PredictOptions,
    ks: &[usize],
) -> Result<EvalReport, (usize, QueryError)> {
    let props = eval::propensities(
        model.train_label_counts(),
        model.train_points(),
        PropensityParams::DEFAULT,
    );
    let mut evaluator = Evaluator::new(ks, &props);
    let opts = *options;
    let k = opts.k;
    let mut scratch = Scratch::default();
    let mut out = Prediction::default();
    let mut labels = Vec::with_capacity(k);
    let mut times = Vec::with_capacity(ds.n_points());
    let mut reranked = 0u64;
    for i in 0..ds.n_points() {
        let (idx, val) = ds.feature_row(i);
        let start = Instant::now();
        model
            .predict_into(idx, val, &opts, &mut scratch, &mut out)
            .map_err(|e| (i, e))?;
        times.push(start.elapsed().as_secs_f64() * 1e6);
        reranked += u64::from(out.reranked);
        labels.clear();
        labels.extend(out.labels.iter().map(|l| l.0));
        evaluator.add(
            &labels,
            ds.label_row(i),
            Some(&out.depths),
            Some(QueryStats {
                nodes_evaluated: out.nodes_evaluated,
                outputs_evaluated: out.outputs_evaluated,
                early_stopped: out.early_stopped,
                beam_capped: out.beam_capped,
            }),
        );
    }
    let mut report = evaluator.finish();
    times.sort_by(f64::total_cmp);
    let n = times.len();
    if n > 0 {
        let pct = |p: f64| times[((p * n as f64).ceil() as usize).clamp(1, n) - 1];
        let mean = times.iter().sum::<f64>() / n as f64;
        report
            .metrics
            .insert("reranked_mean".into(), (reranked as f64 / n as f64).into());
        report.metrics.insert("latency_us_mean".into(), mean.into());
        report
            .metrics
            .insert("latency_us_p50".into(), pct(0.5).into());
        report
            .metrics
            .insert("latency_us_p99".into(), pct(0.99).into());
    }
    Ok(report)
}
