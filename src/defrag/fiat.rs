//! FIAT in the input space: the block-diagonal pseudo co-occurrence matrix C^F = Σ_k X_{F_k}
//! X_{F_k}ᵀ over feature clusters of its own size (`fiat.d0`), stored as one sparse row per
//! feature, and the one function that imputes a query with it ([`impute`]).
//!
//! The clusters are DEFRAG's balanced clustering of the features' columns over the training
//! points (DEFRAG-X's representation), so a block holds features that occur together. C^F is
//! built over the column-normalized X̂, so C^F_{ij} is the cosine of features i and j, and only
//! its off-diagonal entries are stored: the diagonal is 1, and x + w·C^F x is x·(1 + w) plus the
//! off-diagonal part, which a normalized query cannot tell from x + w/(1 + w)·(C^F − I)x
//! (docs/decisions/0045-fiat-input-space.md).
//!
//! A query x becomes x + w·(C^F − I)x: features it has get their neighbours' share added, and of
//! the features it lacks only the `max_terms` largest new entries are kept, so an imputed query
//! stays sparse and its cost bounded.

use super::train::representatives;
use super::{DefragKind, DefragParams};
use crate::cluster::{self, ClusterError, ClusterParams};
use crate::data::Dataset;
use crate::rerank::LabelRows;
use serde::{Deserialize, Serialize};
use std::ops::Deref;

/// FIAT in the input space: its settings (`fiat.*` keys).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FiatParams {
    /// Build C^F over the input features and store it in the bundle (off by default).
    pub input: bool,
    /// The largest number of features in one of C^F's clusters.
    pub d0: usize,
    /// The weight w of the imputed terms: a query becomes x + w·(C^F − I)x.
    pub weight: f32,
    /// The most features an imputed query gains (the largest of its new entries).
    pub max_terms: usize,
    /// With `input`, whether queries are imputed when a request does not say (`impute`).
    pub impute: bool,
    /// With `input`, impute the training rows too, so the model trains on what imputed queries
    /// look like.
    pub train: bool,
}

impl FiatParams {
    /// The defaults: off; when on, clusters of at most 32 features, w = 0.5, at most 16 new
    /// features per query, the training rows imputed and queries imputed unless a request says
    /// otherwise (docs/decisions/0045-fiat-input-space.md).
    pub const DEFAULT: FiatParams = FiatParams {
        input: false,
        d0: 32,
        weight: 0.5,
        max_terms: 16,
        impute: true,
        train: true,
    };

    /// Checks ranges, naming the key at fault. `impute` and `train` are ignored without `input`.
    pub fn validate(&self) -> Result<(), (&'static str, String)> {
        if self.d0 < 2 {
            return Err(("fiat.d0", format!("must be at least 2, got {}", self.d0)));
        }
        if !self.weight.is_finite() || self.weight < 0.0 {
            return Err((
                "fiat.weight",
                format!("must be finite and >= 0, got {}", self.weight),
            ));
        }
        Ok(())
    }
}

impl Default for FiatParams {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// C^F's off-diagonal entries, one row per feature, columns ascending.
pub type CoRows = LabelRows<Vec<u32>, Vec<f32>>;

/// Clusters the features of `ds` (rows as the trainer sees them) into parts of at most
/// `params.d0`, and builds C^F's off-diagonal cosines within each part. Deterministic given
/// `seed`.
pub fn build(ds: &Dataset, params: &FiatParams, seed: u64) -> Result<CoRows, ClusterError> {
    let d = ds.n_features();
    let reps_params = DefragParams {
        kind: DefragKind::X,
        ..DefragParams::DEFAULT
    };
    let (reps, _) = representatives(ds, &reps_params);
    let k = super::n_clusters(d, params.d0);
    let rows: Vec<u32> = (0..d as u32).collect();
    let parts = if d == 0 {
        Vec::new()
    } else {
        cluster::partition(&reps, &rows, k, &ClusterParams::DEFAULT, seed)?
    };
    drop(reps);
    Ok(co_rows(ds, &parts))
}

/// C^F's off-diagonal cosines within the feature clusters `parts`, from the rows of `ds`.
pub fn co_rows(ds: &Dataset, parts: &[Vec<u32>]) -> CoRows {
    let d = ds.n_features();
    // Each feature's cluster, its place in it, and where its cluster's dense block starts.
    let mut cluster = vec![0u32; d];
    let mut place = vec![0u32; d];
    let mut block_start = Vec::with_capacity(parts.len() + 1);
    block_start.push(0usize);
    for (c, part) in parts.iter().enumerate() {
        for (p, &j) in part.iter().enumerate() {
            cluster[j as usize] = c as u32;
            place[j as usize] = p as u32;
        }
        let last = *block_start.last().unwrap_or(&0);
        block_start.push(last + part.len() * part.len());
    }
    let mut block = vec![0f64; *block_start.last().unwrap_or(&0)];
    let mut norm = vec![0f64; d];
    let mut row: Vec<(u32, u32, f64)> = Vec::new();
    for i in 0..ds.n_points() {
        let (idx, val) = ds.feature_row(i);
        row.clear();
        row.extend(
            idx.iter()
                .zip(val)
                .map(|(&j, &v)| (cluster[j as usize], place[j as usize], f64::from(v))),
        );
        for (&j, &v) in idx.iter().zip(val) {
            norm[j as usize] += f64::from(v) * f64::from(v);
        }
        row.sort_unstable_by_key(|&(c, p, _)| (c, p));
        let mut a = 0;
        while a < row.len() {
            let c = row[a].0;
            let mut b = a;
            while b < row.len() && row[b].0 == c {
                b += 1;
            }
            let size = parts[c as usize].len();
            let base = block_start[c as usize];
            for &(_, p, v) in &row[a..b] {
                for &(_, q, u) in &row[a..b] {
                    if p != q {
                        block[base + p as usize * size + q as usize] += v * u;
                    }
                }
            }
            a = b;
        }
    }
    // Row j holds (i, cos(i, j)) for the other features i of j's cluster, ascending in i.
    let mut start = Vec::with_capacity(d + 1);
    let (mut out_idx, mut out_val) = (Vec::new(), Vec::new());
    start.push(0u32);
    let mut entries: Vec<(u32, f32)> = Vec::new();
    for j in 0..d {
        entries.clear();
        let c = cluster[j] as usize;
        if let Some(part) = parts.get(c).filter(|part| part.contains(&(j as u32))) {
            let size = part.len();
            let base = block_start[c] + place[j] as usize * size;
            for (q, &i) in part.iter().enumerate() {
                let raw = block[base + q];
                let scale = (norm[j] * norm[i as usize]).sqrt();
                if raw != 0.0 && scale > 0.0 {
                    entries.push((i, (raw / scale) as f32));
                }
            }
        }
        entries.sort_unstable_by_key(|e| e.0);
        for &(i, v) in &entries {
            out_idx.push(i);
            out_val.push(v);
        }
        start.push(out_idx.len() as u32);
    }
    LabelRows {
        start,
        idx: out_idx,
        val: out_val,
    }
}

/// Reusable buffers of [`impute`]: an accumulator over the features, all zero between calls.
#[derive(Clone, Debug, Default)]
pub struct ImputeScratch {
    acc: Vec<f32>,
    /// One bit per feature: set while the feature is in `touched`, so each is listed once even
    /// when its sum cancels to zero and grows again.
    marked: Vec<u64>,
    touched: Vec<u32>,
    new: Vec<u32>,
}

impl ImputeScratch {
    /// The length of the accumulator (it grows to the model's feature count).
    pub fn acc_len(&self) -> usize {
        self.acc.len()
    }
}

/// Imputes the sparse query `idx`/`val` (ids ascending and unique) with C^F's rows `co`: writes
/// x + w·(C^F − I)x into `out_idx`/`out_val`, ids ascending, keeping of the features x lacks only
/// the `max_terms` whose new values are largest in magnitude (ties to the lower id), and
/// L2-normalizing the result when `normalize`. Every index is bounds-checked: a corrupt row
/// contributes less, never a panic. The trainer's held-out checks and the server both impute
/// through this one function.
#[allow(clippy::too_many_arguments)]
pub fn impute<U, F>(
    co: &LabelRows<U, F>,
    idx: &[u32],
    val: &[f32],
    weight: f32,
    max_terms: usize,
    normalize: bool,
    scratch: &mut ImputeScratch,
    out_idx: &mut Vec<u32>,
    out_val: &mut Vec<f32>,
) where
    U: Deref<Target = [u32]>,
    F: Deref<Target = [f32]>,
{
    if weight == 0.0 {
        // Nothing is added: the query itself, not normalized a second time.
        out_idx.clear();
        out_val.clear();
        out_idx.extend_from_slice(idx);
        out_val.extend_from_slice(val);
        return;
    }
    let n = co.n_labels();
    if scratch.acc.len() < n {
        scratch.acc.resize(n, 0.0);
        scratch.marked.resize(n.div_ceil(64), 0);
    }
    let ImputeScratch {
        acc,
        marked,
        touched,
        new,
    } = scratch;
    touched.clear();
    for (&j, &x) in idx.iter().zip(val) {
        let j = j as usize;
        let (Some(&a), Some(&b)) = (co.start.get(j), co.start.get(j + 1)) else {
            continue;
        };
        let (Some(ci), Some(cv)) = (
            co.idx.get(a as usize..b as usize),
            co.val.get(a as usize..b as usize),
        ) else {
            continue;
        };
        for (&i, &c) in ci.iter().zip(cv) {
            let i_at = i as usize;
            if let (Some(slot), Some(word)) = (acc.get_mut(i_at), marked.get_mut(i_at / 64)) {
                let bit = 1u64 << (i % 64);
                if *word & bit == 0 {
                    *word |= bit;
                    touched.push(i);
                }
                *slot += weight * c * x;
            }
        }
    }
    // The features the query has: each keeps its value plus its neighbours' share.
    out_idx.clear();
    out_val.clear();
    for (&j, &x) in idx.iter().zip(val) {
        let add = acc.get_mut(j as usize).map_or(0.0, std::mem::take);
        out_idx.push(j);
        out_val.push(x + add);
    }
    // The features it lacks: the largest new entries, at most `max_terms`.
    // `touched` lists each feature once, and the order below is total, so which entries are
    // kept does not depend on the order they were found in; only the kept ones are sorted.
    new.clear();
    new.extend(
        touched
            .iter()
            .copied()
            .filter(|&i| acc[i as usize] != 0.0 && acc[i as usize].is_finite()),
    );
    if new.len() > max_terms {
        let by_size = |a: &u32, b: &u32| {
            acc[*b as usize]
                .abs()
                .total_cmp(&acc[*a as usize].abs())
                .then(a.cmp(b))
        };
        new.select_nth_unstable_by(max_terms, by_size);
        new.truncate(max_terms);
    }
    new.sort_unstable();
    // Merge the kept new entries into the ascending ids.
    let kept = out_idx.len();
    for &i in new.iter() {
        out_idx.push(i);
        out_val.push(acc[i as usize]);
    }
    for &i in touched.iter() {
        acc[i as usize] = 0.0;
        if let Some(word) = marked.get_mut(i as usize / 64) {
            *word = 0;
        }
    }
    touched.clear();
    if !new.is_empty() && kept > 0 {
        merge_sorted(out_idx, out_val, kept);
    }
    // A sum can cancel to zero; the model scores non-zeros only.
    crate::data::finish_query(out_idx, out_val, normalize);
}

/// Every row of `x` imputed by [`impute`] with `params`' weight and term cap.
pub fn impute_rows<U, F>(
    co: &LabelRows<U, F>,
    x: &crate::data::SparseMatrix,
    params: &FiatParams,
    normalize: bool,
) -> crate::data::SparseMatrix
where
    U: Deref<Target = [u32]>,
    F: Deref<Target = [f32]>,
{
    let mut scratch = ImputeScratch::default();
    let (mut ri, mut rv) = (Vec::new(), Vec::new());
    let mut indptr = Vec::with_capacity(x.rows() + 1);
    let (mut idx, mut val) = (Vec::new(), Vec::new());
    indptr.push(0usize);
    for i in 0..x.rows() {
        let (fi, fv) = crate::data::row_slices(x, i);
        impute(
            co,
            fi,
            fv,
            params.weight,
            params.max_terms,
            normalize,
            &mut scratch,
            &mut ri,
            &mut rv,
        );
        idx.extend_from_slice(&ri);
        val.extend_from_slice(&rv);
        indptr.push(idx.len());
    }
    crate::data::SparseMatrix::new((x.rows(), x.cols()), indptr, idx, val)
}

/// Sorts the pairs of `idx`/`val` by id, where `..mid` and `mid..` are each ascending, in place
/// (insertion from the back: the imputed tail is short).
fn merge_sorted(idx: &mut [u32], val: &mut [f32], mid: usize) {
    for r in mid..idx.len() {
        let mut p = r;
        while p > 0 && idx[p - 1] > idx[p] {
            idx.swap(p - 1, p);
            val.swap(p - 1, p);
            p -= 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::SparseMatrix;

    fn dataset(rows: &[&[(u32, f32)]], d: usize) -> Dataset {
        let mut indptr = vec![0usize];
        let (mut idx, mut val) = (Vec::new(), Vec::new());
        for r in rows {
            for &(j, v) in r.iter() {
                idx.push(j);
                val.push(v);
            }
            indptr.push(idx.len());
        }
        let n = rows.len();
        Dataset {
            features: SparseMatrix::new((n, d), indptr, idx, val),
            labels: SparseMatrix::new((n, 1), (0..=n).collect(), vec![0; n], vec![1.0; n]),
        }
    }

    #[test]
    fn co_rows_are_the_off_diagonal_cosines_within_clusters() {
        let rows: [&[(u32, f32)]; 3] = [
            &[(0, 1.0), (1, 2.0), (2, 1.0)],
            &[(1, 1.0), (2, 3.0), (3, 1.0)],
            &[(0, 2.0), (3, 1.0)],
        ];
        let ds = dataset(&rows, 4);
        let parts = vec![vec![0u32, 1, 3], vec![2u32]];
        let co = co_rows(&ds, &parts);
        co.check(4, 4).unwrap();
        let dense: Vec<[f32; 4]> = vec![
            [1.0, 2.0, 1.0, 0.0],
            [0.0, 1.0, 3.0, 1.0],
            [2.0, 0.0, 0.0, 1.0],
        ];
        let col = |j: usize| dense.iter().map(|r| r[j]).collect::<Vec<_>>();
        let cos = |i: usize, j: usize| {
            let (a, b) = (col(i), col(j));
            let dot: f32 = a.iter().zip(&b).map(|(x, y)| x * y).sum();
            let n = |v: &[f32]| v.iter().map(|x| x * x).sum::<f32>().sqrt();
            dot / (n(&a) * n(&b))
        };
        let row = |j: usize| {
            let (a, b) = (co.start[j] as usize, co.start[j + 1] as usize);
            (co.idx[a..b].to_vec(), co.val[a..b].to_vec())
        };
        assert_eq!(row(0).0, vec![1, 3]);
        assert_eq!(
            row(2).0,
            Vec::<u32>::new(),
            "a cluster of one has no entries"
        );
        for j in [0usize, 1, 3] {
            let (ids, vals) = row(j);
            for (i, v) in ids.iter().zip(vals) {
                assert!((v - cos(*i as usize, j)).abs() < 1e-6, "({i}, {j})");
            }
        }
    }

    #[test]
    fn impute_adds_weighted_neighbours_and_keeps_the_largest_new_terms() {
        // Features 0..4 in one cluster: 0's neighbours are 1 (0.9), 2 (0.5), 3 (0.1).
        let co = LabelRows {
            start: vec![0u32, 3, 4, 5, 6, 6],
            idx: vec![1u32, 2, 3, 0, 0, 0],
            val: vec![0.9f32, 0.5, 0.1, 0.9, 0.5, 0.1],
        };
        let mut s = ImputeScratch::default();
        let (mut i, mut v) = (Vec::new(), Vec::new());
        impute(
            &co,
            &[0, 4],
            &[1.0, 2.0],
            0.5,
            2,
            false,
            &mut s,
            &mut i,
            &mut v,
        );
        assert_eq!(i, vec![0, 1, 2, 4]);
        assert_eq!(v, vec![1.0, 0.45, 0.25, 2.0]);
        // Features it has get their share too; the accumulator is left clean.
        impute(
            &co,
            &[0, 1],
            &[1.0, 1.0],
            1.0,
            0,
            false,
            &mut s,
            &mut i,
            &mut v,
        );
        assert_eq!(i, vec![0, 1]);
        assert!(v.iter().all(|x| (x - 1.9).abs() < 1e-6), "{v:?}");
        assert!(s.acc.iter().all(|&a| a == 0.0));
        // Normalized; weight 0 is the query itself.
        impute(
            &co,
            &[1, 4],
            &[3.0, 4.0],
            1.0,
            0,
            true,
            &mut s,
            &mut i,
            &mut v,
        );
        assert_eq!((i.clone(), v.clone()), (vec![1, 4], vec![0.6, 0.8]));
        impute(
            &co,
            &[0, 2],
            &[3.0, 4.0],
            0.0,
            5,
            true,
            &mut s,
            &mut i,
            &mut v,
        );
        assert_eq!((i.clone(), v.clone()), (vec![0, 2], vec![3.0, 4.0]));
        // A corrupt row (offsets past the end) adds nothing and does not panic.
        let bad = LabelRows {
            start: vec![0u32, 9, 9, 9, 9, 9],
            idx: vec![1u32],
            val: vec![1.0f32],
        };
        impute(&bad, &[0], &[1.0], 1.0, 5, false, &mut s, &mut i, &mut v);
        assert_eq!((i, v), (vec![0], vec![1.0]));
    }

    #[test]
    fn a_new_term_that_cancels_and_grows_again_is_kept_once_and_ties_go_to_the_lower_id() {
        // Features 0, 1 and 2 each reach 5; 0 and 1 cancel there before 2 adds to it. Feature 2
        // also reaches 3 and 4 equally, with 4 ahead of 3 in its row.
        let co = LabelRows {
            start: vec![0u32, 1, 2, 5, 5, 5, 5],
            idx: vec![5u32, 5, 5, 4, 3],
            val: vec![1.0f32, -1.0, 0.5, 0.25, 0.25],
        };
        let mut s = ImputeScratch::default();
        let (mut i, mut v) = (Vec::new(), Vec::new());
        impute(
            &co,
            &[0, 1, 2],
            &[1.0, 1.0, 1.0],
            1.0,
            2,
            false,
            &mut s,
            &mut i,
            &mut v,
        );
        assert_eq!(i, vec![0, 1, 2, 3, 5]);
        assert_eq!(v, vec![1.0, 1.0, 1.0, 0.25, 0.5]);
        assert!(s.acc.iter().all(|&a| a == 0.0));
        assert!(s.marked.iter().all(|&m| m == 0), "the marks are cleared");
    }

    #[test]
    fn build_is_deterministic_and_within_cluster_size() {
        let mut ds = crate::data::generate(&crate::data::SynthParams {
            n: 200,
            d: 60,
            l: 10,
            seed: 5,
            ..crate::data::SynthParams::DEFAULT
        });
        crate::data::l2_normalize_rows(&mut ds.features);
        let p = FiatParams {
            input: true,
            d0: 8,
            ..FiatParams::DEFAULT
        };
        let a = build(&ds, &p, 7).unwrap();
        assert_eq!(a, build(&ds, &p, 7).unwrap());
        a.check(60, 60).unwrap();
        for j in 0..60 {
            assert!(a.start[j + 1] - a.start[j] < 8, "feature {j}");
        }
        assert!(a.nnz() > 0);
    }
}
