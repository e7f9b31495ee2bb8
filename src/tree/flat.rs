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
//! O(postings + reached + k), not O(L). A query whose postings outnumber a quarter of the labels
//! ([`SCAN_SHARE`]) is scanned instead: there the per-label pass costs less than the sparse
//! sums' bookkeeping per posting. The scan then ranks only the labels near the top: one pass
//! finds the k-th largest sum, and only sums within a small margin of it get a log-probability
//! and a place in the size-k selection, which is what the per-label pass spent its time on.
//! The link is monotone, so a check on the margin's log-probability proves that no label below
//! it could enter; when the check fails (a saturating link, ties at the top) every label is
//! ranked, as the scan ranks them.
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

/// A query with more postings than the labels over this is scored by the scan.
pub const SCAN_SHARE: usize = 4;

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
        let n = self.out_ids.len();
        if order.len() != n || n == 0 || !self.is_flat() || self.chunks.has_rows(0) {
            return self.early_stop_search(q_idx, q_val, dense, loss, limits, scratch);
        }
        let k = limits.k.max(1);
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
            let scored = self.scan_select(q_idx, q_val, dense, loss, k, scratch);
            stats.nodes_evaluated = 1;
            stats.outputs_evaluated = scored as u32;
            stats.postings = postings as u32;
            fill_candidates(scratch);
            return stats;
        }
        let (ids, bias) = (&self.out_ids[..], &self.out_bias[..]);
        let depth = self.depth(0) + 1;
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
        // The unreached labels in ranking order: once one is not kept, none after it can be.
        let mut from_order = 0u32;
        for &o in order {
            let o = o as usize;
            if reached.reached(o) {
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
        stats.outputs_evaluated = reached.touched().len() as u32 + from_order;
        stats.postings = postings as u32;
        fill_candidates(scratch);
        stats
    }
}

/// Words per block record.
const REC: usize = 3;
/// The block shift (blocks of 2^shift outputs) `benches/flat.rs` builds unless told otherwise.
pub const DEFAULT_SHIFT: u32 = 6;
/// The fewest entries for which a feature gets block records unless told otherwise; a shorter
/// feature's bounds are read from its entries at query time.
pub const DEFAULT_LONG: u32 = 64;
/// The largest block shift a stored shape may name.
const MAX_SHIFT: u32 = 16;

/// `v` rounded to a bfloat16 no smaller (`up`) or no larger (`!up`) than it, as the upper half
/// of an `f32`'s bits. NaN stays NaN, infinities stay.
fn bf16_outward(v: f32, up: bool) -> u32 {
    let bits = v.to_bits();
    let hi = bits >> 16;
    if v.is_nan() || bits & 0xffff == 0 {
        return hi;
    }
    // Truncation rounds toward zero: below a positive value, above a negative one.
    if (v > 0.0) == up { hi + 1 } else { hi }
}

/// A block's weight bounds packed into one word: the largest weight rounded up to a bfloat16 in
/// the high half, the smallest rounded down in the low half.
pub fn pack_bounds(max: f32, min: f32) -> u32 {
    (bf16_outward(max, true) << 16) | (bf16_outward(min, false) & 0xffff)
}

/// The `(max, min)` bounds of a packed word ([`pack_bounds`]).
#[inline]
pub fn unpack_bounds(word: u32) -> (f32, f32) {
    (
        f32::from_bits(word & 0xffff_0000),
        f32::from_bits(word << 16),
    )
}

/// A flat tree's block index: its outputs cut into blocks of `2^shift` consecutive positions,
/// with, per block, the bounds of its biases, and per long feature, per block its entries
/// reach, the bounds of its weights there and where its run of entries starts. A query bounds
/// every block's best score from these, then scores whole blocks, best bound first, and stops
/// once a block's bound cannot enter the top k ([`TreeArrays::flat_prune`]).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FlatBlocks<U> {
    /// `[shift, long]`: blocks of `2^shift` outputs, records for features of at least `long`
    /// entries; empty when there is no block index.
    pub shape: U,
    /// Per block, the bits of its largest and smallest bias.
    pub block_bias: U,
    /// Per feature position of the root, plus one: the start of its records (in records).
    pub rec_start: U,
    /// Per record, three words: block, packed weight bounds ([`pack_bounds`]), first entry of
    /// its run.
    pub rec: U,
}

/// What [`TreeArrays::flat_prune`] did for the last query, beyond its [`SearchStats`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PruneStats {
    /// Block records read to bound the blocks.
    pub records: u32,
    /// Entries read to bound blocks of features without records.
    pub bound_entries: u32,
    /// Entries added while scoring blocks.
    pub scored_entries: u32,
    /// Blocks scored.
    pub blocks: u32,
    /// Blocks in all.
    pub n_blocks: u32,
}

/// One run of a query feature's entries within one block, linked to the previous run that
/// reached the same block.
#[derive(Clone, Copy, Debug, Default)]
struct Link {
    next: u32,
    feat: u32,
    start: u32,
    end: u32,
}

/// No run: the end of a block's list.
const NONE: u32 = u32::MAX;

/// The block scorer's per-query buffers; warm, a query allocates nothing.
#[derive(Clone, Debug, Default)]
pub struct PruneScratch {
    ub: Vec<f32>,
    head: Vec<u32>,
    links: Vec<Link>,
    x: Vec<f32>,
    keys: Vec<u64>,
    acc: Vec<f32>,
    top: Vec<f32>,
    runs: Vec<(u32, u32, u32)>,
    /// The last query's counts.
    pub stats: PruneStats,
}

/// `v`'s bits mapped so that unsigned order is `f32::total_cmp`'s order.
#[inline]
fn sortable(v: f32) -> u32 {
    let b = v.to_bits();
    if b >> 31 == 1 { !b } else { b | 0x8000_0000 }
}

/// The inverse of [`sortable`].
#[inline]
fn unsortable(k: u32) -> f32 {
    f32::from_bits(if k >> 31 == 1 { k & 0x7fff_ffff } else { !k })
}

impl<U> FlatBlocks<U>
where
    U: std::ops::Deref<Target = [u32]>,
{
    /// Whether there is no block index.
    pub fn is_empty(&self) -> bool {
        self.shape.is_empty()
    }

    /// The block shift and the long-feature threshold.
    fn shape(&self) -> Option<(u32, u32)> {
        match *self.shape {
            [shift, long] if shift <= MAX_SHIFT => Some((shift, long)),
            _ => None,
        }
    }

    /// Feature position `p`'s record range.
    #[inline]
    fn records(&self, p: usize) -> (usize, usize) {
        match self.rec_start.get(p..p + 2) {
            Some(&[a, b]) => (a as usize, b as usize),
            _ => (0, 0),
        }
    }

    /// The size of the index in bytes.
    pub fn byte_len(&self) -> usize {
        4 * (self.shape.len() + self.block_bias.len() + self.rec_start.len() + self.rec.len())
    }
}

impl<U, F, O> TreeArrays<U, F, O>
where
    U: std::ops::Deref<Target = [u32]>,
    F: std::ops::Deref<Target = [f32]>,
    O: EntryOuts,
{
    /// The block index of a flat tree, blocks of `2^shift` outputs, records for every feature
    /// with at least `long` entries; `None` for a tree that is not flat, stores rows, a shift
    /// over 16, or entries whose outputs do not increase within a feature.
    pub fn flat_blocks(&self, shift: u32, long: u32) -> Option<FlatBlocks<Vec<u32>>> {
        if !self.is_flat() || self.chunks.has_rows(0) || shift > MAX_SHIFT {
            return None;
        }
        let n = self.out_ids.len();
        let nb = n.div_ceil(1 << shift);
        let mut block_bias = Vec::with_capacity(2 * nb);
        for b in self.out_bias.chunks(1 << shift) {
            let max = b.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let min = b.iter().copied().fold(f32::INFINITY, f32::min);
            let nan = b.iter().any(|v| v.is_nan());
            let (max, min) = if nan {
                (f32::NAN, f32::NAN)
            } else {
                (max, min)
            };
            block_bias.extend([max.to_bits(), min.to_bits()]);
        }
        let Some(&[f0, f1]) = self.chunks.feat_start.get(0..2) else {
            return None;
        };
        let mut rec_start = vec![0u32];
        let mut rec = Vec::new();
        for p in f0 as usize..f1 as usize {
            let Some(&[a, b]) = self.chunks.entry_start.get(p..p + 2) else {
                return None;
            };
            let (a, b) = (a as usize, b as usize);
            let long_feature = b - a >= long as usize;
            let mut ok_outputs = true;
            let increasing = self.chunks.for_runs(a, b, shift, |r| {
                ok_outputs &= (r.block as usize) < nb;
                if long_feature {
                    rec.extend([r.block, pack_bounds(r.max, r.min), r.start as u32]);
                }
            });
            if !increasing || !ok_outputs {
                return None;
            }
            rec_start.push(u32::try_from(rec.len() / REC).ok()?);
        }
        Some(FlatBlocks {
            shape: vec![shift, long],
            block_bias,
            rec_start,
            rec,
        })
    }

    /// Checks a stored block index against the tree (an empty one stands for none): its shape
    /// and lengths (O(1)); with `deep`, also that it is the index [`TreeArrays::flat_blocks`]
    /// builds, which checks the entries' order and every bound.
    pub fn check_flat_blocks<V: std::ops::Deref<Target = [u32]>>(
        &self,
        blocks: &FlatBlocks<V>,
        deep: bool,
    ) -> Result<(), TreeViewError> {
        let none = blocks.shape.is_empty()
            && blocks.block_bias.is_empty()
            && blocks.rec_start.is_empty()
            && blocks.rec.is_empty();
        if none {
            return Ok(());
        }
        let bad = |what: String| Err(TreeViewError::Structure { node: 0, what });
        if !self.is_flat() || self.chunks.has_rows(0) {
            return bad("a block index is stored for a tree that is not flat".into());
        }
        let Some((shift, _)) = blocks.shape() else {
            return bad(format!("block index: bad shape {:?}", &*blocks.shape));
        };
        let n = self.out_ids.len();
        let n_feats = self.chunks.feat_start.get(1).copied().unwrap_or(0) as usize;
        let lengths = [
            (
                "block bias",
                blocks.block_bias.len(),
                2 * n.div_ceil(1 << shift),
            ),
            ("record starts", blocks.rec_start.len(), n_feats + 1),
            (
                "records",
                blocks.rec.len(),
                REC * blocks.rec_start.last().copied().unwrap_or(0) as usize,
            ),
        ];
        for (what, found, expected) in lengths {
            if found != expected {
                return bad(format!(
                    "block index: {what} has {found} values, expected {expected}"
                ));
            }
        }
        if deep {
            let (shift, long) = blocks.shape().unwrap_or_default();
            let want = self.flat_blocks(shift, long);
            let same = want.as_ref().is_some_and(|w| {
                w.block_bias == *blocks.block_bias
                    && w.rec_start == *blocks.rec_start
                    && w.rec == *blocks.rec
            });
            if !same {
                return bad("block index: does not match the weights".into());
            }
        }
        Ok(())
    }

    /// [`TreeArrays::flat_search`] through the block index `blocks`
    /// ([`TreeArrays::flat_blocks`]): the same candidates with the same log-probabilities to
    /// the bit, scoring only the blocks whose bound can enter the top k (see the module docs).
    /// An empty or unusable index takes [`TreeArrays::flat_search`] with `order`.
    /// `outputs_evaluated` counts the labels scored and `postings` the entries read; the
    /// scratch's [`PruneScratch::stats`] has the rest.
    #[allow(clippy::too_many_arguments)]
    pub fn flat_prune<V: std::ops::Deref<Target = [u32]>>(
        &self,
        blocks: &FlatBlocks<V>,
        order: &[u32],
        q_idx: &[u32],
        q_val: &[f32],
        dense: &[f32],
        loss: Loss,
        limits: &SearchLimits,
        scratch: &mut SearchScratch,
    ) -> SearchStats {
        let n = self.out_ids.len();
        let n_feats = self.chunks.feat_start.get(1).copied().unwrap_or(0) as usize;
        let shape = blocks.shape();
        let usable = shape.is_some_and(|(shift, _)| {
            blocks.block_bias.len() == 2 * n.div_ceil(1 << shift)
                && blocks.rec_start.len() == n_feats + 1
        });
        let (Some((shift, _)), true) = (shape, usable && n > 0 && self.is_flat()) else {
            return self.flat_search(order, q_idx, q_val, dense, loss, limits, scratch);
        };
        if self.chunks.has_rows(0) {
            return self.flat_search(order, q_idx, q_val, dense, loss, limits, scratch);
        }
        let k = limits.k.max(1);
        let mut stats = SearchStats::default();
        scratch.candidates.clear();
        scratch.best.clear();
        if limits.deadline.is_some_and(|d| Instant::now() >= d) {
            stats.deadline_hit = true;
            return stats;
        }
        let ps = &mut scratch.prune;
        let nb = n.div_ceil(1 << shift);
        let mut st = PruneStats {
            n_blocks: nb as u32,
            ..PruneStats::default()
        };
        // Every block's bound starts at its largest bias; the magnitude of every sum's terms
        // (for the rounding margin) at the largest bias magnitude.
        ps.ub.clear();
        ps.head.clear();
        ps.head.resize(nb, NONE);
        ps.links.clear();
        ps.x.clear();
        let mut mag = 0f32;
        for pair in blocks.block_bias.chunks_exact(2) {
            let (max, min) = (f32::from_bits(pair[0]), f32::from_bits(pair[1]));
            ps.ub.push(max);
            mag = mag.max(max.abs()).max(min.abs());
        }
        // Per query feature, in query order: per block it reaches, the most `w · x` can add
        // there (never below 0: a label of the block it does not reach gets 0), and a link from
        // the block to the run of entries to add when the block is scored.
        let chunks = &self.chunks;
        let mut bound_entries = 0usize;
        let mut records = 0usize;
        chunks.for_found(0, q_idx, q_val, |p, a, b, x| {
            let feat = ps.x.len() as u32;
            ps.x.push(x);
            let mut wmax = 0f32;
            let mut link = |block: u32, start: usize, end: usize, hi: f32, lo: f32| {
                let t = if x >= 0.0 { hi * x } else { lo * x };
                if let Some(u) = ps.ub.get_mut(block as usize) {
                    // A NaN bound makes the block's bound NaN, which is never skipped.
                    if t > 0.0 || t.is_nan() {
                        *u += t;
                    }
                    let next =
                        std::mem::replace(&mut ps.head[block as usize], ps.links.len() as u32);
                    ps.links.push(Link {
                        next,
                        feat,
                        start: start as u32,
                        end: end as u32,
                    });
                }
                wmax = wmax.max(hi.abs()).max(lo.abs());
            };
            let (r0, r1) = blocks.records(p);
            if r1 > r0 {
                let recs = blocks.rec.get(REC * r0..REC * r1).unwrap_or(&[]);
                records += recs.len() / REC;
                let mut it = recs.chunks_exact(REC).peekable();
                while let Some(r) = it.next() {
                    let end = it.peek().map_or(b, |nx| nx[2] as usize);
                    let (hi, lo) = unpack_bounds(r[1]);
                    link(r[0], r[2] as usize, end, hi, lo);
                }
            } else {
                bound_entries += b.saturating_sub(a);
                chunks.for_runs(a, b, shift, |r| link(r.block, r.start, r.end, r.max, r.min));
            }
            mag += wmax * x.abs();
        });
        // The computed bound and a label's computed sum each differ from their exact values by
        // at most γ · (the sum of their terms' magnitudes), γ = terms · 2^-24 (Higham), and
        // `mag` bounds those magnitudes: widen every bound by twice that, and a little more
        // for `mag`'s own rounding.
        let terms = ps.x.len() as f32 + 2.0;
        let margin = 2.0 * terms * mag * (1.0 + 1e-3) / (1u32 << 23) as f32;
        ps.keys.clear();
        ps.keys.extend(ps.ub.iter().enumerate().map(|(b, &u)| {
            let u = u + margin;
            let u = if u.is_nan() { f32::INFINITY } else { u };
            (u64::from(sortable(u)) << 32) | b as u64
        }));
        let mut heap = std::collections::BinaryHeap::from(std::mem::take(&mut ps.keys));
        let (ids, bias) = (&self.out_ids[..], &self.out_bias[..]);
        let depth = self.depth(0) + 1;
        let mut scored_entries = 0usize;
        let mut labels = 0usize;
        while let Some(key) = heap.pop() {
            let b = (key & 0xffff_ffff) as usize;
            let bound = unsortable((key >> 32) as u32);
            if scratch.best.len() == k {
                if let Some(worst) = scratch.best.peek() {
                    // Every label of the block scores at most `bound`, and the link is
                    // monotone, so its log-probability is at most `log_prob(bound)`; the slack
                    // covers the link's own rounding. Later blocks bound lower still.
                    let theta = worst.logp;
                    let lp = log_prob(loss, bound);
                    if lp < theta - theta.abs() * SLACK {
                        break;
                    }
                }
            }
            let lo = b << shift;
            let hi = (lo + (1 << shift)).min(n);
            let Some(bias) = bias.get(lo..hi) else {
                continue;
            };
            st.blocks += 1;
            ps.acc.clear();
            ps.acc.extend_from_slice(bias);
            // The block's runs, linked last feature first: gather, then add in query order.
            ps.runs.clear();
            let mut l = ps.head.get(b).copied().unwrap_or(NONE);
            while let Some(link) = ps.links.get(l as usize) {
                ps.runs.push((link.feat, link.start, link.end));
                l = link.next;
            }
            for &(f, a, e) in ps.runs.iter().rev() {
                let x = ps.x.get(f as usize).copied().unwrap_or(0.0);
                scored_entries +=
                    chunks.add_entries_from(a as usize, e as usize, lo as u32, x, &mut ps.acc);
            }
            labels += hi - lo;
            for (i, &s) in ps.acc.iter().enumerate() {
                let Some(&label) = ids.get(lo + i) else {
                    continue;
                };
                Ranked {
                    logp: log_prob(loss, s),
                    label,
                    depth,
                }
                .offer(&mut scratch.best, k);
            }
        }
        ps.keys = heap.into_vec();
        st.records = records as u32;
        st.bound_entries = bound_entries as u32;
        st.scored_entries = scored_entries as u32;
        ps.stats = st;
        stats.nodes_evaluated = 1;
        stats.outputs_evaluated = labels as u32;
        stats.postings = (bound_entries + scored_entries) as u32;
        fill_candidates(scratch);
        stats
    }
}

impl<U, F, O> TreeArrays<U, F, O>
where
    U: std::ops::Deref<Target = [u32]>,
    F: std::ops::Deref<Target = [f32]>,
    O: EntryOuts,
{
    /// The same flat model with its outputs in another order: output position `i` of the copy
    /// is position `perm[i]` of this one (its label, bias and weights), and every feature's
    /// entries are re-sorted by the new positions. Weights are stored as `f32`s (a packed
    /// weight widens exactly), so every label's sum is the same to the bit: it still adds its
    /// weights in query order. `None` for a tree that is not flat, stores rows, or a `perm`
    /// that is not a permutation of its outputs. Putting labels with similar weights side by
    /// side gives the block index tighter bounds.
    pub fn flat_permuted(&self, perm: &[u32]) -> Option<TreeArrays<Vec<u32>, Vec<f32>>> {
        let n = self.out_ids.len();
        if !self.is_flat() || self.chunks.has_rows(0) || perm.len() != n {
            return None;
        }
        let mut inv = vec![u32::MAX; n];
        for (i, &p) in perm.iter().enumerate() {
            let slot = inv.get_mut(p as usize)?;
            if *slot != u32::MAX {
                return None;
            }
            *slot = i as u32;
        }
        let c = &self.chunks;
        let mut entry_out = Vec::new();
        let mut entry_weight = Vec::new();
        let mut run: Vec<(u32, f32)> = Vec::new();
        for w in c.entry_start.windows(2) {
            run.clear();
            c.for_entries(w[0] as usize, w[1] as usize, |o, w| {
                run.push((inv.get(o as usize).copied().unwrap_or(u32::MAX), w));
            });
            run.sort_unstable_by_key(|&(o, _)| o);
            entry_out.extend(run.iter().map(|&(o, _)| o));
            entry_weight.extend(run.iter().map(|&(_, w)| w));
        }
        let v = |u: &U| u.to_vec();
        Some(TreeArrays {
            node_info: v(&self.node_info),
            out_start: v(&self.out_start),
            out_ids: perm.iter().map(|&p| self.out_ids[p as usize]).collect(),
            out_bias: perm.iter().map(|&p| self.out_bias[p as usize]).collect(),
            chunks: super::chunk::Chunks {
                feat_start: v(&c.feat_start),
                feat: v(&c.feat),
                entry_start: v(&c.entry_start),
                entry_out,
                entry_weight,
                entry_packed: Vec::new(),
                hash_start: v(&c.hash_start),
                hash: v(&c.hash),
                rank_start: v(&c.rank_start),
                rank: v(&c.rank),
                row_start: Vec::new(),
                row_weight: Vec::new(),
                row_packed: Vec::new(),
            },
        })
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
    /// Then one pass finds the k-th largest raw score `s_k`, and only the labels scoring at
    /// least `t = s_k − δ` get a log-probability and are offered to the size-k selection. A
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
        let acc = &mut scratch.prune.acc;
        acc.clear();
        acc.extend_from_slice(bias);
        acc.resize(bias.len().max(super::chunk::OUT_SLOTS), 0.0);
        self.chunks.score(0, q_idx, q_val, dense, acc);
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
        // The k largest sums (NaN never compares above, so never counts).
        let top = &mut scratch.prune.top;
        top.clear();
        top.resize(k, f32::NEG_INFINITY);
        const LANES: usize = 16;
        let mut min = f32::NEG_INFINITY;
        let mut take = |v: f32, min: &mut f32| {
            if v > *min {
                // `top` is ascending: drop its first, insert `v` in place.
                let at = top.partition_point(|&t| t < v);
                top.copy_within(1..at, 0);
                top[at - 1] = v;
                *min = top[0];
            }
        };
        let mut chunks = sums.chunks_exact(LANES);
        for c in &mut chunks {
            if c.iter().fold(false, |any, &v| any | (v > min)) {
                c.iter().for_each(|&v| take(v, &mut min));
            }
        }
        chunks.remainder().iter().for_each(|&v| take(v, &mut min));
        let s_k = top[0];
        let t = s_k - s_k.abs().max(1.0) / 256.0;
        let mut offered = 0;
        if n > k && t.is_finite() {
            let mut chunks = sums.chunks_exact(LANES);
            let mut base = 0;
            for c in &mut chunks {
                if c.iter().fold(false, |any, &v| any | (v >= t) | v.is_nan()) {
                    for (j, &v) in c.iter().enumerate() {
                        if v >= t || v.is_nan() {
                            offer(best, base + j, v);
                            offered += 1;
                        }
                    }
                }
                base += LANES;
            }
            for (j, &v) in chunks.remainder().iter().enumerate() {
                if v >= t || v.is_nan() {
                    offer(best, base + j, v);
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
    fn pick(rng: &mut ChaCha8Rng, set: &[f32]) -> f32 {
        set[rng.random_range(0..set.len())]
    }

    /// A random flat model: `n` labels, each over a random sparse set of features (some labels
    /// over none), weights and biases from small sets with negatives, stored with `index`, as
    /// entries, packed as bfloat16 when `packed`.
    fn random_flat(
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
    fn random_query(seed: u64) -> (Vec<u32>, Vec<f32>, Vec<f32>) {
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
    fn ranked(c: &[Candidate]) -> Vec<(u32, u32, u32)> {
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
            let limits = SearchLimits { k, beam: usize::MAX, deadline: None };
            let mut s = SearchScratch::default();
            let scan = tree.early_stop_search(&qi, &qv, &dense, loss, &limits, &mut s);
            let want = ranked(&s.candidates);
            // Twice with one scratch: the second query reuses the stamps.
            for _ in 0..2 {
                let flat = tree.flat_search(&order, &qi, &qv, &dense, loss, &limits, &mut s);
                prop_assert_eq!(ranked(&s.candidates), want.clone());
                prop_assert_eq!(flat.nodes_evaluated, scan.nodes_evaluated);
                prop_assert!(flat.outputs_evaluated as usize <= n);
                prop_assert!(!flat.early_stopped && !flat.deadline_hit && !flat.beam_capped);
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

    /// Scores spread over a wide range, so that most blocks' bounds fall below the k-th score:
    /// the scorer then skips blocks, and still answers as the scan does.
    #[test]
    fn the_block_scorer_skips_blocks_and_keeps_the_answers() {
        let mut tree = random_flat(3000, 11, IndexChoice::Rank, false);
        for (o, b) in tree.out_bias.iter_mut().enumerate() {
            *b = -((o % 97) as f32) * 0.5;
        }
        let loss = Loss::Logistic;
        let order = bias_order(&tree.out_ids, &tree.out_bias, loss);
        let blocks = tree.flat_blocks(5, 2).unwrap();
        let limits = SearchLimits {
            k: 5,
            beam: usize::MAX,
            deadline: None,
        };
        let mut s = SearchScratch::default();
        let mut skipped = 0;
        for q in 0..20 {
            let (qi, qv, dense) = random_query(100 + q);
            tree.early_stop_search(&qi, &qv, &dense, loss, &limits, &mut s);
            let want = ranked(&s.candidates);
            tree.flat_prune(&blocks, &order, &qi, &qv, &dense, loss, &limits, &mut s);
            assert_eq!(ranked(&s.candidates), want);
            let st = s.prune_stats();
            skipped += st.n_blocks - st.blocks;
        }
        assert!(skipped > 0);
    }

    /// Queries with many postings take the scan with its selection pass: with sums spread
    /// out, it offers only the labels near the top, and its answers are the scan's.
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
    fn bounds_round_outward_to_bfloat16() {
        let mut rng = ChaCha8Rng::seed_from_u64(4);
        for _ in 0..10_000 {
            let (a, b): (f32, f32) = (rng.random_range(-8.0..8.0), rng.random_range(-8.0..8.0));
            let (max, min) = (a.max(b), a.min(b));
            let (hi, lo) = unpack_bounds(pack_bounds(max, min));
            assert!(hi >= max && lo <= min, "{max} {min} -> {hi} {lo}");
            assert!(hi - max <= max.abs() / 64.0 && min - lo <= min.abs() / 64.0);
        }
        let (hi, lo) = unpack_bounds(pack_bounds(1.5, -0.25));
        assert_eq!((hi, lo), (1.5, -0.25));
        let (hi, lo) = unpack_bounds(pack_bounds(f32::MAX, f32::MIN));
        assert!(hi == f32::INFINITY && lo == f32::NEG_INFINITY);
        assert!(unpack_bounds(pack_bounds(f32::NAN, 0.0)).0.is_nan());
    }

    /// The pruning assumes each link is monotone: a larger score never gets a log-probability
    /// more than the slack below a smaller one's. Checked on a dense sweep of scores.
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
    fn a_damaged_block_index_is_refused_and_scores_without_panicking() {
        let tree = random_flat(200, 8, IndexChoice::Rank, true);
        let loss = Loss::SquaredHinge;
        let order = bias_order(&tree.out_ids, &tree.out_bias, loss);
        let good = tree.flat_blocks(3, 1).unwrap();
        assert!(tree.check_flat_blocks(&good, true).is_ok());
        let empty = FlatBlocks::<Vec<u32>>::default();
        assert!(tree.check_flat_blocks(&empty, true).is_ok());
        let (qi, qv, dense) = random_query(5);
        let limits = SearchLimits {
            k: 4,
            beam: usize::MAX,
            deadline: None,
        };
        let mut s = SearchScratch::default();
        let mut damaged = Vec::new();
        let mut shape = good.clone();
        shape.shape = vec![40, 1];
        damaged.push((shape, false));
        let mut short = good.clone();
        short.rec.pop();
        damaged.push((short, false));
        let mut bias = good.clone();
        bias.block_bias.pop();
        damaged.push((bias, false));
        for word in [0, 1, 2] {
            let mut rec = good.clone();
            rec.rec[3 + word] ^= 0x0040_0001;
            damaged.push((rec, true));
        }
        let mut loose = good.clone();
        loose.block_bias[0] = 100.0f32.to_bits();
        damaged.push((loose, true));
        for (bad, structural_ok) in damaged {
            assert_eq!(tree.check_flat_blocks(&bad, false).is_ok(), structural_ok);
            assert!(tree.check_flat_blocks(&bad, true).is_err());
            tree.flat_prune(&bad, &order, &qi, &qv, &dense, loss, &limits, &mut s);
        }
        let mut not_flat = tree.clone();
        not_flat.node_info = vec![0];
        assert!(not_flat.check_flat_blocks(&good, false).is_err());
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
