//! The flat scorer: a one-vs-all model answered like an inverted index.
//!
//! A flat model is a tree whose root is its only leaf, so [`TreeArrays::early_stop_search`]
//! scores it by copying every label's bias, adding the query's postings, and ranking all L
//! labels: O(L) per query whatever the query. Its chunk is already feature-major (per feature, a
//! run of `(label, weight)` entries, an inverted index), so [`TreeArrays::flat_search`] reads only
//! the query's postings into a [`SparseAcc`], ranks the labels they reach, and takes the rest
//! from the **bias order**: every label ranked by its bias alone. A label no posting reaches
//! scores exactly its bias, so the best unreached labels are the first unreached ones in that
//! order, and the walk stops once they can no longer enter the top k. The cost is
//! O(postings + reached + k), not O(L). A tree of more than [`SORT_OUTPUTS`] labels, whose
//! per-label slots would not fit the cache, sums the postings in a
//! [`SortedAcc`](super::chunk::SortedAcc) instead: listed as (label, product), radix-sorted by
//! label, stably, and summed per label from its bias, in the same order, to the same bits.
//! A query whose postings outnumber a quarter of the labels
//! ([`SCAN_SHARE`]) is scanned instead: there the per-label pass costs less than the sparse
//! sums' bookkeeping per posting. The scan then ranks only the labels near the top: one pass
//! finds the k-th largest sum, and only sums within a small margin of it get a log-probability
//! and a place in the size-k selection, which is what the per-label pass spent its time on.
//! The link is monotone, so a check on the margin's log-probability proves that no label below
//! it could enter; when the check fails (a saturating link, ties at the top) every label is
//! ranked, as the scan ranks them.
//! A flat tree stored without a bias order (a BP block) is scanned that way by
//! [`TreeArrays::flat_select`].
//!
//! **Block index (not stored).** [`TreeArrays::flat_blocks`] cuts the outputs into blocks and
//! bounds each block's best score from per-block weight bounds, and [`TreeArrays::flat_prune`]
//! scores whole blocks, best bound first, until no block can enter the top k (exact block-max
//! pruning). On the measured sets the bounds cost about as much as the postings they save, so
//! it answers more slowly than the scan with its selection pass; it is built in memory for
//! benchmarks only (docs/decisions/0055-flat-selection-pass-not-block-pruning.md).
//!
//! **Why the answers are the scan's to the bit.** A reached label's sum starts at its bias and
//! adds `w · x` per found feature in query order, as the scan's slot does
//! ([`crate::tree::chunk`]'s `postings` module); every label's log-probability is computed by the
//! same expression as the search's (`0 + score_to_log_prob`); and the candidates are kept by the
//! same size-k selection under the same order (higher log-probability, then smaller label id).
//! The bias order is sorted by that very key, computed by that very expression, so walking it
//! meets the unreached labels in ranking order, and no monotonicity of the link is assumed.
//!
//! The order is stored per flat tree as section `{prefix}.flat.order` (one output position per
//! label, `u32`). A bundle without it (written before it, or a BP router or block, which do not
//! store one) is scored by the scan. At the structural open only its length is checked (O(1));
//! the verified open checks, in one pass, that it is a permutation sorted by the key. A corrupt
//! order, opened without the verified checks, can only give wrong answers.

use super::chunk::EntryOuts;
use super::view::{
    Candidate, Ranked, SearchLimits, SearchScratch, SearchStats, TreeArrays, TreeViewError,
};
use crate::linear::{Loss, score_to_log_prob};
use std::cmp::Ordering;
use std::time::Instant;

mod blocks;
pub use blocks::*;

/// A query with more postings than the labels over this is scored by the scan.
pub const SCAN_SHARE: usize = 4;

/// A flat tree with more outputs than this sums a query's postings by sorting them by output
/// ([`SortedAcc`](super::chunk::SortedAcc)), not in a slot per output: past it, the slots
/// outgrow the cache and nearly every output reached costs a miss.
pub const SORT_OUTPUTS: usize = 1 << 18;

/// The suffix of a flat tree's bias-order section: `{prefix}.flat.order`.
pub const ORDER_SECTION: &str = "flat.order";

/// A flat output's log-probability, by the expression the search uses for a leaf under the root
/// (the root's path log-probability 0 plus the link), so that the stored order and the queries
/// agree to the bit (it also turns a link's −0 into +0, as the search does).
#[inline]
fn log_prob(loss: Loss, s: f32) -> f32 {
    0.0 + score_to_log_prob(loss, s)
}

/// Moves the size-k selection's labels into the scratch's candidates, in no particular order.
fn fill_candidates(scratch: &mut SearchScratch) {
    let best = &scratch.best;
    scratch.candidates.extend(best.iter().map(|r| Candidate {
        label: r.label,
        score: r.logp,
        depth: r.depth,
    }));
}

/// The ranking order of `(log-probability, label)`: higher log-probability first, then the
/// smaller label id.
#[inline]
fn rank(a: (f32, u32), b: (f32, u32)) -> Ordering {
    b.0.total_cmp(&a.0).then(a.1.cmp(&b.1))
}

/// The bias order of a flat tree's outputs (`out_ids`, `out_bias`): every output position,
/// ranked by the log-probability of its bias alone under `loss`, ties to the smaller label id.
pub fn bias_order(out_ids: &[u32], out_bias: &[f32], loss: Loss) -> Vec<u32> {
    let keys: Vec<(f32, u32)> = out_ids
        .iter()
        .zip(out_bias)
        .map(|(&l, &b)| (log_prob(loss, b), l))
        .collect();
    let mut order: Vec<u32> = (0..keys.len() as u32).collect();
    // Label ids are distinct, so the order is total and the sort's stability does not matter.
    order.sort_unstable_by(|&a, &b| rank(keys[a as usize], keys[b as usize]));
    order
}

impl<U, F, O> TreeArrays<U, F, O>
where
    U: std::ops::Deref<Target = [u32]>,
    F: std::ops::Deref<Target = [f32]>,
    O: EntryOuts,
{
    /// Whether the tree is flat: its root is its only node, a leaf.
    pub fn is_flat(&self) -> bool {
        self.n_nodes() == 1 && self.is_leaf(0)
    }

    /// Checks a stored bias order against the tree (an empty one stands for none): a flat tree
    /// and one position per output; with `deep`, also that it is a permutation ranked as
    /// [`bias_order`] ranks under `loss`. Call after the tree's own validation.
    pub fn check_flat_order(
        &self,
        order: &[u32],
        loss: Loss,
        deep: bool,
    ) -> Result<(), TreeViewError> {
        if order.is_empty() {
            return Ok(());
        }
        let bad = |what: String| Err(TreeViewError::Structure { node: 0, what });
        if !self.is_flat() {
            return bad("a bias order is stored for a tree that is not flat".into());
        }
        let (ids, n) = (self.outputs(0), self.outputs(0).len());
        if order.len() != n {
            return Err(TreeViewError::Length {
                array: ORDER_SECTION,
                found: order.len(),
                expected: n,
            });
        }
        if !deep {
            return Ok(());
        }
        let mut seen = vec![false; n];
        let mut prev: Option<(f32, u32)> = None;
        for &p in order {
            match seen.get_mut(p as usize) {
                None => return bad(format!("bias order: position {p} is not below {n}")),
                Some(true) => return bad(format!("bias order: position {p} appears twice")),
                Some(s) => *s = true,
            }
            let key = (log_prob(loss, self.out_bias[p as usize]), ids[p as usize]);
            if prev.is_some_and(|q| rank(q, key) != Ordering::Less) {
                return bad(format!("bias order: position {p} is out of rank"));
            }
            prev = Some(key);
        }
        Ok(())
    }

    /// [`TreeArrays::early_stop_search`] for a flat tree with its bias `order`
    /// ([`bias_order`]), reading only the query's postings (see the module docs): the same
    /// candidates, with the same log-probabilities to the bit. A tree that is not flat, an
    /// empty or mis-sized order, or a root that stores rows takes the search itself.
    /// `outputs_evaluated` counts the labels scored (reached, then taken from the order) and
    /// `postings` the entries read.
    // `early_stop_search`'s arguments plus the order, so that callers swap one for the other.
    #[allow(clippy::too_many_arguments)]
    pub fn flat_search(
        &self,
        order: &[u32],
        q_idx: &[u32],
        q_val: &[f32],
        dense: &[f32],
        loss: Loss,
        limits: &SearchLimits,
        scratch: &mut SearchScratch,
    ) -> SearchStats {
        let sorted = self.out_ids.len() > SORT_OUTPUTS;
        self.flat_search_with(order, q_idx, q_val, dense, loss, limits, scratch, sorted)
    }

    /// [`TreeArrays::flat_search`], summing the postings in a [`SortedAcc`] when `sorted`, in a
    /// [`SparseAcc`](super::chunk::SparseAcc) otherwise.
    #[allow(clippy::too_many_arguments)]
    fn flat_search_with(
        &self,
        order: &[u32],
        q_idx: &[u32],
        q_val: &[f32],
        dense: &[f32],
        loss: Loss,
        limits: &SearchLimits,
        scratch: &mut SearchScratch,
        sorted: bool,
    ) -> SearchStats {
        let n = self.out_ids.len();
        if order.len() != n || n == 0 || !self.is_flat() || self.chunks.has_rows(0) {
            return self.early_stop_search(q_idx, q_val, dense, loss, limits, scratch);
        }
        let k = limits.k.max(limits.keep).max(1);
        let mut stats = SearchStats::default();
        scratch.candidates.clear();
        scratch.best.clear();
        // The search looks at the clock before its first node.
        if limits.deadline.is_some_and(|d| Instant::now() >= d) {
            stats.deadline_hit = true;
            return stats;
        }
        // A query whose postings cover much of the label set is cheaper to scan: the scan adds
        // a posting in a tight loop and pays one pass over the labels, where the sparse sums
        // pay a stamp check per posting (the share is measured by `benches/flat.rs`).
        let postings = self.chunks.count_postings(0, q_idx, q_val);
        if postings > n / SCAN_SHARE {
            let mut stats = self.select_candidates(q_idx, q_val, dense, loss, k, scratch);
            stats.postings = postings as u32;
            return stats;
        }
        let (ids, bias) = (&self.out_ids[..], &self.out_bias[..]);
        let depth = self.depth(0) + 1;
        let n_reached = if sorted {
            let acc = &mut scratch.sorted;
            self.chunks.sum_postings_sorted(0, q_idx, q_val, bias, acc);
            for (o, sum) in acc.reached_sums() {
                let Some(&label) = ids.get(o as usize) else {
                    continue;
                };
                let logp = log_prob(loss, sum);
                Ranked { logp, label, depth }.offer(&mut scratch.best, k);
            }
            acc.n_reached()
        } else {
            let reached = &mut scratch.reached;
            reached.start(n);
            self.chunks.add_postings(0, q_idx, q_val, bias, reached);
            for &o in reached.touched() {
                let o = o as usize;
                Ranked {
                    logp: log_prob(loss, reached.sum(o)),
                    label: ids[o],
                    depth,
                }
                .offer(&mut scratch.best, k);
            }
            reached.touched().len()
        };
        let (sparse, sorted_acc) = (&scratch.reached, &scratch.sorted);
        let reached = |o: usize| {
            if sorted {
                sorted_acc.reached(o as u32)
            } else {
                sparse.reached(o)
            }
        };
        // The unreached labels in ranking order: once one is not kept, none after it can be.
        let mut from_order = 0u32;
        for &o in order {
            let o = o as usize;
            if reached(o) {
                continue;
            }
            let (Some(&label), Some(&b)) = (ids.get(o), bias.get(o)) else {
                continue;
            };
            let cand = Ranked {
                logp: log_prob(loss, b),
                label,
                depth,
            };
            from_order += 1;
            if scratch.best.len() == k && scratch.best.peek().is_some_and(|worst| cand >= *worst) {
                break;
            }
            cand.offer(&mut scratch.best, k);
        }
        stats.nodes_evaluated = 1;
        stats.outputs_evaluated = n_reached as u32 + from_order;
        stats.postings = postings as u32;
        fill_candidates(scratch);
        stats
    }

    /// [`TreeArrays::early_stop_search`] for a flat tree stored without a bias order (a BP
    /// block): the scan with its selection pass, which ranks only the labels near the top
    /// (see the module docs). The same candidates, with the same log-probabilities to the bit.
    /// A tree that is not flat, or a root that stores rows, takes the search itself.
    /// `outputs_evaluated` counts the labels ranked.
    pub fn flat_select(
        &self,
        q_idx: &[u32],
        q_val: &[f32],
        dense: &[f32],
        loss: Loss,
        limits: &SearchLimits,
        scratch: &mut SearchScratch,
    ) -> SearchStats {
        if self.out_ids.is_empty() || !self.is_flat() || self.chunks.has_rows(0) {
            return self.early_stop_search(q_idx, q_val, dense, loss, limits, scratch);
        }
        scratch.candidates.clear();
        scratch.best.clear();
        // The search looks at the clock before its first node.
        if limits.deadline.is_some_and(|d| Instant::now() >= d) {
            return SearchStats {
                deadline_hit: true,
                ..SearchStats::default()
            };
        }
        self.select_candidates(
            q_idx,
            q_val,
            dense,
            loss,
            limits.k.max(limits.keep).max(1),
            scratch,
        )
    }

    /// The scan with its selection pass, its labels moved to the scratch's candidates, and
    /// its statistics (the postings not counted).
    fn select_candidates(
        &self,
        q_idx: &[u32],
        q_val: &[f32],
        dense: &[f32],
        loss: Loss,
        k: usize,
        scratch: &mut SearchScratch,
    ) -> SearchStats {
        let scored = self.scan_select(q_idx, q_val, dense, loss, k, scratch);
        fill_candidates(scratch);
        SearchStats {
            nodes_evaluated: 1,
            outputs_evaluated: scored as u32,
            ..SearchStats::default()
        }
    }
}

/// The relative slack below the k-th log-probability under which a block is skipped: the link
/// (`exp`, `ln_1p`) may round a larger score to a log-probability a few units in the last place
/// lower, never this far.
const SLACK: f32 = 1.0 / (1u32 << 20) as f32;

impl<U, F, O> TreeArrays<U, F, O>
where
    U: std::ops::Deref<Target = [u32]>,
    F: std::ops::Deref<Target = [f32]>,
    O: EntryOuts,
{
    /// The scan's candidates for a flat tree that stores entries, ranking only the labels
    /// near the top: the root is scored as the search scores it (every bias, then the query's
    /// entries, [`Chunks::score`](super::chunk::Chunks::score)), so every sum is the scan's.
    /// Then one pass finds the k-th largest raw score `s_k` (noting on the way the few labels
    /// that may score near it), and only the labels scoring at least `t = s_k − δ` get a
    /// log-probability and are offered to the size-k selection. A
    /// label below `t` has a log-probability at most the link's at `t` (the link is monotone,
    /// up to [`SLACK`]); when that is below the k-th kept log-probability, no such label can
    /// enter, and the candidates are the scan's. Otherwise (the link saturates, as the squared
    /// hinge does at 1, so labels below `t` may tie the k-th) every label is offered, as the
    /// scan does. A NaN sum is always offered. Returns the number of labels offered (all of
    /// them when it fell back).
    fn scan_select(
        &self,
        q_idx: &[u32],
        q_val: &[f32],
        dense: &[f32],
        loss: Loss,
        k: usize,
        scratch: &mut SearchScratch,
    ) -> usize {
        let (ids, bias) = (&self.out_ids[..], &self.out_bias[..]);
        let n = bias.len().min(ids.len());
        // The slots past the labels only let the scoring loop skip its bounds checks; only a
        // corrupt entry writes there, and nothing reads them, so they are sized once and never
        // cleared.
        let acc = &mut scratch.prune.acc;
        let slots = bias.len().max(super::chunk::OUT_SLOTS);
        if acc.len() < slots {
            acc.resize(slots, 0.0);
        }
        acc[..bias.len()].copy_from_slice(bias);
        self.chunks.score(0, q_idx, q_val, dense, &mut acc[..slots]);
        let sums = &acc[..n];
        let depth = self.depth(0) + 1;
        let best = &mut scratch.best;
        let offer = |best: &mut std::collections::BinaryHeap<Ranked>, i: usize, s: f32| {
            Ranked {
                logp: log_prob(loss, s),
                label: ids[i],
                depth,
            }
            .offer(best, k)
        };
        // One pass finds the k largest sums (NaN never compares above, so never counts) and
        // notes every label at or above `near(min)`, `min` being the k-th largest so far: `min`
        // only grows, up to `s_k`, and `near` is monotone, so the noted labels include every
        // one at or above `t = near(s_k)`, and no second pass over the labels is needed.
        let top = &mut scratch.prune.top;
        top.clear();
        top.resize(k, f32::NEG_INFINITY);
        let noted = &mut scratch.prune.near;
        noted.clear();
        const LANES: usize = 16;
        let near = |s: f32| s - s.abs().max(1.0) / 256.0;
        let mut min = f32::NEG_INFINITY;
        let mut low = f32::NEG_INFINITY;
        let mut visit = |i: usize, v: f32, min: &mut f32, low: &mut f32| {
            if v >= *low || v.is_nan() {
                noted.push(i as u32);
            }
            if v > *min {
                // `top` is ascending: drop its first, insert `v` in place.
                let at = top.partition_point(|&t| t < v);
                top.copy_within(1..at, 0);
                top[at - 1] = v;
                *min = top[0];
                *low = near(*min);
            }
        };
        let mut chunks = sums.chunks_exact(LANES);
        let mut base = 0;
        for c in &mut chunks {
            if c.iter()
                .fold(false, |any, &v| any | (v >= low) | v.is_nan())
            {
                for (j, &v) in c.iter().enumerate() {
                    visit(base + j, v, &mut min, &mut low);
                }
            }
            base += LANES;
        }
        for (j, &v) in chunks.remainder().iter().enumerate() {
            visit(base + j, v, &mut min, &mut low);
        }
        let s_k = top[0];
        let t = near(s_k);
        let mut offered = 0;
        if n > k && t.is_finite() {
            for &i in noted.iter() {
                let i = i as usize;
                let v = sums[i];
                if v >= t || v.is_nan() {
                    offer(best, i, v);
                    offered += 1;
                }
            }
            let ft = log_prob(loss, t);
            let safe = best.len() == k
                && best.peek().is_some_and(|worst| {
                    let theta = worst.logp;
                    ft + 2.0 * (ft.abs() + theta.abs()) * SLACK < theta
                });
            if safe {
                return offered;
            }
            best.clear();
        }
        for (i, &s) in sums.iter().enumerate() {
            offer(best, i, s);
        }
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tree::chunk::{ChunksBuilder, IndexChoice, RowChoice, pack_entries};
    use crate::tree::view::SearchScratch;
    use proptest::prelude::*;
    use rand::{RngExt, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    const DIM: usize = 60;

    /// Values from a small set, negatives included, so that sums and biases tie often.
    pub(super) fn pick(rng: &mut ChaCha8Rng, set: &[f32]) -> f32 {
        set[rng.random_range(0..set.len())]
    }

    /// A random flat model: `n` labels, each over a random sparse set of features (some labels
    /// over none), weights and biases from small sets with negatives, stored with `index`, as
    /// entries, packed as bfloat16 when `packed`.
    pub(super) fn random_flat(
        n: usize,
        seed: u64,
        index: IndexChoice,
        packed: bool,
    ) -> TreeArrays<Vec<u32>, Vec<f32>> {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let density = rng.random_range(1..12);
        let mut cols: Vec<(Vec<u32>, Vec<f32>)> = Vec::new();
        let mut out_bias = Vec::new();
        for _ in 0..n {
            let idx: Vec<u32> = (0..DIM as u32)
                .filter(|_| rng.random_range(0..40) < density)
                .collect();
            let val = idx
                .iter()
                .map(|_| pick(&mut rng, &[-2.0, -0.5, -0.25, 0.25, 0.5, 1.0, 3.0]))
                .collect();
            cols.push((idx, val));
            out_bias.push(pick(&mut rng, &[-3.0, -1.0, -0.5, 0.0, 0.5, 1.0, 2.0]));
        }
        let mut chunks = ChunksBuilder::new();
        chunks
            .push_node_as(
                cols.iter().map(|(i, v)| (&i[..], &v[..])),
                index,
                RowChoice::Entries,
            )
            .unwrap();
        if packed {
            chunks.entry_packed = pack_entries(&chunks.entry_out, &chunks.entry_weight).unwrap();
            chunks.entry_out = Vec::new();
            chunks.entry_weight = Vec::new();
        }
        TreeArrays {
            node_info: vec![1],
            out_start: vec![0, n as u32],
            out_ids: (0..n as u32).collect(),
            out_bias,
            chunks,
        }
    }

    /// A random sparse query with negative values: sorted ids, values, and its dense copy.
    pub(super) fn random_query(seed: u64) -> (Vec<u32>, Vec<f32>, Vec<f32>) {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let keep = rng.random_range(1..20);
        let idx: Vec<u32> = (0..DIM as u32 + 5)
            .filter(|_| rng.random_range(0..40) < keep)
            .collect();
        let val: Vec<f32> = idx
            .iter()
            .map(|_| pick(&mut rng, &[-1.0, -0.5, 0.25, 0.5, 1.0, 0.3]))
            .collect();
        let mut dense = vec![0.0; DIM + 5];
        for (&i, &v) in idx.iter().zip(&val) {
            dense[i as usize] = v;
        }
        (idx, val, dense)
    }

    /// Candidates in ranking order, scores as bits.
    pub(super) fn ranked(c: &[Candidate]) -> Vec<(u32, u32, u32)> {
        let mut c = c.to_vec();
        c.sort_by(Candidate::ranking);
        c.into_iter()
            .map(|c| (c.label, c.score.to_bits(), c.depth))
            .collect()
    }

    fn loss_of(i: u8) -> Loss {
        [Loss::SquaredHinge, Loss::Logistic, Loss::Hinge][usize::from(i % 3)]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]

        /// The flat scorer and the block scorer return the scan's candidates: the same labels,
        /// log-probabilities equal to the bit, for any k, loss, index and entry layout, block
        /// size and record threshold, with negative weights, negative query values and many
        /// ties.
        #[test]
        fn flat_search_equals_the_scan(
            n in 1usize..400,
            k in 1usize..25,
            loss in any::<u8>(),
            hash in any::<bool>(),
            packed in any::<bool>(),
            shift in 0u32..7,
            long in 0u32..6,
            model_seed in any::<u64>(),
            query_seed in any::<u64>(),
        ) {
            let index = if hash { IndexChoice::Hash } else { IndexChoice::Rank };
            let tree = random_flat(n, model_seed, index, packed);
            let loss = loss_of(loss);
            let order = bias_order(&tree.out_ids, &tree.out_bias, loss);
            prop_assert!(tree.check_flat_order(&order, loss, true).is_ok());
            let (qi, qv, dense) = random_query(query_seed);
            let limits = SearchLimits { k, keep: 0, beam: usize::MAX, deadline: None };
            let mut s = SearchScratch::default();
            let scan = tree.early_stop_search(&qi, &qv, &dense, loss, &limits, &mut s);
            let want = ranked(&s.candidates);
            // Twice each with one scratch: the second query reuses the stamps and buffers.
            for sorted in [false, true, false, true] {
                let flat = tree.flat_search_with(
                    &order, &qi, &qv, &dense, loss, &limits, &mut s, sorted,
                );
                prop_assert_eq!(ranked(&s.candidates), want.clone());
                prop_assert_eq!(flat.nodes_evaluated, scan.nodes_evaluated);
                prop_assert!(flat.outputs_evaluated as usize <= n);
                prop_assert!(!flat.early_stopped && !flat.deadline_hit && !flat.beam_capped);
                // Without the order (a BP block): the scan with its selection pass.
                let sel = tree.flat_select(&qi, &qv, &dense, loss, &limits, &mut s);
                prop_assert_eq!(ranked(&s.candidates), want.clone());
                prop_assert_eq!(sel.nodes_evaluated, scan.nodes_evaluated);
                prop_assert!(sel.outputs_evaluated as usize <= n);
                prop_assert!(!sel.early_stopped && !sel.deadline_hit && !sel.beam_capped);
            }
            let blocks = tree.flat_blocks(shift, long).unwrap();
            prop_assert!(tree.check_flat_blocks(&blocks, true).is_ok());
            for _ in 0..2 {
                let got = tree.flat_prune(&blocks, &order, &qi, &qv, &dense, loss, &limits, &mut s);
                prop_assert_eq!(ranked(&s.candidates), want.clone());
                prop_assert!(got.outputs_evaluated as usize <= n);
                prop_assert_eq!(s.prune_stats().n_blocks as usize, n.div_ceil(1 << shift));
            }
        }
    }

    /// Outputs past one radix pass of the sorted sums: both ways of summing answer as the scan,
    /// on queries of one or two features, few enough postings not to be scanned.
    #[test]
    fn sorted_sums_over_several_radix_passes_answer_as_the_scan() {
        let mut summed = 0;
        for (n, seed) in [(5000, 3), (70_000, 4)] {
            let tree = random_flat(n, seed, IndexChoice::Rank, false);
            for loss in [Loss::SquaredHinge, Loss::Logistic] {
                let order = bias_order(&tree.out_ids, &tree.out_bias, loss);
                for f in 0..DIM as u32 {
                    let mut qi = vec![f, (f * 7 + 3) % DIM as u32];
                    qi.sort_unstable();
                    qi.dedup();
                    let qv: Vec<f32> = qi.iter().map(|&j| [-0.5, 0.75][j as usize % 2]).collect();
                    let mut dense = vec![0.0; DIM + 5];
                    for (&j, &v) in qi.iter().zip(&qv) {
                        dense[j as usize] = v;
                    }
                    let limits = SearchLimits {
                        k: 7,
                        keep: 0,
                        beam: usize::MAX,
                        deadline: None,
                    };
                    let mut s = SearchScratch::default();
                    tree.early_stop_search(&qi, &qv, &dense, loss, &limits, &mut s);
                    let want = ranked(&s.candidates);
                    for sorted in [true, false] {
                        let st = tree.flat_search_with(
                            &order, &qi, &qv, &dense, loss, &limits, &mut s, sorted,
                        );
                        assert_eq!(ranked(&s.candidates), want, "n {n}, feature {f}, {loss:?}");
                        summed += usize::from(sorted && st.postings as usize <= n / SCAN_SHARE);
                    }
                }
            }
        }
        assert!(summed > 0, "no query took the sorted sums");
    }

    /// Scores spread over a wide range, so that most blocks' bounds fall below the k-th score:
    /// the scorer then skips blocks, and still answers as the scan does.
    #[test]
    fn the_selection_pass_offers_few_labels_and_keeps_the_answers() {
        let mut tree = random_flat(3000, 12, IndexChoice::Rank, false);
        for (o, b) in tree.out_bias.iter_mut().enumerate() {
            *b = -((o % 89) as f32) * 0.37;
        }
        let order = bias_order(&tree.out_ids, &tree.out_bias, Loss::Logistic);
        let mut fast = 0;
        for (q, loss) in (0..30).zip(
            [Loss::Logistic, Loss::SquaredHinge, Loss::Hinge]
                .iter()
                .cycle(),
        ) {
            let order = if *loss == Loss::Logistic {
                order.clone()
            } else {
                bias_order(&tree.out_ids, &tree.out_bias, *loss)
            };
            let (qi, qv, dense) = random_query(300 + q);
            for k in [1, 5, 40] {
                let limits = SearchLimits {
                    k,
                    keep: 0,
                    beam: usize::MAX,
                    deadline: None,
                };
                let mut s = SearchScratch::default();
                tree.early_stop_search(&qi, &qv, &dense, *loss, &limits, &mut s);
                let want = ranked(&s.candidates);
                let st = tree.flat_search(&order, &qi, &qv, &dense, *loss, &limits, &mut s);
                assert_eq!(ranked(&s.candidates), want, "query {q}, k = {k}, {loss:?}");
                if (st.postings as usize) > 3000 / SCAN_SHARE
                    && (st.outputs_evaluated as usize) < 3000
                {
                    fast += 1;
                }
            }
        }
        assert!(fast > 0);
    }

    #[test]
    fn the_links_are_monotone_within_the_slack() {
        for loss in [Loss::SquaredHinge, Loss::Logistic, Loss::Hinge] {
            let mut prev = f32::NEG_INFINITY;
            let mut s = -120.0f32;
            while s < 120.0 {
                let lp = log_prob(loss, s);
                assert!(lp >= prev - prev.abs() * SLACK, "{loss:?} at {s}");
                prev = lp;
                s = if s.abs() < 1e-3 {
                    s + 1e-7
                } else {
                    s + s.abs() * 3e-6
                };
            }
        }
    }

    #[test]
    fn labels_no_posting_reaches_come_from_the_bias_order() {
        let tree = random_flat(2000, 3, IndexChoice::Rank, false);
        let loss = Loss::SquaredHinge;
        let order = bias_order(&tree.out_ids, &tree.out_bias, loss);
        // One feature: only its postings and the k best biases are scored.
        let (qi, qv) = (vec![7u32], vec![0.5f32]);
        let mut dense = vec![0.0; DIM];
        dense[7] = 0.5;
        let limits = SearchLimits {
            k: 5,
            keep: 0,
            beam: usize::MAX,
            deadline: None,
        };
        let mut s = SearchScratch::default();
        let stats = tree.flat_search(&order, &qi, &qv, &dense, loss, &limits, &mut s);
        let got = ranked(&s.candidates);
        let scan = tree.early_stop_search(&qi, &qv, &dense, loss, &limits, &mut s);
        assert_eq!(got, ranked(&s.candidates));
        assert_eq!(scan.outputs_evaluated, 2000);
        let postings = stats.postings as usize;
        assert!(postings > 0);
        if postings <= 2000 / SCAN_SHARE {
            assert!(stats.outputs_evaluated as usize <= postings + limits.k + 1);
        } else {
            assert_eq!(stats.outputs_evaluated, 2000);
        }
    }

    #[test]
    fn a_passed_deadline_returns_nothing_as_the_search_does() {
        let tree = random_flat(50, 1, IndexChoice::Rank, false);
        let order = bias_order(&tree.out_ids, &tree.out_bias, Loss::Logistic);
        let (qi, qv, dense) = random_query(2);
        let limits = SearchLimits {
            k: 3,
            keep: 0,
            beam: usize::MAX,
            deadline: Some(Instant::now()),
        };
        let mut s = SearchScratch::default();
        let stats = tree.flat_search(&order, &qi, &qv, &dense, Loss::Logistic, &limits, &mut s);
        assert!(stats.deadline_hit && s.candidates.is_empty());
    }

    #[test]
    fn a_bad_bias_order_is_refused() {
        let tree = random_flat(30, 5, IndexChoice::Hash, false);
        let loss = Loss::SquaredHinge;
        let order = bias_order(&tree.out_ids, &tree.out_bias, loss);
        assert!(tree.check_flat_order(&order, loss, true).is_ok());
        assert!(tree.check_flat_order(&[], loss, true).is_ok());
        // A wrong length fails even the structural check.
        assert!(matches!(
            tree.check_flat_order(&order[1..], loss, false),
            Err(TreeViewError::Length { .. })
        ));
        // Out of rank, a repeated position and one past the outputs fail the deep check only.
        let mut swapped = order.clone();
        swapped.swap(0, 29);
        let mut repeated = order.clone();
        repeated[3] = repeated[4];
        let mut past = order.clone();
        past[0] = 30;
        for bad in [swapped, repeated, past] {
            assert!(tree.check_flat_order(&bad, loss, false).is_ok());
            assert!(matches!(
                tree.check_flat_order(&bad, loss, true),
                Err(TreeViewError::Structure { .. })
            ));
            // Scoring with it cannot panic.
            let (qi, qv, dense) = random_query(9);
            let limits = SearchLimits {
                k: 4,
                keep: 0,
                beam: usize::MAX,
                deadline: None,
            };
            tree.flat_search(
                &bad,
                &qi,
                &qv,
                &dense,
                loss,
                &limits,
                &mut SearchScratch::default(),
            );
        }
    }

    #[test]
    fn an_order_on_a_tree_that_is_not_flat_is_refused() {
        let mut tree = random_flat(4, 5, IndexChoice::Hash, false);
        tree.node_info = vec![0];
        let order = bias_order(&tree.out_ids, &tree.out_bias, Loss::Hinge);
        assert!(tree.check_flat_order(&order, Loss::Hinge, false).is_err());
    }
}
