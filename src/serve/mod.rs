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
mod error;
mod reload;
mod routes;

pub use config::{LoadChecks, LogFormat, ServeConfig, ServeConfigError, SinglePredict};
pub use error::ApiError;
pub use reload::{FileSig, Loaded, ReloadOutcome};

use arc_swap::ArcSwapOption;
use axum::Router;
use axum::extract::{DefaultBodyLimit, MatchedPath, Request};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer};
use tower_http::timeout::TimeoutLayer;
use tower_http::trace::TraceLayer;

/// What the last loads did, for `GET /v1/model`.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct ReloadStatus {
    /// Successful loads since start.
    pub ok: u64,
    /// Failed loads since start.
    pub errors: u64,
    /// The last failure's message, if the last load failed.
    pub last_error: Option<String>,
    /// When it happened (Unix seconds).
    pub last_error_unix: Option<u64>,
}

/// Everything the handlers share.
pub struct AppState {
    /// The configuration.
    pub cfg: ServeConfig,
    /// The model now serving, if any.
    pub current: ArcSwapOption<Loaded>,
    /// What loads did.
    pub status: Mutex<ReloadStatus>,
    /// The pool batch predictions run on.
    pub pool: rayon::ThreadPool,
    /// The Prometheus exposition.
    pub metrics: PrometheusHandle,
    /// Serialises loads.
    pub(crate) reload_lock: tokio::sync::Mutex<Option<FileSig>>,
}

impl std::fmt::Debug for AppState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AppState").field("cfg", &self.cfg).finish()
    }
}

impl AppState {
    /// A state with no model loaded yet; call [`reload::load_now`] (or let the poller) load one.
    pub fn new(cfg: ServeConfig) -> Result<Arc<Self>, ApiError> {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(cfg.pool_threads)
            .thread_name(|i| format!("xmc-predict-{i}"))
            // Without a handler rayon aborts the process when a spawned job panics. With one,
            // the job's reply channel is dropped and its request gets a 500.
            .panic_handler(|_| tracing::error!("a prediction on the pool panicked"))
            .build()
            .map_err(|e| ApiError::Internal(e.to_string()))?;
        Ok(Arc::new(AppState {
            cfg,
            current: ArcSwapOption::empty(),
            status: Mutex::new(ReloadStatus::default()),
            pool,
            metrics: metrics_handle(),
            reload_lock: tokio::sync::Mutex::new(None),
        }))
    }
}

/// Loads the configured model path now, whether or not it changed, and publishes it; on failure
/// the old model keeps serving and the error is recorded (as `POST /v1/admin/reload` does).
pub async fn reload_now(state: &Arc<AppState>) -> Result<ReloadOutcome, String> {
    reload::load_now(state, reload::Trigger::Force).await
}

/// The process-wide Prometheus recorder (installed once; later calls share it).
pub fn metrics_handle() -> PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            // Microsecond-scale buckets: the request path is expected to take 10 µs to 10 ms.
            let micro = [
                10e-6, 25e-6, 50e-6, 100e-6, 200e-6, 350e-6, 500e-6, 750e-6, 1e-3, 2e-3, 5e-3,
                10e-3, 50e-3, 0.25, 1.0,
            ];
            let recorder = PrometheusBuilder::new()
                .set_buckets_for_metric(
                    Matcher::Full("xmc_request_duration_seconds".into()),
                    &micro,
                )
                .and_then(|b| {
                    b.set_buckets_for_metric(
                        Matcher::Full("xmc_predict_depth".into()),
                        &[1.0, 2.0, 3.0, 4.0, 6.0, 8.0, 10.0, 12.0, 16.0, 24.0, 32.0],
                    )
                })
                .and_then(|b| {
                    b.set_buckets_for_metric(
                        Matcher::Full("xmc_predict_nodes_evaluated".into()),
                        &[
                            1.0, 5.0, 10.0, 25.0, 50.0, 100.0, 200.0, 500.0, 1000.0, 5000.0,
                        ],
                    )
                })
                .map(|b| b.build_recorder())
                .unwrap_or_else(|_| PrometheusBuilder::new().build_recorder());
            let handle = recorder.handle();
            // Another recorder may already be installed (e.g. by an embedding program); then
            // this handle renders an empty exposition rather than failing the server.
            let _ = metrics::set_global_recorder(recorder);
            handle
        })
        .clone()
}

/// How often the histograms' raw samples are folded into their buckets.
const METRICS_UPKEEP: Duration = Duration::from_secs(5);

/// Folds the histograms' pending samples into their buckets every [`METRICS_UPKEEP`]. The
/// recorder keeps every observation until then; without upkeep a server nobody scrapes would
/// grow by 8 bytes per histogram per request (about 100 KB/s at 4000 req/s, seen in the hot-swap
/// load test).
async fn metrics_upkeep(handle: PrometheusHandle) {
    let mut tick = tokio::time::interval(METRICS_UPKEEP);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        handle.run_upkeep();
    }
}

/// Records the per-route request metrics: one layer for every route.
async fn track(req: Request, next: Next) -> Response {
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_string(), |p| p.as_str().to_string());
    let inflight = metrics::gauge!("xmc_inflight_requests");
    inflight.increment(1.0);
    let start = Instant::now();
    let resp = next.run(req).await;
    inflight.decrement(1.0);
    metrics::histogram!("xmc_request_duration_seconds", "route" => route.clone())
        .record(start.elapsed().as_secs_f64());
    metrics::counter!(
        "xmc_requests_total",
        "route" => route,
        "status" => resp.status().as_u16().to_string()
    )
    .increment(1);
    resp
}

fn panic_response(_: Box<dyn std::any::Any + Send + 'static>) -> Response {
    ApiError::Internal("a handler panicked".into()).into_response()
}

/// The API router. `/metrics` is included unless the config puts it on its own port (then see
/// [`metrics_app`]).
pub fn app(state: Arc<AppState>) -> Router {
    let mut router = Router::new()
        .route("/v1/predict", post(routes::predict))
        .route("/v1/predict/batch", post(routes::predict_batch))
        .route("/v1/model", get(routes::model_info))
        .route("/v1/admin/reload", post(routes::admin_reload))
        .route("/healthz", get(routes::healthz))
        .route("/readyz", get(routes::readyz))
        .route("/openapi.json", get(routes::openapi));
    if state.cfg.metrics_bind.is_none() {
        router = router.route("/metrics", get(routes::metrics));
    }
    let timeout = Duration::from_millis(state.cfg.request_timeout_ms);
    let limit = state.cfg.body_limit_bytes;
    router
        .fallback(routes::not_found)
        .layer(middleware::from_fn(track))
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
        .layer(TimeoutLayer::with_status_code(
            axum::http::StatusCode::REQUEST_TIMEOUT,
            timeout,
        ))
        .layer(CatchPanicLayer::custom(panic_response))
        .with_state(state)
}

/// The router of the separate metrics port.
pub fn metrics_app(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/metrics", get(routes::metrics))
        .with_state(state)
}

/// Starts the server: loads the model, spawns the poller, serves until ctrl-c or SIGTERM, then
/// drains in-flight requests for up to `shutdown_timeout_ms`.
pub async fn run(cfg: ServeConfig) -> anyhow::Result<()> {
    let state = AppState::new(cfg).map_err(|e| anyhow::anyhow!("{e:?}"))?;
    match reload::load_now(&state, reload::Trigger::Explicit).await {
        Ok(_) => {}
        Err(e) => {
            tracing::error!(error = %e, "the initial model failed to load; serving 503 until one does")
        }
    }
    if state.cfg.poll_interval_ms > 0 {
        tokio::spawn(reload::poll(state.clone()));
    }
    tokio::spawn(metrics_upkeep(state.metrics.clone()));
    if let Some(addr) = &state.cfg.metrics_bind {
        let listener = tokio::net::TcpListener::bind(addr).await?;
        let metrics = metrics_app(state.clone());
        tokio::spawn(async move { axum::serve(listener, metrics).await });
    }
    let listener = tokio::net::TcpListener::bind(&state.cfg.bind).await?;
    tracing::info!(bind = %state.cfg.bind, model = %state.cfg.model.display(), "serving");
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let server = axum::serve(listener, app(state.clone())).with_graceful_shutdown(async move {
        let _ = rx.await;
    });
    let mut server = tokio::spawn(async move { server.await });
    tokio::select! {
        r = &mut server => { r??; return Ok(()); }
        _ = shutdown_signal() => {}
    }
    tracing::info!("shutting down: draining in-flight requests");
    let _ = tx.send(());
    let drain = Duration::from_millis(state.cfg.shutdown_timeout_ms);
    match tokio::time::timeout(drain, &mut server).await {
        Ok(r) => r??,
        Err(_) => tracing::warn!("drain timed out; exiting with requests in flight"),
    }
    Ok(())
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {}
        _ = term => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
