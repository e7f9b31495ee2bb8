//! Training the node classifiers of one label tree, Parabel-style.
//!
//! An internal node gets one classifier per child and a leaf one per label. Each is trained over the
//! points that reach the node (those with a label in its subtree; every point reaches the root):
//! the child's or label's points are the positives, the others the negatives. Nodes are independent
//! problems, so they run in parallel with rayon, and each node's columns run in parallel inside the
//! solver.
//!
//! With matcher-aware negatives ([`Negatives::Matcher`], XR-Linear's "MAN"), a node also trains on
//! the points that a beam search over the already trained depths above brings to it without a
//! label under it. The tree then trains one depth at a time, in parallel within a depth.

use super::chunk::{ChunkError, ChunksBuilder, IndexChoice, RowChoice, SortedNode};
use super::layout::TreeLayout;
use super::view::TreeArrays;
use crate::data::{Dataset, SparseMatrix, row_slices};
use crate::linear::{
    LinearColumn, PackedRows, SolverError, SolverParams, score_to_log_prob,
    train_columns_of_packed, train_columns_of_rows,
};
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

/// The positions in `all` (sorted) of the elements of `subset` (sorted, a subset of `all`).
pub(crate) fn local_positions(all: &[u32], subset: &[u32]) -> Vec<u32> {
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

/// The points a node's classifiers read: its training points, and for an internal node each
/// child's teacher-forced points (the positives of its outputs), all sorted.
#[derive(Clone, Copy)]
pub(crate) struct NodePoints<'a> {
    /// The node's training points.
    pub rows: &'a [u32],
    /// Per child, in order, its points (empty for a leaf).
    pub children: &'a [&'a [u32]],
}

/// The positives of each output of `node`, as row positions within `points.rows`, the node's
/// training points: a leaf's labels, or an internal node's children's points.
fn node_positives(
    layout: &TreeLayout,
    labels: &SparseMatrix,
    node: usize,
    points: NodePoints<'_>,
) -> Vec<Vec<u32>> {
    let rows = points.rows;
    if layout.is_leaf(node) {
        let own = layout.labels_of(node);
        let mut pos = vec![Vec::new(); own.len()];
        for (local, &r) in rows.iter().enumerate() {
            for &l in row_slices(labels, r as usize).0 {
                if let Ok(k) = own.binary_search_by_key(&l, |id| id.0) {
                    pos[k].push(local as u32);
                }
            }
        }
        pos
    } else {
        points
            .children
            .iter()
            .map(|c| local_positions(rows, c))
            .collect()
    }
}

/// Which training points a node's classifiers see as negatives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Negatives {
    /// Parabel's teacher-forced negatives: the points with a label in the node's subtree and
    /// none in the output's.
    TeacherForced,
    /// Those, plus the points that the trained upper levels' beam search of this width brings to
    /// the node without a label in its subtree (XR-Linear's matcher-aware negatives).
    Matcher {
        /// The training search's beam: nodes kept per depth and point.
        beam: usize,
    },
}

/// Where a node's problem reads the points' features from.
#[derive(Clone, Copy)]
pub(crate) enum NodeFeatures<'a> {
    /// The data's CSR matrix: every node copies its rows.
    Csr(&'a SparseMatrix),
    /// The data's rows packed once: a node over many of the points borrows them.
    Packed(&'a PackedRows),
}

/// One node's classifiers over `points` from the data's `labels` and `features`, in the original
/// feature ids: all of them, or only the outputs `outputs` (increasing output numbers below the
/// node's count).
fn train_node_on(
    labels: &SparseMatrix,
    features: NodeFeatures<'_>,
    layout: &TreeLayout,
    solver: &SolverParams,
    node: usize,
    points: NodePoints<'_>,
    outputs: Option<&[u32]>,
) -> Result<Vec<LinearColumn>, TreeTrainError> {
    let rows = points.rows;
    let mut positives = node_positives(layout, labels, node, points);
    let first_empty = positives.iter().position(Vec::is_empty).unwrap_or(0) as u64;
    if let Some(outputs) = outputs {
        positives = outputs
            .iter()
            .map(|&o| std::mem::take(&mut positives[o as usize]))
            .collect();
    }
    let number = |j: usize| outputs.map_or(j as u64, |o| u64::from(o[j]));
    match features {
        NodeFeatures::Csr(x) => {
            train_columns_of_rows(x, rows, &positives, solver, number, first_empty)
        }
        NodeFeatures::Packed(store) => {
            train_columns_of_packed(store, rows, &positives, solver, number, first_empty)
        }
    }
    .map_err(|source| TreeTrainError::Solver { node, source })
}

/// Every classifier of `node` over `rows`, in one process: its children's points are their
/// teacher-forced lists in `tfn` ([`TreeLayout::points_per_node`]), the features `ds`'s rows.
fn train_whole_node(
    ds: &Dataset,
    layout: &TreeLayout,
    solver: &SolverParams,
    node: usize,
    rows: &[u32],
    tfn: &[Vec<u32>],
) -> Result<Vec<LinearColumn>, TreeTrainError> {
    let children: Vec<&[u32]> = layout.children(node).map(|c| tfn[c].as_slice()).collect();
    let points = NodePoints {
        rows,
        children: &children,
    };
    let x = NodeFeatures::Csr(&ds.features);
    train_node_on(&ds.labels, x, layout, solver, node, points, None)
}

/// The classifiers of the outputs `outputs` (increasing, each below the node's output count) of
/// `node`, over its teacher-forced points and its children's ([`TreeLayout::points_per_node`])
/// with the data's `labels` and `features`: each one the same as [`train_tree`] trains with
/// [`Negatives::TeacherForced`], so that processes can share a tree's nodes and outputs between
/// them.
pub(crate) fn train_node_outputs(
    labels: &SparseMatrix,
    features: NodeFeatures<'_>,
    layout: &TreeLayout,
    solver: &SolverParams,
    node: usize,
    outputs: &[u32],
    points: NodePoints<'_>,
) -> Result<Vec<LinearColumn>, TreeTrainError> {
    train_node_on(
        labels,
        features,
        layout,
        solver,
        node,
        points,
        Some(outputs),
    )
}

/// Which nodes' teacher-forced point lists [`train_node_outputs`] reads to train `nodes`: each
/// node's own and, for an internal node, its children's (their points are the positives).
pub(crate) fn point_lists_read(
    layout: &TreeLayout,
    nodes: impl IntoIterator<Item = usize>,
) -> Vec<bool> {
    let mut read = vec![false; layout.n_nodes()];
    for node in nodes {
        read[node] = true;
        if !layout.is_leaf(node) {
            layout.children(node).for_each(|c| read[c] = true);
        }
    }
    read
}

/// Trains every node classifier of `layout` on `ds` and lays the tree out for storage.
pub fn train_tree(
    ds: &Dataset,
    layout: &TreeLayout,
    solver: &SolverParams,
    negatives: Negatives,
    on_node_done: &(dyn Fn() + Sync),
) -> Result<TreeArrays<Vec<u32>, Vec<f32>>, TreeTrainError> {
    let tfn = layout.points_per_node(ds);
    let columns = match negatives {
        Negatives::TeacherForced => (0..layout.n_nodes())
            .into_par_iter()
            .map(|node| {
                let cols = train_whole_node(ds, layout, solver, node, &tfn[node], &tfn);
                on_node_done();
                cols
            })
            .collect::<Result<Vec<_>, _>>()?,
        Negatives::Matcher { beam } => {
            train_with_matcher(ds, layout, solver, &tfn, beam.max(1), on_node_done)?
        }
    };
    lay_out(layout, &columns)
}

/// Trains the tree depth by depth. A depth's nodes train on their teacher-forced points plus the
/// points that reach them in a beam search of width `beam` over the depths above, already
/// trained; then every point's beam moves one depth down, scored by the new classifiers.
fn train_with_matcher(
    ds: &Dataset,
    layout: &TreeLayout,
    solver: &SolverParams,
    tfn: &[Vec<u32>],
    beam: usize,
    on_node_done: &(dyn Fn() + Sync),
) -> Result<Vec<Vec<LinearColumn>>, TreeTrainError> {
    let n = layout.n_nodes();
    let n_points = ds.n_points();
    // Nodes are numbered breadth first, so each depth is one range of ids.
    let mut depth_start = vec![0usize];
    for node in 1..n {
        if layout.depth(node) != layout.depth(node - 1) {
            depth_start.push(node);
        }
    }
    depth_start.push(n);
    // reached[node]: (point, log-probability of its path) for the points the beam brought there.
    let mut reached: Vec<Vec<(u32, f32)>> = vec![Vec::new(); n];
    reached[0] = (0..n_points as u32).map(|p| (p, 0.0)).collect();
    let mut columns: Vec<Vec<LinearColumn>> = Vec::with_capacity(n);
    for w in depth_start.windows(2) {
        let (lo, hi) = (w[0], w[1]);
        let trained = (lo..hi)
            .into_par_iter()
            .map(|node| {
                let rows = union_sorted(&tfn[node], reached[node].iter().map(|&(p, _)| p));
                let cols = train_whole_node(ds, layout, solver, node, &rows, tfn);
                on_node_done();
                cols
            })
            .collect::<Result<Vec<_>, _>>()?;
        // Every point's candidates one depth down: (point, child, path log-probability).
        let mut next: Vec<(u32, u32, f32)> = (lo..hi)
            .into_par_iter()
            .filter(|&node| !layout.is_leaf(node))
            .flat_map_iter(|node| {
                expand(
                    ds,
                    layout,
                    solver.loss,
                    node,
                    &trained[node - lo],
                    &reached[node],
                )
            })
            .collect();
        // Best first per point, ties to the lower child id, so the beam is deterministic.
        next.par_sort_unstable_by(|a, b| {
            a.0.cmp(&b.0).then(b.2.total_cmp(&a.2)).then(a.1.cmp(&b.1))
        });
        let mut kept = 0usize;
        let mut last = u32::MAX;
        for &(point, child, logp) in &next {
            if point != last {
                last = point;
                kept = 0;
            }
            if kept < beam {
                reached[child as usize].push((point, logp));
                kept += 1;
            }
        }
        for r in &mut reached[lo..hi] {
            *r = Vec::new();
        }
        columns.extend(trained);
    }
    Ok(columns)
}

/// Scores the children of internal `node` for each point in `reached` (sorted by point).
fn expand(
    ds: &Dataset,
    layout: &TreeLayout,
    loss: crate::linear::Loss,
    node: usize,
    cols: &[LinearColumn],
    reached: &[(u32, f32)],
) -> Vec<(u32, u32, f32)> {
    let mut out = Vec::with_capacity(reached.len() * cols.len());
    let mut dense = vec![0f32; ds.features.cols()];
    for (child, col) in layout.children(node).zip(cols) {
        for (&j, &v) in col.indices.iter().zip(&col.values) {
            dense[j as usize] = v;
        }
        for &(point, logp) in reached {
            let (idx, val) = row_slices(&ds.features, point as usize);
            let s: f32 = col.bias
                + idx
                    .iter()
                    .zip(val)
                    .map(|(&j, &x)| dense[j as usize] * x)
                    .sum::<f32>();
            out.push((point, child as u32, logp + score_to_log_prob(loss, s)));
        }
        for &j in &col.indices {
            dense[j as usize] = 0.0;
        }
    }
    out
}

/// The sorted union of sorted `a` and the ascending `b`.
pub(crate) fn union_sorted(a: &[u32], b: impl Iterator<Item = u32>) -> Vec<u32> {
    let mut out = Vec::with_capacity(a.len());
    let mut a = a.iter().copied().peekable();
    let mut b = b.peekable();
    loop {
        let next = match (a.peek(), b.peek()) {
            (Some(&x), Some(&y)) if x < y => a.next(),
            (Some(&x), Some(&y)) if y < x => b.next(),
            (Some(_), Some(_)) => {
                b.next();
                a.next()
            }
            (Some(_), None) => a.next(),
            (None, Some(_)) => b.next(),
            (None, None) => break,
        };
        out.extend(next);
    }
    out
}

/// What laying a classifier out reads of it: its bias and its sparse weights (sorted feature ids
/// and their values), whether it is held in memory or in a shard file's memory map.
pub(crate) trait TrainedColumn {
    /// The bias w₀.
    fn bias(&self) -> f32;
    /// The feature ids and weights.
    fn weights(&self) -> (&[u32], &[f32]);
}

impl TrainedColumn for LinearColumn {
    fn bias(&self) -> f32 {
        self.bias
    }

    fn weights(&self) -> (&[u32], &[f32]) {
        (&self.indices, &self.values)
    }
}

/// Nodes whose weights [`lay_out`] puts in order at once.
const LAY_OUT_BATCH: usize = 256;

/// Lays trained node classifiers out as the stored tree arrays.
pub(crate) fn lay_out<C: TrainedColumn + Sync>(
    layout: &TreeLayout,
    columns: &[Vec<C>],
) -> Result<TreeArrays<Vec<u32>, Vec<f32>>, TreeTrainError> {
    let n = layout.n_nodes();
    let mut node_info = Vec::with_capacity(n);
    let mut out_start = vec![0u32];
    let mut out_ids = Vec::new();
    let mut out_bias = Vec::new();
    let mut chunks = ChunksBuilder::new();
    // Each node's weights are put in order in parallel, a batch of nodes at a time (so that only
    // a batch's copies are held), then appended in node order.
    let mut sorted = Vec::new();
    for (node, cols) in columns.iter().enumerate() {
        if node % LAY_OUT_BATCH == 0 {
            let batch = &columns[node..(node + LAY_OUT_BATCH).min(columns.len())];
            sorted = batch
                .par_iter()
                .map(|cols| SortedNode::of(cols.iter().map(|c| c.weights())))
                .collect::<Result<Vec<_>, _>>()?;
            sorted.reverse();
        }
        node_info.push((layout.depth(node) << 1) | u32::from(layout.is_leaf(node)));
        if layout.is_leaf(node) {
            out_ids.extend(layout.labels_of(node).iter().map(|l| l.0));
        } else {
            for c in layout.children(node) {
                out_ids.push(u32::try_from(c).map_err(|_| TreeTrainError::TooLarge)?);
            }
        }
        out_bias.extend(cols.iter().map(|c| c.bias()));
        out_start.push(u32::try_from(out_ids.len()).map_err(|_| TreeTrainError::TooLarge)?);
        let node_weights = sorted.pop().unwrap_or_default();
        chunks.push_sorted(node_weights, IndexChoice::Smaller, RowChoice::Smaller)?;
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
    fn lay_out_in_batches_matches_the_nodes_pushed_one_by_one() {
        // A root over more leaves than one batch, each leaf holding one label.
        let leaves = LAY_OUT_BATCH + 44;
        let n = leaves + 1;
        let mut first_child = vec![1u32];
        first_child.extend(std::iter::repeat_n(0, leaves));
        let mut n_children = vec![leaves as u32];
        n_children.extend(std::iter::repeat_n(0, leaves));
        let mut depth = vec![0u32];
        depth.extend(std::iter::repeat_n(1, leaves));
        let mut label_offsets = vec![0u32, 0];
        label_offsets.extend(1..=leaves as u32);
        let labels = (0..leaves as u32).map(crate::data::LabelId).collect();
        let layout = TreeLayout::from_parts(
            first_child,
            n_children,
            depth,
            label_offsets,
            labels,
            leaves,
        )
        .unwrap();
        // Node k's output j weighs features that differ per node and output.
        let column = |k: usize, j: usize| LinearColumn {
            indices: (0..(k + j) % 7 + 1)
                .map(|i| (3 * i + k % 5) as u32)
                .collect(),
            values: (0..(k + j) % 7 + 1).map(|i| (i + j) as f32 - 2.5).collect(),
            bias: k as f32 - j as f32,
            stats: Default::default(),
        };
        let columns: Vec<Vec<LinearColumn>> = (0..n)
            .map(|k| {
                let outs = if k == 0 { leaves } else { 1 };
                (0..outs).map(|j| column(k, j)).collect()
            })
            .collect();
        let arrays = lay_out(&layout, &columns).unwrap();
        let mut one_by_one = ChunksBuilder::new();
        for cols in &columns {
            one_by_one
                .push_node(cols.iter().map(|c| (&c.indices[..], &c.values[..])))
                .unwrap();
        }
        assert_eq!(arrays.chunks, one_by_one);
        let biases: Vec<f32> = columns.iter().flatten().map(|c| c.bias).collect();
        assert_eq!(arrays.out_bias, biases);
    }

    #[test]
    fn union_of_sorted_lists_is_sorted_and_unique() {
        assert_eq!(
            union_sorted(&[1, 4, 6], [0, 4, 5, 9].into_iter()),
            vec![0, 1, 4, 5, 6, 9]
        );
        assert_eq!(union_sorted(&[], [3].into_iter()), vec![3]);
        assert_eq!(union_sorted(&[2, 3], std::iter::empty()), vec![2, 3]);
    }

    #[test]
    fn local_positions_maps_subset() {
        assert_eq!(local_positions(&[2, 4, 7, 9], &[4, 9]), vec![1, 3]);
        assert_eq!(local_positions(&[2, 4], &[]), Vec::<u32>::new());
    }
}
