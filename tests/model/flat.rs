//! The flat scorer end to end: a trained flat model stores its bias order, answers through its
//! postings exactly as the scan over every label does, and a damaged order is refused by the
//! verified open and read without panicking after the structural one.
#![allow(clippy::unwrap_used)]

use crate::common::{load, train_with};
use xmc::bundle::Bundle;
use xmc::model::sections::flat_order_section;
use xmc::model::{Model, ModelError, PredictOptions};

fn order_section() -> String {
    flat_order_section(0)
}

#[test]
fn flat_models_answer_through_their_postings_as_the_scan_does() {
    let train = load("Corel5k", "train");
    let test = load("Corel5k", "test");
    let bytes = train_with(&train, &["model=flat"]).to_bytes().unwrap();
    let mut model = Model::from_bundle(Bundle::from_bytes(&bytes).unwrap()).unwrap();
    assert!(model.bundle().section(&order_section()).is_some());
    let n_labels = model.meta().n_labels;
    let (mut scored_scan, mut scored_flat) = (0u64, 0u64);
    for k in [1, 5, 17] {
        let opts = PredictOptions {
            k,
            ..PredictOptions::default()
        };
        for i in 0..test.n_points() {
            let (idx, val) = test.feature_row(i);
            model.set_flat_scan(true);
            let scan = model.predict(idx, val, &opts).unwrap();
            model.set_flat_scan(false);
            let flat = model.predict(idx, val, &opts).unwrap();
            assert_eq!(flat.labels, scan.labels, "point {i}, k = {k}");
            let bits = |s: &[f32]| s.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&flat.scores), bits(&scan.scores), "point {i}, k = {k}");
            assert_eq!(flat.depths, scan.depths);
            assert_eq!(scan.outputs_evaluated as usize, n_labels);
            scored_scan += u64::from(scan.outputs_evaluated);
            scored_flat += u64::from(flat.outputs_evaluated);
        }
    }
    assert!(
        scored_flat <= scored_scan,
        "{scored_flat} labels scored through postings, {scored_scan} by the scan"
    );
}

#[test]
fn label_trees_store_no_bias_order() {
    let train = load("Corel5k", "train");
    let bytes = train_with(&train, &[]).to_bytes().unwrap();
    let bundle = Bundle::from_bytes(&bytes).unwrap();
    assert!(bundle.section(&order_section()).is_none());
}

#[test]
fn a_damaged_bias_order_is_refused_or_read_without_panicking() {
    let train = load("Corel5k", "train");
    let test = load("Corel5k", "test");
    let good = train_with(&train, &["model=flat"]).to_bytes().unwrap();
    let info = Bundle::from_bytes(&good)
        .unwrap()
        .section(&order_section())
        .unwrap()
        .clone();
    let at = |i: usize| info.offset as usize + 4 * i;

    // A flipped byte fails the checksums.
    let mut flipped = good.clone();
    flipped[at(info.byte_len as usize / 8)] ^= 0x40;
    assert!(
        Bundle::from_bytes(&flipped)
            .unwrap()
            .verify_checksums()
            .is_err()
    );

    // Two positions swapped, one repeated, one past the labels: the verified open refuses each,
    // the structural open accepts it (it checks the length alone) and predicting from it cannot
    // panic; `verify` then refuses it.
    let word = |b: &[u8], i: usize| b[at(i)..at(i) + 4].to_vec();
    let mut swapped = good.clone();
    let (first, last) = (word(&good, 0), word(&good, 5));
    swapped[at(0)..at(0) + 4].copy_from_slice(&last);
    swapped[at(5)..at(5) + 4].copy_from_slice(&first);
    let mut repeated = good.clone();
    repeated[at(1)..at(1) + 4].copy_from_slice(&first);
    let mut past = good.clone();
    past[at(0)..at(0) + 4].copy_from_slice(&u32::MAX.to_le_bytes());
    for bad in [swapped, repeated, past] {
        let e = Model::from_bundle(Bundle::from_bytes(&bad).unwrap()).unwrap_err();
        assert!(matches!(e, ModelError::Tree { tree: 0, .. }), "{e}");
        let model = Model::from_bundle_structure(Bundle::from_bytes(&bad).unwrap()).unwrap();
        for i in 0..test.n_points() {
            let (idx, val) = test.feature_row(i);
            model.predict(idx, val, &PredictOptions::default()).unwrap();
        }
        assert!(model.verify().is_err());
    }
}
