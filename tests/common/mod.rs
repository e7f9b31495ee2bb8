//! Helpers shared by the end-to-end tests: running the `xmc` binary, the vendored data sets,
//! training with overrides, and the in-process server's settings and error checks.
// Not every test binary uses every helper.
#![allow(dead_code, clippy::unwrap_used)]

pub mod layout;

use axum::http::StatusCode;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::sync::LazyLock;
use xmc::config::TrainConfig;
use xmc::data::{self, Dataset};
use xmc::model::{Model, PredictOptions};
use xmc::serve::ServeConfig;
use xmc::train::{self, Quiet, TrainInputs, Trained};
use xmc::tree::chunk::{IndexChoice, RowChoice};
use xmc::tree::view::TreeArrays;

/// Runs the `xmc` binary with `args` and gives its output.
pub fn xmc(args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_xmc"))
        .args(args)
        .output()
        .unwrap()
}

/// The path of a vendored split, e.g. `vendored("Corel5k", "train")`.
pub fn vendored(set: &str, split: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(set)
        .join(format!("{split}.txt.gz"))
}

/// A vendored split with L2-normalized rows, as the trainer sees it.
pub fn load(set: &str, split: &str) -> Dataset {
    let mut ds = data::read_xc_file(&vendored(set, split)).unwrap();
    data::l2_normalize_rows(&mut ds.features);
    ds
}

/// Trains on `ds` with the defaults and `overrides` (`key=value`).
pub fn train_with(ds: &Dataset, overrides: &[&str]) -> Trained {
    let overrides: Vec<String> = overrides.iter().map(|s| s.to_string()).collect();
    let cfg = TrainConfig::load(None, &overrides).unwrap();
    train::train(ds, &cfg, TrainInputs::default(), &Quiet).unwrap()
}

/// Rebuilds every node of a trained `tree` with the feature index `index` and the weight layout
/// `rows`, whatever the trainer's size rules chose (the same weights, as the tests that corrupt
/// one kind of array need it present).
pub fn rechunk(tree: &mut TreeArrays<Vec<u32>, Vec<f32>>, index: IndexChoice, rows: RowChoice) {
    let outs: Vec<usize> = (0..tree.n_nodes()).map(|i| tree.outputs(i).len()).collect();
    tree.chunks = tree.chunks.rebuilt_as(&outs, index, rows).unwrap();
}

/// P@1 of `model` on `ds` with the default prediction options.
pub fn p_at_1(model: &Model, ds: &Dataset) -> f64 {
    p_at_1_with(model, ds, &PredictOptions::default())
}

/// P@1 of `model` on `ds` with `opts`.
pub fn p_at_1_with(model: &Model, ds: &Dataset, opts: &PredictOptions) -> f64 {
    let mut hits = 0;
    for i in 0..ds.n_points() {
        let (idx, val) = ds.feature_row(i);
        let p = model.predict(idx, val, opts).unwrap();
        if let Some(top) = p.labels.first() {
            hits += usize::from(ds.label_row(i).contains(&top.0));
        }
    }
    hits as f64 / ds.n_points() as f64
}

/// The settings of the in-process API tests: `model`, no polling, small limits (a 4 KiB body, 4
/// instances a batch, k up to 20), two pool threads, and the admin `token` if any.
pub fn serve_config(model: PathBuf, token: Option<&str>) -> ServeConfig {
    let mut cfg = ServeConfig::defaults();
    cfg.model = model;
    cfg.poll_interval_ms = 0;
    cfg.body_limit_bytes = 4096;
    cfg.max_batch = 4;
    cfg.max_k = 20;
    cfg.pool_threads = 2;
    cfg.admin_token = token.map(str::to_string);
    cfg
}

/// The error codes `openapi.json`'s `Error` schema lists, read once per test binary.
static DOCUMENTED_CODES: LazyLock<Vec<String>> = LazyLock::new(|| {
    let doc: Value = serde_json::from_str(include_str!("../../openapi.json")).unwrap();
    let codes =
        &doc["components"]["schemas"]["Error"]["properties"]["error"]["properties"]["code"]["enum"];
    codes
        .as_array()
        .unwrap_or_else(|| panic!("openapi.json's Error code has no enum: {codes}"))
        .iter()
        .map(|c| {
            c.as_str()
                .unwrap_or_else(|| panic!("a non-string code: {c}"))
                .to_owned()
        })
        .collect()
});

/// Checks the status and the one error shape, with a code that `openapi.json`'s `Error` schema
/// lists; returns the code.
pub fn assert_error(status: StatusCode, body: &Value, want: StatusCode) -> String {
    assert_eq!(status, want, "{body}");
    let code = body["error"]["code"]
        .as_str()
        .unwrap_or_else(|| panic!("no code: {body}"));
    assert!(body["error"]["message"].is_string(), "{body}");
    assert!(
        DOCUMENTED_CODES.iter().any(|c| c == code),
        "{code} is not in openapi.json's Error codes {:?}",
        *DOCUMENTED_CODES
    );
    code.to_owned()
}
