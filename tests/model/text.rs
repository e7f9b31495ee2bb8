//! Text in: the vectorizer fitted on JSONL, stored in the bundle, and applied to queries by the
//! same code that made the training rows.

#![allow(clippy::unwrap_used)]

use proptest::prelude::*;
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use xmc::bundle::{Bundle, OpenOptions};
use xmc::config::TrainConfig;
use xmc::data::{self, Dataset};
use xmc::model::{Model, PredictOptions};
use xmc::text::corpus::{TextTraining, fit_and_vectorize, fit_file};
use xmc::text::jsonl::{DataFormat, detect_format};
use xmc::text::{Fitted, TextConfig, TextScratch, TextStats};
use xmc::train::{self, Quiet, TrainInputs, Trained};

fn tags(split: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/debian-tags-text")
        .join(format!("{split}.jsonl.gz"))
}

/// Every line of a JSONL file as JSON, read independently of xmc's reader.
fn jsonl(path: &Path) -> Vec<serde_json::Value> {
    let file = std::fs::File::open(path).unwrap();
    let reader = std::io::BufReader::new(flate2::read::GzDecoder::new(file));
    reader
        .lines()
        .map(|l| serde_json::from_str(&l.unwrap()).unwrap())
        .collect()
}

/// The `text` of every line of a JSONL file.
fn texts(path: &Path) -> Vec<String> {
    jsonl(path)
        .iter()
        .map(|v| v["text"].as_str().unwrap().to_string())
        .collect()
}

/// Fits on the vendored training file and trains a model as `xmc train` does.
fn train_tags(overrides: &[&str]) -> (TextTraining, Trained) {
    let overrides: Vec<String> = overrides.iter().map(|s| s.to_string()).collect();
    let cfg = TrainConfig::load(None, &overrides).unwrap();
    let t = fit_and_vectorize(&tags("train"), &cfg.text).unwrap();
    let mut ds: Dataset = t.corpus.dataset.clone();
    data::l2_normalize_rows(&mut ds.features);
    let inputs = TrainInputs {
        label_names: Some(t.labels.names().to_vec()),
        text: Some(t.fitted.clone()),
        ..TrainInputs::default()
    };
    let trained = train::train(&ds, &cfg, inputs, &Quiet).unwrap();
    (t, trained)
}

fn open(trained: &Trained) -> Model {
    Model::from_bundle(Bundle::from_bytes(&trained.to_bytes().unwrap()).unwrap()).unwrap()
}

#[test]
fn a_training_document_sent_as_a_query_is_the_row_the_trainer_learned_from() {
    let (t, trained) = train_tags(&["model=flat"]);
    let model = open(&trained);
    let view = model.text().expect("a text model has a vectorizer");
    let docs = texts(&tags("train"));
    assert_eq!(docs.len(), t.corpus.dataset.n_points());
    let (mut scratch, mut idx, mut val) = (TextScratch::default(), Vec::new(), Vec::new());
    for (i, doc) in docs.iter().enumerate() {
        let stats = view.vectorize(doc, &mut scratch, &mut idx, &mut val);
        let (ri, rv) = t.corpus.dataset.feature_row(i);
        assert_eq!(idx, ri, "document {i}");
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&val), bits(rv), "document {i}");
        assert!(stats.known_terms <= stats.terms);
        assert_eq!(stats.known_terms > 0, !idx.is_empty(), "document {i}");
    }
    // And the model answers the text with the labels it answers the row with.
    let (ri, rv) = t.corpus.dataset.feature_row(3);
    view.vectorize(&docs[3], &mut scratch, &mut idx, &mut val);
    let opts = PredictOptions::default();
    assert_eq!(
        model.predict(&idx, &val, &opts).unwrap().labels,
        model.predict(ri, rv, &opts).unwrap().labels
    );
}

#[test]
fn the_text_model_round_trips_through_a_bundle_file() {
    let (t, trained) = train_tags(&["trees=2", "text.max_features=3000"]);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("text.xmcb");
    trained.write(&path).unwrap();
    for opts in [
        OpenOptions::default(),
        OpenOptions {
            verify_checksums: true,
            ..OpenOptions::default()
        },
    ] {
        let model = Model::open(&path, &opts).unwrap();
        let view = model.text().unwrap();
        assert_eq!(view.meta(), &t.fitted.meta);
        assert_eq!(view.n_features(), 3000);
        assert_eq!(model.meta().n_features, 3000);
        assert_eq!(model.meta().text.as_ref(), Some(&t.fitted.meta));
        let names = model.label_names().unwrap();
        assert_eq!(names.len(), t.labels.len());
        assert_eq!(names.get(0), Some(t.labels.names()[0].as_str()));
        // Every term maps back to its id.
        let terms = view.terms();
        assert_eq!(terms.len(), 3000);
        for (id, term) in terms.iter().enumerate().step_by(97) {
            assert_eq!(view.term_id(term), Some(id as u32));
        }
        // A query of known words gets labels with names; one of unknown words is empty.
        let (mut s, mut idx, mut val) = (TextScratch::default(), Vec::new(), Vec::new());
        let stats = view.vectorize(
            "A GTK+ text editor for the GNOME desktop",
            &mut s,
            &mut idx,
            &mut val,
        );
        assert!(stats.known_terms > 0 && !idx.is_empty());
        let p = model
            .predict(&idx, &val, &PredictOptions::default())
            .unwrap();
        assert!(names.get(p.labels[0].0 as usize).is_some());
        let stats = view.vectorize("zzqx qqzv", &mut s, &mut idx, &mut val);
        assert_eq!(
            stats,
            TextStats {
                terms: 3,
                known_terms: 0
            }
        );
        assert!(idx.is_empty() && val.is_empty());
    }
}

#[test]
fn the_fit_does_not_depend_on_the_thread_count() {
    let cfg = TextConfig::default();
    let fit = |threads: usize| {
        rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap()
            .install(|| fit_file(&tags("train"), &cfg).unwrap())
    };
    let (a, la) = fit(1);
    let (b, lb) = fit(3);
    assert_eq!(a.vocab, b.vocab);
    assert_eq!(a.idf, b.idf);
    assert_eq!(a.meta, b.meta);
    assert_eq!(la.names(), lb.names());
    // Labels by descending training frequency.
    let counts = |name: &str| {
        texts_labels(&tags("train"))
            .iter()
            .filter(|ls| ls.iter().any(|l| l == name))
            .count()
    };
    assert!(counts(&la.names()[0]) >= counts(&la.names()[1]));
    assert!(counts(&la.names()[1]) >= counts(&la.names()[la.len() - 1]));
}

fn texts_labels(path: &Path) -> Vec<Vec<String>> {
    jsonl(path)
        .iter()
        .map(|v| {
            v["labels"]
                .as_array()
                .unwrap()
                .iter()
                .map(|s| s.as_str().unwrap().to_string())
                .collect()
        })
        .collect()
}

#[test]
fn tokens_are_nfkc_lower_cased_uax29_words_and_their_bigrams() {
    let docs = ["Ｆｕｌｌ-width ÉCOLE café", "the café can't stop", "x"];
    let cfg = TextConfig {
        min_df: 1,
        ..TextConfig::default()
    };
    let fitted = Fitted::fit_texts(&docs, &cfg).unwrap();
    let view = fitted.view().unwrap();
    let mut terms = view.terms();
    terms.sort();
    for t in [
        "full",
        "width",
        "école",
        "café",
        "full width",
        "can't",
        "can't stop",
        "x",
    ] {
        assert!(terms.iter().any(|s| s == t), "{t:?} not in {terms:?}");
    }
    // Composed and decomposed forms are one term.
    let (mut s, mut i1, mut v1, mut i2, mut v2) = (
        TextScratch::default(),
        Vec::new(),
        Vec::new(),
        Vec::new(),
        Vec::new(),
    );
    view.vectorize("CAFE\u{301}", &mut s, &mut i1, &mut v1);
    view.vectorize("café", &mut s, &mut i2, &mut v2);
    assert_eq!((&i1, &v1), (&i2, &v2));
    assert_eq!(i1.len(), 1);
    assert!((v1[0] - 1.0).abs() < 1e-6, "one term, unit length");
}

#[test]
fn bad_jsonl_lines_are_refused_with_file_line_and_field() {
    let dir = tempfile::tempdir().unwrap();
    let good = br#"{"id": 1, "text": "a good line", "labels": ["x"]}"#;
    let cases: [(&[u8], &str); 5] = [
        (br#"{"id": 3, "labels": ["x"]}"#, "field `text` is missing"),
        (
            br#"{"text": "t", "labels": ["x", 7]}"#,
            "field `labels` item 1 is not a string",
        ),
        (br#"{"text": "t", "labels": ["x"]"#, "invalid JSON"),
        (b"{\"text\": \"caf\xe9\", \"labels\": []}", "invalid UTF-8"),
        (br#"{"text": "t"}"#, "field `labels` is missing"),
    ];
    for (k, (bad, want)) in cases.iter().enumerate() {
        let path = dir.path().join(format!("bad{k}.jsonl"));
        let mut f = std::fs::File::create(&path).unwrap();
        f.write_all(good).unwrap();
        f.write_all(b"\n\n").unwrap();
        f.write_all(bad).unwrap();
        f.write_all(b"\n").unwrap();
        f.write_all(good).unwrap();
        drop(f);
        let err = fit_file(&path, &TextConfig::default())
            .unwrap_err()
            .to_string();
        let at = format!("{} line 3: ", path.display());
        assert!(err.contains(&at), "case {k}: {err}");
        assert!(err.contains(want), "case {k}: {err}");
    }
}

#[test]
fn the_format_is_detected_from_the_content() {
    assert_eq!(detect_format(&tags("test")).unwrap(), DataFormat::Jsonl);
    let xc = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/Bibtex/train.txt.gz");
    assert_eq!(detect_format(&xc).unwrap(), DataFormat::Xc);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("blank-first.jsonl");
    std::fs::write(&path, "\n  \n{\"text\": \"a\", \"labels\": []}\n").unwrap();
    assert_eq!(detect_format(&path).unwrap(), DataFormat::Jsonl);
}

#[test]
fn the_text_table_of_a_config_file_and_set_keys_reach_the_vectorizer() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.toml");
    std::fs::write(
        &path,
        "[train]\ntrees = 2\n[train.text]\nmin_df = 3\nngram_max = 1\n",
    )
    .unwrap();
    let cfg = TrainConfig::load(Some(&path), &["text.sublinear_tf=false".into()]).unwrap();
    assert_eq!(
        (cfg.text.min_df, cfg.text.ngram_max, cfg.text.sublinear_tf),
        (3, 1, false)
    );
    std::fs::write(&path, "[train.text]\nmin_dfs = 3\n").unwrap();
    let err = TrainConfig::load(Some(&path), &[]).unwrap_err().to_string();
    assert!(err.contains("`text.min_dfs`"), "{err}");
    let err = TrainConfig::load(None, &["text.ngram_max=0".into()])
        .unwrap_err()
        .to_string();
    assert!(err.contains("`text.ngram_max`"), "{err}");
}

#[test]
fn damaged_or_forged_text_sections_are_refused() {
    let (_, trained) = train_tags(&["model=flat", "text.max_features=500"]);
    let bytes = trained.to_bytes().unwrap();
    // A flipped byte in either text section is caught by the checksums.
    let bundle = Bundle::from_bytes(&bytes).unwrap();
    for name in [
        xmc::text::VOCAB_SECTION,
        xmc::text::IDF_SECTION,
        xmc::text::index::SLOTS_SECTION,
        xmc::text::index::TERMS_SECTION,
    ] {
        let info = bundle.section(name).unwrap().clone();
        let mut b = bytes.clone();
        b[(info.offset + info.byte_len / 2) as usize] ^= 0x40;
        let err = Bundle::from_bytes(&b)
            .unwrap()
            .verify_checksums()
            .unwrap_err()
            .to_string();
        assert!(err.contains(name), "{name}: {err}");
    }
    // Forged sections with valid bundle checksums: idf weights of the wrong length are refused
    // by the structural open, a vocabulary that is not an fst too.
    let mut short = trained.text.clone().unwrap();
    short.idf.pop();
    let err = forged(&trained, short, false);
    assert!(err.contains("text.idf holds 499 weights for 500"), "{err}");
    let mut garbage = trained.text.clone().unwrap();
    garbage.vocab = vec![7; 40];
    let err = forged(&trained, garbage, false);
    assert!(err.contains("text.vocab"), "{err}");
    // A vocabulary whose bytes were changed behind the fst's own checksum, or that maps a term
    // to an id out of range, is caught by the full check.
    let mut flipped = trained.text.clone().unwrap();
    let mid = flipped.vocab.len() / 2;
    flipped.vocab[mid] ^= 0x01;
    let err = forged(&trained, flipped, true);
    assert!(err.contains("text.vocab"), "{err}");
    let mut builder = fst::MapBuilder::memory();
    builder.insert("a", 0).unwrap();
    builder.insert("b", 900).unwrap();
    let mut out_of_range = trained.text.clone().unwrap();
    out_of_range.vocab = builder.into_inner().unwrap();
    let err = forged(&trained, out_of_range, true);
    assert!(err.contains("text.vocab"), "{err}");
    // The term index: slots of the wrong count are refused by the structural open; a changed
    // term byte, or the index of another vocabulary, by the full check.
    let mut few_slots = trained.text.clone().unwrap();
    few_slots.index.slots.truncate(16);
    let err = forged(&trained, few_slots, false);
    assert!(err.contains("text.index.slots"), "{err}");
    let mut byte = trained.text.clone().unwrap();
    let at = byte.index.terms.len() - 1;
    byte.index.terms[at] ^= 0x01;
    let err = forged(&trained, byte, true);
    assert!(err.contains("text.index"), "{err}");
    let (_, other) = train_tags(&["model=flat", "text.max_features=500", "text.ngram_max=1"]);
    let mut foreign = trained.text.clone().unwrap();
    foreign.index = other.text.unwrap().index;
    let err = forged(&trained, foreign, true);
    assert!(err.contains("text.index"), "{err}");
}

/// A bundle written before the term index (its vectorizer has only the fst) still opens, and
/// every test document is vectorized to the same vector and counts as by the index.
#[test]
fn a_bundle_without_the_term_index_vectorizes_the_same() {
    let (_, trained) = train_tags(&["model=flat"]);
    let with = open(&trained);
    let mut old = trained.text.clone().unwrap();
    old.index = Default::default();
    let without = Model::from_bundle(bundle_with(&trained, old)).unwrap();
    let has = |m: &Model| {
        m.bundle()
            .section(xmc::text::index::SLOTS_SECTION)
            .is_some()
    };
    assert!(has(&with) && !has(&without));
    let (a, b) = (with.text().unwrap(), without.text().unwrap());
    // More terms than the index's hot table holds, so that its cold table is used too.
    assert!(a.n_features() > 4096, "{}", a.n_features());
    let mut scratch = TextScratch::default();
    let mut known = 0;
    for doc in texts(&tags("test")).iter().chain(&texts(&tags("train"))) {
        let (mut ia, mut va, mut ib, mut vb) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        let sa = a.vectorize(doc, &mut scratch, &mut ia, &mut va);
        let sb = b.vectorize(doc, &mut scratch, &mut ib, &mut vb);
        assert_eq!((sa, &ia), (sb, &ib), "{doc:?}");
        assert_eq!(
            va.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
            vb.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
        );
        known += sa.known_terms;
    }
    assert!(known > 0);
}

/// The error of opening `trained` with `text` in place of its vectorizer (in full when `deep`).
fn forged(trained: &Trained, text: Fitted, deep: bool) -> String {
    let bundle = bundle_with(trained, text);
    let result = if deep {
        Model::from_bundle(bundle)
    } else {
        Model::from_bundle_structure(bundle)
    };
    result.unwrap_err().to_string()
}

/// The bundle of `trained` with `text` in place of its vectorizer.
fn bundle_with(trained: &Trained, text: Fitted) -> Bundle {
    let t = Trained {
        trees: trained.trees.clone(),
        bp: None,
        defrag: Vec::new(),
        prototypes: None,
        rerank: None,
        fiat: None,
        label_counts: trained.label_counts.clone(),
        label_names: trained.label_names.clone(),
        feature_names: None,
        text: Some(text),
        meta: trained.meta.clone(),
    };
    Bundle::from_bytes(&t.to_bytes().unwrap()).unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn vectorizing_any_text_is_deterministic_and_stays_in_the_vocabulary(
        text in prop_oneof![any::<String>(), "\\PC{0,200}", "[a-zA-Z0-9 éüßİ\u{301}\u{FF21}-\u{FF3A}.,']{0,120}"],
    ) {
        thread_local! {
            static VIEW: xmc::text::TextView = {
                let docs = texts(&tags("test"));
                Fitted::fit_texts(&docs, &TextConfig::default()).unwrap().view().unwrap()
            };
        }
        VIEW.with(|view| {
            let n = view.n_features();
            let (mut s, mut i1, mut v1, mut i2, mut v2) =
                (TextScratch::default(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
            let a = view.vectorize(&text, &mut s, &mut i1, &mut v1);
            let b = view.vectorize(&text, &mut TextScratch::default(), &mut i2, &mut v2);
            prop_assert_eq!(a, b);
            prop_assert_eq!(&i1, &i2);
            prop_assert_eq!(
                v1.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
                v2.iter().map(|x| x.to_bits()).collect::<Vec<_>>()
            );
            prop_assert!(i1.windows(2).all(|w| w[0] < w[1]), "sorted unique: {:?}", i1);
            prop_assert!(i1.iter().all(|&id| (id as usize) < n));
            prop_assert!(v1.iter().all(|v| v.is_finite() && *v > 0.0));
            prop_assert!(a.known_terms <= a.terms);
            prop_assert_eq!(a.known_terms == 0, i1.is_empty());
            Ok(())
        })?;
    }
}
