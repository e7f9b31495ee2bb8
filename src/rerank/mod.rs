//! The candidate-then-rerank stage: the search proposes candidates, label-wise scorers rescore
//! them, and each candidate's probability becomes a weighted geometric mix of the two.
//!
//! Two rerankers share it. REFRAG ([`crate::defrag`]) scores a candidate by its prototype's
//! affinity with the query: agglomerated, over each DEFRAG member's clusters, or, on a model
//! without DEFRAG, the query itself against a prototype over the input features. The OVA
//! reranker (this module's [`train`]) scores it with a sparse linear classifier of its own,
//! trained at training time on the label's positives against the training points whose tree
//! search proposed the label without it being theirs (the tree's hard negatives, as XR-Linear's
//! matcher-aware negatives). Both store one sparse vector per label, label-major
//! ([`LabelRows`]), dotted with a dense query, and both combine by [`mix`]:
//! log p' = α·log b + (1 − α)·s, with b the search's probability and s the reranker's log-score.

pub mod train;

use crate::tree::view::Candidate;
use serde::{Deserialize, Serialize};
use std::ops::Deref;
use thiserror::Error;

/// The reranker trained for a model.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RerankModel {
    /// None (the default).
    #[default]
    Off,
    /// One sparse linear scorer per label, trained on the tree search's hard negatives.
    Ova,
}

/// The OVA reranker's settings.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RerankParams {
    /// Which reranker is trained and applied by default.
    pub model: RerankModel,
    /// How many candidates the search proposes per training point (their hard negatives).
    pub candidates: usize,
    /// How many candidates the search proposes per query for rescoring (bundles made before
    /// this setting read the default).
    pub query_candidates: usize,
    /// α, the weight of the search's log-probability against the scorer's.
    pub alpha: f32,
}

impl RerankParams {
    /// The defaults: off; when on, 30 candidates per training point, 10 per query and α = 0.65
    /// (see `docs/decisions/0022-ova-rerank-mix.md` and `0023-rerank-query-candidates.md`).
    pub const DEFAULT: RerankParams = RerankParams {
        model: RerankModel::Off,
        candidates: 30,
        query_candidates: 10,
        alpha: 0.65,
    };

    /// Whether these are the defaults (left out of a model's metadata then, so bundles without
    /// a reranker are unchanged).
    pub fn is_default(&self) -> bool {
        *self == Self::DEFAULT
    }

    /// Whether a reranker is trained.
    pub fn on(&self) -> bool {
        self.model != RerankModel::Off
    }

    /// Checks ranges, naming the key at fault.
    pub fn validate(&self) -> Result<(), (&'static str, String)> {
        if self.candidates == 0 {
            return Err(("rerank_candidates", "must be at least 1".into()));
        }
        if self.query_candidates == 0 {
            return Err(("rerank_query_candidates", "must be at least 1".into()));
        }
        if !(0.0..=1.0).contains(&self.alpha) {
            return Err((
                "rerank_alpha",
                format!("must be in [0, 1], got {}", self.alpha),
            ));
        }
        Ok(())
    }
}

impl Default for RerankParams {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// What is wrong with a set of label-major rows.
#[derive(Debug, Error, PartialEq)]
pub enum LabelRowsError {
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
    /// The offsets are not monotone or do not span the entries.
    #[error("row offsets are inconsistent at label {label}")]
    Offsets {
        /// The first label at fault.
        label: usize,
    },
    /// An entry's column is out of range or out of order.
    #[error("row of label {label}: index {index} is out of order or not below {n_cols}")]
    Index {
        /// The label.
        label: usize,
        /// The bad column.
        index: u32,
        /// The number of columns.
        n_cols: usize,
    },
    /// A value is NaN or infinite.
    #[error("row values hold a non-finite value")]
    NonFinite,
}

/// One sparse row per label: label l's entries are `idx/val[start[l]..start[l + 1]]`, columns
/// ascending. Memory-mapped sections at serving time, vectors when built.
#[derive(Clone, Debug, PartialEq)]
pub struct LabelRows<U, F> {
    /// Offsets, one per label plus one.
    pub start: U,
    /// Column ids.
    pub idx: U,
    /// Values.
    pub val: F,
}

impl<U, F> LabelRows<U, F>
where
    U: Deref<Target = [u32]>,
    F: Deref<Target = [f32]>,
{
    /// Checks, in O(1), the lengths that locating a row needs: `n_labels + 1` offsets, the last
    /// one the entry count, as many values as ids. A row's own offsets and columns are checked
    /// as they are read ([`LabelRows::dot`]), so a corrupt entry gives a wrong score, never a
    /// panic.
    pub fn check_lengths(&self, n_labels: usize) -> Result<(), LabelRowsError> {
        if self.start.len() != n_labels + 1 {
            return Err(LabelRowsError::Length {
                array: "row offsets",
                got: self.start.len(),
                want: n_labels + 1,
            });
        }
        if self.idx.len() != self.val.len() {
            return Err(LabelRowsError::Length {
                array: "row values",
                got: self.val.len(),
                want: self.idx.len(),
            });
        }
        if self.start.first() != Some(&0)
            || self.start.last().map(|&e| e as usize) != Some(self.idx.len())
        {
            return Err(LabelRowsError::Offsets { label: 0 });
        }
        Ok(())
    }

    /// Checks everything, in O(labels + entries): the lengths, monotone offsets, strictly
    /// ascending columns below `n_cols`, and finite values.
    pub fn check(&self, n_labels: usize, n_cols: usize) -> Result<(), LabelRowsError> {
        self.check_lengths(n_labels)?;
        for label in 0..n_labels {
            let (a, b) = (self.start[label] as usize, self.start[label + 1] as usize);
            if a > b || b > self.idx.len() {
                return Err(LabelRowsError::Offsets { label });
            }
            let mut prev: Option<u32> = None;
            for &c in &self.idx[a..b] {
                if c as usize >= n_cols || prev.is_some_and(|p| p >= c) {
                    return Err(LabelRowsError::Index {
                        label,
                        index: c,
                        n_cols,
                    });
                }
                prev = Some(c);
            }
        }
        if self.val.iter().any(|v| !v.is_finite()) {
            return Err(LabelRowsError::NonFinite);
        }
        Ok(())
    }

    /// The number of labels.
    pub fn n_labels(&self) -> usize {
        self.start.len().saturating_sub(1)
    }

    /// The number of stored entries.
    pub fn nnz(&self) -> usize {
        self.idx.len()
    }

    /// ⟨row_label, x⟩ for the query held densely in `dense`. Every index is bounds-checked: a
    /// label, offset or column out of range contributes nothing rather than panicking.
    #[inline]
    pub fn dot(&self, label: u32, dense: &[f32]) -> f32 {
        let l = label as usize;
        let (Some(&a), Some(&b)) = (self.start.get(l), self.start.get(l + 1)) else {
            return 0.0;
        };
        let (Some(idx), Some(val)) = (
            self.idx.get(a as usize..b as usize),
            self.val.get(a as usize..b as usize),
        ) else {
            return 0.0;
        };
        idx.iter()
            .zip(val)
            .map(|(&c, &v)| v * dense.get(c as usize).copied().unwrap_or(0.0))
            .sum()
    }
}

/// The OVA reranker's arrays: one sparse linear scorer per label over the input features, and
/// its bias.
#[derive(Clone, Debug, PartialEq)]
pub struct OvaScorers<U, F> {
    /// The weights, label-major.
    pub rows: LabelRows<U, F>,
    /// Per label, the bias.
    pub bias: F,
}

impl<U, F> OvaScorers<U, F>
where
    U: Deref<Target = [u32]>,
    F: Deref<Target = [f32]>,
{
    /// The O(1) checks of [`LabelRows::check_lengths`], and one bias per label.
    pub fn check_lengths(&self, n_labels: usize) -> Result<(), LabelRowsError> {
        self.rows.check_lengths(n_labels)?;
        if self.bias.len() != n_labels {
            return Err(LabelRowsError::Length {
                array: "biases",
                got: self.bias.len(),
                want: n_labels,
            });
        }
        Ok(())
    }

    /// Every check ([`LabelRows::check`]), and finite biases.
    pub fn check(&self, n_labels: usize, n_features: usize) -> Result<(), LabelRowsError> {
        self.check_lengths(n_labels)?;
        self.rows.check(n_labels, n_features)?;
        if self.bias.iter().any(|v| !v.is_finite()) {
            return Err(LabelRowsError::NonFinite);
        }
        Ok(())
    }

    /// The classifier score w_l·x + b_l of `label` for the query in `dense` (bounds-checked).
    #[inline]
    pub fn score(&self, label: u32, dense: &[f32]) -> f32 {
        self.rows.dot(label, dense) + self.bias.get(label as usize).copied().unwrap_or(0.0)
    }
}

/// The combination rule of the stage: each candidate's probability b becomes
/// exp(α·ln b + (1 − α)·s), with s its reranker log-score (`scores`, one per candidate, ≤ 0).
/// b is floored at the smallest positive `f32` so that a zero does not give −∞, and at α = 1
/// the reranker's score is left out rather than multiplied by 0 (a score of −∞ would give NaN).
pub fn mix(cands: &mut [Candidate], scores: &[f32], alpha: f32) {
    for (c, &s) in cands.iter_mut().zip(scores) {
        let log_b = c.score.max(f32::MIN_POSITIVE).ln();
        let rest = if alpha < 1.0 { (1.0 - alpha) * s } else { 0.0 };
        c.score = (alpha * log_b + rest).exp();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type Rows = LabelRows<Vec<u32>, Vec<f32>>;

    fn rows(start: Vec<u32>, idx: Vec<u32>, val: Vec<f32>) -> Rows {
        LabelRows { start, idx, val }
    }

    #[test]
    fn checks_find_every_kind_of_fault() {
        let ok = rows(vec![0, 1, 3], vec![2, 0, 1], vec![1.0, 2.0, 3.0]);
        assert_eq!(ok.check(2, 3), Ok(()));
        assert_eq!(
            rows(vec![0, 1], vec![0], vec![1.0]).check(2, 3),
            Err(LabelRowsError::Length {
                array: "row offsets",
                got: 2,
                want: 3
            })
        );
        assert_eq!(
            rows(vec![0, 2, 1], vec![0, 1], vec![1.0, 1.0]).check(2, 3),
            Err(LabelRowsError::Offsets { label: 0 })
        );
        assert_eq!(
            rows(vec![0, 2, 1], vec![0, 1, 2], vec![1.0, 1.0, 1.0]).check(2, 3),
            Err(LabelRowsError::Offsets { label: 0 })
        );
        assert_eq!(
            rows(vec![0, 2, 3], vec![1, 1, 0], vec![1.0; 3]).check(2, 3),
            Err(LabelRowsError::Index {
                label: 0,
                index: 1,
                n_cols: 3
            })
        );
        assert_eq!(
            rows(vec![0, 1, 2], vec![0, 3], vec![1.0; 2]).check(2, 3),
            Err(LabelRowsError::Index {
                label: 1,
                index: 3,
                n_cols: 3
            })
        );
        assert_eq!(
            rows(vec![0, 1, 2], vec![0, 1], vec![1.0, f32::INFINITY]).check(2, 3),
            Err(LabelRowsError::NonFinite)
        );
    }

    /// Rows that pass only the O(1) checks still score without panicking.
    #[test]
    fn dot_is_bounds_checked() {
        let ok = rows(vec![0, 1, 3], vec![2, 0, 1], vec![1.0, 2.0, 3.0]);
        let dense = [0.5, 0.25, 4.0];
        assert_eq!(ok.dot(0, &dense), 4.0);
        assert_eq!(ok.dot(1, &dense), 1.75);
        assert_eq!(ok.dot(2, &dense), 0.0);
        let bad = rows(vec![0, 9, 3], vec![2, 70, 1], vec![1.0, 2.0, 3.0]);
        assert_eq!(bad.check_lengths(2), Ok(()));
        assert_eq!(bad.dot(0, &dense), 0.0);
        assert_eq!(bad.dot(1, &dense), 0.0);
        let bad = rows(vec![0, 1, 3], vec![2, 70, 1], vec![1.0, 2.0, 3.0]);
        assert_eq!(bad.dot(1, &dense), 0.75);
    }

    #[test]
    fn mix_is_a_weighted_geometric_mean() {
        let cand = |label, score| Candidate {
            label,
            score,
            depth: 1,
        };
        let mut c = vec![cand(0, 0.5), cand(1, 0.0)];
        mix(&mut c, &[-1.0, 0.0], 0.5);
        assert!((c[0].score - (0.5f32.ln() * 0.5 - 0.5).exp()).abs() < 1e-7);
        assert!(c[1].score > 0.0 && c[1].score < 1e-18);
        let mut c = vec![cand(0, 0.25)];
        mix(&mut c, &[-3.0], 1.0);
        assert_eq!(c[0].score, 0.25);
    }
}
