//! Timing of `build_tree` at the scale xmc targets: a million labels over half a million features.
//!
//! Ignored by default; run it in release and read the printed figures:
//! `cargo test --release --test tree_build_scale -- --ignored --nocapture`.
//! Set `XMC_SCALE_LABELS` to try another label count.

use std::time::Instant;

use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;
use xmc::data::SparseMatrix;
use xmc::tree::{TreeParams, build_tree};

/// Unit-norm label embeddings with topical structure: each label draws most of its `nnz` columns
/// from one of `topics` column ranges, as PIFA rows of related labels do.
fn topical_embeddings(n_labels: usize, dim: usize, nnz: usize, topics: usize) -> SparseMatrix {
    let mut rng = ChaCha8Rng::seed_from_u64(17);
    let width = dim / topics;
    let mut indptr = vec![0usize];
    let (mut indices, mut data) = (Vec::new(), Vec::new());
    let mut row: Vec<u32> = Vec::with_capacity(nnz);
    for _ in 0..n_labels {
        let topic = rng.random_range(0..topics);
        row.clear();
        for k in 0..nnz {
            let col = if k % 4 == 3 {
                rng.random_range(0..dim)
            } else {
                topic * width + rng.random_range(0..width)
            };
            row.push(col as u32);
        }
        row.sort_unstable();
        row.dedup();
        let value = 1.0 / (row.len() as f32).sqrt();
        indices.extend_from_slice(&row);
        data.extend(std::iter::repeat_n(value, row.len()));
        indptr.push(indices.len());
    }
    SparseMatrix::new((n_labels, dim), indptr, indices, data)
}

#[test]
#[ignore = "timing at a million labels; run in release with --ignored --nocapture"]
fn build_tree_on_a_million_labels() {
    let n_labels = std::env::var("XMC_SCALE_LABELS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let start = Instant::now();
    let emb = topical_embeddings(n_labels, 500_000, 20, 2_000);
    println!(
        "embeddings: {} labels x {} features, {} non-zeros, generated in {:.2?}",
        emb.rows(),
        emb.cols(),
        emb.nnz(),
        start.elapsed()
    );
    let start = Instant::now();
    let tree = build_tree(&emb, &TreeParams::DEFAULT).expect("default params are valid");
    let elapsed = start.elapsed();
    let stats = tree.leaf_size_stats();
    println!(
        "build_tree: {:.2?} on {} threads; {} nodes, {} leaves of {}..={} labels, depth {}",
        elapsed,
        rayon::current_num_threads(),
        tree.n_nodes(),
        stats.n_leaves,
        stats.min,
        stats.max,
        tree.max_depth()
    );
    assert_eq!(tree.validate(n_labels), Ok(()));
    assert!(stats.max <= TreeParams::DEFAULT.max_leaf);
}
