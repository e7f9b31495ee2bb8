//! Golden model bundles: a model written by an earlier xmc must keep opening and answering.
//!
//! `tests/data/golden/model-v1.xmcb` is a tiny label tree (6 labels, 10 features, 7 nodes) trained
//! by the first model format on `tests/data/golden/tiny.txt`, `model-v2.xmcb` the same tree
//! trained by format version 2, whose nodes store their weights as rows, `model-v3.xmcb` by
//! format version 3, whose entry outputs are `u8`s (none here: every node has rows), and
//! `model-v4.xmcb` by format version 4:
//!
//! ```sh
//! xmc train --config config/default.toml --set max_leaf=2 --set name=tiny \
//!     --train tests/data/golden/tiny.txt --out tests/data/golden/model-v1.xmcb
//! ```
//!
//! (`model-v2.xmcb` to `model-v4.xmcb` for the later ones). Versions 1 and 2 answer slightly
//! differently because the trainer changed between them, not the format; versions 3 and 4
//! answer as version 2 does. Each file's answers are recorded as it gave them.
//!
//! `model-v3-bf16.xmcb` is a small tree of format version 3 with packed bfloat16 entries
//! (`weights = "bf16"`), on synthetic data sparse enough that every node stores entries:
//!
//! ```sh
//! xmc data synth --n 100 --d 300 --l 20 --features-per-label 6 --features-per-point 10 \
//!     --seed 7 --out small.txt
//! xmc train --config config/default.toml --set name=small-bf16 --set weights=bf16 \
//!     --set max_leaf=7 --set branching=3 --set solver.prune=0.3 \
//!     --train small.txt --out tests/data/golden/model-v3-bf16.xmcb
//! ```
//!
//! `model-v4-bf16.xmcb` is the tiny tree with `weights = "bf16"` (`--set weights=bf16 --set
//! name=tiny-bf16` added to the first command), written by format version 4: its rows are
//! bfloat16 pairs (`chunk.row_packed`), and two of its leaves have one label, so their rows are
//! one weight and a padding half each.
//!
//! Later versions add sections and metadata fields; they must still read this file, find the same
//! tree and give the same answers. Never regenerate it to make this test pass: a failure here means
//! deployed models would stop loading. It is also the seed of the `model_open` fuzz target.

// Helpers outside #[test] functions unwrap too; a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use std::path::PathBuf;
use xmc::bundle::OpenOptions;
use xmc::data::LabelId;
use xmc::model::{Model, PredictOptions};

/// Opens the golden tiny model written by format `version`, verifying every checksum and
/// weight, and checks what every version of it holds: its name, shape, content version
/// `content`, seven nodes and no names.
fn open_golden(version: u32, content: &str) -> Model {
    let file = format!("model-v{version}.xmcb");
    let model = open_as(&file, (version, "tiny", content), (10, 6, 1));
    assert_eq!(model.trees()[0].n_nodes(), 7);
    assert!(model.label_names().is_none() && model.feature_names().is_none());
    model
}

#[test]
fn golden_model_v1_opens_verifies_and_predicts_as_recorded() {
    let model = open_golden(1, "1ce2555b99d18f7f");
    assert_recorded(&model, [0.544_467_1, 0.460_923_22, 0.249_387_2]);
}

/// Opens golden file `file`, verifying every checksum and weight, and checks its format
/// version, name and content version (`recorded`) and its features, labels and trees (`shape`).
fn open_as(file: &str, recorded: (u32, &str, &str), shape: (usize, usize, usize)) -> Model {
    let (version, name, content) = recorded;
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/golden")
        .join(file);
    let options = OpenOptions {
        verify_checksums: true,
        ..OpenOptions::default()
    };
    let model = Model::open(&path, &options).unwrap();
    assert_eq!(model.bundle().format_version(), version);
    let meta = model.meta();
    assert_eq!(meta.name, name);
    assert_eq!((meta.n_features, meta.n_labels, meta.trees), shape);
    assert_eq!(meta.version, content);
    model
}

/// The top 3 for the query `1:1 4:1 7:1` are labels 0, 5 and 3 with these scores, as recorded
/// with `xmc predict --k 3` when the golden file was made.
fn assert_recorded(model: &Model, scores: [f32; 3]) {
    assert_top3(model, (&[1, 4, 7], &[1.0, 1.0, 1.0]), [0, 5, 3], scores);
}

/// The top 3 labels of `model` for `query` are `labels`, with `scores`.
fn assert_top3(model: &Model, query: (&[u32], &[f32]), labels: [u32; 3], scores: [f32; 3]) {
    let p = model
        .predict(query.0, query.1, &PredictOptions::default())
        .unwrap();
    assert_eq!(p.labels[..3], labels.map(LabelId), "{:?}", p.labels);
    for (got, want) in p.scores.iter().zip(scores) {
        assert!((got - want).abs() < 1e-6, "{:?}", p.scores);
    }
}

#[test]
fn golden_model_v2_opens_verifies_and_predicts_from_rows_as_recorded() {
    let model = open_golden(2, "3c7c53297693df73");
    let tree = &model.trees()[0];
    // Every node has at most two outputs, so every node with features stores rows, not entries.
    assert!(tree.chunks.entry_weight.is_empty());
    for node in 0..tree.n_nodes() {
        let has_features = tree.chunks.feat_start[node] < tree.chunks.feat_start[node + 1];
        assert_eq!(tree.chunks.has_rows(node), has_features, "node {node}");
    }

    assert_recorded(&model, [0.519_004_17, 0.462_766_9, 0.261_483_2]);
}

#[test]
fn golden_model_v3_opens_verifies_and_predicts_as_recorded() {
    let model = open_golden(3, "1d5a062889921c21");
    let section = model.bundle().section("tree.0.chunk.entry_out").unwrap();
    assert_eq!(section.dtype, xmc::bundle::Dtype::U8);
    assert!(model.trees()[0].chunks.entry_weight.is_empty());
    // The same tree and answers as version 2's file: only the container changed.
    assert_recorded(&model, [0.519_004_17, 0.462_766_9, 0.261_483_2]);
}

#[test]
fn golden_model_v4_opens_verifies_and_predicts_as_recorded() {
    let model = open_golden(4, "57054cd5670c5f6f");
    assert!(model.bundle().section("tree.0.chunk.row_weight").is_some());
    assert!(model.bundle().section("tree.0.chunk.row_packed").is_none());
    // The same tree and answers as version 2's and 3's files.
    assert_recorded(&model, [0.519_004_17, 0.462_766_9, 0.261_483_2]);
}

#[test]
fn golden_model_v4_with_packed_rows_opens_verifies_and_predicts_as_recorded() {
    let recorded = (4, "tiny-bf16", "8798c140eb5412d6");
    let model = open_as("model-v4-bf16.xmcb", recorded, (10, 6, 1));
    let section = model.bundle().section("tree.0.chunk.row_packed").unwrap();
    assert_eq!(section.dtype, xmc::bundle::Dtype::U32);
    assert!(model.bundle().section("tree.0.chunk.row_weight").is_none());
    let tree = &model.trees()[0];
    assert_eq!(tree.n_nodes(), 7);
    assert!(tree.chunks.row_weight.is_empty() && tree.chunks.entry_packed.is_empty());
    // Every node has rows, among them leaves of one label (one weight and padding a word).
    let outputs = |node: usize| tree.out_start[node + 1] - tree.out_start[node];
    assert!((0..7).all(|node| tree.chunks.has_rows(node)));
    assert_eq!((0..7).filter(|&node| outputs(node) == 1).count(), 2);
    // As `xmc predict --k 3` answered for `1:1 4:1 7:1` when the file was made: the labels of
    // the `f32` files, the scores within bfloat16 rounding of theirs.
    assert_recorded(&model, [0.518_561, 0.463_303_1, 0.260_859_13]);
}

#[test]
fn golden_packed_bf16_model_opens_verifies_and_predicts_as_recorded() {
    let recorded = (3, "small-bf16", "50456b06ebf97db7");
    let model = open_as("model-v3-bf16.xmcb", recorded, (300, 20, 1));
    let section = model.bundle().section("tree.0.chunk.entry").unwrap();
    assert_eq!(section.dtype, xmc::bundle::Dtype::U32);
    assert!(model.bundle().section("tree.0.chunk.entry_out").is_none());
    let tree = &model.trees()[0];
    assert_eq!(tree.n_nodes(), 4);
    // Every node stores packed entries; none has rows.
    assert_eq!(tree.chunks.entry_packed.len(), 1119);
    assert!(tree.chunks.entry_weight.is_empty() && tree.chunks.row_weight.is_empty());
    // As `xmc predict --k 3` answered `6:0.5 117:1 200:1` when the file was made.
    assert_top3(
        &model,
        (&[6, 117, 200], &[0.5, 1.0, 1.0]),
        [0, 1, 2],
        [1.0, 0.503_505_23, 0.253_571_12],
    );
}
