//! The stored BP stage and its query-time half: route a query to its best block(s), then search
//! only those blocks' models.
//!
//! | section | type | what |
//! | --- | --- | --- |
//! | `bp.router.*` | tree arrays | the router: one leaf whose q outputs are the blocks, a one-vs-all linear classifier |
//! | `bp.{b}.labels` | u32 | block b's label cluster: local label id → global label id, strictly increasing |
//! | `bp.{b}.t.*` | tree arrays | block b's model over local label ids (a flat model is a one-leaf tree) |
//!
//! The tree arrays are those of [`TreeArrays`] under the given prefix. Everything is validated at
//! open: the router is a valid tree over q "labels", each block tree is valid over its cluster's
//! size, and every global label id is below L.

use crate::linear::Loss;
use crate::tree::chunk::EntryOuts;
use crate::tree::view::{
    Candidate, SearchLimits, SearchScratch, SearchStats, TreeArrays, TreeViewError,
};
use thiserror::Error;

/// Why stored BP sections were refused.
#[derive(Debug, Error, PartialEq)]
pub enum BpViewError {
    /// The router's arrays are invalid.
    #[error("BP router: {0}")]
    Router(TreeViewError),
    /// The router is not a single leaf over the q blocks.
    #[error("BP router: {0}")]
    RouterShape(String),
    /// A block's model is invalid.
    #[error("BP block {block}: {source}")]
    Block {
        /// The block.
        block: usize,
        /// What is wrong.
        source: TreeViewError,
    },
    /// A block's label map is invalid.
    #[error("BP block {block} labels: {what}")]
    Labels {
        /// The block.
        block: usize,
        /// What is wrong.
        what: String,
    },
}

/// One block: its model over local label ids and the map to global ids.
#[derive(Clone, Debug, PartialEq)]
pub struct BlockArrays<U, F, O = U> {
    /// Local label id → global label id, strictly increasing.
    pub labels: U,
    /// The block's model over local label ids.
    pub tree: TreeArrays<U, F, O>,
}

/// The BP stage: the router and one model per block.
#[derive(Clone, Debug, PartialEq)]
pub struct BpArrays<U, F, O = U> {
    /// A single leaf whose outputs are the blocks.
    pub router: TreeArrays<U, F, O>,
    /// The blocks, in router output order.
    pub blocks: Vec<BlockArrays<U, F, O>>,
}

/// Per-query buffers of the BP search (no allocation once warm).
#[derive(Clone, Debug, Default)]
pub struct BpScratch {
    search: SearchScratch,
    routed: Vec<(u32, f32)>,
}

impl BpScratch {
    /// Slots in the block searches' output accumulator ([`SearchScratch::acc_len`]).
    pub fn acc_len(&self) -> usize {
        self.search.acc_len()
    }
}

/// What one BP search did.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct BpStats {
    /// The searches' statistics summed over the router and the blocks searched (`early_stopped`:
    /// in every block searched).
    pub search: SearchStats,
}

/// How one query searches the blocks.
#[derive(Clone, Copy, Debug)]
pub struct BpQuery<'a> {
    /// The early-stopping search's limits within a block (or `k` and `beam` for the beam search).
    pub limits: &'a SearchLimits,
    /// Early stopping (true) or the level-wise beam search.
    pub early_stop: bool,
    /// How many blocks to search (clamped to 1..=q).
    pub blocks: usize,
    /// The loss the classifiers were trained with.
    pub loss: Loss,
    /// Search flat blocks by the scan over every label instead of the selection pass (the
    /// same answers; the reference that benchmarks interleave with).
    pub flat_scan: bool,
}

impl<U, F, O> BpArrays<U, F, O>
where
    U: std::ops::Deref<Target = [u32]>,
    F: std::ops::Deref<Target = [f32]>,
    O: EntryOuts,
{
    /// The number of blocks q.
    pub fn q(&self) -> usize {
        self.blocks.len()
    }

    /// Checks the router and every block against `n_labels` labels and `n_features` features,
    /// every weight entry included.
    pub fn validate(&self, n_labels: usize, n_features: usize) -> Result<(), BpViewError> {
        self.check(n_labels, Some(n_features))
    }

    /// [`BpArrays::validate`] without the O(weights) checks of the router's and blocks' chunk
    /// entries ([`TreeArrays::validate_structure`]): O(nodes + outputs + cluster labels). A search
    /// of such arrays cannot panic or loop; a corrupt weight entry can only give wrong scores.
    pub fn validate_structure(&self, n_labels: usize) -> Result<(), BpViewError> {
        self.check(n_labels, None)
    }

    fn check(&self, n_labels: usize, n_features: Option<usize>) -> Result<(), BpViewError> {
        let tree_check = |tree: &TreeArrays<U, F, O>, n_outputs: usize| match n_features {
            Some(d) => tree.validate(n_outputs, d),
            None => tree.validate_structure(n_outputs),
        };
        let q = self.q();
        if q == 0 {
            return Err(BpViewError::RouterShape("there are no blocks".into()));
        }
        tree_check(&self.router, q).map_err(BpViewError::Router)?;
        if self.router.n_nodes() != 1
            || !self.router.is_leaf(0)
            || self.router.outputs(0).len() != q
        {
            return Err(BpViewError::RouterShape(format!(
                "expected one leaf with {q} outputs, found {} nodes",
                self.router.n_nodes()
            )));
        }
        for (b, block) in self.blocks.iter().enumerate() {
            let labels: &[u32] = &block.labels;
            if labels.is_empty() {
                return Err(BpViewError::Labels {
                    block: b,
                    what: "the label cluster is empty".into(),
                });
            }
            if let Some(&l) = labels.iter().find(|&&l| l as usize >= n_labels) {
                return Err(BpViewError::Labels {
                    block: b,
                    what: format!("label id {l} is not below {n_labels}"),
                });
            }
            if labels.windows(2).any(|w| w[0] >= w[1]) {
                return Err(BpViewError::Labels {
                    block: b,
                    what: "label ids are not strictly increasing".into(),
                });
            }
            tree_check(&block.tree, labels.len())
                .map_err(|source| BpViewError::Block { block: b, source })?;
        }
        Ok(())
    }

    /// Routes the prepared query (`q_idx`/`q_val` sorted, `dense` its dense copy) to its best
    /// `query.blocks` blocks and searches them, writing `(global label, log-probability, depth)`
    /// candidates into `cands` and the blocks searched, best first, into `blocks_out`.
    ///
    /// The router is the root of a two-level tree: a label's log-probability is its block's
    /// router log-probability plus its log-probability within the block, so labels of different
    /// blocks compare on one scale (a label found in several blocks keeps its best). Without the
    /// router's term a confident label of a poorly matching block would outrank the best block's
    /// labels.
    #[allow(clippy::too_many_arguments)]
    pub fn search(
        &self,
        q_idx: &[u32],
        q_val: &[f32],
        dense: &[f32],
        query: &BpQuery<'_>,
        scratch: &mut BpScratch,
        cands: &mut Vec<Candidate>,
        blocks_out: &mut Vec<u32>,
    ) -> BpStats {
        let router = self.router.borrowed();
        let b = query.blocks.clamp(1, self.q());
        let route_limits = SearchLimits {
            k: b,
            keep: 0,
            beam: usize::MAX,
            deadline: None,
        };
        let mut total = router.early_stop_search(
            q_idx,
            q_val,
            dense,
            query.loss,
            &route_limits,
            &mut scratch.search,
        );
        total.early_stopped = true;
        scratch.routed.clear();
        scratch
            .routed
            .extend(scratch.search.candidates.iter().map(|c| (c.label, c.score)));
        scratch
            .routed
            .sort_unstable_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        cands.clear();
        blocks_out.clear();
        for &(blk, route_logp) in &scratch.routed {
            // Router outputs are validated to be below q at open.
            let block = &self.blocks[blk as usize];
            let tree = block.tree.borrowed();
            let stats = if query.early_stop {
                // A flat block has no bias order: the scan with its selection pass (the
                // search's candidates to the bit; any other tree takes the search).
                let search = if query.flat_scan {
                    TreeArrays::early_stop_search
                } else {
                    TreeArrays::flat_select
                };
                search(
                    &tree,
                    q_idx,
                    q_val,
                    dense,
                    query.loss,
                    query.limits,
                    &mut scratch.search,
                )
            } else {
                tree.beam_search(
                    q_idx,
                    q_val,
                    dense,
                    query.loss,
                    query.limits.beam,
                    &mut scratch.search,
                )
            };
            total.nodes_evaluated += stats.nodes_evaluated;
            total.outputs_evaluated += stats.outputs_evaluated;
            total.early_stopped &= stats.early_stopped;
            total.beam_capped |= stats.beam_capped;
            total.deadline_hit |= stats.deadline_hit;
            let map: &[u32] = &block.labels;
            cands.extend(scratch.search.candidates.iter().map(|c| Candidate {
                label: map[c.label as usize],
                score: route_logp + c.score,
                depth: c.depth,
            }));
            blocks_out.push(blk);
        }
        if blocks_out.len() > 1 {
            keep_best_per_label(cands);
        }
        BpStats { search: total }
    }
}

/// Keeps one candidate per label, the best-scoring (ties: the shallower), in label order.
fn keep_best_per_label(cands: &mut Vec<Candidate>) {
    cands.sort_unstable_by(|a, b| {
        a.label
            .cmp(&b.label)
            .then(b.score.total_cmp(&a.score))
            .then(a.depth.cmp(&b.depth))
    });
    cands.dedup_by_key(|c| c.label);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merged_blocks_keep_the_best_score_per_label() {
        let cand = |label, score, depth| Candidate {
            label,
            score,
            depth,
        };
        let mut c = vec![
            cand(4, -0.5, 1),
            cand(2, -0.1, 1),
            cand(4, -0.2, 2),
            cand(2, -0.3, 1),
        ];
        keep_best_per_label(&mut c);
        assert_eq!(c, vec![cand(2, -0.1, 1), cand(4, -0.2, 2)]);
    }
}
