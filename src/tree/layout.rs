//! The flat, breadth-first layout of a label tree.
//!
//! Node classifiers, the bundle and the search all address nodes by index, so the tree is stored as
//! a few parallel arrays rather than as linked nodes: nodes are numbered in breadth-first order with
//! the root at 0, the children of a node are a contiguous id range, and the labels of the leaves
//! sit in one flat array cut by per-node offsets. Leaves may lie at different depths; nothing here
//! assumes a balanced tree. Arrays that come from an untrusted file are checked by
//! [`TreeLayout::from_parts`] / [`TreeLayout::validate`], which never panic.

use std::ops::Range;

use super::TreeError;
use crate::data::{Dataset, LabelId, SparseMatrix, row_slices};

/// A label tree in breadth-first order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TreeLayout {
    /// Per node: the id of its first child (0 for a leaf).
    first_child: Vec<u32>,
    /// Per node: the number of children (0 for a leaf).
    n_children: Vec<u32>,
    /// Per node: its depth, the root being 0.
    depth: Vec<u32>,
    /// Per node, plus one: node `i` owns `labels[label_offsets[i]..label_offsets[i + 1]]`.
    label_offsets: Vec<u32>,
    /// The labels of all leaves, leaf after leaf.
    labels: Vec<LabelId>,
    /// Per node: its parent (the root's is 0); derived from the other arrays.
    parent: Vec<u32>,
}

/// How many leaves, and how many labels in them, lie at one depth.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DepthCount {
    /// The number of leaves at this depth.
    pub leaves: usize,
    /// The number of labels in those leaves.
    pub labels: usize,
}

/// Summary of leaf sizes (labels per leaf).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LeafSizeStats {
    /// The number of leaves.
    pub n_leaves: usize,
    /// The smallest leaf.
    pub min: usize,
    /// The largest leaf.
    pub max: usize,
    /// The mean leaf size.
    pub mean: f64,
}

impl TreeLayout {
    /// Builds a layout from its stored arrays, checking every invariant that
    /// [`TreeLayout::validate`] checks against `n_labels`.
    ///
    /// A leaf's `first_child` must be 0, and `label_offsets` has one entry per node plus one.
    pub fn from_parts(
        first_child: Vec<u32>,
        n_children: Vec<u32>,
        depth: Vec<u32>,
        label_offsets: Vec<u32>,
        labels: Vec<LabelId>,
        n_labels: usize,
    ) -> Result<Self, TreeError> {
        check_structure(&first_child, &n_children, &depth)?;
        check_labels(&n_children, &label_offsets, &labels, n_labels)?;
        let mut parent = vec![0u32; first_child.len()];
        for (node, (&first, &count)) in first_child.iter().zip(&n_children).enumerate() {
            for child in first..first + count {
                parent[child as usize] = node as u32;
            }
        }
        Ok(TreeLayout {
            first_child,
            n_children,
            depth,
            label_offsets,
            labels,
            parent,
        })
    }

    /// Checks that this is a valid tree over labels `0..n_labels`: every index is in range, nodes
    /// are in breadth-first order with contiguous children, depths agree with parents, only leaves
    /// own labels, and every label sits in exactly one leaf. Never panics.
    pub fn validate(&self, n_labels: usize) -> Result<(), TreeError> {
        check_structure(&self.first_child, &self.n_children, &self.depth)?;
        check_labels(
            &self.n_children,
            &self.label_offsets,
            &self.labels,
            n_labels,
        )
    }

    /// The number of nodes.
    pub fn n_nodes(&self) -> usize {
        self.first_child.len()
    }

    /// The number of labels stored in the leaves.
    pub fn n_labels(&self) -> usize {
        self.labels.len()
    }

    /// The parent of `node`, or `None` for the root.
    ///
    /// # Panics
    /// If `node >= self.n_nodes()`.
    pub fn parent(&self, node: usize) -> Option<usize> {
        (node != 0).then(|| self.parent[node] as usize)
    }

    /// The ids of the children of `node` (empty for a leaf).
    ///
    /// # Panics
    /// If `node >= self.n_nodes()`.
    pub fn children(&self, node: usize) -> Range<usize> {
        let first = self.first_child[node] as usize;
        first..first + self.n_children[node] as usize
    }

    /// Whether `node` is a leaf.
    ///
    /// # Panics
    /// If `node >= self.n_nodes()`.
    pub fn is_leaf(&self, node: usize) -> bool {
        self.n_children[node] == 0
    }

    /// The depth of `node`; the root is at depth 0.
    ///
    /// # Panics
    /// If `node >= self.n_nodes()`.
    pub fn depth(&self, node: usize) -> u32 {
        self.depth[node]
    }

    /// The largest depth of any node.
    pub fn max_depth(&self) -> u32 {
        self.depth.last().copied().unwrap_or(0)
    }

    /// The labels owned by `node`: its labels for a leaf, nothing for an internal node.
    ///
    /// # Panics
    /// If `node >= self.n_nodes()`.
    pub fn labels_of(&self, node: usize) -> &[LabelId] {
        let start = self.label_offsets[node] as usize;
        let end = self.label_offsets[node + 1] as usize;
        &self.labels[start..end]
    }

    /// The ids of all leaves, in breadth-first order.
    pub fn leaves(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.n_nodes()).filter(|&node| self.is_leaf(node))
    }

    /// For each label, the leaf that holds it.
    pub fn leaf_of_label(&self) -> Vec<u32> {
        let mut leaf_of = vec![0u32; self.labels.len()];
        for leaf in self.leaves() {
            for label in self.labels_of(leaf) {
                leaf_of[label.index()] = leaf as u32;
            }
        }
        leaf_of
    }

    /// Per depth (index = depth), the number of leaves and of labels at that depth.
    pub fn depth_histogram(&self) -> Vec<DepthCount> {
        let mut hist = vec![DepthCount::default(); self.max_depth() as usize + 1];
        for leaf in self.leaves() {
            let bucket = &mut hist[self.depth[leaf] as usize];
            bucket.leaves += 1;
            bucket.labels += self.labels_of(leaf).len();
        }
        hist
    }

    /// Minimum, maximum and mean number of labels per leaf.
    pub fn leaf_size_stats(&self) -> LeafSizeStats {
        let sizes: Vec<usize> = self.leaves().map(|l| self.labels_of(l).len()).collect();
        let n_leaves = sizes.len();
        LeafSizeStats {
            n_leaves,
            min: sizes.iter().copied().min().unwrap_or(0),
            max: sizes.iter().copied().max().unwrap_or(0),
            mean: if n_leaves == 0 {
                0.0
            } else {
                self.labels.len() as f64 / n_leaves as f64
            },
        }
    }

    /// For each node, the sorted indices of the training points that reach it: the points with at
    /// least one label in the node's subtree. The root gets every point, labelled or not, as in
    /// Parabel.
    ///
    /// Each point walks up from the leaves of its labels and stops at the first node it has already
    /// marked, so the cost is O(nnz(Y) · depth). Label ids of `ds` that the tree does not hold are
    /// ignored.
    pub fn points_per_node(&self, ds: &Dataset) -> Vec<Vec<u32>> {
        self.points_per_node_of(ds, None)
    }

    /// As [`Self::points_per_node`], but with `wanted` only the nodes it marks get their points
    /// (the others stay empty), so that a process training a few nodes holds only their lists.
    pub fn points_per_node_of(&self, ds: &Dataset, wanted: Option<&[bool]>) -> Vec<Vec<u32>> {
        let keep = |node: usize| wanted.is_none_or(|w| w.get(node).copied().unwrap_or(false));
        let csr_labels;
        let labels: &SparseMatrix = if ds.labels.is_csr() {
            &ds.labels
        } else {
            csr_labels = ds.labels.to_csr();
            &csr_labels
        };
        let leaf_of = self.leaf_of_label();
        let n_points = ds.n_points();
        let mut reached: Vec<Vec<u32>> = vec![Vec::new(); self.n_nodes()];
        if keep(0) {
            reached[0] = (0..n_points as u32).collect();
        }
        // `stamp[node]` is one more than the last point that marked `node`.
        let mut stamp = vec![0u32; self.n_nodes()];
        for point in 0..n_points.min(labels.rows()) {
            let mark = point as u32 + 1;
            for &label in row_slices(labels, point).0 {
                let Some(&leaf) = leaf_of.get(label as usize) else {
                    continue;
                };
                let mut node = leaf as usize;
                while node != 0 && stamp[node] != mark {
                    stamp[node] = mark;
                    if keep(node) {
                        reached[node].push(point as u32);
                    }
                    node = self.parent[node] as usize;
                }
            }
        }
        reached
    }

    /// Per node: the id of its first child (0 for a leaf). For serialisation.
    pub fn first_child_array(&self) -> &[u32] {
        &self.first_child
    }

    /// Per node: the number of children. For serialisation.
    pub fn n_children_array(&self) -> &[u32] {
        &self.n_children
    }

    /// Per node: its depth. For serialisation.
    pub fn depth_array(&self) -> &[u32] {
        &self.depth
    }

    /// Per node plus one: offsets into [`TreeLayout::leaf_labels`]. For serialisation.
    pub fn label_offsets_array(&self) -> &[u32] {
        &self.label_offsets
    }

    /// The labels of all leaves, leaf after leaf in node order. For serialisation.
    pub fn leaf_labels(&self) -> &[LabelId] {
        &self.labels
    }
}

/// Checks lengths, breadth-first contiguity, reachability and depths.
fn check_structure(
    first_child: &[u32],
    n_children: &[u32],
    depth: &[u32],
) -> Result<(), TreeError> {
    let n = first_child.len();
    if n == 0 {
        return Err(TreeError::NoNodes);
    }
    for (array, len) in [("n_children", n_children.len()), ("depth", depth.len())] {
        if len != n {
            return Err(TreeError::LengthMismatch {
                array,
                expected: n,
                found: len,
            });
        }
    }
    if depth[0] != 0 {
        return Err(TreeError::DepthMismatch {
            node: 0,
            expected: 0,
            found: depth[0],
        });
    }
    // `next` is the id the next child must get; node `i > 0` is reachable iff some earlier node
    // already claimed it, that is iff `i < next` when we reach it.
    let mut next: usize = 1;
    for node in 0..n {
        if node > 0 && node >= next {
            return Err(TreeError::Unreachable { node });
        }
        let count = n_children[node] as usize;
        if count == 0 {
            if first_child[node] != 0 {
                return Err(TreeError::LeafWithChildPointer {
                    node,
                    found: first_child[node],
                });
            }
            continue;
        }
        if first_child[node] as usize != next {
            return Err(TreeError::NotBreadthFirst {
                node,
                expected: next,
                found: first_child[node] as usize,
            });
        }
        let end = next.saturating_add(count);
        if end > n {
            return Err(TreeError::Unreachable { node: n });
        }
        for child in next..end {
            let expected = depth[node].saturating_add(1);
            if depth[child] != expected {
                return Err(TreeError::DepthMismatch {
                    node: child,
                    expected,
                    found: depth[child],
                });
            }
        }
        next = end;
    }
    if next != n {
        return Err(TreeError::Unreachable { node: next });
    }
    Ok(())
}

/// Checks the label offsets and that every label of `0..n_labels` sits in exactly one leaf.
/// Assumes `n_children` has already been checked against the other node arrays.
fn check_labels(
    n_children: &[u32],
    label_offsets: &[u32],
    labels: &[LabelId],
    n_labels: usize,
) -> Result<(), TreeError> {
    let n = n_children.len();
    if label_offsets.len() != n + 1 {
        return Err(TreeError::LengthMismatch {
            array: "label_offsets",
            expected: n + 1,
            found: label_offsets.len(),
        });
    }
    if labels.len() != n_labels {
        return Err(TreeError::LengthMismatch {
            array: "labels",
            expected: n_labels,
            found: labels.len(),
        });
    }
    if label_offsets[0] != 0 {
        return Err(TreeError::BadLabelOffsets { node: 0 });
    }
    if label_offsets[n] as usize != labels.len() {
        return Err(TreeError::BadLabelOffsets { node: n });
    }
    for node in 0..n {
        let (start, end) = (label_offsets[node], label_offsets[node + 1]);
        if end < start {
            return Err(TreeError::BadLabelOffsets { node });
        }
        let owns = end > start;
        if n_children[node] > 0 && owns {
            return Err(TreeError::InternalNodeWithLabels { node });
        }
        if n_children[node] == 0 && !owns && n_labels > 0 {
            return Err(TreeError::EmptyLeaf { node });
        }
    }
    let mut seen = vec![false; n_labels];
    for &LabelId(label) in labels {
        let slot = seen
            .get_mut(label as usize)
            .ok_or(TreeError::LabelOutOfRange { label, n_labels })?;
        if *slot {
            return Err(TreeError::DuplicateLabel { label });
        }
        *slot = true;
    }
    Ok(())
}

/// A hand-built tree for unit tests: root with children 1 (leaf: labels 2, 0) and 2 (internal),
/// whose children 3 and 4 are leaves holding label 1 and labels 3, 4.
#[cfg(test)]
pub(crate) fn small_tree() -> TreeLayout {
    TreeLayout::from_parts(
        vec![1, 0, 3, 0, 0],
        vec![2, 0, 2, 0, 0],
        vec![0, 1, 1, 2, 2],
        vec![0, 0, 2, 2, 3, 5],
        [2, 0, 1, 3, 4].map(LabelId).to_vec(),
        5,
    )
    .expect("hand-built tree is valid")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn helpers_on_uneven_tree() {
        let t = small_tree();
        assert_eq!(t.parent(0), None);
        assert_eq!(t.parent(4), Some(2));
        assert_eq!(t.children(2), 3..5);
        assert!(t.is_leaf(1) && !t.is_leaf(2));
        assert_eq!(t.labels_of(1), &[LabelId(2), LabelId(0)]);
        assert!(t.labels_of(2).is_empty());
        assert_eq!(t.leaf_of_label(), vec![1, 3, 1, 4, 4]);
        assert_eq!(t.max_depth(), 2);
        assert_eq!(
            t.depth_histogram(),
            vec![
                DepthCount::default(),
                DepthCount {
                    leaves: 1,
                    labels: 2
                },
                DepthCount {
                    leaves: 2,
                    labels: 3
                },
            ]
        );
        let stats = t.leaf_size_stats();
        assert_eq!((stats.n_leaves, stats.min, stats.max), (3, 1, 2));
        assert!((stats.mean - 5.0 / 3.0).abs() < 1e-12);
        assert_eq!(t.validate(5), Ok(()));
        assert!(t.validate(6).is_err());
    }

    #[test]
    fn points_per_node_by_hand() {
        use sprs::TriMatI;
        let t = small_tree();
        // Point 0: labels {0, 2} (leaf 1). Point 1: none. Point 2: labels {1, 4} (leaves 3, 4).
        // Point 3: label 3 (leaf 4).
        let mut y = TriMatI::<f32, u32>::new((4, 5));
        for (p, l) in [(0, 0), (0, 2), (2, 1), (2, 4), (3, 3)] {
            y.add_triplet(p, l, 1.0);
        }
        let ds = Dataset {
            features: SparseMatrix::zero((4, 3)),
            labels: y.to_csr(),
        };
        let reached = t.points_per_node(&ds);
        assert_eq!(
            reached,
            vec![vec![0, 1, 2, 3], vec![0], vec![2, 3], vec![2], vec![2, 3]]
        );
        // Only the wanted nodes get their lists, the same as in the full walk.
        let some = t.points_per_node_of(&ds, Some(&[false, true, false, false, true]));
        assert_eq!(some, vec![vec![], vec![0], vec![], vec![], vec![2, 3]]);
        let root = t.points_per_node_of(&ds, Some(&[true]));
        assert_eq!(root, vec![vec![0, 1, 2, 3], vec![], vec![], vec![], vec![]]);
    }

    /// Edits the node arrays (first_child, n_children, depth, label_offsets) and the labels.
    type Mutation = fn(&mut [Vec<u32>; 4], &mut Vec<LabelId>);

    #[test]
    fn rejects_malformed_parts() {
        let ok = small_tree();
        let cases: [(&str, Mutation); 12] = [
            ("child past end", |a, _| a[1][2] = 9),
            ("huge child count", |a, _| a[1][0] = u32::MAX),
            ("non-contiguous", |a, _| a[0][2] = 4),
            ("self loop", |a, _| a[0][0] = 0),
            ("bad depth", |a, _| a[2][3] = 7),
            ("short depth", |a, _| a[2].truncate(4)),
            ("leaf pointer", |a, _| a[0][1] = 3),
            ("offsets decrease", |a, _| a[3][2] = 1),
            ("offset past end", |a, _| a[3][5] = 99),
            ("internal labels", |a, _| a[3][1] = 1),
            ("duplicate", |_, l| l[1] = LabelId(2)),
            ("out of range", |_, l| l[4] = LabelId(5)),
        ];
        for (name, mutate) in cases {
            let mut arrays = [
                ok.first_child.clone(),
                ok.n_children.clone(),
                ok.depth.clone(),
                ok.label_offsets.clone(),
            ];
            let mut labels = ok.labels.clone();
            mutate(&mut arrays, &mut labels);
            let [fc, nc, d, lo] = arrays;
            let result = TreeLayout::from_parts(fc, nc, d, lo, labels, 5);
            assert!(result.is_err(), "{name} was accepted");
        }
        assert_eq!(
            TreeLayout::from_parts(vec![], vec![], vec![], vec![0], vec![], 0),
            Err(TreeError::NoNodes)
        );
    }
}
