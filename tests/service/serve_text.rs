//! Text queries over HTTP, driven through `app()` with `oneshot` (no socket): `text` as the
//! alternative to `features` in `/v1/predict` and `/v1/predict/batch`, names and term counts in
//! the answers, and every bad input a text query can bring.
#![allow(clippy::unwrap_used)]

use crate::common;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use common::serve_config;
use http_body_util::BodyExt;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, LazyLock};
use tower::ServiceExt;
use xmc::bundle::OpenOptions;
use xmc::model::{Model, PredictOptions};
use xmc::serve::{AppState, app};
use xmc::text::TextScratch;

/// The vendored text data set the test model is trained on.
fn text_train_file() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(TEXT_TRAIN)
}

const TEXT_TRAIN: &str = "tests/data/debian-tags-text/train.jsonl.gz";

/// Trains a text model on the vendored text set with `xmc train` (default text settings, one
/// tree, so that the test stays quick), once for every test here.
static TEXT_MODEL: LazyLock<(tempfile::TempDir, PathBuf)> = LazyLock::new(|| {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("text.xmcb");
    let out = Command::new(env!("CARGO_BIN_EXE_xmc"))
        .args(["train", "--quiet", "--set", "trees=1", "--train"])
        .arg(text_train_file())
        .arg("--out")
        .arg(&path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "xmc train failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    (dir, path)
});

/// Trains a model on vendored Corel5k feature vectors: no vectorizer.
fn write_feature_model(path: &Path) {
    let train = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/Corel5k/train.txt.gz");
    let mut ds = xmc::data::read_xc_file(&train).unwrap();
    xmc::data::l2_normalize_rows(&mut ds.features);
    let cfg = xmc::config::TrainConfig::load(None, &["max_leaf=60".to_string()]).unwrap();
    xmc::train::train(
        &ds,
        &cfg,
        xmc::train::TrainInputs::default(),
        &xmc::train::Quiet,
    )
    .unwrap()
    .write(path)
    .unwrap();
}

async fn state_for(model: PathBuf, single_predict: &str) -> Arc<AppState> {
    let mut cfg = serve_config(model, None);
    cfg.set("single_predict", single_predict, "test").unwrap();
    let state = AppState::new(cfg).unwrap();
    xmc::serve::reload_now(&state).await.unwrap();
    state
}

async fn text_state() -> Arc<AppState> {
    state_for(TEXT_MODEL.1.clone(), "inline").await
}

/// Sends `body` (any bytes) to `uri` and returns the status and the JSON answer.
async fn post(state: &Arc<AppState>, uri: &str, body: impl Into<Body>) -> (StatusCode, Value) {
    let req = Request::builder()
        .method("POST")
        .uri(uri)
        .header("content-type", "application/json")
        .body(body.into())
        .unwrap();
    let resp = app(state.clone()).oneshot(req).await.unwrap();
    let status = resp.status();
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    let value = serde_json::from_slice(&bytes)
        .unwrap_or_else(|_| panic!("not JSON: {}", String::from_utf8_lossy(&bytes)));
    (status, value)
}

/// The API document `state`'s server serves.
async fn served_document(state: &Arc<AppState>) -> Value {
    let req = Request::builder()
        .uri("/openapi.json")
        .body(Body::empty())
        .unwrap();
    let resp = app(state.clone()).oneshot(req).await.unwrap();
    serde_json::from_slice(&resp.into_body().collect().await.unwrap().to_bytes()).unwrap()
}

/// Checks an error answer: the status, the one error shape, and `code`, which `openapi.json`'s
/// `Error` schema must list.
fn assert_error(status: StatusCode, body: &Value, want: StatusCode, code: &str) {
    assert_eq!(common::assert_error(status, body, want), code, "{body}");
}

/// The message of an error answer.
fn message(body: &Value) -> &str {
    body["error"]["message"].as_str().unwrap_or_default()
}

/// A test document of the vendored set: a real package description.
const QUERY: &str = "Python library for parsing and writing XML documents (development files)";

#[tokio::test]
async fn a_text_query_answers_as_its_vector_does_with_names_and_term_counts() {
    let model = Model::open(&TEXT_MODEL.1, &OpenOptions::default()).unwrap();
    let view = model
        .text()
        .expect("a model trained from text has a vectorizer");
    let (mut idx, mut val) = (Vec::new(), Vec::new());
    let stats = view.vectorize(QUERY, &mut TextScratch::default(), &mut idx, &mut val);
    assert!(stats.known_terms > 0 && stats.known_terms <= stats.terms);
    let features: Vec<(u32, f32)> = idx.iter().copied().zip(val.iter().copied()).collect();
    let want = model
        .predict(&idx, &val, &PredictOptions::default())
        .unwrap();
    let want_labels: Vec<u32> = want.labels.iter().map(|l| l.0).collect();
    let names = model
        .label_names()
        .expect("a text model stores label names");
    let want_names: Vec<&str> = want_labels
        .iter()
        .map(|&l| names.get(l as usize).unwrap())
        .collect();
    for mode in ["inline", "pool"] {
        let state = state_for(TEXT_MODEL.1.clone(), mode).await;
        let (s, text) = post(&state, "/v1/predict", json!({"text": QUERY}).to_string()).await;
        assert_eq!(s, StatusCode::OK, "{mode}: {text}");
        assert_eq!(text["labels"], json!(want_labels), "{mode}: {text}");
        assert_eq!(text["names"], json!(want_names), "{mode}: {text}");
        // The scores are the stored 32-bit floats (serde_json's parse may miss the last bit
        // of the written f64, never the f32's).
        let scores: Vec<f32> = text["scores"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_f64().unwrap() as f32)
            .collect();
        assert_eq!(scores, want.scores, "{mode}: {text}");
        assert_eq!(text["stats"]["terms"], json!(stats.terms), "{text}");
        assert_eq!(
            text["stats"]["known_terms"],
            json!(stats.known_terms),
            "{text}"
        );
        // The same document as features: the same answer, names too, and no term counts.
        let (s, vector) = post(
            &state,
            "/v1/predict",
            json!({"features": features}).to_string(),
        )
        .await;
        assert_eq!(s, StatusCode::OK, "{mode}: {vector}");
        assert_eq!(vector["labels"], text["labels"]);
        assert_eq!(vector["names"], text["names"]);
        assert!(vector["stats"].get("known_terms").is_none(), "{vector}");
        assert!(vector["stats"].get("terms").is_none(), "{vector}");
    }
}

#[tokio::test]
async fn a_batch_mixes_text_and_feature_instances() {
    let state = text_state().await;
    let (s, single) = post(
        &state,
        "/v1/predict",
        json!({"text": QUERY, "k": 3}).to_string(),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{single}");
    let body = json!({"instances": [
        {"text": QUERY, "k": 3},
        {"features": [[0, 1.0]], "k": 3},
        {"text": ""},
    ]});
    let (s, v) = post(&state, "/v1/predict/batch", body.to_string()).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let predictions = v["predictions"].as_array().unwrap();
    assert_eq!(predictions.len(), 3, "{v}");
    assert_eq!(predictions[0]["labels"], single["labels"]);
    assert_eq!(predictions[0]["names"], single["names"]);
    assert_eq!(
        predictions[0]["stats"]["known_terms"],
        single["stats"]["known_terms"]
    );
    assert!(predictions[1]["stats"].get("known_terms").is_none(), "{v}");
    assert_eq!(predictions[2]["stats"]["known_terms"], 0, "{v}");
    // One bad instance refuses the batch, and the message names it.
    let body = json!({"instances": [{"text": QUERY}, {"text": QUERY, "features": [[0, 1.0]]}]});
    let (s, v) = post(&state, "/v1/predict/batch", body.to_string()).await;
    assert_error(s, &v, StatusCode::UNPROCESSABLE_ENTITY, "invalid_request");
    assert!(message(&v).contains("instance 1"), "{v}");
}

#[tokio::test]
async fn a_text_with_no_known_term_is_answered() {
    let state = text_state().await;
    for text in [
        "",
        "   ",
        "qqqzzyx wvvkkxq",
        "!!! ??? ...",
        "\u{1F600}\u{1F680}",
        "\u{0}\u{7}",
    ] {
        let (s, v) = post(&state, "/v1/predict", json!({"text": text}).to_string()).await;
        assert_eq!(s, StatusCode::OK, "{text:?}: {v}");
        assert_eq!(v["stats"]["known_terms"], 0, "{text:?}: {v}");
        assert_eq!(v["labels"].as_array().unwrap().len(), 5, "{text:?}: {v}");
        assert_eq!(v["names"].as_array().unwrap().len(), 5, "{text:?}: {v}");
    }
    // Text in any script, case or compatibility form is taken.
    for text in [
        "ＰＹＴＨＯＮ ＬＩＢＲＡＲＹ",
        "Bibliothèque Python für XML",
        "東京 библиотека",
    ] {
        let (s, v) = post(&state, "/v1/predict", json!({"text": text}).to_string()).await;
        assert_eq!(s, StatusCode::OK, "{text:?}: {v}");
    }
}

#[tokio::test]
async fn text_and_features_together_or_neither_are_422() {
    let state = text_state().await;
    let cases = [
        json!({"text": QUERY, "features": [[0, 1.0]]}),
        json!({"text": "", "features": []}),
        json!({}),
        json!({"k": 3}),
        json!({"text": null}),
        json!({"features": null}),
        json!({"text": null, "features": [[0, 1.0]]}),
        json!({"text": 42}),
        json!({"text": ["a", "b"]}),
        json!({"text": QUERY, "colour": "red"}),
        json!({"text": QUERY, "k": 0}),
    ];
    for body in cases {
        let (s, v) = post(&state, "/v1/predict", body.to_string()).await;
        assert_error(s, &v, StatusCode::UNPROCESSABLE_ENTITY, "invalid_request");
    }
    let (_, v) = post(&state, "/v1/predict", json!({"k": 3}).to_string()).await;
    assert!(message(&v).contains("`features` or `text`"), "{v}");
    let both = json!({"text": QUERY, "features": [[0, 1.0]]}).to_string();
    let (_, v) = post(&state, "/v1/predict", both).await;
    assert!(message(&v).contains("not both"), "{v}");
}

#[tokio::test]
async fn text_to_a_model_without_a_vectorizer_is_422() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("features.xmcb");
    write_feature_model(&path);
    let state = state_for(path, "inline").await;
    let (s, v) = post(&state, "/v1/predict", json!({"text": QUERY}).to_string()).await;
    assert_error(s, &v, StatusCode::UNPROCESSABLE_ENTITY, "invalid_request");
    assert!(message(&v).contains("no text vectorizer"), "{v}");
    let body = json!({"instances": [{"features": [[1, 1.0]]}, {"text": QUERY}]});
    let (s, v) = post(&state, "/v1/predict/batch", body.to_string()).await;
    assert_error(s, &v, StatusCode::UNPROCESSABLE_ENTITY, "invalid_request");
    assert!(message(&v).contains("instance 1"), "{v}");
    // Its served document offers features only.
    let doc = served_document(&state).await;
    let request = &doc["components"]["schemas"]["PredictRequest"];
    assert!(request["properties"].get("text").is_none(), "{request}");
    assert!(request.get("oneOf").is_none(), "{request}");
    assert_eq!(request["required"], json!(["features"]), "{request}");
}

#[tokio::test]
async fn the_text_models_served_document_takes_text_or_features() {
    let state = text_state().await;
    let doc = served_document(&state).await;
    let request = &doc["components"]["schemas"]["PredictRequest"];
    assert_eq!(request["properties"]["text"]["type"], "string", "{request}");
    assert_eq!(
        request["oneOf"],
        json!([{"required": ["features"]}, {"required": ["text"]}]),
        "{request}"
    );
    let stats = &doc["components"]["schemas"]["PredictResponse"]["properties"]["stats"];
    for key in ["terms", "known_terms"] {
        assert_eq!(stats["properties"][key]["type"], "integer", "{stats}");
    }
}

#[tokio::test]
async fn bad_bytes_bad_json_and_big_bodies_are_refused() {
    let state = text_state().await;
    for uri in ["/v1/predict", "/v1/predict/batch"] {
        // Invalid UTF-8 inside the text, and outside any string.
        let mut bytes = br#"{"text": "caf"#.to_vec();
        bytes.extend_from_slice(&[0xC3, 0x28, 0xFF]);
        bytes.extend_from_slice(br#""}"#);
        let bodies: Vec<Vec<u8>> = vec![
            bytes,
            vec![0xFF, 0xFE, b'{', b'}'],
            // A lone surrogate is no Unicode text.
            br#"{"text": "a\ud800b"}"#.to_vec(),
            br#"{"text": "unterminated}"#.to_vec(),
            br#"{"text": "a" "b"}"#.to_vec(),
            b"text=hello".to_vec(),
        ];
        for body in bodies {
            let body = if uri.ends_with("batch") {
                let mut b = br#"{"instances": ["#.to_vec();
                b.extend_from_slice(&body);
                b.extend_from_slice(b"]}");
                b
            } else {
                body
            };
            let (s, v) = post(&state, uri, body).await;
            assert_error(s, &v, StatusCode::BAD_REQUEST, "malformed_json");
        }
        let long = "python ".repeat(1000);
        let body = if uri.ends_with("batch") {
            json!({"instances": [{"text": long}]})
        } else {
            json!({"text": long})
        };
        let (s, v) = post(&state, uri, body.to_string()).await;
        assert_error(s, &v, StatusCode::PAYLOAD_TOO_LARGE, "body_too_large");
    }
    // Just under the limit is answered.
    let fits = json!({"text": "python library ".repeat(250)}).to_string();
    assert!(fits.len() < 4096);
    let (s, v) = post(&state, "/v1/predict", fits).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert!(v["stats"]["known_terms"].as_u64().unwrap() > 0, "{v}");
}
