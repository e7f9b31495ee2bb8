//! The tf-idf weights against numbers computed independently: scikit-learn's `TfidfVectorizer`
//! on a small vendored corpus (`tests/data/tfidf/`, whose README says how `expected.json` was
//! made). Both the idf weights and the final vectors, of the training texts and of queries, for
//! xmc's default settings and for the other branch of every weight (raw counts, unsmoothed idf,
//! no normalization), and by both fits: in memory and streamed from a file as `xmc train` does.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde_json::Value;
use xmc::text::corpus::fit_and_vectorize;
use xmc::text::{Fitted, TextConfig, TextScratch};

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/tfidf")
        .join(name)
}

fn lines(name: &str) -> Vec<String> {
    std::fs::read_to_string(data(name))
        .unwrap()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(str::to_string)
        .collect()
}

/// The xmc settings of one case of `expected.json`, from the scikit-learn arguments it records.
fn settings(case: &Value) -> TextConfig {
    let s = &case["settings"];
    TextConfig {
        ngram_min: 1,
        ngram_max: s["ngram_max"].as_u64().unwrap() as usize,
        min_chars: 1,
        min_df: s["min_df"].as_u64().unwrap() as usize,
        max_df: 1.0,
        max_features: 0,
        lowercase: true,
        sublinear_tf: s["sublinear_tf"].as_bool().unwrap(),
        smooth_idf: s["smooth_idf"].as_bool().unwrap(),
        l2: s["norm"] == "l2",
    }
}

/// A term → weight map read from `expected.json`.
fn weights(v: &Value) -> BTreeMap<String, f64> {
    v.as_object()
        .unwrap()
        .iter()
        .map(|(t, w)| (t.clone(), w.as_f64().unwrap()))
        .collect()
}

/// xmc's `f32` weights against scikit-learn's `f64` ones: the same terms, each value within a
/// few `f32` roundings.
fn assert_close(what: &str, got: &BTreeMap<String, f64>, want: &BTreeMap<String, f64>) {
    assert_eq!(
        got.keys().collect::<Vec<_>>(),
        want.keys().collect::<Vec<_>>(),
        "{what}: the terms differ"
    );
    for (term, w) in want {
        let g = got[term];
        assert!(
            (g - w).abs() <= 1e-6 * w.abs().max(1.0),
            "{what}, `{term}`: xmc {g}, scikit-learn {w}"
        );
    }
}

/// The fitted idf weights by term.
fn idf_by_term(fitted: &Fitted) -> BTreeMap<String, f64> {
    let view = fitted.view().unwrap();
    view.terms()
        .into_iter()
        .zip(&fitted.idf)
        .map(|(t, &w)| (t, f64::from(w)))
        .collect()
}

/// A sparse row as a term → value map, through the vocabulary's terms by id.
fn by_term(terms: &[String], idx: &[u32], val: &[f32]) -> BTreeMap<String, f64> {
    idx.iter()
        .zip(val)
        .map(|(&i, &v)| (terms[i as usize].clone(), f64::from(v)))
        .collect()
}

#[test]
fn tf_idf_matches_scikit_learn_on_the_vendored_corpus() {
    let expected: Value =
        serde_json::from_str(&std::fs::read_to_string(data("expected.json")).unwrap()).unwrap();
    let corpus = lines("corpus.txt");
    let queries = lines("queries.txt");
    let texts: Vec<&String> = corpus.iter().chain(&queries).collect();
    let cases = expected["cases"].as_object().unwrap();
    assert_eq!(cases.len(), 2);
    for (name, case) in cases {
        let cfg = settings(case);
        let fitted = Fitted::fit_texts(&corpus, &cfg).unwrap();
        assert_eq!(fitted.meta.documents, corpus.len());
        assert_close(
            &format!("{name}: idf"),
            &idf_by_term(&fitted),
            &weights(&case["idf"]),
        );
        let view = fitted.view().unwrap();
        let terms = view.terms();
        let want = case["vectors"].as_array().unwrap();
        assert_eq!(want.len(), texts.len());
        let (mut scratch, mut idx, mut val) = (TextScratch::default(), Vec::new(), Vec::new());
        for (i, (text, want)) in texts.iter().zip(want).enumerate() {
            view.vectorize(text, &mut scratch, &mut idx, &mut val);
            assert_close(
                &format!("{name}: text {i}"),
                &by_term(&terms, &idx, &val),
                &weights(want),
            );
        }
    }
}

/// The trainer's own path: the vocabulary fitted while the file streams, and each training row
/// weighed from the feature ids found during that fit.
#[test]
fn the_streamed_fit_and_its_training_rows_match_scikit_learn() {
    let expected: Value =
        serde_json::from_str(&std::fs::read_to_string(data("expected.json")).unwrap()).unwrap();
    let corpus = lines("corpus.txt");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("corpus.jsonl");
    let mut f = std::fs::File::create(&path).unwrap();
    for text in &corpus {
        let line = serde_json::json!({"text": text, "labels": ["any"]});
        writeln!(f, "{line}").unwrap();
    }
    drop(f);
    let case = &expected["cases"]["defaults"];
    let t = fit_and_vectorize(&path, &settings(case)).unwrap();
    assert_close(
        "streamed fit: idf",
        &idf_by_term(&t.fitted),
        &weights(&case["idf"]),
    );
    let terms = t.fitted.view().unwrap().terms();
    let ds = &t.corpus.dataset;
    assert_eq!(ds.n_points(), corpus.len());
    for i in 0..ds.n_points() {
        let (idx, val) = ds.feature_row(i);
        assert_close(
            &format!("streamed fit: training row {i}"),
            &by_term(&terms, idx, val),
            &weights(&case["vectors"][i]),
        );
    }
}
