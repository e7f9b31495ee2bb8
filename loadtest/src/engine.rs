//! The open-loop sender.
//!
//! One thread walks a fixed schedule of send times (constant spacing, or exponential gaps for
//! Poisson arrivals) on a single-threaded tokio runtime, and sends each due request on a pool of
//! keep-alive HTTP/1.1 connections. Nothing waits for a response before the next send:
//! when responses are slow, more requests are in flight and the pool opens more connections, so the
//! offered rate holds. Each request's latency is measured from its *scheduled* send time, not from
//! when it left (the coordinated-omission correction; see `loadtest/README.md`). Near a send time,
//! and while requests are in flight, the thread spins rather than sleeps (see [`run`]), so the
//! tool's own lag stays at microseconds; it is measured and reported as `lag`.
//!
//! One such thread can send only so much; [`Senders`] runs several, each on its share of the
//! rate, for a server on more cores than one sender can load.

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Method, Request, Uri};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Deserialize;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// How send times are spaced.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Arrivals {
    /// Exactly 1/rate apart.
    Constant,
    /// Exponential gaps of mean 1/rate (a Poisson process).
    #[default]
    Poisson,
}

/// What to send: one URI, and the bodies to cycle through (`GET` when `bodies` is empty).
#[derive(Clone, Debug)]
pub struct Target {
    /// The full URI, e.g. `http://127.0.0.1:8080/v1/predict`.
    pub uri: Uri,
    /// Request bodies, sent in turn (request i gets body i mod len); empty for `GET`.
    pub bodies: Arc<Vec<Bytes>>,
}

/// One run's shape.
#[derive(Clone, Debug)]
pub struct RunSpec {
    /// Offered requests per second (> 0).
    pub rate: f64,
    /// Arrival process.
    pub arrivals: Arrivals,
    /// Stop scheduling after this long.
    pub duration: Duration,
    /// Stop scheduling after this many requests (whichever comes first).
    pub max_requests: Option<u64>,
    /// A request not answered in this long is an error (`timeout`).
    pub timeout: Duration,
    /// At most this many requests in flight; a send that would exceed it is an error
    /// (`in_flight_cap`) rather than a silent drop in offered load.
    pub max_in_flight: usize,
    /// Keep 200 response bodies (for quality metrics).
    pub keep_bodies: bool,
    /// The seed of the Poisson gaps.
    pub seed: u64,
    /// The first body index (so consecutive runs do not all replay the same queries first).
    pub first_body: usize,
    /// Keep-alive connections to have open before the clock starts (0: none; the pool opens
    /// them as requests need them). See [`open_connections`].
    pub connections: usize,
}

/// The outcome of one request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    /// An HTTP status from the server.
    Http(u16),
    /// No response in time.
    Timeout,
    /// Connection refused, reset, or a malformed response.
    Transport,
    /// Not sent: the in-flight cap was reached.
    InFlightCap,
}

/// One request's record.
#[derive(Clone, Copy, Debug)]
pub struct Sample {
    /// Scheduled send time, µs after the run's start.
    pub scheduled_us: u64,
    /// From the scheduled send time to the end of the response body, µs.
    pub latency_us: u64,
    /// From the actual send to the end of the response body, µs (what a closed-loop tool sees).
    pub service_us: u64,
    /// From the scheduled to the actual send, µs: the generator's own lag.
    pub lag_us: u64,
    /// The outcome.
    pub status: Status,
    /// Which body was sent.
    pub body: usize,
}

impl Sample {
    /// Whether this request succeeded (HTTP 2xx).
    pub fn ok(&self) -> bool {
        matches!(self.status, Status::Http(s) if (200..300).contains(&s))
    }
}

/// A kept response.
#[derive(Clone, Debug)]
pub struct Kept {
    /// Which request body was sent.
    pub body: usize,
    /// Its scheduled send time, µs after the run's start.
    pub scheduled_us: u64,
    /// The response body.
    pub bytes: Bytes,
}

/// Everything one run recorded.
#[derive(Debug, Default)]
pub struct RunResult {
    /// Every scheduled request, in completion order.
    pub samples: Vec<Sample>,
    /// The successful responses, when asked for.
    pub bodies: Vec<Kept>,
    /// From the first scheduled send to the last completion, seconds.
    pub elapsed_s: f64,
    /// From the first to the last scheduled send, seconds.
    pub schedule_s: f64,
    /// The most requests in flight at once.
    pub peak_in_flight: usize,
    /// Whether the run was cut short by the cancel flag.
    pub cancelled: bool,
    /// Requests still in flight when a cancelled run gave up waiting (not in `samples`).
    pub abandoned: usize,
}

impl RunResult {
    /// Adds `other`'s samples, responses and times to this one, as if the two runs had been
    /// one (the scheduled times stay relative to each run's own start).
    pub fn absorb(&mut self, other: RunResult) {
        self.samples.extend(other.samples);
        self.bodies.extend(other.bodies);
        self.elapsed_s += other.elapsed_s;
        self.schedule_s += other.schedule_s;
        self.peak_in_flight = self.peak_in_flight.max(other.peak_in_flight);
        self.cancelled |= other.cancelled;
        self.abandoned += other.abandoned;
    }

    /// Adds `other`'s samples and responses to this one, as if the two runs had been one run
    /// sent at the same time (by two senders): the longer of their spans, and the sums of their
    /// peaks in flight (an upper bound on the peak of the whole) and of their abandoned requests.
    pub fn absorb_concurrent(&mut self, other: RunResult) {
        self.samples.extend(other.samples);
        self.bodies.extend(other.bodies);
        self.elapsed_s = self.elapsed_s.max(other.elapsed_s);
        self.schedule_s = self.schedule_s.max(other.schedule_s);
        self.peak_in_flight += other.peak_in_flight;
        self.cancelled |= other.cancelled;
        self.abandoned += other.abandoned;
    }
}

/// A shared flag that stops runs early (set by Ctrl-C).
#[derive(Clone, Debug, Default)]
pub struct Cancel(Arc<AtomicBool>);

impl Cancel {
    /// A flag, not set.
    pub fn new() -> Self {
        Cancel::default()
    }
    /// Sets the flag.
    pub fn cancel(&self) {
        self.0.store(true, Ordering::SeqCst);
    }
    /// Whether the flag is set.
    pub fn is_cancelled(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

/// The HTTP client: HTTP/1.1 keep-alive, one pool, no limit on idle connections.
pub type HttpClient = Client<HttpConnector, Full<Bytes>>;

/// How long the pool of [`client`] keeps a connection that no request uses.
pub const POOL_IDLE: Duration = Duration::from_secs(30);

/// A client for `run`.
pub fn client() -> HttpClient {
    client_with_idle(Some(POOL_IDLE))
}

/// A client for `run` whose pool closes a connection unused for `idle` (`None`: never).
pub fn client_with_idle(idle: Option<Duration>) -> HttpClient {
    let mut conn = HttpConnector::new();
    conn.set_nodelay(true);
    Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(usize::MAX)
        .pool_idle_timeout(idle)
        .build(conn)
}

/// A `POST` of `body` as JSON, or a `GET` without one, with `headers`; `None` when a header
/// does not make a valid request.
fn request(
    uri: &Uri,
    body: Option<Bytes>,
    headers: &[(&str, &str)],
) -> Option<Request<Full<Bytes>>> {
    let mut builder = Request::builder().uri(uri.clone());
    builder = match &body {
        Some(_) => builder
            .method(Method::POST)
            .header("content-type", "application/json"),
        None => builder.method(Method::GET),
    };
    for (k, v) in headers {
        builder = builder.header(*k, *v);
    }
    builder.body(Full::new(body.unwrap_or_default())).ok()
}

/// Sends one request, giving its status and body.
pub async fn send(
    client: &HttpClient,
    uri: &Uri,
    body: Option<Bytes>,
    headers: &[(&str, &str)],
    timeout: Duration,
) -> (Status, Bytes) {
    let Some(req) = request(uri, body, headers) else {
        return (Status::Transport, Bytes::new());
    };
    let fut = async {
        let resp = client.request(req).await.map_err(|_| Status::Transport)?;
        let status = resp.status().as_u16();
        let bytes = resp
            .into_body()
            .collect()
            .await
            .map_err(|_| Status::Transport)?
            .to_bytes();
        Ok::<_, Status>((Status::Http(status), bytes))
    };
    match tokio::time::timeout(timeout, fut).await {
        Ok(Ok(r)) => r,
        Ok(Err(s)) => (s, Bytes::new()),
        Err(_) => (Status::Timeout, Bytes::new()),
    }
}

/// Leaves at least `n` keep-alive connections to `target`'s server in `client`'s pool, as
/// `wrk -c` and `oha -c` open theirs before they start: `n` requests (the target's first body,
/// or `GET`) are sent at once, and each holds its connection (its answer's body unread) until
/// all have an answer, so none can reuse another's and the pool ends up with `n`, or more if it
/// had more. Without them, a pile-up of requests opens connections while it lasts, and each
/// costs both processes CPU and fresh buffers just when they are short. Untimed and unrecorded;
/// gives how many requests were answered (a request that fails leaves no connection).
pub async fn open_connections(
    client: &HttpClient,
    target: &Target,
    n: usize,
    timeout: Duration,
) -> usize {
    let gate = Arc::new(tokio::sync::Barrier::new(n));
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..n {
        let (client, target, gate) = (client.clone(), target.clone(), Arc::clone(&gate));
        tasks.spawn(async move {
            let answer = match request(&target.uri, target.bodies.first().cloned(), &[]) {
                Some(req) => tokio::time::timeout(timeout, client.request(req))
                    .await
                    .ok(),
                None => None,
            };
            // Every task reaches the gate, answered or not, or the others would wait forever.
            gate.wait().await;
            match answer {
                Some(Ok(resp)) => {
                    let ok = resp.status().is_success();
                    // Read to its end, the connection goes back to the pool; dropped unread,
                    // it would be closed.
                    ok && tokio::time::timeout(timeout, resp.into_body().collect())
                        .await
                        .is_ok_and(|r| r.is_ok())
                }
                _ => false,
            }
        });
    }
    let mut answered = 0;
    while let Some(r) = tasks.join_next().await {
        answered += usize::from(r.unwrap_or(false));
    }
    answered
}

/// The schedule: send offsets from the start, in order.
fn schedule(spec: &RunSpec) -> impl Iterator<Item = Duration> + Send + 'static {
    let mut rng = ChaCha8Rng::seed_from_u64(spec.seed);
    let gap = 1.0 / spec.rate;
    let arrivals = spec.arrivals;
    let limit = spec.duration.as_secs_f64();
    let max = spec.max_requests.unwrap_or(u64::MAX);
    let mut t = 0.0f64;
    let mut n = 0u64;
    std::iter::from_fn(move || {
        if n >= max || t >= limit {
            return None;
        }
        let at = Duration::from_secs_f64(t);
        n += 1;
        t += match arrivals {
            Arrivals::Constant => gap,
            // Inverse CDF of the exponential; 1 - u is in (0, 1].
            Arrivals::Poisson => -(1.0 - rng.random::<f64>()).ln() * gap,
        };
        Some(at)
    })
}

/// The most records reserved ahead (about 1 GB of samples); a longer run grows past it.
const MAX_RESERVED: u64 = 1 << 24;

/// About how many requests `spec` schedules, with room for a Poisson count's spread (its
/// standard deviation is the square root of the mean, far below the 5% added here).
fn expected_requests(spec: &RunSpec) -> usize {
    let mean = spec.rate * spec.duration.as_secs_f64();
    let room = (mean * 1.05 + 64.0).min(MAX_RESERVED as f64) as u64;
    room.min(spec.max_requests.unwrap_or(u64::MAX)) as usize
}

/// How close to a send time the sender stops sleeping and spins. tokio's timer has a
/// resolution of 1 ms and a sleeping thread wakes late by the kernel's wake-up latency, with a
/// tail of milliseconds, so the last stretch is spun
/// (docs/decisions/0034-load-generator-pacing-and-memory.md).
const SPIN_WINDOW: Duration = Duration::from_millis(2);

/// Runs `spec` against `target` on the current (single-threaded) runtime.
///
/// One thread paces, sends and receives. While a send is due within [`SPIN_WINDOW`], or a
/// request is in flight, it spins instead of sleeping: each turn yields to the runtime (which
/// polls the sockets without blocking) and to the OS scheduler (so a server thread that shares
/// this core runs at once). Neither its send times nor the moment it sees a response then carry
/// a wake-up of its own. Otherwise it sleeps on tokio's timer until the spin window opens.
pub async fn run(
    client: &HttpClient,
    target: &Target,
    spec: &RunSpec,
    cancel: &Cancel,
) -> RunResult {
    if spec.connections > 0 {
        open_connections(client, target, spec.connections, spec.timeout).await;
    }
    let (done_tx, mut done_rx) = tokio::sync::mpsc::unbounded_channel::<(Sample, Option<Bytes>)>();
    let start = Instant::now();
    let mut sched = schedule(spec).enumerate().peekable();
    let mut result = RunResult::default();
    // Room for every scheduled request up front: doubling a vector of hundreds of thousands of
    // records mid-run copies megabytes while answers wait to be read.
    // Only virtual memory until used; a reservation the allocator refuses is simply skipped.
    let expected = expected_requests(spec);
    let _ = result.samples.try_reserve(expected);
    if spec.keep_bodies {
        let _ = result.bodies.try_reserve(expected);
    }
    let mut in_flight = 0usize;
    let mut pacing = true;
    let mut last_sched = start;
    let n_bodies = target.bodies.len();
    let mut grace: Option<Instant> = None;
    let finish = |result: &mut RunResult, in_flight: &mut usize, done: (Sample, Option<Bytes>)| {
        let (sample, bytes) = done;
        *in_flight -= 1;
        if let Some(bytes) = bytes {
            result.bodies.push(Kept {
                body: sample.body,
                scheduled_us: sample.scheduled_us,
                bytes,
            });
        }
        result.samples.push(sample);
    };
    loop {
        if cancel.is_cancelled() && grace.is_none() {
            result.cancelled = true;
            pacing = false;
            // In-flight requests get a moment to finish; the rest are abandoned.
            grace = Some(Instant::now() + spec.timeout.min(Duration::from_secs(2)));
        }
        let now = Instant::now();
        if grace.is_some_and(|g| now >= g) {
            break;
        }
        // Send everything that is due.
        while pacing {
            let Some(&(i, offset)) = sched.peek() else {
                pacing = false;
                break;
            };
            let at = start + offset;
            if at > now {
                break;
            }
            sched.next();
            last_sched = at;
            let body_idx = if n_bodies == 0 {
                0
            } else {
                (spec.first_body + i) % n_bodies
            };
            let scheduled_us = (at - start).as_micros() as u64;
            if in_flight >= spec.max_in_flight {
                result.samples.push(Sample {
                    scheduled_us,
                    latency_us: 0,
                    service_us: 0,
                    lag_us: 0,
                    status: Status::InFlightCap,
                    body: body_idx,
                });
                continue;
            }
            in_flight += 1;
            result.peak_in_flight = result.peak_in_flight.max(in_flight);
            let body = target.bodies.get(body_idx).cloned();
            let client = client.clone();
            let uri = target.uri.clone();
            let tx = done_tx.clone();
            let timeout = spec.timeout;
            let keep = spec.keep_bodies;
            tokio::spawn(async move {
                let sent = Instant::now();
                let (status, bytes) = send(&client, &uri, body, &[], timeout).await;
                let end = Instant::now();
                let sample = Sample {
                    scheduled_us,
                    latency_us: end.saturating_duration_since(at).as_micros() as u64,
                    service_us: (end - sent).as_micros() as u64,
                    lag_us: sent.saturating_duration_since(at).as_micros() as u64,
                    status,
                    body: body_idx,
                };
                // A response body is a slice of the connection's read buffer, and keeping it
                // would keep that whole buffer, several times the answer, at every request
                // (docs/decisions/0034-load-generator-pacing-and-memory.md). The copy keeps only
                // the answer's bytes.
                let keep = keep && sample.ok();
                let _ = tx.send((sample, keep.then(|| Bytes::copy_from_slice(&bytes))));
            });
        }
        while let Ok(done) = done_rx.try_recv() {
            finish(&mut result, &mut in_flight, done);
        }
        if !pacing && in_flight == 0 {
            break;
        }
        let next = if pacing {
            sched.peek().map(|&(_, offset)| start + offset)
        } else {
            None
        };
        let wake = match next {
            Some(at) if in_flight == 0 => at.checked_sub(SPIN_WINDOW).filter(|&w| w > now),
            _ => None,
        };
        match wake {
            // Nothing in flight and nothing due soon: sleep, but wake for the cancel flag.
            Some(w) => {
                let w = w.min(now + Duration::from_millis(50));
                tokio::time::sleep_until(tokio::time::Instant::from_std(w)).await;
            }
            None => {
                std::thread::yield_now();
                tokio::task::yield_now().await;
            }
        }
    }
    let end = Instant::now();
    result.cancelled |= cancel.is_cancelled();
    result.abandoned = in_flight;
    result.elapsed_s = (end - start).as_secs_f64();
    result.schedule_s = (last_sched - start).as_secs_f64();
    result
}

/// One run handed to a sender thread.
struct Job {
    target: Target,
    spec: RunSpec,
    cancel: Cancel,
    /// When the senders of the run start their schedules (together, to a wake-up's latency).
    start: Instant,
    done: tokio::sync::oneshot::Sender<RunResult>,
}

/// Several sending threads, for a server on more cores than one sender can load.
///
/// Each thread has its own single-threaded runtime and HTTP client (so its keep-alive
/// connections outlive a run, from a warm-up to the measured run after it) and runs [`run`] on
/// its share of every run: `rate / n` on a schedule of its own (seed `seed + k`, first body
/// `first_body + k`), and `max_in_flight / n`, `max_requests / n` and `connections / n` of the
/// caps, rounded up.
/// Sender `k` runs on CPU `cpus[k % cpus.len()]` when `cpus` is given. Every sender spins as
/// [`run`] does, so each takes a core while requests are in flight.
#[derive(Debug)]
pub struct Senders {
    jobs: Vec<std::sync::mpsc::Sender<Job>>,
}

impl Senders {
    /// Starts `n` (≥ 1) sender threads, each with a client whose pool keeps an unused
    /// connection for `idle` (see [`client_with_idle`]).
    pub fn start(n: usize, cpus: &[usize], idle: Option<Duration>) -> anyhow::Result<Senders> {
        anyhow::ensure!(n >= 1, "at least one sender is needed");
        let mut jobs = Vec::with_capacity(n);
        for k in 0..n {
            let (tx, rx) = std::sync::mpsc::channel::<Job>();
            let cpu = (!cpus.is_empty()).then(|| cpus[k % cpus.len()]);
            let (ready_tx, ready_rx) = std::sync::mpsc::channel::<anyhow::Result<()>>();
            std::thread::Builder::new()
                .name(format!("sender-{k}"))
                .spawn(move || {
                    let setup = || -> anyhow::Result<tokio::runtime::Runtime> {
                        if let Some(c) = cpu {
                            crate::pin::pin_self(&[c])?;
                        }
                        Ok(tokio::runtime::Builder::new_current_thread()
                            .enable_all()
                            .build()?)
                    };
                    let rt = match setup() {
                        Ok(rt) => {
                            let _ = ready_tx.send(Ok(()));
                            rt
                        }
                        Err(e) => {
                            let _ = ready_tx.send(Err(e));
                            return;
                        }
                    };
                    rt.block_on(async move {
                        let client = client_with_idle(idle);
                        while let Ok(job) = rx.recv() {
                            tokio::time::sleep_until(tokio::time::Instant::from_std(job.start))
                                .await;
                            let r = run(&client, &job.target, &job.spec, &job.cancel).await;
                            let _ = job.done.send(r);
                        }
                    });
                })
                .map_err(|e| anyhow::anyhow!("starting sender {k}: {e}"))?;
            ready_rx
                .recv()
                .map_err(|_| anyhow::anyhow!("sender {k} stopped while starting"))?
                .map_err(|e| e.context(format!("starting sender {k}")))?;
            jobs.push(tx);
        }
        Ok(Senders { jobs })
    }

    /// How many senders there are.
    pub fn len(&self) -> usize {
        self.jobs.len()
    }

    /// Always false: there is at least one sender.
    pub fn is_empty(&self) -> bool {
        self.jobs.is_empty()
    }

    /// Runs `spec` against `target` from every sender at once, each on its share, and merges
    /// what they recorded as one run ([`RunResult::absorb_concurrent`]). Each sender's
    /// scheduled times count from its own start; the senders start together, to a wake-up's
    /// latency. Awaiting it does not block the calling runtime. A sender that is gone is an
    /// error (the others still run their shares, unawaited).
    pub async fn run(
        &self,
        target: &Target,
        spec: &RunSpec,
        cancel: &Cancel,
    ) -> anyhow::Result<RunResult> {
        let n = self.jobs.len();
        // Long enough for every sender to get its job first.
        let start = Instant::now() + Duration::from_millis(5);
        let mut waiting = Vec::with_capacity(n);
        for (k, tx) in self.jobs.iter().enumerate() {
            let (done, rx) = tokio::sync::oneshot::channel();
            let share = RunSpec {
                rate: spec.rate / n as f64,
                max_requests: spec.max_requests.map(|m| m.div_ceil(n as u64)),
                max_in_flight: spec.max_in_flight.div_ceil(n),
                seed: spec.seed.wrapping_add(k as u64),
                first_body: spec.first_body + k,
                connections: spec.connections.div_ceil(n),
                ..spec.clone()
            };
            let job = Job {
                target: target.clone(),
                spec: share,
                cancel: cancel.clone(),
                start,
                done,
            };
            if tx.send(job).is_err() {
                anyhow::bail!("sender {k} is gone");
            }
            waiting.push(rx);
        }
        let mut merged = RunResult::default();
        for (k, rx) in waiting.into_iter().enumerate() {
            let r = rx
                .await
                .map_err(|_| anyhow::anyhow!("sender {k} stopped during a run"))?;
            merged.absorb_concurrent(r);
        }
        Ok(merged)
    }
}
