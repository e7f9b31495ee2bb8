//! Scoring a wide node through the query's postings only: the chunk read as an inverted index.
//!
//! [`Chunks::score`] writes every output's slot: the caller copies all biases in, and reads all
//! outputs back. For a node with many outputs (a flat model's single leaf holds every label) that
//! per-output pass costs more than the postings a query reaches. [`Chunks::add_postings`]
//! instead accumulates into a [`SparseAcc`], which starts an output's slot at its bias the first
//! time one of the query's features reaches it and lists the outputs reached. The sums are the
//! same to the bit: each reached output starts at its bias and adds `w · x` per found feature in
//! query order, as [`Chunks::score`] does, and an output never reached scores its bias.

use super::*;

/// Per-output sums that only the outputs a query reaches pay for: a slot and a generation stamp
/// per output, and the list of outputs reached in this generation. Warm, it allocates nothing.
#[derive(Clone, Debug, Default)]
pub struct SparseAcc {
    acc: Vec<f32>,
    stamp: Vec<u32>,
    generation: u32,
    touched: Vec<u32>,
}

impl SparseAcc {
    /// Starts a query over a node of `n` outputs: no output is reached yet. O(1) once the
    /// buffers have `n` slots (O(n) when they grow, and once per 2^32 queries).
    pub fn start(&mut self, n: usize) {
        if self.stamp.len() < n {
            self.stamp.resize(n, 0);
            self.acc.resize(n, 0.0);
        }
        self.generation = self.generation.wrapping_add(1);
        if self.generation == 0 {
            self.stamp.iter_mut().for_each(|s| *s = 0);
            self.generation = 1;
        }
        self.touched.clear();
    }

    /// Adds `w · x` to output `o`'s sum, first setting it to `bias[o]` if this query has not
    /// reached `o` yet. An output without a bias (past the node's outputs: only a corrupt entry
    /// can name one) is skipped.
    #[inline]
    fn add(&mut self, o: u32, w: f32, x: f32, bias: &[f32]) {
        let o = o as usize;
        let (Some(stamp), Some(slot), Some(&b)) =
            (self.stamp.get_mut(o), self.acc.get_mut(o), bias.get(o))
        else {
            return;
        };
        if *stamp != self.generation {
            *stamp = self.generation;
            *slot = b;
            self.touched.push(o as u32);
        }
        *slot += w * x;
    }

    /// Whether this query reached output `o`.
    #[inline]
    pub fn reached(&self, o: usize) -> bool {
        self.stamp.get(o) == Some(&self.generation)
    }

    /// The outputs this query reached, each once, in the order first reached.
    pub fn touched(&self) -> &[u32] {
        &self.touched
    }

    /// Output `o`'s sum (meaningful only when [`SparseAcc::reached`]).
    #[inline]
    pub fn sum(&self, o: usize) -> f32 {
        self.acc.get(o).copied().unwrap_or(0.0)
    }
}

/// Per-output sums for a node with very many outputs, with no state per output: the query's
/// postings are listed as (output, w · x) in query order, sorted by output with a stable radix
/// sort, and each output's run is summed from its bias. Each output's sum is then its bias plus
/// its entries' products in query order, as in [`SparseAcc`] and [`Chunks::score`], so the sums
/// are the same to the bit; but no posting touches a per-output slot, which for millions of
/// outputs lies outside the cache. Warm, it allocates nothing.
#[derive(Clone, Debug, Default)]
pub struct SortedAcc {
    items: Vec<(u32, f32)>,
    spare: Vec<(u32, f32)>,
    counts: Vec<u32>,
    /// The outputs reached, increasing, and their sums.
    outs: Vec<u32>,
    sums: Vec<f32>,
}

/// The bits of an output id [`SortedAcc`] sorts by per pass.
const RADIX_BITS: u32 = 11;

impl SortedAcc {
    /// Whether the last query reached output `o`.
    pub fn reached(&self, o: u32) -> bool {
        self.outs.binary_search(&o).is_ok()
    }

    /// The number of outputs the last query reached.
    pub fn n_reached(&self) -> usize {
        self.outs.len()
    }

    /// The outputs the last query reached, increasing, with their sums.
    pub fn reached_sums(&self) -> impl Iterator<Item = (u32, f32)> + '_ {
        self.outs.iter().copied().zip(self.sums.iter().copied())
    }

    /// Sorts `items` by output, stably, over the low `bits` bits of the outputs.
    fn sort(&mut self, bits: u32) {
        let buckets = 1usize << RADIX_BITS;
        let mask = (1u32 << RADIX_BITS) - 1;
        let mut shift = 0;
        while shift < bits {
            self.counts.clear();
            self.counts.resize(buckets, 0);
            for &(o, _) in &self.items {
                if let Some(c) = self.counts.get_mut(((o >> shift) & mask) as usize) {
                    *c += 1;
                }
            }
            let mut total = 0u32;
            for c in &mut self.counts {
                let here = *c;
                *c = total;
                total += here;
            }
            self.spare.clear();
            self.spare.resize(self.items.len(), (0, 0.0));
            for &item in &self.items {
                if let Some(c) = self.counts.get_mut(((item.0 >> shift) & mask) as usize)
                    && let Some(slot) = self.spare.get_mut(*c as usize)
                {
                    *slot = item;
                    *c += 1;
                }
            }
            std::mem::swap(&mut self.items, &mut self.spare);
            shift += RADIX_BITS;
        }
    }
}

impl<U, F, O> Chunks<U, F, O>
where
    U: std::ops::Deref<Target = [u32]>,
    F: std::ops::Deref<Target = [f32]>,
    O: EntryOuts,
{
    /// Calls `f(p, a, b, x)` with the feature position `p` (in the tree's `feat`), its entry
    /// range `a..b` and the query value `x` of each query feature that node `node` holds, in
    /// query order, looked up in the node's rank index or hash table.
    #[inline]
    pub fn for_found(
        &self,
        node: usize,
        q_idx: &[u32],
        q_val: &[f32],
        mut f: impl FnMut(usize, usize, usize, f32),
    ) {
        let (Some(&a), Some(&b)) = (self.feat_start.get(node), self.feat_start.get(node + 1))
        else {
            return;
        };
        let start = a as usize;
        let n_feats = (b as usize).saturating_sub(start);
        let blocks = self.rank_blocks(node);
        let table = match (self.hash_start.get(node), self.hash_start.get(node + 1)) {
            (Some(&h0), Some(&h1)) => self.hash.get(h0 as usize..h1 as usize).unwrap_or(&[]),
            _ => &[],
        };
        if blocks.is_empty() && table.is_empty() {
            return;
        }
        let mut pos = [0usize; LOOKUP_BLOCK];
        let mut val = [0f32; LOOKUP_BLOCK];
        for (qi, qv) in q_idx.chunks(LOOKUP_BLOCK).zip(q_val.chunks(LOOKUP_BLOCK)) {
            let found = if blocks.is_empty() {
                hash_find(table, n_feats, qi, qv, &mut pos, &mut val)
            } else {
                rank_find(blocks, n_feats, qi, qv, &mut pos, &mut val)
            };
            for (&p, &x) in pos[..found].iter().zip(&val[..found]) {
                if let Some(&[ea, eb]) = self.entry_start.get(start + p..start + p + 2) {
                    f(start + p, ea as usize, eb as usize, x);
                }
            }
        }
    }

    /// The number of node `node`'s entries (postings) over the query's features.
    pub fn count_postings(&self, node: usize, q_idx: &[u32], q_val: &[f32]) -> usize {
        let mut n = 0;
        self.for_found(node, q_idx, q_val, |_, a, b, _| n += b.saturating_sub(a));
        n
    }

    /// Adds node `node`'s entries for the query's features to `acc`, whose outputs start at
    /// `bias` (one per output). The node must store entries, not rows ([`Chunks::has_rows`]);
    /// a row node adds nothing. Features are looked up in the node's rank index or hash table,
    /// in query order, so every output's sum is the one [`Chunks::score`] leaves in its slot.
    pub fn add_postings(
        &self,
        node: usize,
        q_idx: &[u32],
        q_val: &[f32],
        bias: &[f32],
        acc: &mut SparseAcc,
    ) {
        if self.has_rows(node) {
            return;
        }
        with_entries!(self.entries(), |e| self.for_found(
            node,
            q_idx,
            q_val,
            |_, a, b, x| { e.for_range(a, b, |o, w| acc.add(o, w, x, bias)) }
        ));
    }
}

impl<U, F, O> Chunks<U, F, O>
where
    U: std::ops::Deref<Target = [u32]>,
    F: std::ops::Deref<Target = [f32]>,
    O: EntryOuts,
{
    /// [`Chunks::add_postings`] into a [`SortedAcc`]: the sums of the outputs that node
    /// `node`'s entries for the query's features reach, each from its `bias`.
    pub fn sum_postings_sorted(
        &self,
        node: usize,
        q_idx: &[u32],
        q_val: &[f32],
        bias: &[f32],
        acc: &mut SortedAcc,
    ) {
        acc.items.clear();
        acc.outs.clear();
        acc.sums.clear();
        if self.has_rows(node) {
            return;
        }
        let n = bias.len();
        let items = &mut acc.items;
        with_entries!(self.entries(), |e| self.for_found(
            node,
            q_idx,
            q_val,
            |_, a, b, x| {
                e.for_range(a, b, |o, w| {
                    if (o as usize) < n {
                        items.push((o, w * x));
                    }
                })
            }
        ));
        let bits = u32::BITS - (n.saturating_sub(1) as u32).leading_zeros();
        acc.sort(bits);
        let mut k = 0;
        while let Some(&(o, _)) = acc.items.get(k) {
            let mut sum = bias.get(o as usize).copied().unwrap_or(0.0);
            while let Some(&(p, v)) = acc.items.get(k)
                && p == o
            {
                sum += v;
                k += 1;
            }
            acc.outs.push(o);
            acc.sums.push(sum);
        }
    }
}

/// One run of a feature's entries whose outputs fall in one block of outputs: the block, the
/// entry range, and the largest and smallest weight in it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct EntryRunBounds {
    /// The block: the outputs' index shifted right by the block shift.
    pub block: u32,
    /// The run's first entry.
    pub start: usize,
    /// One past its last entry.
    pub end: usize,
    /// The largest weight in the run.
    pub max: f32,
    /// The smallest weight in the run.
    pub min: f32,
}

impl<U, F, O> Chunks<U, F, O>
where
    U: std::ops::Deref<Target = [u32]>,
    F: std::ops::Deref<Target = [f32]>,
    O: EntryOuts,
{
    /// Calls `f` with each run of entries `a..b` whose outputs share a block of `2^shift`
    /// outputs, in entry order, and returns whether the outputs were strictly increasing (the
    /// layout the trainer writes; the block scorer relies on it, and the verified open checks
    /// it). A NaN weight makes both of its run's bounds NaN. An empty or out-of-bounds range
    /// has no runs.
    pub fn for_runs(
        &self,
        a: usize,
        b: usize,
        shift: u32,
        mut f: impl FnMut(EntryRunBounds),
    ) -> bool {
        let mut increasing = true;
        let mut run: Option<EntryRunBounds> = None;
        let mut prev: Option<u32> = None;
        let mut e = a;
        with_entries!(self.entries(), |es| es.for_range(a, b, |o, w| {
            increasing &= prev.is_none_or(|p| p < o);
            prev = Some(o);
            let block = o.checked_shr(shift).unwrap_or(0);
            match &mut run {
                Some(r) if r.block == block => {
                    r.end = e + 1;
                    if w.is_nan() || r.max.is_nan() {
                        (r.max, r.min) = (f32::NAN, f32::NAN);
                    } else {
                        r.max = r.max.max(w);
                        r.min = r.min.min(w);
                    }
                }
                _ => {
                    if let Some(r) = run.take() {
                        f(r);
                    }
                    run = Some(EntryRunBounds {
                        block,
                        start: e,
                        end: e + 1,
                        max: w,
                        min: w,
                    });
                }
            }
            e += 1;
        }));
        if let Some(r) = run {
            f(r);
        }
        increasing
    }

    /// Calls `f(o, w)` with the output and weight of each of entries `a..b`, in order.
    pub fn for_entries(&self, a: usize, b: usize, f: impl FnMut(u32, f32)) {
        with_entries!(self.entries(), |es| es.for_range(a, b, f));
    }

    /// Adds `w · x` of each of entries `a..b` to `acc[o - lo]`, its output `o` less `lo`, and
    /// returns how many it read. An output outside `lo..lo + acc.len()` (only a damaged index
    /// can give such a range) adds nothing.
    #[inline]
    pub fn add_entries_from(&self, a: usize, b: usize, lo: u32, x: f32, acc: &mut [f32]) -> usize {
        with_entries!(self.entries(), |es| es.for_range(a, b, |o, w| {
            if let Some(slot) = o.checked_sub(lo).and_then(|i| acc.get_mut(i as usize)) {
                *slot += w * x;
            }
        }));
        b.saturating_sub(a)
    }
}

/// What the flat block scorer (`TreeArrays::flat_prune`) did for the last query, beyond its [`SearchStats`].
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
pub(crate) struct Link {
    pub(crate) next: u32,
    pub(crate) feat: u32,
    pub(crate) start: u32,
    pub(crate) end: u32,
}

/// No run: the end of a block's list.
pub(crate) const NONE: u32 = u32::MAX;

/// The block scorer's per-query buffers; warm, a query allocates nothing.
#[derive(Clone, Debug, Default)]
pub struct PruneScratch {
    pub(crate) ub: Vec<f32>,
    pub(crate) head: Vec<u32>,
    pub(crate) links: Vec<Link>,
    pub(crate) x: Vec<f32>,
    pub(crate) keys: Vec<u64>,
    pub(crate) acc: Vec<f32>,
    pub(crate) top: Vec<f32>,
    /// The positions the flat scan's selection pass notes as near the top.
    pub(crate) near: Vec<u32>,
    pub(crate) runs: Vec<(u32, u32, u32)>,
    /// The last query's counts.
    pub stats: PruneStats,
}
