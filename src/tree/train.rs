//! Training the node classifiers of one label tree, Parabel-style.
//!
//! An internal node gets one classifier per child and a leaf one per label. Each is trained over the
//! points that reach the node (those with a label in its subtree; every point reaches the root):
//! the child's or label's points are the positives, the others the negatives. Nodes are independent
//! problems, so they run in parallel with rayon, and each node's columns run in parallel inside the
//! solver.

use super::chunk::{ChunkError, ChunksBuilder};
use super::layout::TreeLayout;
use super::view::TreeArrays;
use crate::data::{Dataset, SparseMatrix, row_slices};
use crate::linear::{LinearColumn, SolverError, SolverParams, train_columns};
use rayon::prelude::*;
use thiserror::Error;

/// Why training a tree failed.
#[derive(Debug, Error)]
pub enum TreeTrainError {
    /// The solver refused a node's problem.
    #[error("training node {node}: {source}")]
    Solver {
        /// The node.
        node: usize,
        /// The solver's error.
        source: SolverError,
    },
    /// The trained weights do not fit the stored layout.
    #[error(transparent)]
    Chunks(#[from] ChunkError),
    /// A count overflowed `u32`.
    #[error("the tree is too large for u32 offsets")]
    TooLarge,
}

/// The rows `rows` of a CSR matrix, as a new CSR matrix with the same columns.
pub fn select_rows(x: &SparseMatrix, rows: &[u32]) -> SparseMatrix {
    let mut indptr = Vec::with_capacity(rows.len() + 1);
    indptr.push(0usize);
    let nnz: usize = rows
        .iter()
        .map(|&r| row_slices(x, r as usize).0.len())
        .sum();
    let mut indices = Vec::with_capacity(nnz);
    let mut data = Vec::with_capacity(nnz);
    for &r in rows {
        let (idx, val) = row_slices(x, r as usize);
        indices.extend_from_slice(idx);
        data.extend_from_slice(val);
        indptr.push(indices.len());
    }
    SparseMatrix::new((rows.len(), x.cols()), indptr, indices, data)
}

/// The rows `rows` of a CSR matrix over only the columns they use, renumbered `0..k` in increasing
/// order, with the map from new column ids to old ones (sorted, so that it keeps sorted rows
/// sorted). A node's problem then has a weight vector of its own features, not of all of them:
/// the solver's gathers and scatters hit a small, cache-resident array.
pub fn select_rows_compact(x: &SparseMatrix, rows: &[u32]) -> (SparseMatrix, Vec<u32>) {
    let selected = select_rows(x, rows);
    // new_id[j] = 1 + the new id of column j, or 0 while j is unseen.
    let mut new_id = vec![0u32; x.cols()];
    let mut used = Vec::new();
    for &j in selected.indices() {
        if new_id[j as usize] == 0 {
            new_id[j as usize] = 1;
            used.push(j);
        }
    }
    used.sort_unstable();
    for (k, &j) in used.iter().enumerate() {
        // At most x.cols() ≤ u32::MAX + 1 columns, so k + 1 fits.
        new_id[j as usize] = k as u32 + 1;
    }
    let (indptr, mut indices, data) = selected.into_raw_storage();
    for j in &mut indices {
        *j = new_id[*j as usize] - 1;
    }
    let compact = SparseMatrix::new((rows.len(), used.len()), indptr, indices, data);
    (compact, used)
}

/// The positions in `all` (sorted) of the elements of `subset` (sorted, a subset of `all`).
fn local_positions(all: &[u32], subset: &[u32]) -> Vec<u32> {
    let mut out = Vec::with_capacity(subset.len());
    let mut j = 0;
    for &s in subset {
        while j < all.len() && all[j] < s {
            j += 1;
        }
        if j < all.len() && all[j] == s {
            // Positions fit in u32 because `all` holds u32 point ids of one data set.
            out.push(j as u32);
        }
    }
    out
}

/// The positives of each output of `node`, as row positions within the node's points.
fn node_positives(
    layout: &TreeLayout,
    ds: &Dataset,
    node: usize,
    points: &[Vec<u32>],
) -> Vec<Vec<u32>> {
    let rows = &points[node];
    if layout.is_leaf(node) {
        let labels = layout.labels_of(node);
        let mut pos = vec![Vec::new(); labels.len()];
        for (local, &r) in rows.iter().enumerate() {
            for &l in ds.label_row(r as usize) {
                if let Ok(k) = labels.binary_search_by_key(&l, |id| id.0) {
                    pos[k].push(local as u32);
                }
            }
        }
        pos
    } else {
        layout
            .children(node)
            .map(|c| local_positions(rows, &points[c]))
            .collect()
    }
}

/// Trains every node classifier of `layout` on `ds` and lays the tree out for storage.
pub fn train_tree(
    ds: &Dataset,
    layout: &TreeLayout,
    solver: &SolverParams,
    on_node_done: &(dyn Fn() + Sync),
) -> Result<TreeArrays<Vec<u32>, Vec<f32>>, TreeTrainError> {
    let points = layout.points_per_node(ds);
    let n = layout.n_nodes();
    let columns: Vec<Vec<LinearColumn>> = (0..n)
        .into_par_iter()
        .map(|node| {
            let (x, features) = select_rows_compact(&ds.features, &points[node]);
            let positives = node_positives(layout, ds, node, &points);
            let cols = train_columns(&x, &positives, solver)
                .map(|mut cols| {
                    for col in &mut cols {
                        for j in &mut col.indices {
                            *j = features[*j as usize];
                        }
                    }
                    cols
                })
                .map_err(|source| TreeTrainError::Solver { node, source });
            on_node_done();
            cols
        })
        .collect::<Result<_, _>>()?;

    let mut node_info = Vec::with_capacity(n);
    let mut out_start = vec![0u32];
    let mut out_ids = Vec::new();
    let mut out_bias = Vec::new();
    let mut chunks = ChunksBuilder::new();
    for (node, cols) in columns.iter().enumerate() {
        node_info.push((layout.depth(node) << 1) | u32::from(layout.is_leaf(node)));
        if layout.is_leaf(node) {
            out_ids.extend(layout.labels_of(node).iter().map(|l| l.0));
        } else {
            for c in layout.children(node) {
                out_ids.push(u32::try_from(c).map_err(|_| TreeTrainError::TooLarge)?);
            }
        }
        out_bias.extend(cols.iter().map(|c| c.bias));
        out_start.push(u32::try_from(out_ids.len()).map_err(|_| TreeTrainError::TooLarge)?);
        chunks.push_node(cols.iter().map(|c| (&c.indices[..], &c.values[..])))?;
    }
    Ok(TreeArrays {
        node_info,
        out_start,
        out_ids,
        out_bias,
        chunks,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compact_selection_renumbers_used_columns_in_order() {
        let x = SparseMatrix::new(
            (3, 10),
            vec![0, 2, 3, 5],
            vec![1, 7, 4, 1, 9],
            vec![1.0, 2.0, 3.0, 4.0, 5.0],
        );
        let (c, used) = select_rows_compact(&x, &[0, 2]);
        assert_eq!(used, vec![1, 7, 9]);
        assert_eq!(c.cols(), 3);
        assert_eq!(c.indptr().raw_storage(), &[0, 2, 4]);
        assert_eq!(c.indices(), &[0, 1, 0, 2]);
        assert_eq!(c.data(), &[1.0, 2.0, 4.0, 5.0]);
    }

    #[test]
    fn local_positions_maps_subset() {
        assert_eq!(local_positions(&[2, 4, 7, 9], &[4, 9]), vec![1, 3]);
        assert_eq!(local_positions(&[2, 4], &[]), Vec::<u32>::new());
    }
}
