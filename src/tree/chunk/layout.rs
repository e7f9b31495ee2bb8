//! The chunk arrays, their errors, and the per-node accessors the other rooms share.

use super::*;
use thiserror::Error;

/// Feature ids per rank block.
pub const RANK_SPAN: u32 = 96;

/// Accumulator slots that make every output of 16 bits or fewer addressable: given an
/// accumulator at least this long, adding an entry needs no bounds check (see
/// [`Chunks::score`]).
pub const OUT_SLOTS: usize = 1 << 16;

/// `u32`s per rank block: the running count and three bitmap words.
pub const RANK_BLOCK: usize = 4;

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
    /// A node's rank index has a bad size, count or bit, or the node has no index or two.
    #[error("node {node}: the feature rank index is malformed")]
    Rank {
        /// The node.
        node: usize,
    },
    /// A node's rows are not one weight per output for each of its features, or the node has
    /// both rows and entries.
    #[error("node {node}: the weight rows are malformed")]
    Rows {
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
/// training, memory-mapped sections when serving). The entry outputs have their own storage
/// type `O` (see [`Widths`]), `u32`s like the other indexes unless named.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Chunks<U, F, O = U> {
    /// Per node, the start of its features in `feat` (length nodes + 1).
    pub feat_start: U,
    /// Sorted feature ids per node.
    pub feat: U,
    /// Per feature position, the start of its entries (length `feat.len()` + 1).
    pub entry_start: U,
    /// Output index of each entry.
    pub entry_out: O,
    /// Weight of each entry.
    pub entry_weight: F,
    /// The entries packed one per word (see the module docs), or empty when they are in
    /// `entry_out` and `entry_weight` (in bundles before packing, or written without it). A tree
    /// with packed entries has empty `entry_out` and `entry_weight`.
    pub entry_packed: U,
    /// Per node, the start of its feature hash table in `hash` (length nodes + 1). A node's
    /// table has a power-of-two number of slots, at least twice its feature count (none when it
    /// has no features).
    pub hash_start: U,
    /// Open-addressing tables (linear probing) from feature id to the feature's position within
    /// its node. A slot is two values, `[feature id, position]`, with feature [`EMPTY`] when free.
    /// Keeping the id in the slot settles a probe with one memory access.
    pub hash: U,
    /// Per node, the start of its rank blocks in `rank` (length nodes + 1), or empty when no
    /// node has them (bundles from before the rank index). A node has a rank index or a hash
    /// table, not both; one without features has neither.
    pub rank_start: U,
    /// Rank blocks of [`RANK_BLOCK`] values each (see the module docs).
    pub rank: U,
    /// Per node, the start of its rows in `row_weight`, or in `row_packed` when the rows are
    /// packed (length nodes + 1), or empty when no node has them (bundles from before rows). A
    /// node with rows has no entries.
    pub row_start: U,
    /// Row weights: per feature position of a row node, one weight per output. Empty when the
    /// rows are packed in `row_packed`.
    pub row_weight: F,
    /// Row weights as bfloat16 pairs, or empty when they are `f32`s in `row_weight` (in bundles
    /// before format version 4, or written without `weights = "bf16"`): per feature position of
    /// a row node, ⌈outputs / 2⌉ words, output `2j`'s weight in the low half of word `j` and
    /// output `2j + 1`'s in the high half (zero past the last output). `row_start` then counts
    /// words. A tree has one row layout or the other.
    pub row_packed: U,
}

/// Which feature index [`ChunksBuilder::push_node_with`] builds for a node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IndexChoice {
    /// The smaller of the two; the rank index on a tie.
    Smaller,
    /// Always the hash table.
    Hash,
    /// Always the rank index.
    Rank,
}

/// [`RowChoice::Smaller`] gives a node rows when they hold at most this many weights per entry
/// they replace (`outputs · features ≤ ROW_SLOTS_PER_ENTRY · entries`; see the module docs).
pub const ROW_SLOTS_PER_ENTRY: usize = 4;

/// How [`ChunksBuilder::push_node_as`] stores a node's weights.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RowChoice {
    /// Rows when they hold at most [`ROW_SLOTS_PER_ENTRY`] weights per entry (see the module
    /// docs).
    Smaller,
    /// Always entries.
    Entries,
    /// Always rows (for a node with features and outputs).
    Rows,
}

/// A free slot of a chunk hash table.
pub const EMPTY: u32 = u32::MAX;

/// The home slot of feature `f` in a table with mask `mask` (size − 1).
#[inline]
pub(super) fn home(f: u32, mask: usize) -> usize {
    ((u64::from(f).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) as usize) & mask
}

impl<U, F, O> Chunks<U, F, O>
where
    U: std::ops::Deref<Target = [u32]>,
    F: std::ops::Deref<Target = [f32]>,
    O: EntryOuts,
{
    /// The number of nodes.
    pub fn n_nodes(&self) -> usize {
        self.feat_start.len().saturating_sub(1)
    }

    /// The same chunks over plain slices (see [`super::view::TreeArrays::borrowed`]).
    pub fn borrowed(&self) -> Chunks<&[u32], &[f32], OutSlice<'_>> {
        self.with_outs(self.entry_out.outs())
    }

    /// The same chunks over plain slices, with `entry_out` standing in for the outputs.
    pub(super) fn with_outs<P>(&self, entry_out: P) -> Chunks<&[u32], &[f32], P> {
        Chunks {
            feat_start: &self.feat_start,
            feat: &self.feat,
            entry_start: &self.entry_start,
            entry_out,
            entry_weight: &self.entry_weight,
            entry_packed: &self.entry_packed,
            hash_start: &self.hash_start,
            hash: &self.hash,
            rank_start: &self.rank_start,
            rank: &self.rank,
            row_start: &self.row_start,
            row_weight: &self.row_weight,
            row_packed: &self.row_packed,
        }
    }

    /// The rows as bfloat16 pairs (see [`Chunks::row_packed`]), each weight rounded to the
    /// nearest bfloat16 as [`pack_entry`] rounds it: the row offsets, in words, and the words.
    /// Both are empty when no node has rows.
    pub fn packed_rows(&self) -> (Vec<u32>, Vec<u32>) {
        if self.row_start.is_empty() {
            return (Vec::new(), Vec::new());
        }
        let half = |w: f32| pack_entry(0, w) & 0xffff;
        let mut words = Vec::new();
        let mut starts = vec![0u32];
        for node in 0..self.n_nodes() {
            match self.node_rows(node) {
                Rows::F32(rows) => {
                    let n_feats = (self.feat_start[node + 1] - self.feat_start[node]) as usize;
                    if let Some(m) = rows.len().checked_div(n_feats).filter(|&m| m > 0) {
                        for row in rows.chunks_exact(m) {
                            words.extend(row.chunks(2).map(|pair| {
                                half(pair[0]) | pair.get(1).map_or(0, |&w| half(w) << 16)
                            }));
                        }
                    }
                }
                Rows::Bf16(rows) => words.extend_from_slice(rows),
            }
            // No more words than the `f32` rows have weights, whose offsets are `u32`s.
            starts.push(u32::try_from(words.len()).unwrap_or(u32::MAX));
        }
        (starts, words)
    }

    /// The entries, in whichever layout they are stored.
    #[inline]
    pub fn entries(&self) -> EntrySlice<'_> {
        if self.entry_packed.is_empty() {
            EntrySlice::Split(self.entry_out.outs(), &self.entry_weight)
        } else {
            EntrySlice::Packed(&self.entry_packed)
        }
    }

    /// The same weights rebuilt with every node's feature index chosen by `index`, given each
    /// node's output count (for benchmarks and tests that compare the two indexes).
    pub fn rebuilt(
        &self,
        n_outputs: &[usize],
        index: IndexChoice,
    ) -> Result<ChunksBuilder, ChunkError> {
        self.rebuilt_as(n_outputs, index, RowChoice::Smaller)
    }

    /// [`Chunks::rebuilt`], with every node's weights stored as `rows` says. A row's zero
    /// weights are not carried over as entries.
    pub fn rebuilt_as(
        &self,
        n_outputs: &[usize],
        index: IndexChoice,
        rows: RowChoice,
    ) -> Result<ChunksBuilder, ChunkError> {
        self.validate_structure(n_outputs)?;
        let entries = self.entries();
        let mut b = ChunksBuilder::new();
        for (node, &m) in n_outputs.iter().enumerate() {
            let mut outs: Vec<(Vec<u32>, Vec<f32>)> = vec![(Vec::new(), Vec::new()); m];
            let first = self.feat_start[node] as usize;
            let row = self.node_rows(node);
            for p in first..self.feat_start[node + 1] as usize {
                // Validated above: a row node holds exactly m weights per feature.
                for (o, w) in row.weights(p - first, m).into_iter().enumerate() {
                    if w != 0.0 {
                        outs[o].0.push(self.feat[p]);
                        outs[o].1.push(w);
                    }
                }
                for e in self.entry_start[p] as usize..self.entry_start[p + 1] as usize {
                    let (out, w) =
                        with_entries!(entries, |es| es.get(e)).unwrap_or((u32::MAX, 0.0));
                    let o = outs
                        .get_mut(out as usize)
                        .ok_or_else(|| self.entry_error(node, m, usize::MAX))?;
                    o.0.push(self.feat[p]);
                    o.1.push(w);
                }
            }
            b.push_node_as(outs.iter().map(|(i, v)| (&i[..], &v[..])), index, rows)?;
        }
        Ok(b)
    }

    /// Node `node`'s rows, in the tree's row layout (empty when it stores entries, or in a
    /// bundle without rows).
    #[inline]
    pub(super) fn node_rows(&self, node: usize) -> Rows<'_> {
        let range = match (self.row_start.get(node), self.row_start.get(node + 1)) {
            (Some(&a), Some(&b)) => a as usize..b as usize,
            _ => 0..0,
        };
        if self.row_packed.is_empty() {
            Rows::F32(self.row_weight.get(range).unwrap_or(&[]))
        } else {
            Rows::Bf16(self.row_packed.get(range).unwrap_or(&[]))
        }
    }

    /// `acc` cut to node `node`'s outputs when the node stores `rows` (one weight per output for
    /// each feature, so the row width is the output count); whole otherwise, as entries name
    /// their outputs. So a caller may pass more slots than the node has outputs (at least
    /// [`OUT_SLOTS`] spare the entry loops their bounds checks), and only the first ones are
    /// written. Packed rows round the width up to even: an odd node's last slot is then cut by
    /// an `acc` of exactly the node's outputs, and otherwise written with `0 · x`, as slots past
    /// the outputs may be.
    #[inline]
    pub(super) fn row_outputs<'a>(
        &self,
        node: usize,
        rows: Rows<'_>,
        acc: &'a mut [f32],
    ) -> &'a mut [f32] {
        let n_feats = (self.feat_start[node + 1] - self.feat_start[node]) as usize;
        if rows.is_empty() || n_feats == 0 {
            return acc;
        }
        let m = rows.slots(n_feats).min(acc.len());
        &mut acc[..m]
    }

    /// Whether node `node` stores its weights as rows.
    pub fn has_rows(&self, node: usize) -> bool {
        !self.node_rows(node).is_empty()
    }

    /// Node `node`'s rank blocks (empty when it uses a hash table, or in a bundle without rank
    /// sections).
    #[inline]
    pub(super) fn rank_blocks(&self, node: usize) -> &[u32] {
        match (self.rank_start.get(node), self.rank_start.get(node + 1)) {
            (Some(&a), Some(&b)) => self.rank.get(a as usize..b as usize).unwrap_or(&[]),
            _ => &[],
        }
    }

    /// The number of non-zero stored weights (a row's zeros are padding, not weights), so the
    /// count does not depend on the layout.
    pub fn n_weights(&self) -> usize {
        let packed: usize = self
            .row_packed
            .iter()
            .map(|&w| usize::from(w & 0x7fff != 0) + usize::from(w & 0x7fff_0000 != 0))
            .sum();
        with_entries!(self.entries(), |e| e.len())
            + self.row_weight.iter().filter(|&&w| w != 0.0).count()
            + packed
    }
}

/// One node's rows over a plain slice, in either stored layout (empty when the node stores
/// entries).
#[derive(Clone, Copy, Debug)]
pub(super) enum Rows<'a> {
    /// One `f32` per output.
    F32(&'a [f32]),
    /// Two bfloat16 weights per word (see [`Chunks::row_packed`]).
    Bf16(&'a [u32]),
}

impl Rows<'_> {
    /// The stored length, in weights or words.
    pub(super) fn len(self) -> usize {
        match self {
            Rows::F32(r) => r.len(),
            Rows::Bf16(r) => r.len(),
        }
    }

    pub(super) fn is_empty(self) -> bool {
        self.len() == 0
    }

    /// The weight slots per feature when the rows cover `n_feats` features (not 0): the node's
    /// outputs, rounded up to even when packed.
    pub(super) fn slots(self, n_feats: usize) -> usize {
        match self {
            Rows::F32(r) => r.len() / n_feats,
            Rows::Bf16(r) => 2 * (r.len() / n_feats),
        }
    }

    /// Adds row `p` times `x` to `acc`, one weight per slot (see [`add_row`]).
    #[inline]
    pub(super) fn add(self, p: usize, x: f32, acc: &mut [f32]) {
        match self {
            Rows::F32(r) => add_row(r, p, x, acc),
            Rows::Bf16(r) => add_row_bf16(r, p, x, acc),
        }
    }

    /// Row `p`'s `m` weights (none when past the end).
    pub(super) fn weights(self, p: usize, m: usize) -> Vec<f32> {
        match self {
            Rows::F32(r) => r.get(p * m..p * m + m).unwrap_or(&[]).to_vec(),
            Rows::Bf16(r) => {
                let w = m.div_ceil(2);
                let row = r.get(p * w..p * w + w).unwrap_or(&[]);
                let halves = row.iter().flat_map(|&x| [x << 16, x & 0xffff_0000]);
                halves.take(m).map(f32::from_bits).collect()
            }
        }
    }
}
