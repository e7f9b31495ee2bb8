//! Spherical 2-means with a pluggable assignment step: the inner loop of every split.
//!
//! Centroids are dense over the subset's column space and unit-norm; similarities are dot products.
//! The two centroids are stored interleaved (`[f32; 2]` per column), so each non-zero of a row
//! touches one cache line for both.
//! The loop alternates assignment (by [`SplitStrategy`](super::SplitStrategy)) and centroid refits
//! until the mean similarity of rows to their assigned centroid stops improving by `tol`.

use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rayon::prelude::*;

use super::ClusterParams;
use super::strategy::weighted_assign;
use super::subset::Subset;
use crate::data::SparseMatrix;

/// Rows per rayon task when computing similarities; small enough to spread the root split over
/// all threads, large enough that task overhead is negligible.
const SIMILARITY_CHUNK: usize = 1024;

/// Cuts `rows` into a first side of `left_len` rows and a second side of the rest.
///
/// Both sides keep the order of `rows`. Callers guarantee every row index is in range.
pub(crate) fn bisect(
    vectors: &SparseMatrix,
    rows: &[u32],
    left_len: usize,
    params: &ClusterParams,
    seed: u64,
) -> (Vec<u32>, Vec<u32>) {
    let left = if rows.len() < 2 {
        (0..rows.len()).map(|k| k < left_len).collect()
    } else {
        assign_by_2means(&Subset::new(vectors, rows), left_len, params, seed)
    };
    let mut first = Vec::with_capacity(left_len);
    let mut second = Vec::with_capacity(rows.len().saturating_sub(left_len));
    for (&row, &is_left) in rows.iter().zip(&left) {
        if is_left {
            first.push(row);
        } else {
            second.push(row);
        }
    }
    (first, second)
}

/// The first side of a λ-weighted bisection: its share of the mass and its size limits.
#[derive(Debug, Clone, Copy)]
pub(crate) struct MassTarget {
    /// λ.
    pub lambda: f32,
    /// The share of the weights the first side should hold.
    pub share: f64,
    /// The fewest rows the first side may take.
    pub min_left: usize,
    /// The most rows the first side may take.
    pub max_left: usize,
}

/// Cuts `rows` into two sides by the λ-weighted split, `weights[k]` being f_ℓ(λ) of `rows[k]`
/// (summing to 1 over `rows`). Both sides keep the order of `rows`.
pub(crate) fn bisect_weighted(
    vectors: &SparseMatrix,
    rows: &[u32],
    weights: &[f32],
    target: MassTarget,
    params: &ClusterParams,
    seed: u64,
) -> (Vec<u32>, Vec<u32>) {
    let left = if rows.len() < 2 {
        (0..rows.len()).map(|k| k < target.min_left).collect()
    } else {
        assign_by_weighted_2means(&Subset::new(vectors, rows), weights, target, params, seed)
    };
    let mut first = Vec::new();
    let mut second = Vec::new();
    for (&row, &is_left) in rows.iter().zip(&left) {
        if is_left {
            first.push(row);
        } else {
            second.push(row);
        }
    }
    (first, second)
}

/// Two distinct random rows of the subset, normalized, as the initial centroids.
fn seed_centroids(sub: &Subset<'_>, seed: u64) -> Vec<[f32; 2]> {
    let n = sub.len();
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let first = rng.random_range(0..n);
    let mut second = rng.random_range(0..n - 1);
    if second >= first {
        second += 1;
    }
    let mut centroids = vec![[0.0f32; 2]; sub.dim()];
    for (side, k) in [first, second].into_iter().enumerate() {
        let (cols, vals) = sub.row(k);
        for (&c, &v) in cols.iter().zip(vals) {
            centroids[c as usize][side] += v;
        }
    }
    normalize_pair(&mut centroids);
    centroids
}

/// The alternating maximisation of eq. (4) on a subset of at least two rows: μ± are the weighted
/// centroids of their sides, α the rounded sort-and-fill of Lemma 1; it stops once the objective
/// improves by less than `tol`. Returns, per row, whether it lands on the first side.
fn assign_by_weighted_2means(
    sub: &Subset<'_>,
    weights: &[f32],
    target: MassTarget,
    params: &ClusterParams,
    seed: u64,
) -> Vec<bool> {
    let lambda = target.lambda;
    let sim_coef = (2.0 - lambda) / 2.0;
    let fano_coef = (lambda - 1.0).max(0.0);
    let mut centroids = seed_centroids(sub, seed);
    let mut left = Vec::new();
    let mut previous = f64::NEG_INFINITY;
    for iter in 0..params.max_iter {
        let sims = all_similarities(sub, &centroids);
        // β_ℓ / f_ℓ(λ): the sort key of Lemma 1, written without the division.
        let keys: Vec<f32> = sims
            .iter()
            .zip(weights)
            .map(|(s, &w)| sim_coef * (s[0] - s[1]) + fano_coef * w)
            .collect();
        left = weighted_assign(
            &keys,
            weights,
            target.share,
            target.min_left,
            target.max_left,
        );
        if sim_coef == 0.0 {
            // Pure Fano coding: the assignment does not depend on the centroids.
            break;
        }
        let objective: f64 = sims
            .iter()
            .zip(weights)
            .zip(&left)
            .map(|((s, &w), &l)| {
                let (w, sim) = (f64::from(w), f64::from(if l { s[0] } else { s[1] }));
                let alpha = if l { 1.0 } else { -1.0 };
                w * f64::from(2.0 - lambda) * sim + alpha * f64::from(fano_coef) * w * w
            })
            .sum();
        if objective - previous < f64::from(params.tol) || iter + 1 == params.max_iter {
            break;
        }
        previous = objective;
        refit(sub, &left, Some(weights), &mut centroids);
    }
    left
}

/// Runs the alternating optimisation on a subset of at least two rows and returns, per row,
/// whether it lands on the first side.
fn assign_by_2means(
    sub: &Subset<'_>,
    left_len: usize,
    params: &ClusterParams,
    seed: u64,
) -> Vec<bool> {
    let n = sub.len();
    let mut centroids = seed_centroids(sub, seed);
    let mut left = Vec::new();
    let mut previous = f64::NEG_INFINITY;
    for iter in 0..params.max_iter {
        let sims = all_similarities(sub, &centroids);
        let margins: Vec<f32> = sims.iter().map(|s| s[0] - s[1]).collect();
        left = params.strategy.assign(&margins, left_len);
        let total: f64 = sims
            .iter()
            .zip(&left)
            .map(|(s, &l)| f64::from(if l { s[0] } else { s[1] }))
            .sum();
        let objective = total / n as f64;
        if objective - previous < f64::from(params.tol) || iter + 1 == params.max_iter {
            break;
        }
        previous = objective;
        refit(sub, &left, None, &mut centroids);
    }
    left
}

/// Every row's dot products with both centroids, in row order (parallel over rows, so the result
/// does not depend on the thread count).
fn all_similarities(sub: &Subset<'_>, centroids: &[[f32; 2]]) -> Vec<[f32; 2]> {
    (0..sub.len())
        .into_par_iter()
        .with_min_len(SIMILARITY_CHUNK)
        .map(|k| similarities(sub.row(k), centroids))
        .collect()
}

/// The dot products of one sparse row with both centroids.
fn similarities((cols, vals): (&[u32], &[f32]), centroids: &[[f32; 2]]) -> [f32; 2] {
    let mut s = [0.0f32; 2];
    for (&c, &v) in cols.iter().zip(vals) {
        let pair = centroids[c as usize];
        s[0] += v * pair[0];
        s[1] += v * pair[1];
    }
    s
}

/// Sets each centroid to the normalized sum of the rows assigned to it (each row scaled by its
/// weight, when given), summing in row order. The two sides are summed in parallel; each sum is
/// sequential, so the result is deterministic.
fn refit(sub: &Subset<'_>, left: &[bool], weights: Option<&[f32]>, centroids: &mut [[f32; 2]]) {
    let (first, second) = rayon::join(
        || side_sum(sub, left, weights, true, centroids.len()),
        || side_sum(sub, left, weights, false, centroids.len()),
    );
    for ((pair, a), b) in centroids.iter_mut().zip(first).zip(second) {
        *pair = [a, b];
    }
    normalize_pair(centroids);
}

/// The dense sum, in row order, of the rows whose `left` flag equals `side`, each scaled by its
/// weight when `weights` is given.
fn side_sum(
    sub: &Subset<'_>,
    left: &[bool],
    weights: Option<&[f32]>,
    side: bool,
    dim: usize,
) -> Vec<f32> {
    let mut sum = vec![0.0f32; dim];
    for (k, _) in left.iter().enumerate().filter(|&(_, &l)| l == side) {
        let (cols, vals) = sub.row(k);
        match weights {
            None => {
                for (&c, &v) in cols.iter().zip(vals) {
                    sum[c as usize] += v;
                }
            }
            Some(w) => {
                let w = w[k];
                for (&c, &v) in cols.iter().zip(vals) {
                    sum[c as usize] += w * v;
                }
            }
        }
    }
    sum
}

/// Scales each of the two interleaved centroids to unit L2 norm; a zero (or non-finite) centroid
/// is left as it is.
fn normalize_pair(centroids: &mut [[f32; 2]]) {
    let mut sq = [0.0f32; 2];
    for pair in centroids.iter() {
        sq[0] += pair[0] * pair[0];
        sq[1] += pair[1] * pair[1];
    }
    let inv = sq.map(|s| {
        let norm = s.sqrt();
        if norm > 0.0 && norm.is_finite() {
            1.0 / norm
        } else {
            1.0
        }
    });
    for pair in centroids.iter_mut() {
        pair[0] *= inv[0];
        pair[1] *= inv[1];
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sprs::TriMatI;

    /// Builds a CSR matrix from dense rows.
    fn csr(rows: &[&[f32]]) -> SparseMatrix {
        let cols = rows.first().map_or(0, |r| r.len());
        let mut tri = TriMatI::<f32, u32>::new((rows.len(), cols));
        for (i, row) in rows.iter().enumerate() {
            for (j, &v) in row.iter().enumerate() {
                if v != 0.0 {
                    tri.add_triplet(i, j, v);
                }
            }
        }
        tri.to_csr()
    }

    #[test]
    fn separates_two_obvious_groups() {
        let m = csr(&[
            &[1.0, 0.0, 0.0, 0.0],
            &[0.0, 0.0, 1.0, 0.0],
            &[0.9, 0.1, 0.0, 0.0],
            &[0.0, 0.0, 0.8, 0.2],
        ]);
        for seed in 0..10 {
            let (a, b) = bisect(&m, &[0, 1, 2, 3], 2, &ClusterParams::DEFAULT, seed);
            let mut groups = [a, b];
            groups.sort();
            assert_eq!(groups, [vec![0, 2], vec![1, 3]], "seed {seed}");
        }
    }

    #[test]
    fn compact_and_wide_views_agree() {
        let rows: Vec<Vec<f32>> = (0..9)
            .map(|i| {
                let mut r = vec![0.0; 12];
                r[i % 4] = 1.0 + i as f32;
                r[4 + i % 3] = 0.5;
                r[11 - i] = 0.25;
                r
            })
            .collect();
        let refs: Vec<&[f32]> = rows.iter().map(|r| r.as_slice()).collect();
        let m = csr(&refs);
        let subset: Vec<u32> = vec![8, 1, 2, 5, 6];
        let compact = Subset::with_view(&m, &subset, true);
        let wide = Subset::with_view(&m, &subset, false);
        assert!(compact.dim() < wide.dim());
        for seed in 0..5 {
            let p = ClusterParams::DEFAULT;
            assert_eq!(
                assign_by_2means(&compact, 2, &p, seed),
                assign_by_2means(&wide, 2, &p, seed)
            );
        }
    }

    #[test]
    fn all_zero_rows_split_by_position() {
        let m = SparseMatrix::zero((5, 3));
        let (a, b) = bisect(&m, &[4, 3, 2, 1, 0], 3, &ClusterParams::DEFAULT, 1);
        assert_eq!((a, b), (vec![4, 3, 2], vec![1, 0]));
    }
}
