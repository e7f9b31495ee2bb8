//! Scoring a node for a query: the scan, the binary search and the two index lookups.

use super::*;

/// How many chunk features per query feature make a linear scan of the chunk slower than a
/// binary search per query feature. Measured by `benches/predict.rs` (scan vs. search).
pub(super) const SCAN_FACTOR: usize = 8;

/// Query features per pass of the index lookups (see [`Chunks::score_hash`]).
pub(super) const LOOKUP_BLOCK: usize = 64;

impl<U, F, O> Chunks<U, F, O>
where
    U: std::ops::Deref<Target = [u32]>,
    F: std::ops::Deref<Target = [f32]>,
    O: EntryOuts,
{
    /// Adds node `node`'s weights times the query to `acc` (one slot per output, and any number
    /// after them: a node that stores entries and has no more than [`OUT_SLOTS`] outputs is
    /// scored without a bounds check per entry when `acc` has at least that many slots, and
    /// only a corrupt entry, in a bundle opened without the O(weights) checks, writes past the
    /// node's outputs).
    ///
    /// `q_idx`/`q_val` is the query, sorted by feature id; `dense` holds the same query as a dense
    /// vector (zero elsewhere) of at least the model's feature count. Small chunks are scanned and
    /// looked up in `dense` ([`Chunks::score_scan`]); in large ones each query feature is looked
    /// up in the node's rank index or hash table ([`Chunks::score_rank`],
    /// [`Chunks::score_hash`]). Either way a feature found adds its row or its entries.
    #[inline]
    pub fn score(&self, node: usize, q_idx: &[u32], q_val: &[f32], dense: &[f32], acc: &mut [f32]) {
        let n_feats = (self.feat_start[node + 1] - self.feat_start[node]) as usize;
        let rows = self.node_rows(node);
        let acc = self.row_outputs(node, rows, acc);
        if n_feats <= SCAN_FACTOR * q_idx.len() {
            self.scan(node, rows, dense, acc);
        } else {
            let blocks = self.rank_blocks(node);
            if blocks.is_empty() {
                self.hash_lookup(node, rows, q_idx, q_val, acc);
            } else {
                self.rank_lookup(node, blocks, rows, q_idx, q_val, acc);
            }
        }
    }

    /// [`Chunks::score`] by looking each query feature up in the node's rank index (a node
    /// without one adds nothing).
    ///
    /// As in [`Chunks::score_hash`], the work runs in passes over blocks of query features: all
    /// lookups (branch-free: an absent feature is written and then not counted), then all entry
    /// ranges or rows, then all entries.
    #[inline]
    pub fn score_rank(&self, node: usize, q_idx: &[u32], q_val: &[f32], acc: &mut [f32]) {
        let rows = self.node_rows(node);
        let acc = self.row_outputs(node, rows, acc);
        self.rank_lookup(node, self.rank_blocks(node), rows, q_idx, q_val, acc);
    }

    /// [`Chunks::score_rank`] with node `node`'s rank blocks and rows already looked up.
    #[inline]
    pub(super) fn rank_lookup(
        &self,
        node: usize,
        blocks: &[u32],
        rows: Rows<'_>,
        q_idx: &[u32],
        q_val: &[f32],
        acc: &mut [f32],
    ) {
        let start = self.feat_start[node] as usize;
        let n_feats = (self.feat_start[node + 1] as usize).saturating_sub(start);
        let mut pos = [0usize; LOOKUP_BLOCK];
        let mut val = [0f32; LOOKUP_BLOCK];
        for (qi, qv) in q_idx.chunks(LOOKUP_BLOCK).zip(q_val.chunks(LOOKUP_BLOCK)) {
            let found = rank_find(blocks, n_feats, qi, qv, &mut pos, &mut val);
            self.add_found(start, rows, &pos[..found], &val[..found], acc);
        }
    }

    /// [`Chunks::score`] by looking each query feature up in the node's hash table.
    ///
    /// The work is split into passes over blocks of query features, each pass making only
    /// independent memory accesses (all probes, then all entry ranges or rows, then all
    /// entries), so that their cache misses overlap instead of queueing one behind the other.
    #[inline]
    pub fn score_hash(&self, node: usize, q_idx: &[u32], q_val: &[f32], acc: &mut [f32]) {
        let rows = self.node_rows(node);
        let acc = self.row_outputs(node, rows, acc);
        self.hash_lookup(node, rows, q_idx, q_val, acc);
    }

    /// [`Chunks::score_hash`] with node `node`'s rows already looked up.
    #[inline]
    pub(super) fn hash_lookup(
        &self,
        node: usize,
        rows: Rows<'_>,
        q_idx: &[u32],
        q_val: &[f32],
        acc: &mut [f32],
    ) {
        let start = self.feat_start[node] as usize;
        let table = &self.hash[self.hash_start[node] as usize..self.hash_start[node + 1] as usize];
        if table.is_empty() {
            return;
        }
        let n_feats = (self.feat_start[node + 1] as usize).saturating_sub(start);
        let mut pos = [0usize; LOOKUP_BLOCK];
        let mut val = [0f32; LOOKUP_BLOCK];
        for (qi, qv) in q_idx.chunks(LOOKUP_BLOCK).zip(q_val.chunks(LOOKUP_BLOCK)) {
            let found = hash_find(table, n_feats, qi, qv, &mut pos, &mut val);
            self.add_found(start, rows, &pos[..found], &val[..found], acc);
        }
    }

    /// Adds the weights of the features found at positions `pos` (within the node whose
    /// features start at `start`), times `val`, to `acc`: from `rows` when the node has them,
    /// else from its entries (first every entry range, then every entry).
    #[inline]
    pub(super) fn add_found(
        &self,
        start: usize,
        rows: Rows<'_>,
        pos: &[usize],
        val: &[f32],
        acc: &mut [f32],
    ) {
        match rows {
            Rows::F32(r) if !r.is_empty() => {
                for (&p, &x) in pos.iter().zip(val) {
                    add_row(r, p, x, acc);
                }
                return;
            }
            Rows::Bf16(r) if !r.is_empty() => {
                for (&p, &x) in pos.iter().zip(val) {
                    add_row_bf16(r, p, x, acc);
                }
                return;
            }
            _ => {}
        }
        with_entries!(self.entries(), |e| add_found_entries(
            e,
            &self.entry_start,
            start,
            pos,
            val,
            acc
        ));
    }

    /// [`Chunks::score`] by one pass over the chunk's features, each looked up in the dense query.
    #[inline]
    pub fn score_scan(&self, node: usize, dense: &[f32], acc: &mut [f32]) {
        let rows = self.node_rows(node);
        let acc = self.row_outputs(node, rows, acc);
        self.scan(node, rows, dense, acc);
    }

    /// [`Chunks::score_scan`] with node `node`'s rows already looked up.
    #[inline]
    pub(super) fn scan(&self, node: usize, rows: Rows<'_>, dense: &[f32], acc: &mut [f32]) {
        let start = self.feat_start[node] as usize;
        let feats = &self.feat[start..self.feat_start[node + 1] as usize];
        for (p, &f) in feats.iter().enumerate() {
            let x = dense.get(f as usize).copied().unwrap_or(0.0);
            if x != 0.0 {
                if rows.is_empty() {
                    self.add_entries(start + p, x, acc);
                } else {
                    rows.add(p, x, acc);
                }
            }
        }
    }

    /// [`Chunks::score`] by merging the sorted query into the chunk's sorted features, with a
    /// binary search over the rest of the chunk per query feature.
    #[inline]
    pub fn score_search(&self, node: usize, q_idx: &[u32], q_val: &[f32], acc: &mut [f32]) {
        let start = self.feat_start[node] as usize;
        let feats = &self.feat[start..self.feat_start[node + 1] as usize];
        let rows = self.node_rows(node);
        let acc = self.row_outputs(node, rows, acc);
        let mut lo = 0;
        for (&f, &x) in q_idx.iter().zip(q_val) {
            if lo >= feats.len() {
                break;
            }
            match feats[lo..].binary_search(&f) {
                Ok(p) => {
                    if rows.is_empty() {
                        self.add_entries(start + lo + p, x, acc);
                    } else {
                        rows.add(lo + p, x, acc);
                    }
                    lo += p + 1;
                }
                Err(p) => lo += p,
            }
        }
    }

    #[inline]
    pub(super) fn add_entries(&self, pos: usize, x: f32, acc: &mut [f32]) {
        let (a, b) = (
            self.entry_start[pos] as usize,
            self.entry_start[pos + 1] as usize,
        );
        with_entries!(self.entries(), |e| e.add_range(a, b, x, acc));
    }
}

/// [`Chunks::add_found`] for a node that stores entries (read through `entries`, located by
/// `entry_start`): the features found at positions `pos` within the node whose features start
/// at `start`, times `val`, added to `acc`. First every entry range, then every entry.
#[inline]
pub(super) fn add_found_entries<E: EntryRun>(
    entries: E,
    entry_start: &[u32],
    start: usize,
    pos: &[usize],
    val: &[f32],
    acc: &mut [f32],
) {
    let mut range = [(0u32, 0u32); LOOKUP_BLOCK];
    for (r, &p) in range.iter_mut().zip(pos) {
        let p = start + p;
        *r = (entry_start[p], entry_start[p + 1]);
    }
    let range = &range[..pos.len().min(LOOKUP_BLOCK)];
    // Touch the first entry of every range before adding any: independent loads whose cache
    // misses overlap. The adds below branch on each loaded output, which keeps the processor
    // from running far ahead into the next range's misses.
    let touched = range
        .iter()
        .fold(0u32, |t, &(a, _)| t ^ entries.touch(a as usize));
    std::hint::black_box(touched);
    for (&(a, b), &x) in range.iter().zip(val) {
        entries.add_range(a as usize, b as usize, x, acc);
    }
}

/// Looks the query features `qi` (values `qv`, at most [`LOOKUP_BLOCK`]) up in a node's rank
/// `blocks`, writing the position and value of each one the node holds to `pos` and `val`, and
/// returns how many it found. Branch-free: an absent feature is written and then not counted.
#[inline]
pub(super) fn rank_find(
    blocks: &[u32],
    n_feats: usize,
    qi: &[u32],
    qv: &[f32],
    pos: &mut [usize; LOOKUP_BLOCK],
    val: &mut [f32; LOOKUP_BLOCK],
) -> usize {
    let mut found = 0;
    for (&f, &x) in qi.iter().zip(qv) {
        let b = RANK_BLOCK * (f / RANK_SPAN) as usize;
        let Some(&[below, w0, w1, w2]) = blocks.get(b..b + RANK_BLOCK) else {
            continue;
        };
        // Bit `r` of the block's three words marks feature `96·block + r`: as two 64-bit halves,
        // `r` falls in the low one (the high one adds nothing) or the high one (the low one
        // counts whole). Branch-free, and no word is picked by index from the stack.
        let r = f % RANK_SPAN;
        let (lo, hi) = (u64::from(w0) | u64::from(w1) << 32, u64::from(w2));
        let below_r = (1u64 << (r % 64)) - 1;
        let in_hi = u64::from(r >= 64).wrapping_neg();
        let before = (lo & (below_r | in_hi)).count_ones() + (hi & below_r & in_hi).count_ones();
        let word = (hi & in_hi) | (lo & !in_hi);
        let p = below as usize + before as usize;
        // `found` stays below the block size (a power of two): at most one per query feature
        // of `qi`, so the mask never changes it and only spares the bounds check.
        pos[found % LOOKUP_BLOCK] = p;
        val[found % LOOKUP_BLOCK] = x;
        // A corrupt count (possible only when opened without the O(weights) checks) could
        // point past the node's features; such a lookup finds nothing.
        found += (((word >> (r % 64)) & 1) == 1 && p < n_feats) as usize;
    }
    found
}

/// Looks the query features `qi` (values `qv`, at most [`LOOKUP_BLOCK`]) up in a node's hash
/// `table` (not empty), writing the position and value of each one the node holds to `pos` and
/// `val`, and returns how many it found, in query order.
#[inline]
pub(super) fn hash_find(
    table: &[u32],
    n_feats: usize,
    qi: &[u32],
    qv: &[f32],
    pos: &mut [usize; LOOKUP_BLOCK],
    val: &mut [f32; LOOKUP_BLOCK],
) -> usize {
    let slots = table.len() / 2;
    let mask = slots - 1;
    // Pass 1: load every home slot (independent loads, no branches between them).
    let mut home_slot = [(0u32, 0u32, 0usize); LOOKUP_BLOCK];
    for (k, &f) in qi.iter().enumerate() {
        let h = home(f, mask);
        home_slot[k] = (table[2 * h], table[2 * h + 1], h);
    }
    // Pass 2: settle each probe, walking on only after a collision.
    let mut found = 0;
    for (k, (&f, &x)) in qi.iter().zip(qv).enumerate() {
        let (mut key, mut at, mut h) = home_slot[k];
        // A valid table always has a free slot; the bound keeps a corrupt one (opened without
        // the O(weights) checks) from looping.
        for _ in 0..slots {
            if key == f {
                if (at as usize) < n_feats {
                    pos[found] = at as usize;
                    val[found] = x;
                    found += 1;
                }
                break;
            }
            if key == EMPTY {
                break;
            }
            h = (h + 1) & mask;
            key = table[2 * h];
            at = table[2 * h + 1];
        }
    }
    found
}

/// Adds row `p` of a node's `rows` (one weight per slot of `acc`) times `x` to `acc`. A row past
/// the end (only a bundle opened without the O(weights) checks can ask for one) adds nothing.
#[inline]
pub(super) fn add_row(rows: &[f32], p: usize, x: f32, acc: &mut [f32]) {
    let m = acc.len();
    if let Some(row) = rows.get(p * m..p * m + m) {
        for (a, &w) in acc.iter_mut().zip(row) {
            *a += w * x;
        }
    }
}

/// [`add_row`] for packed rows: row `p` of `words`, ⌈`acc.len()` / 2⌉ words of two bfloat16
/// weights each, the low half first.
#[inline]
pub(super) fn add_row_bf16(words: &[u32], p: usize, x: f32, acc: &mut [f32]) {
    let m = acc.len();
    let w = m.div_ceil(2);
    if let Some(row) = words.get(p * w..p * w + w) {
        let (pairs, last) = acc.split_at_mut(m & !1);
        for (a, &word) in pairs.chunks_exact_mut(2).zip(row) {
            a[0] += packed_weight(word) * x;
            a[1] += f32::from_bits(word & 0xffff_0000) * x;
        }
        // An odd row's last word holds one weight (and zero padding).
        if let (Some(a), Some(&word)) = (last.first_mut(), row.last()) {
            *a += packed_weight(word) * x;
        }
    }
}
