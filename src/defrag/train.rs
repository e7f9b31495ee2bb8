//! Training side of DEFRAG: feature representatives, the balanced feature clustering, the
//! agglomerated training rows, FIAT scales and REFRAG prototypes.

use super::{DefragKind, DefragParams, ndcg};
use crate::cluster::{self, ClusterError, ClusterParams};
use crate::data::{Dataset, SparseMatrix};
use std::time::Instant;

/// Everything DEFRAG stores for one ensemble member, and the training rows in its space.
#[derive(Debug)]
pub struct DefragArrays {
    /// Per input feature, its cluster id (`< sizes.len()`).
    pub map: Vec<u32>,
    /// Per cluster, its number of features.
    pub sizes: Vec<u32>,
    /// Per input feature, the FIAT scale s_j (present with FIAT or REFRAG).
    pub scale: Option<Vec<f32>>,
    /// REFRAG prototypes, one unit-norm sparse row per label over the clusters.
    pub prototypes: Option<Prototypes>,
    /// Seconds spent building representatives and clustering.
    pub cluster_seconds: f64,
    /// Features that the sampled points and labels leave without a representation.
    pub unrepresented_sampled: usize,
    /// Features without a representation after `fill` (equal to the above without it).
    pub unrepresented: usize,
}

/// Sparse label prototypes in CSR form: label l holds `idx[start[l]..start[l+1]]`.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Prototypes {
    /// Row offsets, L + 1 entries.
    pub start: Vec<u32>,
    /// Cluster ids, ascending within a row.
    pub idx: Vec<u32>,
    /// Values; each row has unit L2 norm (or is empty).
    pub val: Vec<f32>,
}

/// The result of [`build`]: the stored arrays and the agglomerated training set.
#[derive(Debug)]
pub struct Built {
    /// The arrays that go into the bundle.
    pub arrays: DefragArrays,
    /// The training data over the K super-features.
    pub dataset: Dataset,
}

/// Clusters the features of `ds` (rows as the trainer sees them), then agglomerates its rows
/// (imputed first with FIAT), L2-normalizing them again when `normalize`, and builds the FIAT
/// scales and REFRAG prototypes that `params` asks for. Deterministic given `seed`.
pub fn build(
    ds: &Dataset,
    params: &DefragParams,
    normalize: bool,
    seed: u64,
) -> Result<Built, ClusterError> {
    let start = Instant::now();
    let d = ds.n_features();
    let (reps, unrepresented_sampled) = representatives(ds, params);
    let unrepresented = (0..d)
        .filter(|&j| crate::data::row_slices(&reps, j).0.is_empty())
        .count();
    let k = super::n_clusters(d, params.d0);
    let rows: Vec<u32> = (0..d as u32).collect();
    let parts = if d == 0 {
        Vec::new()
    } else if params.kind == DefragKind::N {
        ndcg::partition_ndcg(&reps, &rows, k, seed)
    } else {
        cluster::partition(&reps, &rows, k, &ClusterParams::DEFAULT, seed)?
    };
    let mut map = vec![0u32; d];
    let mut sizes = Vec::with_capacity(parts.len());
    for (c, part) in parts.iter().enumerate() {
        for &j in part {
            map[j as usize] = c as u32;
        }
        sizes.push(part.len() as u32);
    }
    let cluster_seconds = start.elapsed().as_secs_f64();
    let need_scale = params.fiat || params.refrag;
    let scale = need_scale.then(|| fiat_scale(&ds.features, &map, sizes.len()));
    let weights = feature_weights(
        &map,
        &sizes,
        params.average,
        scale.as_deref().filter(|_| params.fiat),
    );
    let mut features = agglomerate(&ds.features, &map, &weights, sizes.len());
    let prototypes = params.refrag.then(|| {
        let w = feature_weights(&map, &sizes, params.average, scale.as_deref());
        let imputed = agglomerate(&ds.features, &map, &w, sizes.len());
        largest_entries(prototypes(&imputed, &ds.labels), params.prototype_entries.0)
    });
    if normalize {
        crate::data::l2_normalize_rows(&mut features);
    }
    Ok(Built {
        arrays: DefragArrays {
            map,
            sizes,
            scale,
            prototypes,
            cluster_seconds,
            unrepresented_sampled,
            unrepresented,
        },
        dataset: Dataset {
            features,
            labels: ds.labels.clone(),
        },
    })
}

/// The representative vector of every feature, one L2-normalized row per feature: its column over
/// the ñ most voluminous points (X), or Σᵢ x_j^i y^i over those points and the L̃ most popular
/// labels (XY, N).
///
/// With `params.fill`, a feature that the sample leaves at zero although it occurs in training
/// (a rare feature, found only outside the ñ points or only with other labels) gets a
/// representation over all points instead, and with XY over all labels if it still has none;
/// only features that never occur with a label (or, with X, never occur) stay at zero. Without
/// it such features tie and are grouped arbitrarily. The extra coordinates are the unsampled
/// points (X) or the less popular labels (XY), so filled rows stay comparable to sampled ones.
/// Also returns how many features the sample alone leaves at zero.
pub fn representatives(ds: &Dataset, params: &DefragParams) -> (SparseMatrix, usize) {
    let n = ds.n_points();
    let n_sel = ((n as f64 * f64::from(params.points_frac)).ceil() as usize).clamp(1.min(n), n);
    let mut order: Vec<u32> = (0..n as u32).collect();
    let volume = |i: u32| -> f32 { ds.feature_row(i as usize).1.iter().map(|v| v.abs()).sum() };
    let vols: Vec<f32> = order.iter().map(|&i| volume(i)).collect();
    order.sort_by(|&a, &b| {
        vols[b as usize]
            .total_cmp(&vols[a as usize])
            .then(a.cmp(&b))
    });
    order.truncate(n_sel);
    order.sort_unstable();
    let mut selected = vec![false; n];
    for &i in &order {
        selected[i as usize] = true;
    }
    let d = ds.n_features();
    // Column j of the representative matrix: (coordinate, value) pairs, built feature-major.
    let mut cols: Vec<Vec<(u32, f32)>> = vec![Vec::new(); d];
    let mut empty_sampled = 0;
    let width = match params.kind {
        DefragKind::X => {
            for (r, &i) in order.iter().enumerate() {
                let (idx, val) = ds.feature_row(i as usize);
                for (&j, &v) in idx.iter().zip(val) {
                    cols[j as usize].push((r as u32, v));
                }
            }
            let empty: Vec<bool> = cols.iter().map(Vec::is_empty).collect();
            empty_sampled = empty.iter().filter(|&&e| e).count();
            if params.fill && n_sel < n {
                // The unsampled points follow the sampled ones as coordinates n_sel, n_sel + 1, ….
                let unsampled = (0..n).filter(|&i| !selected[i]);
                for (r, i) in unsampled.enumerate() {
                    let (idx, val) = ds.feature_row(i);
                    for (&j, &v) in idx.iter().zip(val) {
                        if empty[j as usize] {
                            cols[j as usize].push(((n_sel + r) as u32, v));
                        }
                    }
                }
                n
            } else {
                n_sel
            }
        }
        _ => {
            let l = ds.n_labels();
            let l_sel = ((l as f64 * f64::from(params.labels_frac)).ceil() as usize).clamp(1, l);
            let counts = crate::data::label_counts(&ds.labels);
            let mut labels: Vec<u32> = (0..l as u32).collect();
            labels.sort_by(|&a, &b| counts[b as usize].cmp(&counts[a as usize]).then(a.cmp(&b)));
            // Every label's popularity rank; the sample uses ranks below l_sel.
            let mut rank = vec![u32::MAX; l];
            for (r, &lab) in labels.iter().enumerate() {
                rank[lab as usize] = r as u32;
            }
            let csc = ds.features.to_other_storage();
            let mut column = XyColumn {
                ds,
                rank: &rank,
                acc: vec![0f32; l],
                touched: Vec::new(),
            };
            for (j, col) in cols.iter_mut().enumerate() {
                let (pts, vals) = crate::data::row_slices(&csc, j);
                column.fill(pts, vals, |i| selected[i as usize], l_sel, col);
                empty_sampled += usize::from(col.is_empty());
                if params.fill && col.is_empty() && !pts.is_empty() {
                    column.fill(pts, vals, |_| true, l_sel, col);
                    if col.is_empty() {
                        column.fill(pts, vals, |_| true, l, col);
                    }
                }
            }
            if params.fill { l.max(1) } else { l_sel }
        }
    };
    (csr_from_rows(&cols, width, true), empty_sampled)
}

/// Builds one feature's XY representation Σᵢ x_j^i y^i, restricted to some points and to the
/// labels of popularity rank below a cutoff, with a reusable dense accumulator.
struct XyColumn<'a> {
    /// The training data.
    ds: &'a Dataset,
    /// Per label, its popularity rank (0 = most popular).
    rank: &'a [u32],
    /// Per rank, a running sum; all zero between calls.
    acc: Vec<f32>,
    /// The ranks touched by the current column.
    touched: Vec<u32>,
}

impl XyColumn<'_> {
    /// Writes into `col` (cleared first) the sums over the points `pts` (with values `vals`) that
    /// `keep` accepts, one coordinate per label rank below `max_rank`, zeros dropped.
    fn fill(
        &mut self,
        pts: &[u32],
        vals: &[f32],
        keep: impl Fn(u32) -> bool,
        max_rank: usize,
        col: &mut Vec<(u32, f32)>,
    ) {
        col.clear();
        for (&i, &v) in pts.iter().zip(vals) {
            if !keep(i) {
                continue;
            }
            for &lab in self.ds.label_row(i as usize) {
                let r = self.rank[lab as usize];
                if (r as usize) < max_rank {
                    if self.acc[r as usize] == 0.0 {
                        self.touched.push(r);
                    }
                    self.acc[r as usize] += v;
                }
            }
        }
        self.touched.sort_unstable();
        self.touched.dedup();
        for &r in &self.touched {
            if self.acc[r as usize] != 0.0 {
                col.push((r, self.acc[r as usize]));
            }
            self.acc[r as usize] = 0.0;
        }
        self.touched.clear();
    }
}

/// A CSR matrix from per-row sorted `(column, value)` lists, rows optionally L2-normalized.
fn csr_from_rows(rows: &[Vec<(u32, f32)>], width: usize, normalize: bool) -> SparseMatrix {
    let mut indptr = Vec::with_capacity(rows.len() + 1);
    let mut idx = Vec::new();
    let mut val = Vec::new();
    indptr.push(0usize);
    for row in rows {
        let norm = if normalize {
            row.iter().map(|p| p.1 * p.1).sum::<f32>().sqrt()
        } else {
            1.0
        };
        let inv = if norm > 0.0 && norm.is_finite() {
            1.0 / norm
        } else {
            1.0
        };
        for &(c, v) in row {
            idx.push(c);
            val.push(v * inv);
        }
        indptr.push(idx.len());
    }
    SparseMatrix::new((rows.len(), width), indptr, idx, val)
}

/// The FIAT scale of every feature: s_j = Σ_{i∈F_k} C^F_{ij}, the column sum of C^F's block at
/// j (k = map[j]), in one pass over X.
///
/// C^F is built over the column-normalized X̂ (each feature's column scaled to unit norm), so
/// C^F_{ij} is the cosine between features i and j, its diagonal is 1 and s_j ∈ [1, |F_k|]
/// (for non-negative data): raw co-occurrence counts would weight a feature by its frequency
/// and drown the rare, informative ones. A feature absent from training keeps s_j = 1.
pub fn fiat_scale(x: &SparseMatrix, map: &[u32], n_clusters: usize) -> Vec<f32> {
    let mut norm = vec![0f64; map.len()];
    for row in x.outer_iterator() {
        for (j, &v) in row.iter() {
            norm[j] += f64::from(v) * f64::from(v);
        }
    }
    let inv: Vec<f64> = norm
        .iter()
        .map(|&n| if n > 0.0 { 1.0 / n.sqrt() } else { 0.0 })
        .collect();
    let mut acc = vec![0f64; n_clusters];
    let mut s = vec![0f64; map.len()];
    for row in x.outer_iterator() {
        for (j, &v) in row.iter() {
            acc[map[j] as usize] += f64::from(v) * inv[j];
        }
        for (j, &v) in row.iter() {
            s[j] += f64::from(v) * inv[j] * acc[map[j] as usize];
        }
        for (j, _) in row.iter() {
            acc[map[j] as usize] = 0.0;
        }
    }
    s.iter()
        .zip(&norm)
        .map(|(&v, &n)| if n > 0.0 { v as f32 } else { 1.0 })
        .collect()
}

/// The weight each input feature carries into its cluster: 1 (or 1/|F_k| when averaging),
/// times the FIAT scale when given.
pub fn feature_weights(
    map: &[u32],
    sizes: &[u32],
    average: bool,
    scale: Option<&[f32]>,
) -> Vec<f32> {
    map.iter()
        .enumerate()
        .map(|(j, &c)| {
            let base = if average {
                1.0 / sizes[c as usize].max(1) as f32
            } else {
                1.0
            };
            base * scale.map_or(1.0, |s| s[j])
        })
        .collect()
}

/// Agglomerates every row of `x`: x̃_k = Σ_{j∈F_k} w_j x_j, zeros dropped, columns ascending.
pub fn agglomerate(
    x: &SparseMatrix,
    map: &[u32],
    weights: &[f32],
    n_clusters: usize,
) -> SparseMatrix {
    let mut acc = vec![0f32; n_clusters];
    let mut touched: Vec<u32> = Vec::new();
    let mut indptr = Vec::with_capacity(x.rows() + 1);
    let mut idx = Vec::with_capacity(x.nnz());
    let mut val = Vec::with_capacity(x.nnz());
    indptr.push(0usize);
    for row in x.outer_iterator() {
        for (j, &v) in row.iter() {
            let c = map[j];
            touched.push(c);
            acc[c as usize] += weights[j] * v;
        }
        touched.sort_unstable();
        touched.dedup();
        for &c in &touched {
            let v = acc[c as usize];
            if v != 0.0 && v.is_finite() {
                idx.push(c);
                val.push(v);
            }
            acc[c as usize] = 0.0;
        }
        touched.clear();
        indptr.push(idx.len());
    }
    SparseMatrix::new((x.rows(), n_clusters), indptr, idx, val)
}

/// ξ_l = normalize(Σ_{i ∋ l} x̃_i) over the rows of `imputed` (already C^F-imputed and
/// agglomerated), one sparse row per label.
pub fn prototypes(imputed: &SparseMatrix, labels: &SparseMatrix) -> Prototypes {
    let by_label = labels.to_other_storage();
    let k = imputed.cols();
    let mut acc = vec![0f32; k];
    let mut touched: Vec<u32> = Vec::new();
    let mut rows = Vec::with_capacity(labels.cols());
    for l in 0..labels.cols() {
        let (pts, _) = crate::data::row_slices(&by_label, l);
        for &i in pts {
            let (idx, val) = crate::data::row_slices(imputed, i as usize);
            for (&c, &v) in idx.iter().zip(val) {
                touched.push(c);
                acc[c as usize] += v;
            }
        }
        touched.sort_unstable();
        touched.dedup();
        let mut row = Vec::with_capacity(touched.len());
        for &c in &touched {
            if acc[c as usize] != 0.0 {
                row.push((c, acc[c as usize]));
            }
            acc[c as usize] = 0.0;
        }
        touched.clear();
        rows.push(row);
    }
    let m = csr_from_rows(&rows, k, true);
    Prototypes {
        start: m.indptr().raw_storage().iter().map(|&p| p as u32).collect(),
        idx: m.indices().to_vec(),
        val: m.data().to_vec(),
    }
}

/// REFRAG's prototypes for a model without DEFRAG: ξ_l = normalize(Σ_{i ∋ l} x_i) over the
/// training rows themselves (as the trainer sees them, normalized when the model normalizes),
/// each cut to its `entries` largest values (ties to the lower feature id; 0 keeps every entry).
/// A cut row is not normalized again, so ⟨x, ξ_l⟩ stays the full prototype's affinity less the
/// small entries left out.
pub fn input_prototypes(
    features: &SparseMatrix,
    labels: &SparseMatrix,
    entries: usize,
) -> Prototypes {
    largest_entries(prototypes(features, labels), entries)
}

/// Each row of `full` cut to its `entries` largest values by magnitude (ties to the lower
/// column; 0 keeps every entry), in column order and not normalized again.
pub fn largest_entries(full: Prototypes, entries: usize) -> Prototypes {
    if entries == 0 {
        return full;
    }
    let mut out = Prototypes {
        start: Vec::with_capacity(full.start.len()),
        idx: Vec::new(),
        val: Vec::new(),
    };
    out.start.push(0);
    let mut order: Vec<usize> = Vec::new();
    for w in full.start.windows(2) {
        let (a, b) = (w[0] as usize, w[1] as usize);
        order.clear();
        order.extend(a..b);
        if order.len() > entries {
            order.sort_by(|&i, &j| {
                full.val[j]
                    .abs()
                    .total_cmp(&full.val[i].abs())
                    .then(i.cmp(&j))
            });
            order.truncate(entries);
            order.sort_unstable();
        }
        for &i in &order {
            out.idx.push(full.idx[i]);
            out.val.push(full.val[i]);
        }
        out.start.push(out.idx.len() as u32);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn csr(rows: &[&[(u32, f32)]], width: usize) -> SparseMatrix {
        let rows: Vec<Vec<(u32, f32)>> = rows.iter().map(|r| r.to_vec()).collect();
        csr_from_rows(&rows, width, false)
    }

    #[test]
    fn agglomeration_sums_within_clusters() {
        let x = csr(&[&[(0, 1.0), (1, 2.0), (3, 4.0)], &[(2, 1.0)]], 4);
        let map = [0, 0, 1, 1];
        let w = feature_weights(&map, &[2, 2], false, None);
        let a = agglomerate(&x, &map, &w, 2);
        assert_eq!(
            crate::data::row_slices(&a, 0),
            (&[0u32, 1][..], &[3.0f32, 4.0][..])
        );
        let w = feature_weights(&map, &[2, 2], true, None);
        let a = agglomerate(&x, &map, &w, 2);
        assert_eq!(crate::data::row_slices(&a, 1), (&[1u32][..], &[0.5f32][..]));
    }

    #[test]
    fn fiat_scale_is_the_block_column_sum_of_cosine_c_f() {
        // Two clusters {0, 1} and {2}; C^F = Σ_k X_{F_k} X_{F_k}ᵀ computed densely.
        let x = csr(&[&[(0, 1.0), (1, 2.0), (2, 3.0)], &[(1, 1.0), (2, 1.0)]], 3);
        let map = [0u32, 0, 1];
        let dense: Vec<[f32; 3]> = vec![[1.0, 2.0, 3.0], [0.0, 1.0, 1.0]];
        let norm = |j: usize| dense.iter().map(|r| r[j] * r[j]).sum::<f32>().sqrt();
        let s = fiat_scale(&x, &map, 2);
        for j in 0..3 {
            let mut want = 0.0;
            for i in 0..3 {
                if map[i] == map[j] {
                    want += dense.iter().map(|r| r[i] * r[j]).sum::<f32>() / (norm(i) * norm(j));
                }
            }
            assert!((s[j] - want).abs() < 1e-5, "s[{j}] = {} want {want}", s[j]);
        }
    }

    #[test]
    fn fill_gives_rare_features_a_representation_over_all_points() {
        // Point 0 is the most voluminous and the only one sampled (ñ = 1 of 3). Feature 2 occurs
        // only in point 1, with label 1; feature 3 only in point 2, with the unpopular label 2;
        // feature 4 never occurs.
        let x = csr(
            &[&[(0, 1.0), (1, 1.0), (5, 1.0)], &[(2, 1.0)], &[(3, 1.0)]],
            6,
        );
        let y = csr(&[&[(0, 1.0), (1, 1.0)], &[(1, 1.0)], &[(2, 1.0)]], 3);
        let ds = Dataset {
            features: x,
            labels: y,
        };
        let nnz = |m: &SparseMatrix, j: usize| crate::data::row_slices(m, j).0.len();
        for kind in [DefragKind::X, DefragKind::Xy] {
            let mut params = DefragParams {
                kind,
                points_frac: 0.3,
                labels_frac: 0.4,
                fill: false,
                ..DefragParams::DEFAULT
            };
            let (sampled, empty) = representatives(&ds, &params);
            assert_eq!(empty, 3, "{kind:?}: features 2, 3 and 4");
            params.fill = true;
            let (filled, empty) = representatives(&ds, &params);
            assert_eq!(empty, 3, "{kind:?}: the count is of the sample alone");
            for j in [0, 1, 5] {
                assert_eq!(
                    crate::data::row_slices(&sampled, j),
                    crate::data::row_slices(&filled, j),
                    "{kind:?}: a sampled feature keeps its row"
                );
                assert_eq!(nnz(&filled, j), if kind == DefragKind::X { 1 } else { 2 });
            }
            for j in [2, 3] {
                assert_eq!(nnz(&sampled, j), 0, "{kind:?} feature {j}");
                assert_eq!(nnz(&filled, j), 1, "{kind:?} feature {j}");
            }
            assert_eq!(
                nnz(&filled, 4),
                0,
                "a feature absent from training stays empty"
            );
        }
        // With XY, feature 2 is filled over all points (its label 1 is among the L̃ = 2 most
        // popular), feature 3 over all labels (its label 2 is not).
        let params = DefragParams {
            kind: DefragKind::Xy,
            points_frac: 0.3,
            labels_frac: 0.4,
            ..DefragParams::DEFAULT
        };
        let (filled, _) = representatives(&ds, &params);
        assert_eq!(crate::data::row_slices(&filled, 2).0, &[0u32][..]);
        assert_eq!(crate::data::row_slices(&filled, 3).0, &[2u32][..]);
    }

    #[test]
    fn input_prototypes_keep_the_largest_entries_in_column_order() {
        let x = csr(&[&[(0, 1.0), (1, 2.0), (2, 3.0)], &[(0, 3.0), (3, 1.0)]], 4);
        let y = csr(&[&[(0, 1.0), (1, 1.0)], &[(0, 1.0)]], 2);
        let full = input_prototypes(&x, &y, 0);
        assert_eq!(full, prototypes(&x, &y));
        // Label 0 sums to (4, 2, 3, 1); its two largest are features 0 and 2.
        let cut = input_prototypes(&x, &y, 2);
        assert_eq!(cut.start, vec![0, 2, 4]);
        assert_eq!(cut.idx, vec![0, 2, 1, 2]);
        let n = (16.0f32 + 4.0 + 9.0 + 1.0).sqrt();
        assert!((cut.val[0] - 4.0 / n).abs() < 1e-6 && (cut.val[1] - 3.0 / n).abs() < 1e-6);
        assert_eq!(&cut.val[2..], &full.val[5..7]);
    }

    #[test]
    fn prototypes_are_unit_rows_per_label() {
        let x = csr(&[&[(0, 3.0)], &[(1, 4.0)], &[(0, 1.0), (1, 1.0)]], 2);
        let y = csr(&[&[(0, 1.0)], &[(0, 1.0)], &[(1, 1.0)]], 2);
        let p = prototypes(&x, &y);
        assert_eq!(p.start, vec![0, 2, 4]);
        assert_eq!(p.idx, vec![0, 1, 0, 1]);
        assert!((p.val[0] - 0.6).abs() < 1e-6 && (p.val[1] - 0.8).abs() < 1e-6);
    }
}
