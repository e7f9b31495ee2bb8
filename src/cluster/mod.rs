//! Balanced spherical clustering of sparse vectors, the one split used by every tree in xmc.
//!
//! Both the label tree (over PIFA label embeddings) and DEFRAG (over feature representatives) are
//! built by cutting a set of sparse, unit-norm vectors into a few parts of near-equal size and then
//! recursing. This module holds that cut. The input is a CSR [`SparseMatrix`] and the subset of its
//! rows to cluster, so a caller never copies its vectors. Centroids are dense but live only while
//! one split runs, and span only the columns that the split's rows use (the private `subset`
//! module explains how).
//!
//! [`partition`] cuts the rows into `n_parts` parts. Two parts come from balanced spherical 2-means
//! as in Parabel: two distinct random rows seed the centroids, rows are ranked by the
//! difference of their cosine similarities to the two centroids, the top of the ranking goes to the
//! first part, centroids are recomputed, and this repeats until the mean similarity improves by less
//! than a tolerance. More than two parts come from *recursive* balanced bisection: the rows are cut
//! in proportion to how many parts each side must still yield, so all parts end up with sizes that
//! differ by at most one. How a ranking becomes an assignment is the pluggable [`SplitStrategy`].
//!
//! [`partition_weighted`] is the λ-interpolated split of Baharav et al. (2021): each row also has a
//! frequency, every split turns the frequencies of its rows into weights f_ℓ(λ) (eq. 4), and parts
//! then share the *mass* of the weights rather than the count of rows, so frequent rows end up in
//! small parts and, in a tree, at shallow depth.
//!
//! Everything is seeded and deterministic: the only parallel step computes per-row similarities into
//! an ordered vector, and every sum runs in a fixed order, so the result does not depend on the
//! number of threads.

mod bisect;
mod strategy;
mod subset;

pub use strategy::SplitStrategy;

use crate::data::SparseMatrix;
use crate::seed::derive_seed;

/// Why a clustering request was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ClusterError {
    /// Fewer than one part was asked for.
    #[error("cannot cut rows into {n_parts} parts: need at least 1")]
    NoParts {
        /// The number of parts asked for.
        n_parts: usize,
    },
    /// There are fewer rows than parts, so some part would be empty.
    #[error("cannot cut {n_rows} rows into {n_parts} non-empty parts")]
    TooFewRows {
        /// The number of rows given.
        n_rows: usize,
        /// The number of parts asked for.
        n_parts: usize,
    },
    /// A row index is not a row of the matrix.
    #[error("row {row} is out of range for a matrix with {n_rows} rows")]
    RowOutOfRange {
        /// The offending row index.
        row: u32,
        /// The number of rows of the matrix.
        n_rows: usize,
    },
    /// A parameter is outside its valid range.
    #[error("invalid clustering parameter `{name}`: {reason}")]
    InvalidParam {
        /// The parameter's name.
        name: &'static str,
        /// What is wrong with it.
        reason: String,
    },
}

/// The knobs of one balanced split.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ClusterParams {
    /// The most centroid/assignment rounds per bisection (at least 1).
    pub max_iter: usize,
    /// Stop once the mean similarity to the assigned centroid improves by less than this.
    pub tol: f32,
    /// How a ranking of rows becomes an assignment to parts.
    pub strategy: SplitStrategy,
}

impl ClusterParams {
    /// Parabel's defaults: up to 20 rounds, tolerance 1e-4, balanced assignment.
    pub const DEFAULT: ClusterParams = ClusterParams {
        max_iter: 20,
        tol: 1e-4,
        strategy: SplitStrategy::Balanced,
    };

    /// Checks every field, naming the first bad one.
    pub fn validate(&self) -> Result<(), ClusterError> {
        if self.max_iter == 0 {
            return Err(ClusterError::InvalidParam {
                name: "max_iter",
                reason: "must be at least 1".into(),
            });
        }
        if !self.tol.is_finite() || self.tol < 0.0 {
            return Err(ClusterError::InvalidParam {
                name: "tol",
                reason: format!("must be finite and non-negative, got {}", self.tol),
            });
        }
        if let SplitStrategy::Weighted { lambda, gamma } = self.strategy {
            if !(0.0..=2.0).contains(&lambda) {
                return Err(ClusterError::InvalidParam {
                    name: "lambda",
                    reason: format!("must be in [0, 2], got {lambda}"),
                });
            }
            if !gamma.is_finite() || gamma < 0.0 {
                return Err(ClusterError::InvalidParam {
                    name: "gamma",
                    reason: format!("must be finite and non-negative, got {gamma}"),
                });
            }
        }
        Ok(())
    }
}

impl Default for ClusterParams {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// Per-row frequencies for the λ-weighted split, indexed by row id of the clustered matrix.
#[derive(Debug, Clone, Copy)]
pub struct RowFrequencies<'a> {
    /// The marginal frequency f (e.g. a label's training count); any non-negative scale.
    pub f: &'a [f32],
    /// The frequency f̃ used by the Fano end (λ > 1); any non-negative scale.
    pub f_tilde: &'a [f32],
}

/// The weights f_ℓ(λ) of eq. (4) for `rows`, summing to 1: with f and f̃ normalized over `rows`,
/// f_ℓ(λ) ∝ (2 − λ)·f_ℓ^min(λ,1) + (λ − 1)₊·f̃_ℓ + γ/|rows|. With λ = 0 they are uniform
/// (0⁰ = 1); an all-zero result (γ = 0 and no frequency) falls back to uniform too.
pub fn split_weights(
    freqs: &RowFrequencies<'_>,
    rows: &[u32],
    lambda: f32,
    gamma: f32,
) -> Vec<f32> {
    let (lambda, gamma) = (f64::from(lambda), f64::from(gamma));
    let total = |v: &[f32]| -> f64 { rows.iter().map(|&r| f64::from(v[r as usize])).sum() };
    let (f_sum, t_sum) = (total(freqs.f), total(freqs.f_tilde));
    let n = rows.len().max(1) as f64;
    let exponent = lambda.min(1.0);
    let fano = (lambda - 1.0).max(0.0);
    let num: Vec<f64> = rows
        .iter()
        .map(|&r| {
            let f = if f_sum > 0.0 {
                f64::from(freqs.f[r as usize]) / f_sum
            } else {
                0.0
            };
            let t = if t_sum > 0.0 {
                f64::from(freqs.f_tilde[r as usize]) / t_sum
            } else {
                0.0
            };
            (2.0 - lambda) * f.powf(exponent) + fano * t + gamma / n
        })
        .collect();
    let sum: f64 = num.iter().sum();
    if sum > 0.0 && sum.is_finite() {
        num.iter().map(|&x| (x / sum) as f32).collect()
    } else {
        vec![(1.0 / n) as f32; rows.len()]
    }
}

/// Cuts `rows` (row indices of `vectors`) into `n_parts` parts of balanced size.
///
/// The rows should be unit-norm (cosine similarity is computed as a dot product); all-zero rows are
/// allowed and simply tie. Each part lists its rows in the order they appear in `rows`. Part sizes
/// differ by at most one, and the first parts are the larger ones. The result depends only on the
/// inputs and `seed`, never on the number of threads.
pub fn partition(
    vectors: &SparseMatrix,
    rows: &[u32],
    n_parts: usize,
    params: &ClusterParams,
    seed: u64,
) -> Result<Vec<Vec<u32>>, ClusterError> {
    check_rows(vectors, rows, n_parts, params)?;
    let mut parts = Vec::with_capacity(n_parts);
    split_recursive(
        vectors,
        rows.to_vec(),
        n_parts,
        params,
        None,
        seed,
        &mut parts,
    );
    Ok(parts)
}

/// Cuts `rows` into `n_parts` non-empty parts with `params.strategy`; with
/// [`SplitStrategy::Weighted`] the parts share the mass of the weights f(λ) built from `freqs`
/// (recomputed over each split's rows), so their sizes may differ widely. With
/// [`SplitStrategy::Balanced`] `freqs` is ignored and this is [`partition`].
pub fn partition_weighted(
    vectors: &SparseMatrix,
    rows: &[u32],
    n_parts: usize,
    params: &ClusterParams,
    freqs: &RowFrequencies<'_>,
    seed: u64,
) -> Result<Vec<Vec<u32>>, ClusterError> {
    check_rows(vectors, rows, n_parts, params)?;
    for (name, v) in [("f", freqs.f), ("f_tilde", freqs.f_tilde)] {
        if v.len() != vectors.rows() {
            return Err(ClusterError::InvalidParam {
                name,
                reason: format!("{} frequencies for {} rows", v.len(), vectors.rows()),
            });
        }
        if v.iter().any(|x| !x.is_finite() || *x < 0.0) {
            return Err(ClusterError::InvalidParam {
                name,
                reason: "frequencies must be finite and non-negative".into(),
            });
        }
    }
    let mut parts = Vec::with_capacity(n_parts);
    split_recursive(
        vectors,
        rows.to_vec(),
        n_parts,
        params,
        Some(freqs),
        seed,
        &mut parts,
    );
    Ok(parts)
}

/// The checks shared by both entry points.
fn check_rows(
    vectors: &SparseMatrix,
    rows: &[u32],
    n_parts: usize,
    params: &ClusterParams,
) -> Result<(), ClusterError> {
    params.validate()?;
    if n_parts == 0 {
        return Err(ClusterError::NoParts { n_parts });
    }
    if rows.len() < n_parts {
        return Err(ClusterError::TooFewRows {
            n_rows: rows.len(),
            n_parts,
        });
    }
    if let Some(&row) = rows.iter().find(|&&r| r as usize >= vectors.rows()) {
        return Err(ClusterError::RowOutOfRange {
            row,
            n_rows: vectors.rows(),
        });
    }
    Ok(())
}

/// Appends to `out` the `n_parts` parts of `rows`, by bisection in proportion to the number of
/// parts each side must yield (of the count, or with the weighted strategy, of the mass).
/// Callers guarantee `rows.len() >= n_parts >= 1`. The two sides split concurrently; each has
/// its own seed, so the parts do not depend on the schedule.
fn split_recursive(
    vectors: &SparseMatrix,
    rows: Vec<u32>,
    n_parts: usize,
    params: &ClusterParams,
    freqs: Option<&RowFrequencies<'_>>,
    seed: u64,
    out: &mut Vec<Vec<u32>>,
) {
    if n_parts <= 1 {
        out.push(rows);
        return;
    }
    let left_parts = n_parts - n_parts / 2;
    let right_parts = n_parts - left_parts;
    let (left, right) = match (params.strategy, freqs) {
        (SplitStrategy::Weighted { lambda, gamma }, Some(freqs)) => {
            let weights = split_weights(freqs, &rows, lambda, gamma);
            let target = bisect::MassTarget {
                lambda,
                share: left_parts as f64 / n_parts as f64,
                min_left: left_parts,
                max_left: rows.len() - right_parts,
            };
            bisect::bisect_weighted(vectors, &rows, &weights, target, params, seed)
        }
        _ => {
            let left_len = balanced_left_len(rows.len(), n_parts, left_parts);
            bisect::bisect(vectors, &rows, left_len, params, seed)
        }
    };
    let side = |rows: Vec<u32>, n_parts: usize, index: u64| {
        let mut parts = Vec::with_capacity(n_parts);
        let seed = derive_seed(seed, index);
        split_recursive(vectors, rows, n_parts, params, freqs, seed, &mut parts);
        parts
    };
    let (first, second) = rayon::join(|| side(left, left_parts, 0), || side(right, right_parts, 1));
    out.extend(first);
    out.extend(second);
}

/// How many of `n_rows` rows go left when they are cut into `n_parts` parts as equal as
/// possible and the left side yields `left_parts` of them (the remainder goes to the first parts).
pub(crate) fn balanced_left_len(n_rows: usize, n_parts: usize, left_parts: usize) -> usize {
    let (q, r) = (n_rows / n_parts, n_rows % n_parts);
    left_parts * q + r.min(left_parts)
}
