//! Block-wise partitioning (Liang, Hsieh & Lee 2023, §3.2): q instance clusters, each paired with
//! an overlapping label cluster, by alternating minimisation of objective (1):
//!
//! ```text
//!   f = − Σ_l Σ_{i ∈ X_l} |y_i ∩ L_l|  +  λ Σ_l |L_l|²
//! ```
//!
//! - [`kmeans`]: the initial instance clusters, spherical k-means on the (sparse) feature rows.
//! - [`label_step`] (Alg. 1): with the instance clusters fixed, each label cluster is the top-J*
//!   labels of its block by count, J* found by [`optimal_j`]'s linear scan of the convex sequence
//!   a_J = −Σ_{j ≤ J} C_j + λJ² (Proposition 1).
//! - [`instance_step`] (Alg. 2): with the label clusters fixed, each point moves to the block whose
//!   cluster captures most of its labels; a tie keeps it where it is, so the step never raises f.
//!
//! Each step minimises f over its half of the variables, so f never increases; [`alternate`]
//! stops once an iteration improves it by less than [`STOP_IMPROVEMENT`].

use crate::data::{SparseMatrix, row_slices};
use crate::seed::derive_seed;
use rayon::prelude::*;

/// Alternation stops once an iteration lowers the objective by less than this (the paper's 1e-5).
pub const STOP_IMPROVEMENT: f64 = 1e-5;

/// The most alternation rounds (the objective is bounded below, so this only caps pathologies).
pub const MAX_ROUNDS: usize = 100;

/// The most k-means rounds of the initialisation.
pub const KMEANS_ROUNDS: usize = 10;

/// The result of the alternating minimisation for one q and λ.
#[derive(Clone, Debug, PartialEq)]
pub struct Partition {
    /// The block of each training point.
    pub assign: Vec<u32>,
    /// Per block, its label cluster: sorted global label ids.
    pub clusters: Vec<Vec<u32>>,
    /// The objective after the initial label step and after every half-step that followed.
    pub objective_history: Vec<f64>,
    /// Alternation rounds run.
    pub rounds: usize,
}

impl Partition {
    /// The number of blocks q.
    pub fn q(&self) -> usize {
        self.clusters.len()
    }

    /// The number of points in each block.
    pub fn block_sizes(&self) -> Vec<usize> {
        let mut sizes = vec![0; self.q()];
        for &b in &self.assign {
            sizes[b as usize] += 1;
        }
        sizes
    }

    /// Whether some block has no points or an empty label cluster.
    pub fn has_empty_block(&self) -> bool {
        self.block_sizes().contains(&0) || self.clusters.iter().any(Vec::is_empty)
    }

    /// The final objective.
    pub fn objective(&self) -> f64 {
        self.objective_history.last().copied().unwrap_or(0.0)
    }
}

/// Spherical k-means on the rows of `x` (taken as they are; the trainer has normalised them):
/// farthest-first seeding from one seeded random row, then up to [`KMEANS_ROUNDS`] rounds of
/// assignment by the largest dot product with the unit-norm centroids. Returns the cluster of each
/// row. Deterministic given `seed`; a row with no features goes to cluster 0.
pub fn kmeans(x: &SparseMatrix, q: usize, seed: u64) -> Vec<u32> {
    let n = x.rows();
    let d = x.cols();
    if q <= 1 || n == 0 {
        return vec![0; n];
    }
    // Centroids are stored feature-major (d × q) so a sparse row scores all q in one pass.
    let mut cent = vec![0f32; d * q];
    let first = (derive_seed(seed, 0) % n as u64) as usize;
    let mut best_sim = vec![f32::NEG_INFINITY; n];
    let mut chosen = vec![first];
    let set_centroid = |cent: &mut [f32], c: usize, row: usize| {
        let (idx, val) = row_slices(x, row);
        let norm = val
            .iter()
            .map(|v| v * v)
            .sum::<f32>()
            .sqrt()
            .max(f32::MIN_POSITIVE);
        for (&j, &v) in idx.iter().zip(val) {
            cent[j as usize * q + c] = v / norm;
        }
    };
    set_centroid(&mut cent, 0, first);
    for c in 1..q {
        // The row least similar to every chosen centroid so far seeds the next one.
        let prev = c - 1;
        best_sim.par_iter_mut().enumerate().for_each(|(i, s)| {
            let (idx, val) = row_slices(x, i);
            let dot: f32 = idx
                .iter()
                .zip(val)
                .map(|(&j, &v)| v * cent[j as usize * q + prev])
                .sum();
            *s = s.max(dot);
        });
        let next = (0..n)
            .filter(|i| !chosen.contains(i))
            .min_by(|&a, &b| best_sim[a].total_cmp(&best_sim[b]).then(a.cmp(&b)));
        let Some(next) = next else { break };
        chosen.push(next);
        set_centroid(&mut cent, c, next);
    }
    let mut assign = vec![u32::MAX; n];
    for _ in 0..KMEANS_ROUNDS {
        let next: Vec<u32> = (0..n)
            .into_par_iter()
            .map_init(
                || vec![0f32; q],
                |sims, i| {
                    sims.iter_mut().for_each(|s| *s = 0.0);
                    let (idx, val) = row_slices(x, i);
                    for (&j, &v) in idx.iter().zip(val) {
                        let c = &cent[j as usize * q..(j as usize + 1) * q];
                        for (s, w) in sims.iter_mut().zip(c) {
                            *s += v * w;
                        }
                    }
                    argmax_first(sims) as u32
                },
            )
            .collect();
        if next == assign {
            break;
        }
        assign = next;
        centroids_into(x, &assign, q, &mut cent);
    }
    assign
}

/// The unit-norm mean of each cluster's rows, feature-major (d × q), into `cent`. A cluster with no
/// rows keeps a zero centroid.
fn centroids_into(x: &SparseMatrix, assign: &[u32], q: usize, cent: &mut [f32]) {
    cent.iter_mut().for_each(|c| *c = 0.0);
    for (i, &b) in assign.iter().enumerate() {
        let (idx, val) = row_slices(x, i);
        for (&j, &v) in idx.iter().zip(val) {
            cent[j as usize * q + b as usize] += v;
        }
    }
    let mut norms = vec![0f32; q];
    for row in cent.chunks(q) {
        for (n, v) in norms.iter_mut().zip(row) {
            *n += v * v;
        }
    }
    for row in cent.chunks_mut(q) {
        for (v, n) in row.iter_mut().zip(&norms) {
            if *n > 0.0 {
                *v /= n.sqrt();
            }
        }
    }
}

/// The index of the largest value, the first on ties (0 for an empty slice).
fn argmax_first(v: &[f32]) -> usize {
    let mut best = 0;
    for (i, &s) in v.iter().enumerate() {
        if s > v[best] {
            best = i;
        }
    }
    best
}

/// J* of Alg. 1 for one block: `counts` are the block's label counts in non-increasing order; the
/// result minimises a_J = −Σ_{j ≤ J} counts[j] + λJ² over J ∈ 0..=len (the smallest such J on a
/// tie). Since a_J is strictly convex for λ > 0 (Proposition 1), the scan stops at the first J
/// whose next step would not lower a_J: a_{J+1} − a_J = −C_{J+1} + λ(2J + 1).
pub fn optimal_j(counts: &[u32], lambda: f64) -> usize {
    let mut j = 0;
    while j < counts.len() && f64::from(counts[j]) > lambda * (2 * j + 1) as f64 {
        j += 1;
    }
    j
}

/// J* by evaluating a_J for every J (the reference [`optimal_j`] is checked against).
pub fn optimal_j_brute_force(counts: &[u32], lambda: f64) -> usize {
    let mut best = (0.0f64, 0usize);
    let mut prefix = 0.0f64;
    for (j, &c) in counts.iter().enumerate() {
        prefix += f64::from(c);
        let jj = (j + 1) as f64;
        let a = -prefix + lambda * jj * jj;
        if a < best.0 {
            best = (a, j + 1);
        }
    }
    best.1
}

/// Alg. 1: each block's label cluster is its J* most frequent labels (labels it never sees are
/// never taken; ties in count go to the smaller label id). Returns sorted global ids per block.
pub fn label_step(labels: &SparseMatrix, assign: &[u32], q: usize, lambda: f64) -> Vec<Vec<u32>> {
    let mut members: Vec<Vec<u32>> = vec![Vec::new(); q];
    for (i, &b) in assign.iter().enumerate() {
        members[b as usize].push(i as u32);
    }
    let m = labels.cols();
    members
        .par_iter()
        .map_init(
            || vec![0u32; m],
            |counts, rows| {
                let mut seen = Vec::new();
                for &i in rows {
                    for &l in row_slices(labels, i as usize).0 {
                        if counts[l as usize] == 0 {
                            seen.push(l);
                        }
                        counts[l as usize] += 1;
                    }
                }
                seen.sort_unstable_by(|&a, &b| {
                    counts[b as usize].cmp(&counts[a as usize]).then(a.cmp(&b))
                });
                let sorted: Vec<u32> = seen.iter().map(|&l| counts[l as usize]).collect();
                let j = optimal_j(&sorted, lambda);
                let mut cluster = seen[..j].to_vec();
                cluster.sort_unstable();
                for &l in &seen {
                    counts[l as usize] = 0;
                }
                cluster
            },
        )
        .collect()
}

/// Per block, a membership mask over the `m` labels.
fn masks(clusters: &[Vec<u32>], m: usize) -> Vec<Vec<bool>> {
    clusters
        .iter()
        .map(|c| {
            let mut mask = vec![false; m];
            for &l in c {
                mask[l as usize] = true;
            }
            mask
        })
        .collect()
}

/// Alg. 2: moves each point to the block whose label cluster holds most of its labels; on a tie
/// (a point with no labels, or none captured anywhere) the point stays in its block.
pub fn instance_step(labels: &SparseMatrix, clusters: &[Vec<u32>], assign: &mut [u32]) {
    let mask = masks(clusters, labels.cols());
    let q = clusters.len();
    assign.par_iter_mut().enumerate().for_each_init(
        || vec![0u32; q],
        |count, (i, b)| {
            count.iter_mut().for_each(|c| *c = 0);
            for &l in row_slices(labels, i).0 {
                for (c, mk) in count.iter_mut().zip(&mask) {
                    *c += u32::from(mk[l as usize]);
                }
            }
            let mut best = *b as usize;
            for (l, &c) in count.iter().enumerate() {
                if c > count[best] {
                    best = l;
                }
            }
            *b = best as u32;
        },
    );
}

/// Objective (1) for the given blocks and label clusters.
pub fn objective(labels: &SparseMatrix, assign: &[u32], clusters: &[Vec<u32>], lambda: f64) -> f64 {
    let captured: u64 = captured_ones(labels, assign, clusters);
    let size: f64 = clusters.iter().map(|c| (c.len() as f64).powi(2)).sum();
    -(captured as f64) + lambda * size
}

/// The label occurrences Σ_i |y_i ∩ L_{block(i)}| that the blocks capture.
pub fn captured_ones(labels: &SparseMatrix, assign: &[u32], clusters: &[Vec<u32>]) -> u64 {
    (0..assign.len())
        .into_par_iter()
        .map(|i| {
            let c = &clusters[assign[i] as usize];
            row_slices(labels, i)
                .0
                .iter()
                .filter(|l| c.binary_search(l).is_ok())
                .count() as u64
        })
        .sum()
}

/// Alternating minimisation from the instance clusters `init` (values below `q`): the label step,
/// then instance and label steps in turn until a round improves the objective by less than
/// [`STOP_IMPROVEMENT`] (or [`MAX_ROUNDS`] pass).
pub fn alternate(labels: &SparseMatrix, init: Vec<u32>, q: usize, lambda: f64) -> Partition {
    let mut assign = init;
    let mut clusters = label_step(labels, &assign, q, lambda);
    let mut history = vec![objective(labels, &assign, &clusters, lambda)];
    let mut rounds = 0;
    while rounds < MAX_ROUNDS {
        rounds += 1;
        let before = *history.last().unwrap_or(&0.0);
        instance_step(labels, &clusters, &mut assign);
        history.push(objective(labels, &assign, &clusters, lambda));
        clusters = label_step(labels, &assign, q, lambda);
        let after = objective(labels, &assign, &clusters, lambda);
        history.push(after);
        if before - after < STOP_IMPROVEMENT {
            break;
        }
    }
    Partition {
        assign,
        clusters,
        objective_history: history,
        rounds,
    }
}

/// The §3.3 choice of q over `1..=q_max`: the largest q for which `fits(q)` holds (no block
/// comes out empty), found with at most 1 + ⌈log₂ q_max⌉ calls instead of a scan of every q.
///
/// It tries `q_max` first (the usual answer, and then the only call), else bisects `[1, q_max)`
/// keeping a q that fits below and one that does not above. This assumes what §3.3 does, that
/// emptiness is monotone in q: the blocks fit up to some q* and not beyond (the paper's "unique
/// q"), and then the answer is q*, the same as a scan of q = 1, 2, … up to the first q that does
/// not fit. Whatever `fits` does, the answer is well defined: `Some(q)` with `fits(q)` true and
/// either q = q_max or `fits(q + 1)` false (both observed), or `None` when `fits(1)` is false.
/// Each q is evaluated at most once.
pub fn search_q(q_max: usize, mut fits: impl FnMut(usize) -> bool) -> Option<usize> {
    let q_max = q_max.max(1);
    if fits(q_max) {
        return Some(q_max);
    }
    // Invariant: `lo` fits (0 stands for "nothing fits yet") and `hi` does not.
    let (mut lo, mut hi) = (0, q_max);
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if fits(mid) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    (lo > 0).then_some(lo)
}

/// Makes every block usable: blocks with no points or an empty label cluster are removed and the
/// rest renumbered in order. Points of a removed block capture none of their labels anywhere (else
/// the instance step would have moved them), so they go to the remaining block whose feature
/// centroid is nearest. Returns `None` when no block keeps both points and labels.
pub fn compact(x: &SparseMatrix, mut p: Partition) -> Option<Partition> {
    let sizes = p.block_sizes();
    let keep: Vec<usize> = (0..p.q())
        .filter(|&b| sizes[b] > 0 && !p.clusters[b].is_empty())
        .collect();
    if keep.is_empty() {
        return None;
    }
    if keep.len() == p.q() {
        return Some(p);
    }
    let mut new_id = vec![u32::MAX; p.q()];
    for (n, &b) in keep.iter().enumerate() {
        new_id[b] = n as u32;
    }
    let q = keep.len();
    let kept: Vec<u32> = p.assign.iter().map(|&b| new_id[b as usize]).collect();
    // Centroids of the kept blocks, over their own points only.
    let mut cent = vec![0f32; x.cols() * q];
    let (rows, blocks): (Vec<usize>, Vec<u32>) = kept
        .iter()
        .enumerate()
        .filter(|(_, b)| **b != u32::MAX)
        .map(|(i, &b)| (i, b))
        .unzip();
    let sub =
        crate::tree::train::select_rows(x, &rows.iter().map(|&r| r as u32).collect::<Vec<_>>());
    centroids_into(&sub, &blocks, q, &mut cent);
    let mut sims = vec![0f32; q];
    for (i, b) in kept.iter().enumerate() {
        p.assign[i] = if *b == u32::MAX {
            sims.iter_mut().for_each(|s| *s = 0.0);
            let (idx, val) = row_slices(x, i);
            for (&j, &v) in idx.iter().zip(val) {
                for (s, w) in sims
                    .iter_mut()
                    .zip(&cent[j as usize * q..(j as usize + 1) * q])
                {
                    *s += v * w;
                }
            }
            argmax_first(&sims) as u32
        } else {
            *b
        };
    }
    p.clusters = keep
        .iter()
        .map(|&b| std::mem::take(&mut p.clusters[b]))
        .collect();
    Some(p)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn csr(rows: &[&[u32]], cols: usize) -> SparseMatrix {
        let mut indptr = vec![0usize];
        let mut idx = Vec::new();
        for r in rows {
            idx.extend_from_slice(r);
            indptr.push(idx.len());
        }
        let data = vec![1.0; idx.len()];
        SparseMatrix::new((rows.len(), cols), indptr, idx, data)
    }

    proptest! {
        #[test]
        fn linear_scan_finds_the_brute_force_j(
            mut counts in proptest::collection::vec(0u32..50, 0..40),
            lambda in 0.001f64..30.0,
        ) {
            counts.sort_unstable_by(|a, b| b.cmp(a));
            prop_assert_eq!(optimal_j(&counts, lambda), optimal_j_brute_force(&counts, lambda));
        }
    }

    /// The scan `search_q` replaces: q = 1, 2, … until the first q that does not fit.
    fn first_misfit_scan(fits: &[bool]) -> Option<usize> {
        let n = fits.iter().take_while(|&&f| f).count();
        (n > 0).then_some(n)
    }

    proptest! {
        #[test]
        fn q_search_matches_the_scan_when_emptiness_is_monotone(
            q_max in 1usize..40,
            q_star in 0usize..45,
        ) {
            let fits: Vec<bool> = (1..=q_max).map(|q| q <= q_star).collect();
            let mut calls = Vec::new();
            let got = search_q(q_max, |q| {
                calls.push(q);
                fits[q - 1]
            });
            prop_assert_eq!(got, first_misfit_scan(&fits));
            // The largest fitting q, too.
            prop_assert_eq!(got, fits.iter().rposition(|&f| f).map(|p| p + 1));
            let bound = 1 + (usize::BITS - (q_max - 1).leading_zeros()) as usize;
            prop_assert!(calls.len() <= bound, "{} calls for q_max {}", calls.len(), q_max);
            let mut distinct = calls.clone();
            distinct.sort_unstable();
            distinct.dedup();
            prop_assert_eq!(distinct.len(), calls.len(), "each q at most once");
        }

        #[test]
        fn q_search_returns_an_observed_boundary_whatever_fits_does(
            fits in proptest::collection::vec(any::<bool>(), 1..40),
        ) {
            let q_max = fits.len();
            let mut seen = std::collections::HashMap::new();
            let got = search_q(q_max, |q| {
                seen.insert(q, fits[q - 1]);
                fits[q - 1]
            });
            match got {
                Some(q) => {
                    prop_assert_eq!(seen.get(&q), Some(&true));
                    prop_assert!(q == q_max || seen.get(&(q + 1)) == Some(&false));
                }
                None => prop_assert_eq!(seen.get(&1), Some(&false)),
            }
        }
    }

    #[test]
    fn j_star_examples() {
        assert_eq!(optimal_j(&[], 1.0), 0);
        assert_eq!(optimal_j(&[10, 5, 4, 1], 1.0), 2); // 10 > 1, 5 > 3, 4 ≤ 5
        assert_eq!(optimal_j(&[10, 5, 4, 1], 100.0), 0);
        assert_eq!(optimal_j(&[3, 3, 3], 0.001), 3);
    }

    /// Random labels with some block structure: points of group g mostly take labels of group g.
    fn structured(n: usize, m: usize, seed: u64) -> SparseMatrix {
        let mut rows: Vec<Vec<u32>> = Vec::new();
        for i in 0..n {
            let g = (derive_seed(seed, i as u64) % 4) as usize;
            let mut r: Vec<u32> = (0..4)
                .map(|t| {
                    let h = derive_seed(seed ^ 77, (i * 4 + t) as u64) as usize;
                    if h % 5 == 0 {
                        (h / 5 % m) as u32
                    } else {
                        ((g * m / 4) + h / 5 % (m / 4)) as u32
                    }
                })
                .collect();
            r.sort_unstable();
            r.dedup();
            if i % 17 == 0 {
                r.clear();
            }
            rows.push(r);
        }
        let refs: Vec<&[u32]> = rows.iter().map(Vec::as_slice).collect();
        csr(&refs, m)
    }

    #[test]
    fn objective_never_increases() {
        for seed in 0..12u64 {
            let labels = structured(300, 40, seed);
            for &(q, lambda) in &[(2, 0.05), (4, 0.3), (6, 1.0), (3, 4.0)] {
                let init: Vec<u32> = (0..300)
                    .map(|i| (derive_seed(seed, i) % q as u64) as u32)
                    .collect();
                let p = alternate(&labels, init, q, lambda);
                assert!(p.objective_history.len() >= 3);
                for w in p.objective_history.windows(2) {
                    assert!(
                        w[1] <= w[0] + 1e-9,
                        "seed {seed} q {q}: {:?}",
                        p.objective_history
                    );
                }
                let recomputed = objective(&labels, &p.assign, &p.clusters, lambda);
                assert!((recomputed - p.objective()).abs() < 1e-9);
            }
        }
    }

    #[test]
    fn a_point_without_labels_keeps_its_block() {
        let labels = csr(&[&[0, 1], &[], &[2, 3], &[2]], 4);
        let p = alternate(&labels, vec![0, 1, 1, 1], 2, 0.1);
        assert_eq!(p.assign[1], 1);
        assert_eq!(p.clusters, vec![vec![0, 1], vec![2, 3]]);
        // Whatever block it starts in, it stays there.
        let p = alternate(&labels, vec![0, 0, 1, 1], 2, 0.1);
        assert_eq!(p.assign[1], 0);
    }

    #[test]
    fn empty_label_cluster_is_compacted_away() {
        // Block 1 holds only points whose labels are too rare for λ = 3: its cluster is empty.
        let labels = csr(&[&[0], &[0], &[0], &[0], &[1], &[2]], 3);
        let x = csr(&[&[0], &[0], &[0], &[0], &[1], &[1]], 2);
        let p = alternate(&labels, vec![0, 0, 0, 0, 1, 1], 2, 3.0);
        assert!(p.clusters[1].is_empty());
        assert!(p.has_empty_block());
        let c = compact(&x, p).unwrap();
        assert_eq!(c.q(), 1);
        assert_eq!(c.assign, vec![0; 6]);
        assert_eq!(c.clusters, vec![vec![0]]);
        // With every cluster empty there is nothing to route to.
        let p = alternate(&labels, vec![0, 0, 0, 0, 1, 1], 2, 100.0);
        assert!(compact(&x, p).is_none());
    }

    #[test]
    fn one_block_takes_the_top_labels() {
        let labels = csr(&[&[0, 1], &[0], &[0, 2], &[1]], 3);
        let p = alternate(&labels, vec![0; 4], 1, 0.5);
        // Counts 3, 2, 1 against λ(2J + 1) = 0.5, 1.5, 2.5.
        assert_eq!(p.clusters, vec![vec![0, 1]]);
        assert_eq!(p.assign, vec![0; 4]);
    }

    #[test]
    fn kmeans_separates_disjoint_supports() {
        let x = csr(&[&[0, 1], &[0, 1], &[2, 3], &[2, 3], &[0, 1]], 4);
        let a = kmeans(&x, 2, 3);
        assert_eq!(a[0], a[1]);
        assert_eq!(a[2], a[3]);
        assert_ne!(a[0], a[2]);
        assert_eq!(kmeans(&x, 2, 3), a, "deterministic");
        assert_eq!(kmeans(&x, 1, 3), vec![0; 5]);
    }
}
