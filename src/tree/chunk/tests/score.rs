//! Every scoring path agrees with the others.

use super::*;

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
                let mut f: Vec<u32> = (0..3).map(|j| ids[(o * 5 + j * 7) % ids.len()]).collect();
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
                assert!(want[m - 1] != 0.0 && want.iter().filter(|&&s| s != 0.0).count() > m / 2);
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
