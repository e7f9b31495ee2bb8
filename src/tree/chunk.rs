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
//! | `entry_out` | entries | the output (child or label position) within the node; stored as `u8`, `u16` or `u32` (see [`Widths`]) |
//! | `entry_weight` | entries | the weight |
//!
//! A tree may instead store its entries **packed**, one `u32` each in `entry_packed`: the output
//! in the high 16 bits and the weight as a bfloat16 (an `f32`'s upper half, rounded to nearest)
//! in the low 16 ([`pack_entry`]). `entry_out` and `entry_weight` are then empty. An entry's
//! output and weight then share one read, and an entry takes four bytes instead of five or six;
//! the trainer writes this layout when asked (`weights = "bf16"`) and every output of the tree
//! is below 2^16. A bfloat16 keeps 8 significant bits: with the solver's pruning (weights of
//! magnitude 0.1 and up) each weight moves by at most 0.2%, and on debian-deps (T = 1, B = 8)
//! P@1, P@5 and nDCG@5 moved by 10^-4 or less (docs/decisions/0005-bf16-packing.md).
//!
//! Biases are stored per output elsewhere (one per child or label), next to the tree topology.
//!
//! A node whose weights are dense enough stores them as **rows** instead of entries: for each of
//! its features, one weight per output, zeros included, as PECOS's chunks do. A feature's weights
//! are then found by arithmetic, without reading `entry_start` or `entry_out`:
//!
//! | array | length | meaning |
//! | --- | --- | --- |
//! | `row_start` | nodes + 1 | node `i`'s rows are `row_weight[row_start[i]..row_start[i + 1]]` |
//! | `row_weight` | Σ features · outputs over row nodes | position `p`'s weights are `m` values from `row_start[i] + p·m` |
//!
//! A node has rows when they hold at most [`ROW_SLOTS_PER_ENTRY`] = 4 weights per entry they
//! replace (`m · features ≤ 4 · entries`), which holds for every node of a binary tree (one or
//! two entries per feature, against a row of two weights) and for the internal nodes of a
//! branching-8 tree on debian-deps (2.7 entries per feature). A query feature found in a row
//! node costs two cache lines (its index and its row) instead of three (index, entry range,
//! entries), which is what a search waits on. The rule counted entries at two weights each
//! until the serving model's profile showed the entry ranges as a third of the search's
//! misses; at four, its internal nodes moved to rows (docs/decisions/0003-weight-rows-four-weights.md). A row
//! node's features keep their (empty) `entry_start` ranges, so positions mean the same in
//! every node. Bundles written before rows have no `row` sections; read as empty, every node
//! uses its entries.
//!
//! A tree with packed entries packs its rows too (format version 4 on): `row_packed` instead of
//! `row_weight`, two bfloat16 weights a word, output `2j` in the low half of a row's word `j`
//! and `2j + 1` in the high half, so a row takes ⌈m / 2⌉ words and `row_start` counts words
//! (an odd row's last high half is zero). The weights are the ones the `f32` rows would hold,
//! rounded as [`pack_entry`] rounds, and score the same to the bit; the serving model's rows
//! went from 16.6 to 8.3 MB (docs/decisions/0005-bf16-packing.md).
//!
//! To find a query feature's position within a node, each node with features has one of two
//! indexes, whichever is smaller (ties go to the rank index):
//!
//! | array | length | meaning |
//! | --- | --- | --- |
//! | `hash_start`, `hash` | nodes + 1, slots · 2 | an open-addressing table, feature id → position |
//! | `rank_start`, `rank` | nodes + 1, blocks · 4 | a rank bitmap: which ids the node holds, with running counts |
//!
//! A rank block covers [`RANK_SPAN`] = 96 consecutive feature ids in four `u32`s: the number of
//! the node's features below the block, then three 32-bit words with bit `i` of word `j` set when
//! the node holds feature `96·block + 32·j + i`. A feature's position is the block's count plus
//! the set bits below its own, so a lookup reads one 16-byte block (never split across cache
//! lines, as sections are 64-byte aligned) and never probes. A node's blocks run up to the one
//! holding its largest feature id; ids past them are absent. On debian-deps (T = 1) the index
//! went from 52.7 MB of hash tables to 7.0 MB of rank blocks plus 0.2 MB of tables (leaves with
//! few features), so far more of it stays in cache.
//!
//! Bundles written before the rank index have no `rank` sections; read as empty, every node uses
//! its hash table as before.

use thiserror::Error;

/// How many chunk features per query feature make a linear scan of the chunk slower than a
/// binary search per query feature. Measured by `benches/predict.rs` (scan vs. search).
const SCAN_FACTOR: usize = 8;

/// Feature ids per rank block.
pub const RANK_SPAN: u32 = 96;

/// Accumulator slots that make every output of 16 bits or fewer addressable: given an
/// accumulator at least this long, adding an entry needs no bounds check (see
/// [`Chunks::score`]).
pub const OUT_SLOTS: usize = 1 << 16;

/// `u32`s per rank block: the running count and three bitmap words.
pub const RANK_BLOCK: usize = 4;

/// Query features per pass of the index lookups (see [`Chunks::score_hash`]).
const LOOKUP_BLOCK: usize = 64;

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

/// Values stored at one of three widths.
///
/// A tree's entry outputs are written at the narrowest width that holds its largest one (format
/// version 3 on): a leaf's outputs are its labels, rarely more than a few hundred, so `u8` or
/// `u16` usually does, and the entries shrink from eight bytes to five or six.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Widths<A, B, C> {
    /// `u8` values.
    U8(A),
    /// `u16` values.
    U16(B),
    /// `u32` values.
    U32(C),
}

/// Evaluates `$body` with `$o` bound to the value inside `$widths`, whichever width it is, so
/// that a generic loop in `$body` is compiled once per width and the width is matched once.
macro_rules! with_width {
    ($widths:expr, |$o:ident| $body:expr) => {
        match $widths {
            Widths::U8($o) => $body,
            Widths::U16($o) => $body,
            Widths::U32($o) => $body,
        }
    };
}

/// Entry outputs as a plain slice of one width.
pub type OutSlice<'a> = Widths<&'a [u8], &'a [u16], &'a [u32]>;

impl OutSlice<'_> {
    /// The number of outputs.
    pub fn len(&self) -> usize {
        with_width!(self, |o| o.len())
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Their size in bytes.
    pub fn byte_len(&self) -> usize {
        match self {
            Widths::U8(o) => o.len(),
            Widths::U16(o) => 2 * o.len(),
            Widths::U32(o) => 4 * o.len(),
        }
    }

    /// Output `i`, if there is one.
    #[inline]
    pub fn get(&self, i: usize) -> Option<u32> {
        match self {
            Widths::U8(o) => o.get(i).map(|&v| u32::from(v)),
            Widths::U16(o) => o.get(i).map(|&v| u32::from(v)),
            Widths::U32(o) => o.get(i).copied(),
        }
    }
}

/// Storage of a tree's entry outputs: `u32`s (while training, and in bundles before format
/// version 3), or values of any of the three widths.
pub trait EntryOuts {
    /// The outputs as a slice.
    fn outs(&self) -> OutSlice<'_>;
}

impl<T: std::ops::Deref<Target = [u32]>> EntryOuts for T {
    #[inline]
    fn outs(&self) -> OutSlice<'_> {
        Widths::U32(self)
    }
}

impl<A, B, C> EntryOuts for Widths<A, B, C>
where
    A: std::ops::Deref<Target = [u8]>,
    B: std::ops::Deref<Target = [u16]>,
    C: std::ops::Deref<Target = [u32]>,
{
    #[inline]
    fn outs(&self) -> OutSlice<'_> {
        match self {
            Widths::U8(o) => Widths::U8(o),
            Widths::U16(o) => Widths::U16(o),
            Widths::U32(o) => Widths::U32(o),
        }
    }
}

/// Entry outputs narrowed from `u32`s (the narrower widths copied, `u32`s borrowed).
pub type NarrowOuts<'a> = Widths<Vec<u8>, Vec<u16>, &'a [u32]>;

/// `outs` at the narrowest width that holds them all, for writing.
pub fn narrowest(outs: &[u32]) -> NarrowOuts<'_> {
    let max = outs.iter().copied().max().unwrap_or(0);
    if u8::try_from(max).is_ok() {
        Widths::U8(outs.iter().map(|&o| o as u8).collect())
    } else if u16::try_from(max).is_ok() {
        Widths::U16(outs.iter().map(|&o| o as u16).collect())
    } else {
        Widths::U32(outs)
    }
}

/// Packs entry output `out` (below 2^16) and weight `w` into one word: the output in the high
/// 16 bits, `w` rounded to the nearest bfloat16 in the low 16. A finite weight beyond the
/// largest bfloat16 is truncated to it rather than rounded to an infinity.
pub fn pack_entry(out: u16, w: f32) -> u32 {
    let bits = w.to_bits();
    let rounded = bits.wrapping_add(0x7fff + ((bits >> 16) & 1)) >> 16;
    let half = if w.is_finite() && rounded & (F32_EXP >> 16) == F32_EXP >> 16 {
        bits >> 16
    } else {
        rounded
    };
    (u32::from(out) << 16) | (half & 0xffff)
}

/// The weight of packed entry `word` (see [`pack_entry`]).
#[inline]
pub fn packed_weight(word: u32) -> f32 {
    f32::from_bits(word << 16)
}

/// `w` rounded to the nearest bfloat16, as [`pack_entry`] stores it, widened back to `f32`.
pub fn round_bf16(w: f32) -> f32 {
    packed_weight(pack_entry(0, w))
}

/// `outs` and `weights` packed one entry per word ([`pack_entry`]), or `None` when an output
/// does not fit 16 bits.
pub fn pack_entries(outs: &[u32], weights: &[f32]) -> Option<Vec<u32>> {
    outs.iter()
        .zip(weights)
        .map(|(&o, &w)| u16::try_from(o).ok().map(|o| pack_entry(o, w)))
        .collect()
}

/// A tree's entries over plain slices, in either stored layout.
#[derive(Clone, Copy, Debug)]
pub enum EntrySlice<'a> {
    /// Outputs at one of three widths and `f32` weights, in two arrays.
    Split(OutSlice<'a>, &'a [f32]),
    /// One word per entry ([`pack_entry`]).
    Packed(&'a [u32]),
}

/// What the scoring and validation loops read of one entry layout. Each layout is a type of its
/// own, so that a loop over entries is compiled once per layout and the layout is matched once
/// per node ([`with_entries`]).
trait EntryRun: Copy {
    /// The number of entries.
    fn len(self) -> usize;
    /// Entry `e`'s output and weight.
    fn get(self, e: usize) -> Option<(u32, f32)>;
    /// Loads entry `e` (its output and weight bits, combined), for touching it early.
    fn touch(self, e: usize) -> u32;
    /// Adds entries `a..b` times `x` to `acc`. An empty or out-of-bounds range (only a bundle
    /// opened without the O(weights) checks can hold one) adds nothing, as does an output past
    /// `acc`. With at least [`OUT_SLOTS`] slots in `acc`, an output of 16 bits or fewer needs no
    /// bounds check per entry.
    fn add_range(self, a: usize, b: usize, x: f32, acc: &mut [f32]);
    /// The largest output and the largest weight exponent bits (as in an `f32`) over entries
    /// `a..b`, both 0 when the range is empty or out of bounds. Branch-free, so it vectorizes.
    fn max_in(self, a: usize, b: usize) -> (u32, u32);
}

/// Split entries of one output width.
#[derive(Clone, Copy)]
struct Split<'a, T> {
    outs: &'a [T],
    weights: &'a [f32],
}

impl<T: Copy + Into<u32>> EntryRun for Split<'_, T> {
    #[inline]
    fn len(self) -> usize {
        self.outs.len()
    }

    #[inline]
    fn get(self, e: usize) -> Option<(u32, f32)> {
        Some(((*self.outs.get(e)?).into(), *self.weights.get(e)?))
    }

    #[inline]
    fn touch(self, e: usize) -> u32 {
        self.outs.get(e).map_or(0, |&o| o.into()) ^ self.weights.get(e).map_or(0, |w| w.to_bits())
    }

    #[inline]
    fn add_range(self, a: usize, b: usize, x: f32, acc: &mut [f32]) {
        let (Some(outs), Some(weights)) = (self.outs.get(a..b), self.weights.get(a..b)) else {
            return;
        };
        // `u8` and `u16` outputs are below `OUT_SLOTS`, so the compiler drops the check; `u32`
        // ones may not be, and take the loop below, checked against all of `acc`.
        if size_of::<T>() <= 2 {
            if let Some(slots) = acc.first_chunk_mut::<OUT_SLOTS>() {
                for (&o, &w) in outs.iter().zip(weights) {
                    let o: u32 = o.into();
                    if let Some(slot) = slots.get_mut(o as usize) {
                        *slot += w * x;
                    }
                }
                return;
            }
        }
        for (&o, &w) in outs.iter().zip(weights) {
            let o: u32 = o.into();
            if let Some(slot) = acc.get_mut(o as usize) {
                *slot += w * x;
            }
        }
    }

    fn max_in(self, a: usize, b: usize) -> (u32, u32) {
        let (Some(outs), Some(weights)) = (self.outs.get(a..b), self.weights.get(a..b)) else {
            return (0, 0);
        };
        (
            outs.iter().fold(0u32, |acc, &v| acc.max(v.into())),
            weights
                .iter()
                .fold(0u32, |acc, w| acc.max(w.to_bits() & F32_EXP)),
        )
    }
}

/// Packed entries.
#[derive(Clone, Copy)]
struct Packed<'a>(&'a [u32]);

impl EntryRun for Packed<'_> {
    #[inline]
    fn len(self) -> usize {
        self.0.len()
    }

    #[inline]
    fn get(self, e: usize) -> Option<(u32, f32)> {
        self.0.get(e).map(|&word| (word >> 16, packed_weight(word)))
    }

    #[inline]
    fn touch(self, e: usize) -> u32 {
        self.0.get(e).copied().unwrap_or(0)
    }

    #[inline]
    fn add_range(self, a: usize, b: usize, x: f32, acc: &mut [f32]) {
        let Some(words) = self.0.get(a..b) else {
            return;
        };
        if let Some(slots) = acc.first_chunk_mut::<OUT_SLOTS>() {
            // A packed output has 16 bits: always a slot, no check. Two entries a step halve
            // the loop's overhead (the adds keep their order, so the sums are the same).
            let mut pairs = words.chunks_exact(2);
            for pair in &mut pairs {
                let (u, v) = (pair[0], pair[1]);
                slots[(u >> 16) as usize] += packed_weight(u) * x;
                slots[(v >> 16) as usize] += packed_weight(v) * x;
            }
            for &word in pairs.remainder() {
                slots[(word >> 16) as usize] += packed_weight(word) * x;
            }
            return;
        }
        for &word in words {
            if let Some(slot) = acc.get_mut((word >> 16) as usize) {
                *slot += packed_weight(word) * x;
            }
        }
    }

    fn max_in(self, a: usize, b: usize) -> (u32, u32) {
        self.0.get(a..b).map_or((0, 0), |words| {
            words.iter().fold((0u32, 0u32), |(o, e), &word| {
                (o.max(word >> 16), e.max((word << 16) & F32_EXP))
            })
        })
    }
}

/// Evaluates `$body` with `$e` bound to the [`EntryRun`] of `$entries` (an [`EntrySlice`]),
/// whichever layout and width it is, so that a generic loop in `$body` is compiled once per
/// layout and the layout is matched once.
macro_rules! with_entries {
    ($entries:expr, |$e:ident| $body:expr) => {
        match $entries {
            EntrySlice::Split(Widths::U8(outs), weights) => {
                let $e = Split { outs, weights };
                $body
            }
            EntrySlice::Split(Widths::U16(outs), weights) => {
                let $e = Split { outs, weights };
                $body
            }
            EntrySlice::Split(Widths::U32(outs), weights) => {
                let $e = Split { outs, weights };
                $body
            }
            EntrySlice::Packed(words) => {
                let $e = Packed(words);
                $body
            }
        }
    };
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
            entry_packed: Vec::new(),
            hash_start: vec![0],
            hash: Vec::new(),
            rank_start: vec![0],
            rank: Vec::new(),
            row_start: vec![0],
            row_weight: Vec::new(),
            row_packed: Vec::new(),
        }
    }

    /// Appends the next node's chunk from its outputs' sparse weight vectors, each given as
    /// sorted feature ids and weights.
    pub fn push_node<'a, I>(&mut self, outputs: I) -> Result<(), ChunkError>
    where
        I: IntoIterator<Item = (&'a [u32], &'a [f32])>,
    {
        self.push_node_with(outputs, IndexChoice::Smaller)
    }

    /// [`ChunksBuilder::push_node`] with the node's feature index chosen by `index`.
    pub fn push_node_with<'a, I>(
        &mut self,
        outputs: I,
        index: IndexChoice,
    ) -> Result<(), ChunkError>
    where
        I: IntoIterator<Item = (&'a [u32], &'a [f32])>,
    {
        self.push_node_as(outputs, index, RowChoice::Smaller)
    }

    /// [`ChunksBuilder::push_node`] with the node's feature index chosen by `index` and its
    /// weights stored as `rows` says.
    pub fn push_node_as<'a, I>(
        &mut self,
        outputs: I,
        index: IndexChoice,
        rows: RowChoice,
    ) -> Result<(), ChunkError>
    where
        I: IntoIterator<Item = (&'a [u32], &'a [f32])>,
    {
        let mut triples: Vec<(u32, u32, f32)> = Vec::new();
        let mut m = 0usize;
        for (out, (idx, val)) in outputs.into_iter().enumerate() {
            m = out + 1;
            let out = u32::try_from(out).map_err(|_| ChunkError::TooLarge)?;
            triples.extend(idx.iter().zip(val).map(|(&f, &w)| (f, out, w)));
        }
        // Sort by feature, then output: entries of a feature come out in output order.
        triples.sort_unstable_by_key(|&(f, o, _)| (f, o));
        let n_feats = triples
            .iter()
            .enumerate()
            .filter(|&(i, t)| i == 0 || triples[i - 1].0 != t.0)
            .count();
        let use_rows = n_feats > 0
            && m > 0
            && match rows {
                RowChoice::Smaller => m * n_feats <= ROW_SLOTS_PER_ENTRY * triples.len(),
                RowChoice::Entries => false,
                RowChoice::Rows => true,
            };
        let row_base = self.row_weight.len();
        for (f, o, w) in triples {
            if self.feat.len() == self.feat_start_last() || self.feat.last() != Some(&f) {
                self.feat.push(f);
                self.entry_start.push(self.entry_start_last());
                if use_rows {
                    self.row_weight.resize(self.row_weight.len() + m, 0.0);
                }
            }
            if use_rows {
                // The row just opened is the last `m` weights; duplicates add, as entries do.
                let at = self.row_weight.len() - m + o as usize;
                self.row_weight[at] += w;
                continue;
            }
            self.entry_out.push(o);
            self.entry_weight.push(w);
            *self
                .entry_start
                .last_mut()
                .expect("entry_start is never empty") =
                u32::try_from(self.entry_out.len()).map_err(|_| ChunkError::TooLarge)?;
        }
        debug_assert!(!use_rows || self.row_weight.len() - row_base == m * n_feats);
        self.row_start
            .push(u32::try_from(self.row_weight.len()).map_err(|_| ChunkError::TooLarge)?);
        let first = self.feat_start_last();
        self.feat_start
            .push(u32::try_from(self.feat.len()).map_err(|_| ChunkError::TooLarge)?);
        let n = self.feat.len() - first;
        let size = if n == 0 {
            0
        } else {
            (2 * n).next_power_of_two()
        };
        let rank_len = self.feat[first..]
            .last()
            .map_or(0, |&f| RANK_BLOCK * (f / RANK_SPAN) as usize + RANK_BLOCK);
        let use_rank = n > 0
            && match index {
                IndexChoice::Smaller => rank_len <= 2 * size,
                IndexChoice::Hash => false,
                IndexChoice::Rank => true,
            };
        if use_rank {
            let base = self.rank.len();
            self.rank.resize(base + rank_len, 0);
            for &f in &self.feat[first..] {
                let (b, r) = ((f / RANK_SPAN) as usize, f % RANK_SPAN);
                self.rank[base + RANK_BLOCK * b + 1 + (r / 32) as usize] |= 1 << (r % 32);
            }
            let mut below = 0;
            for block in self.rank[base..].chunks_exact_mut(RANK_BLOCK) {
                block[0] = below;
                below += block[1..].iter().map(|w| w.count_ones()).sum::<u32>();
            }
        } else {
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
        }
        self.hash_start
            .push(u32::try_from(self.hash.len()).map_err(|_| ChunkError::TooLarge)?);
        self.rank_start
            .push(u32::try_from(self.rank.len()).map_err(|_| ChunkError::TooLarge)?);
        Ok(())
    }

    fn feat_start_last(&self) -> usize {
        *self.feat_start.last().expect("feat_start is never empty") as usize
    }

    fn entry_start_last(&self) -> u32 {
        *self.entry_start.last().expect("entry_start is never empty")
    }

    /// A view of the same chunks with the entry outputs at the narrowest width that holds them,
    /// as a bundle stores them.
    pub fn narrowed(&self) -> Chunks<&[u32], &[f32], NarrowOuts<'_>> {
        self.with_outs(narrowest(&self.entry_out))
    }

    /// Stores the rows as bfloat16 pairs ([`Chunks::packed_rows`]), as a `weights = "bf16"`
    /// bundle does.
    pub fn pack_rows(&mut self) {
        let (row_start, row_packed) = self.packed_rows();
        self.row_start = row_start;
        self.row_packed = row_packed;
        self.row_weight = Vec::new();
    }
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
    fn with_outs<P>(&self, entry_out: P) -> Chunks<&[u32], &[f32], P> {
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
    fn node_rows(&self, node: usize) -> Rows<'_> {
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
    fn row_outputs<'a>(&self, node: usize, rows: Rows<'_>, acc: &'a mut [f32]) -> &'a mut [f32] {
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
    fn rank_blocks(&self, node: usize) -> &[u32] {
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

    /// Checks every offset, feature id, output index, weight and hash slot, given each node's
    /// output count: [`Chunks::validate_structure`] and then the O(weights) checks. After this
    /// succeeds, every stored index is in range and every weight finite.
    pub fn validate(&self, n_outputs: &[usize], n_features: usize) -> Result<(), ChunkError> {
        self.validate_structure(n_outputs)?;
        self.validate_entries(n_outputs, n_features)
    }

    /// The checks that cost O(nodes), not O(weights): array lengths, the per-node offsets of
    /// features, hash tables and rows, each table's size (a power of two above the node's
    /// feature count), and each row node's row length (features times outputs). After this
    /// succeeds, scoring cannot panic or loop whatever the entries and rows hold: the scoring
    /// functions bound every entry-level index and probe they follow, so a corrupt entry costs a
    /// wrong score, never a crash (and checksums, when verified, catch it).
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
        let n_entries = with_entries!(self.entries(), |e| e.len());
        if self.entry_start.last().map(|&x| x as usize) != Some(n_entries) {
            return Err(ChunkError::Offsets {
                array: "entry_start",
                at: self.entry_start.len() - 1,
            });
        }
        let outs = self.entry_out.outs().len();
        if self.entry_packed.is_empty() {
            expect_len("entry_weight", self.entry_weight.len(), outs)?;
        } else {
            // Packed entries stand in for both arrays.
            expect_len("entry_out", outs, 0)?;
            expect_len("entry_weight", self.entry_weight.len(), 0)?;
        }
        expect_len("hash_start", self.hash_start.len(), n_outputs.len() + 1)?;
        check_offsets("hash_start", &self.hash_start, self.hash.len())?;
        let n_nodes = n_outputs.len();
        check_optional_offsets(
            ("rank_start", &self.rank_start),
            ("rank", self.rank.len()),
            n_nodes,
        )?;
        let rows = if self.row_packed.is_empty() {
            ("row_weight", self.row_weight.len())
        } else {
            // Packed rows stand in for `row_weight`.
            expect_len("row_weight", self.row_weight.len(), 0)?;
            ("row_packed", self.row_packed.len())
        };
        check_optional_offsets(("row_start", &self.row_start), rows, n_nodes)?;
        for (node, &m) in n_outputs.iter().enumerate() {
            let n = (self.feat_start[node + 1] - self.feat_start[node]) as usize;
            let rows = self.node_rows(node);
            // One weight per output for each feature, or one word per two outputs (whether the
            // node also has entries, which scoring would not read, is left to the O(weights)
            // checks with the rest of them).
            let per_feature = match rows {
                Rows::F32(_) => m,
                Rows::Bf16(_) => m.div_ceil(2),
            };
            if !rows.is_empty() && (n == 0 || Some(rows.len()) != n.checked_mul(per_feature)) {
                return Err(ChunkError::Rows { node });
            }
            let len = (self.hash_start[node + 1] - self.hash_start[node]) as usize;
            let rank_len = self.rank_blocks(node).len();
            if rank_len > 0 {
                // A rank index stands in for the hash table, on a node that has features.
                if rank_len % RANK_BLOCK != 0 || len != 0 || n == 0 {
                    return Err(ChunkError::Rank { node });
                }
                continue;
            }
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
    /// finite weights (entries and rows), no entries on a row node, every hash slot naming one
    /// of its node's features at its position, and every rank block counting and marking
    /// exactly its node's features.
    fn validate_entries(&self, n_outputs: &[usize], n_features: usize) -> Result<(), ChunkError> {
        let entries = self.entries();
        check_offsets(
            "entry_start",
            &self.entry_start,
            with_entries!(entries, |e| e.len()),
        )?;
        for node in 0..n_outputs.len() {
            let start = self.feat_start[node] as usize;
            let n = self.feat_start[node + 1] as usize - start;
            let blocks = self.rank_blocks(node);
            if !blocks.is_empty() {
                if !rank_matches(blocks, &self.feat[start..start + n]) {
                    return Err(ChunkError::Rank { node });
                }
                continue;
            }
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
            // An exponent of all ones is an infinity or a NaN.
            let (max_out, max_exp) = with_entries!(entries, |e| e.max_in(a, b));
            let outs_ok = a == b || (max_out as usize) < m;
            let rows = self.node_rows(node);
            if !rows.is_empty() && a != b {
                return Err(ChunkError::Rows { node });
            }
            let (row_exp, pad) = match rows {
                Rows::F32(r) => (r.iter().fold(0u32, |e, w| e.max(w.to_bits() & F32_EXP)), 0),
                Rows::Bf16(r) => {
                    let exp = r
                        .iter()
                        .fold(0u32, |e, &w| e.max(w & F32_EXP).max((w << 16) & F32_EXP));
                    // An odd row's last high half is padding, and must be zero.
                    let pad = match (m % 2, m.div_ceil(2)) {
                        (1, w) => r
                            .chunks(w)
                            .fold(0, |p, row| p | row.last().map_or(0, |&x| x >> 16)),
                        _ => 0,
                    };
                    (exp, pad)
                }
            };
            if pad != 0 {
                return Err(ChunkError::Rows { node });
            }
            if row_exp == F32_EXP {
                return Err(ChunkError::Weight { node });
            }
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
        let entries = self.entries();
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
            let range = self.entry_start[p] as usize..self.entry_start[p + 1] as usize;
            for e in range {
                let (output, w) =
                    with_entries!(entries, |es| es.get(e)).unwrap_or((u32::MAX, f32::NAN));
                if output as usize >= m {
                    return ChunkError::Output {
                        node,
                        output,
                        n_outputs: m,
                    };
                }
                if !w.is_finite() {
                    return ChunkError::Weight { node };
                }
            }
        }
        // Unreachable while the fast pass and this walk check the same things.
        ChunkError::Weight { node }
    }

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
    fn rank_lookup(
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
    fn hash_lookup(
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
        let slots = table.len() / 2;
        let mask = slots - 1;
        let n_feats = (self.feat_start[node + 1] as usize).saturating_sub(start);
        let mut pos = [0usize; LOOKUP_BLOCK];
        let mut val = [0f32; LOOKUP_BLOCK];
        for (qi, qv) in q_idx.chunks(LOOKUP_BLOCK).zip(q_val.chunks(LOOKUP_BLOCK)) {
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
                // A valid table always has a free slot; the bound keeps a corrupt one (opened
                // without the O(weights) checks) from looping.
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
            self.add_found(start, rows, &pos[..found], &val[..found], acc);
        }
    }

    /// Adds the weights of the features found at positions `pos` (within the node whose
    /// features start at `start`), times `val`, to `acc`: from `rows` when the node has them,
    /// else from its entries (first every entry range, then every entry).
    #[inline]
    fn add_found(&self, start: usize, rows: Rows<'_>, pos: &[usize], val: &[f32], acc: &mut [f32]) {
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
    fn scan(&self, node: usize, rows: Rows<'_>, dense: &[f32], acc: &mut [f32]) {
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
    fn add_entries(&self, pos: usize, x: f32, acc: &mut [f32]) {
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
fn add_found_entries<E: EntryRun>(
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
fn rank_find(
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

/// One node's rows over a plain slice, in either stored layout (empty when the node stores
/// entries).
#[derive(Clone, Copy, Debug)]
enum Rows<'a> {
    /// One `f32` per output.
    F32(&'a [f32]),
    /// Two bfloat16 weights per word (see [`Chunks::row_packed`]).
    Bf16(&'a [u32]),
}

impl Rows<'_> {
    /// The stored length, in weights or words.
    fn len(self) -> usize {
        match self {
            Rows::F32(r) => r.len(),
            Rows::Bf16(r) => r.len(),
        }
    }

    fn is_empty(self) -> bool {
        self.len() == 0
    }

    /// The weight slots per feature when the rows cover `n_feats` features (not 0): the node's
    /// outputs, rounded up to even when packed.
    fn slots(self, n_feats: usize) -> usize {
        match self {
            Rows::F32(r) => r.len() / n_feats,
            Rows::Bf16(r) => 2 * (r.len() / n_feats),
        }
    }

    /// Adds row `p` times `x` to `acc`, one weight per slot (see [`add_row`]).
    #[inline]
    fn add(self, p: usize, x: f32, acc: &mut [f32]) {
        match self {
            Rows::F32(r) => add_row(r, p, x, acc),
            Rows::Bf16(r) => add_row_bf16(r, p, x, acc),
        }
    }

    /// Row `p`'s `m` weights (none when past the end).
    fn weights(self, p: usize, m: usize) -> Vec<f32> {
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

/// Adds row `p` of a node's `rows` (one weight per slot of `acc`) times `x` to `acc`. A row past
/// the end (only a bundle opened without the O(weights) checks can ask for one) adds nothing.
#[inline]
fn add_row(rows: &[f32], p: usize, x: f32, acc: &mut [f32]) {
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
fn add_row_bf16(words: &[u32], p: usize, x: f32, acc: &mut [f32]) {
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

/// Whether rank `blocks` count and mark exactly the strictly increasing ids `feats`, and end
/// with the block of the largest one. One pass over the set bits, without early exits.
fn rank_matches(blocks: &[u32], feats: &[u32]) -> bool {
    let Some(last) = feats.len().checked_sub(1) else {
        return false;
    };
    if blocks.len() % RANK_BLOCK != 0 {
        return false;
    }
    let (mut c, mut ok) = (0usize, true);
    for (b, block) in blocks.chunks_exact(RANK_BLOCK).enumerate() {
        ok &= block[0] as usize == c;
        for (j, &word) in block[1..].iter().enumerate() {
            let mut w = word;
            while w != 0 {
                let f =
                    b as u64 * u64::from(RANK_SPAN) + 32 * j as u64 + u64::from(w.trailing_zeros());
                ok &= c <= last && u64::from(feats[c.min(last)]) == f;
                c += 1;
                w &= w - 1;
            }
        }
    }
    let last_block = &blocks[blocks.len() - RANK_BLOCK..];
    ok && c == feats.len() && last_block[1..].iter().any(|&w| w != 0)
}

/// Checks per-node offsets that later versions added (`rank_start`, `row_start`) against the
/// length of the array they index: absent (empty) in a bundle from before them, with an empty
/// array, or one per node plus one, a valid prefix sum ending at that length.
fn check_optional_offsets(
    (name, offsets): (&'static str, &[u32]),
    (array, len): (&'static str, usize),
    n_nodes: usize,
) -> Result<(), ChunkError> {
    if offsets.is_empty() {
        return match len {
            0 => Ok(()),
            found => Err(ChunkError::Length {
                array,
                found,
                expected: 0,
            }),
        };
    }
    if offsets.len() != n_nodes + 1 {
        return Err(ChunkError::Length {
            array: name,
            found: offsets.len(),
            expected: n_nodes + 1,
        });
    }
    check_offsets(name, offsets, len)
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

    /// Two nodes, each built with its (index, layout) from `layouts`. Node 0 has two outputs:
    /// output 0 uses features 1 and 5, output 1 uses 5 and 7. Node 1 has three outputs, output 1
    /// empty.
    fn nodes_as(layouts: [(IndexChoice, RowChoice); 2]) -> ChunksBuilder {
        let node0 = [(&[1u32, 5][..], &[1.0f32, 2.0][..]), (&[5, 7], &[3.0, 4.0])];
        let node1 = [(&[0u32][..], &[0.5f32][..]), (&[], &[]), (&[9], &[-1.0])];
        let mut b = ChunksBuilder::new();
        let [(i0, r0), (i1, r1)] = layouts;
        b.push_node_as(node0, i0, r0).unwrap();
        b.push_node_as(node1, i1, r1).unwrap();
        b
    }

    /// Node `node`'s scores, added into a zeroed accumulator of `len` slots, by one of four
    /// lookups: 0 the scan of `dense`, 1 the search of the sorted query, 2 [`Chunks::score`]'s own
    /// choice, 3 the node's index (its rank blocks, or its hash table when it has none). `q` is
    /// the query's ids, values and dense form.
    fn score_by(
        c: &Chunks<&[u32], &[f32], OutSlice<'_>>,
        node: usize,
        how: usize,
        q: (&[u32], &[f32], &[f32]),
        len: usize,
    ) -> Vec<f32> {
        let (q_idx, q_val, dense) = q;
        let mut acc = vec![0f32; len];
        match how {
            0 => c.score_scan(node, dense, &mut acc),
            1 => c.score_search(node, q_idx, q_val, &mut acc),
            2 => c.score(node, q_idx, q_val, dense, &mut acc),
            _ if c.rank_blocks(node).is_empty() => c.score_hash(node, q_idx, q_val, &mut acc),
            _ => c.score_rank(node, q_idx, q_val, &mut acc),
        }
        acc
    }

    #[test]
    fn outputs_are_narrowed_to_the_smallest_width_that_holds_them() {
        assert_eq!(narrowest(&[]), Widths::U8(vec![]));
        assert_eq!(narrowest(&[0, 255, 3]), Widths::U8(vec![0, 255, 3]));
        assert_eq!(narrowest(&[256, 1]), Widths::U16(vec![256, 1]));
        assert_eq!(narrowest(&[65_535]), Widths::U16(vec![65_535]));
        assert_eq!(narrowest(&[65_536, 2]), Widths::U32(&[65_536, 2][..]));
        let outs: OutSlice<'_> = Widths::U16(&[7, 300, 2]);
        assert_eq!((outs.len(), outs.byte_len()), (3, 6));
        assert_eq!((outs.get(1), outs.get(3)), (Some(300), None));
        let split = Split {
            outs: &[7u16, 300, 2][..],
            weights: &[1.0, f32::INFINITY, -0.5][..],
        };
        assert_eq!(
            (split.max_in(0, 3), split.max_in(2, 9)),
            ((300, F32_EXP), (0, 0))
        );
    }

    /// A node of `m` outputs, output `o` using features `o % 13` and `13 + (7o) % 50`, scores the
    /// same at every width its outputs can take, by every lookup; and validation reads every
    /// width.
    #[test]
    fn every_output_width_scores_and_validates_alike() {
        for m in [5usize, 300, 70_000] {
            let feats: Vec<[u32; 2]> = (0..m as u32).map(|o| [o % 13, 13 + (o * 7) % 50]).collect();
            let weights: Vec<[f32; 2]> = (0..m).map(|o| [o as f32 * 0.5, -1.0]).collect();
            let mut b = ChunksBuilder::new();
            b.push_node_as(
                feats.iter().zip(&weights).map(|(f, w)| (&f[..], &w[..])),
                IndexChoice::Rank,
                RowChoice::Entries,
            )
            .unwrap();
            let narrow = b.narrowed();
            let outs = narrow.borrowed().entry_out;
            let width = outs.byte_len() / outs.len();
            assert_eq!(
                width,
                [1, 2, 4][usize::from(m > 255) + usize::from(m > 65_535)]
            );
            narrow.validate(&[m], 63).unwrap();
            assert!(matches!(
                narrow.validate(&[m - 1], 63),
                Err(ChunkError::Output { .. })
            ));
            let (q_idx, q_val) = ([2u32, 13, 20, 40, 62], [1.0f32, 2.0, 0.5, -1.0, 3.0]);
            let mut dense = vec![0f32; 63];
            for (&i, &v) in q_idx.iter().zip(&q_val) {
                dense[i as usize] = v;
            }
            let score = |c: &Chunks<&[u32], &[f32], OutSlice<'_>>, how: usize| {
                score_by(c, 0, how, (&q_idx, &q_val, &dense), m)
            };
            for how in 0..4 {
                assert_eq!(score(&narrow.borrowed(), how), score(&b.borrowed(), how));
            }
        }
    }

    #[test]
    fn pack_entry_rounds_to_the_nearest_bfloat16() {
        let half = |w: f32| pack_entry(0, w) & 0xffff;
        assert_eq!(pack_entry(3, 1.0), (3 << 16) | 0x3f80);
        assert_eq!(pack_entry(u16::MAX, -0.5), 0xffff_bf00);
        assert_eq!(packed_weight(pack_entry(7, -0.5)), -0.5);
        // Ties go to the even neighbour; past a tie, up.
        assert_eq!(half(f32::from_bits(0x3f80_8000)), 0x3f80);
        assert_eq!(half(f32::from_bits(0x3f81_8000)), 0x3f82);
        assert_eq!(half(f32::from_bits(0x3f80_8001)), 0x3f81);
        assert_eq!(half(f32::from_bits(0x3f80_7fff)), 0x3f80);
        // A finite weight never becomes infinite; a non-finite one stays non-finite.
        assert_eq!(half(f32::MAX), 0x7f7f);
        assert_eq!(half(f32::MIN), 0xff7f);
        assert_eq!(packed_weight(pack_entry(0, f32::INFINITY)), f32::INFINITY);
        assert!(packed_weight(pack_entry(0, f32::NAN)).is_nan());
        assert!(!packed_weight(pack_entry(0, f32::from_bits(0x7f80_0001))).is_finite());
        // Every weight moves by at most half a unit in the 8th significant bit.
        for w in [0.1f32, -0.3, 0.777, 12.5, -1e-3] {
            let r = packed_weight(pack_entry(0, w));
            assert!((r - w).abs() <= w.abs() / 256.0, "{w} -> {r}");
        }
        assert_eq!(
            pack_entries(&[1, 2], &[1.0, 2.0]),
            Some(vec![0x1_3f80, 0x2_4000])
        );
        assert_eq!(pack_entries(&[65_536], &[1.0]), None);
    }

    /// An accumulator longer than the node's outputs (at least [`OUT_SLOTS`], as the search
    /// passes) gives the same scores in its first slots, by every lookup and every layout (rows,
    /// entries of each output width, packed entries), and its other slots stay untouched. The
    /// node's features fall in all three words of several rank blocks, and the scan (which looks
    /// features up in the dense query, not in the rank index) checks the rank lookups.
    #[test]
    fn longer_accumulators_score_alike_in_every_layout() {
        let d = 300u32;
        let ids: Vec<u32> = [
            0, 5, 31, 32, 40, 63, 64, 70, 95, 96, 127, 128, 160, 191, 200, 287, 299,
        ]
        .to_vec();
        for m in [5usize, 300, 70_000] {
            // Output `o` uses three of the ids, with weights depending on both.
            let feats: Vec<Vec<u32>> = (0..m)
                .map(|o| {
                    let mut f: Vec<u32> =
                        (0..3).map(|j| ids[(o * 5 + j * 7) % ids.len()]).collect();
                    f.sort_unstable();
                    f.dedup();
                    f
                })
                .collect();
            let weights: Vec<Vec<f32>> = feats
                .iter()
                .enumerate()
                .map(|(o, f)| {
                    f.iter()
                        .map(|&i| (o % 11) as f32 * 0.25 - i as f32 / 64.0)
                        .collect()
                })
                .collect();
            let node = || feats.iter().zip(&weights).map(|(f, w)| (&f[..], &w[..]));
            let mut b = ChunksBuilder::new();
            b.push_node_as(node(), IndexChoice::Rank, RowChoice::Entries)
                .unwrap();
            b.push_node_as(node(), IndexChoice::Hash, RowChoice::Entries)
                .unwrap();
            if m <= 300 {
                b.push_node_as(node(), IndexChoice::Rank, RowChoice::Rows)
                    .unwrap();
            }
            let n_nodes = b.feat_start.len() - 1;
            let narrow = b.narrowed();
            let words = pack_entries(&b.entry_out, &b.entry_weight);
            let mut packed = b.borrowed();
            if let Some(words) = &words {
                packed.entry_out = Widths::U8(&[]);
                packed.entry_weight = &[];
                packed.entry_packed = words;
            }
            // Every third id present, with a feature past every node's blocks.
            let q_idx: Vec<u32> = ids.iter().copied().step_by(3).chain([d - 1]).collect();
            let q_val: Vec<f32> = (0..q_idx.len()).map(|i| 1.0 + i as f32 * 0.5).collect();
            let mut dense = vec![0f32; d as usize];
            for (&i, &v) in q_idx.iter().zip(&q_val) {
                dense[i as usize] = v;
            }
            let score = |c: &Chunks<&[u32], &[f32], OutSlice<'_>>, node: usize, how: usize, len| {
                score_by(c, node, how, (&q_idx, &q_val, &dense), len)
            };
            // The scores worked out from the outputs' own features and weights (rounded to
            // bfloat16 for the packed layout's entries; rows stay `f32`), in the order the
            // entries add them.
            let expected = |rounded: bool| -> Vec<f32> {
                let round = |w: f32| {
                    if rounded {
                        packed_weight(pack_entry(0, w))
                    } else {
                        w
                    }
                };
                let mut acc = vec![0f32; m];
                for &f in &q_idx {
                    for (o, (fs, ws)) in feats.iter().zip(&weights).enumerate() {
                        if let Some(j) = fs.iter().position(|&g| g == f) {
                            acc[o] += round(ws[j]) * dense[f as usize];
                        }
                    }
                }
                acc
            };
            let layouts = [b.borrowed(), packed];
            for (l, c) in layouts
                .iter()
                .enumerate()
                .take(1 + usize::from(words.is_some()))
            {
                for node in 0..n_nodes {
                    let want = score(c, node, 0, m);
                    assert_eq!(
                        want,
                        expected(l == 1 && node < 2),
                        "layout {l} m {m} node {node}"
                    );
                    assert!(
                        want[m - 1] != 0.0 && want.iter().filter(|&&s| s != 0.0).count() > m / 2
                    );
                    for how in 0..4 {
                        let long = score(c, node, how, OUT_SLOTS.max(m) + 3);
                        assert_eq!(
                            long[..m],
                            want[..],
                            "layout {l} m {m} node {node} how {how}"
                        );
                        assert!(long[m..].iter().all(|&s| s == 0.0));
                        assert_eq!(score(c, node, how, m), want);
                    }
                }
            }
            for node in 0..2 {
                let want = expected(false);
                for how in 0..4 {
                    let long = score(&narrow.borrowed(), node, how, OUT_SLOTS.max(m));
                    assert_eq!(long[..m], want[..], "narrow m {m} node {node} how {how}");
                }
            }
        }
    }

    /// A corrupt packed entry (an output past its node's, possible only in a bundle opened
    /// without the O(weights) checks) adds nothing to the node's outputs, whether the
    /// accumulator ends at them or runs on.
    #[test]
    fn a_packed_output_past_the_node_adds_nothing_to_its_outputs() {
        let (feats, weights) = ([[1u32, 2], [2, 3]], [[1.0f32, 2.0], [0.5, -1.0]]);
        let mut b = ChunksBuilder::new();
        b.push_node_as(
            feats.iter().zip(&weights).map(|(f, w)| (&f[..], &w[..])),
            IndexChoice::Rank,
            RowChoice::Entries,
        )
        .unwrap();
        let good = pack_entries(&b.entry_out, &b.entry_weight).unwrap();
        let mut bad = good.clone();
        // Feature 2's first entry now names output 9 of 2.
        let e = b.entry_start[1] as usize;
        bad[e] = (9 << 16) | (bad[e] & 0xffff);
        let mut c = b.borrowed();
        c.entry_out = Widths::U8(&[]);
        c.entry_weight = &[];
        let (q_idx, q_val) = ([1u32, 2, 3], [1.0f32, 1.0, 1.0]);
        let mut dense = vec![0f32; 4];
        for (&i, &v) in q_idx.iter().zip(&q_val) {
            dense[i as usize] = v;
        }
        let mut sums = Vec::new();
        for words in [&good, &bad] {
            c.entry_packed = words;
            for len in [2, OUT_SLOTS] {
                let mut acc = vec![0f32; len];
                c.score(0, &q_idx, &q_val, &dense, &mut acc);
                sums.push(acc[..2].to_vec());
            }
        }
        let lost = packed_weight(good[e]);
        assert_eq!(sums[0], sums[1]);
        assert_eq!(sums[2], sums[3]);
        let out = (good[e] >> 16) as usize;
        assert_eq!(sums[2][out], sums[0][out] - lost);
    }

    /// A tree's entries packed score, rebuild and validate as the same entries unpacked with
    /// their weights rounded to bfloat16, by every lookup; and validation reads the packed
    /// outputs and weights.
    #[test]
    fn packed_entries_score_like_rounded_split_entries() {
        let mut rng = <rand_chacha::ChaCha8Rng as rand::SeedableRng>::seed_from_u64(5);
        for m in [5usize, 300] {
            let feats: Vec<[u32; 2]> = (0..m as u32).map(|o| [o % 13, 13 + (o * 7) % 50]).collect();
            let weights: Vec<[f32; 2]> = (0..m).map(|o| [o as f32 * 0.37 + 0.1, -1.3]).collect();
            let mut b = ChunksBuilder::new();
            for index in [IndexChoice::Rank, IndexChoice::Hash] {
                b.push_node_as(
                    feats.iter().zip(&weights).map(|(f, w)| (&f[..], &w[..])),
                    index,
                    RowChoice::Entries,
                )
                .unwrap();
            }
            // A third node of random outputs, for the scan and search paths on sparse data.
            let (outputs, _, _) = random_node_and_query(&mut rng, 63);
            b.push_node(outputs.iter().map(|(i, v)| (&i[..], &v[..])))
                .unwrap();
            let n_outputs = [m, m, outputs.len()];
            let words = pack_entries(&b.entry_out, &b.entry_weight).unwrap();
            let mut rounded = b.clone();
            for w in &mut rounded.entry_weight {
                *w = packed_weight(pack_entry(0, *w));
            }
            let mut packed = b.borrowed();
            packed.entry_out = Widths::U8(&[]);
            packed.entry_weight = &[];
            packed.entry_packed = &words;
            assert!(matches!(packed.entries(), EntrySlice::Packed(_)));
            packed.validate(&n_outputs, 63).unwrap();
            assert_eq!(packed.n_weights(), rounded.n_weights());
            assert_eq!(
                packed.rebuilt(&n_outputs, IndexChoice::Smaller).unwrap(),
                rounded.rebuilt(&n_outputs, IndexChoice::Smaller).unwrap()
            );
            let (q_idx, q_val) = ([2u32, 13, 20, 40, 62], [1.0f32, 2.0, 0.5, -1.0, 3.0]);
            let mut dense = vec![0f32; 63];
            for (&i, &v) in q_idx.iter().zip(&q_val) {
                dense[i as usize] = v;
            }
            let score = |c: &Chunks<&[u32], &[f32], OutSlice<'_>>, node: usize, how: usize| {
                score_by(c, node, how, (&q_idx, &q_val, &dense), n_outputs[node])
            };
            for node in 0..3 {
                for how in 0..4 {
                    let want = score(&rounded.borrowed(), node, how);
                    assert_eq!(
                        score(&packed, node, how),
                        want,
                        "m {m} node {node} how {how}"
                    );
                }
            }
            assert!(matches!(
                packed.validate(&[m - 1, m, outputs.len()], 63),
                Err(ChunkError::Output { node: 0, .. })
            ));
            // A non-finite packed weight, and packed entries beside either split array.
            let mut bad = words.clone();
            bad[1] |= 0x7f80;
            let mut corrupt = packed.clone();
            corrupt.entry_packed = &bad;
            assert_eq!(
                corrupt.validate(&n_outputs, 63),
                Err(ChunkError::Weight { node: 0 })
            );
            let mut both = packed.clone();
            both.entry_weight = &b.entry_weight;
            assert!(matches!(
                both.validate_structure(&n_outputs),
                Err(ChunkError::Length {
                    array: "entry_weight",
                    ..
                })
            ));
            both.entry_weight = &[];
            both.entry_out = Widths::U32(&b.entry_out);
            assert!(matches!(
                both.validate_structure(&n_outputs),
                Err(ChunkError::Length {
                    array: "entry_out",
                    ..
                })
            ));
            // A packed array of the wrong length for its offsets.
            let mut short = packed.clone();
            short.entry_packed = &words[1..];
            assert!(matches!(
                short.validate_structure(&n_outputs),
                Err(ChunkError::Offsets {
                    array: "entry_start",
                    ..
                })
            ));
        }
    }

    /// The two nodes with hash tables, storing entries.
    fn two_nodes() -> ChunksBuilder {
        nodes_as([(IndexChoice::Hash, RowChoice::Entries); 2])
    }

    /// The same two nodes, node 0 on rows and a rank index, node 1 on entries and a hash table.
    fn row_nodes() -> ChunksBuilder {
        nodes_as([
            (IndexChoice::Rank, RowChoice::Rows),
            (IndexChoice::Hash, RowChoice::Entries),
        ])
    }

    /// Sparse vectors: each output's (feature ids, weights).
    type Outputs = Vec<(Vec<u32>, Vec<f32>)>;

    /// A random node of up to 5 outputs over `d` features, and a random query.
    fn random_node_and_query(
        rng: &mut rand_chacha::ChaCha8Rng,
        d: u32,
    ) -> (Outputs, Vec<u32>, Vec<f32>) {
        use rand::RngExt;
        let outputs: Outputs = (0..rng.random_range(1..6))
            .map(|_| {
                let mut idx: Vec<u32> = (0..rng.random_range(0..80))
                    .map(|_| rng.random_range(0..d))
                    .collect();
                idx.sort_unstable();
                idx.dedup();
                let val = idx.iter().map(|_| rng.random_range(-1.0f32..1.0)).collect();
                (idx, val)
            })
            .collect();
        let mut q_idx: Vec<u32> = (0..rng.random_range(0..40))
            .map(|_| rng.random_range(0..d))
            .collect();
        q_idx.sort_unstable();
        q_idx.dedup();
        let q_val: Vec<f32> = q_idx
            .iter()
            .map(|_| rng.random_range(0.1f32..1.0))
            .collect();
        (outputs, q_idx, q_val)
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
    fn builder_lays_out_rows() {
        let b = row_nodes();
        // Node 0: 2 outputs over 3 features (6 row weights, zeros included) for 4 entries.
        // Node 1: 3 outputs over 2 features, 2 entries.
        assert_eq!(b.feat, vec![1, 5, 7, 0, 9]);
        assert_eq!(b.row_start, vec![0, 6, 6]);
        assert_eq!(b.row_weight, vec![1.0, 0.0, 2.0, 3.0, 0.0, 4.0]);
        assert_eq!(b.entry_start, vec![0, 0, 0, 0, 1, 2]);
        assert_eq!(b.entry_out, vec![0, 2]);
        assert_eq!(b.entry_weight, vec![0.5, -1.0]);
        assert!(b.has_rows(0) && !b.has_rows(1));
        b.validate(&[2, 3], 10).unwrap();
        // The same weights, counted alike in either layout.
        assert_eq!(b.n_weights(), 6);
        assert_eq!(two_nodes().n_weights(), 6);
        let q_idx = [1u32, 5, 7, 9];
        let q_val = [2.0f32, 1.0, 0.5, 3.0];
        let (mut rows, mut entries) = (vec![0.0; 2], vec![0.0; 2]);
        b.score_rank(0, &q_idx, &q_val, &mut rows);
        two_nodes().score_hash(0, &q_idx, &q_val, &mut entries);
        assert_eq!(rows, vec![1.0 * 2.0 + 2.0 * 1.0, 3.0 * 1.0 + 4.0 * 0.5]);
        assert_eq!(rows, entries);
    }

    #[test]
    fn rebuilding_moves_weights_between_rows_and_entries() {
        let rows = row_nodes();
        let entries = rows
            .rebuilt_as(&[2, 3], IndexChoice::Hash, RowChoice::Entries)
            .unwrap();
        assert_eq!(entries, two_nodes());
        let back = entries
            .rebuilt_as(&[2, 3], IndexChoice::Hash, RowChoice::Rows)
            .unwrap();
        assert_eq!(back.row_start[..2], rows.row_start[..2]);
        assert_eq!(back.row_weight[..6], rows.row_weight[..]);
        // Node 1's rows: 3 weights for each of features 0 and 9.
        assert_eq!(back.row_weight[6..], [0.5, 0.0, 0.0, 0.0, 0.0, -1.0]);
        let smaller = row_nodes()
            .rebuilt_as(&[2, 3], IndexChoice::Smaller, RowChoice::Smaller)
            .unwrap();
        assert_eq!(
            entries
                .rebuilt_as(&[2, 3], IndexChoice::Smaller, RowChoice::Smaller)
                .unwrap(),
            smaller
        );
    }

    #[test]
    fn the_size_rule_gives_rows_up_to_four_weights_per_entry() {
        // `outputs` outputs over 2 features, with `entries` entries in all.
        let node = |outputs: usize, entries: usize| {
            let mut out: Vec<(Vec<u32>, Vec<f32>)> = vec![(vec![], vec![]); outputs];
            for e in 0..entries {
                let (idx, val) = &mut out[e / 2];
                idx.push(3 + 4 * (e % 2) as u32);
                val.push(1.0 + e as f32);
            }
            let mut b = ChunksBuilder::new();
            b.push_node_as(
                out.iter().map(|(i, v)| (&i[..], &v[..])),
                IndexChoice::Smaller,
                RowChoice::Smaller,
            )
            .unwrap();
            b.has_rows(0)
        };
        // 2 features · m outputs against ROW_SLOTS_PER_ENTRY · entries.
        assert_eq!(ROW_SLOTS_PER_ENTRY, 4);
        assert!(node(8, 4)); // 16 weights for 4 entries
        assert!(!node(9, 4)); // 18 for 4
        assert!(node(4, 2)); // 8 for 2
        assert!(!node(5, 2)); // 10 for 2
        assert!(node(2, 4)); // a binary node always has rows
        assert!(node(2, 2));
    }

    #[test]
    fn validate_refuses_bad_rows() {
        let b = row_nodes();
        b.validate(&[2, 3], 10).unwrap();
        let structural = |f: &dyn Fn(&mut ChunksBuilder)| {
            let mut bad = b.clone();
            f(&mut bad);
            bad.validate_structure(&[2, 3])
        };
        // Rows one weight short, or for the wrong output count.
        assert_eq!(
            structural(&|c| {
                c.row_weight.pop();
                c.row_start = vec![0, 5, 5];
            }),
            Err(ChunkError::Rows { node: 0 })
        );
        let mut three = b.clone();
        three.feat_start = vec![0, 3, 5];
        assert_eq!(
            three.validate_structure(&[3, 3]),
            Err(ChunkError::Rows { node: 0 })
        );
        // Rows on a node that also has entries: the structure is sound (scoring reads only the
        // rows), the full check refuses it.
        let mut both = b.clone();
        both.row_weight.extend([0.0; 6]);
        both.row_start[2] = 12;
        both.validate_structure(&[2, 3]).unwrap();
        assert_eq!(
            both.validate(&[2, 3], 10),
            Err(ChunkError::Rows { node: 1 })
        );
        // Offsets that run past the rows, or rows without offsets.
        assert!(matches!(
            structural(&|c| c.row_start = vec![0, 6, 7]),
            Err(ChunkError::Offsets { .. })
        ));
        assert!(matches!(
            structural(&|c| c.row_start.clear()),
            Err(ChunkError::Length {
                array: "row_weight",
                ..
            })
        ));
        assert!(matches!(
            structural(&|c| c.row_start = vec![0, 6]),
            Err(ChunkError::Length {
                array: "row_start",
                ..
            })
        ));
        // A weight that is not finite: the structure is sound, the full check refuses it.
        for at in 0..b.row_weight.len() {
            for w in [f32::NAN, f32::INFINITY] {
                let mut bad = b.clone();
                bad.row_weight[at] = w;
                bad.validate_structure(&[2, 3]).unwrap();
                assert_eq!(
                    bad.validate(&[2, 3], 10),
                    Err(ChunkError::Weight { node: 0 })
                );
            }
        }
        // Chunks without row arrays (bundles from before rows) are valid and use entries.
        let mut old = two_nodes();
        old.row_start.clear();
        old.validate(&[2, 3], 10).unwrap();
        assert!(!old.has_rows(0));
    }

    #[test]
    fn packed_rows_hold_two_bfloat16_weights_a_word() {
        let mut b = nodes_as([
            (IndexChoice::Rank, RowChoice::Rows),
            (IndexChoice::Hash, RowChoice::Rows),
        ]);
        let f32_rows = b.clone();
        b.pack_rows();
        // Node 0: 2 outputs, one word per feature: [1, 0], [2, 3], [0, 4]. Node 1: 3 outputs, two
        // words per feature, the second's high half padding: [0.5, 0, 0], [0, 0, -1].
        assert_eq!(b.row_start, vec![0, 3, 7]);
        assert_eq!(
            b.row_packed,
            vec![0x3f80, 0x4040_4000, 0x4080_0000, 0x3f00, 0, 0, 0xbf80]
        );
        assert!(b.row_weight.is_empty());
        b.validate(&[2, 3], 10).unwrap();
        assert!(b.has_rows(0) && b.has_rows(1));
        assert_eq!(b.n_weights(), f32_rows.n_weights());
        // Packing again (or packing packed rows) changes nothing.
        assert_eq!(b.packed_rows(), (b.row_start.clone(), b.row_packed.clone()));
        // These weights are bfloat16 values already, so every lookup scores as the f32 rows do,
        // an odd node too, whether `acc` has exactly its outputs or spare slots (which get
        // `0 · x`, as any slot past the outputs may).
        let q = ([0u32, 1, 5, 7, 9], [1.5f32, 2.0, 1.0, 0.5, 3.0]);
        let mut dense = vec![0.0; 10];
        for (&i, &v) in q.0.iter().zip(&q.1) {
            dense[i as usize] = v;
        }
        for (node, m) in [(0, 2), (1, 3)] {
            for how in 0..4 {
                let want = score_by(&f32_rows.borrowed(), node, how, (&q.0, &q.1, &dense), m);
                let got = score_by(&b.borrowed(), node, how, (&q.0, &q.1, &dense), m);
                assert_eq!(got, want, "node {node}, lookup {how}");
                let spare = score_by(&b.borrowed(), node, how, (&q.0, &q.1, &dense), m + 3);
                assert_eq!(spare[..m], want[..], "node {node}, lookup {how}");
                assert_eq!(spare[m..], [0.0; 3]);
            }
        }
        assert_eq!(
            b.rebuilt(&[2, 3], IndexChoice::Smaller).unwrap(),
            f32_rows.rebuilt(&[2, 3], IndexChoice::Smaller).unwrap()
        );
    }

    #[test]
    fn validate_refuses_bad_packed_rows() {
        let mut b = nodes_as([
            (IndexChoice::Rank, RowChoice::Rows),
            (IndexChoice::Hash, RowChoice::Rows),
        ]);
        b.pack_rows();
        let check = |f: &dyn Fn(&mut ChunksBuilder)| {
            let mut bad = b.clone();
            f(&mut bad);
            (bad.validate_structure(&[2, 3]), bad.validate(&[2, 3], 10))
        };
        // A row a word short (node 1 holds two words per feature, not 3 / 2 rounded down).
        let short = check(&|c| {
            c.row_packed.pop();
            c.row_start[2] = 6;
        });
        assert_eq!(short.0, Err(ChunkError::Rows { node: 1 }));
        // Both row layouts at once.
        assert!(matches!(
            check(&|c| c.row_weight.push(1.0)).0,
            Err(ChunkError::Length {
                array: "row_weight",
                ..
            })
        ));
        // Offsets past the packed rows.
        assert!(matches!(
            check(&|c| c.row_start[2] = 8).0,
            Err(ChunkError::Offsets { .. })
        ));
        // A non-zero padding half, or a weight that is not finite in either half: the structure
        // is sound, the full check refuses them.
        let pad = check(&|c| c.row_packed[4] |= 0x3f80 << 16);
        assert_eq!(pad, (Ok(()), Err(ChunkError::Rows { node: 1 })));
        for (at, bits) in [(1, 0x7fc0), (1, 0x7f80 << 16), (6, 0xff80)] {
            let node = usize::from(at >= 3);
            let bad = check(&|c| c.row_packed[at] = bits);
            assert_eq!(bad, (Ok(()), Err(ChunkError::Weight { node })), "{at}");
        }
    }

    /// Rows whose structure was checked but whose rank counts were not (a bundle opened
    /// without the O(weights) checks) can point past the rows: scoring adds nothing there.
    #[test]
    fn scoring_corrupt_rows_does_not_panic() {
        let mut b = row_nodes();
        b.rank[0] = u32::MAX - 1;
        b.validate_structure(&[2, 3]).unwrap();
        let mut acc = vec![0.0; 2];
        b.score_rank(0, &[1, 5, 7], &[1.0, 1.0, 1.0], &mut acc);
        let dense = vec![1.0; 10];
        b.score(0, &[1, 5, 7], &[1.0, 1.0, 1.0], &dense, &mut acc);
        b.score_scan(0, &dense, &mut acc);
        b.score_search(0, &[1, 5, 7], &[1.0, 1.0, 1.0], &mut acc);
        assert!(acc.iter().all(|x| x.is_finite()));
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

    /// The four ways to score a node agree. Hash and rank lookups add the same entries in the
    /// same order, so they agree to the bit.
    #[test]
    fn scan_search_hash_and_rank_agree_on_random_chunks() {
        use rand::SeedableRng;
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(9);
        for round in 0..100 {
            // Feature counts on both sides of a rank block's span and of its word boundaries.
            let d = [500, 96, 97, 32, 1000][round % 5];
            let (outputs, q_idx, q_val) = random_node_and_query(&mut rng, d);
            let mut b = ChunksBuilder::new();
            let outs = || outputs.iter().map(|(i, v)| (&i[..], &v[..]));
            b.push_node_as(outs(), IndexChoice::Hash, RowChoice::Entries)
                .unwrap();
            b.push_node_as(outs(), IndexChoice::Rank, RowChoice::Entries)
                .unwrap();
            b.push_node(outs()).unwrap();
            b.push_node_as(outs(), IndexChoice::Hash, RowChoice::Rows)
                .unwrap();
            b.push_node_as(outs(), IndexChoice::Rank, RowChoice::Rows)
                .unwrap();
            let m = outputs.len();
            b.validate(&[m; 5], d as usize).unwrap();
            let has_features = outputs.iter().any(|(i, _)| !i.is_empty());
            assert_eq!(b.hash_start[1] > 0, has_features);
            assert_eq!(b.rank_start[2] - b.rank_start[1] > 0, has_features);
            assert!(!b.has_rows(0) && !b.has_rows(1));
            assert_eq!(b.has_rows(3) && b.has_rows(4), has_features);
            let mut dense = vec![0.0; d as usize];
            for (&i, &v) in q_idx.iter().zip(&q_val) {
                dense[i as usize] = v;
            }
            let (mut a, mut bb, mut c, mut r) =
                (vec![0.0; m], vec![0.0; m], vec![0.0; m], vec![0.0; m]);
            b.score_scan(0, &dense, &mut a);
            b.score_search(0, &q_idx, &q_val, &mut bb);
            b.score_hash(0, &q_idx, &q_val, &mut c);
            b.score_rank(1, &q_idx, &q_val, &mut r);
            assert_eq!(c, r);
            for k in 0..m {
                assert!(
                    (a[k] - bb[k]).abs() < 1e-5 && (a[k] - c[k]).abs() < 1e-5,
                    "{a:?} {bb:?} {c:?}"
                );
            }
            // Whichever index and layout `Smaller` picks, `score` gives the same answer. Rows
            // add the same products in the same order as entries, plus zeros, so every scorer
            // over rows agrees with its entries twin to the bit (up to the sign of a zero,
            // which `==` ignores).
            let mut s0 = vec![0.0; m];
            b.score(0, &q_idx, &q_val, &dense, &mut s0);
            for node in 2..5 {
                let mut sn = vec![0.0; m];
                b.score(node, &q_idx, &q_val, &dense, &mut sn);
                assert_eq!(s0, sn, "node {node}");
            }
            let (mut ra, mut rb, mut rc, mut rr) =
                (vec![0.0; m], vec![0.0; m], vec![0.0; m], vec![0.0; m]);
            b.score_scan(3, &dense, &mut ra);
            b.score_search(3, &q_idx, &q_val, &mut rb);
            b.score_hash(3, &q_idx, &q_val, &mut rc);
            b.score_rank(4, &q_idx, &q_val, &mut rr);
            assert_eq!((&ra, &rb, &rc, &rr), (&a, &bb, &c, &r));
            // Packed rows score as `f32` rows holding the same bfloat16 values, to the bit,
            // odd output counts included.
            let mut rounded = b.clone();
            rounded
                .row_weight
                .iter_mut()
                .for_each(|w| *w = round_bf16(*w));
            let mut packed = b.clone();
            packed.pack_rows();
            packed.validate(&[m; 5], d as usize).unwrap();
            assert_eq!(packed.n_weights(), rounded.n_weights());
            let q = (&q_idx[..], &q_val[..], &dense[..]);
            for (node, how) in [3, 4].into_iter().flat_map(|n| (0..4).map(move |h| (n, h))) {
                let want = score_by(&rounded.borrowed(), node, how, q, m);
                assert_eq!(score_by(&packed.borrowed(), node, how, q, m), want);
            }
        }
    }

    #[test]
    fn smaller_picks_the_smaller_index() {
        // Features 0..100 in two rank blocks (8 values) against a 256-slot table (512 values).
        let idx: Vec<u32> = (0..100).collect();
        let val = vec![1.0f32; 100];
        // One feature far out: 4 · (10,000 / 96 + 1) values against a 2-slot table (4 values).
        let far = [10_000u32];
        let mut b = ChunksBuilder::new();
        b.push_node([(&idx[..], &val[..])]).unwrap();
        b.push_node([(&far[..], &[1.0f32][..])]).unwrap();
        b.push_node([(&[][..], &[][..])]).unwrap();
        assert_eq!(b.rank_start, vec![0, 8, 8, 8]);
        assert_eq!(b.hash_start, vec![0, 0, 4, 4]);
        assert_eq!(b.rank, vec![0, !0, !0, !0, 96, 0xf, 0, 0]);
        b.validate(&[1, 1, 1], 10_001).unwrap();
    }

    /// One node on a rank index, with features 1, 4 and 100 (two blocks).
    fn rank_node() -> ChunksBuilder {
        let mut b = ChunksBuilder::new();
        b.push_node_with(
            [(&[1u32, 4, 100][..], &[1.0f32, 2.0, 3.0][..])],
            IndexChoice::Rank,
        )
        .unwrap();
        b
    }

    #[test]
    fn validate_refuses_a_bad_rank_index() {
        let b = rank_node();
        b.validate(&[1], 200).unwrap();
        assert_eq!(b.rank, vec![0, 0b10010, 0, 0, 2, 0b10000, 0, 0]);
        let refused = |f: &dyn Fn(&mut ChunksBuilder)| {
            let mut bad = b.clone();
            f(&mut bad);
            matches!(bad.validate(&[1], 200), Err(ChunkError::Rank { node: 0 }))
        };
        // A wrong running count, a missing or an extra feature, a trailing empty block.
        assert!(refused(&|c| c.rank[4] = 1));
        assert!(refused(&|c| c.rank[1] = 0b10));
        assert!(refused(&|c| c.rank[2] = 1));
        assert!(refused(&|c| {
            c.rank.extend([3, 0, 0, 0]);
            c.rank_start[1] += 4;
        }));
        // A hash table as well, a length that is not whole blocks, or blocks on a node without
        // features: refused by the structural checks alone.
        let structural = |f: &dyn Fn(&mut ChunksBuilder)| {
            let mut bad = b.clone();
            f(&mut bad);
            bad.validate_structure(&[1]).is_err()
        };
        assert!(structural(&|c| {
            c.hash = vec![EMPTY; 8];
            c.hash_start[1] = 8;
        }));
        assert!(structural(&|c| {
            c.rank.push(0);
            c.rank_start[1] += 1;
        }));
        assert!(structural(&|c| c.rank_start = vec![0, 4]));
        assert!(structural(&|c| c.rank_start.clear()));
        let mut empty = ChunksBuilder::new();
        empty.push_node([(&[][..], &[][..])]).unwrap();
        empty.rank = vec![0, 1, 0, 0];
        empty.rank_start[1] = 4;
        assert!(empty.validate_structure(&[1]).is_err());
    }

    /// Rank blocks that only a structural open lets through never make scoring panic, and
    /// never point past the node's features.
    #[test]
    fn scoring_corrupt_rank_blocks_does_not_panic() {
        let b = rank_node();
        for block in [[u32::MAX, !0, !0, !0], [2, !0, !0, !0], [0, !0, !0, !0]] {
            let mut bad = b.clone();
            bad.rank[4..].copy_from_slice(&block);
            bad.validate_structure(&[1]).unwrap();
            let mut acc = vec![0.0; 1];
            bad.score_rank(0, &[100, 101, 191, 500], &[1.0; 4], &mut acc);
            assert!(acc[0].is_finite());
        }
    }

    /// Bundles written before the rank index have no rank arrays: every node uses its hash table.
    #[test]
    fn chunks_without_rank_arrays_use_their_hash_tables() {
        let mut b = ChunksBuilder::new();
        b.push_node_with([(&[1u32, 4][..], &[1.0f32, 2.0][..])], IndexChoice::Hash)
            .unwrap();
        b.rank_start.clear();
        b.validate(&[1], 10).unwrap();
        let mut acc = vec![0.0; 1];
        b.score_hash(0, &[4], &[2.0], &mut acc);
        assert_eq!(acc, vec![4.0]);
        b.score_rank(0, &[4], &[2.0], &mut acc);
        assert_eq!(
            acc,
            vec![4.0],
            "no rank blocks: the rank lookup adds nothing"
        );
        b.rank.push(0);
        assert!(b.validate_structure(&[1]).is_err());
    }

    #[test]
    fn validate_refuses_a_bad_hash_table() {
        let mut b = ChunksBuilder::new();
        b.push_node_with([(&[1u32, 4][..], &[1.0f32, 2.0][..])], IndexChoice::Hash)
            .unwrap();
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
