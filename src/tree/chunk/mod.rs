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
//! magnitude 0.1 and up) each weight moves by a fraction of a percent, and the serving model's
//! precision does not move measurably (docs/decisions/0005-bf16-packing.md).
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
//! rounded as [`pack_entry`] rounds, and score the same to the bit; packed rows take half the
//! bytes (docs/decisions/0005-bf16-packing.md).
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
//! holding its largest feature id; ids past them are absent. The rank blocks are several times
//! smaller than the hash tables they replace (docs/decisions/0002-rank-bitmap-index.md), so far
//! more of the index stays in cache.
//!
//! Bundles written before the rank index have no `rank` sections; read as empty, every node uses
//! its hash table as before.

#[macro_use]
mod entry;
mod builder;
mod layout;
mod postings;
mod score;
mod validate;

#[cfg(test)]
mod tests;

pub use builder::*;
pub use entry::*;
pub use layout::*;
pub use postings::{EntryRunBounds, PruneScratch, PruneStats, SortedAcc, SparseAcc};
pub(crate) use postings::{Link, NONE};
use score::*;
