//! `xmc serve`: the HTTP API over an atomically swappable model.
//!
//! Only this module knows HTTP and the JSON shapes of the API. [`app`] builds the router from an
//! [`AppState`], so tests drive it with `oneshot` and no socket. The model is an immutable
//! snapshot behind an `ArcSwapOption`: a request takes the current `Arc` once and finishes on it,
//! whatever is published meanwhile, and the old model's memory map is dropped when its last
//! request ends. Loads (polling the model path, or `POST /v1/admin/reload`) open, validate,
//! pre-fault and warm the new bundle off the async threads before publishing it; a failed load
//! keeps the old model, is logged and counted, and shows in `GET /v1/model`.

pub mod config;
mod conn;
mod error;
pub mod grpc;
pub mod heap;
mod layers;
mod reload;
pub mod repository;
mod routes;
mod start;
mod state;
mod telemetry;
pub mod v2;

pub use config::{
    LoadChecks, LogFormat, ServeConfig, ServeConfigError, SinglePredict, VersionPolicy,
};
pub use error::ApiError;
pub use reload::{FileSig, Loaded, ReloadOutcome, ScratchPool, Trigger, VersionMetrics};
pub use repository::Snapshot;
pub use routes::openapi;
pub use start::run;
pub use state::{AppState, ReloadStatus, reload_now};
pub use telemetry::metrics_handle;

use layers::*;
use telemetry::*;

use crate::model::ScratchSizes;
use arc_swap::ArcSwap;
use axum::Router;
use axum::extract::{DefaultBodyLimit, MatchedPath, Request, State};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use futures_util::FutureExt;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer};
use tower_http::trace::TraceLayer;

/// The API router. `/metrics` is included unless the config puts it on its own port (then see
/// [`metrics_app`]).
pub fn app(state: Arc<AppState>) -> Router {
    let mut router = Router::new()
        .route("/v1/predict", post(routes::predict))
        .route("/v1/predict/batch", post(routes::predict_batch))
        .route("/v1/models/{name}/predict", post(routes::predict_named))
        .route("/v1/model", get(routes::model_info))
        .route(RELOAD_ROUTE, post(routes::admin_reload))
        .route("/healthz", get(routes::healthz))
        .route("/readyz", get(routes::readyz))
        .route("/openapi.json", get(routes::openapi))
        .route("/v2", get(v2::server_metadata))
        .route("/v2/health/live", get(v2::live))
        .route("/v2/health/ready", get(v2::ready))
        .route("/v2/models/{name}", get(v2::model_metadata))
        .route("/v2/models/{name}/ready", get(v2::model_ready))
        .route("/v2/models/{name}/infer", post(v2::infer))
        .route("/v2/models/{name}/config", get(v2::model_config))
        .route(
            "/v2/models/{name}/versions/{version}/config",
            get(v2::model_config),
        )
        .route("/v2/repository/index", post(v2::repository_index))
        .route(
            "/v2/repository/models/{name}/load",
            post(v2::repository_load),
        )
        .route(
            "/v2/repository/models/{name}/unload",
            post(v2::repository_unload),
        )
        .route(
            "/v2/models/{name}/versions/{version}",
            get(v2::model_metadata),
        )
        .route(
            "/v2/models/{name}/versions/{version}/ready",
            get(v2::model_ready),
        )
        .route(
            "/v2/models/{name}/versions/{version}/infer",
            post(v2::infer),
        );
    if state.cfg.metrics_bind.is_none() {
        router = router.route("/metrics", get(routes::metrics));
    }
    with_layers(with_error_fallbacks(router), state)
}

/// An unknown path or a method its route does not take gets the error body (404 or 405), on
/// every router the server runs. Set after the last route: axum applies the method fallback to
/// the routes already added.
fn with_error_fallbacks(router: Router<Arc<AppState>>) -> Router<Arc<AppState>> {
    router
        .fallback(routes::not_found)
        .method_not_allowed_fallback(routes::method_not_allowed)
}

/// The layers every API route goes through, inside out: `track` (which also turns a handler's
/// panic into a counted 500), the body limit, tracing, the request id, and a panic layer for
/// the layers themselves.
fn with_layers(router: Router<Arc<AppState>>, state: Arc<AppState>) -> Router {
    let timeout = Duration::from_millis(state.cfg.request_timeout_ms);
    let limit = state.cfg.body_limit_bytes;
    router
        .layer(middleware::from_fn_with_state(timeout, track))
        .layer(DefaultBodyLimit::max(limit))
        .layer(
            TraceLayer::new_for_http().make_span_with(|req: &Request| {
                let id = req
                    .headers()
                    .get("x-request-id")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("-");
                tracing::info_span!("request", method = %req.method(), uri = %req.uri(), request_id = %id)
            }),
        )
        .layer(PropagateRequestIdLayer::x_request_id())
        .layer(SetRequestIdLayer::x_request_id(MakeRequestUuid))
        .layer(CatchPanicLayer::custom(panic_response))
        .with_state(state)
}

/// The router of the separate metrics port.
pub fn metrics_app(state: Arc<AppState>) -> Router {
    with_error_fallbacks(Router::new().route("/metrics", get(routes::metrics))).with_state(state)
}
#[cfg(test)]
mod tests {
    use super::start::*;
    use super::*;

    /// `GET path` on a connection of its own; the status line's code. Blocking I/O: the servers
    /// under test run on threads of their own.
    fn get(addr: std::net::SocketAddr, path: &str) -> String {
        use std::io::{Read, Write};
        let mut conn = std::net::TcpStream::connect(addr).unwrap();
        conn.set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let req = format!("GET {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n");
        conn.write_all(req.as_bytes()).unwrap();
        let mut reply = String::new();
        conn.read_to_string(&mut reply).unwrap();
        reply.split(' ').nth(1).unwrap_or("").to_string()
    }

    #[cfg(unix)]
    #[tokio::test]
    async fn per_core_servers_share_one_port_and_drain_on_stop() {
        let mut cfg = ServeConfig::defaults();
        cfg.bind = "127.0.0.1:0".into();
        let state = AppState::new(cfg).unwrap();
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        let (done_tx, mut done_rx) = tokio::sync::mpsc::unbounded_channel();
        let (n, addr) = serve_per_core(&state, stop_rx, &done_tx).unwrap();
        drop(done_tx);
        assert!(n >= 1 && addr.port() != 0, "{n} servers on {addr}");
        // Connections land on any of the listeners; every one answers.
        for _ in 0..4 * n {
            assert_eq!(get(addr, "/healthz"), "200");
        }
        assert_eq!(get(addr, "/readyz"), "503");
        stop_tx.send(true).unwrap();
        for _ in 0..n {
            let ended = tokio::time::timeout(Duration::from_secs(10), done_rx.recv()).await;
            assert!(matches!(ended, Ok(Some(Ok(())))), "{ended:?}");
        }
        // Every listener is closed: nothing accepts on the port any more.
        assert!(std::net::TcpStream::connect(addr).is_err());
    }

    #[cfg(unix)]
    #[tokio::test]
    async fn per_core_servers_refuse_a_port_in_use() {
        let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut cfg = ServeConfig::defaults();
        cfg.bind = taken.local_addr().unwrap().to_string();
        let state = AppState::new(cfg).unwrap();
        let (_stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        let (done_tx, _done_rx) = tokio::sync::mpsc::unbounded_channel();
        let err = serve_per_core(&state, stop_rx.clone(), &done_tx).unwrap_err();
        assert!(err.to_string().contains("in use"), "{err}");
        // Nor does a second per-core server share the first one's port.
        let mut cfg = ServeConfig::defaults();
        cfg.bind = "127.0.0.1:0".into();
        let first = AppState::new(cfg).unwrap();
        let (_, addr) = serve_per_core(&first, stop_rx.clone(), &done_tx).unwrap();
        let mut cfg = ServeConfig::defaults();
        cfg.bind = addr.to_string();
        let second = AppState::new(cfg).unwrap();
        assert!(serve_per_core(&second, stop_rx, &done_tx).is_err());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_warm_up_reaches_every_async_worker() {
        let state = AppState::new(ServeConfig::defaults()).unwrap();
        // No model yet: nothing to warm.
        assert_eq!(warm_threads(&state).await, 0);
        repository::load_now(&state, reload::Trigger::Explicit)
            .await
            .unwrap();
        // One warm-up on each of the two workers, not two on one.
        assert_eq!(warm_threads(&state).await, 2);
    }

    /// A swap to a model that needs more scratch space than the threads were sized for leaves
    /// a spare for each thread that predicts, and a thread's first request to it takes one; a
    /// swap within what every thread has makes none.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_swap_to_a_larger_model_hands_each_thread_a_spare_scratch_space() {
        use tower::ServiceExt;
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("model.xmcb");
        // Corel5k has 499 features; the default model (Bibtex) 1836.
        let mut ds =
            crate::data::read_xc_file(&root.join("tests/data/Corel5k/train.txt.gz")).unwrap();
        crate::data::l2_normalize_rows(&mut ds.features);
        let train = crate::config::TrainConfig::load(None, &["max_leaf=60".to_string()]).unwrap();
        crate::train::train(&ds, &train, Default::default(), &crate::train::Quiet)
            .unwrap()
            .write(&path)
            .unwrap();
        let mut cfg = ServeConfig::defaults();
        cfg.model = path.clone();
        cfg.poll_interval_ms = 0;
        cfg.pool_threads = 2;
        let state = AppState::new(cfg).unwrap();
        let current = || state.repo.load().default_model().cloned().unwrap();
        // One per core and two for the pool (the two async workers here may be more than the
        // cores: then the warm-up runs out of spares, and the last thread grows its own).
        let n = state.predict_threads();

        // The first load: no thread has scratch space yet, so each gets a spare, and the
        // warm-up hands them out (two workers, two pool threads).
        reload_now(&state).await.unwrap();
        let small = current();
        assert_eq!(small.scratch.spares(), n);
        assert_eq!(small.scratch.sizes.dense, 499);
        assert_eq!(warm_threads(&state).await, 2);
        assert_eq!(small.scratch.spares(), n.saturating_sub(4));
        assert_eq!(state.scratch_floor(), small.scratch.sizes);
        // The same shape again: every thread has room, so the load makes no spares.
        reload_now(&state).await.unwrap();
        assert_eq!(current().scratch.spares(), 0);

        let tmp = dir.path().join("model.xmcb.tmp");
        std::fs::copy(root.join("models/default.xmcb"), &tmp).unwrap();
        std::fs::rename(&tmp, &path).unwrap();
        reload_now(&state).await.unwrap();
        let large = current();
        assert_eq!(large.scratch.sizes.dense, 25817);
        assert!(!small.scratch.sizes.covers(&large.scratch.sizes));
        assert_eq!(large.scratch.spares(), n);
        // This test's own thread serves the requests below (`oneshot` runs the handler here).
        for left in [n - 1, n - 1] {
            let req = axum::http::Request::post("/v1/predict")
                .header("content-type", "application/json")
                .body(axum::body::Body::from(
                    r#"{"features":[[3,1.0],[1800,0.5]],"k":5}"#,
                ))
                .unwrap();
            let resp = app(state.clone()).oneshot(req).await.unwrap();
            assert_eq!(resp.status(), axum::http::StatusCode::OK);
            // The first request took a spare; the second found its scratch space big enough.
            assert_eq!(large.scratch.spares(), left);
        }
    }

    /// The separate metrics port answers other paths and methods with the API's error body.
    #[tokio::test]
    async fn the_metrics_port_answers_errors_in_the_api_shape() {
        use tower::ServiceExt;
        let state = AppState::new(ServeConfig::defaults()).unwrap();
        for (method, uri, status, code) in [
            ("GET", "/metrics", 200, None),
            ("GET", "/v1/predict", 404, Some("not_found")),
            ("POST", "/metrics", 405, Some("method_not_allowed")),
        ] {
            let req = axum::http::Request::builder()
                .method(method)
                .uri(uri)
                .body(axum::body::Body::empty())
                .unwrap();
            let resp = metrics_app(state.clone()).oneshot(req).await.unwrap();
            assert_eq!(resp.status().as_u16(), status, "{method} {uri}");
            let body = axum::body::to_bytes(resp.into_body(), 1 << 20)
                .await
                .unwrap();
            if let Some(code) = code {
                let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
                assert_eq!(body["error"]["code"], code, "{body}");
            }
        }
    }

    /// A handler that panics is answered with the error body, and `track` counts the 500.
    #[tokio::test]
    async fn a_handler_panic_is_answered_500_and_counted() {
        use tower::ServiceExt;
        let state = AppState::new(ServeConfig::defaults()).unwrap();
        let router = Router::new().route(
            "/test/panics",
            axum::routing::get(|| async {
                if std::hint::black_box(true) {
                    panic!("a handler that panics");
                }
                "unreachable"
            }),
        );
        let app = with_layers(router, state.clone());
        for n in 1..=2 {
            let req = axum::http::Request::get("/test/panics")
                .body(axum::body::Body::empty())
                .unwrap();
            let resp = app.clone().oneshot(req).await.unwrap();
            assert_eq!(resp.status(), axum::http::StatusCode::INTERNAL_SERVER_ERROR);
            let body = axum::body::to_bytes(resp.into_body(), 1 << 16)
                .await
                .unwrap();
            let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
            assert_eq!(body["error"]["code"], "internal", "{body}");
            let text = state.metrics.render();
            let line = format!("xmc_requests_total{{route=\"/test/panics\",status=\"500\"}} {n}\n");
            assert!(text.contains(&line), "{text}");
        }
    }

    #[tokio::test]
    async fn a_pool_job_that_panics_drops_its_reply_and_the_pool_goes_on() {
        // Without the pool's panic handler this would abort the whole test process.
        let state = AppState::new(ServeConfig::defaults()).unwrap();
        let (tx, rx) = tokio::sync::oneshot::channel::<u32>();
        state.pool.spawn(move || {
            let _reply = tx;
            panic!("a job that panics");
        });
        assert!(rx.await.is_err());
        let (tx, rx) = tokio::sync::oneshot::channel();
        state.pool.spawn(move || {
            let _ = tx.send(7u32);
        });
        assert_eq!(rx.await.unwrap(), 7);
    }
}
