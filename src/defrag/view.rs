//! Request side of DEFRAG: a validated view over one ensemble member's sections that turns a
//! prepared query into its agglomerated (optionally FIAT-imputed) form and scores REFRAG
//! affinities. Everything it indexes with is checked in [`DefragView::validate`]; after that it
//! allocates nothing and cannot index out of bounds.

use crate::rerank::{LabelRows, LabelRowsError};
use std::ops::Deref;
use thiserror::Error;

/// What is wrong with a member's DEFRAG sections.
#[derive(Debug, Error, PartialEq)]
pub enum DefragViewError {
    /// An array has the wrong length.
    #[error("{array} has {got} entries, expected {want}")]
    Length {
        /// The array.
        array: &'static str,
        /// Its length.
        got: usize,
        /// The length it must have.
        want: usize,
    },
    /// A feature maps to a cluster that does not exist.
    #[error("feature {feature} maps to cluster {cluster}, but there are {n_clusters} clusters")]
    ClusterOutOfRange {
        /// The feature.
        feature: usize,
        /// Its cluster id.
        cluster: u32,
        /// The number of clusters.
        n_clusters: usize,
    },
    /// The cluster sizes disagree with the map.
    #[error(
        "cluster {cluster} is recorded with {recorded} features but the map gives it {counted}"
    )]
    SizeMismatch {
        /// The cluster.
        cluster: usize,
        /// The stored size.
        recorded: u32,
        /// The size counted from the map.
        counted: u32,
    },
    /// A prototype's offsets are not monotone or do not end at the entry count.
    #[error("prototype offsets are inconsistent at label {label}")]
    ProtoOffsets {
        /// The first label at fault.
        label: usize,
    },
    /// A prototype entry names a cluster out of range or out of order.
    #[error("prototype of label {label}: index {index} is out of order or not below {n_clusters}")]
    ProtoIndex {
        /// The label.
        label: usize,
        /// The bad index.
        index: u32,
        /// The number of clusters.
        n_clusters: usize,
    },
    /// A stored value is NaN or infinite.
    #[error("{array} holds a non-finite value")]
    NonFinite {
        /// The array.
        array: &'static str,
    },
    /// A cluster's FIAT-weighted features could sum beyond `f32`'s range for a query of unit
    /// norm.
    #[error("the FIAT weights of cluster {cluster} sum beyond f32's range")]
    ScaleTooLarge {
        /// The cluster.
        cluster: usize,
    },
}

/// A query in one member's agglomerated space, and the accumulator that builds it (reusable).
#[derive(Clone, Debug, Default)]
pub struct Agglomerated {
    /// Per cluster, a running sum; all zero between calls.
    acc: Vec<f32>,
    /// The query's cluster ids, ascending.
    pub idx: Vec<u32>,
    /// Their values.
    pub val: Vec<f32>,
}

impl Agglomerated {
    /// Slots in the per-cluster accumulator: the most clusters of a member it has served.
    pub fn acc_len(&self) -> usize {
        self.acc.len()
    }
}

/// One member's DEFRAG arrays: memory-mapped sections at serving time, vectors in tests.
#[derive(Debug)]
pub struct DefragView<U, F> {
    /// Per input feature, its cluster.
    pub map: U,
    /// Per cluster, its size.
    pub sizes: U,
    /// Per input feature, the FIAT scale s_j.
    pub scale: Option<F>,
    /// REFRAG prototypes, one sparse row over the clusters per label.
    pub protos: Option<LabelRows<U, F>>,
    /// Per feature, the weight it carries without imputation (1, or 1/|F_k| when averaging).
    plain: Vec<f32>,
    /// Per feature, the weight with FIAT imputation (the plain weight times s_j).
    imputed: Vec<f32>,
}

impl<U, F> DefragView<U, F>
where
    U: Deref<Target = [u32]>,
    F: Deref<Target = [f32]>,
{
    /// Checks every index and value against `n_features` input features and `n_labels` labels,
    /// and precomputes the per-feature weights.
    pub fn validate(
        map: U,
        sizes: U,
        scale: Option<F>,
        protos: Option<LabelRows<U, F>>,
        n_features: usize,
        n_labels: usize,
        average: bool,
    ) -> Result<Self, DefragViewError> {
        let k = sizes.len();
        if map.len() != n_features {
            return Err(DefragViewError::Length {
                array: "map",
                got: map.len(),
                want: n_features,
            });
        }
        let mut counted = vec![0u32; k];
        for (feature, &cluster) in map.iter().enumerate() {
            let Some(c) = counted.get_mut(cluster as usize) else {
                return Err(DefragViewError::ClusterOutOfRange {
                    feature,
                    cluster,
                    n_clusters: k,
                });
            };
            *c += 1;
        }
        if let Some((cluster, (&recorded, &counted))) = sizes
            .iter()
            .zip(&counted)
            .enumerate()
            .find(|(_, (r, c))| r != c)
        {
            return Err(DefragViewError::SizeMismatch {
                cluster,
                recorded,
                counted,
            });
        }
        if let Some(s) = &scale {
            if s.len() != n_features {
                return Err(DefragViewError::Length {
                    array: "scale",
                    got: s.len(),
                    want: n_features,
                });
            }
            if s.iter().any(|v| !v.is_finite()) {
                return Err(DefragViewError::NonFinite { array: "scale" });
            }
        }
        if let Some(rows) = &protos {
            rows.check(n_labels, k).map_err(prototype_error)?;
        }
        let plain: Vec<f32> = map
            .iter()
            .map(|&c| {
                if average {
                    1.0 / sizes[c as usize].max(1) as f32
                } else {
                    1.0
                }
            })
            .collect();
        let imputed: Vec<f32> = match &scale {
            Some(s) => plain.iter().zip(s.iter()).map(|(p, s)| p * s).collect(),
            None => Vec::new(),
        };
        // A normalized query has every |x_j| ≤ 1, so a cluster's sum is at most the sum of its
        // features' |weights|: kept within `f32`, no sum of such a query overflows. Plain
        // weights are at most 1 each; only FIAT scales can push a sum out of range.
        if !imputed.is_empty() {
            let mut bound = vec![0f64; k];
            for (&c, &w) in map.iter().zip(&imputed) {
                bound[c as usize] += f64::from(w.abs());
            }
            if let Some(cluster) = bound.iter().position(|&b| b > f64::from(f32::MAX)) {
                return Err(DefragViewError::ScaleTooLarge { cluster });
            }
        }
        Ok(DefragView {
            map,
            sizes,
            scale,
            protos,
            plain,
            imputed,
        })
    }

    /// The number of clusters K (the tree's feature count).
    pub fn n_clusters(&self) -> usize {
        self.sizes.len()
    }

    /// Whether FIAT scales are stored.
    pub fn has_fiat(&self) -> bool {
        self.scale.is_some()
    }

    /// Whether REFRAG prototypes are stored.
    pub fn has_prototypes(&self) -> bool {
        self.protos.is_some()
    }

    /// Agglomerates a prepared query (ids valid and unique) in one pass over its non-zeros into
    /// `out`: x̃_k = Σ_{j∈F_k} w_j x_j, with w_j the plain or (with `impute`, when stored) the
    /// FIAT weight, then L2-normalizes when `normalize`. Allocates only while `out` grows.
    ///
    /// A sum beyond `f32`'s range is an error naming the query's first feature in that cluster.
    /// Only a query that was not normalized can have one (see [`DefragView::validate`]): a
    /// model that does not normalize queries agglomerates the values as they came.
    pub fn apply(
        &self,
        idx: &[u32],
        val: &[f32],
        impute: bool,
        normalize: bool,
        out: &mut Agglomerated,
    ) -> Result<(), u32> {
        if out.acc.len() < self.n_clusters() {
            out.acc.resize(self.n_clusters(), 0.0);
        }
        let Agglomerated {
            acc,
            idx: out_idx,
            val: out_val,
        } = out;
        let weights = if impute && !self.imputed.is_empty() {
            &self.imputed
        } else {
            &self.plain
        };
        out_idx.clear();
        out_val.clear();
        for (&j, &v) in idx.iter().zip(val) {
            let c = self.map[j as usize];
            out_idx.push(c);
            acc[c as usize] += weights[j as usize] * v;
        }
        out_idx.sort_unstable();
        out_idx.dedup();
        let mut w = 0;
        let mut overflow = None;
        for r in 0..out_idx.len() {
            let c = out_idx[r];
            let v = acc[c as usize];
            // Every touched slot is zeroed, even after an overflow: the accumulator is clean
            // for the next query.
            acc[c as usize] = 0.0;
            if !v.is_finite() {
                overflow = overflow.or(Some(c));
            } else if v != 0.0 {
                out_idx[w] = c;
                out_val.push(v);
                w += 1;
            }
        }
        out_idx.truncate(w);
        if let Some(c) = overflow {
            let first = idx.iter().find(|&&j| self.map[j as usize] == c);
            return Err(first.copied().unwrap_or_default());
        }
        if normalize {
            crate::data::l2_normalize_query(out_val);
        }
        Ok(())
    }

    /// ⟨x, ξ_label⟩ for the agglomerated query held densely in `dense`, or 0 without prototypes.
    pub fn affinity(&self, label: u32, dense: &[f32]) -> f32 {
        self.protos.as_ref().map_or(0.0, |p| p.dot(label, dense))
    }
}

/// A prototype check's failure as this view's error.
fn prototype_error(e: LabelRowsError) -> DefragViewError {
    match e {
        LabelRowsError::Length { array, got, want } => DefragViewError::Length {
            array: if array == "row offsets" {
                "prototype offsets"
            } else {
                "prototype values"
            },
            got,
            want,
        },
        LabelRowsError::Offsets { label } => DefragViewError::ProtoOffsets { label },
        LabelRowsError::Index {
            label,
            index,
            n_cols,
        } => DefragViewError::ProtoIndex {
            label,
            index,
            n_clusters: n_cols,
        },
        LabelRowsError::NonFinite => DefragViewError::NonFinite {
            array: "prototype values",
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type V = DefragView<Vec<u32>, Vec<f32>>;

    fn view(protos: Option<(Vec<u32>, Vec<u32>, Vec<f32>)>) -> Result<V, DefragViewError> {
        V::validate(
            vec![0, 1, 0, 1],
            vec![2, 2],
            Some(vec![1.0, 2.0, 3.0, 4.0]),
            protos.map(|(start, idx, val)| LabelRows { start, idx, val }),
            4,
            2,
            false,
        )
    }

    #[test]
    fn refuses_out_of_range_clusters_and_wrong_sizes() {
        let e = V::validate(vec![0, 2], vec![1, 1], None, None, 2, 1, false).unwrap_err();
        assert!(
            matches!(e, DefragViewError::ClusterOutOfRange { cluster: 2, .. }),
            "{e}"
        );
        let e = V::validate(vec![0, 0], vec![1, 1], None, None, 2, 1, false).unwrap_err();
        assert!(matches!(e, DefragViewError::SizeMismatch { .. }), "{e}");
        let e = V::validate(vec![0], vec![1], None, None, 2, 1, false).unwrap_err();
        assert!(
            matches!(e, DefragViewError::Length { array: "map", .. }),
            "{e}"
        );
    }

    #[test]
    fn refuses_bad_prototype_indices() {
        let e = view(Some((vec![0, 1, 2], vec![0, 2], vec![1.0, 1.0]))).unwrap_err();
        assert!(
            matches!(
                e,
                DefragViewError::ProtoIndex {
                    label: 1,
                    index: 2,
                    ..
                }
            ),
            "{e}"
        );
        let e = view(Some((vec![0, 2, 2], vec![1, 0], vec![1.0, 1.0]))).unwrap_err();
        assert!(
            matches!(e, DefragViewError::ProtoIndex { label: 0, .. }),
            "{e}"
        );
        let e = view(Some((vec![0, 3, 2], vec![0, 1], vec![1.0, 1.0]))).unwrap_err();
        assert!(matches!(e, DefragViewError::ProtoOffsets { .. }), "{e}");
        let e = view(Some((vec![0, 1, 2], vec![0, 1], vec![1.0, f32::NAN]))).unwrap_err();
        assert!(matches!(e, DefragViewError::NonFinite { .. }), "{e}");
        assert!(view(Some((vec![0, 1, 2], vec![0, 1], vec![1.0, 1.0]))).is_ok());
    }

    #[test]
    fn apply_sums_scales_and_normalizes() {
        let v = view(Some((vec![0, 1, 2], vec![0, 1], vec![1.0, 1.0]))).unwrap();
        let mut a = Agglomerated::default();
        v.apply(&[0, 1, 2], &[1.0, 1.0, 1.0], false, false, &mut a)
            .unwrap();
        assert_eq!((a.idx.clone(), a.val.clone()), (vec![0, 1], vec![2.0, 1.0]));
        v.apply(&[0, 1, 2], &[1.0, 1.0, 1.0], true, false, &mut a)
            .unwrap();
        assert_eq!((a.idx.clone(), a.val.clone()), (vec![0, 1], vec![4.0, 2.0]));
        v.apply(&[1, 3], &[3.0, 0.0], false, true, &mut a).unwrap();
        assert_eq!((a.idx.clone(), a.val.clone()), (vec![1], vec![1.0]));
        assert!(a.acc.iter().all(|&x| x == 0.0));
        assert_eq!(v.affinity(1, &[0.5, 0.25]), 0.25);
    }

    /// A query that was not normalized can sum a cluster beyond `f32`: the first of its
    /// features there is named, and the accumulator is left clean. Squares beyond `f32` are
    /// normalized in `f64`.
    #[test]
    fn apply_reports_a_cluster_that_overflows_and_normalizes_huge_sums() {
        let v = view(None).unwrap();
        let mut a = Agglomerated::default();
        let big = f32::MAX / 2.0 * 1.5;
        // Features 1 and 3 are cluster 1; feature 0 is cluster 0.
        let e = v.apply(&[0, 1, 3], &[1.0, big, big], false, false, &mut a);
        assert_eq!(e, Err(1));
        assert!(a.acc.iter().all(|&x| x == 0.0));
        // Feature 3's FIAT weight (4) takes one value over by itself.
        let e = v.apply(&[0, 3], &[1.0, big], true, false, &mut a);
        assert_eq!(e, Err(3));
        assert!(a.acc.iter().all(|&x| x == 0.0));
        v.apply(&[0, 1], &[3e30, 4e30], false, true, &mut a)
            .unwrap();
        assert_eq!(a.idx, vec![0, 1]);
        assert!(
            (a.val[0] - 0.6).abs() < 1e-6 && (a.val[1] - 0.8).abs() < 1e-6,
            "{:?}",
            a.val
        );
    }

    #[test]
    fn refuses_fiat_weights_a_cluster_cannot_sum() {
        let e = V::validate(
            vec![0, 1, 0, 1],
            vec![2, 2],
            Some(vec![f32::MAX, 2.0, f32::MAX, 4.0]),
            None,
            4,
            2,
            false,
        )
        .unwrap_err();
        assert_eq!(e, DefragViewError::ScaleTooLarge { cluster: 0 });
        // One feature at the largest scale is still in range.
        assert!(
            V::validate(
                vec![0, 1, 0, 1],
                vec![2, 2],
                Some(vec![1.0, 2.0, f32::MAX, 0.0]),
                None,
                4,
                2,
                false,
            )
            .is_ok()
        );
    }
}
