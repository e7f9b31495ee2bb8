//! Spherical 2-means with a pluggable assignment step: the inner loop of every split.
//!
//! Centroids are dense over the subset's column space and unit-norm; similarities are dot products.
//! The loop alternates assignment (by [`SplitStrategy`](super::SplitStrategy)) and centroid refits
//! until the mean similarity of rows to their assigned centroid stops improving by `tol`.

use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rayon::prelude::*;

use super::ClusterParams;
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

/// Runs the alternating optimisation on a subset of at least two rows and returns, per row,
/// whether it lands on the first side.
fn assign_by_2means(
    sub: &Subset<'_>,
    left_len: usize,
    params: &ClusterParams,
    seed: u64,
) -> Vec<bool> {
    let n = sub.len();
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let first = rng.random_range(0..n);
    let mut second = rng.random_range(0..n - 1);
    if second >= first {
        second += 1;
    }
    let mut centroids = [vec![0.0f32; sub.dim()], vec![0.0f32; sub.dim()]];
    for (centroid, k) in centroids.iter_mut().zip([first, second]) {
        let (cols, vals) = sub.row(k);
        for (&c, &v) in cols.iter().zip(vals) {
            centroid[c as usize] += v;
        }
        normalize(centroid);
    }

    let mut left = Vec::new();
    let mut previous = f64::NEG_INFINITY;
    for iter in 0..params.max_iter {
        let sims: Vec<[f32; 2]> = (0..n)
            .into_par_iter()
            .with_min_len(SIMILARITY_CHUNK)
            .map(|k| similarities(sub.row(k), &centroids))
            .collect();
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
        refit(sub, &left, &mut centroids);
    }
    left
}

/// The dot products of one sparse row with both centroids.
fn similarities((cols, vals): (&[u32], &[f32]), centroids: &[Vec<f32>; 2]) -> [f32; 2] {
    let mut s = [0.0f32; 2];
    for (&c, &v) in cols.iter().zip(vals) {
        s[0] += v * centroids[0][c as usize];
        s[1] += v * centroids[1][c as usize];
    }
    s
}

/// Sets each centroid to the normalized sum of the rows assigned to it, summing in row order.
fn refit(sub: &Subset<'_>, left: &[bool], centroids: &mut [Vec<f32>; 2]) {
    for centroid in centroids.iter_mut() {
        centroid.fill(0.0);
    }
    for (k, &is_left) in left.iter().enumerate() {
        let centroid = &mut centroids[usize::from(!is_left)];
        let (cols, vals) = sub.row(k);
        for (&c, &v) in cols.iter().zip(vals) {
            centroid[c as usize] += v;
        }
    }
    for centroid in centroids.iter_mut() {
        normalize(centroid);
    }
}

/// Scales `v` to unit L2 norm; a zero (or non-finite) vector is left as it is.
fn normalize(v: &mut [f32]) {
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > 0.0 && norm.is_finite() {
        let inv = 1.0 / norm;
        for x in v {
            *x *= inv;
        }
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
