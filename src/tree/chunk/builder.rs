//! Building chunks node by node while training, and rebuilding them in another layout.

use super::*;

/// Chunks under construction.
pub type ChunksBuilder = Chunks<Vec<u32>, Vec<f32>>;

/// One node's weights as (feature, output, weight) triples in feature order, then output order:
/// the part of building a node's chunk that needs no builder.
#[derive(Debug, Default)]
pub struct SortedNode {
    triples: Vec<(u32, u32, f32)>,
    m: usize,
}

impl SortedNode {
    /// The weights of a node's outputs, each given as sorted feature ids and weights.
    pub fn of<'a, I>(outputs: I) -> Result<SortedNode, ChunkError>
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
        // Order by feature, then output: the triples come output by output, so a stable sort by
        // feature alone leaves a feature's entries in output order. Each output's features are
        // usually sorted, and the sort merges such runs rather than sorting from scratch.
        triples.sort_by_key(|&(f, _, _)| f);
        Ok(SortedNode { triples, m })
    }
}

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
        self.push_sorted(SortedNode::of(outputs)?, index, rows)
    }

    /// [`ChunksBuilder::push_node_as`] for a node whose weights [`SortedNode::of`] has put in
    /// order (which can run apart from the builder, e.g. for many nodes in parallel).
    pub fn push_sorted(
        &mut self,
        node: SortedNode,
        index: IndexChoice,
        rows: RowChoice,
    ) -> Result<(), ChunkError> {
        let SortedNode { triples, m } = node;
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

    pub(super) fn feat_start_last(&self) -> usize {
        *self.feat_start.last().expect("feat_start is never empty") as usize
    }

    pub(super) fn entry_start_last(&self) -> u32 {
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
