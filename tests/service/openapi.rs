//! `openapi.json` is the document generated from the API's types, and the server serves it.
//!
//! `XMC_BLESS=1 cargo test --test service openapi` rewrites `openapi.json` from the types first. The
//! server serves the copy compiled into it, so the served-document test passes from the next
//! build on.

use axum::body::Body;
use axum::http::{Request, StatusCode};
use http_body_util::BodyExt;
use serde_json::{Value, json};
use tower::ServiceExt;
use xmc::serve::{AppState, ServeConfig, app, openapi};

const PATH: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/openapi.json");

#[test]
fn the_committed_openapi_json_is_the_generated_document() {
    let generated = openapi::document_text();
    if std::env::var_os("XMC_BLESS").is_some() {
        std::fs::write(PATH, &generated).expect("writing openapi.json");
    }
    let committed = std::fs::read_to_string(PATH).expect("openapi.json");
    assert!(
        committed == generated,
        "openapi.json is not the document the API's types generate; rewrite it with \
         `XMC_BLESS=1 cargo test --test service openapi`"
    );
}

#[tokio::test]
async fn the_server_serves_the_committed_document_with_its_limits() {
    // No model is loaded, so the only edits are the two limits of this server's config.
    let mut cfg = ServeConfig::defaults();
    cfg.model = std::env::temp_dir().join("xmc-openapi-test-no-such-model.xmcb");
    cfg.poll_interval_ms = 0;
    cfg.max_k = 20;
    cfg.max_batch = 4;
    let state = AppState::new(cfg).expect("state");
    let req = Request::builder()
        .uri("/openapi.json")
        .body(Body::empty())
        .expect("request");
    let resp = app(state).oneshot(req).await.expect("answer");
    assert_eq!(resp.status(), StatusCode::OK);
    let bytes = resp.into_body().collect().await.expect("body").to_bytes();
    let mut served: Value = serde_json::from_slice(&bytes).expect("JSON");

    let k = "/components/schemas/PredictRequest/properties/k/maximum";
    assert_eq!(served.pointer(k), Some(&json!(20)));
    let instances = "/paths/~1v1~1predict~1batch/post/requestBody/content/application~1json/\
                     schema/properties/instances";
    let limits = served
        .pointer_mut(instances)
        .and_then(Value::as_object_mut)
        .expect("instances");
    assert_eq!(limits.remove("maxItems"), Some(json!(4)));
    let committed: Value =
        serde_json::from_str(&std::fs::read_to_string(PATH).expect("openapi.json")).expect("JSON");
    *served.pointer_mut(k).expect("k") = committed.pointer(k).expect("k's maximum").clone();
    assert_eq!(first_difference(&served, &committed, ""), None);
}

/// Where two JSON values first differ, as a JSON pointer with both sides; `None` if they are
/// equal.
fn first_difference(a: &Value, b: &Value, at: &str) -> Option<String> {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let keys: std::collections::BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            keys.into_iter().find_map(|k| {
                let here = format!("{at}/{}", k.replace('~', "~0").replace('/', "~1"));
                match (x.get(k), y.get(k)) {
                    (Some(v), Some(w)) => first_difference(v, w, &here),
                    (v, w) => Some(format!("{here}: {v:?} against {w:?}")),
                }
            })
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => x
            .iter()
            .zip(y)
            .enumerate()
            .find_map(|(i, (v, w))| first_difference(v, w, &format!("{at}/{i}"))),
        // serde_json's default float parsing may miss the last bit of a long literal (it is
        // not correctly rounded), so a float that went through one more print and parse can
        // differ there.
        (Value::Number(x), Value::Number(y)) if x.is_f64() || y.is_f64() => {
            let (x, y) = (
                x.as_f64().unwrap_or(f64::NAN),
                y.as_f64().unwrap_or(f64::NAN),
            );
            ((x - y).abs() > 1e-15 * x.abs().max(y.abs()))
                .then(|| format!("{at}: {x:e} against {y:e}"))
        }
        _ => (a != b).then(|| format!("{at}: {a} against {b}")),
    }
}
