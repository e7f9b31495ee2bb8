//! The depth-aware early-stopping search returns exactly what exhaustive search returns.
//!
//! Random trees (any shape, leaves at any depth), random sparse classifiers (with weights large
//! enough that many branch probabilities are exactly 1, so that scores tie), random queries: with
//! an unbounded beam, the early-stopped top k equals the top k of every label's path score,
//! labels, scores (to the bit) and depths alike; asked to keep more than k, it returns the same
//! top k first and, after it, other labels at their exact scores, from the same nodes.

use proptest::prelude::*;
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;
use xmc::linear::Loss;
use xmc::tree::chunk::ChunksBuilder;
use xmc::tree::view::{Candidate, SearchLimits, SearchScratch, TreeArrays};

const DIM: usize = 12;

type Owned = TreeArrays<Vec<u32>, Vec<f32>>;

/// A random tree over `n_labels` labels: each node with more than `max_leaf` labels, or by a coin
/// flip any node with more than one, is split into 2..=4 parts at random cut points; nodes are
/// numbered breadth first. Each output gets a random sparse weight vector and bias.
fn random_tree(n_labels: usize, max_leaf: usize, seed: u64) -> Owned {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut labels: Vec<u32> = (0..n_labels as u32).collect();
    for i in (1..labels.len()).rev() {
        labels.swap(i, rng.random_range(0..=i));
    }
    let mut queue = std::collections::VecDeque::from([(labels, 0u32)]);
    let (mut node_info, mut out_start, mut out_ids) = (Vec::new(), vec![0u32], Vec::new());
    let mut next_id = 1u32;
    let mut children_of = Vec::new();
    while let Some((own, depth)) = queue.pop_front() {
        let split = own.len() > max_leaf || (own.len() > 1 && rng.random_range(0..3) == 0);
        if split {
            let parts = rng.random_range(2..=4).min(own.len());
            let mut cuts: Vec<usize> = Vec::new();
            while cuts.len() < parts - 1 {
                let c = rng.random_range(1..own.len());
                if !cuts.contains(&c) {
                    cuts.push(c);
                }
            }
            cuts.sort_unstable();
            cuts.push(own.len());
            let mut start = 0;
            for &c in &cuts {
                out_ids.push(next_id);
                next_id += 1;
                queue.push_back((own[start..c].to_vec(), depth + 1));
                start = c;
            }
            node_info.push(depth << 1);
            children_of.push(parts);
        } else {
            out_ids.extend_from_slice(&own);
            node_info.push((depth << 1) | 1);
            children_of.push(own.len());
        }
        out_start.push(out_ids.len() as u32);
    }
    let mut chunks = ChunksBuilder::new();
    let mut out_bias = Vec::new();
    for &n_out in &children_of {
        let mut cols: Vec<(Vec<u32>, Vec<f32>)> = Vec::new();
        for _ in 0..n_out {
            let mut idx: Vec<u32> = (0..DIM as u32)
                .filter(|_| rng.random_range(0..3) == 0)
                .collect();
            idx.sort_unstable();
            let val = idx.iter().map(|_| rng.random_range(-3.0f32..3.0)).collect();
            cols.push((idx, val));
            out_bias.push(rng.random_range(-1.5f32..2.0));
        }
        chunks
            .push_node(cols.iter().map(|(i, v)| (&i[..], &v[..])))
            .expect("small chunks");
    }
    TreeArrays {
        node_info,
        out_start,
        out_ids,
        out_bias,
        chunks,
    }
}

/// A random sparse query: sorted ids, their values, and the dense copy the search reads.
fn random_query(seed: u64) -> (Vec<u32>, Vec<f32>, Vec<f32>) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let idx: Vec<u32> = (0..DIM as u32)
        .filter(|_| rng.random_range(0..2) == 0)
        .collect();
    let val: Vec<f32> = idx.iter().map(|_| rng.random_range(-1.0f32..1.5)).collect();
    let mut dense = vec![0.0; DIM];
    for (&i, &v) in idx.iter().zip(&val) {
        dense[i as usize] = v;
    }
    (idx, val, dense)
}

/// The ranking order of predictions: score descending, then label ascending.
fn ranked(mut c: Vec<Candidate>, k: usize) -> Vec<(u32, u32, u32)> {
    c.sort_by(|a, b| b.score.total_cmp(&a.score).then(a.label.cmp(&b.label)));
    c.truncate(k);
    c.into_iter()
        .map(|c| (c.label, c.score.to_bits(), c.depth))
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn early_stop_with_unbounded_beam_equals_exhaustive(
        n_labels in 1usize..120,
        max_leaf in 1usize..12,
        k in 1usize..12,
        logistic in any::<bool>(),
        tree_seed in any::<u64>(),
        query_seed in any::<u64>(),
    ) {
        let tree = random_tree(n_labels, max_leaf, tree_seed);
        prop_assert_eq!(tree.validate(n_labels, DIM), Ok(()));
        let loss = if logistic { Loss::Logistic } else { Loss::SquaredHinge };
        let (idx, val, dense) = random_query(query_seed);
        let mut scratch = SearchScratch::default();

        // Exhaustive: the level-wise search with a beam wider than any level scores every label.
        let all = tree.beam_search(&idx, &val, &dense, loss, usize::MAX, &mut scratch);
        prop_assert_eq!(scratch.candidates.len(), n_labels);
        prop_assert_eq!(all.nodes_evaluated as usize, tree.n_nodes());
        prop_assert!(!all.beam_capped);
        let expected = ranked(scratch.candidates.clone(), k);

        let limits = SearchLimits { k, keep: 0, beam: usize::MAX, deadline: None };
        let stats = tree.early_stop_search(&idx, &val, &dense, loss, &limits, &mut scratch);
        prop_assert_eq!(ranked(scratch.candidates.clone(), k), expected);
        prop_assert_eq!(scratch.candidates.len(), k.min(n_labels));
        prop_assert!(stats.nodes_evaluated <= all.nodes_evaluated);
        prop_assert!(!stats.beam_capped && !stats.deadline_hit);
        if !stats.early_stopped {
            prop_assert_eq!(stats.nodes_evaluated, all.nodes_evaluated);
        }
    }

    #[test]
    fn a_wider_keep_adds_scored_labels_at_no_extra_node(
        n_labels in 1usize..120,
        max_leaf in 1usize..12,
        k in 1usize..6,
        extra in 1usize..20,
        logistic in any::<bool>(),
        tree_seed in any::<u64>(),
        query_seed in any::<u64>(),
    ) {
        let tree = random_tree(n_labels, max_leaf, tree_seed);
        let loss = if logistic { Loss::Logistic } else { Loss::SquaredHinge };
        let (idx, val, dense) = random_query(query_seed);
        let mut scratch = SearchScratch::default();
        tree.beam_search(&idx, &val, &dense, loss, usize::MAX, &mut scratch);
        let every = ranked(scratch.candidates.clone(), n_labels);
        let exact = ranked(scratch.candidates.clone(), k);

        let limits = SearchLimits { k, keep: 0, beam: usize::MAX, deadline: None };
        let narrow = tree.early_stop_search(&idx, &val, &dense, loss, &limits, &mut scratch);
        let keep = k + extra;
        let limits = SearchLimits { k, keep, beam: usize::MAX, deadline: None };
        let wide = tree.early_stop_search(&idx, &val, &dense, loss, &limits, &mut scratch);
        let found = ranked(scratch.candidates.clone(), keep);
        // The same nodes, the exact top k first, then labels with their exact path scores.
        prop_assert_eq!(wide, narrow);
        prop_assert_eq!(&found[..k.min(found.len())], &exact[..]);
        prop_assert!(found.len() >= k.min(n_labels) && found.len() <= keep);
        prop_assert_eq!(found.len(), scratch.candidates.len());
        for c in &found {
            prop_assert!(every.contains(c));
        }
    }

    #[test]
    fn capped_search_stays_within_the_beam_and_says_so(
        n_labels in 1usize..120,
        beam in 1usize..4,
        tree_seed in any::<u64>(),
        query_seed in any::<u64>(),
    ) {
        let tree = random_tree(n_labels, 6, tree_seed);
        let (idx, val, dense) = random_query(query_seed);
        let mut scratch = SearchScratch::default();
        let limits = SearchLimits { k: 3, keep: 0, beam, deadline: None };
        let stats =
            tree.early_stop_search(&idx, &val, &dense, Loss::SquaredHinge, &limits, &mut scratch);
        let depths = (0..tree.n_nodes()).map(|i| tree.depth(i)).max().unwrap_or(0) as usize + 1;
        prop_assert!(stats.nodes_evaluated as usize <= beam * depths);
        let limits = SearchLimits { k: 3, keep: 0, beam: usize::MAX, deadline: None };
        let free =
            tree.early_stop_search(&idx, &val, &dense, Loss::SquaredHinge, &limits, &mut scratch);
        if !stats.beam_capped {
            prop_assert_eq!(stats.nodes_evaluated, free.nodes_evaluated);
        }
    }
}

#[test]
fn a_past_deadline_returns_at_once_and_is_flagged() {
    let tree = random_tree(50, 4, 7);
    let (idx, val, dense) = random_query(3);
    let mut scratch = SearchScratch::default();
    let limits = SearchLimits {
        k: 5,
        keep: 0,
        beam: usize::MAX,
        deadline: Some(std::time::Instant::now()),
    };
    let stats = tree.early_stop_search(
        &idx,
        &val,
        &dense,
        Loss::SquaredHinge,
        &limits,
        &mut scratch,
    );
    assert!(stats.deadline_hit);
    assert_eq!(stats.nodes_evaluated, 0);
    assert!(scratch.candidates.is_empty());
}
