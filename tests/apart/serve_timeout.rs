//! Requests that outlast `request_timeout_ms`, or whose client hangs up, through `app()` with
//! `oneshot`. Tokio's clock is paused: while a load runs on its own thread the runtime has
//! nothing to do, so the clock jumps to the next timer and the limit passes at once, whatever
//! the machine's speed. Kept apart from the servers of `tests/service/`, because
//! `xmc_inflight_requests` is one gauge per process.
#![allow(clippy::unwrap_used)]

use crate::common;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use http_body_util::BodyExt;
use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;
use tower::ServiceExt;
use xmc::serve::{AppState, ServeConfig, app};

fn reload_request() -> Request<Body> {
    Request::builder()
        .method("POST")
        .uri("/v1/admin/reload")
        .header("authorization", "Bearer t")
        .body(Body::empty())
        .unwrap()
}

async fn get(state: &Arc<AppState>, uri: &str) -> Vec<u8> {
    let req = Request::builder().uri(uri).body(Body::empty()).unwrap();
    let resp = app(state.clone()).oneshot(req).await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    resp.into_body()
        .collect()
        .await
        .unwrap()
        .to_bytes()
        .to_vec()
}

async fn serving_version(state: &Arc<AppState>) -> String {
    let v: Value = serde_json::from_slice(&get(state, "/v1/model").await).unwrap();
    v["model"]["meta"]["version"].as_str().unwrap().to_string()
}

/// Waits, in real time and without asking for a load, until `version` is serving.
async fn until_serving(state: &Arc<AppState>, version: &str) {
    for _ in 0..3000 {
        if serving_version(state).await == version {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
        tokio::task::yield_now().await;
    }
    panic!("{version} was not published within 30 s");
}

/// Writes a model trained with `seed` to `path` through a rename; returns its version.
fn publish(path: &std::path::Path, seed: u64) -> String {
    let train = common::load("Corel5k", "train");
    let t = common::train_with(&train, &[&format!("seed={seed}"), "max_leaf=60"]);
    let tmp = path.with_extension("tmp");
    t.write(&tmp).unwrap();
    std::fs::rename(&tmp, path).unwrap();
    t.meta.version.clone()
}

/// A reload past the limit is answered 408 with the usual error body and still publishes its
/// model; a client that hangs up mid-reload does not stop it either. Both are counted, and
/// neither stays in `xmc_inflight_requests`.
#[tokio::test(start_paused = true)]
async fn a_reload_past_the_limit_is_answered_408_and_still_lands() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("model.xmcb");
    let first = publish(&path, 1);
    let mut cfg = ServeConfig::defaults();
    cfg.model = path.clone();
    cfg.poll_interval_ms = 0;
    cfg.admin_token = Some("t".into());
    let state = AppState::new(cfg).unwrap();
    xmc::serve::reload_now(&state).await.unwrap();
    assert_eq!(serving_version(&state).await, first);

    let second = publish(&path, 2);
    let resp = app(state.clone()).oneshot(reload_request()).await.unwrap();
    assert_eq!(resp.status(), StatusCode::REQUEST_TIMEOUT);
    let body: Value =
        serde_json::from_slice(&resp.into_body().collect().await.unwrap().to_bytes()).unwrap();
    assert_eq!(body["error"]["code"], "timeout", "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("2000 ms"), "{message}");
    assert!(message.contains("GET /v1/model"), "{message}");
    until_serving(&state, &second).await;

    // A client that hangs up: its request's future is dropped mid-load.
    let third = publish(&path, 3);
    let gone = tokio::time::timeout(
        Duration::from_millis(1),
        app(state.clone()).oneshot(reload_request()),
    )
    .await;
    assert!(gone.is_err(), "the reload answered before the client left");
    until_serving(&state, &third).await;

    let text = String::from_utf8(get(&state, "/metrics").await).unwrap();
    assert!(
        text.contains(r#"xmc_requests_total{route="/v1/admin/reload",status="408"} 1"#),
        "{text}"
    );
    // Only the scrape itself is in flight.
    assert!(text.contains("xmc_inflight_requests 1\n"), "{text}");
}
