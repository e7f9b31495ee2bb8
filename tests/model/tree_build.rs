//! Label-tree construction end to end: PIFA embeddings, the recursive balanced build, and the
//! invariants of the resulting layout.

use proptest::prelude::*;
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;
use sprs::TriMatI;
use xmc::data::{Dataset, LabelId, SparseMatrix};
use xmc::tree::{TreeError, TreeLayout, TreeParams, build_tree, pifa_embeddings};

/// A CSR matrix from (row, col, value) triplets; duplicates are summed.
fn csr(shape: (usize, usize), triplets: &[(usize, usize, f32)]) -> SparseMatrix {
    let mut tri = TriMatI::<f32, u32>::new(shape);
    for &(r, c, v) in triplets {
        tri.add_triplet(r, c, v);
    }
    tri.to_csr()
}

/// `n_labels` random sparse rows over `dim` columns with up to `nnz` entries each; a share of the
/// rows is left empty to exercise labels without training points.
fn random_embeddings(n_labels: usize, dim: usize, nnz: usize, seed: u64) -> SparseMatrix {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut triplets = Vec::new();
    for l in 0..n_labels {
        if rng.random_range(0..10) == 0 {
            continue;
        }
        for _ in 0..rng.random_range(1..=nnz) {
            triplets.push((l, rng.random_range(0..dim), rng.random_range(0.1f32..1.0)));
        }
    }
    csr((n_labels, dim), &triplets)
}

/// A small data set whose labels come in `groups` topics, each topic with its own features.
fn topical_dataset(n_points: usize, labels_per_group: usize, groups: usize, seed: u64) -> Dataset {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let features_per_group = 20;
    let (mut x, mut y) = (Vec::new(), Vec::new());
    for p in 0..n_points {
        let g = p % groups;
        for _ in 0..5 {
            let f = g * features_per_group + rng.random_range(0..features_per_group);
            x.push((p, f, rng.random_range(0.5f32..2.0)));
        }
        for _ in 0..2 {
            y.push((
                p,
                g * labels_per_group + rng.random_range(0..labels_per_group),
                1.0,
            ));
        }
    }
    let mut labels = csr((n_points, labels_per_group * groups), &y);
    labels.data_mut().fill(1.0);
    Dataset {
        features: csr((n_points, features_per_group * groups), &x),
        labels,
    }
}

fn params(branching: usize, max_leaf: usize, seed: u64) -> TreeParams {
    TreeParams {
        branching,
        max_leaf,
        seed,
        ..TreeParams::DEFAULT
    }
}

/// The number of labels under each node, computed bottom-up.
fn subtree_sizes(tree: &TreeLayout) -> Vec<usize> {
    let mut size = vec![0usize; tree.n_nodes()];
    for node in (0..tree.n_nodes()).rev() {
        size[node] =
            tree.labels_of(node).len() + tree.children(node).map(|c| size[c]).sum::<usize>();
    }
    size
}

/// Asserts every structural promise of `build_tree`.
fn assert_well_formed(tree: &TreeLayout, n_labels: usize, p: &TreeParams) {
    assert_eq!(tree.validate(n_labels), Ok(()));
    let mut seen = vec![0u32; n_labels];
    for leaf in tree.leaves() {
        let labels = tree.labels_of(leaf);
        assert!(
            labels.len() <= p.max_leaf,
            "leaf {leaf} holds {}",
            labels.len()
        );
        assert!(labels.windows(2).all(|w| w[0] < w[1]), "leaf labels sorted");
        for l in labels {
            seen[l.index()] += 1;
        }
    }
    assert!(
        seen.iter().all(|&c| c == 1),
        "every label in exactly one leaf"
    );
    let size = subtree_sizes(tree);
    for node in 0..tree.n_nodes() {
        let kids: Vec<usize> = tree.children(node).map(|c| size[c]).collect();
        if let (Some(lo), Some(hi)) = (kids.iter().min(), kids.iter().max()) {
            assert!(hi - lo <= 1, "node {node}: children sizes {kids:?}");
            assert!(size[node] > p.max_leaf, "node {node} was split needlessly");
            assert_eq!(kids.len(), p.branching.min(size[node]));
        }
    }
}

#[test]
fn binary_tree_is_balanced_and_complete() {
    let emb = random_embeddings(1000, 300, 8, 1);
    let p = params(2, 10, 7);
    let tree = build_tree(&emb, &p).expect("valid params");
    assert_well_formed(&tree, 1000, &p);
    // 1000 labels halved until ≤ 10 gives leaves of 7 or 8 labels at depth 7.
    let stats = tree.leaf_size_stats();
    assert_eq!((stats.n_leaves, stats.min, stats.max), (128, 7, 8));
    assert_eq!(tree.max_depth(), 7);
}

#[test]
fn wider_branching_stays_balanced() {
    let emb = random_embeddings(700, 200, 6, 2);
    for b in [3, 4, 7] {
        let p = params(b, 5, 3);
        let tree = build_tree(&emb, &p).expect("valid params");
        assert_well_formed(&tree, 700, &p);
    }
}

#[test]
fn same_seed_same_tree_whatever_the_thread_count() {
    let emb = random_embeddings(3000, 500, 10, 4);
    // Branching 8 also splits each node's labels by nested bisections, whose sides run
    // concurrently.
    for b in [2, 8] {
        let p = params(b, 20, 11);
        let build_with = |threads: usize| {
            rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .expect("thread pool")
                .install(|| build_tree(&emb, &p))
                .expect("valid params")
        };
        let one = build_with(1);
        assert_eq!(one, build_with(2));
        assert_eq!(one, build_with(3));
        assert_eq!(one, build_tree(&emb, &p).expect("valid params"));
        let other_seed = build_tree(&emb, &params(b, 20, 12)).expect("valid params");
        assert_ne!(one, other_seed, "the seed should matter");
    }
}

#[test]
fn small_label_sets_are_a_single_leaf() {
    for n_labels in [0, 1, 2, 100] {
        let emb = random_embeddings(n_labels, 50, 3, 5);
        let tree = build_tree(&emb, &TreeParams::DEFAULT).expect("valid params");
        assert_eq!(tree.n_nodes(), 1);
        assert!(tree.is_leaf(0));
        assert_eq!(tree.labels_of(0).len(), n_labels);
        assert_eq!(tree.validate(n_labels), Ok(()));
    }
}

#[test]
fn degenerate_embeddings_still_give_balanced_trees() {
    let duplicated = csr((500, 4), &(0..500).map(|l| (l, 1, 1.0)).collect::<Vec<_>>());
    let empty = SparseMatrix::zero((500, 4));
    let no_columns = SparseMatrix::zero((500, 0));
    for emb in [duplicated, empty, no_columns] {
        for p in [params(2, 1, 0), params(2, 30, 1), params(5, 7, 2)] {
            let tree = build_tree(&emb, &p).expect("valid params");
            assert_well_formed(&tree, 500, &p);
        }
    }
}

#[test]
fn invalid_params_are_errors() {
    let emb = random_embeddings(10, 5, 2, 0);
    for (p, name) in [
        (params(1, 10, 0), "branching"),
        (params(2, 0, 0), "max_leaf"),
        (
            TreeParams {
                max_iter: 0,
                ..TreeParams::DEFAULT
            },
            "max_iter",
        ),
        (
            TreeParams {
                tol: f32::NAN,
                ..TreeParams::DEFAULT
            },
            "tol",
        ),
    ] {
        match build_tree(&emb, &p) {
            Err(TreeError::InvalidParam { name: got, .. }) => assert_eq!(got, name),
            Err(TreeError::Cluster(e)) => assert!(e.to_string().contains(name), "{e}"),
            other => panic!("{name}: expected an error, got {other:?}"),
        }
    }
}

#[test]
fn pifa_is_normalized_sum_of_normalized_rows() {
    // Point 0 = (3, 4) → (0.6, 0.8); point 1 = (0, 2) → (0, 1). Label 0 has both points, label 1
    // only point 1, label 2 none.
    let ds = Dataset {
        features: csr((2, 2), &[(0, 0, 3.0), (0, 1, 4.0), (1, 1, 2.0)]),
        labels: csr((2, 3), &[(0, 0, 1.0), (1, 0, 1.0), (1, 1, 1.0)]),
    };
    let emb = pifa_embeddings(&ds);
    assert_eq!(emb.shape(), (3, 2));
    let norm = (0.6f32 * 0.6 + 1.8 * 1.8).sqrt();
    let row0 = emb.outer_view(0).expect("row 0");
    assert_eq!(row0.indices(), &[0, 1]);
    assert!((row0.data()[0] - 0.6 / norm).abs() < 1e-6);
    assert!((row0.data()[1] - 1.8 / norm).abs() < 1e-6);
    let row1 = emb.outer_view(1).expect("row 1");
    assert_eq!((row1.indices(), row1.data()), (&[1u32][..], &[1.0f32][..]));
    assert_eq!(emb.outer_view(2).expect("row 2").nnz(), 0);
}

#[test]
fn topical_labels_are_grouped_together() {
    // Four topics of 16 labels with disjoint features: a tree with leaves of 16 should find them.
    let ds = topical_dataset(400, 16, 4, 9);
    let emb = pifa_embeddings(&ds);
    let p = params(2, 16, 5);
    let tree = build_tree(&emb, &p).expect("valid params");
    assert_well_formed(&tree, 64, &p);
    let mut pure = 0;
    for leaf in tree.leaves() {
        let topics: Vec<usize> = tree
            .labels_of(leaf)
            .iter()
            .map(|l| l.index() / 16)
            .collect();
        if topics.iter().all(|&t| t == topics[0]) {
            pure += 1;
        }
    }
    assert_eq!(pure, 4, "each leaf should hold one topic");
}

#[test]
fn points_per_node_matches_brute_force() {
    let ds = topical_dataset(300, 10, 5, 3);
    let tree = build_tree(&pifa_embeddings(&ds), &params(3, 4, 1)).expect("valid params");
    check_points_per_node(&tree, &ds);
}

/// Compares `points_per_node` with a direct definition: a point reaches a node when one of its
/// labels is in the node's subtree; the root gets every point.
fn check_points_per_node(tree: &TreeLayout, ds: &Dataset) {
    let reached = tree.points_per_node(ds);
    let leaf_of = tree.leaf_of_label();
    let is_ancestor = |mut node: usize, anc: usize| loop {
        if node == anc {
            return true;
        }
        match tree.parent(node) {
            Some(p) => node = p,
            None => return false,
        }
    };
    for (node, got) in reached.iter().enumerate() {
        let expected: Vec<u32> = (0..ds.n_points())
            .filter(|&i| {
                node == 0
                    || ds
                        .label_row(i)
                        .iter()
                        .any(|&l| is_ancestor(leaf_of[l as usize] as usize, node))
            })
            .map(|i| i as u32)
            .collect();
        assert_eq!(got, &expected, "node {node}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn layout_invariants_hold(
        n_labels in 0usize..400,
        branching in 2usize..6,
        max_leaf in 1usize..25,
        seed in any::<u64>(),
    ) {
        let emb = random_embeddings(n_labels, 40, 4, seed);
        let p = params(branching, max_leaf, seed);
        let tree = build_tree(&emb, &p).expect("valid params");
        assert_well_formed(&tree, n_labels, &p);
        for node in 1..tree.n_nodes() {
            let parent = tree.parent(node).expect("non-root has a parent");
            prop_assert!(tree.children(parent).contains(&node));
            prop_assert_eq!(tree.depth(node), tree.depth(parent) + 1);
        }
        let leaf_of = tree.leaf_of_label();
        for (label, &leaf) in leaf_of.iter().enumerate() {
            prop_assert!(tree.labels_of(leaf as usize).contains(&LabelId(label as u32)));
        }
        let hist = tree.depth_histogram();
        prop_assert_eq!(hist.iter().map(|h| h.labels).sum::<usize>(), n_labels);
    }

    #[test]
    fn points_per_node_is_exact(seed in any::<u64>(), max_leaf in 1usize..6) {
        let ds = topical_dataset(60, 5, 3, seed);
        let tree = build_tree(&pifa_embeddings(&ds), &params(2, max_leaf, seed)).expect("valid");
        check_points_per_node(&tree, &ds);
    }
}

#[test]
fn bibtex_tree_groups_co_occurring_labels() {
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/Bibtex/train.txt.gz");
    let ds = xmc::data::read_xc_file(&path).expect("vendored Bibtex reads");
    let emb = pifa_embeddings(&ds);
    let p = params(2, 16, 0);
    let tree = build_tree(&emb, &p).expect("valid params");
    assert_well_formed(&tree, ds.n_labels(), &p);
    let single = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .expect("thread pool")
        .install(|| build_tree(&emb, &p))
        .expect("valid params");
    assert_eq!(tree, single);

    // Label pairs that co-occur on a point should share a leaf far more often than the
    // (leaf size - 1) / (L - 1) ≈ 0.09 of a random balanced partition: 0.324 of them do.
    let leaf_of = tree.leaf_of_label();
    let (mut together, mut pairs) = (0usize, 0usize);
    for i in 0..ds.n_points() {
        let labels = ds.label_row(i);
        for (a, &la) in labels.iter().enumerate() {
            for &lb in &labels[a + 1..] {
                pairs += 1;
                together += usize::from(leaf_of[la as usize] == leaf_of[lb as usize]);
            }
        }
    }
    let share = together as f64 / pairs as f64;
    println!("co-occurring label pairs sharing a leaf: {share:.3} of {pairs}");
    assert!(
        share >= 0.31,
        "only {share:.3} of co-occurring pairs share a leaf"
    );

    let reached = tree.points_per_node(&ds);
    assert_eq!(reached[0].len(), ds.n_points());
    for leaf in tree.leaves() {
        assert!(!reached[leaf].is_empty() || tree.labels_of(leaf).is_empty());
    }
}
