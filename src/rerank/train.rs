//! Training the OVA reranker on the search's own hard negatives.
//!
//! The trained model (trees, DEFRAG, BP: whatever it is) is opened in memory and its search run
//! over every training point with k = `candidates` (by the trainer, [`crate::train`], which
//! composes the stages). Then each label l gets one
//! sparse linear classifier ([`train_scorers`]) over the input features, trained by the PPDSparse
//! solver (with its pruning) on the points that have l (positives) and the points whose search
//! proposed l without having it (negatives). Labels are independent problems, solved in parallel
//! with rayon; each label's solver seed is derived from the model's seed and the label, so the
//! result does not depend on the schedule.

use super::{LabelRows, OvaScorers};
use crate::data::Dataset;
use crate::linear::{SolverError, SolverParams, train_columns_of_rows};
use crate::seed::derive_seed;
use crate::tree::train::{local_positions, union_sorted};
use rayon::prelude::*;
use thiserror::Error;

/// The reranker's arrays as built, before they are written.
pub type OvaArrays = OvaScorers<Vec<u32>, Vec<f32>>;

/// Why the reranker could not be trained.
#[derive(Debug, Error)]
pub enum RerankTrainError {
    /// The solver refused a label's problem.
    #[error("label {label}: {source}")]
    Solver {
        /// The label.
        label: usize,
        /// Why.
        source: SolverError,
    },
    /// The scorers hold more weights than `u32` offsets address.
    #[error("the reranker's scorers hold more than u32::MAX weights")]
    TooLarge,
}

/// The points of each label, ascending: the transpose of `rows` (each a sorted list of labels
/// below `n_labels`).
fn points_per_label<'a>(rows: impl Iterator<Item = &'a [u32]>, n_labels: usize) -> Vec<Vec<u32>> {
    let mut out = vec![Vec::new(); n_labels];
    for (i, labels) in rows.enumerate() {
        for &l in labels {
            if let Some(points) = out.get_mut(l as usize) {
                points.push(i as u32);
            }
        }
    }
    out
}

/// The union of two ascending lists, and the positions in it of the first list's elements.
fn union_with_positions(pos: &[u32], other: &[u32]) -> (Vec<u32>, Vec<u32>) {
    let rows = union_sorted(pos, other.iter().copied());
    let at = local_positions(&rows, pos);
    (rows, at)
}

/// Trains one scorer per label of `ds` on its positives against the points whose candidates
/// (`cands`, per point) hold it but which do not have it. A label with neither positives nor
/// such points gets no weights and bias 0. Calls `on_label_done` after each label.
pub fn train_scorers(
    ds: &Dataset,
    cands: &[Vec<u32>],
    solver: &SolverParams,
    on_label_done: &(dyn Fn() + Sync),
) -> Result<OvaArrays, RerankTrainError> {
    let n_labels = ds.n_labels();
    let positives = points_per_label((0..ds.n_points()).map(|i| ds.label_row(i)), n_labels);
    let proposers = points_per_label(cands.iter().map(Vec::as_slice), n_labels);
    let columns: Vec<(Vec<u32>, Vec<f32>, f32)> = (0..n_labels)
        .into_par_iter()
        .map(|l| {
            let (rows, pos) = union_with_positions(&positives[l], &proposers[l]);
            let col = if rows.is_empty() {
                (Vec::new(), Vec::new(), 0.0)
            } else {
                let params = SolverParams {
                    seed: derive_seed(solver.seed, l as u64),
                    ..*solver
                };
                let mut cols =
                    train_columns_of_rows(&ds.features, &rows, &[pos], &params, |j| j as u64, 0)
                        .map_err(|source| RerankTrainError::Solver { label: l, source })?;
                let c = cols.pop().unwrap_or_default();
                (c.indices, c.values, c.bias)
            };
            on_label_done();
            Ok(col)
        })
        .collect::<Result<_, RerankTrainError>>()?;
    let mut start = Vec::with_capacity(n_labels + 1);
    start.push(0u32);
    let nnz: usize = columns.iter().map(|c| c.0.len()).sum();
    let (mut idx, mut val) = (Vec::with_capacity(nnz), Vec::with_capacity(nnz));
    let mut bias = Vec::with_capacity(n_labels);
    for (i, v, b) in columns {
        idx.extend_from_slice(&i);
        val.extend_from_slice(&v);
        bias.push(b);
        start.push(u32::try_from(idx.len()).map_err(|_| RerankTrainError::TooLarge)?);
    }
    Ok(OvaScorers {
        rows: LabelRows { start, idx, val },
        bias,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn union_marks_the_positives() {
        assert_eq!(
            union_with_positions(&[1, 4, 9], &[0, 4, 5, 10]),
            (vec![0, 1, 4, 5, 9, 10], vec![1, 2, 4])
        );
        assert_eq!(union_with_positions(&[], &[3]), (vec![3], vec![]));
        assert_eq!(union_with_positions(&[2], &[]), (vec![2], vec![0]));
    }

    #[test]
    fn transpose_lists_points_in_order() {
        let rows: [&[u32]; 3] = [&[0, 2], &[2], &[1, 2]];
        assert_eq!(
            points_per_label(rows.into_iter(), 3),
            vec![vec![0], vec![2], vec![0, 1, 2]]
        );
    }
}
