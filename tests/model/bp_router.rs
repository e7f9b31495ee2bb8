//! The BP instance router end to end: train on vendored real data, open the bundle, route and
//! predict; the edge cases of the issue (q = 1, `block_candidates` > q, bad sections at open).
// Helpers outside #[test] functions unwrap too: this is test code.
#![allow(clippy::unwrap_used)]

use crate::common;

use common::{load, p_at_1, p_at_1_with, rechunk, train_with};
use xmc::bundle::Bundle;
use xmc::config::TrainConfig;
use xmc::model::{Model, ModelError, PredictOptions};
use xmc::train::{self, Quiet, TrainInputs, Trained};
use xmc::tree::chunk::{IndexChoice, RowChoice};

/// A quick BP model: two flat blocks with small label clusters.
const SMALL: &[&str] = &["bp=on", "block_model=flat", "bp_lambda=1", "bp_q=2"];

/// The same BP configuration as the first test's.
const FLAT4: &[&str] = &["bp=on", "block_model=flat", "bp_lambda=0.3", "bp_q=4"];

fn open(trained: &Trained) -> Result<Model, ModelError> {
    Model::from_bundle(Bundle::from_bytes(&trained.to_bytes().unwrap()).unwrap())
}

#[test]
fn flat_blocks_route_to_one_block_and_score_only_its_labels() {
    let train = load("Corel5k", "train");
    let test = load("Corel5k", "test");
    let trained = train_with(&train, FLAT4);
    let model = open(&trained).unwrap();
    let bp = model.bp().unwrap();
    let meta = model.meta().bp.clone().unwrap();
    assert_eq!(bp.q(), meta.q);
    assert!(meta.q >= 2 && meta.q <= 4, "q = {}", meta.q);
    assert_eq!(meta.block_labels.len(), meta.q);
    assert_eq!(meta.block_points.iter().sum::<usize>(), train.n_points());
    let opts = PredictOptions::default();
    for i in 0..50 {
        let (idx, val) = test.feature_row(i);
        let p = model.predict(idx, val, &opts).unwrap();
        assert_eq!(p.blocks.len(), 1);
        let b = p.blocks[0] as usize;
        let cluster: &[u32] = &bp.blocks[b].labels;
        assert!(p.labels.iter().all(|l| cluster.binary_search(&l.0).is_ok()));
        // The router's q classifiers, then one per label of the block.
        assert_eq!(p.outputs_evaluated as usize, meta.q + cluster.len());
        assert_eq!(p.nodes_evaluated, 2);
    }
    // The most frequent label alone scores about 0.13 on this split; this model scores 0.354.
    let p1 = p_at_1_with(&model, &test, &opts);
    assert!(p1 >= 0.34, "P@1 = {p1}");
    // Same data, config and seed: the same bundle.
    let again = train_with(&train, FLAT4);
    assert_eq!(again.meta.version, trained.meta.version);
}

#[test]
fn block_candidates_merge_and_saturate_at_q() {
    let train = load("Corel5k", "train");
    let trained = train_with(
        &train,
        &["bp=on", "block_model=flat", "bp_lambda=0.3", "bp_q=3"],
    );
    let model = open(&trained).unwrap();
    let q = model.bp().unwrap().q();
    let (idx, val) = train.feature_row(7);
    let mut all_labels = 0;
    for b in [1, 2, q, q + 5, usize::MAX] {
        let opts = PredictOptions {
            k: 10,
            block_candidates: Some(b),
            ..PredictOptions::default()
        };
        let p = model.predict(idx, val, &opts).unwrap();
        assert_eq!(p.blocks.len(), b.min(q), "block_candidates = {b}");
        let mut seen = p.blocks.clone();
        seen.sort_unstable();
        seen.dedup();
        assert_eq!(seen.len(), p.blocks.len(), "each block searched once");
        let mut labels: Vec<u32> = p.labels.iter().map(|l| l.0).collect();
        labels.sort_unstable();
        labels.dedup();
        assert_eq!(labels.len(), p.labels.len(), "merged labels are distinct");
        assert!(p.scores.windows(2).all(|w| w[0] >= w[1]));
        if b >= q {
            all_labels = all_labels.max(p.outputs_evaluated);
        }
    }
    let total: usize = model
        .bp()
        .unwrap()
        .blocks
        .iter()
        .map(|b| b.labels.len())
        .sum();
    assert_eq!(all_labels as usize, q + total);
}

#[test]
fn one_block_is_the_top_labels_and_a_tree_block_model_works() {
    let train = load("Corel5k", "train");
    let test = load("Corel5k", "test");
    let trained = train_with(&train, &["bp=on", "bp_lambda=0.1", "bp_q=1", "max_leaf=10"]);
    let model = open(&trained).unwrap();
    let bp = model.bp().unwrap();
    assert_eq!(bp.q(), 1);
    assert!(model.meta().bp.as_ref().unwrap().block_model == xmc::config::ModelKind::Tree);
    let (idx, val) = test.feature_row(0);
    let p = model.predict(idx, val, &PredictOptions::default()).unwrap();
    assert_eq!(p.blocks, vec![0]);
    assert!(p.nodes_evaluated > 2, "a tree below the router");
    // It scores 0.358 on the test split.
    let p1 = p_at_1(&model, &test);
    assert!(p1 >= 0.34, "P@1 = {p1}");
}

#[test]
fn bad_bp_sections_are_refused_at_open() {
    let train = load("Corel5k", "train");
    let good = train_with(&train, SMALL);
    let n_labels = good.meta.n_labels as u32;

    let mut bad = train_with(&train, SMALL);
    let labels = &mut bad.bp.as_mut().unwrap().blocks[0].labels;
    *labels.last_mut().unwrap() = n_labels;
    let err = open(&bad).unwrap_err();
    assert!(matches!(err, ModelError::Bp(_)), "{err}");
    assert!(err.to_string().contains("not below"), "{err}");

    let mut bad = train_with(&train, SMALL);
    bad.bp.as_mut().unwrap().blocks[1].labels.reverse();
    let err = open(&bad).unwrap_err();
    assert!(err.to_string().contains("increasing"), "{err}");

    // The metadata says more blocks than the bundle holds.
    let mut bad = train_with(&train, SMALL);
    bad.meta.bp.as_mut().unwrap().q = 3;
    assert!(open(&bad).is_err());
    assert!(open(&good).is_ok());
}

#[test]
fn a_structural_open_leaves_bp_weight_entries_to_verify() {
    let train = load("Corel5k", "train");
    type Corrupt = fn(&mut Trained);
    let corruptions: [Corrupt; 4] = [
        // A router entry names a block the router does not have (the router's few outputs put
        // its weights in rows: rebuilt on entries first, which scoring reads the same way).
        |t| {
            let router = &mut t.bp.as_mut().unwrap().router;
            rechunk(router, IndexChoice::Smaller, RowChoice::Entries);
            let out = &mut router.chunks.entry_out;
            *out.last_mut().unwrap() = 1000;
        },
        // A router row weight that is not finite.
        |t| {
            let rows = &mut t.bp.as_mut().unwrap().router.chunks.row_weight;
            assert!(!rows.is_empty());
            rows[0] = f32::NAN;
        },
        // A block's entry names a label outside its cluster (on entries first, as above).
        |t| {
            let tree = &mut t.bp.as_mut().unwrap().blocks[1].tree;
            rechunk(tree, IndexChoice::Smaller, RowChoice::Entries);
            tree.chunks.entry_out[0] = 100_000;
        },
        // Every weight of a block not finite, in whichever layout it stores them.
        |t| {
            let c = &mut t.bp.as_mut().unwrap().blocks[0].tree.chunks;
            assert!(!(c.entry_weight.is_empty() && c.row_weight.is_empty()));
            c.entry_weight.iter_mut().for_each(|w| *w = f32::NAN);
            c.row_weight.iter_mut().for_each(|w| *w = f32::NAN);
        },
    ];
    for (c, corrupt) in corruptions.iter().enumerate() {
        let mut t = train_with(&train, SMALL);
        corrupt(&mut t);
        let bytes = t.to_bytes().unwrap();
        let err = Model::from_bundle(Bundle::from_bytes(&bytes).unwrap()).unwrap_err();
        assert!(matches!(err, ModelError::Bp(_)), "corruption {c}: {err}");
        let model = Model::from_bundle_structure(Bundle::from_bytes(&bytes).unwrap()).unwrap();
        assert!(model.verify().is_err(), "corruption {c} passed verify()");
        // Searching the unverified model gives at most wrong scores, never a panic.
        for i in 0..50 {
            let (idx, val) = train.feature_row(i);
            for b in [1, 2] {
                let opts = PredictOptions {
                    k: 5,
                    block_candidates: Some(b),
                    ..PredictOptions::default()
                };
                assert!(model.predict(idx, val, &opts).unwrap().labels.len() <= 5);
            }
        }
    }
    // Structural defects are refused by both opens, and an intact model passes verify().
    let mut bad = train_with(&train, SMALL);
    bad.bp.as_mut().unwrap().blocks[1].labels.reverse();
    let bytes = bad.to_bytes().unwrap();
    assert!(Model::from_bundle_structure(Bundle::from_bytes(&bytes).unwrap()).is_err());
    let good = train_with(&train, SMALL).to_bytes().unwrap();
    let quick = Model::from_bundle_structure(Bundle::from_bytes(&good).unwrap()).unwrap();
    quick.verify().unwrap();
}

#[test]
fn a_lambda_that_empties_every_cluster_is_a_clear_error() {
    let train = load("Corel5k", "train");
    let cfg = TrainConfig::load(
        None,
        &["bp=on".into(), "bp_lambda=1e9".into(), "bp_q=2".into()],
    )
    .unwrap();
    let err = train::train(&train, &cfg, TrainInputs::default(), &Quiet).unwrap_err();
    assert!(err.to_string().contains("bp_lambda"), "{err}");
    let err = TrainConfig::load(None, &["bp=on".into(), "trees=2".into()]).unwrap_err();
    assert!(err.to_string().contains("`bp`"), "{err}");
}

#[test]
fn cross_validation_records_its_fold_scores() {
    let train = load("Corel5k", "train");
    let trained = train_with(
        &train,
        &[
            "bp=on",
            "block_model=flat",
            "bp_folds=2",
            "bp_scored_folds=2",
            "bp_q=3",
        ],
    );
    let bp = trained.meta.bp.clone().unwrap();
    assert_eq!(bp.lambda_source, "cross-validation");
    let cv = bp.cv.unwrap();
    assert_eq!(cv.folds, 2);
    assert_eq!(cv.scored_folds, 2);
    assert!(cv.grid.iter().any(|p| p.lambda == cv.chosen));
    assert_eq!(bp.lambda, cv.chosen);
    for p in &cv.grid {
        // A λ stops at its first fold out of tolerance; one that passes was scored on both.
        let scored = p.p1_bp.len();
        assert!((1..=2).contains(&scored), "{p:?}");
        assert_eq!(p.p1_full.len(), scored);
        assert_eq!(p.q.len(), scored);
        assert!(!p.within || scored == 2, "{p:?}");
        // `within` is the tolerance test on every fold's loss.
        assert_eq!(p.within, p.worst_loss() <= cv.tolerance);
    }
    // Some λ is within tolerance on this data; the chosen λ is the largest such, and λ is tried
    // from the largest down, so nothing below it was scored.
    let largest = cv.grid.iter().rev().find(|p| p.within).map(|p| p.lambda);
    let largest = largest.unwrap_or_else(|| panic!("no λ within tolerance: {:?}", cv.grid));
    assert_eq!(cv.chosen, largest);
    assert!(
        cv.grid.iter().all(|p| p.lambda >= cv.chosen),
        "{:?}",
        cv.grid
    );
    assert!(cv.grid.iter().filter(|p| p.within).count() == 1);
    assert!(cv.grid.windows(2).all(|w| w[0].lambda < w[1].lambda));
    // Smaller λ keeps at least as many labels per query on average.
    let evals: Vec<f64> = cv.grid.iter().map(|p| p.evals_mean[0]).collect();
    let (first, last) = (evals.first().unwrap(), evals.last().unwrap());
    assert!(first >= last, "{evals:?}");
}

#[test]
fn the_default_lambda_choice_scores_one_held_out_fold() {
    let train = load("Corel5k", "train");
    let args = ["bp=on", "block_model=flat", "bp_q=3"];
    let trained = train_with(&train, &args);
    let bp = trained.meta.bp.clone().unwrap();
    assert_eq!(bp.lambda_source, "cross-validation");
    let cv = bp.cv.unwrap();
    assert_eq!((cv.folds, cv.scored_folds), (3, 1));
    assert_eq!(bp.lambda, cv.chosen);
    // Every λ tried was scored on the one held-out fold only.
    for p in &cv.grid {
        assert_eq!(
            (p.p1_bp.len(), p.p1_full.len(), p.q.len()),
            (1, 1, 1),
            "{p:?}"
        );
        assert_eq!(p.within, p.worst_loss() <= cv.tolerance);
    }
    // The model without BP is trained once, so every λ compares against the same P@1.
    assert!(cv.grid.windows(2).all(|w| w[0].p1_full == w[1].p1_full));
    // Some λ passes on this data, and it is the chosen one, the smallest λ tried.
    assert!(cv.grid.iter().any(|p| p.within), "{:?}", cv.grid);
    assert_eq!(cv.grid[0].lambda, cv.chosen);
    assert!(cv.grid[0].within);
    // Same data, config and seed: the same bundle.
    let again = train_with(&train, &args);
    assert_eq!(again.meta.version, trained.meta.version);
    let bytes = |t: &Trained| {
        let mut m = t.meta.clone();
        m.created.unix_time = 0;
        m.created.seconds.clear();
        (serde_json::to_string(&m).unwrap(), t.meta.version.clone())
    };
    assert_eq!(bytes(&again), bytes(&trained));
    // `bp_scored_folds` is at most `bp_folds`.
    let err =
        TrainConfig::load(None, &["bp_folds=2".into(), "bp_scored_folds=3".into()]).unwrap_err();
    assert!(err.to_string().contains("bp_scored_folds"), "{err}");
}

/// REFRAG's input-space prototypes on a BP model: they are built for every label, and the shared
/// stage reranks the candidates of the routed block without leaving it.
#[test]
fn plain_refrag_reranks_within_the_routed_block() {
    let train = load("Corel5k", "train");
    let test = load("Corel5k", "test");
    let with: Vec<&str> = SMALL.iter().copied().chain(["refrag=on"]).collect();
    let bp = train_with(&train, SMALL);
    let trained = train_with(&train, &with);
    assert_eq!(
        trained.prototypes.as_ref().unwrap().start.len(),
        train.n_labels() + 1
    );
    let model = open(&trained).unwrap();
    assert!(model.can_rerank());
    let plain = open(&bp).unwrap();
    let blocks = model.bp().unwrap();
    let off = PredictOptions {
        rerank: Some(false),
        ..PredictOptions::default()
    };
    let mut changed = 0;
    for i in 0..100 {
        let (idx, val) = test.feature_row(i);
        let on = model.predict(idx, val, &PredictOptions::default()).unwrap();
        assert!(on.reranked > 0, "query {i}");
        assert_eq!(on.blocks.len(), 1);
        let cluster: &[u32] = &blocks.blocks[on.blocks[0] as usize].labels;
        assert!(
            on.labels
                .iter()
                .all(|l| cluster.binary_search(&l.0).is_ok())
        );
        // Off, the stage leaves the BP model's own answer.
        let base = model.predict(idx, val, &off).unwrap();
        let same = plain.predict(idx, val, &PredictOptions::default()).unwrap();
        assert_eq!(base.labels, same.labels, "query {i}");
        assert_eq!(base.reranked, 0);
        changed += usize::from(on.labels != base.labels);
    }
    assert!(changed > 0, "reranking changed no answer of 100");
    // It scores 0.34 on the test split.
    let p1 = p_at_1(&model, &test);
    assert!(p1 >= 0.325, "P@1 = {p1}");
}
