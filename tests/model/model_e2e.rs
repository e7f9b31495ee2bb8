//! The label-tree model end to end: train on vendored real data, write the bundle, open it, predict.
// Helpers outside #[test] functions unwrap too: this is test code.
#![allow(clippy::unwrap_used)]

use crate::common;

use common::layout::{entry_at, reseal};
use common::{load, p_at_1, rechunk, train_with, vendored, xmc};
use std::path::Path;
use xmc::bundle::{Bundle, Dtype, OpenOptions};
use xmc::config::TrainConfig;
use xmc::data::{self, Dataset};
use xmc::model::{Model, PredictOptions};
use xmc::train::{self, Quiet, TrainInputs, Trained};
use xmc::tree::chunk::{ChunksBuilder, EntryOuts, IndexChoice, RowChoice};

#[test]
fn tree_on_corel5k_learns_and_round_trips_through_the_bundle() {
    let train = load("Corel5k", "train");
    let test = load("Corel5k", "test");
    let trained = train_with(&train, &["max_leaf=20"]);
    let bytes = trained.to_bytes().unwrap();
    let model = Model::from_bundle(Bundle::from_bytes(&bytes).unwrap()).unwrap();
    assert_eq!(model.meta().n_labels, 374);
    let p1 = p_at_1(&model, &test);
    // The most frequent label alone scores about 0.13 on this split; this tree scores 0.332.
    assert!(p1 >= 0.32, "P@1 = {p1}");

    let q = test.feature_row(0);
    let p = model
        .predict(
            q.0,
            q.1,
            &PredictOptions {
                k: 5,
                ..PredictOptions::default()
            },
        )
        .unwrap();
    assert_eq!(p.labels.len(), 5);
    assert!(p.scores.windows(2).all(|w| w[0] >= w[1]), "{:?}", p.scores);
    assert!(p.scores.iter().all(|s| (0.0..=1.0).contains(s)));
    assert!(p.nodes_evaluated > 0 && p.depth > 0);
}

#[test]
fn same_config_and_seed_give_identical_bundles_but_for_the_timestamp() {
    let ds = load("Corel5k", "train");
    let a = train_with(&ds, &["max_leaf=30", "seed=3"]);
    let b = train_with(&ds, &["max_leaf=30", "seed=3"]);
    let (ba, bb) = (a.to_bytes().unwrap(), b.to_bytes().unwrap());
    let (oa, ob) = (
        Bundle::from_bytes(&ba).unwrap(),
        Bundle::from_bytes(&bb).unwrap(),
    );
    let names: Vec<_> = oa.sections().iter().map(|s| s.name.clone()).collect();
    assert_eq!(
        names,
        ob.sections()
            .iter()
            .map(|s| s.name.clone())
            .collect::<Vec<_>>()
    );
    for (sa, sb) in oa.sections().iter().zip(ob.sections()) {
        if sa.name == "meta" {
            continue;
        }
        let raw =
            |bytes: &[u8], off: u64, len: u64| bytes[off as usize..(off + len) as usize].to_vec();
        assert_eq!(
            raw(&ba, sa.offset, sa.byte_len),
            raw(&bb, sb.offset, sb.byte_len),
            "section {}",
            sa.name
        );
    }
    let strip = |b: &Bundle| {
        let mut v: serde_json::Value = b.json("meta").unwrap();
        v.as_object_mut().unwrap().remove("created");
        v
    };
    assert_eq!(strip(&oa), strip(&ob));
    // A different seed changes the model.
    let c = train_with(&ds, &["max_leaf=30", "seed=4"]);
    assert_ne!(a.meta.version, c.meta.version);
}

/// The members of an ensemble share one computation of the label embeddings; each tree is the
/// one a single-tree model of its seed gets from its own (member t of seed s has seed s + t).
#[test]
fn an_ensemble_member_is_the_single_tree_of_its_seed() {
    let train = load("Corel5k", "train");
    let ensemble = train_with(&train, &["trees=2", "max_leaf=40", "seed=0"]);
    let single = train_with(&train, &["trees=1", "max_leaf=40", "seed=1"]);
    assert_eq!(ensemble.trees[1], single.trees[0]);
    assert_ne!(ensemble.trees[0], single.trees[0]);
}

#[test]
fn ensemble_and_flat_models_predict() {
    let train = load("Corel5k", "train");
    let test = load("Corel5k", "test");
    // Each with its floor, 1 to 2 points below its P@1 on the test split (0.362 and 0.338).
    for (overrides, floor) in [
        (&["trees=2", "max_leaf=40"][..], 0.35),
        (&["model=flat"][..], 0.32),
    ] {
        let trained = train_with(&train, overrides);
        let model =
            Model::from_bundle(Bundle::from_bytes(&trained.to_bytes().unwrap()).unwrap()).unwrap();
        let p1 = p_at_1(&model, &test);
        assert!(p1 >= floor, "{overrides:?}: P@1 = {p1}");
    }
}

#[test]
fn a_stored_label_id_out_of_range_is_refused_at_open() {
    let ds = load("Corel5k", "train");
    let mut trained = train_with(&ds, &["max_leaf=50"]);
    let last = trained.trees[0].out_ids.len() - 1;
    trained.trees[0].out_ids[last] = 10_000;
    let err = Model::from_bundle(Bundle::from_bytes(&trained.to_bytes().unwrap()).unwrap())
        .unwrap_err()
        .to_string();
    assert!(err.contains("10000"), "{err}");
}

#[test]
fn label_and_feature_names_round_trip_and_wrong_counts_are_refused() {
    let ds = load("Corel5k", "train");
    let cfg = TrainConfig::load(None, &["model=flat".to_string()]).unwrap();
    let names = |prefix: &str, n: usize| -> Vec<String> {
        (0..n).map(|i| format!("{prefix}{i}")).collect()
    };
    let inputs = TrainInputs {
        label_names: Some(names("label", ds.n_labels())),
        feature_names: Some(names("word", ds.n_features())),
        ..TrainInputs::default()
    };
    let trained = train::train(&ds, &cfg, inputs, &Quiet).unwrap();
    let model =
        Model::from_bundle(Bundle::from_bytes(&trained.to_bytes().unwrap()).unwrap()).unwrap();
    assert_eq!(model.label_names().unwrap().get(7), Some("label7"));
    assert_eq!(model.feature_names().unwrap().len(), ds.n_features());
    assert_eq!(model.feature_names().unwrap().get(498), Some("word498"));
    assert!(model.meta().has_feature_names);

    let short = TrainInputs {
        feature_names: Some(names("word", 3)),
        ..TrainInputs::default()
    };
    let err = train::train(&ds, &cfg, short, &Quiet)
        .unwrap_err()
        .to_string();
    assert!(err.contains("3 feature names for 499 features"), "{err}");

    // A bundle whose name section disagrees with its metadata is refused at open.
    let mut tampered = trained;
    tampered.feature_names = Some(names("word", 5));
    let err = Model::from_bundle(Bundle::from_bytes(&tampered.to_bytes().unwrap()).unwrap())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("feature_names holds 5 names for 499 items"),
        "{err}"
    );
}

#[test]
fn bad_queries_are_errors_not_panics() {
    let ds = load("Corel5k", "train");
    let trained = train_with(&ds, &["max_leaf=50"]);
    let model =
        Model::from_bundle(Bundle::from_bytes(&trained.to_bytes().unwrap()).unwrap()).unwrap();
    let opts = PredictOptions::default();
    assert!(model.predict(&[499], &[1.0], &opts).is_err());
    assert!(model.predict(&[3], &[f32::NAN], &opts).is_err());
    assert!(model.predict(&[3], &[f32::INFINITY], &opts).is_err());
    assert!(model.predict(&[3, 4], &[1.0], &opts).is_err());
    // An empty query is valid: it gets the labels the biases alone favour.
    assert_eq!(model.predict(&[], &[], &opts).unwrap().labels.len(), 5);
}

/// Writes `ds` to `path` as plain XC text, with or without the header line.
fn write_plain(ds: &Dataset, path: &Path, header: bool) {
    let mut buf = Vec::new();
    data::write_xc(ds, &mut buf).unwrap();
    let text = String::from_utf8(buf).unwrap();
    let body = if header {
        text.as_str()
    } else {
        text.split_once('\n').unwrap().1
    };
    std::fs::write(path, body).unwrap();
}

#[test]
fn cli_train_then_eval_on_plain_headerless_and_gzip_files() {
    let dir = tempfile::tempdir().unwrap();
    let train = data::read_xc_file(&vendored("Corel5k", "train")).unwrap();
    let test = data::read_xc_file(&vendored("Corel5k", "test")).unwrap();
    let gz_train = vendored("Corel5k", "train");
    let gz_test = vendored("Corel5k", "test");
    for (name, header) in [("plain", true), ("headerless", false)] {
        let tr = dir.path().join(format!("{name}-train.txt"));
        let te = dir.path().join(format!("{name}-test.txt"));
        write_plain(&train, &tr, header);
        write_plain(&test, &te, header);
        run_train_eval(dir.path(), name, &tr, &te);
    }
    run_train_eval(dir.path(), "gzip", &gz_train, &gz_test);
}

fn run_train_eval(dir: &Path, name: &str, train: &Path, test: &Path) {
    let model = dir.join(format!("{name}.xmcb"));
    let out = xmc(&[
        "train",
        "--quiet",
        "--train",
        train.to_str().unwrap(),
        "--test",
        test.to_str().unwrap(),
        "--out",
        model.to_str().unwrap(),
        "--set",
        "max_leaf=40",
    ]);
    assert!(
        out.status.success(),
        "{name}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = xmc(&[
        "eval",
        "--model",
        model.to_str().unwrap(),
        "--data",
        test.to_str().unwrap(),
        "--json",
    ]);
    assert!(
        out.status.success(),
        "{name}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    for key in [
        "n",
        "p@1",
        "p@3",
        "p@5",
        "ndcg@5",
        "psp@5",
        "coverage@5",
        "expected_depth@1",
        "expected_depth@5",
        "nodes_evaluated_mean",
        "latency_us_mean",
        "latency_us_p50",
        "latency_us_p99",
    ] {
        assert!(report.get(key).is_some(), "{name}: no `{key}` in {report}");
    }
    assert_eq!(report["n"], 500);
    // Each copy of the data gives the same model, which scores 0.33.
    assert!(report["p@1"].as_f64().unwrap() >= 0.315, "{name}: {report}");
    // The held-out metrics were recorded at training time.
    let model = Model::open(&model, &OpenOptions::default()).unwrap();
    let heldout = model.meta().heldout.as_ref().unwrap();
    assert_eq!(heldout["p@1"], report["p@1"], "{name}");
}

#[test]
fn a_structural_open_costs_no_entry_checks_and_corrupt_entries_cannot_crash_it() {
    let ds = load("Corel5k", "train");
    let trained = train_with(&ds, &["max_leaf=50"]);
    let d = ds.n_features() as u32;
    let queries: Vec<(Vec<u32>, Vec<f32>)> = (0..20)
        .map(|i| ds.feature_row(i))
        .map(|(i, v)| (i.to_vec(), v.to_vec()))
        .chain([((0..d).collect(), vec![1.0; d as usize])])
        .collect();
    // Corruptions a structural open does not look at: output indexes and entry offsets out of
    // range, hash tables with no free slot (a probe for a missing feature must still end), rank
    // blocks whose counts point past their node's features or at the wrong ones, non-finite
    // weights, a name section that does not parse, and non-finite row weights.
    // Corel5k's dense leaves get rows by the size rule: the entry corruptions first put every
    // node on entries.
    fn on_entries(t: &mut Trained) -> &mut ChunksBuilder {
        let tree = &mut t.trees[0];
        rechunk(tree, IndexChoice::Smaller, RowChoice::Entries);
        assert!(!tree.chunks.entry_out.is_empty());
        &mut tree.chunks
    }
    let corruptions: [fn(&mut Trained); 9] = [
        |t| {
            on_entries(t)
                .entry_out
                .iter_mut()
                .for_each(|o| *o = 1 << 30)
        },
        // Out of range but still written as `u8`s (max_leaf 50 outputs at most).
        |t| on_entries(t).entry_out.iter_mut().for_each(|o| *o = 255),
        |t| {
            let s = &mut on_entries(t).entry_start;
            let n = s.len();
            s[1..n - 1].iter_mut().for_each(|x| *x = u32::MAX);
        },
        |t| {
            // Corel5k's few features put every node on a rank index: rebuild on hash tables.
            let tree = &mut t.trees[0];
            rechunk(tree, IndexChoice::Hash, RowChoice::Smaller);
            let h = &mut tree.chunks.hash;
            assert!(!h.is_empty());
            h.chunks_exact_mut(2).for_each(|s| s[0] = u32::MAX - 1);
        },
        |t| {
            let r = &mut t.trees[0].chunks.rank;
            assert!(!r.is_empty());
            r.chunks_exact_mut(4)
                .for_each(|b| b.copy_from_slice(&[u32::MAX - 40, !0, !0, !0]));
        },
        |t| {
            let r = &mut t.trees[0].chunks.rank;
            r.chunks_exact_mut(4)
                .for_each(|b| b.copy_from_slice(&[0, !0, !0, !0]));
        },
        |t| {
            on_entries(t)
                .entry_weight
                .iter_mut()
                .for_each(|w| *w = f32::NAN)
        },
        |t| t.label_names = Some(vec!["only one".into()]),
        |t| {
            let r = &mut t.trees[0].chunks.row_weight;
            assert!(!r.is_empty());
            r.iter_mut().for_each(|w| *w = f32::NAN)
        },
    ];

    for (c, corrupt) in corruptions.iter().enumerate() {
        let mut t = train_with(&ds, &["max_leaf=50"]);
        if c == 7 {
            t.meta.has_label_names = true;
        }
        corrupt(&mut t);
        let bytes = t.to_bytes().unwrap();
        assert!(
            Model::from_bundle(Bundle::from_bytes(&bytes).unwrap()).is_err(),
            "corruption {c} passed the full validation"
        );
        let model = Model::from_bundle_structure(Bundle::from_bytes(&bytes).unwrap()).unwrap();
        assert!(model.verify().is_err(), "corruption {c} passed verify()");
        for (idx, val) in &queries {
            for early_stop in [true, false] {
                let opts = PredictOptions {
                    k: 10,
                    early_stop,
                    ..PredictOptions::default()
                };
                let p = model.predict(idx, val, &opts).unwrap();
                assert!(p.labels.len() <= 10);
            }
        }
        // The name section holds one name for 374 labels: unreadable, so served as absent.
        if c == 7 {
            assert!(model.label_names().is_none(), "corruption 7 gave names");
        }
    }
    // An intact model opens the same either way and answers identically.
    let bytes = trained.to_bytes().unwrap();
    let full = Model::from_bundle(Bundle::from_bytes(&bytes).unwrap()).unwrap();
    let quick = Model::from_bundle_structure(Bundle::from_bytes(&bytes).unwrap()).unwrap();
    quick.verify().unwrap();
    for (idx, val) in &queries {
        let o = PredictOptions::default();
        assert_eq!(
            full.predict(idx, val, &o).unwrap(),
            quick.predict(idx, val, &o).unwrap()
        );
    }
}

/// A label-name section that is not JSON at all (its checksum made right): the full open refuses
/// it, while a structural open serves the model without names, and `verify()` reports them.
#[test]
fn an_unparsable_name_section_is_refused_in_full_and_absent_after_a_structural_open() {
    let tiny = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/golden/tiny.txt");
    let mut ds = data::read_xc_file(&tiny).unwrap();
    data::l2_normalize_rows(&mut ds.features);
    let names: Vec<String> = (0..ds.n_labels()).map(|l| format!("label {l}")).collect();
    let cfg = TrainConfig::load(None, &["max_leaf=2".into()]).unwrap();
    let inputs = TrainInputs {
        label_names: Some(names.clone()),
        ..TrainInputs::default()
    };
    let good = train::train(&ds, &cfg, inputs, &Quiet)
        .unwrap()
        .to_bytes()
        .unwrap();
    let bundle = Bundle::from_bytes(&good).unwrap();
    let (entry, info) = (bundle.sections().iter().enumerate())
        .find(|(_, s)| s.name == "label_names")
        .unwrap();
    let at = info.offset as usize..(info.offset + info.byte_len) as usize;
    let mut bad = good.clone();
    bad[at.clone()].fill(b'[');
    let crc = crc32fast::hash(&bad[at]);
    bad[entry_at(entry) + 36..entry_at(entry) + 40].copy_from_slice(&crc.to_le_bytes());
    reseal(&mut bad);

    let open = |b: &[u8], full: bool| {
        let bundle = Bundle::from_bytes(b).unwrap();
        bundle.verify_checksums().unwrap();
        if full {
            Model::from_bundle(bundle)
        } else {
            Model::from_bundle_structure(bundle)
        }
    };
    let err = open(&bad, true).unwrap_err();
    assert!(err.to_string().contains("label_names"), "{err}");
    let (intact, model) = (open(&good, false).unwrap(), open(&bad, false).unwrap());
    assert_eq!(intact.label_names().unwrap().len(), names.len());
    assert!(model.label_names().is_none());
    assert!(model.verify().is_err());
    // It answers as the intact model does.
    let (idx, val) = ds.feature_row(0);
    let o = PredictOptions::default();
    assert_eq!(
        model.predict(idx, val, &o).unwrap(),
        intact.predict(idx, val, &o).unwrap()
    );
}

/// A binary tree stores its internal nodes' weights as rows; the same weights as entries give
/// the same answers, labels and scores alike, with early stopping and without.
#[test]
fn rows_and_entries_answer_alike_on_real_data() {
    let train = load("Corel5k", "train");
    let test = load("Corel5k", "test");
    let trained = train_with(&train, &["max_leaf=20"]);
    let tree = &trained.trees[0];
    let internal = (0..tree.n_nodes()).filter(|&i| !tree.is_leaf(i));
    assert!(internal.clone().count() > 10);
    for node in internal {
        let has_features = tree.chunks.feat_start[node] < tree.chunks.feat_start[node + 1];
        assert_eq!(tree.chunks.has_rows(node), has_features, "node {node}");
    }
    let mut as_entries = train_with(&train, &["max_leaf=20"]);
    let tree = &mut as_entries.trees[0];
    rechunk(tree, IndexChoice::Smaller, RowChoice::Entries);
    assert!(tree.chunks.row_weight.is_empty());
    assert_eq!(tree.chunks.n_weights(), trained.trees[0].chunks.n_weights());
    let open =
        |t: &Trained| Model::from_bundle(Bundle::from_bytes(&t.to_bytes().unwrap()).unwrap());
    let (rows, entries) = (open(&trained).unwrap(), open(&as_entries).unwrap());
    // The bundle stores the entries' outputs at the narrowest width, `u8` here (max_leaf 20). The
    // row rule weighs rows against entries of eight bytes, so with one-byte outputs the rows can
    // take more room than the entries would; they are kept for the memory reads they save
    // (docs/decisions/0003-weight-rows-four-weights.md).
    let width = |m: &Model| m.bundle().section("tree.0.chunk.entry_out").unwrap().dtype;
    assert_eq!(width(&entries), Dtype::U8);
    assert!(entries.trees()[0].chunks.entry_out.outs().len() > 1000);
    for i in 0..test.n_points() {
        let (idx, val) = test.feature_row(i);
        for early_stop in [true, false] {
            let opts = PredictOptions {
                k: 5,
                early_stop,
                ..PredictOptions::default()
            };
            let (a, b) = (
                rows.predict(idx, val, &opts).unwrap(),
                entries.predict(idx, val, &opts).unwrap(),
            );
            assert_eq!(a.labels, b.labels, "point {i}");
            let bits = |p: &xmc::model::Prediction| {
                p.scores.iter().map(|s| s.to_bits()).collect::<Vec<_>>()
            };
            assert_eq!(bits(&a), bits(&b), "point {i}");
            assert_eq!(a.nodes_evaluated, b.nodes_evaluated);
        }
    }
}

/// `weights = "bf16"` packs each entry's output and bfloat16 weight into one `u32` section in
/// place of `entry_out` and `entry_weight`, deterministically; the model validates in full and
/// predicts as the `f32` model does but for rounding; the `f32` bundle is unchanged by the key.
#[test]
fn bf16_weights_pack_the_entries_and_predict_as_f32_does() {
    let train = load("Corel5k", "train");
    let test = load("Corel5k", "test");
    let f32s = train_with(&train, &["max_leaf=20", "branching=4"]);
    let packed = train_with(&train, &["max_leaf=20", "branching=4", "weights=bf16"]);
    let again = train_with(&train, &["max_leaf=20", "branching=4", "weights=bf16"]);
    let explicit = train_with(&train, &["max_leaf=20", "branching=4", "weights=f32"]);
    assert_eq!(explicit.meta.version, f32s.meta.version);
    assert_eq!(again.meta.version, packed.meta.version);
    assert_ne!(packed.meta.version, f32s.meta.version);
    let bytes = packed.to_bytes().unwrap();
    let bundle = Bundle::from_bytes(&bytes).unwrap();
    let section = bundle.section("tree.0.chunk.entry").unwrap();
    assert_eq!(section.dtype, Dtype::U32);
    assert!(bundle.section("tree.0.chunk.entry_out").is_none());
    assert!(bundle.section("tree.0.chunk.entry_weight").is_none());
    let meta: serde_json::Value = bundle.json("meta").unwrap();
    assert_eq!(meta["config"]["weights"], "bf16");
    let f32_bytes = f32s.to_bytes().unwrap();
    let f32_bundle = Bundle::from_bytes(&f32_bytes).unwrap();
    let f32_meta: serde_json::Value = f32_bundle.json("meta").unwrap();
    assert!(f32_meta["config"].get("weights").is_none());
    let f32_entries = f32_bundle.section("tree.0.chunk.entry_weight").unwrap();
    // One word per entry, where the split layout takes one output byte and a four-byte weight.
    assert_eq!(section.byte_len, f32_entries.byte_len);
    // Rows are bfloat16 pairs, two weights a word, in `row_packed` instead of `row_weight`:
    // the f32 tree's rows, each weight rounded, so they take half the bytes (plus a padding
    // half per feature of a node with an odd number of outputs).
    assert!(bundle.section("tree.0.chunk.row_weight").is_none());
    let packed_rows = bundle.section("tree.0.chunk.row_packed").unwrap();
    let f32_rows = f32_bundle.section("tree.0.chunk.row_weight").unwrap();
    assert_eq!(packed_rows.dtype, Dtype::U32);
    assert!(packed_rows.byte_len > 0);
    assert!(2 * packed_rows.byte_len >= f32_rows.byte_len);
    assert!(2 * packed_rows.byte_len < f32_rows.byte_len * 11 / 10);
    let (starts, words) = f32s.trees[0].chunks.packed_rows();
    assert_eq!(
        bundle.u32s("tree.0.chunk.row_start").unwrap().to_vec(),
        starts
    );
    assert_eq!(
        bundle.u32s("tree.0.chunk.row_packed").unwrap().to_vec(),
        words
    );

    let (full, structural) = (
        Model::from_bundle(Bundle::from_bytes(&bytes).unwrap()).unwrap(),
        Model::from_bundle_structure(bundle).unwrap(),
    );
    let reference = Model::from_bundle(f32_bundle).unwrap();
    let opts = PredictOptions {
        k: 5,
        ..PredictOptions::default()
    };
    let mut same_top = 0;
    for i in 0..test.n_points() {
        let (idx, val) = test.feature_row(i);
        let (a, b, r) = (
            full.predict(idx, val, &opts).unwrap(),
            structural.predict(idx, val, &opts).unwrap(),
            reference.predict(idx, val, &opts).unwrap(),
        );
        assert_eq!(a.labels, b.labels, "point {i}");
        same_top += usize::from(a.labels.first() == r.labels.first());
        // Rounding moves a score, never much.
        for (label, score) in a.labels.iter().zip(&a.scores) {
            if let Some(j) = r.labels.iter().position(|l| l == label) {
                assert!(
                    (score - r.scores[j]).abs() < 0.02,
                    "point {i}: {score} vs {}",
                    r.scores[j]
                );
            }
        }
    }
    let share = same_top as f64 / test.n_points() as f64;
    assert!(share > 0.97, "top label agrees on {share}");
    let (p_packed, p_f32) = (p_at_1(&full, &test), p_at_1(&reference, &test));
    assert!((p_packed - p_f32).abs() < 0.01, "P@1 {p_packed} vs {p_f32}");
}

/// `models/default.xmcb` is what `config/default-text.toml`'s documented command trains: the same
/// content version (a hash of every section but the creation time). A change to the trainer or
/// the bundle layout must come with the model retrained.
#[test]
fn the_shipped_default_model_is_what_its_command_trains() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = tempfile::tempdir().unwrap();
    let out_path = dir.path().join("default.xmcb");
    let out = xmc(&[
        "train",
        "--quiet",
        "--config",
        root.join("config/default-text.toml").to_str().unwrap(),
        "--train",
        root.join("tests/data/debian-tags-text/train.jsonl.gz")
            .to_str()
            .unwrap(),
        "--test",
        root.join("tests/data/debian-tags-text/test.jsonl.gz")
            .to_str()
            .unwrap(),
        "--out",
        out_path.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let trained = Model::open(&out_path, &OpenOptions::default()).unwrap();
    let shipped = Model::open(&root.join("models/default.xmcb"), &OpenOptions::default()).unwrap();
    assert_eq!(
        trained.meta().version,
        shipped.meta().version,
        "retrain models/default.xmcb with the command in config/default-text.toml"
    );
    // The whole file is the same but for the creation time in the metadata.
    let strip = |m: &Model| {
        let mut meta = m.meta().clone();
        meta.created = Default::default();
        meta
    };
    assert_eq!(strip(&trained), strip(&shipped));
    assert!(shipped.text().is_some() && shipped.label_names().is_some());
}
