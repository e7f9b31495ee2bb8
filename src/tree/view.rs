//! A label tree's stored form, and the beam search over it.
//!
//! The tree is kept as flat arrays (struct of arrays), generic over the storage so the trainer fills
//! `Vec`s and the server reads memory-mapped sections with the same code:
//!
//! | array | length | meaning |
//! | --- | --- | --- |
//! | `node_info` | nodes | `depth << 1 \| is_leaf`; the root is node 0 at depth 0 |
//! | `out_start` | nodes + 1 | node `i`'s outputs are `out_start[i]..out_start[i + 1]` |
//! | `out_ids` | outputs | a child node id (internal node) or a label id (leaf) |
//! | `out_bias` | outputs | the bias of that output's classifier |
//!
//! plus the node classifiers' [`Chunks`]. Every output of a node is one binary classifier; its
//! score `s` becomes the log-probability of that branch through the loss's link (`≤ 0`), and a
//! label's score is the sum of log-probabilities along its path.

use super::chunk::{ChunkError, Chunks};
use crate::linear::{Loss, score_to_log_prob};
use thiserror::Error;

/// Why stored tree arrays were refused.
#[derive(Debug, Error, PartialEq)]
pub enum TreeViewError {
    /// The arrays disagree in length.
    #[error("tree array `{array}` has length {found}, expected {expected}")]
    Length {
        /// The array's name.
        array: &'static str,
        /// Its length.
        found: usize,
        /// The length it must have.
        expected: usize,
    },
    /// The tree has no nodes.
    #[error("the tree has no nodes")]
    Empty,
    /// The output offsets are not a valid prefix sum.
    #[error("tree output offsets are not a valid prefix sum at node {node}")]
    Offsets {
        /// The first bad node.
        node: usize,
    },
    /// A structural rule is broken (child ids, depths, parents, label ids, biases).
    #[error("tree node {node}: {what}")]
    Structure {
        /// The node.
        node: usize,
        /// What is wrong.
        what: String,
    },
    /// The node classifiers are broken.
    #[error("tree node classifiers: {0}")]
    Chunks(#[from] ChunkError),
}

/// One label tree: topology plus node classifiers.
#[derive(Clone, Debug, PartialEq)]
pub struct TreeArrays<U, F> {
    /// Per node, `depth << 1 | is_leaf`.
    pub node_info: U,
    /// Per node, the start of its outputs (length nodes + 1).
    pub out_start: U,
    /// Child node ids or label ids.
    pub out_ids: U,
    /// Per output, the classifier's bias.
    pub out_bias: F,
    /// The node classifiers' weights.
    pub chunks: Chunks<U, F>,
}

/// Reusable per-thread buffers, so a search allocates nothing once warm.
#[derive(Debug, Default)]
pub struct SearchScratch {
    acc: Vec<f32>,
    level: Vec<(u32, f32)>,
    next: Vec<(u32, f32)>,
    /// The labels reached: `(label, log-probability, depth)`.
    pub candidates: Vec<(u32, f32, u32)>,
}

/// What one search did, for per-request statistics.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct SearchStats {
    /// Nodes whose classifiers were evaluated.
    pub nodes_evaluated: u32,
}

impl<U, F> TreeArrays<U, F>
where
    U: std::ops::Deref<Target = [u32]>,
    F: std::ops::Deref<Target = [f32]>,
{
    /// The number of nodes.
    pub fn n_nodes(&self) -> usize {
        self.node_info.len()
    }

    /// The same tree over plain slices. Memory-mapped sections check their bounds on every
    /// dereference, so the search dereferences each array once per query through this view.
    pub fn borrowed(&self) -> TreeArrays<&[u32], &[f32]> {
        TreeArrays {
            node_info: &self.node_info,
            out_start: &self.out_start,
            out_ids: &self.out_ids,
            out_bias: &self.out_bias,
            chunks: self.chunks.borrowed(),
        }
    }

    /// Whether node `i` is a leaf.
    #[inline]
    pub fn is_leaf(&self, i: usize) -> bool {
        self.node_info[i] & 1 == 1
    }

    /// The depth of node `i` (the root is 0).
    #[inline]
    pub fn depth(&self, i: usize) -> u32 {
        self.node_info[i] >> 1
    }

    /// Node `i`'s outputs: child node ids or label ids.
    #[inline]
    pub fn outputs(&self, i: usize) -> &[u32] {
        &self.out_ids[self.out_start[i] as usize..self.out_start[i + 1] as usize]
    }

    /// Checks the whole tree once, so that searching it cannot go out of bounds or loop: child ids
    /// are greater than their parent's (so the graph is acyclic), every node but the root has
    /// exactly one parent, depths grow by one per level, leaves name labels below `n_labels` and
    /// every label at most once, and the chunks are valid for `n_features`.
    pub fn validate(&self, n_labels: usize, n_features: usize) -> Result<(), TreeViewError> {
        let n = self.n_nodes();
        if n == 0 {
            return Err(TreeViewError::Empty);
        }
        let len = |array, found, expected| {
            if found == expected {
                Ok(())
            } else {
                Err(TreeViewError::Length {
                    array,
                    found,
                    expected,
                })
            }
        };
        len("out_start", self.out_start.len(), n + 1)?;
        len("out_bias", self.out_bias.len(), self.out_ids.len())?;
        if self.out_start[0] != 0
            || self.out_start[n] as usize != self.out_ids.len()
            || self.out_start.windows(2).any(|w| w[0] > w[1])
        {
            let node = self
                .out_start
                .windows(2)
                .position(|w| w[0] > w[1])
                .unwrap_or(0);
            return Err(TreeViewError::Offsets { node });
        }
        let bad = |node, what: String| Err(TreeViewError::Structure { node, what });
        if self.depth(0) != 0 {
            return bad(0, "the root must have depth 0".into());
        }
        let mut has_parent = vec![false; n];
        let mut label_seen = vec![false; n_labels];
        let mut n_outputs = Vec::with_capacity(n);
        for i in 0..n {
            let outs = self.outputs(i);
            n_outputs.push(outs.len());
            if self.out_bias[self.out_start[i] as usize..self.out_start[i + 1] as usize]
                .iter()
                .any(|b| !b.is_finite())
            {
                return bad(i, "a bias is not finite".into());
            }
            if self.is_leaf(i) {
                for &l in outs {
                    match label_seen.get_mut(l as usize) {
                        None => return bad(i, format!("label id {l} is not below {n_labels}")),
                        Some(true) => return bad(i, format!("label {l} appears twice")),
                        Some(seen) => *seen = true,
                    }
                }
            } else {
                if outs.is_empty() {
                    return bad(i, "an internal node has no children".into());
                }
                for &c in outs {
                    let c = c as usize;
                    if c <= i || c >= n {
                        return bad(i, format!("child id {c} is not in ({i}, {n})"));
                    }
                    if std::mem::replace(&mut has_parent[c], true) {
                        return bad(c, "the node has two parents".into());
                    }
                    if self.depth(c) != self.depth(i) + 1 {
                        return bad(c, "its depth is not its parent's plus one".into());
                    }
                }
            }
        }
        if let Some(orphan) = (1..n).find(|&i| !has_parent[i]) {
            return bad(orphan, "the node has no parent".into());
        }
        self.chunks.validate(&n_outputs, n_features)?;
        Ok(())
    }

    /// Scores node `i`'s outputs for the query into `acc` (bias included).
    #[inline]
    fn score_node(
        &self,
        i: usize,
        q_idx: &[u32],
        q_val: &[f32],
        dense: &[f32],
        acc: &mut Vec<f32>,
    ) {
        let range = self.out_start[i] as usize..self.out_start[i + 1] as usize;
        acc.clear();
        acc.extend_from_slice(&self.out_bias[range]);
        self.chunks.score(i, q_idx, q_val, dense, acc);
    }

    /// Level-wise beam search (Parabel's): keeps the `beam` best internal nodes per level by path
    /// log-probability, and collects every label of every leaf it reaches into
    /// `scratch.candidates` with its path log-probability and depth (its leaf's depth + 1).
    pub fn beam_search(
        &self,
        q_idx: &[u32],
        q_val: &[f32],
        dense: &[f32],
        loss: Loss,
        beam: usize,
        scratch: &mut SearchScratch,
    ) -> SearchStats {
        let beam = beam.max(1);
        let mut stats = SearchStats::default();
        scratch.candidates.clear();
        scratch.level.clear();
        scratch.level.push((0, 0.0));
        while !scratch.level.is_empty() {
            scratch.next.clear();
            for li in 0..scratch.level.len() {
                let (node, logp) = scratch.level[li];
                let node = node as usize;
                self.score_node(node, q_idx, q_val, dense, &mut scratch.acc);
                stats.nodes_evaluated += 1;
                let outs = self.outputs(node);
                if self.is_leaf(node) {
                    let depth = self.depth(node) + 1;
                    scratch.candidates.extend(
                        outs.iter()
                            .zip(&scratch.acc)
                            .map(|(&l, &s)| (l, logp + score_to_log_prob(loss, s), depth)),
                    );
                } else {
                    scratch.next.extend(
                        outs.iter()
                            .zip(&scratch.acc)
                            .map(|(&c, &s)| (c, logp + score_to_log_prob(loss, s))),
                    );
                }
            }
            if scratch.next.len() > beam {
                scratch.next.select_nth_unstable_by(beam - 1, |a, b| {
                    b.1.total_cmp(&a.1).then(a.0.cmp(&b.0))
                });
                scratch.next.truncate(beam);
            }
            std::mem::swap(&mut scratch.level, &mut scratch.next);
        }
        stats
    }
}
