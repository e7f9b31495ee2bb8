//! Checking stored chunk arrays once, at open, so that scoring never panics.

use super::*;

impl<U, F, O> Chunks<U, F, O>
where
    U: std::ops::Deref<Target = [u32]>,
    F: std::ops::Deref<Target = [f32]>,
    O: EntryOuts,
{
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
    pub(super) fn validate_entries(
        &self,
        n_outputs: &[usize],
        n_features: usize,
    ) -> Result<(), ChunkError> {
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
                // state is mispredicted often; without the branch a verified open is faster
                // (docs/decisions/0001-two-opens.md).
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
    pub(super) fn entry_error(&self, node: usize, m: usize, n_features: usize) -> ChunkError {
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
}

/// Whether rank `blocks` count and mark exactly the strictly increasing ids `feats`, and end
/// with the block of the largest one. One pass over the set bits, without early exits.
pub(super) fn rank_matches(blocks: &[u32], feats: &[u32]) -> bool {
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
pub(super) fn check_optional_offsets(
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

pub(super) fn check_offsets(
    array: &'static str,
    offsets: &[u32],
    end: usize,
) -> Result<(), ChunkError> {
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
