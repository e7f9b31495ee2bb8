//! Accepting and serving HTTP/1.1 connections, with an idle limit and a graceful drain.
//!
//! axum's `serve` keeps a connection open for as long as the client does: a keep-alive
//! connection left idle, or one whose client sends its headers a byte at a time, holds a file
//! descriptor and hyper's read and write buffers for good, so enough of them stop the server
//! accepting anyone. [`serve`] is the same accept loop with an idle limit: a connection that
//! starts no request for `idle` is closed (checked every quarter of it, so it goes after between
//! `idle` and 1.25 × `idle` without one). A request in flight counts as started, and
//! `request_timeout_ms` (which configuration keeps below the limit) has answered any request
//! older than the limit, so only a connection with nothing to do, or one stuck writing to a
//! client that does not read, is ever closed this way.
//!
//! The per-request cost is one relaxed atomic increment; the check is a timer per connection
//! that fires four times per `idle`, not one per request (hyper's own `header_read_timeout` would
//! register and drop a timer for every request head it reads).

use axum::Router;
use axum::extract::Request;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tower::ServiceExt;
use tower::util::Oneshot;

/// A connection's router that counts the requests it starts.
#[derive(Clone)]
struct Counted {
    router: Router,
    started: Arc<AtomicU64>,
}

impl hyper::service::Service<Request<Incoming>> for Counted {
    type Response = axum::response::Response;
    type Error = Infallible;
    type Future = Oneshot<Router, Request<Incoming>>;

    fn call(&self, req: Request<Incoming>) -> Self::Future {
        self.started.fetch_add(1, Ordering::Relaxed);
        self.router.clone().oneshot(req)
    }
}

/// Serves `router` on `listener` until `stop` resolves, then stops accepting, lets each open
/// connection finish the request it is on (hyper's graceful shutdown) and returns once all have
/// closed. The caller bounds that wait (`shutdown_timeout_ms`). `idle` is the idle limit
/// (`None`: none).
pub async fn serve(
    listener: TcpListener,
    router: Router,
    idle: Option<Duration>,
    stop: impl Future<Output = ()>,
) -> std::io::Result<()> {
    // Each connection's task holds a receiver: `stop_tx` tells them to drain, and
    // `stop_tx.closed()` resolves once every one of them has ended.
    let (stop_tx, stop_rx) = watch::channel(false);
    tokio::pin!(stop);
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    if accept_failed(&e) {
                        // Back off, but not past a stop: a drain must not wait for the timer.
                        tokio::select! {
                            () = tokio::time::sleep(ACCEPT_BACKOFF) => {}
                            () = &mut stop => break,
                        }
                    }
                    continue;
                }
            },
            () = &mut stop => break,
        };
        let (router, stop) = (router.clone(), stop_rx.clone());
        tokio::spawn(connection(stream, router, idle, stop));
    }
    drop(listener);
    drop(stop_rx);
    let _ = stop_tx.send(true);
    stop_tx.closed().await;
    Ok(())
}

/// How long the accept loop waits after an accept error other than a client's reset.
const ACCEPT_BACKOFF: Duration = Duration::from_secs(1);

/// Whether the accept loop should back off after `e`: a connection reset before it was taken is
/// the client's business (no); anything else (out of file descriptors, most likely) is logged
/// and counted, and the loop waits [`ACCEPT_BACKOFF`] before it tries again rather than spinning
/// on the error (yes).
fn accept_failed(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::{ConnectionAborted, ConnectionRefused, ConnectionReset};
    if matches!(
        e.kind(),
        ConnectionAborted | ConnectionRefused | ConnectionReset
    ) {
        return false;
    }
    tracing::error!(error = %e, "accepting a connection failed; trying again in 1 s");
    metrics::counter!("xmc_accept_errors_total").increment(1);
    true
}

/// Serves one connection until the client closes it, it errs, it has been idle for `idle`, or
/// `stop` turns true and it has finished the request it was on (at once if it never started
/// one).
async fn connection(
    stream: TcpStream,
    router: Router,
    idle: Option<Duration>,
    mut stop: watch::Receiver<bool>,
) {
    let open = OpenGauge::new();
    let started = Arc::new(AtomicU64::new(0));
    let service = Counted {
        router,
        started: started.clone(),
    };
    let conn =
        hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), service);
    tokio::pin!(conn);
    // With no limit the check never fires: the period only has to be valid.
    let limit = idle.unwrap_or(Duration::from_secs(3600));
    let period = (limit / 4).max(Duration::from_millis(1));
    let mut check = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
    check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut seen = 0u64;
    let mut quiet_since = tokio::time::Instant::now();
    let mut draining = false;
    // Made once: a `wait_for` made afresh on every turn of the loop would take the channel's
    // lock to register and drop its waiter each time the task wakes, on a lock that every
    // connection shares.
    let stopping = stop.wait_for(|&s| s);
    tokio::pin!(stopping);
    loop {
        tokio::select! {
            biased;
            ended = conn.as_mut() => {
                if let Err(e) = ended {
                    tracing::debug!(error = %e, "connection ended with an error");
                }
                break;
            }
            _ = &mut stopping, if !draining => {
                // hyper's graceful shutdown closes a connection between two requests at once,
                // but keeps one that has not started any until its first request ends (or the
                // drain times out). It has nothing to finish either, so it closes here.
                if started.load(Ordering::Relaxed) == 0 {
                    break;
                }
                draining = true;
                conn.as_mut().graceful_shutdown();
            }
            now = check.tick(), if idle.is_some() => {
                let n = started.load(Ordering::Relaxed);
                if n != seen {
                    (seen, quiet_since) = (n, now);
                } else if now.duration_since(quiet_since) >= limit {
                    tracing::debug!(requests = n, "closing an idle connection");
                    metrics::counter!("xmc_connections_idle_closed_total").increment(1);
                    break;
                }
            }
        }
    }
    drop(open);
}

/// Counts an open connection in `xmc_open_connections` for as long as it lives.
struct OpenGauge;

impl OpenGauge {
    fn new() -> OpenGauge {
        metrics::gauge!("xmc_open_connections").increment(1.0);
        OpenGauge
    }
}

impl Drop for OpenGauge {
    fn drop(&mut self) {
        metrics::gauge!("xmc_open_connections").decrement(1.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::routing::get;
    use std::io::{Read, Write};
    use std::time::Instant;

    /// A server of two routes (`/` answers at once, `/slow` after 300 ms) on a port of its
    /// own, with the idle limit `idle`; its address, the sender that stops it and its task.
    async fn start(
        idle: Option<Duration>,
    ) -> (
        std::net::SocketAddr,
        tokio::sync::oneshot::Sender<()>,
        tokio::task::JoinHandle<std::io::Result<()>>,
    ) {
        let router = Router::new().route("/", get(|| async { "ok" })).route(
            "/slow",
            get(|| async {
                tokio::time::sleep(Duration::from_millis(300)).await;
                "slow"
            }),
        );
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(serve(listener, router, idle, async {
            let _ = rx.await;
        }));
        (addr, tx, task)
    }

    /// A blocking connection to `addr` that gives up reading after 10 s.
    fn connect(addr: std::net::SocketAddr) -> std::net::TcpStream {
        let conn = std::net::TcpStream::connect(addr).unwrap();
        conn.set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        conn
    }

    /// Sends `GET path` on `conn` (kept alive) and reads one whole response: its text.
    fn get_on(conn: &mut std::net::TcpStream, path: &str) -> String {
        let req = format!("GET {path} HTTP/1.1\r\nhost: x\r\n\r\n");
        conn.write_all(req.as_bytes()).unwrap();
        let mut reply = Vec::new();
        let mut buf = [0u8; 1024];
        // Every response here is short and ends with its body, after the content-length.
        while !String::from_utf8_lossy(&reply).ends_with("ok")
            && !String::from_utf8_lossy(&reply).ends_with("slow")
        {
            let n = conn.read(&mut buf).unwrap();
            assert!(n > 0, "closed after {:?}", String::from_utf8_lossy(&reply));
            reply.extend_from_slice(&buf[..n]);
        }
        String::from_utf8_lossy(&reply).into_owned()
    }

    /// Reads `conn` until the server closes it; how long that took.
    fn time_to_close(conn: &mut std::net::TcpStream) -> Duration {
        let start = Instant::now();
        let mut buf = [0u8; 256];
        loop {
            match conn.read(&mut buf) {
                Ok(0) => return start.elapsed(),
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {
                    return start.elapsed();
                }
                Err(e) => panic!("still open after {:?}: {e}", start.elapsed()),
            }
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_idle_connection_is_closed_after_the_limit_and_a_busy_one_is_not() {
        let idle = Duration::from_millis(400);
        let (addr, _stop, _task) = start(Some(idle)).await;
        tokio::task::spawn_blocking(move || {
            // Connected, and never a byte sent.
            let mut silent = connect(addr);
            let waited = time_to_close(&mut silent);
            assert!(waited >= idle && waited < 3 * idle, "{waited:?}");
            // Answered once, then idle.
            let mut once = connect(addr);
            assert!(get_on(&mut once, "/").starts_with("HTTP/1.1 200"));
            let waited = time_to_close(&mut once);
            assert!(waited >= idle && waited < 3 * idle, "{waited:?}");
            // A request every 100 ms for three limits' time keeps its connection.
            let mut busy = connect(addr);
            let start = Instant::now();
            while start.elapsed() < 3 * idle {
                assert!(get_on(&mut busy, "/").starts_with("HTTP/1.1 200"));
                std::thread::sleep(Duration::from_millis(100));
            }
        })
        .await
        .unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_client_that_sends_its_headers_a_byte_at_a_time_is_cut_off() {
        let idle = Duration::from_millis(400);
        let (addr, _stop, _task) = start(Some(idle)).await;
        tokio::task::spawn_blocking(move || {
            let mut slow = connect(addr);
            let start = Instant::now();
            let head =
                b"GET / HTTP/1.1\r\nhost: x\r\nx-pad: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
            for &b in head {
                if slow.write_all(&[b]).is_err() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            // The head never ended: the connection went at the limit, mid-head.
            let waited = start.elapsed() + time_to_close(&mut slow);
            assert!(
                waited >= idle && waited < 3 * idle + Duration::from_millis(200),
                "{waited:?}"
            );
        })
        .await
        .unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn without_a_limit_an_idle_connection_stays() {
        let (addr, _stop, _task) = start(None).await;
        tokio::task::spawn_blocking(move || {
            let mut conn = connect(addr);
            assert!(get_on(&mut conn, "/").starts_with("HTTP/1.1 200"));
            std::thread::sleep(Duration::from_millis(800));
            assert!(get_on(&mut conn, "/").starts_with("HTTP/1.1 200"));
        })
        .await
        .unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn stopping_finishes_the_request_in_flight_then_closes_everything() {
        let (addr, stop, task) = start(Some(Duration::from_secs(60))).await;
        let mut idle = connect(addr);
        let slow = tokio::task::spawn_blocking(move || {
            let mut conn = connect(addr);
            get_on(&mut conn, "/slow")
        });
        // The slow request is in flight when the stop comes.
        tokio::time::sleep(Duration::from_millis(100)).await;
        stop.send(()).unwrap();
        let reply = slow.await.unwrap();
        assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
        let ended = tokio::time::timeout(Duration::from_secs(10), task).await;
        assert!(matches!(ended, Ok(Ok(Ok(())))), "{ended:?}");
        // Nothing accepts any more, and the idle connection was closed too.
        assert!(std::net::TcpStream::connect(addr).is_err());
        let mut buf = [0u8; 16];
        assert!(matches!(idle.read(&mut buf), Ok(0) | Err(_)));
    }
}
