//! What each unit of work is estimated to cost, and which shard trains it.

use super::Unit;
use crate::config::ModelKind;
use crate::data::{Dataset, row_slices};
use crate::tree::layout::TreeLayout;
use crate::tree::train::union_sorted;
use rayon::prelude::*;

/// Appends the units of `layout` (model `m`, of kind `kind`, trained on `ds`) and their
/// estimated costs: per unit, the feature non-zeros of its positives, its share of the non-zeros
/// of the node's points (a leaf: all of them), and for each classifier it holds the node's
/// distinct features plus its points (the solver's dense state, set up once per classifier).
pub(super) fn cost_units(
    m: usize,
    layout: &TreeLayout,
    ds: &Dataset,
    kind: ModelKind,
    units: &mut Vec<Unit>,
    costs: &mut Vec<u64>,
) {
    let row_nnz: Vec<u64> = (0..ds.n_points())
        .map(|i| row_slices(&ds.features, i).0.len() as u64)
        .collect();
    let mut label_nnz = vec![0u64; ds.n_labels()];
    for (p, &nnz) in row_nnz.iter().enumerate() {
        for &l in ds.label_row(p) {
            label_nnz[l as usize] += nnz;
        }
    }
    let points = layout.points_per_node(ds);
    let node_nnz: Vec<u64> = points
        .par_iter()
        .map(|rows| rows.iter().map(|&r| row_nnz[r as usize]).sum())
        .collect();
    // Each classifier's own fixed work: the solver keeps dense state over the node's distinct
    // features (its weights) and over its points (their duals and scores).
    let per_classifier: Vec<u64> = distinct_features(layout, ds, &points)
        .iter()
        .zip(&points)
        .map(|(&d, rows)| d + rows.len() as u64)
        .collect();
    for node in 0..layout.n_nodes() {
        let unit = |first: usize, count: usize| Unit {
            tree: m as u32,
            node: node as u32,
            first: first as u32,
            count: count as u32,
        };
        let labels = layout.labels_of(node);
        if layout.is_leaf(node) && kind == ModelKind::Tree {
            // A leaf's labels share one problem over its points: one unit.
            units.push(unit(0, labels.len()));
            costs.push(
                node_nnz[node]
                    + labels.iter().map(|l| label_nnz[l.0 as usize]).sum::<u64>()
                    + per_classifier[node] * labels.len() as u64,
            );
        } else if layout.is_leaf(node) {
            let base = node_nnz[node] / labels.len().max(1) as u64 + per_classifier[node];
            for (k, l) in labels.iter().enumerate() {
                units.push(unit(k, 1));
                costs.push(base + label_nnz[l.0 as usize]);
            }
        } else {
            let children = layout.children(node);
            let base = node_nnz[node] / children.len().max(1) as u64 + per_classifier[node];
            for (k, c) in children.enumerate() {
                units.push(unit(k, 1));
                costs.push(base + node_nnz[c]);
            }
        }
    }
}

/// Each node's distinct features: the columns the solver keeps for the node's problem.
/// A node below the root holds exactly the points of its children, so its features are the union
/// of theirs; the root (which also holds the points without a label) and the leaves walk their
/// rows. The levels are done from the deepest up, each level's nodes in parallel, and only two
/// levels' feature lists are held at a time.
fn distinct_features(layout: &TreeLayout, ds: &Dataset, points: &[Vec<u32>]) -> Vec<u64> {
    let n = layout.n_nodes();
    let mut levels: Vec<Vec<usize>> = vec![Vec::new(); layout.max_depth() as usize + 1];
    for node in 0..n {
        levels[layout.depth(node) as usize].push(node);
    }
    let walk = |seen: &mut Vec<u32>, node: usize| -> Vec<u32> {
        let mut out = Vec::new();
        for &r in &points[node] {
            for &f in row_slices(&ds.features, r as usize).0 {
                if seen[f as usize] != node as u32 {
                    seen[f as usize] = node as u32;
                    out.push(f);
                }
            }
        }
        out.sort_unstable();
        out
    };
    let mut distinct = vec![0u64; n];
    // `slot[node]`: the node's place in its level, which indexes the level's lists.
    let mut slot = vec![0usize; n];
    let mut below: Vec<Vec<u32>> = Vec::new();
    for level in levels.iter().rev() {
        let lists: Vec<Vec<u32>> = level
            .par_iter()
            .map_init(
                || vec![u32::MAX; ds.n_features()],
                |seen, &node| {
                    if node == 0 || layout.is_leaf(node) {
                        return walk(seen, node);
                    }
                    layout.children(node).fold(Vec::new(), |acc, c| {
                        union_sorted(&acc, below[slot[c]].iter().copied())
                    })
                },
            )
            .collect();
        for (k, (&node, list)) in level.iter().zip(&lists).enumerate() {
            slot[node] = k;
            distinct[node] = list.len() as u64;
        }
        below = lists;
    }
    distinct
}

/// The shard of each unit: longest first to the least loaded shard.
pub(super) fn assign(costs: &[u64], of: usize) -> Vec<usize> {
    let mut order: Vec<usize> = (0..costs.len()).collect();
    order.sort_by(|&a, &b| costs[b].cmp(&costs[a]).then(a.cmp(&b)));
    let mut heap: std::collections::BinaryHeap<std::cmp::Reverse<(u64, usize)>> =
        (0..of.max(1)).map(|s| std::cmp::Reverse((0, s))).collect();
    let mut owner = vec![0usize; costs.len()];
    for u in order {
        if let Some(std::cmp::Reverse((load, s))) = heap.pop() {
            owner[u] = s;
            heap.push(std::cmp::Reverse((load + costs[u], s)));
        }
    }
    owner
}

#[cfg(test)]
mod tests {
    use super::*;
    use sprs::TriMatI;

    /// Costs worked out by hand on `small_tree`: root with children 1 (leaf: labels 2, 0) and 2,
    /// whose children 3 and 4 are leaves holding label 1 and labels 3, 4.
    #[test]
    fn costs_count_each_classifiers_features_and_points() {
        let layout = crate::tree::layout::small_tree();
        // Point features: {0}, {0, 1}, {1, 2}, {2}; point labels: {0, 2}, none, {1, 4}, {3}.
        let mut x = TriMatI::<f32, u32>::new((4, 3));
        for (p, f) in [(0, 0), (1, 0), (1, 1), (2, 1), (2, 2), (3, 2)] {
            x.add_triplet(p, f, 1.0);
        }
        let mut y = TriMatI::<f32, u32>::new((4, 5));
        for (p, l) in [(0, 0), (0, 2), (2, 1), (2, 4), (3, 3)] {
            y.add_triplet(p, l, 1.0);
        }
        let ds = Dataset {
            features: x.to_csr(),
            labels: y.to_csr(),
        };
        let (mut units, mut costs) = (Vec::new(), Vec::new());
        cost_units(0, &layout, &ds, ModelKind::Tree, &mut units, &mut costs);
        // Points per node: [0, 1, 2, 3], [0], [2, 3], [2], [2, 3]; their non-zeros 6, 1, 3, 2, 3;
        // distinct features plus points: 3 + 4, 1 + 1, 2 + 2, 2 + 1, 2 + 2.
        // Root's outputs: 6 / 2 + 7, plus each child's non-zeros (1, 3).
        // Leaf 1: its non-zeros 1, its labels' positives 1 + 1, and 2 classifiers of 2.
        // Node 2's outputs: 3 / 2 + 4, plus 2 and 3.
        // Leaf 3: 2 + 2 + 1 × 3. Leaf 4: 3 + (1 + 2) + 2 × 4.
        assert_eq!(costs, vec![11, 13, 7, 7, 8, 7, 14]);
        let shape: Vec<(u32, u32, u32)> =
            units.iter().map(|u| (u.node, u.first, u.count)).collect();
        assert_eq!(
            shape,
            vec![
                (0, 0, 1),
                (0, 1, 1),
                (1, 0, 2),
                (2, 0, 1),
                (2, 1, 1),
                (3, 0, 1),
                (4, 0, 2)
            ]
        );
        // Longest first to the least loaded shard, ties to the lower unit: 14 → 0, 13 → 1,
        // 11 → 1 (24), 8 → 0 (22), 7 → 0 (29), 7 → 1 (31), 7 → 0 (36).
        assert_eq!(assign(&costs, 2), vec![1, 1, 0, 1, 0, 0, 0]);
    }
}
