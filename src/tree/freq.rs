//! Label frequencies for the λ-weighted tree: the marginal f and the depth-oriented f̃.
//!
//! The λ split (Baharav et al. 2021, eq. 4) weighs labels by how often they are needed. The
//! marginal frequency f_ℓ is the number of training points carrying ℓ. For λ > 1 the split also
//! uses f̃ (App. B), which counts a point only for the label that lets a search stop on it: two
//! frequent labels that always co-occur need not both sit near the root.
//!
//! - [`FreqKind::Marginal`] (Alg. 2, the default): rank labels by f; each point gives its unit of
//!   frequency to the highest-ranked label it carries.
//! - [`FreqKind::Greedy`] (Alg. 1): repeatedly take the label carried by most of the remaining
//!   points, give it that count, and remove those points.
//!
//! Contexts are uniform (p = 1 per point). Ties go to the smaller label id, so both are
//! deterministic.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use serde::{Deserialize, Serialize};

use crate::data::{SparseMatrix, row_slices};

/// How f̃ is built from the training labels.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FreqKind {
    /// Alg. 2: each point counts for its most frequent label.
    #[default]
    Marginal,
    /// Alg. 1: greedy cover of the points by the most frequent remaining label.
    Greedy,
}

/// Both frequency vectors of one data set, one entry per label.
#[derive(Clone, Debug, PartialEq)]
pub struct LabelFrequencies {
    /// f: training points per label.
    pub f: Vec<f32>,
    /// f̃, by the chosen construction.
    pub f_tilde: Vec<f32>,
}

/// f and f̃ of the label matrix `labels` (points × labels, CSR).
pub fn label_frequencies(labels: &SparseMatrix, kind: FreqKind) -> LabelFrequencies {
    let labels = if labels.is_csr() {
        std::borrow::Cow::Borrowed(labels)
    } else {
        std::borrow::Cow::Owned(labels.to_csr())
    };
    let counts = counts(&labels);
    let f_tilde = match kind {
        FreqKind::Marginal => marginal_tilde(&labels, &counts),
        FreqKind::Greedy => greedy_tilde(&labels, &counts),
    };
    LabelFrequencies {
        f: counts.iter().map(|&c| c as f32).collect(),
        f_tilde: f_tilde.iter().map(|&c| c as f32).collect(),
    }
}

/// Points per label (duplicate entries in a row count once).
fn counts(labels: &SparseMatrix) -> Vec<u64> {
    let mut counts = vec![0u64; labels.cols()];
    for i in 0..labels.rows() {
        let row = row_slices(labels, i).0;
        for (j, &l) in row.iter().enumerate() {
            if j == 0 || row[j - 1] != l {
                counts[l as usize] += 1;
            }
        }
    }
    counts
}

/// Alg. 2: each point adds 1 to the label of largest f among its labels (ties: smaller id).
fn marginal_tilde(labels: &SparseMatrix, counts: &[u64]) -> Vec<u64> {
    let mut tilde = vec![0u64; labels.cols()];
    for i in 0..labels.rows() {
        let best = row_slices(labels, i)
            .0
            .iter()
            .copied()
            .max_by_key(|&l| (counts[l as usize], Reverse(l)));
        if let Some(l) = best {
            tilde[l as usize] += 1;
        }
    }
    tilde
}

/// Alg. 1: while some remaining point has a label, take the label carried by most remaining points
/// (ties: smaller id), set its f̃ to that number and remove those points. A lazy max-heap of
/// (count, label) makes it O(nnz log L): a popped entry whose count is stale is pushed back with
/// its current count.
fn greedy_tilde(labels: &SparseMatrix, counts: &[u64]) -> Vec<u64> {
    let by_label = labels.to_csc();
    let mut current = counts.to_vec();
    let mut removed = vec![false; labels.rows()];
    let mut tilde = vec![0u64; labels.cols()];
    let mut heap: BinaryHeap<(u64, Reverse<u32>)> = current
        .iter()
        .enumerate()
        .filter(|&(_, &c)| c > 0)
        .map(|(l, &c)| (c, Reverse(l as u32)))
        .collect();
    while let Some((c, Reverse(l))) = heap.pop() {
        let now = current[l as usize];
        if c != now {
            if now > 0 {
                heap.push((now, Reverse(l)));
            }
            continue;
        }
        tilde[l as usize] = c;
        for &point in row_slices(&by_label, l as usize).0 {
            let point = point as usize;
            if std::mem::replace(&mut removed[point], true) {
                continue;
            }
            let row = row_slices(labels, point).0;
            for (j, &other) in row.iter().enumerate() {
                if j == 0 || row[j - 1] != other {
                    current[other as usize] -= 1;
                }
            }
        }
        debug_assert_eq!(current[l as usize], 0);
    }
    tilde
}

#[cfg(test)]
mod tests {
    use super::*;
    use sprs::TriMatI;

    /// A label matrix from per-point label lists.
    fn labels(n_labels: usize, rows: &[&[usize]]) -> SparseMatrix {
        let mut tri = TriMatI::<f32, u32>::new((rows.len(), n_labels));
        for (i, row) in rows.iter().enumerate() {
            for &l in *row {
                tri.add_triplet(i, l, 1.0);
            }
        }
        tri.to_csr()
    }

    #[test]
    fn marginal_gives_each_point_to_its_most_frequent_label() {
        // Counts: 0 → 3, 1 → 3, 2 → 1, 3 → 1. Labels 0 and 1 always co-occur; 0 wins the tie.
        let y = labels(4, &[&[0, 1], &[0, 1, 2], &[0, 1], &[3], &[]]);
        let fr = label_frequencies(&y, FreqKind::Marginal);
        assert_eq!(fr.f, vec![3.0, 3.0, 1.0, 1.0]);
        assert_eq!(fr.f_tilde, vec![3.0, 0.0, 0.0, 1.0]);
    }

    #[test]
    fn greedy_covers_points_by_the_most_frequent_remaining_label() {
        // Label 0 covers points 0-2 (count 3); then label 2 has 2 remaining points (3, 4) while
        // label 1 has only point 3 left.
        let y = labels(3, &[&[0], &[0, 1], &[0], &[1, 2], &[2]]);
        let fr = label_frequencies(&y, FreqKind::Greedy);
        assert_eq!(fr.f, vec![3.0, 2.0, 2.0]);
        assert_eq!(fr.f_tilde, vec![3.0, 0.0, 2.0]);
        // Marginal differs: point 3 goes to the label of larger f (1 and 2 tie at 2: 1 wins).
        let fr = label_frequencies(&y, FreqKind::Marginal);
        assert_eq!(fr.f_tilde, vec![3.0, 1.0, 1.0]);
    }

    #[test]
    fn every_labelled_point_is_counted_once() {
        let y = labels(
            5,
            &[&[0, 4], &[1], &[2, 3], &[4], &[0, 1, 2, 3, 4], &[], &[3]],
        );
        for kind in [FreqKind::Marginal, FreqKind::Greedy] {
            let fr = label_frequencies(&y, kind);
            assert_eq!(fr.f_tilde.iter().sum::<f32>(), 6.0, "{kind:?}");
            assert!(fr.f_tilde.iter().zip(&fr.f).all(|(t, f)| t <= f));
        }
    }
}
