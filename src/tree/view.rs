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
//!
//! Two searches run over it:
//!
//! - [`TreeArrays::beam_search`], Parabel's level-wise beam search: the `beam` best nodes of each
//!   level, every label of every leaf reached.
//! - [`TreeArrays::early_stop_search`], the depth-aware early-stopping search: nodes are expanded
//!   best-first by path log-probability, leaves feed a size-k set of the best labels, and the
//!   search stops as soon as the k-th best label beats the best unexpanded path.
//!
//! **Why early stopping is exact.** Every node log-probability is ≤ 0, so a label's score (its
//! path's sum) is at most the log-probability of every node on its path. When the k-th best label
//! found so far scores strictly more than the best unexpanded node, every label not yet scored
//! lies under an unexpanded node and scores strictly less, so none of them can enter the top k:
//! the result is the top k of exhaustive search, labels and scores alike (the scores are summed in
//! the same order as in the level-wise search, so they are bit-identical). The comparison is
//! strict because ranking ties go to the smaller label id: an unexpanded label that *equals* the
//! k-th score could still displace it. For the same reason a child whose path log-probability is
//! below the k-th best score is never queued. The beam, when it binds, caps the nodes expanded
//! per depth (so the worst case is the level-wise search's) and is reported, and so is a deadline
//! that cut the search short; either breaks the exactness guarantee for that query.

use super::chunk::{
    ChunkError, Chunks, EntryOuts, OUT_SLOTS, OutSlice, PruneScratch, PruneStats, SortedAcc,
    SparseAcc,
};
use crate::linear::{Loss, score_to_log_prob};
use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::time::Instant;
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

/// One label tree: topology plus node classifiers (whose entry outputs have storage `O`).
#[derive(Clone, Debug, PartialEq)]
pub struct TreeArrays<U, F, O = U> {
    /// Per node, `depth << 1 | is_leaf`.
    pub node_info: U,
    /// Per node, the start of its outputs (length nodes + 1).
    pub out_start: U,
    /// Child node ids or label ids.
    pub out_ids: U,
    /// Per output, the classifier's bias.
    pub out_bias: F,
    /// The node classifiers' weights.
    pub chunks: Chunks<U, F, O>,
}

/// Reusable per-thread buffers, so a search allocates nothing once warm.
#[derive(Clone, Debug, Default)]
pub struct SearchScratch {
    acc: Vec<f32>,
    level: Vec<(u32, f32)>,
    next: Vec<(u32, f32)>,
    frontier: BinaryHeap<Frontier>,
    pub(super) best: BinaryHeap<Ranked>,
    /// The tree search's wider selection ([`SearchLimits::keep`]): a pool cut back to its best
    /// `keep` whenever it doubles ([`Wide`]).
    wide: Vec<Ranked>,
    per_depth: Vec<u32>,
    /// The flat scorer's sums over the outputs a query reaches ([`super::flat`]).
    pub(super) reached: SparseAcc,
    /// The flat scorer's sums when the outputs are too many for a slot each.
    pub(super) sorted: SortedAcc,
    /// The flat block scorer's buffers (`TreeArrays::flat_prune`).
    pub(super) prune: PruneScratch,
    /// The labels reached, each with its path log-probability.
    pub candidates: Vec<Candidate>,
}

/// A label a search reached, with its score and depth.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Candidate {
    /// The label (a tree's output id; the model maps block-local ids to global ones).
    pub label: u32,
    /// Its score: the path log-probability in a tree's search, the probability once the model
    /// has merged the trees, the reranked probability after the rerank stage.
    pub score: f32,
    /// The depth at which it was reached (its leaf's depth + 1).
    pub depth: u32,
}

impl Candidate {
    /// Best first: the higher score, then the lower label id.
    pub fn ranking(a: &Candidate, b: &Candidate) -> std::cmp::Ordering {
        b.score.total_cmp(&a.score).then(a.label.cmp(&b.label))
    }
}

/// An unexpanded node; the heap pops the largest path log-probability first (ties: smaller id).
#[derive(Clone, Copy, Debug)]
struct Frontier {
    logp: f32,
    node: u32,
}

impl SearchScratch {
    /// Slots in the output accumulator: at least [`OUT_SLOTS`] once a search has scored a node,
    /// more after a node with more outputs.
    pub fn acc_len(&self) -> usize {
        self.acc.len()
    }

    /// What the flat block scorer did for the last query it answered.
    pub fn prune_stats(&self) -> PruneStats {
        self.prune.stats
    }
}

impl PartialEq for Frontier {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Frontier {}

impl PartialOrd for Frontier {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Frontier {
    fn cmp(&self, other: &Self) -> Ordering {
        self.logp
            .total_cmp(&other.logp)
            .then(other.node.cmp(&self.node))
    }
}

/// A scored label, ordered so that the heap's top is the *worst* kept label: lower score, or on a
/// tie the larger label id (the final ranking puts smaller ids first).
#[derive(Clone, Copy, Debug)]
pub(super) struct Ranked {
    pub(super) logp: f32,
    pub(super) label: u32,
    pub(super) depth: u32,
}

impl Ranked {
    /// Offers `self` to `best`, the `k` best labels so far (`k` ≥ 1): kept when `best` has
    /// room or `self` beats its worst.
    #[inline]
    pub(super) fn offer(self, best: &mut BinaryHeap<Ranked>, k: usize) {
        if best.len() < k {
            best.push(self);
        } else if let Some(mut worst) = best.peek_mut() {
            // Most labels fall below the worst kept, and one float comparison tells (the full
            // order differs from it only for NaN and signed zeros, which it still decides).
            if self.logp < worst.logp {
                return;
            }
            if self < *worst {
                *worst = self;
            }
        }
    }
}

/// The best `keep` of the labels offered, kept in a pool that is cut back to them whenever it
/// reaches twice that: a label below the worst kept at the last cut is not pushed, so an offer
/// is one comparison (amortised), and nothing that could rank among the best `keep` is dropped.
struct Wide {
    keep: usize,
    /// The worst log-probability kept at the last cut (−∞ before one).
    floor: f32,
}

impl Wide {
    #[inline]
    fn offer(&mut self, pool: &mut Vec<Ranked>, cand: Ranked) {
        // Strictly below the floor (a NaN is never below it) means at least `keep` kept labels
        // rank ahead of it.
        if cand.logp < self.floor {
            return;
        }
        pool.push(cand);
        if pool.len() >= 2 * self.keep {
            self.cut(pool);
        }
    }

    /// Cuts `pool` to its best `keep` (in no particular order) and raises the floor to the worst
    /// of them.
    fn cut(&mut self, pool: &mut Vec<Ranked>) {
        if pool.len() > self.keep && self.keep > 0 {
            pool.select_nth_unstable(self.keep - 1);
            pool.truncate(self.keep);
            if let Some(worst) = pool.last() {
                self.floor = worst.logp;
            }
        }
    }
}

impl PartialEq for Ranked {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Ranked {}

impl PartialOrd for Ranked {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Ranked {
    fn cmp(&self, other: &Self) -> Ordering {
        other
            .logp
            .total_cmp(&self.logp)
            .then(self.label.cmp(&other.label))
    }
}

/// What one search did, for per-request statistics.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct SearchStats {
    /// Nodes whose classifiers were evaluated.
    pub nodes_evaluated: u32,
    /// Classifiers evaluated: the outputs (children or labels) of every node evaluated. For a
    /// flat model this is the number of labels scored.
    pub outputs_evaluated: u32,
    /// The early-stopping bound skipped part of the tree (the search stopped with nodes left, or
    /// left children unqueued).
    pub early_stopped: bool,
    /// The beam cap dropped a node the search would otherwise have expanded.
    pub beam_capped: bool,
    /// The deadline passed and the search returned what it had.
    pub deadline_hit: bool,
    /// Weight entries read by the flat scorer ([`TreeArrays::flat_search`]; 0 for the search).
    pub postings: u32,
}

/// The limits of one early-stopping search.
#[derive(Clone, Copy, Debug)]
pub struct SearchLimits {
    /// How many labels to find (at least 1).
    pub k: usize,
    /// How many labels the tree search returns, when more than `k` (0: `k`): the best `k`
    /// exactly, and after them the best of the other labels in the leaves that search scored,
    /// at no extra node. A reranker's candidates. The flat scorers, which score no leaf beyond
    /// the postings, return their exact best `keep`.
    pub keep: usize,
    /// The most nodes expanded per depth (`usize::MAX`: unbounded).
    pub beam: usize,
    /// Return what was found once this instant has passed.
    pub deadline: Option<Instant>,
}

/// Node expansions between two looks at the clock: a look is cheap next to an expansion, but
/// not free (docs/decisions/0006-early-stopping-search.md).
const DEADLINE_CHECK_EVERY: u32 = 8;

impl<U, F, O> TreeArrays<U, F, O>
where
    U: std::ops::Deref<Target = [u32]>,
    F: std::ops::Deref<Target = [f32]>,
    O: EntryOuts,
{
    /// The number of nodes.
    pub fn n_nodes(&self) -> usize {
        self.node_info.len()
    }

    /// The same tree over plain slices. Memory-mapped sections check their bounds on every
    /// dereference, so the search dereferences each array once per query through this view.
    pub fn borrowed(&self) -> TreeArrays<&[u32], &[f32], OutSlice<'_>> {
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
        self.check(n_labels, Some(n_features))
    }

    /// [`TreeArrays::validate`] without the O(weights) checks of the chunks' entries
    /// ([`Chunks::validate_structure`]): O(nodes + outputs), so opening a model does not grow
    /// with its weights. Searching such a tree cannot panic or loop; a corrupt weight entry can
    /// only give wrong scores.
    pub fn validate_structure(&self, n_labels: usize) -> Result<(), TreeViewError> {
        self.check(n_labels, None)
    }

    fn check(&self, n_labels: usize, n_features: Option<usize>) -> Result<(), TreeViewError> {
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
        match n_features {
            Some(d) => self.chunks.validate(&n_outputs, d)?,
            None => self.chunks.validate_structure(&n_outputs)?,
        }
        Ok(())
    }

    /// Scores node `i`'s outputs for the query into the first slots of `acc` (bias included).
    /// `acc` keeps at least [`OUT_SLOTS`] slots, so that the entry loops need no bounds check;
    /// the slots past the node's outputs are never read.
    #[inline]
    fn score_node(
        &self,
        i: usize,
        q_idx: &[u32],
        q_val: &[f32],
        dense: &[f32],
        acc: &mut Vec<f32>,
    ) {
        let bias = &self.out_bias[self.out_start[i] as usize..self.out_start[i + 1] as usize];
        let len = bias.len().max(OUT_SLOTS);
        if acc.len() < len {
            acc.resize(len, 0.0);
        }
        acc[..bias.len()].copy_from_slice(bias);
        self.chunks.score(i, q_idx, q_val, dense, acc);
    }

    /// The depth-aware early-stopping search (see the module docs for why it is exact): fills
    /// `scratch.candidates` with the `limits.k` best labels found, as
    /// `(label, log-probability, depth)` in no particular order, and with the best others of the
    /// leaves it scored up to `limits.keep`.
    pub fn early_stop_search(
        &self,
        q_idx: &[u32],
        q_val: &[f32],
        dense: &[f32],
        loss: Loss,
        limits: &SearchLimits,
        scratch: &mut SearchScratch,
    ) -> SearchStats {
        let k = limits.k.max(1);
        let keep = limits.keep.max(k);
        let beam = limits.beam.max(1);
        let mut stats = SearchStats::default();
        scratch.candidates.clear();
        scratch.frontier.clear();
        scratch.best.clear();
        scratch.wide.clear();
        let mut wide = Wide {
            keep,
            floor: f32::NEG_INFINITY,
        };
        scratch.per_depth.iter_mut().for_each(|c| *c = 0);
        scratch.frontier.push(Frontier { logp: 0.0, node: 0 });
        while let Some(&top) = scratch.frontier.peek() {
            if scratch.best.len() == k && scratch.best.peek().is_some_and(|kth| kth.logp > top.logp)
            {
                stats.early_stopped = true;
                break;
            }
            if let Some(deadline) = limits.deadline {
                if stats.nodes_evaluated % DEADLINE_CHECK_EVERY == 0 && Instant::now() >= deadline {
                    stats.deadline_hit = true;
                    break;
                }
            }
            scratch.frontier.pop();
            let node = top.node as usize;
            let depth = self.depth(node);
            let d = depth as usize;
            if d >= scratch.per_depth.len() {
                scratch.per_depth.resize(d + 1, 0);
            }
            if scratch.per_depth[d] as usize >= beam {
                stats.beam_capped = true;
                continue;
            }
            scratch.per_depth[d] += 1;
            self.score_node(node, q_idx, q_val, dense, &mut scratch.acc);
            stats.nodes_evaluated += 1;
            let outs = self.outputs(node);
            stats.outputs_evaluated += outs.len() as u32;
            if self.is_leaf(node) {
                let ranked = outs.iter().zip(&scratch.acc).map(|(&label, &s)| Ranked {
                    logp: top.logp + score_to_log_prob(loss, s),
                    label,
                    depth: depth + 1,
                });
                // Two loops rather than a test per label: the search without `keep` pays nothing.
                if keep > k {
                    for cand in ranked {
                        wide.offer(&mut scratch.wide, cand);
                        cand.offer(&mut scratch.best, k);
                    }
                } else {
                    for cand in ranked {
                        cand.offer(&mut scratch.best, k);
                    }
                }
            } else {
                let kth = if scratch.best.len() == k {
                    scratch.best.peek().map(|r| r.logp)
                } else {
                    None
                };
                for (&child, &s) in outs.iter().zip(&scratch.acc) {
                    let logp = top.logp + score_to_log_prob(loss, s);
                    if kth.is_some_and(|kth| logp < kth) {
                        stats.early_stopped = true;
                        continue;
                    }
                    scratch.frontier.push(Frontier { logp, node: child });
                }
            }
        }
        // The wider selection holds the best `keep` of every label offered, so the best `k`
        // among them too.
        let found: &[Ranked] = if keep > k {
            wide.cut(&mut scratch.wide);
            &scratch.wide
        } else {
            scratch.best.as_slice()
        };
        scratch.candidates.extend(found.iter().map(|r| Candidate {
            label: r.label,
            score: r.logp,
            depth: r.depth,
        }));
        stats
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
                stats.outputs_evaluated += outs.len() as u32;
                if self.is_leaf(node) {
                    let depth = self.depth(node) + 1;
                    scratch
                        .candidates
                        .extend(outs.iter().zip(&scratch.acc).map(|(&l, &s)| Candidate {
                            label: l,
                            score: logp + score_to_log_prob(loss, s),
                            depth,
                        }));
                } else {
                    scratch.next.extend(
                        outs.iter()
                            .zip(&scratch.acc)
                            .map(|(&c, &s)| (c, logp + score_to_log_prob(loss, s))),
                    );
                }
            }
            if scratch.next.len() > beam {
                stats.beam_capped = true;
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
