//! What each unit of work is estimated to cost, and which shard trains it.

use super::Unit;
use crate::config::ModelKind;
use crate::data::{Dataset, row_slices};
use crate::tree::layout::TreeLayout;

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
    let node_rows = layout.points_per_node(ds);
    let node_nnz: Vec<u64> = node_rows
        .iter()
        .map(|rows| rows.iter().map(|&r| row_nnz[r as usize]).sum())
        .collect();
    // Each classifier's own fixed work: the solver keeps dense state over the node's distinct
    // features (its weights) and over its points (their duals and scores), once per classifier.
    let mut seen = vec![u32::MAX; ds.n_features()];
    let per_classifier: Vec<u64> = node_rows
        .iter()
        .enumerate()
        .map(|(node, rows)| {
            let mut distinct = 0u64;
            for &r in rows {
                for &f in row_slices(&ds.features, r as usize).0 {
                    if seen[f as usize] != node as u32 {
                        seen[f as usize] = node as u32;
                        distinct += 1;
                    }
                }
            }
            distinct + rows.len() as u64
        })
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
