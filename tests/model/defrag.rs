//! DEFRAG, FIAT and REFRAG end to end: train on vendored data, open the bundle, predict, and
//! refuse bundles whose feature map or prototypes point out of range.
// Helpers outside #[test] functions unwrap too: this is test code.
#![allow(clippy::unwrap_used)]

use crate::common;

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
    // The agglomerated model still learns: it scores 0.374 on the test split (the plain model
    // 0.33; chance is far below 0.05).
    assert!(p_defrag >= 0.36, "DEFRAG P@1 {p_defrag} (plain {p_base})");
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

/// REFRAG without DEFRAG: `refrag = on` on a plain model stores one prototype per label over
/// the input features (its largest `refrag_entries` entries), deterministically, next to the
/// plain model's own tree, and the shared stage scores each candidate by
/// exp(α·ln b + (1 − α)·(−γ_r(1 − ⟨x, ξ_l⟩))) with x the prepared query.
#[test]
fn refrag_on_a_plain_model_stores_input_prototypes_and_reranks() {
    let (train, test) = (load("train"), load("test"));
    let plain = train_with(&train, &["max_leaf=40"]);
    let sets = ["max_leaf=40", "refrag=on", "refrag_entries=30"];
    let t = train_with(&train, &sets);
    assert!(t.defrag.is_empty());
    assert_eq!(t.trees, plain.trees, "the prototypes leave the tree alone");
    let protos = t.prototypes.as_ref().unwrap();
    assert_eq!(protos.start.len(), train.n_labels() + 1);
    assert!(protos.start.windows(2).all(|w| w[1] - w[0] <= 30));
    let all = train_with(&train, &["max_leaf=40", "refrag=on", "refrag_entries=0"]);
    assert!(all.prototypes.as_ref().unwrap().idx.len() > protos.idx.len());
    let again = train_with(&train, &sets);
    assert_eq!(again.prototypes, t.prototypes);
    assert_eq!(again.meta.version, t.meta.version);
    assert_ne!(t.meta.version, plain.meta.version);

    let model = open(&t).unwrap();
    assert!(model.can_rerank() && !model.can_impute());
    assert!(!open(&plain).unwrap().can_rerank());
    for name in ["start", "idx", "val"] {
        let s = xmc::model::sections::input_prototype_section(name);
        assert!(model.bundle().section(&s).is_some(), "{name}");
    }
    // REFRAG is on by default for this model: the stage rescored the candidates.
    let (idx, val) = test.feature_row(2);
    let default = model.predict(idx, val, &PredictOptions::default()).unwrap();
    assert!(default.reranked >= 20, "{}", default.reranked);
    let tree_only = PredictOptions {
        k: 20,
        rerank: Some(false),
        ..PredictOptions::default()
    };
    let candidates = model.predict(idx, val, &tree_only).unwrap().labels;
    assert!(default.labels.iter().all(|l| candidates.contains(l)));
    let alpha1 = PredictOptions {
        rerank_alpha: Some(1.0),
        ..PredictOptions::default()
    };
    assert_eq!(
        model.predict(idx, val, &alpha1).unwrap().labels,
        candidates[..5].to_vec()
    );

    // α = 0: the score is the affinity's alone, from the prototype and the normalized query.
    let gamma = 4.0f32;
    let opts = PredictOptions {
        k: 10,
        rerank_alpha: Some(0.0),
        rerank_gamma: Some(gamma),
        ..PredictOptions::default()
    };
    let mut scratch = Scratch::default();
    for row in [0, 7, 1, 30] {
        let (idx, val) = test.feature_row(row);
        let mut out = Prediction::default();
        model
            .predict_into(idx, val, &opts, &mut scratch, &mut out)
            .unwrap();
        let norm = val
            .iter()
            .map(|&v| f64::from(v).powi(2))
            .sum::<f64>()
            .sqrt();
        for (&l, &s) in out.labels.iter().zip(&out.scores) {
            let l = l.0 as usize;
            let (a, b) = (protos.start[l] as usize, protos.start[l + 1] as usize);
            let mut dot = 0f64;
            for (&j, &p) in protos.idx[a..b].iter().zip(&protos.val[a..b]) {
                if let Some(q) = idx.iter().position(|&i| i == j) {
                    dot += f64::from(p) * f64::from(val[q]) / norm;
                }
            }
            let want = (-gamma * (1.0 - dot as f32)).exp();
            assert!(
                (s - want).abs() <= 1e-5 * want.max(1.0),
                "row {row} label {l}: score {s}, want {want}"
            );
        }
    }
}

/// REFRAG's (α, γ_r) chosen on a held-out tenth of the training set: the pair and every grid
/// point's figures are in the metadata, the pair is the model's default, the same inputs give
/// the same bundle, and `refrag_search = off` keeps a pair given in the config.
#[test]
fn refrag_weights_are_chosen_on_a_held_out_fold_unless_given() {
    use xmc::train::refrag::{P1_TOLERANCE, choose, grid};
    let (train, test) = (load("train"), load("test"));
    let sets = ["max_leaf=40", "refrag=on"];
    let t = train_with(&train, &sets);
    let c = t.meta.refrag.clone().unwrap();
    assert_eq!(c.fold_points, train.n_points() / 10);
    assert_eq!(c.train_points + c.fold_points, train.n_points());
    let pairs: Vec<(f32, f32)> = c.grid.iter().map(|g| (g.alpha, g.gamma)).collect();
    assert_eq!(pairs, grid());
    for f in c.grid.iter().map(|g| &g.figures).chain([&c.baseline]) {
        assert!(
            [f.p1, f.psp5, f.coverage5]
                .iter()
                .all(|v| (0.0..=1.0).contains(v))
        );
    }
    assert!(c.baseline.p1 > 0.0);
    match choose(&c.baseline, &c.grid) {
        Some(i) => {
            assert!(c.within_tolerance);
            assert_eq!((c.grid[i].alpha, c.grid[i].gamma), (c.alpha, c.gamma));
            assert!(c.grid[i].figures.p1 >= c.baseline.p1 - P1_TOLERANCE - 1e-9);
        }
        None => assert!(!c.within_tolerance && c.alpha == 1.0),
    }
    let dp = &t.meta.config.defrag;
    assert_eq!((dp.alpha, dp.gamma_r), (c.alpha, c.gamma));
    let meta = serde_json::to_value(&t.meta).unwrap();
    assert_eq!(
        meta["refrag"]["grid"].as_array().unwrap().len(),
        pairs.len()
    );
    assert!(
        meta["created"]["seconds"]["refrag_search"]
            .as_f64()
            .is_some()
    );

    // The chosen pair is what a default prediction uses.
    let model = open(&t).unwrap();
    let pair = PredictOptions {
        rerank_alpha: Some(c.alpha),
        rerank_gamma: Some(c.gamma),
        ..PredictOptions::default()
    };
    for row in 0..20 {
        let (idx, val) = test.feature_row(row);
        assert_eq!(
            model.predict(idx, val, &PredictOptions::default()).unwrap(),
            model.predict(idx, val, &pair).unwrap()
        );
    }

    // Given weights win with the search off; the sections are the searched model's.
    let given = train_with(
        &train,
        &[
            "max_leaf=40",
            "refrag=on",
            "refrag_search=off",
            "refrag_alpha=0.7",
            "refrag_gamma=3",
        ],
    );
    assert!(given.meta.refrag.is_none());
    let dp = &given.meta.config.defrag;
    assert_eq!((dp.alpha, dp.gamma_r), (0.7, 3.0));
    assert_eq!(given.meta.version, t.meta.version);

    // Deterministic: the same data, settings and seed give the same bytes but for `created`.
    let bytes = |mut t: Trained| {
        t.meta.created = xmc::model::Created::default();
        t.to_bytes().unwrap()
    };
    let again = train_with(&train, &sets);
    assert_eq!(again.meta.refrag, t.meta.refrag);
    assert!(bytes(again) == bytes(t));
}

/// With DEFRAG, `refrag_entries` cuts each prototype over the clusters to its largest entries,
/// as it does the input-space ones.
#[test]
fn defrag_prototypes_keep_their_largest_entries() {
    use xmc::defrag::train::largest_entries;
    let train = load("train");
    let sets = |entries: &'static str| {
        [
            "max_leaf=40",
            "trees=1",
            "defrag=xy",
            "d0=8",
            "refrag=on",
            "refrag_search=off",
            entries,
        ]
    };
    let all = train_with(&train, &sets("refrag_entries=0"));
    let cut = train_with(&train, &sets("refrag_entries=5"));
    let all = all.defrag[0].prototypes.clone().unwrap();
    let cut = cut.defrag[0].prototypes.as_ref().unwrap();
    assert!(cut.start.windows(2).all(|w| w[1] - w[0] <= 5));
    assert!(cut.idx.len() < all.idx.len());
    assert_eq!(*cut, largest_entries(all, 5));
}

/// Damaged input-space prototypes: the verified open refuses out-of-range columns, bad offsets
/// and non-finite values; the structural open (O(1) checks) accepts them and predicting reads
/// them bounds-checked, without panicking. Wrong lengths fail either open, a flipped byte the
/// checksums, and a bundle whose metadata asks for REFRAG without its sections is refused.
#[test]
fn damaged_input_prototypes_are_refused_or_read_without_panicking() {
    use xmc::model::sections::input_prototype_section;
    use xmc::rerank::LabelRowsError;
    let train = load("train");
    let sets = ["max_leaf=40", "refrag=on"];
    let t = train_with(&train, &sets);
    let structural = |t: &Trained| {
        Model::from_bundle_structure(Bundle::from_bytes(&t.to_bytes().unwrap()).unwrap())
    };
    let predicts = |m: &Model| {
        for i in 0..train.n_points().min(200) {
            let (idx, val) = train.feature_row(i);
            m.predict(idx, val, &PredictOptions::default()).unwrap();
        }
    };

    let mut bad = train_with(&train, &sets);
    let p = bad.prototypes.as_mut().unwrap();
    let last = p.idx.len() - 1;
    p.idx[last] = train.n_features() as u32 + 5;
    let e = open(&bad).unwrap_err();
    assert!(
        matches!(e, ModelError::Prototypes(LabelRowsError::Index { .. })),
        "{e}"
    );
    let model = structural(&bad).unwrap();
    predicts(&model);
    assert!(model.verify().is_err());

    let mut bad = train_with(&train, &sets);
    bad.prototypes.as_mut().unwrap().start[train.n_labels() / 2] = u32::MAX;
    assert!(matches!(
        open(&bad).unwrap_err(),
        ModelError::Prototypes(LabelRowsError::Offsets { .. })
    ));
    predicts(&structural(&bad).unwrap());

    let mut bad = train_with(&train, &sets);
    bad.prototypes.as_mut().unwrap().val[0] = f32::NAN;
    assert!(matches!(
        open(&bad).unwrap_err(),
        ModelError::Prototypes(LabelRowsError::NonFinite)
    ));

    let mut bad = train_with(&train, &sets);
    bad.prototypes.as_mut().unwrap().start.pop();
    for e in [open(&bad).unwrap_err(), structural(&bad).unwrap_err()] {
        assert!(
            matches!(e, ModelError::Prototypes(LabelRowsError::Length { .. })),
            "{e}"
        );
    }
    let mut bad = train_with(&train, &sets);
    bad.prototypes.as_mut().unwrap().val.push(0.5);
    assert!(structural(&bad).is_err());

    let good = t.to_bytes().unwrap();
    let bundle = Bundle::from_bytes(&good).unwrap();
    for name in ["start", "idx", "val"] {
        let info = bundle
            .section(&input_prototype_section(name))
            .unwrap()
            .clone();
        let mut b = good.clone();
        b[info.offset as usize + info.byte_len as usize / 2] ^= 0x40;
        assert!(
            Bundle::from_bytes(&b).unwrap().verify_checksums().is_err(),
            "{name}"
        );
    }

    let mut gone = train_with(&train, &sets);
    gone.prototypes = None;
    assert!(matches!(
        open(&gone).unwrap_err(),
        ModelError::PrototypesMissing(_)
    ));
}
