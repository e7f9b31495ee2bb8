//! Entry encodings: output widths and packed bfloat16 entries and rows.

use super::*;

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
