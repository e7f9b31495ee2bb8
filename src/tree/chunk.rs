//! Node classifiers stored feature-major: the masked sparse chunk.
//!
//! A tree node holds one linear classifier per output: per child for an internal node, per label for
//! a leaf. Scoring a node for a sparse query only needs the weights of the query's features, so
//! each node's weights are stored as one *chunk* keyed by sorted feature id: for every feature that
//! any output uses, the list of `(output, weight)` pairs. This is the masked sparse chunk layout of
//! PECOS. A query then touches only the features it shares with the chunk.
//!
//! All nodes' chunks of one tree live in five flat arrays, so they can be stored as bundle sections
//! and read straight from the memory map:
//!
//! | array | length | meaning |
//! | --- | --- | --- |
//! | `feat_start` | nodes + 1 | node `i`'s features are `feat[feat_start[i]..feat_start[i + 1]]` |
//! | `feat` | features in all chunks | feature ids, strictly increasing within a node |
//! | `entry_start` | `feat.len()` + 1 | feature position `p`'s entries are `entry_start[p]..entry_start[p + 1]` |
//! | `entry_out` | entries | the output (child or label position) within the node |
//! | `entry_weight` | entries | the weight |
//!
//! Biases are stored per output elsewhere (one per child or label), next to the tree topology.

use thiserror::Error;

/// How many chunk features per query feature make a linear scan of the chunk slower than a
/// binary search per query feature. Measured by `benches/predict.rs` (scan vs. search).
const SCAN_FACTOR: usize = 8;

/// The exponent bits of an `f32`.
const F32_EXP: u32 = 0x7f80_0000;

/// Why stored chunk arrays were refused.
#[derive(Debug, Error, PartialEq)]
pub enum ChunkError {
    /// An array has the wrong length for the others.
    #[error("chunk array `{array}` has length {found}, expected {expected}")]
    Length {
        /// The array's name.
        array: &'static str,
        /// Its length.
        found: usize,
        /// The length it must have.
        expected: usize,
    },
    /// Offsets must start at 0, never decrease, and end at the array they index.
    #[error("chunk offsets `{array}` are not a valid prefix sum at position {at}")]
    Offsets {
        /// The offsets array's name.
        array: &'static str,
        /// The first bad position.
        at: usize,
    },
    /// Feature ids in a node must be strictly increasing and below the feature count.
    #[error("node {node}: feature id {feature} is out of order or not below {n_features}")]
    Feature {
        /// The node.
        node: usize,
        /// The bad feature id.
        feature: u32,
        /// The model's feature count.
        n_features: usize,
    },
    /// An entry names an output the node does not have.
    #[error("node {node}: entry output {output} is not below the node's {n_outputs} outputs")]
    Output {
        /// The node.
        node: usize,
        /// The bad output index.
        output: u32,
        /// The node's number of outputs.
        n_outputs: usize,
    },
    /// A weight is NaN or infinite.
    #[error("node {node}: a weight is not finite")]
    Weight {
        /// The node.
        node: usize,
    },
    /// A node's feature hash table has a bad size or slot.
    #[error("node {node}: the feature hash table is malformed")]
    Hash {
        /// The node.
        node: usize,
    },
    /// The arrays grew past what `u32` offsets can address.
    #[error(
        "the chunk arrays hold more than u32::MAX entries; train a smaller model or prune more"
    )]
    TooLarge,
}

/// The chunk arrays of all nodes of one tree, generic over the storage (owned `Vec`s while
/// training, memory-mapped sections when serving).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Chunks<U, F> {
    /// Per node, the start of its features in `feat` (length nodes + 1).
    pub feat_start: U,
    /// Sorted feature ids per node.
    pub feat: U,
    /// Per feature position, the start of its entries (length `feat.len()` + 1).
    pub entry_start: U,
    /// Output index of each entry.
    pub entry_out: U,
    /// Weight of each entry.
    pub entry_weight: F,
    /// Per node, the start of its feature hash table in `hash` (length nodes + 1). A node's
    /// table has a power-of-two number of slots, at least twice its feature count (none when it
    /// has no features).
    pub hash_start: U,
    /// Open-addressing tables (linear probing) from feature id to the feature's position within
    /// its node. A slot is two values, `[feature id, position]`, with feature [`EMPTY`] when free.
    /// Keeping the id in the slot settles a probe with one memory access.
    pub hash: U,
}

/// A free slot of a chunk hash table.
pub const EMPTY: u32 = u32::MAX;

/// The home slot of feature `f` in a table with mask `mask` (size − 1).
#[inline]
fn home(f: u32, mask: usize) -> usize {
    ((u64::from(f).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) as usize) & mask
}

/// Chunks under construction.
pub type ChunksBuilder = Chunks<Vec<u32>, Vec<f32>>;

impl ChunksBuilder {
    /// An empty builder, ready for node 0.
    pub fn new() -> Self {
        Chunks {
            feat_start: vec![0],
            feat: Vec::new(),
            entry_start: vec![0],
            entry_out: Vec::new(),
            entry_weight: Vec::new(),
            hash_start: vec![0],
            hash: Vec::new(),
        }
    }

    /// Appends the next node's chunk from its outputs' sparse weight vectors, each given as
    /// sorted feature ids and weights.
    pub fn push_node<'a, I>(&mut self, outputs: I) -> Result<(), ChunkError>
    where
        I: IntoIterator<Item = (&'a [u32], &'a [f32])>,
    {
        let mut triples: Vec<(u32, u32, f32)> = Vec::new();
        for (out, (idx, val)) in outputs.into_iter().enumerate() {
            let out = u32::try_from(out).map_err(|_| ChunkError::TooLarge)?;
            triples.extend(idx.iter().zip(val).map(|(&f, &w)| (f, out, w)));
        }
        // Sort by feature, then output: entries of a feature come out in output order.
        triples.sort_unstable_by_key(|&(f, o, _)| (f, o));
        for (f, o, w) in triples {
            if self.feat.len() == self.feat_start_last() || self.feat.last() != Some(&f) {
                self.feat.push(f);
                self.entry_start.push(self.entry_start_last());
            }
            self.entry_out.push(o);
            self.entry_weight.push(w);
            *self
                .entry_start
                .last_mut()
                .expect("entry_start is never empty") =
                u32::try_from(self.entry_out.len()).map_err(|_| ChunkError::TooLarge)?;
        }
        let first = self.feat_start_last();
        self.feat_start
            .push(u32::try_from(self.feat.len()).map_err(|_| ChunkError::TooLarge)?);
        let n = self.feat.len() - first;
        let size = if n == 0 {
            0
        } else {
            (2 * n).next_power_of_two()
        };
        let base = self.hash.len();
        self.hash.resize(base + 2 * size, EMPTY);
        for p in 0..n {
            let f = self.feat[first + p];
            let mut h = home(f, size - 1);
            while self.hash[base + 2 * h] != EMPTY {
                h = (h + 1) & (size - 1);
            }
            self.hash[base + 2 * h] = f;
            self.hash[base + 2 * h + 1] = p as u32;
        }
        self.hash_start
            .push(u32::try_from(self.hash.len()).map_err(|_| ChunkError::TooLarge)?);
        Ok(())
    }

    fn feat_start_last(&self) -> usize {
        *self.feat_start.last().expect("feat_start is never empty") as usize
    }

    fn entry_start_last(&self) -> u32 {
        *self.entry_start.last().expect("entry_start is never empty")
    }
}

impl<U, F> Chunks<U, F>
where
    U: std::ops::Deref<Target = [u32]>,
    F: std::ops::Deref<Target = [f32]>,
{
    /// The number of nodes.
    pub fn n_nodes(&self) -> usize {
        self.feat_start.len().saturating_sub(1)
    }

    /// The same chunks over plain slices (see [`super::view::TreeArrays::borrowed`]).
    pub fn borrowed(&self) -> Chunks<&[u32], &[f32]> {
        Chunks {
            feat_start: &self.feat_start,
            feat: &self.feat,
            entry_start: &self.entry_start,
            entry_out: &self.entry_out,
            entry_weight: &self.entry_weight,
            hash_start: &self.hash_start,
            hash: &self.hash,
        }
    }

    /// The number of stored weights.
    pub fn n_weights(&self) -> usize {
        self.entry_weight.len()
    }

    /// Checks every offset, feature id, output index, weight and hash slot, given each node's
    /// output count: [`Chunks::validate_structure`] and then the O(weights) checks. After this
    /// succeeds, every stored index is in range and every weight finite.
    pub fn validate(&self, n_outputs: &[usize], n_features: usize) -> Result<(), ChunkError> {
        self.validate_structure(n_outputs)?;
        self.validate_entries(n_outputs, n_features)
    }

    /// The checks that cost O(nodes), not O(weights): array lengths, the per-node offsets of
    /// features and hash tables, and each table's size (a power of two above the node's
    /// feature count). After this succeeds, scoring cannot panic or loop whatever the entries
    /// hold: the scoring functions bound every entry-level index and probe they follow, so a
    /// corrupt entry costs a wrong score, never a crash (and checksums, when verified, catch it).
    pub fn validate_structure(&self, n_outputs: &[usize]) -> Result<(), ChunkError> {
        let expect_len = |array, found, expected| {
            if found == expected {
                Ok(())
            } else {
                Err(ChunkError::Length {
                    array,
                    found,
                    expected,
                })
            }
        };
        expect_len("feat_start", self.feat_start.len(), n_outputs.len() + 1)?;
        check_offsets("feat_start", &self.feat_start, self.feat.len())?;
        expect_len("entry_start", self.entry_start.len(), self.feat.len() + 1)?;
        if self.entry_start.first() != Some(&0) {
            return Err(ChunkError::Offsets {
                array: "entry_start",
                at: 0,
            });
        }
        if self.entry_start.last().map(|&x| x as usize) != Some(self.entry_out.len()) {
            return Err(ChunkError::Offsets {
                array: "entry_start",
                at: self.entry_start.len() - 1,
            });
        }
        expect_len(
            "entry_weight",
            self.entry_weight.len(),
            self.entry_out.len(),
        )?;
        expect_len("hash_start", self.hash_start.len(), n_outputs.len() + 1)?;
        check_offsets("hash_start", &self.hash_start, self.hash.len())?;
        for node in 0..n_outputs.len() {
            let n = (self.feat_start[node + 1] - self.feat_start[node]) as usize;
            let len = (self.hash_start[node + 1] - self.hash_start[node]) as usize;
            let slots = len / 2;
            let ok_size = if n == 0 {
                len == 0
            } else {
                len % 2 == 0 && slots.is_power_of_two() && slots > n
            };
            if !ok_size {
                return Err(ChunkError::Hash { node });
            }
        }
        Ok(())
    }

    /// The O(weights) checks: entry offsets, sorted in-range feature ids, output indexes,
    /// finite weights, and every hash slot naming one of its node's features at its position.
    fn validate_entries(&self, n_outputs: &[usize], n_features: usize) -> Result<(), ChunkError> {
        check_offsets("entry_start", &self.entry_start, self.entry_out.len())?;
        for node in 0..n_outputs.len() {
            let start = self.feat_start[node] as usize;
            let n = self.feat_start[node + 1] as usize - start;
            let table =
                &self.hash[self.hash_start[node] as usize..self.hash_start[node + 1] as usize];
            // Every used slot names one of the node's features at its true position, and a free
            // slot exists, so a probe always ends and finds exactly the stored features. One
            // pass, without early exits: a valid table is the common case.
            let feats = &self.feat[start..start + n];
            let (mut bad_slot, mut free) = (false, false);
            if let Some(last) = n.checked_sub(1) {
                // Branch-free: about a third of the slots are used, so a branch on each slot's
                // state is mispredicted often. Without it, verifying a 108 MB debian-deps bundle
                // (checksums, entries, names) went from 25.3 to 19.1 ms.
                for s in table.chunks_exact(2) {
                    let (key, at) = (s[0], s[1] as usize);
                    let empty = key == EMPTY;
                    let hit = (at < n) & (feats[at.min(last)] == key);
                    free |= empty;
                    bad_slot |= !(empty | hit);
                }
            } else {
                // A node without features has an empty table (checked by the structural pass).
                bad_slot = !table.is_empty();
            }
            if bad_slot || (n > 0 && !free) {
                return Err(ChunkError::Hash { node });
            }
        }
        for (node, &m) in n_outputs.iter().enumerate() {
            // One branch-free pass per array over the node's features and its entries (which
            // `entry_start`'s offsets, checked above, make one contiguous range), so the checks
            // vectorize; only a node that fails is walked again to name the culprit.
            let (p0, p1) = (
                self.feat_start[node] as usize,
                self.feat_start[node + 1] as usize,
            );
            let feats = &self.feat[p0..p1];
            let sorted = feats.windows(2).fold(true, |ok, w| ok & (w[0] < w[1]));
            let in_range = feats.last().is_none_or(|&f| (f as usize) < n_features);
            let (a, b) = (self.entry_start[p0] as usize, self.entry_start[p1] as usize);
            let outs = &self.entry_out[a..b];
            let max_out = outs.iter().fold(0u32, |acc, &o| acc.max(o));
            // An exponent of all ones is an infinity or a NaN.
            let max_exp = self.entry_weight[a..b]
                .iter()
                .fold(0u32, |acc, w| acc.max(w.to_bits() & F32_EXP));
            let outs_ok = outs.is_empty() || (max_out as usize) < m;
            if !(sorted && in_range && outs_ok && max_exp != F32_EXP) {
                return Err(self.entry_error(node, m, n_features));
            }
        }
        Ok(())
    }

    /// The first bad feature id, output index or weight of `node`, which the vectorized pass in
    /// [`Chunks::validate_entries`] found to have one.
    #[cold]
    fn entry_error(&self, node: usize, m: usize, n_features: usize) -> ChunkError {
        let feats = self.feat_start[node] as usize..self.feat_start[node + 1] as usize;
        let mut prev: Option<u32> = None;
        for p in feats {
            let f = self.feat[p];
            if prev.is_some_and(|q| q >= f) || f as usize >= n_features {
                return ChunkError::Feature {
                    node,
                    feature: f,
                    n_features,
                };
            }
            prev = Some(f);
            let entries = self.entry_start[p] as usize..self.entry_start[p + 1] as usize;
            for e in entries {
                if self.entry_out[e] as usize >= m {
                    return ChunkError::Output {
                        node,
                        output: self.entry_out[e],
                        n_outputs: m,
                    };
                }
                if !self.entry_weight[e].is_finite() {
                    return ChunkError::Weight { node };
                }
            }
        }
        // Unreachable while the fast pass and this walk check the same things.
        ChunkError::Weight { node }
    }

    /// Adds node `node`'s weights times the query to `acc` (one slot per output).
    ///
    /// `q_idx`/`q_val` is the query, sorted by feature id; `dense` holds the same query as a dense
    /// vector (zero elsewhere) of at least the model's feature count. Small chunks are scanned and
    /// looked up in `dense` ([`Chunks::score_scan`]); in large ones each query feature is looked
    /// up in the node's hash table ([`Chunks::score_hash`]).
    #[inline]
    pub fn score(&self, node: usize, q_idx: &[u32], q_val: &[f32], dense: &[f32], acc: &mut [f32]) {
        let n_feats = (self.feat_start[node + 1] - self.feat_start[node]) as usize;
        if n_feats <= SCAN_FACTOR * q_idx.len() {
            self.score_scan(node, dense, acc);
        } else {
            self.score_hash(node, q_idx, q_val, acc);
        }
    }

    /// [`Chunks::score`] by looking each query feature up in the node's hash table.
    ///
    /// The work is split into passes over blocks of query features, each pass making only
    /// independent memory accesses (all probes, then all entry ranges, then all entries), so that
    /// their cache misses overlap instead of queueing one behind the other.
    #[inline]
    pub fn score_hash(&self, node: usize, q_idx: &[u32], q_val: &[f32], acc: &mut [f32]) {
        const BLOCK: usize = 64;
        let start = self.feat_start[node] as usize;
        let table = &self.hash[self.hash_start[node] as usize..self.hash_start[node + 1] as usize];
        if table.is_empty() {
            return;
        }
        let slots = table.len() / 2;
        let mask = slots - 1;
        let n_feats = (self.feat_start[node + 1] as usize).saturating_sub(start);
        let mut pos = [0u32; BLOCK];
        let mut val = [0f32; BLOCK];
        let mut range = [(0u32, 0u32); BLOCK];
        for (qi, qv) in q_idx.chunks(BLOCK).zip(q_val.chunks(BLOCK)) {
            // Pass 1: load every home slot (independent loads, no branches between them).
            let mut home_slot = [(0u32, 0u32, 0usize); BLOCK];
            for (k, &f) in qi.iter().enumerate() {
                let h = home(f, mask);
                home_slot[k] = (table[2 * h], table[2 * h + 1], h);
            }
            // Pass 2: settle each probe, walking on only after a collision.
            let mut found = 0;
            for (k, (&f, &x)) in qi.iter().zip(qv).enumerate() {
                let (mut key, mut at, mut h) = home_slot[k];
                // A valid table always has a free slot; the bound keeps a corrupt one (opened
                // without the O(weights) checks) from looping.
                for _ in 0..slots {
                    if key == f {
                        if (at as usize) < n_feats {
                            pos[found] = at;
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
            for k in 0..found {
                let p = start + pos[k] as usize;
                range[k] = (self.entry_start[p], self.entry_start[p + 1]);
            }
            for k in 0..found {
                let (a, b) = (range[k].0 as usize, range[k].1 as usize);
                self.add_range(a, b, val[k], acc);
            }
        }
    }

    /// [`Chunks::score`] by one pass over the chunk's features, each looked up in the dense query.
    #[inline]
    pub fn score_scan(&self, node: usize, dense: &[f32], acc: &mut [f32]) {
        let start = self.feat_start[node] as usize;
        let feats = &self.feat[start..self.feat_start[node + 1] as usize];
        for (p, &f) in feats.iter().enumerate() {
            let x = dense.get(f as usize).copied().unwrap_or(0.0);
            if x != 0.0 {
                self.add_entries(start + p, x, acc);
            }
        }
    }

    /// [`Chunks::score`] by merging the sorted query into the chunk's sorted features, with a
    /// binary search over the rest of the chunk per query feature.
    #[inline]
    pub fn score_search(&self, node: usize, q_idx: &[u32], q_val: &[f32], acc: &mut [f32]) {
        let start = self.feat_start[node] as usize;
        let feats = &self.feat[start..self.feat_start[node + 1] as usize];
        let mut lo = 0;
        for (&f, &x) in q_idx.iter().zip(q_val) {
            if lo >= feats.len() {
                break;
            }
            match feats[lo..].binary_search(&f) {
                Ok(p) => {
                    self.add_entries(start + lo + p, x, acc);
                    lo += p + 1;
                }
                Err(p) => lo += p,
            }
        }
    }

    #[inline]
    fn add_entries(&self, pos: usize, x: f32, acc: &mut [f32]) {
        self.add_range(
            self.entry_start[pos] as usize,
            self.entry_start[pos + 1] as usize,
            x,
            acc,
        );
    }

    /// Adds entries `a..b` times `x` to `acc`. An empty or out-of-bounds range (only a bundle
    /// opened without the O(weights) checks can hold one) adds nothing.
    #[inline]
    fn add_range(&self, a: usize, b: usize, x: f32, acc: &mut [f32]) {
        let (Some(outs), Some(weights)) = (self.entry_out.get(a..b), self.entry_weight.get(a..b))
        else {
            return;
        };
        for (&o, &w) in outs.iter().zip(weights) {
            if let Some(slot) = acc.get_mut(o as usize) {
                *slot += w * x;
            }
        }
    }
}

fn check_offsets(array: &'static str, offsets: &[u32], end: usize) -> Result<(), ChunkError> {
    if offsets.first() != Some(&0) {
        return Err(ChunkError::Offsets { array, at: 0 });
    }
    if let Some(at) = offsets.windows(2).position(|w| w[0] > w[1]) {
        return Err(ChunkError::Offsets { array, at: at + 1 });
    }
    if offsets.last().map(|&x| x as usize) != Some(end) {
        return Err(ChunkError::Offsets {
            array,
            at: offsets.len() - 1,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn two_nodes() -> ChunksBuilder {
        let mut b = ChunksBuilder::new();
        // Node 0: two outputs. Output 0 uses features 1 and 5, output 1 uses 5 and 7.
        b.push_node([(&[1u32, 5][..], &[1.0f32, 2.0][..]), (&[5, 7], &[3.0, 4.0])])
            .unwrap();
        // Node 1: three outputs, output 1 empty.
        b.push_node([(&[0u32][..], &[0.5f32][..]), (&[], &[]), (&[9], &[-1.0])])
            .unwrap();
        b
    }

    #[test]
    fn builder_lays_out_feature_major() {
        let b = two_nodes();
        assert_eq!(b.feat_start, vec![0, 3, 5]);
        assert_eq!(b.feat, vec![1, 5, 7, 0, 9]);
        assert_eq!(b.entry_start, vec![0, 1, 3, 4, 5, 6]);
        assert_eq!(b.entry_out, vec![0, 0, 1, 1, 0, 2]);
        assert_eq!(b.entry_weight, vec![1.0, 2.0, 3.0, 4.0, 0.5, -1.0]);
        b.validate(&[2, 3], 10).unwrap();
    }

    #[test]
    fn scan_and_search_agree() {
        let b = two_nodes();
        let q_idx = [1u32, 5, 9];
        let q_val = [2.0f32, 1.0, 3.0];
        let mut dense = vec![0.0; 10];
        for (&i, &v) in q_idx.iter().zip(&q_val) {
            dense[i as usize] = v;
        }
        let mut acc = vec![0.0; 2];
        b.score(0, &q_idx, &q_val, &dense, &mut acc);
        assert_eq!(acc, vec![1.0 * 2.0 + 2.0 * 1.0, 3.0 * 1.0]);
        // A one-feature query over a larger chunk takes the binary-search path.
        let mut big = ChunksBuilder::new();
        let idx: Vec<u32> = (0..100).collect();
        let val: Vec<f32> = (0..100).map(|i| i as f32).collect();
        big.push_node([(&idx[..], &val[..])]).unwrap();
        let mut dense = vec![0.0; 100];
        dense[42] = 2.0;
        let mut acc = vec![0.0; 1];
        big.score(0, &[42], &[2.0], &dense, &mut acc);
        assert_eq!(acc, vec![84.0]);
    }

    #[test]
    fn scan_search_and_hash_agree_on_random_chunks() {
        use rand::{RngExt, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(9);
        for _ in 0..50 {
            let d = 500;
            let outputs: Vec<(Vec<u32>, Vec<f32>)> = (0..rng.random_range(1..6))
                .map(|_| {
                    let mut idx: Vec<u32> = (0..rng.random_range(0..80))
                        .map(|_| rng.random_range(0..d as u32))
                        .collect();
                    idx.sort_unstable();
                    idx.dedup();
                    let val = idx.iter().map(|_| rng.random_range(-1.0f32..1.0)).collect();
                    (idx, val)
                })
                .collect();
            let mut b = ChunksBuilder::new();
            b.push_node(outputs.iter().map(|(i, v)| (&i[..], &v[..])))
                .unwrap();
            b.validate(&[outputs.len()], d).unwrap();
            let mut q_idx: Vec<u32> = (0..rng.random_range(0..40))
                .map(|_| rng.random_range(0..d as u32))
                .collect();
            q_idx.sort_unstable();
            q_idx.dedup();
            let q_val: Vec<f32> = q_idx
                .iter()
                .map(|_| rng.random_range(0.1f32..1.0))
                .collect();
            let mut dense = vec![0.0; d];
            for (&i, &v) in q_idx.iter().zip(&q_val) {
                dense[i as usize] = v;
            }
            let m = outputs.len();
            let (mut a, mut bb, mut c) = (vec![0.0; m], vec![0.0; m], vec![0.0; m]);
            b.score_scan(0, &dense, &mut a);
            b.score_search(0, &q_idx, &q_val, &mut bb);
            b.score_hash(0, &q_idx, &q_val, &mut c);
            for k in 0..m {
                assert!(
                    (a[k] - bb[k]).abs() < 1e-5 && (a[k] - c[k]).abs() < 1e-5,
                    "{a:?} {bb:?} {c:?}"
                );
            }
        }
    }

    #[test]
    fn validate_refuses_a_bad_hash_table() {
        let mut b = ChunksBuilder::new();
        b.push_node([(&[1u32, 4][..], &[1.0f32, 2.0][..])]).unwrap();
        b.validate(&[1], 10).unwrap();
        // A slot naming a position past the node's features.
        let mut bad = b.clone();
        let slot = (0..bad.hash.len() / 2)
            .find(|&h| bad.hash[2 * h] != EMPTY)
            .unwrap();
        bad.hash[2 * slot + 1] = 7;
        assert!(matches!(
            bad.validate(&[1], 10),
            Err(ChunkError::Hash { node: 0 })
        ));
        // A slot naming a real position that holds another feature.
        let mut swapped = b.clone();
        swapped.hash[2 * slot + 1] ^= 1;
        assert!(matches!(
            swapped.validate(&[1], 10),
            Err(ChunkError::Hash { node: 0 })
        ));
        // A full table, on which a probe for a missing feature would never end.
        let mut full = b.clone();
        for (h, s) in full.hash.chunks_exact_mut(2).enumerate() {
            s[0] = 1 + 3 * (h as u32 % 2);
            s[1] = h as u32 % 2;
        }
        assert!(matches!(
            full.validate(&[1], 10),
            Err(ChunkError::Hash { node: 0 })
        ));
        // A table whose size is not a power of two.
        let mut odd = b;
        odd.hash.extend([EMPTY, EMPTY]);
        *odd.hash_start.last_mut().unwrap() += 2;
        assert!(matches!(
            odd.validate(&[1], 10),
            Err(ChunkError::Hash { node: 0 })
        ));
    }

    #[test]
    fn validate_refuses_bad_arrays() {
        let b = two_nodes();
        assert!(matches!(
            b.validate(&[2, 3], 8),
            Err(ChunkError::Feature { feature: 9, .. })
        ));
        assert!(matches!(
            b.validate(&[2, 2], 10),
            Err(ChunkError::Output { output: 2, .. })
        ));
        let mut bad = b.clone();
        bad.entry_start[2] = 7;
        assert!(bad.validate(&[2, 3], 10).is_err());
        let mut bad = b.clone();
        bad.entry_weight[0] = f32::NAN;
        assert_eq!(
            bad.validate(&[2, 3], 10),
            Err(ChunkError::Weight { node: 0 })
        );
        assert!(b.validate(&[2], 10).is_err());
    }

    /// The vectorized pass checks whole nodes at once: a bad value anywhere in a node, first
    /// entry or last, is found and named with its node.
    #[test]
    fn validate_finds_a_bad_entry_at_every_position() {
        let b = two_nodes();
        b.validate(&[2, 3], 10).unwrap();
        let node_of = |e: usize| {
            let p = b
                .entry_start
                .iter()
                .rposition(|&s| s as usize <= e)
                .unwrap();
            b.feat_start.iter().rposition(|&s| s as usize <= p).unwrap()
        };
        for e in 0..b.entry_weight.len() {
            let node = node_of(e);
            for w in [f32::INFINITY, f32::NEG_INFINITY, f32::NAN] {
                let mut bad = b.clone();
                bad.entry_weight[e] = w;
                assert_eq!(bad.validate(&[2, 3], 10), Err(ChunkError::Weight { node }));
            }
            let mut bad = b.clone();
            bad.entry_out[e] = 3;
            assert_eq!(
                bad.validate(&[2, 3], 10),
                Err(ChunkError::Output {
                    node,
                    output: 3,
                    n_outputs: [2, 3][node],
                })
            );
        }
        // Feature ids out of order within a node (the hash table updated to match, so that
        // only the order is wrong).
        let mut bad = b.clone();
        bad.feat.swap(0, 1);
        let node0 = bad.hash_start[0] as usize..bad.hash_start[1] as usize;
        for s in bad.hash[node0].chunks_exact_mut(2) {
            if s[0] != EMPTY && s[1] < 2 {
                s[1] = 1 - s[1];
            }
        }
        assert!(matches!(
            bad.validate(&[2, 3], 10),
            Err(ChunkError::Feature { node: 0, .. })
        ));
    }
}
