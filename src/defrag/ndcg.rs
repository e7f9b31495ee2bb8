//! The balanced nDCG split of DEFRAG-N (Alg. 3, App. A.1).
//!
//! Each side's centroid is a *ranking* of the representation's coordinates, and a feature's
//! affinity to a side is the nDCG of that ranking against the feature's (non-negative)
//! representative vector. The better centroid ranking for a set is `rank(Σ_i I(z^i)·z^i)`, with
//! I(z) the inverse of z's ideal DCG. A ranking here lists only the coordinates its defining
//! vector has non-zero; every other coordinate counts as ranked past the end (gain 0), which keeps
//! a split O(nnz) instead of O(p) per feature.
//!
//! Parts have the sizes that [`crate::cluster::partition`] gives (differing by at most one),
//! from the same proportional recursive bisection; the two sides of a split recurse in parallel.

use crate::data::{SparseMatrix, row_slices};
use crate::seed::derive_seed;
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// The most assignment rounds per split.
const MAX_ITER: usize = 20;

/// Cuts `rows` of `reps` (non-negative rows) into `n_parts` balanced parts with the nDCG split.
/// Callers guarantee `rows.len() >= n_parts >= 1`.
pub fn partition_ndcg(
    reps: &SparseMatrix,
    rows: &[u32],
    n_parts: usize,
    seed: u64,
) -> Vec<Vec<u32>> {
    let inv_ideal: Vec<f32> = (0..reps.rows())
        .map(|r| inverse_ideal_dcg(reps, r))
        .collect();
    let mut out = Vec::with_capacity(n_parts);
    split(reps, &inv_ideal, rows.to_vec(), n_parts, seed, &mut out);
    out
}

/// 1 / log2(1 + position), position counted from 1.
fn discount(pos: usize) -> f32 {
    1.0 / ((pos + 1) as f32).log2()
}

/// I(z): one over the DCG of z's own ranking (0 for an empty row).
fn inverse_ideal_dcg(reps: &SparseMatrix, r: usize) -> f32 {
    let mut v: Vec<f32> = row_slices(reps, r).1.to_vec();
    v.sort_by(|a, b| b.total_cmp(a));
    let dcg: f32 = v.iter().enumerate().map(|(p, x)| x * discount(p + 1)).sum();
    if dcg > 0.0 { 1.0 / dcg } else { 0.0 }
}

fn split(
    reps: &SparseMatrix,
    inv_ideal: &[f32],
    rows: Vec<u32>,
    n_parts: usize,
    seed: u64,
    out: &mut Vec<Vec<u32>>,
) {
    if n_parts <= 1 {
        out.push(rows);
        return;
    }
    let left_parts = n_parts - n_parts / 2;
    let right_parts = n_parts - left_parts;
    let left_len = crate::cluster::balanced_left_len(rows.len(), n_parts, left_parts);
    let (left, right) = bisect(reps, inv_ideal, &rows, left_len, seed);
    let (mut a, mut b) = (Vec::new(), Vec::new());
    rayon::join(
        || {
            split(
                reps,
                inv_ideal,
                left,
                left_parts,
                derive_seed(seed, 0),
                &mut a,
            )
        },
        || {
            split(
                reps,
                inv_ideal,
                right,
                right_parts,
                derive_seed(seed, 1),
                &mut b,
            )
        },
    );
    out.extend(a);
    out.extend(b);
}

/// Per coordinate, its 1-based position in the ranking of `Σ weight·row` over `members`, or 0
/// when it is not ranked. `acc` and `pos` are dense scratch of the representation's width.
fn centroid_ranking(
    reps: &SparseMatrix,
    inv_ideal: &[f32],
    members: impl Iterator<Item = u32>,
    acc: &mut [f32],
    pos: &mut [u32],
) {
    pos.iter_mut().for_each(|p| *p = 0);
    let mut touched = Vec::new();
    for m in members {
        let (idx, val) = row_slices(reps, m as usize);
        for (&c, &v) in idx.iter().zip(val) {
            if acc[c as usize] == 0.0 {
                touched.push(c);
            }
            acc[c as usize] += inv_ideal[m as usize] * v;
        }
    }
    touched.sort_unstable();
    touched.dedup();
    touched.sort_by(|&a, &b| acc[b as usize].total_cmp(&acc[a as usize]).then(a.cmp(&b)));
    for (p, &c) in touched.iter().enumerate() {
        if acc[c as usize] > 0.0 {
            pos[c as usize] = p as u32 + 1;
        }
        acc[c as usize] = 0.0;
    }
}

fn ndcg(reps: &SparseMatrix, inv_ideal: &[f32], row: u32, pos: &[u32]) -> f32 {
    let (idx, val) = row_slices(reps, row as usize);
    let dcg: f32 = idx
        .iter()
        .zip(val)
        .filter(|(c, _)| pos[**c as usize] > 0)
        .map(|(c, v)| v * discount(pos[*c as usize] as usize))
        .sum();
    inv_ideal[row as usize] * dcg
}

/// One balanced split: the `left_len` rows with the largest nDCG(r+) − nDCG(r−) go left.
fn bisect(
    reps: &SparseMatrix,
    inv_ideal: &[f32],
    rows: &[u32],
    left_len: usize,
    seed: u64,
) -> (Vec<u32>, Vec<u32>) {
    let n = rows.len();
    let width = reps.cols();
    let (mut acc, mut pos_l, mut pos_r) = (vec![0f32; width], vec![0u32; width], vec![0u32; width]);
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let first = rng.random_range(0..n);
    let mut second = rng.random_range(0..n - 1);
    if second >= first {
        second += 1;
    }
    centroid_ranking(
        reps,
        inv_ideal,
        std::iter::once(rows[first]),
        &mut acc,
        &mut pos_l,
    );
    centroid_ranking(
        reps,
        inv_ideal,
        std::iter::once(rows[second]),
        &mut acc,
        &mut pos_r,
    );
    let mut order: Vec<usize> = (0..n).collect();
    let mut is_left = vec![false; n];
    let mut score = vec![0f32; n];
    for iter in 0..MAX_ITER {
        for (i, &r) in rows.iter().enumerate() {
            score[i] = ndcg(reps, inv_ideal, r, &pos_l) - ndcg(reps, inv_ideal, r, &pos_r);
        }
        order.sort_by(|&a, &b| score[b].total_cmp(&score[a]).then(a.cmp(&b)));
        let mut changed = false;
        for (rank, &i) in order.iter().enumerate() {
            let left = rank < left_len;
            changed |= left != is_left[i];
            is_left[i] = left;
        }
        if !changed && iter > 0 {
            break;
        }
        let side = |want: bool| {
            rows.iter()
                .zip(&is_left)
                .filter(move |(_, l)| **l == want)
                .map(|(&r, _)| r)
        };
        centroid_ranking(reps, inv_ideal, side(true), &mut acc, &mut pos_l);
        centroid_ranking(reps, inv_ideal, side(false), &mut acc, &mut pos_r);
    }
    let mut left = Vec::with_capacity(left_len);
    let mut right = Vec::with_capacity(n - left_len);
    for (&r, &l) in rows.iter().zip(&is_left) {
        if l { left.push(r) } else { right.push(r) }
    }
    (left, right)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_two_obvious_groups_and_keeps_sizes() {
        // Rows 0..4 live on coordinates {0, 1}, rows 4..8 on {2, 3}.
        let mut indptr = vec![0usize];
        let (mut idx, mut val) = (Vec::new(), Vec::new());
        for r in 0..8u32 {
            let base = if r < 4 { 0 } else { 2 };
            idx.extend([base, base + 1]);
            val.extend([1.0 + r as f32 * 0.1, 0.5]);
            indptr.push(idx.len());
        }
        let reps = SparseMatrix::new((8, 4), indptr, idx, val);
        let rows: Vec<u32> = (0..8).collect();
        let parts = partition_ndcg(&reps, &rows, 2, 7);
        let mut sides: Vec<Vec<u32>> = parts.clone();
        sides.sort();
        assert_eq!(sides, vec![vec![0, 1, 2, 3], vec![4, 5, 6, 7]]);
        let parts = partition_ndcg(&reps, &rows, 3, 7);
        let mut sizes: Vec<usize> = parts.iter().map(Vec::len).collect();
        sizes.sort_unstable();
        assert_eq!(sizes, vec![2, 3, 3]);
        assert_eq!(partition_ndcg(&reps, &rows, 3, 7), parts);
    }
}
