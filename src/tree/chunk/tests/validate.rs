//! Validation refuses bad arrays, and scoring bad ones never panics.

use super::*;

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
