//! The flat model's block index and its exact block-max pruning (see the parent module's docs):
//! built in memory for benchmarks, not stored.

use super::{SLACK, fill_candidates, log_prob};
use crate::linear::Loss;
use crate::tree::chunk::{EntryOuts, Link, NONE, PruneStats};
use crate::tree::view::{
    Ranked, SearchLimits, SearchScratch, SearchStats, TreeArrays, TreeViewError,
};
use std::time::Instant;

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

    /// The block scorer's first pass: fills `ps.ub` with every block's bound (before the
    /// rounding margin), `ps.x` with the found query values and `ps.head` / `ps.links` with
    /// each block's runs of entries; returns the magnitude bound of every sum's terms, the
    /// records read and the entries read.
    fn bound_blocks<V: std::ops::Deref<Target = [u32]>>(
        &self,
        blocks: &FlatBlocks<V>,
        shift: u32,
        nb: usize,
        q_idx: &[u32],
        q_val: &[f32],
        ps: &mut crate::tree::chunk::PruneScratch,
    ) -> (f32, usize, usize) {
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
        (mag, records, bound_entries)
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
        let k = limits.k.max(limits.keep).max(1);
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
        let (mag, records, bound_entries) = self.bound_blocks(blocks, shift, nb, q_idx, q_val, ps);
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
                    self.chunks
                        .add_entries_from(a as usize, e as usize, lo as u32, x, &mut ps.acc);
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
            chunks: crate::tree::chunk::Chunks {
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

#[cfg(test)]
mod tests {
    use super::super::tests::{random_flat, random_query, ranked};
    use super::*;
    use crate::tree::chunk::IndexChoice;
    use crate::tree::flat::bias_order;
    use rand::{RngExt, SeedableRng};
    use rand_chacha::ChaCha8Rng;

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
            keep: 0,
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
            keep: 0,
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
}
