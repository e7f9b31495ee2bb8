//! The builder's layouts and its choice of index and rows.

use super::*;

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
