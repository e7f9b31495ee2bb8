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
pub mod heap;
mod reload;
mod routes;

pub use config::{LoadChecks, LogFormat, ServeConfig, ServeConfigError, SinglePredict};
pub use error::ApiError;
pub use reload::{FileSig, Loaded, ReloadOutcome, ScratchPool};

use crate::model::ScratchSizes;
use arc_swap::ArcSwapOption;
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
    /// The scratch space that every thread that predicts is known to have (the sizes of the
    /// model [`warm_threads`] sized them for): a load needs no spares within it
    /// ([`reload::ScratchPool`]).
    scratch_floor: Mutex<ScratchSizes>,
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
            scratch_floor: Mutex::new(ScratchSizes::default()),
        }))
    }

    /// How many threads predict, each with scratch space of its own: the async workers (or
    /// `per_core`'s threads), one per core by default, and the prediction pool.
    pub(crate) fn predict_threads(&self) -> usize {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        cores + self.pool.current_num_threads()
    }

    pub(crate) fn scratch_floor(&self) -> ScratchSizes {
        self.scratch_floor
            .lock()
            .map_or_else(|_| ScratchSizes::default(), |f| *f)
    }

    /// Records that every thread that predicts now has scratch space for `loaded`.
    fn raise_scratch_floor(&self, loaded: &Loaded) {
        if let Ok(mut f) = self.scratch_floor.lock() {
            *f = loaded.scratch.sizes;
        }
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

/// Counts a request in `xmc_inflight_requests` for as long as it lives: also when its future is
/// dropped (a client that hangs up, a panic), which a decrement after the `await` would miss.
struct Inflight(metrics::Gauge);

impl Inflight {
    fn start() -> Inflight {
        let gauge = metrics::gauge!("xmc_inflight_requests");
        gauge.increment(1.0);
        Inflight(gauge)
    }
}

impl Drop for Inflight {
    fn drop(&mut self) {
        self.0.decrement(1.0);
    }
}

/// Records the per-route request metrics and bounds each request by `request_timeout_ms`: one
/// layer for every route. A request past the limit is answered 408 with the usual error body,
/// a handler that panics 500, and both are counted like any other answer.
async fn track(State(limit): State<Duration>, req: Request, next: Next) -> Response {
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_string(), |p| p.as_str().to_string());
    let _inflight = Inflight::start();
    let start = Instant::now();
    // A handler's panic becomes a 500 here, inside the count; the outer panic layer is for
    // the layers themselves.
    let run = std::panic::AssertUnwindSafe(next.run(req)).catch_unwind();
    let resp = match tokio::time::timeout(limit, run).await {
        Ok(Ok(resp)) => resp,
        Ok(Err(payload)) => panic_response(payload),
        Err(_) => timed_out(&route, limit).into_response(),
    };
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

/// The admin reload route's path (the router's and the request limit's message).
const RELOAD_ROUTE: &str = "/v1/admin/reload";

/// The answer to a request that ran past `limit`.
fn timed_out(route: &str, limit: Duration) -> ApiError {
    let mut message = format!(
        "the request took longer than request_timeout_ms ({} ms)",
        limit.as_millis()
    );
    if route == RELOAD_ROUTE {
        // The handler runs the load in a task of its own, which the timeout does not stop.
        message.push_str(
            "; the reload goes on and publishes the model when it is done (see GET /v1/model)",
        );
    }
    ApiError::Timeout(message)
}

/// The 500 for a panic; its message goes to the log only.
fn panic_response(payload: Box<dyn std::any::Any + Send + 'static>) -> Response {
    let message = payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(not a string)");
    ApiError::Internal(format!("a handler panicked: {message}")).into_response()
}

/// The API router. `/metrics` is included unless the config puts it on its own port (then see
/// [`metrics_app`]).
pub fn app(state: Arc<AppState>) -> Router {
    let mut router = Router::new()
        .route("/v1/predict", post(routes::predict))
        .route("/v1/predict/batch", post(routes::predict_batch))
        .route("/v1/model", get(routes::model_info))
        .route(RELOAD_ROUTE, post(routes::admin_reload))
        .route("/healthz", get(routes::healthz))
        .route("/readyz", get(routes::readyz))
        .route("/openapi.json", get(routes::openapi));
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
    warm_threads(&state).await;
    if state.cfg.poll_interval_ms > 0 {
        tokio::spawn(reload::poll(state.clone()));
    }
    tokio::spawn(metrics_upkeep(state.metrics.clone()));
    heap::spawn_trimmer(state.cfg.heap_trim_mib);
    // Every server hands each connection a clone of one finished router (an `Arc`). axum's own
    // `serve`, given a bare router, rebuilt its route table (`with_state`) for every connection
    // it accepted: building it once cut the server's CPU by 10-14 µs a request on new
    // connections, and a storm of 2000 connections added 18 KB of RSS each instead of 31
    // (ARCHITECTURE.md). `conn::serve` also closes idle connections (`idle_timeout_ms`).
    let idle = state.cfg.idle();
    if let Some(addr) = &state.cfg.metrics_bind {
        let listener = tokio::net::TcpListener::bind(addr).await?;
        tracing::info!(addr = %listener.local_addr()?, "serving /metrics");
        let metrics = metrics_app(state.clone());
        tokio::spawn(conn::serve(listener, metrics, idle, std::future::pending()));
    }
    // The handlers go in before the listeners bind, so a signal sent once the "serving" line is
    // out always drains; registered on the future's first poll, one sent in between took its
    // default action and killed the process (CI caught it).
    let shutdown = shutdown_signal();
    // Every server reports its end on `done`; `stop` asks them all to drain.
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let (done_tx, mut done_rx) = tokio::sync::mpsc::unbounded_channel::<std::io::Result<()>>();
    let (servers, addr) = match state.cfg.runtime {
        config::Runtime::Shared => {
            let listener = tokio::net::TcpListener::bind(&state.cfg.bind).await?;
            let addr = listener.local_addr()?;
            let server = conn::serve(listener, app(state.clone()), idle, stopped(stop_rx));
            let done = done_tx.clone();
            tokio::spawn(async move {
                let _ = done.send(server.await);
            });
            (1, addr)
        }
        config::Runtime::PerCore => serve_per_core(&state, stop_rx, &done_tx)?,
    };
    drop(done_tx);
    // The address bound, not the one configured: on port 0 the log says which port it got.
    tracing::info!(%addr, model = %state.cfg.model.display(), servers, "serving");
    let all_done = async move {
        for _ in 0..servers {
            match done_rx.recv().await {
                Some(Ok(())) => {}
                Some(Err(e)) => return Err(anyhow::Error::from(e)),
                None => break,
            }
        }
        anyhow::Ok(())
    };
    tokio::pin!(all_done);
    tokio::select! {
        r = &mut all_done => return r,
        _ = shutdown => {}
    }
    tracing::info!("shutting down: draining in-flight requests");
    let _ = stop_tx.send(true);
    let drain = Duration::from_millis(state.cfg.shutdown_timeout_ms);
    match tokio::time::timeout(drain, &mut all_done).await {
        Ok(r) => r?,
        Err(_) => tracing::warn!("drain timed out; exiting with requests in flight"),
    }
    Ok(())
}

/// How long each async worker waits at [`warm_threads`]' gate for the others.
const WARM_GATE: Duration = Duration::from_secs(1);

/// Sizes the scratch space of every thread that predicts (each async worker of this runtime
/// and each thread of the prediction pool) for the model now serving, before the first request.
/// The load's warm-up runs on a thread of its own, so without this each worker's first
/// prediction grows its scratch space on the request path: on the 2-core VM, 0.2–0.5 ms for
/// debian-deps instead of under 0.1 ms (ARCHITECTURE.md, "The server"). Returns how many
/// distinct async workers ran a warm-up.
///
/// One task per worker is injected from outside the workers, and each waits (up to
/// [`WARM_GATE`]) until all have warmed, so no worker can take a second one: that puts one task
/// on every worker. Nothing is served yet, so the wait holds up no request. A later swap to a
/// model with more features grows the scratch space again, on each thread's first request.
async fn warm_threads(state: &Arc<AppState>) -> usize {
    let Some(loaded) = state.current.load_full() else {
        return 0;
    };
    {
        let loaded = loaded.clone();
        state.pool.broadcast(move |_| routes::warm_scratch(&loaded));
    }
    let n = tokio::runtime::Handle::current().metrics().num_workers();
    let warmed = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let tasks: Vec<_> = (0..n)
        .map(|_| {
            let (loaded, warmed) = (loaded.clone(), warmed.clone());
            tokio::spawn(async move {
                use std::sync::atomic::Ordering;
                routes::warm_scratch(&loaded);
                warmed.fetch_add(1, Ordering::AcqRel);
                let deadline = Instant::now() + WARM_GATE;
                while warmed.load(Ordering::Acquire) < n && Instant::now() < deadline {
                    std::thread::sleep(Duration::from_micros(100));
                }
                std::thread::current().id()
            })
        })
        .collect();
    let mut threads = Vec::with_capacity(n);
    for task in tasks {
        if let Ok(id) = task.await {
            if !threads.contains(&id) {
                threads.push(id);
            }
        }
    }
    if threads.len() == n {
        state.raise_scratch_floor(&loaded);
    }
    threads.len()
}

/// Resolves once `stop` turns true (or its sender is gone).
async fn stopped(mut stop: tokio::sync::watch::Receiver<bool>) {
    let _ = stop.wait_for(|&s| s).await;
}

/// [`config::Runtime::PerCore`]: binds one listener per core to the API address (with
/// `SO_REUSEPORT`, so the kernel spreads connections over them; for port 0, the port a probe
/// bind picks), and serves each on a thread of its own under a single-threaded runtime. Returns
/// how many servers it started and the address they share; each reports its end on `done`. A
/// bind error is returned here, before anything serves.
fn serve_per_core(
    state: &Arc<AppState>,
    stop: tokio::sync::watch::Receiver<bool>,
    done: &tokio::sync::mpsc::UnboundedSender<std::io::Result<()>>,
) -> anyhow::Result<(usize, std::net::SocketAddr)> {
    let n = std::thread::available_parallelism().map_or(1, |n| n.get());
    let addr: std::net::SocketAddr = state.cfg.bind.parse()?;
    // The listeners below would share the port with any other `SO_REUSEPORT` socket of this
    // user, a second server included, and split the connections with it. A probe without the
    // option fails while anything holds the port, so a second server is refused here, as it is
    // with `shared`. (On port 0 the probe also picks the port.)
    let probe = std::net::TcpListener::bind(addr)?;
    let addr = probe.local_addr()?;
    drop(probe);
    let mut listeners = Vec::with_capacity(n);
    for _ in 0..n {
        let listener = reuse_port_listener(addr)?;
        // Registered with this runtime by `listen`; taken out so another runtime can own it.
        listeners.push(listener.into_std()?);
    }
    for (i, listener) in listeners.into_iter().enumerate() {
        let (state, stop, done) = (state.clone(), stop.clone(), done.clone());
        std::thread::Builder::new()
            .name(format!("xmc-http-{i}"))
            .spawn(move || {
                let served = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .and_then(|rt| {
                        rt.block_on(async move {
                            if let Some(loaded) = state.current.load_full() {
                                routes::warm_scratch(&loaded);
                            }
                            let listener = tokio::net::TcpListener::from_std(listener)?;
                            let idle = state.cfg.idle();
                            conn::serve(listener, app(state), idle, stopped(stop)).await
                        })
                    });
                let _ = done.send(served);
            })?;
    }
    Ok((n, addr))
}

/// A listener on `addr` that other sockets of this process may share (`SO_REUSEPORT`).
#[cfg(unix)]
fn reuse_port_listener(addr: std::net::SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    let socket = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.set_reuseport(true)?;
    socket.bind(addr)?;
    socket.listen(1024)
}

/// Configuration refuses `per_core` off Unix, so this is never called there.
#[cfg(not(unix))]
fn reuse_port_listener(_: std::net::SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    Err(std::io::Error::other("per_core needs SO_REUSEPORT"))
}

/// Installs the handlers for ctrl-c (SIGINT) and SIGTERM now, not when the future is first
/// polled; the future ends on the first of them. A handler that cannot be installed is logged
/// and that signal keeps its default action.
fn shutdown_signal() -> impl std::future::Future<Output = ()> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{Signal, SignalKind, signal};
        let install = |kind: SignalKind, name: &str| match signal(kind) {
            Ok(s) => Some(s),
            Err(e) => {
                tracing::warn!(error = %e, signal = name, "no handler; it will not drain");
                None
            }
        };
        async fn on(s: Option<Signal>) {
            match s {
                Some(mut s) => {
                    s.recv().await;
                }
                None => std::future::pending().await,
            }
        }
        let int = on(install(SignalKind::interrupt(), "SIGINT"));
        let term = on(install(SignalKind::terminate(), "SIGTERM"));
        async move {
            tokio::select! {
                _ = int => {}
                _ = term => {}
            }
        }
    }
    #[cfg(not(unix))]
    async {
        let _ = tokio::signal::ctrl_c().await;
    }
}

#[cfg(test)]
mod tests {
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
        reload::load_now(&state, reload::Trigger::Explicit)
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
        let current = || state.current.load_full().unwrap();
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
