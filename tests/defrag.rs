//! DEFRAG, FIAT and REFRAG end to end: train on vendored data, open the bundle, predict, and
//! refuse bundles whose feature map or prototypes point out of range.
// Helpers outside #[test] functions unwrap too: this is test code.
#![allow(clippy::unwrap_used)]

mod common;

use common::{p_at_1_with as p_at_1, train_with};
use xmc::bundle::Bundle;
use xmc::config::TrainConfig;
use xmc::data::Dataset;
use xmc::defrag::view::{Agglomerated, DefragViewError};
use xmc::defrag::{DefragKind, DefragParams};
use xmc::model::{Model, ModelError, PredictOptions, Prediction, QueryError, Scratch};
use xmc::train::Trained;

fn load(split: &str) -> Dataset {
    common::load("Corel5k", split)
}

fn open(t: &Trained) -> Result<Model, ModelError> {
    Model::from_bundle(Bundle::from_bytes(&t.to_bytes().unwrap()).unwrap())
}

#[test]
fn defrag_model_is_balanced_smaller_and_still_learns() {
    let (train, test) = (load("train"), load("test"));
    let plain = train_with(&train, &["max_leaf=40"]);
    let t = train_with(
        &train,
        &["max_leaf=40", "defrag=xy", "d0=8", "refrag=on", "fiat=on"],
    );
    let d = train.n_features();
    let a = &t.defrag[0];
    assert_eq!(a.map.len(), d);
    // The authors' rule: 499 features halve six times to 64 parts of 7 or 8.
    assert_eq!(d, 499);
    assert_eq!(a.sizes.len(), 64);
    assert_eq!(a.sizes.len(), xmc::defrag::n_clusters(d, 8));
    assert!(a.sizes.iter().all(|&s| s <= 8));
    assert!(xmc::defrag::balance_factor(&a.sizes) <= 8.0 / 7.0 + 1e-9);
    assert!(t.trees[0].chunks.n_weights() < plain.trees[0].chunks.n_weights());
    let model = open(&t).unwrap();
    let base = open(&plain).unwrap();
    let opts = PredictOptions::default();
    let (p_base, p_defrag) = (p_at_1(&base, &test, &opts), p_at_1(&model, &test, &opts));
    // Corel5k's vendored copy is small; the agglomerated model must still learn (the plain
    // model is about 0.3, chance is far below 0.05).
    assert!(p_defrag > 0.15, "DEFRAG P@1 {p_defrag} (plain {p_base})");
    for (rerank, impute) in [(false, false), (true, false), (false, true), (true, true)] {
        let o = PredictOptions {
            rerank: Some(rerank),
            impute: Some(impute),
            ..PredictOptions::default()
        };
        let (idx, val) = test.feature_row(0);
        let p = model.predict(idx, val, &o).unwrap();
        assert_eq!(p.labels.len(), 5);
        assert!(p.scores.windows(2).all(|w| w[0] >= w[1]), "{:?}", p.scores);
        assert!(p.scores.iter().all(|s| (0.0..=1.0).contains(s)));
    }
    // A plain model has no prototypes or scales: asking for them is the caller's error.
    let (idx, val) = test.feature_row(0);
    for o in [
        PredictOptions {
            rerank: Some(true),
            ..PredictOptions::default()
        },
        PredictOptions {
            impute: Some(true),
            ..PredictOptions::default()
        },
    ] {
        let e = base.predict(idx, val, &o).unwrap_err();
        assert!(matches!(e, QueryError::Unavailable { .. }), "{e}");
    }
}

#[test]
fn rerank_changes_order_only_among_search_candidates() {
    let train = load("train");
    let t = train_with(&train, &["max_leaf=40", "defrag=x", "refrag=on"]);
    let model = open(&t).unwrap();
    let (idx, val) = train.feature_row(3);
    let wide = PredictOptions {
        k: 20,
        rerank: Some(false),
        ..PredictOptions::default()
    };
    let candidates = model.predict(idx, val, &wide).unwrap().labels;
    let reranked = model
        .predict(
            idx,
            val,
            &PredictOptions {
                rerank: Some(true),
                candidates: Some(20),
                rerank_gamma: Some(100.0),
                ..PredictOptions::default()
            },
        )
        .unwrap();
    assert!(reranked.labels.iter().all(|l| candidates.contains(l)));
    // With α = 1 the affinity has no weight and the order is the tree's.
    let alpha1 = model
        .predict(
            idx,
            val,
            &PredictOptions {
                rerank: Some(true),
                rerank_alpha: Some(1.0),
                ..PredictOptions::default()
            },
        )
        .unwrap();
    assert_eq!(alpha1.labels, candidates[..5].to_vec());
}

/// With α = 0 a reranked score is exp(−γ_r(1 − a_l)), a_l the affinity averaged over the
/// members, each computed here from the member's own agglomeration of the query. Two members,
/// FIAT on, and one scratch space reused across queries of different lengths.
#[test]
fn reranked_scores_average_every_members_own_affinity() {
    let (train, test) = (load("train"), load("test"));
    let t = train_with(
        &train,
        &[
            "max_leaf=40",
            "defrag=xy",
            "trees=2",
            "refrag=on",
            "fiat=on",
        ],
    );
    let model = open(&t).unwrap();
    assert_eq!(model.defrag().len(), 2);
    let gamma = 3.0f32;
    let opts = PredictOptions {
        k: 10,
        rerank: Some(true),
        impute: Some(true),
        rerank_alpha: Some(0.0),
        rerank_gamma: Some(gamma),
        ..PredictOptions::default()
    };
    let mut scratch = Scratch::default();
    let mut agg = Agglomerated::default();
    let mut dense = vec![0.0f32; model.meta().n_features];
    for row in [0, 7, 1, 30, 2] {
        let (idx, val) = test.feature_row(row);
        let mut out = Prediction::default();
        model
            .predict_into(idx, val, &opts, &mut scratch, &mut out)
            .unwrap();
        assert_eq!(out.labels.len(), 10);
        // The query as the model sees it: Corel5k's rows are sorted, and the model
        // normalizes.
        let mut q: Vec<(u32, f32)> = idx.iter().copied().zip(val.iter().copied()).collect();
        q.retain(|&(_, v)| v != 0.0);
        if model.meta().normalize {
            let norm = q
                .iter()
                .map(|&(_, v)| f64::from(v).powi(2))
                .sum::<f64>()
                .sqrt();
            for e in &mut q {
                e.1 = (f64::from(e.1) / norm) as f32;
            }
        }
        let (qi, qv): (Vec<u32>, Vec<f32>) = q.into_iter().unzip();
        let mut affinity = vec![0.0f32; out.labels.len()];
        for view in model.defrag() {
            view.apply(&qi, &qv, true, model.meta().normalize, &mut agg)
                .unwrap();
            for (&c, &v) in agg.idx.iter().zip(&agg.val) {
                dense[c as usize] = v;
            }
            for (a, &l) in affinity.iter_mut().zip(&out.labels) {
                *a += view.affinity(l.0, &dense);
            }
            for &c in &agg.idx {
                dense[c as usize] = 0.0;
            }
        }
        for ((&l, &s), &a) in out.labels.iter().zip(&out.scores).zip(&affinity) {
            let want = (-gamma * (1.0 - a / 2.0)).exp();
            assert!(
                (s - want).abs() <= 1e-5 * want.max(1.0),
                "row {row} label {l}: score {s}, want {want}"
            );
        }
    }
}

/// The authors' own Bibtex run (`sample_run.py`, `-cml 8`) writes 256 groups of 7 or 8 features
/// for d = 1836; xmc cuts the same number, and with d0 = 32 and 5 the next halving depths.
#[test]
fn bibtex_cluster_count_is_the_authors_256_at_d0_8() {
    let train = common::load("Bibtex", "train");
    assert_eq!(train.n_features(), 1836);
    for (d0, want, sizes) in [(8, 256, 7..=8), (32, 64, 28..=29), (5, 512, 3..=4)] {
        let params = DefragParams {
            kind: DefragKind::Xy,
            d0,
            ..DefragParams::DEFAULT
        };
        let built = xmc::defrag::train::build(&train, &params, true, 7).unwrap();
        let got = &built.arrays.sizes;
        assert_eq!(got.len(), want, "d0 = {d0}");
        assert!(got.iter().all(|s| sizes.contains(s)), "d0 = {d0}: {got:?}");
        assert_eq!(got.iter().sum::<u32>(), 1836);
        assert_eq!(built.dataset.n_features(), want);
    }
}

#[test]
fn same_seed_gives_same_clusters_and_members_get_fresh_ones() {
    let train = load("train");
    let sets = ["max_leaf=40", "defrag=n", "trees=2", "fiat=on"];
    let (a, b) = (train_with(&train, &sets), train_with(&train, &sets));
    assert_eq!(a.meta.version, b.meta.version);
    assert_eq!(a.defrag[0].map, b.defrag[0].map);
    assert_ne!(
        a.defrag[0].map, a.defrag[1].map,
        "each member clusters afresh"
    );
    assert!(open(&a).is_ok());
}

#[test]
fn out_of_range_cluster_ids_and_prototype_indices_are_refused_at_open() {
    let train = load("train");
    let t = train_with(&train, &["max_leaf=40", "defrag=xy", "refrag=on"]);
    let k = t.defrag[0].sizes.len() as u32;

    let mut bad = train_with(&train, &["max_leaf=40", "defrag=xy", "refrag=on"]);
    bad.defrag[0].map[5] = k;
    let e = open(&bad).unwrap_err();
    assert!(
        matches!(
            e,
            ModelError::Defrag {
                source: DefragViewError::ClusterOutOfRange { feature: 5, .. },
                ..
            }
        ),
        "{e}"
    );

    let mut bad = t;
    let protos = bad.defrag[0].prototypes.as_mut().unwrap();
    let last = protos.idx.len() - 1;
    protos.idx[last] = k + 3;
    let e = open(&bad).unwrap_err();
    assert!(
        matches!(
            e,
            ModelError::Defrag {
                source: DefragViewError::ProtoIndex { .. },
                ..
            }
        ),
        "{e}"
    );
}

/// A model that does not normalize queries agglomerates the values as they come: values of one
/// cluster whose sum overflows `f32` are refused (a 422 at the server) instead of being dropped
/// from the query unsaid, and ordinary values are still answered.
#[test]
fn huge_values_in_a_model_that_does_not_normalize_are_refused_not_scored() {
    let (train, test) = (load("train"), load("test"));
    let t = train_with(
        &train,
        &[
            "max_leaf=40",
            "normalize=false",
            "defrag=xy",
            "d0=8",
            "fiat=on",
        ],
    );
    let model = open(&t).unwrap();
    let opts = PredictOptions::default();
    let (idx, val) = test.feature_row(0);
    let p = model.predict(idx, val, &opts).unwrap();
    assert!(p.scores.iter().all(|s| (0.0..=1.0).contains(s)), "{p:?}");
    // Two features of one cluster at the largest f32 sum beyond it.
    let map = &t.defrag[0].map;
    let mut pair = (0..map.len() as u32).filter(|&j| map[j as usize] == map[5]);
    let (a, b) = (pair.next().unwrap(), pair.next().unwrap());
    // One scratch space throughout, as a serving thread keeps. (Without imputation each
    // feature's weight is 1; the unit tests cover FIAT weights.)
    let (mut scratch, mut out) = (Scratch::default(), Prediction::default());
    let e = model.predict_into(
        &[a, b],
        &[f32::MAX, f32::MAX],
        &opts,
        &mut scratch,
        &mut out,
    );
    assert_eq!(e, Err(QueryError::ClusterOverflow { id: a }));
    // The accumulator was left clean: the next query gets the same answer as before.
    model
        .predict_into(idx, val, &opts, &mut scratch, &mut out)
        .unwrap();
    assert_eq!(out, p);
}

#[test]
fn erasure_removes_the_asked_share_of_each_row() {
    let test = load("test");
    let erased = xmc::defrag::erase_features(&test, 0.5, 1);
    for i in 0..test.n_points() {
        let (full, _) = test.feature_row(i);
        let (kept, _) = erased.feature_row(i);
        assert_eq!(
            kept.len(),
            full.len() - (full.len() as f64 * 0.5).round() as usize
        );
        assert!(kept.iter().all(|f| full.contains(f)));
    }
    assert_eq!(erased, xmc::defrag::erase_features(&test, 0.5, 1));
}

#[test]
fn config_keys_are_checked_and_named() {
    let cfg = TrainConfig::load(
        None,
        &["defrag=n".into(), "d0=16".into(), "refrag=on".into()],
    )
    .unwrap();
    assert_eq!((cfg.defrag.d0, cfg.defrag.refrag), (16, true));
    for (set, key) in [
        (vec!["defrag=z"], "`defrag`"),
        (vec!["fiat=on"], "`fiat`"),
        (vec!["defrag=x", "d0=0"], "`d0`"),
        (vec!["defrag=x", "refrag_alpha=2"], "`refrag_alpha`"),
        (vec!["defrag=x", "defrag_points=0"], "`defrag_points`"),
    ] {
        let sets: Vec<String> = set.iter().map(|s| s.to_string()).collect();
        let err = TrainConfig::load(None, &sets).unwrap_err();
        assert!(err.to_string().contains(key), "{set:?}: {err}");
    }
}
