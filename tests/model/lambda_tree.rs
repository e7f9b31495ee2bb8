//! The λ-interpolated label tree: λ = 0 is the balanced tree, λ > 0 trees are well formed,
//! deterministic, and put frequent labels higher.

use proptest::prelude::*;
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;
use sprs::TriMatI;
use xmc::cluster::SplitStrategy;
use xmc::data::{Dataset, SparseMatrix};
use xmc::tree::{
    FreqKind, LabelFrequencies, TreeLayout, TreeParams, build_tree, build_tree_weighted,
    label_frequencies, pifa_embeddings,
};

fn csr(shape: (usize, usize), triplets: &[(usize, usize, f32)]) -> SparseMatrix {
    let mut tri = TriMatI::<f32, u32>::new(shape);
    for &(r, c, v) in triplets {
        tri.add_triplet(r, c, v);
    }
    tri.to_csr()
}

/// Points whose labels follow a power law (label l drawn with weight 1/(l+1)), each label with a
/// few features of its own plus noise.
fn power_law_dataset(n_points: usize, n_labels: usize, seed: u64) -> Dataset {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let weights: Vec<f64> = (0..n_labels).map(|l| 1.0 / (l as f64 + 1.0)).collect();
    let total: f64 = weights.iter().sum();
    let dim = n_labels * 2 + 10;
    let (mut x, mut y) = (Vec::new(), Vec::new());
    for p in 0..n_points {
        for _ in 0..rng.random_range(1..4) {
            let mut u = rng.random_range(0.0..total);
            let mut l = 0;
            while l + 1 < n_labels && u >= weights[l] {
                u -= weights[l];
                l += 1;
            }
            y.push((p, l, 1.0));
            x.push((p, 2 * l + rng.random_range(0..2), 1.0));
        }
        x.push((p, n_labels * 2 + rng.random_range(0..10), 0.5));
    }
    let mut labels = csr((n_points, n_labels), &y);
    labels.data_mut().fill(1.0);
    let mut features = csr((n_points, dim), &x);
    xmc::data::l2_normalize_rows(&mut features);
    Dataset { features, labels }
}

fn params(lambda: f32, max_leaf: usize, branching: usize, seed: u64) -> TreeParams {
    TreeParams {
        branching,
        max_leaf,
        seed,
        strategy: SplitStrategy::Weighted { lambda, gamma: 0.1 },
        ..TreeParams::DEFAULT
    }
}

/// Every label in exactly one leaf of at most `max_leaf` labels, every split non-trivial.
fn assert_well_formed(tree: &TreeLayout, n_labels: usize, max_leaf: usize, branching: usize) {
    assert_eq!(tree.validate(n_labels), Ok(()));
    let mut seen = vec![0u32; n_labels];
    for leaf in tree.leaves() {
        assert!(tree.labels_of(leaf).len() <= max_leaf);
        for l in tree.labels_of(leaf) {
            seen[l.index()] += 1;
        }
    }
    assert!(seen.iter().all(|&c| c == 1));
    for node in 0..tree.n_nodes() {
        if !tree.is_leaf(node) {
            assert!(tree.children(node).len() >= 2 && tree.children(node).len() <= branching);
        }
    }
}

/// The mean depth of the labels' leaves, each label weighted by its training count.
fn weighted_depth(tree: &TreeLayout, freqs: &LabelFrequencies) -> f64 {
    let leaf_of = tree.leaf_of_label();
    let total: f64 = freqs.f.iter().map(|&f| f64::from(f)).sum();
    leaf_of
        .iter()
        .zip(&freqs.f)
        .map(|(&leaf, &f)| f64::from(tree.depth(leaf as usize)) * f64::from(f))
        .sum::<f64>()
        / total
}

#[test]
fn balanced_strategy_ignores_frequencies() {
    let ds = power_law_dataset(600, 80, 1);
    let emb = pifa_embeddings(&ds);
    let freqs = label_frequencies(&ds.labels, FreqKind::Marginal);
    let p = TreeParams {
        max_leaf: 5,
        ..TreeParams::DEFAULT
    };
    assert_eq!(
        build_tree_weighted(&emb, &p, &freqs).unwrap(),
        build_tree(&emb, &p).unwrap()
    );
}

#[test]
fn larger_lambda_puts_frequent_labels_higher() {
    let ds = power_law_dataset(2000, 200, 2);
    let emb = pifa_embeddings(&ds);
    let freqs = label_frequencies(&ds.labels, FreqKind::Marginal);
    let balanced = build_tree(
        &emb,
        &TreeParams {
            max_leaf: 4,
            ..TreeParams::DEFAULT
        },
    )
    .unwrap();
    let d0 = weighted_depth(&balanced, &freqs);
    let mut previous = d0;
    for lambda in [1.0, 2.0] {
        let tree = build_tree_weighted(&emb, &params(lambda, 4, 2, 0), &freqs).unwrap();
        assert_well_formed(&tree, 200, 4, 2);
        let d = weighted_depth(&tree, &freqs);
        assert!(
            d < previous,
            "λ = {lambda}: frequency-weighted depth {d} not below {previous}"
        );
        previous = d;
    }
    // The balanced tree's leaves all sit within one level of each other; the Fano tree's do not.
    let fano = build_tree_weighted(&emb, &params(2.0, 4, 2, 0), &freqs).unwrap();
    assert!(fano.max_depth() > balanced.max_depth());
}

#[test]
fn weighted_tree_is_the_same_whatever_the_thread_count() {
    let ds = power_law_dataset(1500, 300, 3);
    let emb = pifa_embeddings(&ds);
    let freqs = label_frequencies(&ds.labels, FreqKind::Greedy);
    let p = params(1.5, 6, 3, 11);
    let one = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .unwrap()
        .install(|| build_tree_weighted(&emb, &p, &freqs).unwrap());
    assert_eq!(one, build_tree_weighted(&emb, &p, &freqs).unwrap());
}

#[test]
fn bad_frequencies_and_lambda_are_errors() {
    let ds = power_law_dataset(100, 20, 4);
    let emb = pifa_embeddings(&ds);
    let freqs = label_frequencies(&ds.labels, FreqKind::Marginal);
    let short = LabelFrequencies {
        f: freqs.f[..5].to_vec(),
        f_tilde: freqs.f_tilde.clone(),
    };
    let err = build_tree_weighted(&emb, &params(1.0, 2, 2, 0), &short).unwrap_err();
    assert!(err.to_string().contains("freqs"), "{err}");
    let err = build_tree_weighted(&emb, &params(2.5, 2, 2, 0), &freqs).unwrap_err();
    assert!(err.to_string().contains("lambda"), "{err}");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    #[test]
    fn weighted_trees_are_well_formed(
        n_labels in 1usize..150,
        lambda in 0.0f32..=2.0,
        gamma in prop_oneof![Just(0.0f32), 0.0f32..1.0],
        branching in 2usize..5,
        max_leaf in 1usize..10,
        greedy in any::<bool>(),
        seed in any::<u64>(),
    ) {
        let ds = power_law_dataset(n_labels * 3, n_labels, seed);
        let emb = pifa_embeddings(&ds);
        let kind = if greedy { FreqKind::Greedy } else { FreqKind::Marginal };
        let freqs = label_frequencies(&ds.labels, kind);
        let p = TreeParams {
            branching,
            max_leaf,
            seed,
            strategy: SplitStrategy::Weighted { lambda, gamma },
            ..TreeParams::DEFAULT
        };
        let tree = build_tree_weighted(&emb, &p, &freqs).unwrap();
        assert_well_formed(&tree, n_labels, max_leaf, branching);
    }
}
