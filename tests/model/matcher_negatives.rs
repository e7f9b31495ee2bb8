//! Matcher-aware negatives (`negatives = man`): the tree trained depth by depth, each node also
//! on the training points that the upper levels' beam search brings to it.
// Helpers outside #[test] functions unwrap too: this is test code.
#![allow(clippy::unwrap_used)]

use crate::common;

use common::{p_at_1_with as p_at_1, train_with};
use xmc::bundle::Bundle;
use xmc::config::TreeNegatives;
use xmc::model::{Model, PredictOptions};
use xmc::train::Trained;

fn open(t: &Trained) -> Model {
    Model::from_bundle(Bundle::from_bytes(&t.to_bytes().unwrap()).unwrap()).unwrap()
}

#[test]
fn matcher_negatives_train_deterministically_and_change_the_classifiers() {
    let (train, test) = (
        common::load("Corel5k", "train"),
        common::load("Corel5k", "test"),
    );
    let plain = train_with(&train, &["max_leaf=40"]);
    let man = train_with(&train, &["max_leaf=40", "negatives=man"]);
    assert_eq!(man.meta.config.negatives, TreeNegatives::Man);
    // The same tree shape (the label partition does not depend on the negatives) ...
    assert_eq!(plain.trees[0].node_info, man.trees[0].node_info);
    assert_eq!(plain.trees[0].out_ids, man.trees[0].out_ids);
    // ... the root trains on every point either way, so its classifiers are the same ...
    let root = |t: &Trained| t.trees[0].out_bias[..2].to_vec();
    assert_eq!(root(&plain), root(&man));
    // ... but deeper nodes see more negatives, so the trees differ, and so do the versions.
    assert_ne!(plain.trees[0].out_bias, man.trees[0].out_bias);
    assert_ne!(plain.meta.version, man.meta.version);
    // Same data, config and seed: the same model.
    let again = train_with(&train, &["max_leaf=40", "negatives=man"]);
    assert_eq!(again.trees, man.trees);
    assert_eq!(again.meta.version, man.meta.version);
    // The model answers, well above chance (1/374) and not below 90% of the plain tree's P@1:
    // 0.362 against 0.33 on the test split (the figures for the decision are in bench/results).
    let opts = PredictOptions::default();
    let (p_plain, p_man) = (
        p_at_1(&open(&plain), &test, &opts),
        p_at_1(&open(&man), &test, &opts),
    );
    assert!(
        p_man > 0.9 * p_plain && p_man >= 0.35,
        "plain {p_plain}, man {p_man}"
    );
}

#[test]
fn a_beam_of_one_still_reaches_every_depth() {
    // With beam 1 each point follows one path; every node still trains (on its teacher-forced
    // points at least), and the model answers every query.
    let (train, test) = (
        common::load("Corel5k", "train"),
        common::load("Corel5k", "test"),
    );
    let t = train_with(&train, &["max_leaf=20", "negatives=man", "beam=1"]);
    let model = open(&t);
    for i in 0..20 {
        let (idx, val) = test.feature_row(i);
        let p = model.predict(idx, val, &PredictOptions::default()).unwrap();
        assert_eq!(p.labels.len(), PredictOptions::default().k, "point {i}");
    }
}

#[test]
fn matcher_negatives_reach_the_trees_of_defrag_and_bp_models() {
    // Every tree the trainer builds goes through the same node training: DEFRAG members train on
    // agglomerated rows, BP blocks on their own points. Each model differs from its
    // teacher-forced twin and answers.
    let (train, test) = (
        common::load("Corel5k", "train"),
        common::load("Corel5k", "test"),
    );
    let opts = PredictOptions::default();
    // Each with its floor, 1 to 2 points below its P@1 on the test split (0.368 and 0.36).
    for (base, floor) in [
        (&["max_leaf=40", "defrag=xy", "d0=8"][..], 0.35),
        (
            &["bp=on", "bp_lambda=0.1", "bp_q=2", "max_leaf=40"][..],
            0.345,
        ),
    ] {
        let plain = train_with(&train, base);
        let with: Vec<&str> = base.iter().copied().chain(["negatives=man"]).collect();
        let man = train_with(&train, &with);
        assert_ne!(plain.meta.version, man.meta.version, "{base:?}");
        let p = p_at_1(&open(&man), &test, &opts);
        assert!(p >= floor, "{base:?}: P@1 {p}");
    }
}
