//! A golden model bundle: a model written by an earlier xmc must keep opening and answering.
//!
//! `tests/data/golden/model-v1.xmcb` is a tiny label tree (6 labels, 10 features, 7 nodes) trained
//! by the first model format on `tests/data/golden/tiny.txt`:
//!
//! ```sh
//! xmc train --config config/default.toml --set max_leaf=2 --set name=tiny \
//!     --train tests/data/golden/tiny.txt --out tests/data/golden/model-v1.xmcb
//! ```
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

fn golden() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/golden/model-v1.xmcb")
}

#[test]
fn golden_model_v1_opens_verifies_and_predicts_as_recorded() {
    let options = OpenOptions {
        verify_checksums: true,
        ..OpenOptions::default()
    };
    let model = Model::open(&golden(), &options).unwrap();
    let meta = model.meta();
    assert_eq!(meta.name, "tiny");
    assert_eq!((meta.n_features, meta.n_labels, meta.trees), (10, 6, 1));
    assert_eq!(meta.version, "1ce2555b99d18f7f");
    assert_eq!(model.trees()[0].n_nodes(), 7);
    assert!(model.label_names().is_none() && model.feature_names().is_none());

    // Recorded with `xmc predict --k 3` on the query `1:1 4:1 7:1` when the file was made.
    let p = model
        .predict(&[1, 4, 7], &[1.0, 1.0, 1.0], &PredictOptions::default())
        .unwrap();
    assert_eq!(
        p.labels[..3],
        [LabelId(0), LabelId(5), LabelId(3)],
        "{:?}",
        p.labels
    );
    for (got, want) in p
        .scores
        .iter()
        .zip([0.544_467_1_f32, 0.460_923_22, 0.249_387_2])
    {
        assert!((got - want).abs() < 1e-6, "{:?}", p.scores);
    }
}
