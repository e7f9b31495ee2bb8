//! The λ sweep: one model per λ, their precision, expected depth and latency side by side.
//!
//! [`run`] trains one model per λ' (λ = 2λ'/(1 + λ'), as in §5.4 of Baharav et al. 2021) on the
//! same data and configuration, keeps every model in memory, and evaluates each on the test data
//! one query at a time on the calling thread, with the early-stopping search and with the
//! level-wise beam search, once for the top k (k = 5 by default: P@1, P@5, expected depth@1 and
//! @5) and once for the top 1 alone, the query that expected depth@1 describes. Latency is taken in `repeats` interleaved rounds (every model and
//! both searches once per round) and the median of the rounds' means is reported, so that a
//! burst of load on the machine hits all models alike rather than one of them. [`markdown`]
//! renders the table, and [`plot::write_svg`] the two trade-off curves.

pub mod plot;

use crate::bundle::{Bundle, FormatError};
use crate::config::{ConfigError, TrainConfig};
use crate::data::Dataset;
use crate::model::evaluate::evaluate_model;
use crate::model::{Model, ModelError, PredictOptions, QueryError};
use crate::train::{self, Quiet, TrainError, TrainInputs};
use serde::Serialize;
use std::time::Instant;
use thiserror::Error;

/// The λ' values of the paper's sweeps that span the range (λ from 0 to 1.998).
pub const DEFAULT_LAMBDA_PRIMES: &[f64] = &[0.0, 0.5, 1.0, 2.0, 6.0, 30.0, 1000.0];

/// Why a sweep failed.
#[derive(Debug, Error)]
pub enum SweepError {
    /// A λ' made the configuration invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// Training failed.
    #[error("λ' = {lambda_prime}: {source}")]
    Train {
        /// The λ' being trained.
        lambda_prime: f64,
        /// Why.
        source: TrainError,
    },
    /// The trained bundle did not open.
    #[error("λ' = {lambda_prime}: {message}")]
    Model {
        /// The λ' being trained.
        lambda_prime: f64,
        /// Why.
        message: String,
    },
    /// A test point was refused.
    #[error("test point {point}: {source}")]
    Query {
        /// The 1-based point number.
        point: usize,
        /// Why.
        source: QueryError,
    },
    /// The sweep was asked for nothing.
    #[error("no λ' values to sweep")]
    Empty,
}

impl From<(f64, FormatError)> for SweepError {
    fn from((lambda_prime, e): (f64, FormatError)) -> Self {
        SweepError::Model {
            lambda_prime,
            message: e.to_string(),
        }
    }
}

impl From<(f64, ModelError)> for SweepError {
    fn from((lambda_prime, e): (f64, ModelError)) -> Self {
        SweepError::Model {
            lambda_prime,
            message: e.to_string(),
        }
    }
}

/// What to sweep and how to measure it.
#[derive(Clone, Debug)]
pub struct SweepOptions {
    /// The λ' values, in the order the table lists them.
    pub lambda_primes: Vec<f64>,
    /// Interleaved latency rounds (at least 1).
    pub repeats: usize,
    /// Prediction options other than `early_stop` (k, beam).
    pub predict: PredictOptions,
}

impl Default for SweepOptions {
    fn default() -> Self {
        SweepOptions {
            lambda_primes: DEFAULT_LAMBDA_PRIMES.to_vec(),
            repeats: 3,
            predict: PredictOptions::default(),
        }
    }
}

/// One λ's figures.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct SweepRow {
    /// λ'.
    pub lambda_prime: f64,
    /// λ = 2λ'/(1 + λ').
    pub lambda: f64,
    /// P@1 with early stopping.
    #[serde(rename = "p@1")]
    pub p1: f64,
    /// P@5 with early stopping.
    #[serde(rename = "p@5")]
    pub p5: f64,
    /// P@1 with the level-wise beam search.
    #[serde(rename = "p@1_beam")]
    pub p1_beam: f64,
    /// P@5 with the level-wise beam search.
    #[serde(rename = "p@5_beam")]
    pub p5_beam: f64,
    /// Expected depth@1 (early stopping).
    #[serde(rename = "expected_depth@1")]
    pub depth1: f64,
    /// Expected depth@5 (early stopping).
    #[serde(rename = "expected_depth@5")]
    pub depth5: f64,
    /// Mean nodes evaluated per query with early stopping.
    pub nodes_evaluated_mean: f64,
    /// Mean nodes evaluated per query by the level-wise beam search.
    pub nodes_evaluated_mean_beam: f64,
    /// Share of queries the early-stopping bound cut short.
    pub early_stopped_frac: f64,
    /// Mean per-query latency with early stopping, µs (median over rounds).
    pub latency_us_mean: f64,
    /// Mean per-query latency of the level-wise beam search, µs (median over rounds).
    pub latency_us_mean_beam: f64,
    /// Mean nodes evaluated per top-1 query with early stopping.
    #[serde(rename = "nodes_evaluated_mean_k1")]
    pub nodes_k1: f64,
    /// Mean per-query latency of top-1 queries with early stopping, µs (median over rounds).
    #[serde(rename = "latency_us_mean_k1")]
    pub latency_us_k1: f64,
    /// Mean per-query latency of top-1 queries with the level-wise beam search, µs.
    #[serde(rename = "latency_us_mean_k1_beam")]
    pub latency_us_k1_beam: f64,
    /// The depth of the deepest leaf (the root is 0).
    pub max_depth: u32,
    /// Wall-clock training time, s.
    pub train_s: f64,
}

/// Trains one model per λ' of `options` on `train` (already normalized as `base` says) and
/// measures each on `test`. `log` receives one line per step.
pub fn run(
    base: &TrainConfig,
    train_ds: &Dataset,
    test: &Dataset,
    options: &SweepOptions,
    log: &mut dyn FnMut(&str),
) -> Result<Vec<SweepRow>, SweepError> {
    if options.lambda_primes.is_empty() {
        return Err(SweepError::Empty);
    }
    let mut models = Vec::with_capacity(options.lambda_primes.len());
    let mut rows = Vec::with_capacity(options.lambda_primes.len());
    for &lp in &options.lambda_primes {
        let mut cfg = base.clone();
        cfg.set_lambda_prime(lp)?;
        cfg.validate()?;
        let start = Instant::now();
        let trained =
            train::train(train_ds, &cfg, TrainInputs::default(), &Quiet).map_err(|source| {
                SweepError::Train {
                    lambda_prime: lp,
                    source,
                }
            })?;
        let train_s = start.elapsed().as_secs_f64();
        let bytes = trained.to_bytes().map_err(|e| (lp, e))?;
        let model = Model::from_bundle(Bundle::from_bytes(&bytes).map_err(|e| (lp, e))?)
            .map_err(|e| (lp, e))?;
        let max_depth = model
            .trees()
            .iter()
            .flat_map(|t| (0..t.n_nodes()).map(|i| t.depth(i)))
            .max()
            .unwrap_or(0);
        log(&format!(
            "λ' = {lp} (λ = {:.4}): trained in {train_s:.1} s, deepest leaf at depth {max_depth}",
            cfg.lambda
        ));
        rows.push(SweepRow {
            lambda_prime: lp,
            lambda: f64::from(cfg.lambda),
            max_depth,
            train_s,
            ..SweepRow::default()
        });
        models.push(model);
    }

    let ks = [1, 3, 5];
    // Per model, per mode (top k with and without early stopping, then top 1 likewise), the
    // mean latency of each round.
    let modes = [
        (options.predict.k, true),
        (options.predict.k, false),
        (1, true),
        (1, false),
    ];
    let mut latencies = vec![vec![Vec::new(); modes.len()]; models.len()];
    for round in 0..options.repeats.max(1) {
        for (i, model) in models.iter().enumerate() {
            for (mode, &(k, early_stop)) in modes.iter().enumerate() {
                let opts = PredictOptions {
                    k,
                    early_stop,
                    ..options.predict
                };
                let report =
                    evaluate_model(model, test, &opts, &ks).map_err(|(point, source)| {
                        SweepError::Query {
                            point: point + 1,
                            source,
                        }
                    })?;
                let get = |key: &str| report.get(key).unwrap_or(f64::NAN);
                latencies[i][mode].push(get("latency_us_mean"));
                if round == 0 {
                    let row = &mut rows[i];
                    if mode == 2 {
                        row.nodes_k1 = get("nodes_evaluated_mean");
                    } else if mode == 3 {
                        // Only the latency of the level-wise top-1 search is reported.
                    } else if early_stop {
                        row.p1 = get("p@1");
                        row.p5 = get("p@5");
                        row.depth1 = get("expected_depth@1");
                        row.depth5 = get("expected_depth@5");
                        row.nodes_evaluated_mean = get("nodes_evaluated_mean");
                        row.early_stopped_frac = get("early_stopped_frac");
                    } else {
                        row.p1_beam = get("p@1");
                        row.p5_beam = get("p@5");
                        row.nodes_evaluated_mean_beam = get("nodes_evaluated_mean");
                    }
                }
            }
        }
        log(&format!(
            "latency round {} of {} done",
            round + 1,
            options.repeats.max(1)
        ));
    }
    for (row, lat) in rows.iter_mut().zip(&mut latencies) {
        row.latency_us_mean = median(&mut lat[0]);
        row.latency_us_mean_beam = median(&mut lat[1]);
        row.latency_us_k1 = median(&mut lat[2]);
        row.latency_us_k1_beam = median(&mut lat[3]);
    }
    Ok(rows)
}

/// The median of `v` (the mean of the middle two for an even count); NaN when empty.
fn median(v: &mut [f64]) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// The table as Markdown, one row per λ, with the change of expected depth@1 against the first
/// row (λ' = 0 in the default sweep).
pub fn markdown(rows: &[SweepRow]) -> String {
    let mut s = String::from(
        "| λ' | λ | P@1 | P@5 | exp. depth@1 | Δ depth@1 | exp. depth@5 \
         | nodes top-k (early stop / beam) | µs top-k (early stop / beam) \
         | nodes top-1 (early stop) | µs top-1 (early stop / beam) \
         | P@1, P@5 (beam) | deepest leaf |\n\
         | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n",
    );
    let base = rows.first().map_or(f64::NAN, |r| r.depth1);
    for r in rows {
        let delta = 100.0 * (r.depth1 - base) / base;
        s.push_str(&format!(
            "| {} | {:.4} | {:.4} | {:.4} | {:.3} | {:+.1}% | {:.3} | {:.1} / {:.1} | {:.1} / {:.1} \
             | {:.2} | {:.1} / {:.1} | {:.4}, {:.4} | {} |\n",
            r.lambda_prime,
            r.lambda,
            r.p1,
            r.p5,
            r.depth1,
            delta,
            r.depth5,
            r.nodes_evaluated_mean,
            r.nodes_evaluated_mean_beam,
            r.latency_us_mean,
            r.latency_us_mean_beam,
            r.nodes_k1,
            r.latency_us_k1,
            r.latency_us_k1_beam,
            r.p1_beam,
            r.p5_beam,
            r.max_depth,
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_and_even_counts() {
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&mut [4.0, 1.0, 2.0, 3.0]), 2.5);
        assert!(median(&mut []).is_nan());
    }

    #[test]
    fn markdown_has_a_row_per_lambda_and_the_depth_change() {
        let rows = [
            SweepRow {
                lambda_prime: 0.0,
                depth1: 10.0,
                ..SweepRow::default()
            },
            SweepRow {
                lambda_prime: 1.0,
                lambda: 1.0,
                depth1: 7.5,
                ..SweepRow::default()
            },
        ];
        let md = markdown(&rows);
        assert_eq!(md.lines().count(), 4);
        assert!(md.contains("| 1 | 1.0000 |"), "{md}");
        assert!(md.contains("-25.0%"), "{md}");
    }
}
