//! Start-up and shutdown: loading and warming, the listeners (one runtime or one per core), and
//! the signals that stop them.

use super::*;

/// Starts the server: loads the model, spawns the poller, serves until ctrl-c or SIGTERM, then
/// drains in-flight requests for up to `shutdown_timeout_ms`.
pub async fn run(cfg: ServeConfig) -> anyhow::Result<()> {
    let state = AppState::new(cfg).map_err(|e| anyhow::anyhow!("{e:?}"))?;
    match repository::load_now(&state, reload::Trigger::Explicit).await {
        Ok(_) => {}
        Err(e) => {
            tracing::error!(error = %e, "a model failed to load at start; a model without a version serves 503 until one loads")
        }
    }
    warm_threads(&state).await;
    if state.cfg.poll_interval_ms > 0 {
        tokio::spawn(repository::poll(state.clone()));
    }
    tokio::spawn(metrics_upkeep(state.metrics.clone()));
    heap::spawn_trimmer(state.cfg.heap_trim_mib);
    // Every server hands each connection a clone of one finished router (an `Arc`). axum's own
    // `serve`, given a bare router, rebuilt its route table (`with_state`) for every connection
    // it accepted: building it once cuts the server's CPU a request on new connections, and
    // the RSS each open connection adds (docs/decisions/0015-own-accept-loop.md). `conn::serve` also closes idle connections (`idle_timeout_ms`).
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
            let server = conn::serve(listener, app(state.clone()), idle, stopped(stop_rx.clone()));
            let done = done_tx.clone();
            tokio::spawn(async move {
                let _ = done.send(server.await);
            });
            (1, addr)
        }
        config::Runtime::PerCore => serve_per_core(&state, stop_rx.clone(), &done_tx)?,
    };
    // The Open Inference Protocol over gRPC, on its own port; it drains with the others.
    let servers = match &state.cfg.grpc_bind {
        Some(grpc_addr) => {
            let listener = tokio::net::TcpListener::bind(grpc_addr).await?;
            tracing::info!(addr = %listener.local_addr()?, "serving gRPC (inference.GRPCInferenceService)");
            let server = grpc::serve(state.clone(), listener, stopped(stop_rx));
            let done = done_tx.clone();
            tokio::spawn(async move {
                let _ = done.send(server.await);
            });
            servers + 1
        }
        None => servers,
    };
    drop(done_tx);
    // The address bound, not the one configured: on port 0 the log says which port it got.
    let models = state.repo.load().names().join(",");
    tracing::info!(%addr, %models, servers, "serving");
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
pub(super) const WARM_GATE: Duration = Duration::from_secs(1);

/// Sizes the scratch space of every thread that predicts (each async worker of this runtime
/// and each thread of the prediction pool) for the models now serving, before the first
/// request.
/// The load's warm-up runs on a thread of its own, so without this each worker's first
/// prediction grows its scratch space on the request path, several times slower than a warm
/// one (docs/decisions/0009-per-thread-scratch.md). Returns how many
/// distinct async workers ran a warm-up.
///
/// One task per worker is injected from outside the workers, and each waits (up to
/// [`WARM_GATE`]) until all have warmed, so no worker can take a second one: that puts one task
/// on every worker. Nothing is served yet, so the wait holds up no request. A later swap to a
/// model with more features grows the scratch space again, on each thread's first request.
pub(super) async fn warm_threads(state: &Arc<AppState>) -> usize {
    let loaded: Vec<Arc<Loaded>> = state.repo.load().all().cloned().collect();
    if loaded.is_empty() {
        return 0;
    }
    let loaded = Arc::new(loaded);
    {
        let loaded = loaded.clone();
        state
            .pool
            .broadcast(move |_| loaded.iter().for_each(|l| routes::warm_scratch(l)));
    }
    let n = tokio::runtime::Handle::current().metrics().num_workers();
    let warmed = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let tasks: Vec<_> = (0..n)
        .map(|_| {
            let (loaded, warmed) = (loaded.clone(), warmed.clone());
            tokio::spawn(async move {
                use std::sync::atomic::Ordering;
                loaded.iter().for_each(|l| routes::warm_scratch(l));
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
        let mut floor = crate::model::ScratchSizes::default();
        for l in loaded.iter() {
            let s = l.scratch.sizes;
            floor.dense = floor.dense.max(s.dense);
            floor.acc = floor.acc.max(s.acc);
            floor.bp_acc = floor.bp_acc.max(s.bp_acc);
            floor.clusters = floor.clusters.max(s.clusters);
        }
        state.raise_scratch_floor(floor);
    }
    threads.len()
}

/// Resolves once `stop` turns true (or its sender is gone).
pub(super) async fn stopped(mut stop: tokio::sync::watch::Receiver<bool>) {
    let _ = stop.wait_for(|&s| s).await;
}

/// [`config::Runtime::PerCore`]: binds one listener per core to the API address (with
/// `SO_REUSEPORT`, so the kernel spreads connections over them; for port 0, the port a probe
/// bind picks), and serves each on a thread of its own under a single-threaded runtime. Returns
/// how many servers it started and the address they share; each reports its end on `done`. A
/// bind error is returned here, before anything serves.
pub(super) fn serve_per_core(
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
                            for loaded in state.repo.load().all() {
                                routes::warm_scratch(loaded);
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
pub(super) fn reuse_port_listener(
    addr: std::net::SocketAddr,
) -> std::io::Result<tokio::net::TcpListener> {
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
pub(super) fn reuse_port_listener(
    _: std::net::SocketAddr,
) -> std::io::Result<tokio::net::TcpListener> {
    Err(std::io::Error::other("per_core needs SO_REUSEPORT"))
}

/// Installs the handlers for ctrl-c (SIGINT) and SIGTERM now, not when the future is first
/// polled; the future ends on the first of them. A handler that cannot be installed is logged
/// and that signal keeps its default action.
pub(super) fn shutdown_signal() -> impl std::future::Future<Output = ()> {
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
