//! The model repository and the Open Inference Protocol (V2) over REST, driven through `app()`
//! with `oneshot`: several models and versions, isolation of a corrupt version, unloading, the
//! V2 routes with JSON and binary tensors, classification, every refused input, and V2 answering
//! exactly what `/v1` answers.
#![allow(clippy::unwrap_used)]

use axum::body::Body;
use axum::http::{Request, StatusCode};
use http_body_util::BodyExt;
use serde_json::{Value, json};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tower::ServiceExt;
use xmc::serve::{AppState, ServeConfig, Trigger, app, repository};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The shipped text model (debian-tags-text, label names) and a small golden feature model.
fn text_bundle() -> PathBuf {
    root().join("models/default.xmcb")
}
fn feature_bundle() -> PathBuf {
    root().join("tests/data/golden/model-v4.xmcb")
}

/// Puts `bundle` at `repo/name/version/model.xmcb`.
fn place(repo: &Path, name: &str, version: u64, bundle: &Path) {
    let dir = repo.join(name).join(version.to_string());
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(bundle, dir.join("model.xmcb")).unwrap();
}

fn repo_config(repo: &Path) -> ServeConfig {
    let mut cfg = ServeConfig::defaults();
    cfg.repository = Some(repo.display().to_string());
    cfg.poll_interval_ms = 0;
    cfg.pool_threads = 2;
    cfg.max_batch = 8;
    cfg
}

async fn send(
    state: &Arc<AppState>,
    method: &str,
    uri: &str,
    headers: &[(&str, String)],
    body: Vec<u8>,
) -> (StatusCode, Vec<u8>, Option<usize>) {
    let mut req = Request::builder().method(method).uri(uri);
    for (k, v) in headers {
        req = req.header(*k, v);
    }
    let resp = app(state.clone())
        .oneshot(req.body(Body::from(body)).unwrap())
        .await
        .unwrap();
    let status = resp.status();
    let header_len = resp
        .headers()
        .get("inference-header-content-length")
        .map(|v| v.to_str().unwrap().parse().unwrap());
    let bytes = resp
        .into_body()
        .collect()
        .await
        .unwrap()
        .to_bytes()
        .to_vec();
    (status, bytes, header_len)
}

async fn json_call(
    state: &Arc<AppState>,
    method: &str,
    uri: &str,
    body: Option<Value>,
) -> (StatusCode, Value) {
    let body = body.map_or_else(Vec::new, |b| b.to_string().into_bytes());
    let (status, bytes, _) = send(state, method, uri, &[], body).await;
    let value = serde_json::from_slice(&bytes)
        .unwrap_or_else(|_| panic!("not JSON: {}", String::from_utf8_lossy(&bytes)));
    (status, value)
}

fn text_infer(texts: &[&str], params: Value) -> Value {
    json!({
        "inputs": [{"name": "text", "shape": [texts.len()], "datatype": "BYTES", "data": texts}],
        "parameters": params,
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repository_serves_each_model_and_version_and_isolates_a_corrupt_one() {
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path();
    place(repo, "tags", 1, &feature_bundle());
    place(repo, "tags", 2, &text_bundle());
    place(repo, "small", 1, &feature_bundle());
    std::fs::create_dir_all(repo.join(".hidden/1")).unwrap();
    let state = AppState::new(repo_config(repo)).unwrap();
    xmc::serve::reload_now(&state).await.unwrap();
    let snap = state.repo.load_full();
    assert_eq!(snap.names(), vec!["small", "tags"]);
    // latest:1: only tags' version 2.
    assert_eq!(snap.versions("tags").unwrap().len(), 1);
    let tags2 = snap.get("tags", None).unwrap().clone();
    assert_eq!(tags2.version, 2);

    // /v1 answers for the first name (small, a feature model); /v1/models/{name} for any.
    let features = json!({"features": [[0, 1.0]], "k": 3});
    let (s, _) = json_call(&state, "POST", "/v1/predict", Some(features.clone())).await;
    assert_eq!(s, StatusCode::OK);
    let text = json!({"text": "GTK+ image viewer written in Python", "k": 3});
    let (s, v) = json_call(&state, "POST", "/v1/models/tags/predict", Some(text)).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["names"].as_array().unwrap().len(), 3);
    let (s, v) = json_call(&state, "POST", "/v1/models/nope/predict", Some(features)).await;
    assert_eq!(
        (s, &v["error"]["code"]),
        (StatusCode::NOT_FOUND, &json!("unknown_model"))
    );

    // A corrupt version 3 of tags is refused and counted; tags keeps version 2, small is
    // untouched.
    let small = snap.get("small", None).unwrap().clone();
    // The test's own snapshot would hold every version it lists.
    drop(snap);
    let dir3 = repo.join("tags/3");
    std::fs::create_dir_all(&dir3).unwrap();
    let bytes = std::fs::read(text_bundle()).unwrap();
    std::fs::write(dir3.join("model.xmcb"), &bytes[..bytes.len() / 2]).unwrap();
    let err = repository::load_now(&state, Trigger::Explicit)
        .await
        .unwrap_err();
    assert!(err.contains("tags/3"), "{err}");
    let snap = state.repo.load_full();
    assert!(Arc::ptr_eq(snap.get("tags", None).unwrap(), &tags2));
    assert!(Arc::ptr_eq(snap.get("small", None).unwrap(), &small));
    let metrics = state.metrics.render();
    assert!(
        metrics.contains("xmc_model_load_failures_total{model=\"tags\"}"),
        "{metrics}"
    );
    // The poller does not retry the same broken file.
    let polled = repository::load_now(&state, Trigger::Poll).await.unwrap();
    assert_eq!(polled, xmc::serve::ReloadOutcome::Unchanged);

    // Version 2 removed: latest:1 falls back past the corrupt 3 to version 1, and version 2 is
    // released once the request holding it ends.
    let held = Arc::downgrade(&tags2);
    drop((snap, tags2));
    std::fs::remove_dir_all(repo.join("tags/2")).unwrap();
    assert!(
        repository::load_now(&state, Trigger::Explicit)
            .await
            .is_err()
    );
    assert_eq!(state.repo.load().get("tags", None).unwrap().version, 1);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while held.strong_count() > 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "version 2 never released"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }

    // A model's own policy: every version of small.
    place(repo, "small", 2, &feature_bundle());
    std::fs::write(repo.join("small/model.toml"), "version_policy = \"all\"\n").unwrap();
    std::fs::remove_dir_all(&dir3).unwrap();
    repository::load_now(&state, Trigger::Explicit)
        .await
        .unwrap();
    let versions: Vec<u64> = state
        .repo
        .load()
        .versions("small")
        .unwrap()
        .iter()
        .map(|l| l.version)
        .collect();
    assert_eq!(versions, vec![1, 2]);
    let (s, v) = json_call(&state, "GET", "/v2/models/small", None).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(v["versions"], json!(["1", "2"]));
    let (s, _) = json_call(&state, "GET", "/v2/models/small/versions/1/ready", None).await;
    assert_eq!(s, StatusCode::OK);
    let (s, v) = json_call(&state, "GET", "/v2/models/small/versions/7/ready", None).await;
    assert_eq!(s, StatusCode::NOT_FOUND, "{v}");

    // A model directory that goes away leaves the repository.
    std::fs::remove_dir_all(repo.join("small")).unwrap();
    repository::load_now(&state, Trigger::Explicit)
        .await
        .unwrap();
    assert_eq!(state.repo.load().names(), vec!["tags"]);
}

/// A repository holding the text model as `tags` version 1 and the feature model as `small`.
async fn two_models() -> (tempfile::TempDir, Arc<AppState>) {
    let dir = tempfile::tempdir().unwrap();
    place(dir.path(), "tags", 1, &text_bundle());
    place(dir.path(), "small", 1, &feature_bundle());
    let mut cfg = repo_config(dir.path());
    cfg.default_model = Some("tags".into());
    let state = AppState::new(cfg).unwrap();
    xmc::serve::reload_now(&state).await.unwrap();
    (dir, state)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_v2_routes_answer_metadata_and_inference_in_json_and_binary() {
    let (_dir, state) = two_models().await;
    let (s, v) = json_call(&state, "GET", "/v2", None).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(v["name"], "xmc");
    for path in [
        "/v2/health/live",
        "/v2/health/ready",
        "/v2/models/tags/ready",
    ] {
        let (s, _) = json_call(&state, "GET", path, None).await;
        assert_eq!(s, StatusCode::OK, "{path}");
    }
    let (s, v) = json_call(&state, "GET", "/v2/models/tags", None).await;
    assert_eq!(s, StatusCode::OK);
    let inputs: Vec<&str> = v["inputs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        inputs,
        ["text", "feature_ids", "feature_values", "row_offsets"]
    );
    let (_, v) = json_call(&state, "GET", "/v2/models/small", None).await;
    let outputs: Vec<&str> = v["outputs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["name"].as_str().unwrap())
        .collect();
    assert_eq!(outputs, ["labels", "scores"], "{v}");

    // Text, JSON: two rows, k = 4, every output.
    let req = text_infer(
        &["GTK+ image viewer written in Python", "a web browser"],
        json!({"k": 4}),
    );
    let (s, v) = json_call(&state, "POST", "/v2/models/tags/infer", Some(req)).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["model_name"], "tags");
    assert_eq!(v["model_version"], "1");
    assert_eq!(v["outputs"][0]["shape"], json!([2, 4]));
    assert_eq!(v["outputs"][2]["name"], "names");

    // Features, JSON, with a subset of outputs and classification.
    let req = json!({
        "id": "r1",
        "inputs": [
            {"name": "feature_ids", "shape": [3], "datatype": "INT32", "data": [0, 5, 9]},
            {"name": "feature_values", "shape": [3], "datatype": "FP32", "data": [1.0, 0.5, 0.5]},
            {"name": "row_offsets", "shape": [3], "datatype": "INT64", "data": [0, 1, 3]},
        ],
        "outputs": [{"name": "scores", "parameters": {"classification": 2}}, {"name": "labels"}],
    });
    let (s, v) = json_call(
        &state,
        "POST",
        "/v2/models/small/versions/1/infer",
        Some(req),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["id"], "r1");
    let class = v["outputs"][0]["data"].as_array().unwrap();
    assert_eq!(v["outputs"][0]["shape"], json!([2, 2]));
    let first: Vec<&str> = class[0].as_str().unwrap().split(':').collect();
    assert_eq!(first.len(), 2, "a model without names: score:index");
    assert_eq!(
        first[1].parse::<i64>().unwrap(),
        v["outputs"][1]["data"][0].as_i64().unwrap()
    );

    // Binary in and out: the text as length-prefixed BYTES, every output binary.
    let doc = b"GTK+ image viewer written in Python";
    let mut raw = (doc.len() as u32).to_le_bytes().to_vec();
    raw.extend_from_slice(doc);
    let head = json!({
        "inputs": [{"name": "text", "shape": [1], "datatype": "BYTES",
                    "parameters": {"binary_data_size": raw.len()}}],
        "parameters": {"binary_data_output": true, "k": 3},
    })
    .to_string();
    let mut body = head.clone().into_bytes();
    body.extend_from_slice(&raw);
    let h = [("inference-header-content-length", head.len().to_string())];
    let (s, bytes, len) = send(&state, "POST", "/v2/models/tags/infer", &h, body.clone()).await;
    assert_eq!(s, StatusCode::OK, "{}", String::from_utf8_lossy(&bytes));
    let len = len.unwrap();
    let head: Value = serde_json::from_slice(&bytes[..len]).unwrap();
    let sizes: Vec<u64> = head["outputs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["parameters"]["binary_data_size"].as_u64().unwrap())
        .collect();
    assert_eq!(&sizes[..2], &[24, 12]);
    assert_eq!(bytes.len() - len, sizes.iter().sum::<u64>() as usize);

    // A binary section shorter than the header says: 400.
    let h = [(
        "inference-header-content-length",
        (head.to_string().len() * 4).to_string(),
    )];
    let (s, _, _) = send(&state, "POST", "/v2/models/tags/infer", &h, body.clone()).await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_bad_v2_request_is_a_4xx_with_an_error_string() {
    let (_dir, state) = two_models().await;
    let text = |t: &str| json!([{"name": "text", "shape": [1], "datatype": "BYTES", "data": [t]}]);
    let triple = |ids: Value, vals: Value, offs: Value| {
        json!([
            {"name": "feature_ids", "shape": [ids.as_array().unwrap().len()], "datatype": "INT64", "data": ids},
            {"name": "feature_values", "shape": [vals.as_array().unwrap().len()], "datatype": "FP32", "data": vals},
            {"name": "row_offsets", "shape": [offs.as_array().unwrap().len()], "datatype": "INT64", "data": offs},
        ])
    };
    let cases: Vec<(&str, Value, u16)> = vec![
        ("/v2/models/nope/infer", json!({"inputs": text("x")}), 404),
        (
            "/v2/models/tags/versions/9/infer",
            json!({"inputs": text("x")}),
            404,
        ),
        // A version is written as its directory is: "01" names none; one past any directory
        // names no version that serves.
        (
            "/v2/models/tags/versions/01/infer",
            json!({"inputs": text("x")}),
            400,
        ),
        (
            "/v2/models/tags/versions/99999999999999999999999/infer",
            json!({"inputs": text("x")}),
            404,
        ),
        (
            "/v2/models/tags/versions/zero/infer",
            json!({"inputs": text("x")}),
            400,
        ),
        ("/v2/models/tags/infer", json!({"inputs": []}), 400),
        (
            "/v2/models/tags/infer",
            json!({"inputs": [{"name": "txt", "shape": [1], "datatype": "BYTES", "data": ["x"]}]}),
            400,
        ),
        (
            "/v2/models/tags/infer",
            json!({"inputs": text("x"), "outputs": [{"name": "probs"}]}),
            400,
        ),
        (
            "/v2/models/tags/infer",
            json!({"inputs": [{"name": "text", "shape": [1], "datatype": "FP32", "data": [1.0]}]}),
            400,
        ),
        (
            "/v2/models/tags/infer",
            json!({"inputs": [{"name": "text", "shape": [2], "datatype": "BYTES", "data": ["x"]}]}),
            400,
        ),
        (
            "/v2/models/tags/infer",
            json!({"inputs": [{"name": "text", "shape": [1, 2], "datatype": "BYTES", "data": ["x", "y"]}]}),
            400,
        ),
        (
            "/v2/models/small/infer",
            json!({"inputs": triple(json!([1, 2]), json!([1.0]), json!([0, 2]))}),
            400,
        ),
        (
            "/v2/models/small/infer",
            json!({"inputs": triple(json!([1, 2]), json!([1.0, 1.0]), json!([0, 3]))}),
            400,
        ),
        (
            "/v2/models/small/infer",
            json!({"inputs": triple(json!([99999999]), json!([1.0]), json!([0, 1]))}),
            400,
        ),
        ("/v2/models/small/infer", json!({"inputs": text("x")}), 400),
        (
            "/v2/models/small/infer",
            json!({"inputs": triple(json!([1]), json!([1.0]), json!([0, 1])), "outputs": [{"name": "names"}]}),
            400,
        ),
        (
            "/v2/models/tags/infer",
            json!({"inputs": text("x"), "parameters": {"k": 0}}),
            400,
        ),
        (
            "/v2/models/tags/infer",
            json!({"inputs": text("x"), "parameters": {"kk": 1}}),
            400,
        ),
        (
            "/v2/models/tags/infer",
            json!({"inputs": text("x"), "parameters": {"text": "y"}}),
            400,
        ),
        (
            "/v2/models/tags/infer",
            json!({"inputs": text("x"), "parameters": {"triton_enable_empty_final_response": 1}}),
            400,
        ),
        (
            "/v2/models/tags/infer",
            json!({"inputs": text("x"), "outputs": [{"name": "labels", "parameters": {"classification": 1000}}]}),
            400,
        ),
    ];
    for (uri, body, want) in cases {
        let (s, v) = json_call(&state, "POST", uri, Some(body.clone())).await;
        assert_eq!(s.as_u16(), want, "{uri} {body}: {v}");
        assert!(v["error"].is_string(), "{v}");
    }
    // Triton's decoupled-model flag (perf_analyzer sends it over gRPC) changes nothing here.
    let plain = json!({"inputs": text("rust compiler"), "parameters": {"k": 3}});
    let flagged = json!({"inputs": text("rust compiler"),
        "parameters": {"k": 3, "triton_enable_empty_final_response": false}});
    let (s1, a) = json_call(&state, "POST", "/v2/models/tags/infer", Some(plain)).await;
    let (s2, b) = json_call(&state, "POST", "/v2/models/tags/infer", Some(flagged)).await;
    assert_eq!((s1, s2), (StatusCode::OK, StatusCode::OK), "{a} {b}");
    assert_eq!(a["outputs"], b["outputs"]);
    // Not JSON, and a body over the limit.
    let (s, bytes, _) = send(&state, "POST", "/v2/models/tags/infer", &[], b"{".to_vec()).await;
    assert_eq!(
        s,
        StatusCode::BAD_REQUEST,
        "{}",
        String::from_utf8_lossy(&bytes)
    );
    let big = vec![b' '; (1 << 20) + 1];
    let (s, bytes, _) = send(&state, "POST", "/v2/models/tags/infer", &[], big).await;
    assert_eq!(s, StatusCode::PAYLOAD_TOO_LARGE);
    assert!(serde_json::from_slice::<Value>(&bytes).unwrap()["error"].is_string());
}

/// The vendored debian-tags-text test documents.
fn test_documents() -> Vec<String> {
    let file =
        std::fs::File::open(root().join("tests/data/debian-tags-text/test.jsonl.gz")).unwrap();
    let mut text = String::new();
    flate2::read::GzDecoder::new(file)
        .read_to_string(&mut text)
        .unwrap();
    text.lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["text"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v2_json_and_binary_answer_the_labels_and_bit_identical_scores_of_v1() {
    let (_dir, state) = two_models().await;
    let docs = test_documents();
    assert!(docs.len() >= 1000, "{}", docs.len());
    for doc in &docs {
        let (s, v1) = json_call(
            &state,
            "POST",
            "/v1/predict",
            Some(json!({"text": doc, "k": 5})),
        )
        .await;
        assert_eq!(s, StatusCode::OK);
        let labels1: Vec<i64> = v1["labels"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_i64().unwrap())
            .collect();
        let scores1: Vec<u32> = v1["scores"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| (x.as_f64().unwrap() as f32).to_bits())
            .collect();

        let req = text_infer(&[doc], json!({"k": 5}));
        let (s, v2) = json_call(&state, "POST", "/v2/models/tags/infer", Some(req)).await;
        assert_eq!(s, StatusCode::OK);
        let labels2: Vec<i64> = v2["outputs"][0]["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_i64().unwrap())
            .take(labels1.len())
            .collect();
        let scores2: Vec<u32> = v2["outputs"][1]["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| (x.as_f64().unwrap() as f32).to_bits())
            .take(labels1.len())
            .collect();
        assert_eq!((&labels2, &scores2), (&labels1, &scores1), "{doc}");

        let head = json!({
            "inputs": [{"name": "text", "shape": [1], "datatype": "BYTES",
                        "parameters": {"binary_data_size": doc.len() + 4}}],
            "outputs": [{"name": "labels", "parameters": {"binary_data": true}},
                        {"name": "scores", "parameters": {"binary_data": true}}],
            "parameters": {"k": 5},
        })
        .to_string();
        let mut body = head.clone().into_bytes();
        body.extend_from_slice(&(doc.len() as u32).to_le_bytes());
        body.extend_from_slice(doc.as_bytes());
        let h = [("inference-header-content-length", head.len().to_string())];
        let (s, bytes, len) = send(&state, "POST", "/v2/models/tags/infer", &h, body).await;
        assert_eq!(s, StatusCode::OK);
        let raw = &bytes[len.unwrap()..];
        let width = raw.len() / 12;
        let labels3: Vec<i64> = raw[..8 * width]
            .chunks(8)
            .map(|c| i64::from_le_bytes(c.try_into().unwrap()))
            .take(labels1.len())
            .collect();
        let scores3: Vec<u32> = raw[8 * width..]
            .chunks(4)
            .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
            .take(labels1.len())
            .collect();
        assert_eq!((&labels3, &scores3), (&labels1, &scores1), "{doc}");
    }
}

/// A repository call with the admin token (or `token`), answering status and JSON.
async fn admin_call(
    state: &Arc<AppState>,
    uri: &str,
    token: Option<&str>,
    body: &str,
) -> (StatusCode, Value) {
    let headers: Vec<(&str, String)> = token
        .map(|t| vec![("authorization", format!("Bearer {t}"))])
        .unwrap_or_default();
    let (status, bytes, _) = send(state, "POST", uri, &headers, body.as_bytes().to_vec()).await;
    let value = serde_json::from_slice(&bytes)
        .unwrap_or_else(|_| panic!("not JSON: {}", String::from_utf8_lossy(&bytes)));
    (status, value)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_repository_extension_indexes_loads_and_unloads_behind_the_admin_token() {
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path();
    place(repo, "tags", 1, &text_bundle());
    place(repo, "small", 1, &feature_bundle());
    let mut cfg = repo_config(repo);
    cfg.admin_token = Some("s3cret".into());
    let state = AppState::new(cfg).unwrap();
    xmc::serve::reload_now(&state).await.unwrap();
    let key = Some("s3cret");

    // Without the token, or with a wrong one: 401 and nothing happens.
    let (s, v) = admin_call(&state, "/v2/repository/models/tags/unload", None, "").await;
    assert_eq!(s, StatusCode::UNAUTHORIZED, "{v}");
    assert!(v["error"].is_string(), "{v}");
    let (s, _) = admin_call(&state, "/v2/repository/index", Some("wrong"), "{}").await;
    assert_eq!(s, StatusCode::UNAUTHORIZED);
    assert!(state.repo.load().get("tags", None).is_ok());

    // The index lists both models, ready.
    let (s, v) = admin_call(&state, "/v2/repository/index", key, "").await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(
        v,
        json!([
            {"name": "small", "version": "1", "state": "READY", "reason": ""},
            {"name": "tags", "version": "1", "state": "READY", "reason": ""},
        ])
    );

    // Unload tags: its requests get 404, small goes on, and a scan does not bring it back.
    let body = r#"{"parameters": {"unload_dependents": false}}"#;
    let (s, v) = admin_call(&state, "/v2/repository/models/tags/unload", key, body).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let (s, _) = json_call(
        &state,
        "POST",
        "/v2/models/tags/infer",
        Some(text_infer(&["gtk"], json!({}))),
    )
    .await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    let (s, _) = json_call(&state, "GET", "/v2/models/small/ready", None).await;
    assert_eq!(s, StatusCode::OK);
    repository::load_now(&state, Trigger::Explicit)
        .await
        .unwrap();
    assert!(state.repo.load().get("tags", None).is_err());
    let (_, v) = admin_call(&state, "/v2/repository/index", key, "").await;
    assert_eq!(v[1]["state"], "UNAVAILABLE", "{v}");
    assert_eq!(v[1]["reason"], "unloaded by request", "{v}");
    let (_, v) = admin_call(&state, "/v2/repository/index", key, r#"{"ready": true}"#).await;
    assert_eq!(v.as_array().unwrap().len(), 1, "{v}");

    // Load brings it back, and scans serve it again.
    let (s, v) = admin_call(&state, "/v2/repository/models/tags/load", key, "").await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let (s, v) = json_call(
        &state,
        "POST",
        "/v2/models/tags/infer",
        Some(text_infer(&["gtk"], json!({}))),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{v}");

    // A corrupt new version is refused by load with 400 and its reason; version 1 serves on,
    // and the index says why version 2 is unavailable.
    let dir2 = repo.join("tags/2");
    std::fs::create_dir_all(&dir2).unwrap();
    let bytes = std::fs::read(text_bundle()).unwrap();
    std::fs::write(dir2.join("model.xmcb"), &bytes[..bytes.len() / 3]).unwrap();
    let (s, v) = admin_call(&state, "/v2/repository/models/tags/load", key, "").await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{v}");
    assert!(v["error"].as_str().unwrap().contains("tags/2"), "{v}");
    assert_eq!(state.repo.load().get("tags", None).unwrap().version, 1);
    let (_, v) = admin_call(&state, "/v2/repository/index", key, "").await;
    let row = v
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["version"] == "2" && r["name"] == "tags")
        .unwrap()
        .clone();
    assert_eq!(row["state"], "UNAVAILABLE", "{v}");
    assert!(row["reason"].as_str().unwrap().contains("tags/2"), "{row}");

    // Unknown models, bodies and parameters.
    for (uri, body, want) in [
        ("/v2/repository/models/nope/load", "", StatusCode::NOT_FOUND),
        (
            "/v2/repository/models/nope/unload",
            "",
            StatusCode::NOT_FOUND,
        ),
        (
            "/v2/repository/index",
            "{\"ready\": 3}",
            StatusCode::BAD_REQUEST,
        ),
        ("/v2/repository/index", "not json", StatusCode::BAD_REQUEST),
        // serde would read the body's struct from an array of its fields.
        (
            "/v2/repository/index",
            "[null, null]",
            StatusCode::BAD_REQUEST,
        ),
        (
            "/v2/repository/models/tags/load",
            r#"{"parameters": {"config": "{}"}}"#,
            StatusCode::BAD_REQUEST,
        ),
    ] {
        let (s, v) = admin_call(&state, uri, key, body).await;
        assert_eq!(s, want, "{uri} {body}: {v}");
        assert!(v["error"].is_string(), "{v}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn model_config_lists_the_metadata_tensors_in_configuration_terms() {
    let (_dir, state) = two_models().await;
    let (s, v) = json_call(&state, "GET", "/v2/models/tags/config", None).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["name"], "tags");
    assert_eq!(v["max_batch_size"], 0);
    let (_, meta) = json_call(&state, "GET", "/v2/models/tags", None).await;
    let names = |list: &Value, key: &str| -> Vec<String> {
        list.as_array()
            .unwrap()
            .iter()
            .map(|t| t[key].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(names(&v["input"], "name"), names(&meta["inputs"], "name"));
    assert_eq!(names(&v["output"], "name"), names(&meta["outputs"], "name"));
    assert_eq!(
        v["input"][0],
        json!({"name": "text", "data_type": "TYPE_STRING", "dims": [-1], "optional": true})
    );
    assert!(
        v["input"]
            .as_array()
            .unwrap()
            .iter()
            .all(|i| i["optional"] == true)
    );
    assert_eq!(v["output"][0]["data_type"], "TYPE_INT64");
    let (s, _) = json_call(&state, "GET", "/v2/models/small/versions/1/config", None).await;
    assert_eq!(s, StatusCode::OK);
    let (s, _) = json_call(&state, "GET", "/v2/models/small/versions/9/config", None).await;
    assert_eq!(s, StatusCode::NOT_FOUND);
}

/// `/readyz` answers ready while any repository model serves, so that unloading one model does
/// not take the pod out of its Service; without `default_model`, the `/v1` default is the first
/// model in sorted order that serves, past one whose only version is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_follows_any_serving_model_and_the_default_skips_a_model_not_serving() {
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path();
    let bytes = std::fs::read(text_bundle()).unwrap();
    std::fs::create_dir_all(repo.join("aaa/1")).unwrap();
    std::fs::write(repo.join("aaa/1/model.xmcb"), &bytes[..bytes.len() / 2]).unwrap();
    place(repo, "small", 1, &feature_bundle());
    place(repo, "tags", 1, &text_bundle());

    let state = AppState::new(repo_config(repo)).unwrap();
    let err = xmc::serve::reload_now(&state).await.unwrap_err();
    assert!(err.contains("aaa/1"), "{err}");
    let small = state.repo.load().get("small", None).unwrap().clone();
    let (s, v) = json_call(&state, "GET", "/readyz", None).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(
        v["version"].as_str(),
        Some(small.model.meta().version.as_str())
    );
    let features = json!({"features": [[0, 1.0]], "k": 3});
    let (s, v) = json_call(&state, "POST", "/v1/predict", Some(features.clone())).await;
    assert_eq!(s, StatusCode::OK, "{v}");

    let mut cfg = repo_config(repo);
    cfg.admin_token = Some("s3cret".into());
    cfg.default_model = Some("tags".into());
    let state = AppState::new(cfg).unwrap();
    assert!(xmc::serve::reload_now(&state).await.is_err());
    let key = Some("s3cret");
    let (s, v) = admin_call(&state, "/v2/repository/models/tags/unload", key, "").await;
    assert_eq!(s, StatusCode::OK, "{v}");
    // The default is gone: /v1 has nothing to answer with, but small serves, so the pod is ready.
    let (s, v) = json_call(&state, "GET", "/readyz", None).await;
    assert_eq!(
        (s, v["status"].as_str()),
        (StatusCode::OK, Some("ready")),
        "{v}"
    );
    assert!(v.get("version").is_none(), "{v}");
    let (s, _) = json_call(&state, "POST", "/v1/predict", Some(features)).await;
    assert_eq!(s, StatusCode::SERVICE_UNAVAILABLE);
    let (s, v) = admin_call(&state, "/v2/repository/models/small/unload", key, "").await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let (s, v) = json_call(&state, "GET", "/readyz", None).await;
    assert_eq!(s, StatusCode::SERVICE_UNAVAILABLE, "{v}");
}
