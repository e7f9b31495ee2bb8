//! The HTTP API, driven through `app()` with `oneshot` (no socket): every route, every error
//! code, hot swaps and a corrupt bundle.
#![allow(clippy::unwrap_used)]

use crate::common;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use common::serve_config;
use http_body_util::BodyExt;
use serde_json::{Value, json};
use std::path::Path;
use std::sync::Arc;
use tower::ServiceExt;
use xmc::config::TrainConfig;
use xmc::data;
use xmc::serve::{AppState, LoadChecks, ServeConfig, app};
use xmc::train::{self, Quiet, TrainInputs, Trained};

/// Trains a small model on vendored Corel5k (499 features, 374 labels).
fn train_small(seed: u64) -> Trained {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/Corel5k/train.txt.gz");
    let mut ds = data::read_xc_file(&dir).unwrap();
    data::l2_normalize_rows(&mut ds.features);
    let cfg =
        TrainConfig::load(None, &[format!("seed={seed}"), "max_leaf=60".to_string()]).unwrap();
    train::train(&ds, &cfg, TrainInputs::default(), &Quiet).unwrap()
}

/// [`train_small`], written to `path`; returns the model's version.
fn write_model(path: &Path, seed: u64) -> String {
    let t = train_small(seed);
    t.write(path).unwrap();
    t.meta.version.clone()
}

async fn call(
    state: &Arc<AppState>,
    method: &str,
    uri: &str,
    body: Option<String>,
) -> (StatusCode, Value) {
    call_with(state, method, uri, body, None).await
}

async fn call_with(
    state: &Arc<AppState>,
    method: &str,
    uri: &str,
    body: Option<String>,
    auth: Option<&str>,
) -> (StatusCode, Value) {
    let mut req = Request::builder().method(method).uri(uri);
    if body.is_some() {
        req = req.header("content-type", "application/json");
    }
    if let Some(a) = auth {
        req = req.header("authorization", a);
    }
    let req = req.body(body.map_or_else(Body::empty, Body::from)).unwrap();
    let resp = app(state.clone()).oneshot(req).await.unwrap();
    let status = resp.status();
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    let value = serde_json::from_slice(&bytes)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
    (status, value)
}

/// Checks the status and the one error shape, with a documented code.
fn assert_error(status: StatusCode, body: &Value, want: StatusCode) {
    common::assert_error(status, body, want);
}

async fn loaded_state(token: Option<&str>) -> (tempfile::TempDir, Arc<AppState>, String) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("model.xmcb");
    let version = write_model(&path, 1);
    let state = AppState::new(serve_config(path, token)).unwrap();
    xmc::serve::reload_now(&state).await.unwrap();
    (dir, state, version)
}

#[tokio::test]
async fn single_predictions_on_the_pool_answer_as_inline_ones() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("model.xmcb");
    write_model(&path, 1);
    let mut answers = Vec::new();
    for mode in ["inline", "pool"] {
        let mut cfg = serve_config(path.clone(), None);
        cfg.set("single_predict", mode, "test").unwrap();
        let state = AppState::new(cfg).unwrap();
        xmc::serve::reload_now(&state).await.unwrap();
        let body = json!({"features": [[3, 1.0], [17, 0.5]], "k": 5}).to_string();
        let (s, v) = call(&state, "POST", "/v1/predict", Some(body)).await;
        assert_eq!(s, StatusCode::OK, "{mode}: {v}");
        answers.push((v["labels"].clone(), v["scores"].clone()));
        // The model's own checks answer the same way whichever thread predicts.
        let body = json!({"features": [[100_000, 1.0]]}).to_string();
        let (s, v) = call(&state, "POST", "/v1/predict", Some(body)).await;
        assert_error(s, &v, StatusCode::UNPROCESSABLE_ENTITY);
    }
    assert_eq!(answers[0], answers[1]);
    let err = ServeConfig::defaults()
        .set("single_predict", "elsewhere", "test")
        .unwrap_err();
    assert!(err.to_string().contains("single_predict"), "{err}");
}

#[tokio::test]
async fn predict_returns_k_labels_with_stats_and_version() {
    let (_dir, state, version) = loaded_state(None).await;
    let (s, v) = call(
        &state,
        "POST",
        "/v1/predict",
        Some(json!({"features": [[3, 1.0], [17, 0.5], [17, 0.5]], "k": 5}).to_string()),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["labels"].as_array().unwrap().len(), 5);
    assert_eq!(v["scores"].as_array().unwrap().len(), 5);
    assert_eq!(v["model"]["version"], version);
    for key in [
        "depth",
        "nodes_evaluated",
        "block",
        "early_stopped",
        "beam_capped",
        "deadline_hit",
        "elapsed_us",
    ] {
        assert!(v["stats"].get(key).is_some(), "{v}");
    }
    // One depth per returned label; `depth` is the deepest of them.
    let depths: Vec<u64> = v["stats"]["depths"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d.as_u64().unwrap())
        .collect();
    assert_eq!(depths.len(), 5, "{v}");
    assert_eq!(
        depths.iter().max().copied(),
        v["stats"]["depth"].as_u64(),
        "{v}"
    );
    // Early stopping (the default) gives the same labels as the level-wise search when neither
    // beam binds, and reports what it did.
    let body = |extra: &str| {
        Some(format!(
            r#"{{"features": [[3, 1.0], [17, 0.5]], "k": 3, "beam": 1000{extra}}}"#
        ))
    };
    let (s, on) = call(&state, "POST", "/v1/predict", body("")).await;
    assert_eq!(s, StatusCode::OK, "{on}");
    let (s, off) = call(
        &state,
        "POST",
        "/v1/predict",
        body(r#", "early_stop": false"#),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{off}");
    assert_eq!(on["labels"], off["labels"]);
    assert_eq!(on["stats"]["beam_capped"], false);
    assert_eq!(off["stats"]["early_stopped"], false);
    let nodes = |v: &Value| {
        v["stats"]["nodes_evaluated"]
            .as_u64()
            .unwrap_or_else(|| panic!("nodes_evaluated is not a count: {v}"))
    };
    assert!(nodes(&on) <= nodes(&off), "{on} {off}");
    // A deadline of zero is already past: nothing is searched, and the answer says so.
    let (s, late) = call(&state, "POST", "/v1/predict", body(r#", "deadline_us": 0"#)).await;
    assert_eq!(s, StatusCode::OK, "{late}");
    assert_eq!(late["stats"]["deadline_hit"], true);
    assert_eq!(late["labels"].as_array().unwrap().len(), 0);
    // A deadline without early stopping is refused, naming the option.
    let (s, v) = call(
        &state,
        "POST",
        "/v1/predict",
        body(r#", "early_stop": false, "deadline_us": 100"#),
    )
    .await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("deadline_us")
    );
    // The default k.
    let (s, v) = call(
        &state,
        "POST",
        "/v1/predict",
        Some(r#"{"features": [[3, 1]]}"#.into()),
    )
    .await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(v["labels"].as_array().unwrap().len(), 5);
}

/// Label names come back when the model has them, scores are the model's `f32`s exactly, and
/// the rendered bodies are JSON, single and batch alike.
#[tokio::test]
async fn answers_carry_names_and_the_exact_scores() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("model.xmcb");
    let mut t = train_small(1);
    t.label_names = Some((0..t.meta.n_labels).map(|l| format!("label-{l}")).collect());
    t.meta.has_label_names = true;
    t.write(&path).unwrap();
    let state = AppState::new(serve_config(path.clone(), None)).unwrap();
    xmc::serve::reload_now(&state).await.unwrap();
    let model = xmc::model::Model::open(&path, &xmc::bundle::OpenOptions::default()).unwrap();
    let want = model
        .predict(
            &[3, 17],
            &[1.0, 0.5],
            &xmc::model::PredictOptions::default(),
        )
        .unwrap();
    let req = Request::builder()
        .method("POST")
        .uri("/v1/predict")
        .header("content-type", "application/json")
        .body(Body::from(r#"{"features": [[3, 1.0], [17, 0.5]]}"#))
        .unwrap();
    let resp = app(state.clone()).oneshot(req).await.unwrap();
    assert_eq!(resp.headers()["content-type"], "application/json");
    let (s, v) = call(
        &state,
        "POST",
        "/v1/predict/batch",
        Some(r#"{"instances": [{"features": [[3, 1.0], [17, 0.5]]}]}"#.into()),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    let single: Value = serde_json::from_slice(&bytes).unwrap();
    for v in [&single, &v["predictions"][0]] {
        let labels: Vec<u64> = v["labels"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| l.as_u64().unwrap())
            .collect();
        let got: Vec<u64> = want.labels.iter().map(|l| u64::from(l.0)).collect();
        assert_eq!(labels, got, "{v}");
        let names: Vec<String> = labels.iter().map(|l| format!("label-{l}")).collect();
        assert_eq!(v["names"], json!(names), "{v}");
        let scores: Vec<f64> = v["scores"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_f64().unwrap())
            .collect();
        let exact: Vec<f64> = want.scores.iter().map(|&x| f64::from(x)).collect();
        assert_eq!(scores, exact, "{v}");
    }
    assert_eq!(v["model"]["name"], model.meta().name.as_str());
}

#[tokio::test]
async fn batch_predicts_every_instance() {
    let (_dir, state, version) = loaded_state(None).await;
    let body = json!({"instances": [{"features": [[1, 1.0]], "k": 2}, {"features": [[2, 1.0], [9, 2.0]], "k": 3}]});
    let (s, v) = call(&state, "POST", "/v1/predict/batch", Some(body.to_string())).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let preds = v["predictions"].as_array().unwrap();
    assert_eq!(preds[0]["labels"].as_array().unwrap().len(), 2);
    assert_eq!(preds[1]["labels"].as_array().unwrap().len(), 3);
    assert_eq!(v["model"]["version"], version);
}

/// A server with a Corel5k model trained at `max_leaf = 60` and `setting` (`key=value`), loaded.
async fn corel5k_state(setting: &str) -> (tempfile::TempDir, Arc<AppState>) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("model.xmcb");
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/Corel5k/train.txt.gz");
    let mut ds = data::read_xc_file(&data).unwrap();
    data::l2_normalize_rows(&mut ds.features);
    let cfg = TrainConfig::load(None, &["max_leaf=60".to_string(), setting.to_string()]).unwrap();
    train::train(&ds, &cfg, TrainInputs::default(), &Quiet)
        .unwrap()
        .write(&path)
        .unwrap();
    let state = AppState::new(serve_config(path, None)).unwrap();
    xmc::serve::reload_now(&state).await.unwrap();
    (dir, state)
}

/// A model with the OVA reranker reranks by default on the single and batch routes, says so in
/// `stats.reranked`, and answers as the plain search with `rerank_ova: false`.
#[tokio::test]
async fn the_ova_reranker_is_on_every_route_and_per_request() {
    let (_dir, state) = corel5k_state("rerank_model=ova").await;
    let q = json!([[1, 1.0], [9, 0.5], [40, 0.25]]);
    let (s, on) = call(
        &state,
        "POST",
        "/v1/predict",
        Some(json!({"features": q}).to_string()),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{on}");
    assert!(on["stats"]["reranked"].as_u64().unwrap() >= 5, "{on}");
    let body = json!({"features": q, "rerank_ova": false}).to_string();
    let (s, off) = call(&state, "POST", "/v1/predict", Some(body)).await;
    assert_eq!(s, StatusCode::OK, "{off}");
    assert_eq!(off["stats"]["reranked"], json!(0));
    let body = json!({"instances": [{"features": q}, {"features": q, "rerank_ova": false}]});
    let (s, v) = call(&state, "POST", "/v1/predict/batch", Some(body.to_string())).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let preds = v["predictions"].as_array().unwrap();
    assert_eq!(preds[0]["labels"], on["labels"]);
    assert_eq!(preds[0]["stats"]["reranked"], on["stats"]["reranked"]);
    assert_eq!(preds[1]["labels"], off["labels"]);
    assert_eq!(preds[1]["stats"]["reranked"], json!(0));
    let (_, doc) = call(&state, "GET", "/openapi.json", None).await;
    let ova = &doc["components"]["schemas"]["PredictRequest"]["properties"]["rerank_ova"];
    assert!(ova.get("enum").is_none(), "{ova}");
    // α per request: at 1 the search's own probabilities decide, so the labels are the plain
    // search's; out of [0, 1] it is a 422 that names the field, on both routes.
    let body = json!({"features": q, "rerank_ova_alpha": 1.0}).to_string();
    let (s, one) = call(&state, "POST", "/v1/predict", Some(body)).await;
    assert_eq!(s, StatusCode::OK, "{one}");
    assert_eq!(one["labels"], off["labels"]);
    assert_eq!(one["stats"]["reranked"], on["stats"]["reranked"]);
    for bad in [json!(1.5), json!(-0.1), json!(1e39)] {
        let body = json!({"features": q, "rerank_ova_alpha": bad}).to_string();
        let (s, v) = call(&state, "POST", "/v1/predict", Some(body)).await;
        assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{bad}: {v}");
        assert!(v["error"].to_string().contains("rerank_ova_alpha"), "{v}");
    }
    let body = json!({"instances": [{"features": q}, {"features": q, "rerank_ova_alpha": 2}]});
    let (s, v) = call(&state, "POST", "/v1/predict/batch", Some(body.to_string())).await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{v}");
    assert!(v["error"].to_string().contains("instance 1"), "{v}");
}

/// REFRAG on a model without DEFRAG (prototypes over the input features) reranks by default on
/// the single and batch routes, and answers as the plain search with `rerank: false`. A request
/// may set α and γ_r, within their ranges.
#[tokio::test]
async fn refrag_on_a_plain_model_is_on_every_route_and_per_request() {
    let (_dir, state) = corel5k_state("refrag=on").await;
    let q = json!([[1, 1.0], [9, 0.5], [40, 0.25]]);
    let predict = |body: Value| {
        let state = state.clone();
        async move {
            let (s, v) = call(&state, "POST", "/v1/predict", Some(body.to_string())).await;
            assert_eq!(s, StatusCode::OK, "{v}");
            v
        }
    };
    let on = predict(json!({"features": q})).await;
    assert!(on["stats"]["reranked"].as_u64().unwrap() >= 5, "{on}");
    let off = predict(json!({"features": q, "rerank": false})).await;
    assert_eq!(off["stats"]["reranked"], json!(0));
    // The stored α mixes the affinity into each score: the scores differ from the search's.
    assert_ne!(on["scores"], off["scores"]);
    let body = json!({"instances": [{"features": q}, {"features": q, "rerank": false}]});
    let (s, v) = call(&state, "POST", "/v1/predict/batch", Some(body.to_string())).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let preds = v["predictions"].as_array().unwrap();
    assert_eq!(preds[0]["labels"], on["labels"]);
    assert_eq!(preds[1]["labels"], off["labels"]);
    assert_eq!(preds[1]["stats"]["reranked"], json!(0));
    // At α = 1 the search decides alone; a sharper γ_r changes the mixed scores.
    let one = predict(json!({"features": q, "rerank_alpha": 1.0})).await;
    assert_eq!(one["labels"], off["labels"]);
    let sharp = predict(json!({"features": q, "rerank_gamma": 80.0})).await;
    assert_ne!(sharp["scores"], on["scores"]);
    // 3.4028234663852894e38 is past f32's range, though it would round to f32::MAX.
    for (field, bad) in [
        ("rerank_alpha", 1.5),
        ("rerank_gamma", -1.0),
        ("rerank_gamma", 3.4028234663852894e38),
    ] {
        let body = json!({"features": q, field: bad}).to_string();
        let (s, v) = call(&state, "POST", "/v1/predict", Some(body)).await;
        assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{field}: {v}");
        assert!(v["error"].to_string().contains(field), "{v}");
    }
}

#[tokio::test]
async fn every_error_has_its_code_and_shape() {
    let (_dir, state, _) = loaded_state(None).await;
    let p = |b: &str| Some(b.to_string());
    let cases: Vec<(&str, &str, Option<String>, StatusCode)> = vec![
        (
            "POST",
            "/v1/predict",
            p("{\"features\": [[1, 1.0]"),
            StatusCode::BAD_REQUEST,
        ),
        (
            "POST",
            "/v1/predict",
            p("not json"),
            StatusCode::BAD_REQUEST,
        ),
        (
            "POST",
            "/v1/predict",
            Some(format!(
                "{{\"features\": [{}[1, 1.0]]}}",
                "[1, 1.0],".repeat(1000)
            )),
            StatusCode::PAYLOAD_TOO_LARGE,
        ),
        (
            "POST",
            "/v1/predict",
            p(r#"{"features": [[499, 1.0]]}"#),
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        (
            "POST",
            "/v1/predict",
            p(r#"{"features": [[1, 1e300]]}"#),
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        // The document's exclusive bound: the midpoint between f32::MAX and 2^128 rounds to
        // infinity (the value just below it rounds to f32::MAX, and is served).
        (
            "POST",
            "/v1/predict",
            p(r#"{"features": [[1, -3.4028235677973366e38]]}"#),
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        (
            "POST",
            "/v1/predict",
            p(r#"{"features": [[1, 1.0]], "k": 0}"#),
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        (
            "POST",
            "/v1/predict",
            p(r#"{"features": [[1, 1.0]], "k": 21}"#),
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        (
            "POST",
            "/v1/predict",
            p(r#"{"features": [[1, 1.0]], "colour": "red"}"#),
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        (
            "POST",
            "/v1/predict",
            p(r#"{"features": [[-1, 1.0]]}"#),
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        (
            "POST",
            "/v1/predict",
            p(r#"{"features": [[1, 1.0]], "rerank": true}"#),
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        (
            "POST",
            "/v1/predict",
            p(r#"{"features": [[1, 1.0]], "rerank_ova": true}"#),
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        (
            "POST",
            "/v1/predict/batch",
            Some(json!({"instances": vec![json!({"features": [[1, 1.0]]}); 5]}).to_string()),
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        (
            "POST",
            "/v1/predict/batch",
            p(r#"{"instances": [{"features": [[1, 1.0]]}, {"features": [[1000, 1.0]]}]}"#),
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        ("GET", "/v1/nope", None, StatusCode::NOT_FOUND),
        ("POST", "/v1/admin/reload", None, StatusCode::NOT_FOUND),
        (
            "DELETE",
            "/v1/predict",
            None,
            StatusCode::METHOD_NOT_ALLOWED,
        ),
        ("POST", "/healthz", None, StatusCode::METHOD_NOT_ALLOWED),
    ];
    for (method, uri, body, want) in cases {
        let (s, v) = call(&state, method, uri, body.clone()).await;
        assert_error(s, &v, want);
    }
    // The feature-range error names the feature.
    let (_, v) = call(
        &state,
        "POST",
        "/v1/predict",
        p(r#"{"features": [[499, 1.0]]}"#),
    )
    .await;
    assert!(
        v["error"]["message"].as_str().unwrap().contains("499"),
        "{v}"
    );
}

/// A known route asked with a method it does not take: 405 with the error body, the methods
/// it does take in `Allow`, and the answer counted under the route.
#[tokio::test]
async fn a_wrong_method_gets_the_error_body_and_allow() {
    let (_dir, state, _) = loaded_state(None).await;
    for (method, uri, allow) in [
        ("GET", "/v1/predict", "POST"),
        ("PUT", "/v1/model", "GET,HEAD"),
    ] {
        let req = Request::builder()
            .method(method)
            .uri(uri)
            .body(Body::empty())
            .unwrap();
        let resp = app(state.clone()).oneshot(req).await.unwrap();
        assert_eq!(resp.status(), StatusCode::METHOD_NOT_ALLOWED);
        assert_eq!(resp.headers()["allow"], allow);
        assert_eq!(resp.headers()["content-type"], "application/json");
        let bytes = resp.into_body().collect().await.unwrap().to_bytes();
        let v: Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(v["error"]["code"], "method_not_allowed", "{v}");
        assert!(
            v["error"]["message"].as_str().unwrap().contains(method),
            "{v}"
        );
    }
    let (_, v) = call(&state, "GET", "/metrics", None).await;
    let line = "xmc_requests_total{route=\"/v1/predict\",status=\"405\"} 1\n";
    assert!(v.as_str().unwrap().contains(line), "{v}");
}

#[tokio::test]
async fn without_a_model_predictions_are_503_and_not_ready() {
    let dir = tempfile::tempdir().unwrap();
    let state = AppState::new(serve_config(dir.path().join("missing.xmcb"), None)).unwrap();
    assert!(xmc::serve::reload_now(&state).await.is_err());
    let (s, v) = call(
        &state,
        "POST",
        "/v1/predict",
        Some(r#"{"features": [[1, 1.0]]}"#.into()),
    )
    .await;
    assert_error(s, &v, StatusCode::SERVICE_UNAVAILABLE);
    let (s, v) = call(&state, "GET", "/readyz", None).await;
    assert_error(s, &v, StatusCode::SERVICE_UNAVAILABLE);
    let (s, _) = call(&state, "GET", "/healthz", None).await;
    assert_eq!(s, StatusCode::OK);
}

#[tokio::test]
async fn info_routes_health_metrics_and_openapi() {
    let (_dir, state, version) = loaded_state(None).await;
    let (s, v) = call(&state, "GET", "/healthz", None).await;
    assert_eq!((s, v["status"].as_str()), (StatusCode::OK, Some("ok")));
    let (s, v) = call(&state, "GET", "/readyz", None).await;
    assert_eq!(
        (s, v["version"].as_str()),
        (StatusCode::OK, Some(version.as_str()))
    );
    let (s, v) = call(&state, "GET", "/v1/model", None).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(v["model"]["meta"]["version"], version);
    assert_eq!(v["model"]["meta"]["n_features"], 499);
    call(
        &state,
        "POST",
        "/v1/predict",
        Some(r#"{"features": [[1, 1.0]]}"#.into()),
    )
    .await;
    let (s, v) = call(&state, "GET", "/metrics", None).await;
    assert_eq!(s, StatusCode::OK);
    let text = v.as_str().unwrap();
    for m in [
        "xmc_requests_total",
        "xmc_request_duration_seconds",
        "xmc_model_info",
        "xmc_predict_depth",
        "xmc_model_reloads_total",
        "xmc_inflight_requests",
    ] {
        assert!(text.contains(m), "no {m} in {text}");
    }
    assert!(text.contains("route=\"/v1/predict\""), "{text}");
    let (s, v) = call(&state, "GET", "/openapi.json", None).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(v["openapi"], "3.1.0");
    // The metrics layer can answer any route 408 (the request limit) or 500 (a handler's
    // fault), so every operation documents both.
    for (path, ops) in v["paths"].as_object().unwrap() {
        for (method, op) in ops.as_object().unwrap() {
            for status in ["408", "500"] {
                assert!(
                    op["responses"].get(status).is_some(),
                    "{method} {path} does not document {status}"
                );
            }
        }
    }
    // The served document states this server's limits.
    let k = &v["components"]["schemas"]["PredictRequest"]["properties"]["k"];
    assert_eq!(k["maximum"], json!(state.cfg.max_k));
    let instances = &v["paths"]["/v1/predict/batch"]["post"]["requestBody"]["content"]["application/json"]
        ["schema"]["properties"]["instances"];
    assert_eq!(instances["maxItems"], json!(state.cfg.max_batch));
    // The test model has no DEFRAG stage, so neither option may be true.
    let props = &v["components"]["schemas"]["PredictRequest"]["properties"];
    for option in ["rerank", "impute", "rerank_ova"] {
        assert_eq!(props[option]["enum"], json!([false, null]), "{option}");
    }
}

#[tokio::test]
async fn integral_floats_and_nulls_are_accepted_as_json_schema_reads_them() {
    let (_dir, state, _) = loaded_state(None).await;
    let body = r#"{"features": [[3.0, 1], [17, 0.5]], "k": 2.0, "beam": null,
                   "deadline_us": null, "block_candidates": null, "rerank": null}"#;
    let (s, v) = call(&state, "POST", "/v1/predict", Some(body.into())).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["labels"].as_array().unwrap().len(), 2);
    // The document's upper bounds are served: the largest integer, and a value that rounds to
    // f32::MAX.
    let body = r#"{"features": [[3, 3.4028235e38]], "beam": 18446744073709551615,
                   "deadline_us": 18446744073709551615}"#;
    let (s, v) = call(&state, "POST", "/v1/predict", Some(body.into())).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    for bad in [
        r#"{"features": [[3.5, 1]]}"#,
        r#"{"features": [[-1, 1]]}"#,
        r#"{"features": [[3, 1]], "k": 2.5}"#,
        r#"{"features": [[3, 1]], "k": -2}"#,
        r#"{"features": [[1e30, 1]]}"#,
        r#"{"features": [[3, 1]], "k": 1e30}"#,
        r#"{"features": [[3, 1]], "beam": "wide"}"#,
    ] {
        let (s, v) = call(&state, "POST", "/v1/predict", Some(bad.into())).await;
        assert_error(s, &v, StatusCode::UNPROCESSABLE_ENTITY);
    }
    // A pair is exactly [id, value]: a short one is the wrong shape (422), and a long one is
    // not valid JSON for it (serde_json reads the third element as trailing characters: 400).
    let shape = StatusCode::UNPROCESSABLE_ENTITY;
    for (bad, want) in [
        (r#"{"features": [[3]]}"#, shape),
        (r#"{"features": [[]]}"#, shape),
        (r#"{"features": [3, 1]}"#, shape),
        (r#"{"features": {"3": 1}}"#, shape),
        (r#"{"features": [[3, "1"]]}"#, shape),
        (r#"{"features": [[3, 1, 2]]}"#, StatusCode::BAD_REQUEST),
    ] {
        let (s, v) = call(&state, "POST", "/v1/predict", Some(bad.into())).await;
        assert_error(s, &v, want);
    }
    // A bad pair is reported once the whole body has parsed: a syntax error after it still
    // makes the request a 400, and in a batch the message names the instance. The value is
    // written in exponent form, not as 301 digits.
    let truncated = r#"{"features": [[4294967296, 1]], "k": "#;
    let (s, v) = call(&state, "POST", "/v1/predict", Some(truncated.into())).await;
    assert_error(s, &v, StatusCode::BAD_REQUEST);
    let batch = r#"{"instances": [{"features": [[1, 1]]}, {"features": [[2, 1e300]]}]}"#;
    let (s, v) = call(&state, "POST", "/v1/predict/batch", Some(batch.into())).await;
    assert_error(s, &v, StatusCode::UNPROCESSABLE_ENTITY);
    let message = v["error"]["message"].as_str().unwrap();
    assert!(
        message.starts_with("instance 1: feature 2: value 1e300 is not"),
        "{message}"
    );
    // An id past u32 is out of range for every model, and says so.
    let (s, v) = call(
        &state,
        "POST",
        "/v1/predict",
        Some(r#"{"features": [[4294967296, 1]]}"#.into()),
    )
    .await;
    assert_error(s, &v, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("4294967296")
    );
}

#[tokio::test]
async fn admin_reload_needs_the_token() {
    let (_dir, state, version) = loaded_state(Some("s3cret")).await;
    let (s, v) = call_with(&state, "POST", "/v1/admin/reload", None, None).await;
    assert_error(s, &v, StatusCode::UNAUTHORIZED);
    let (s, v) = call_with(
        &state,
        "POST",
        "/v1/admin/reload",
        None,
        Some("Bearer wrong"),
    )
    .await;
    assert_error(s, &v, StatusCode::UNAUTHORIZED);
    let (s, v) = call_with(
        &state,
        "POST",
        "/v1/admin/reload",
        None,
        Some("Bearer s3cret"),
    )
    .await;
    // The file has not changed: nothing to load (a second map of it would only cost memory).
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["reloaded"], false, "{v}");
    let (s, v) = call_with(
        &state,
        "POST",
        "/v1/admin/reload?force=true",
        None,
        Some("Bearer s3cret"),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["reloaded"], true, "{v}");
    assert_eq!(v["version"], version);
    // `force` is a boolean: anything else is refused, not read as false.
    for bad in ["force=null", "force=yes", "force=true&force=2"] {
        let uri = format!("/v1/admin/reload?{bad}");
        let (s, v) = call_with(&state, "POST", &uri, None, Some("Bearer s3cret")).await;
        assert_error(s, &v, StatusCode::UNPROCESSABLE_ENTITY);
    }
}

#[tokio::test]
async fn a_corrupt_bundle_keeps_the_old_model_and_is_reported() {
    let (dir, state, version) = loaded_state(Some("t")).await;
    let path = dir.path().join("model.xmcb");
    let mut bytes = std::fs::read(&path).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0xff;
    let tmp = dir.path().join("tmp.xmcb");
    std::fs::write(&tmp, &bytes).unwrap();
    std::fs::rename(&tmp, &path).unwrap();
    let (s, v) = call_with(&state, "POST", "/v1/admin/reload", None, Some("Bearer t")).await;
    assert_error(s, &v, StatusCode::INTERNAL_SERVER_ERROR);
    let (s, v) = call(
        &state,
        "POST",
        "/v1/predict",
        Some(r#"{"features": [[1, 1.0]]}"#.into()),
    )
    .await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(v["model"]["version"], version);
    let (_, v) = call(&state, "GET", "/v1/model", None).await;
    assert!(
        v["reloads"]["last_error"]
            .as_str()
            .unwrap()
            .contains("model.xmcb"),
        "{v}"
    );
    assert_eq!(v["model"]["meta"]["version"], version);
    let (_, m) = call(&state, "GET", "/metrics", None).await;
    assert!(
        m.as_str()
            .unwrap()
            .contains("xmc_model_reloads_total{result=\"error\"}"),
        "{m}"
    );
    // A truncated file too.
    std::fs::write(&tmp, &bytes[..bytes.len() / 3]).unwrap();
    std::fs::rename(&tmp, &path).unwrap();
    assert!(xmc::serve::reload_now(&state).await.is_err());
    let (s, _) = call(&state, "GET", "/readyz", None).await;
    assert_eq!(s, StatusCode::OK);
}

/// A bundle whose checksums match its bytes but whose weights are NaN: what a buggy writer
/// (not a damaged file) would produce.
fn write_nan_model(path: &Path) -> String {
    let mut t = train_small(0);
    for tree in &mut t.trees {
        let c = &mut tree.chunks;
        let weights = c.entry_weight.iter_mut().chain(c.row_weight.iter_mut());
        weights.for_each(|w| *w = f32::NAN);
    }
    t.write(path).unwrap();
    t.meta.version.clone()
}

#[tokio::test]
async fn load_checks_full_refuses_what_checksums_let_through() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("model.xmcb");
    let version = write_nan_model(&path);
    let mut cfg = serve_config(path.clone(), None);
    cfg.load_checks = LoadChecks::Full;
    let state = AppState::new(cfg).unwrap();
    let err = xmc::serve::reload_now(&state).await.unwrap_err();
    assert!(err.to_string().contains("weight"), "{err}");
    let (s, v) = call(&state, "GET", "/readyz", None).await;
    assert_error(s, &v, StatusCode::SERVICE_UNAVAILABLE);

    // The default checks every checksum and the structure: the file is what was written, and
    // the server answers from it (wrong scores, never a panic).
    let state = AppState::new(serve_config(path, None)).unwrap();
    assert_eq!(state.cfg.load_checks, LoadChecks::Checksums);
    xmc::serve::reload_now(&state).await.unwrap();
    let (s, v) = call(
        &state,
        "POST",
        "/v1/predict",
        Some(r#"{"features": [[1, 1.0]], "k": 5}"#.into()),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["model"]["version"], version);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keeps_answering_through_twenty_swaps() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a.xmcb"), dir.path().join("b.xmcb"));
    let va = write_model(&a, 1);
    let vb = write_model(&b, 2);
    assert_ne!(va, vb);
    let live = dir.path().join("live.xmcb");
    std::os::unix::fs::symlink(&a, &live).unwrap();
    let state = AppState::new(serve_config(live.clone(), None)).unwrap();
    xmc::serve::reload_now(&state).await.unwrap();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let client = {
        let (state, stop) = (state.clone(), stop.clone());
        let (va, vb) = (va.clone(), vb.clone());
        tokio::spawn(async move {
            let mut n = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let (s, v) = call(
                    &state,
                    "POST",
                    "/v1/predict",
                    Some(r#"{"features": [[1, 1.0], [7, 0.5]]}"#.into()),
                )
                .await;
                assert_eq!(s, StatusCode::OK, "{v}");
                let ver = v["model"]["version"].as_str().unwrap();
                assert!(ver == va || ver == vb, "{ver}");
                n += 1;
            }
            n
        })
    };
    for i in 0..20 {
        // Flip the symlink atomically: a new link renamed over the old one.
        let target = if i % 2 == 0 { &b } else { &a };
        let tmp = dir.path().join("live.tmp");
        let _ = std::fs::remove_file(&tmp);
        std::os::unix::fs::symlink(target, &tmp).unwrap();
        std::fs::rename(&tmp, &live).unwrap();
        let outcome = xmc::serve::reload_now(&state).await.unwrap();
        let want = if i % 2 == 0 { &vb } else { &va };
        assert_eq!(outcome, xmc::serve::ReloadOutcome::Loaded(want.clone()));
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let answered = client.await.unwrap();
    assert!(answered > 0);
}
