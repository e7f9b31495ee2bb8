//! `xmc predict` on a JSON Lines file: label names by default when the model has them, ids on
//! request, and the ids file is what `xmc eval --pred` reads.
#![allow(clippy::unwrap_used)]

use crate::common;

use common::xmc;
use std::path::{Path, PathBuf};
use xmc::bundle::OpenOptions;
use xmc::model::Model;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Runs `xmc predict` with `extra` arguments and gives the written lines.
fn predict(model: &Path, data: &Path, out: &Path, extra: &[&str]) -> Vec<String> {
    let mut args = vec![
        "predict",
        "--model",
        model.to_str().unwrap(),
        "--data",
        data.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ];
    args.extend(extra);
    let o = xmc(&args);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    std::fs::read_to_string(out)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect()
}

/// Splits a `label:score` token at its last `:`.
fn token(t: &str) -> (&str, &str) {
    t.rsplit_once(':').unwrap()
}

#[test]
fn predict_writes_label_names_by_default_and_ids_on_request() {
    // The shipped model is trained from text with debtags names (`role::program`, ...).
    let model_path = root().join("models/default.xmcb");
    let data = root().join("tests/data/debian-tags-text/test.jsonl.gz");
    let model = Model::open(&model_path, &OpenOptions::default()).unwrap();
    let names = model.label_names().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let by_default = predict(&model_path, &data, &dir.path().join("auto.txt"), &[]);
    let by_name = predict(
        &model_path,
        &data,
        &dir.path().join("names.txt"),
        &["--labels", "names"],
    );
    let ids_path = dir.path().join("ids.txt");
    let by_id = predict(
        &model_path,
        &data,
        &ids_path,
        &["--labels", "ids", "--k", "5"],
    );
    assert_eq!(by_default, by_name);
    assert_eq!(by_id.len(), by_name.len());
    let mut tokens = 0;
    for (named, numbered) in by_name.iter().zip(&by_id) {
        let named: Vec<&str> = named.split(' ').collect();
        let numbered: Vec<&str> = numbered.split(' ').collect();
        assert_eq!(named.len(), numbered.len());
        assert_eq!(numbered.len(), 5);
        for (n, i) in named.iter().zip(&numbered) {
            let ((name, s1), (id, s2)) = (token(n), token(i));
            // The same label and the very same score, once by name and once by id.
            assert_eq!(Some(name), names.get(id.parse::<usize>().unwrap()));
            assert_eq!(s1, s2);
            tokens += 1;
        }
    }
    assert_eq!(tokens, 5 * by_id.len());
    assert!(by_name.iter().any(|l| l.contains("::")), "{:?}", by_name[0]);

    // The ids file is a prediction file `xmc eval --pred` scores.
    let pred = xmc::eval::predfile::read_predictions(&ids_path, Some(names.len())).unwrap();
    assert_eq!(pred.len(), by_id.len());
}

#[test]
fn label_names_from_a_model_without_them_is_an_error() {
    let model: PathBuf = root().join("tests/data/golden/model-v4.xmcb");
    let m = Model::open(&model, &OpenOptions::default()).unwrap();
    assert!(m.label_names().is_none());
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("p.txt");
    let o = xmc(&[
        "predict",
        "--model",
        model.to_str().unwrap(),
        "--data",
        "does-not-matter.txt",
        "--out",
        out.to_str().unwrap(),
        "--labels",
        "names",
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains("has no label names") && err.contains("--labels ids"),
        "{err}"
    );
    assert!(!out.exists());
}

/// `xmc inspect --json` says which stages a model has: the shipped text model has a vectorizer
/// with its term index and no reranker.
#[test]
fn inspect_reports_the_models_stages() {
    let model = root().join("models/default.xmcb");
    let out = xmc(&["inspect", "--json", model.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let stages = &r["stages"];
    assert_eq!(stages["refrag"], serde_json::Value::Null, "{stages}");
    assert_eq!(stages["rerank_ova"], false, "{stages}");
    assert_eq!(stages["bp"], false, "{stages}");
    assert_eq!(stages["text"]["term_index"], true, "{stages}");
    assert_eq!(stages["text"]["terms"], 25817, "{stages}");
    // A plain model with REFRAG: its prototypes are over the input features.
    let dir = tempfile::tempdir().unwrap();
    let refrag = dir.path().join("refrag.xmcb");
    let train = common::vendored("Corel5k", "train");
    let out = xmc(&[
        "train",
        "--quiet",
        "--train",
        train.to_str().unwrap(),
        "--set",
        "refrag=on",
        "--out",
        refrag.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = xmc(&["inspect", "--json", refrag.to_str().unwrap()]);
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(r["stages"]["refrag"], "input features", "{}", r["stages"]);
    assert_eq!(r["stages"]["text"], serde_json::Value::Null);
}
