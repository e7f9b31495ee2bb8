//! Hot swap: one continuous run at a fixed rate while the served bundle is swapped every
//! `interval_ms`, by a rename the poller sees or by the admin route, with the machine and the
//! server sampled throughout. With `[hot_swap.repository]`, the swaps write new versions of one
//! model of a repository while the load goes to another ([`repository`]).

mod report;
pub mod repository;

pub(crate) use report::markdown;
pub use report::{HotSwapReport, RepositoryFigures, Slow, Span, Window};

use super::Report;
use super::max_rate::{MaxRateReport, find_max};
use crate::context::{Ctx, loadavg, predict_target};
use crate::engine::{self, HttpClient, RunResult, Target};
use crate::queries::{self, Quality, Queries};
use crate::scenario::{HotSwap, SwapMethod};
use crate::server;
use crate::stats;
use anyhow::Context;
use bytes::Bytes;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The reading at `t` (seconds since the run's start): the first sample at or after it; `None`
/// when no sample is that late.
fn at<T>(samples: &[Sampled<T>], t: f64) -> Option<&T> {
    samples.iter().find(|x| x.0 >= t).map(|x| &x.1)
}

/// A reading taken at a time (seconds since the run's start).
type Sampled<T> = (f64, T);

/// The samples that bound at least `[from, to]`: the last at or before `from` and the first at
/// or after `to`; `None` when the samples do not reach that far on either side.
fn around<T>(samples: &[Sampled<T>], from: f64, to: f64) -> Option<(&Sampled<T>, &Sampled<T>)> {
    let start = samples.iter().rev().find(|x| x.0 <= from)?;
    let end = samples.iter().find(|x| x.0 >= to)?;
    Some((start, end))
}

/// Points `link` at `target` by an atomic rename of a fresh symlink over it.
fn swap_link(link: &Path, target: &Path) -> anyhow::Result<()> {
    let tmp = link.with_extension("tmp-link");
    let _ = std::fs::remove_file(&tmp);
    std::os::unix::fs::symlink(target, &tmp)
        .with_context(|| format!("creating symlink {}", tmp.display()))?;
    std::fs::rename(&tmp, link).with_context(|| format!("renaming onto {}", link.display()))
}

/// `xmc_model_reloads_total` lines of `/metrics`.
async fn reload_metrics(client: &HttpClient, base: &str) -> Vec<String> {
    let Ok(u) = server::uri(base, "/metrics") else {
        return Vec::new();
    };
    let (_, body) = engine::send(client, &u, None, &[], Duration::from_secs(3)).await;
    String::from_utf8_lossy(&body)
        .lines()
        .filter(|l| l.starts_with("xmc_model_reloads_total"))
        .map(str::to_string)
        .collect()
}

/// How many of a hot-swap run's slowest requests its report lists.
const SLOWEST: usize = 8;

/// What a run's server serves and where its load goes: a bundle through a symlink (the load on
/// `/v1/predict`), or a repository whose model `model` takes the load.
struct Serving {
    /// The symlink, or the repository directory.
    path: PathBuf,
    /// A server already running there (repository mode only).
    url: Option<String>,
    /// The repository's versions of the swapped model, and the model that takes the load.
    repository: Option<(repository::Versions, String)>,
}

impl Serving {
    fn target(&self, base: &str, q: &Queries) -> anyhow::Result<Target> {
        match &self.repository {
            Some((_, loaded)) => repository::model_target(base, loaded, q),
            None => predict_target(base, q),
        }
    }
}

/// How a swap is made: the symlink renamed onto the other bundle, or the next version written
/// into the repository.
enum Swap {
    Link(PathBuf),
    Repository(repository::Versions),
}

/// Each swap made: when it started (seconds since the run's start), whether the admin route
/// followed the rename, and its error (empty when none).
type SwapLog = Vec<(f64, bool, String)>;

/// What the sampler read over the run, every 50 ms: the machine's counters and the server's.
struct Samples {
    machine: Vec<Sampled<server::Machine>>,
    procs: Vec<Sampled<server::ProcTimes>>,
}

impl Samples {
    /// What the machine's CPUs did over at least `[from, to]`, to the sampling's 50 ms.
    fn machine_over(&self, from: f64, to: f64) -> Option<Span> {
        around(&self.machine, from, to).map(|(a, b)| {
            let grew = |f: fn(&server::Machine) -> Option<f64>| Some(f(&b.1)? - f(&a.1)?);
            Span {
                ms: (b.0 - a.0) * 1e3,
                cpu_ms: b.1.cpu.since(&a.1.cpu, 1e3),
                generator_ms: grew(|m| m.generator_ms),
                generator_minor_faults: b
                    .1
                    .generator_minor_faults
                    .zip(a.1.generator_minor_faults)
                    .map(|(b, a)| b.saturating_sub(a)),
                kdamond_ms: grew(|m| m.kdamond_ms),
                tcp_sockets: a.1.tcp_sockets.zip(b.1.tcp_sockets).map(|(a, b)| [a, b]),
            }
        })
    }

    /// What the server's counters did over at least `[from, to]`, likewise.
    fn server_over(&self, from: f64, to: f64) -> Option<server::ProcTimes> {
        around(&self.procs, from, to).map(|(a, b)| b.1.since(&a.1))
    }

    /// The server's CPU time per request of `s`, the phase `[from, to]`, µs.
    fn cpu_us(&self, from: f64, to: f64, s: &stats::Summary) -> Option<f64> {
        let spent_ms = at(&self.procs, to)?.since(at(&self.procs, from)?).cpu_ms;
        (s.scheduled > 0).then(|| spent_ms * 1e3 / s.scheduled as f64)
    }
}

/// What one hot-swap run gathered besides its samples, for [`report`].
struct Gathered {
    rate: f64,
    total: f64,
    started_unix_s: f64,
    sizes: [u64; 2],
    repository: Option<RepositoryFigures>,
    reloads_before: Vec<String>,
    reloads_after: Vec<String>,
    hwm: Option<u64>,
    sampled_peak: u64,
    load_before: Option<f64>,
}

/// Runs the hot-swap scenario: the rate (given, or a share of a max-rate search on a server of
/// its own), then a warm-up and one continuous run on a fresh server while the swaps go on.
pub(crate) async fn hot_swap(ctx: &Ctx, q: &Queries, rep: &mut Report) -> anyhow::Result<()> {
    let Some(h) = ctx.scenario.hot_swap.clone() else {
        return Ok(());
    };
    let abs = |p: &Path| {
        std::fs::canonicalize(p).with_context(|| format!("bundle {} not found", p.display()))
    };
    let bundles = [abs(&h.bundles[0])?, abs(&h.bundles[1])?];
    let serving = match &h.repository {
        None => {
            let link = std::path::absolute(ctx.out.join("serving.xmcb"))?;
            let _ = std::fs::remove_file(&link);
            swap_link(&link, &bundles[0])?;
            Serving {
                path: link,
                url: None,
                repository: None,
            }
        }
        Some(r) => {
            let v = repository::prepare(r, &ctx.out.join("repository"), &bundles[0])?;
            Serving {
                path: v.dir.clone(),
                url: r.url.clone(),
                repository: Some((v, r.loaded.clone())),
            }
        }
    };
    let token = match h.repository.as_ref().and_then(|r| r.admin_token.clone()) {
        Some(t) => t,
        None => format!("loadtest-{}", std::process::id()),
    };
    let mut env = vec![
        (
            "XMC_POLL_INTERVAL_MS".to_string(),
            h.poll_interval_ms.to_string(),
        ),
        ("XMC_ADMIN_TOKEN".to_string(), token.clone()),
    ];
    // The model that takes the load answers `/readyz`, so the run starts once it serves.
    if let Some((_, loaded)) = &serving.repository {
        env.push(("XMC_DEFAULT_MODEL".to_string(), loaded.clone()));
    }
    // Started servers log warnings only. These log each model published and released, with
    // how long each took, to line up with the report's slowest requests; 200 lines a run. A
    // scenario's own `XMC_LOG` wins.
    if !ctx.scenario.server.env.contains_key("XMC_LOG") {
        env.push(("XMC_LOG".to_string(), "info".to_string()));
    }
    let rate = swap_rate(ctx, q, rep, &h, &serving, &env).await?;
    let srv = ctx
        .server_for(
            Some(&serving.path),
            serving.url.as_deref(),
            "hot-swap",
            &env,
        )
        .await?;
    let pid = srv.pid();
    let target = serving.target(&srv.url, q)?;
    let sizes = [
        std::fs::metadata(&bundles[0])?.len(),
        std::fs::metadata(&bundles[1])?.len(),
    ];
    let interval = Duration::from_millis(h.interval_ms);
    let swap_span = interval.as_secs_f64() * h.swaps as f64;
    let total = h.before_s + swap_span + h.after_s + 2.0;
    let reloads_before = reload_metrics(&ctx.client, &srv.url).await;
    // Warm-up, then one continuous run; swaps start `before_s` into it.
    let _ = ctx
        .load(
            &target,
            &ctx.spec(rate, ctx.scenario.load.warmup_s.max(0.5), false, 0),
        )
        .await?;
    let mut spec = ctx.spec(rate, total, true, 0);
    spec.max_requests = None;
    let machines = server::MachineSampler::new();
    let t0 = Instant::now();
    let machine_at_start = machines.read();
    let mut proc = pid.map(server::ProcSampler::new);
    let proc_at_start = proc.as_mut().and_then(server::ProcSampler::read);
    let started_unix_s = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64());
    let how = match &serving.repository {
        Some((v, _)) => Swap::Repository(v.clone()),
        None => Swap::Link(serving.path.clone()),
    };
    let swapper = spawn_swapper(ctx, &h, (&bundles, how), (&srv.url, &token), t0);
    let sampler = {
        let cancel = ctx.cancel.clone();
        tokio::spawn(async move {
            let mut peak = 0u64;
            let (mut procs, mut machine) = (Vec::new(), Vec::new());
            let end = t0 + Duration::from_secs_f64(total + 1.0);
            while Instant::now() < end && !cancel.is_cancelled() {
                if let Some(kb) = pid.and_then(|p| server::proc_status_kb(p, "VmRSS")) {
                    peak = peak.max(kb);
                }
                if let Some(s) = proc.as_mut().and_then(server::ProcSampler::read) {
                    procs.push((t0.elapsed().as_secs_f64(), s));
                }
                if let Some(m) = machines.read() {
                    machine.push((t0.elapsed().as_secs_f64(), m));
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            (peak, procs, machine)
        })
    };
    let load_before = loadavg();
    let r = ctx.load(&target, &spec).await?;
    let log = swapper.await.unwrap_or_default();
    let (sampled_peak, mut procs, mut machine) = sampler.await.unwrap_or_default();
    if let Some(m) = machine_at_start {
        machine.insert(0, (0.0, m));
    }
    if let Some(p) = proc_at_start {
        procs.insert(0, (0.0, p));
    }
    let samples = Samples { machine, procs };
    let hwm = pid.and_then(|p| server::proc_status_kb(p, "VmHWM"));
    let reloads_after = reload_metrics(&ctx.client, &srv.url).await;
    let gathered = Gathered {
        rate,
        total,
        started_unix_s,
        sizes,
        repository: serving
            .repository
            .as_ref()
            .map(|(v, loaded)| RepositoryFigures {
                models: v.models,
                swapped: v.swapped.clone(),
                loaded: loaded.clone(),
                other_bytes: v.other_bytes,
            }),
        reloads_before,
        reloads_after,
        hwm,
        sampled_peak,
        load_before,
    };
    rep.hot_swap = Some(report(&h, q, &r, &log, &samples, gathered));
    super::write(rep, &ctx.out)?;
    Ok(())
}

/// The rate of the swap run: the scenario's own, or a share of the max rate that a search on a
/// server of its own finds (and records in the report).
async fn swap_rate(
    ctx: &Ctx,
    q: &Queries,
    rep: &mut Report,
    h: &HotSwap,
    serving: &Serving,
    env: &[(String, String)],
) -> anyhow::Result<f64> {
    Ok(match (h.rate, h.rate_fraction, &ctx.scenario.max_rate) {
        (Some(r), _, _) => r,
        (None, Some(f), Some(mr)) => {
            eprintln!("hot swap: measuring the max rate first");
            // The search overloads its server on purpose. The queued requests' buffers would
            // stay in that process's peak RSS (VmHWM) and in its allocator's heap, so the search
            // gets a server of its own and the swaps a fresh one.
            let probe = ctx
                .server_for(
                    Some(&serving.path),
                    serving.url.as_deref(),
                    "hot-swap-max-rate",
                    env,
                )
                .await?;
            let target = serving.target(&probe.url, q)?;
            let (steps, max, at_ceiling) = find_max(ctx, &target, probe.pid(), mr).await?;
            rep.max_rate.push(MaxRateReport {
                label: "hot-swap bundle A".into(),
                endpoint: "predict".into(),
                target_p99_ms: mr.target_p99_ms,
                steps,
                max_rate: max,
                at_ceiling,
                half: None,
            });
            anyhow::ensure!(max > 0.0, "no rate passed the max-rate criteria");
            max * f
        }
        _ => anyhow::bail!("hot_swap: no rate"),
    })
}

/// Starts the task that makes the swaps: from `before_s` after `t0`, every `interval_ms`, it
/// points the link at the other bundle (or writes the repository's next version of the swapped
/// model from it) and, as the method asks, calls the admin route.
fn spawn_swapper(
    ctx: &Ctx,
    h: &HotSwap,
    (bundles, mut how): (&[PathBuf; 2], Swap),
    (url, token): (&str, &str),
    t0: Instant,
) -> tokio::task::JoinHandle<SwapLog> {
    let (client, cancel, bundles, url, token) = (
        ctx.client.clone(),
        ctx.cancel.clone(),
        bundles.clone(),
        url.to_string(),
        token.to_string(),
    );
    let interval = Duration::from_millis(h.interval_ms);
    let (swaps, method, before, force) = (h.swaps, h.method, h.before_s, h.force);
    tokio::spawn(async move {
        let mut log: SwapLog = Vec::new();
        let start = t0 + Duration::from_secs_f64(before);
        for i in 0..swaps {
            tokio::time::sleep_until((start + interval * i as u32).into()).await;
            if cancel.is_cancelled() {
                break;
            }
            let to = bundles[(i + 1) % 2].clone();
            let admin = match method {
                SwapMethod::Rename => false,
                SwapMethod::Admin => true,
                SwapMethod::Both => i % 4 >= 2,
            };
            let at = t0.elapsed().as_secs_f64();
            let (made, route) = match &mut how {
                Swap::Link(link) => (
                    swap_link(link, &to),
                    if force {
                        "/v1/admin/reload?force=true".to_string()
                    } else {
                        "/v1/admin/reload".to_string()
                    },
                ),
                Swap::Repository(v) => {
                    // A copy of a bundle: off the runtime's one thread, which sends the load.
                    let mut moved = v.clone();
                    let written =
                        tokio::task::spawn_blocking(move || moved.write_next(&to).map(|_| moved))
                            .await
                            .map_err(anyhow::Error::from)
                            .and_then(|r| r);
                    let route = format!("/v2/repository/models/{}/load", v.swapped);
                    (written.map(|w| *v = w), route)
                }
            };
            let err = match made {
                Err(e) => format!("{e:#}"),
                Ok(()) if admin => admin_call(&client, &url, &route, &token).await,
                Ok(()) => String::new(),
            };
            log.push((at, admin, err));
        }
        log
    })
}

/// Calls an admin route (`POST`, empty body, the bearer token); the error, or an empty string
/// when it answered 200.
async fn admin_call(client: &HttpClient, url: &str, route: &str, token: &str) -> String {
    let auth = format!("Bearer {token}");
    let mut err = String::new();
    let u = server::uri(url, route);
    if let Ok(u) = u {
        let (st, body) = engine::send(
            client,
            &u,
            Some(Bytes::new()),
            &[("authorization", auth.as_str())],
            Duration::from_secs(30),
        )
        .await;
        if st != engine::Status::Http(200) {
            err = format!(
                "{route}: {st:?} {}",
                String::from_utf8_lossy(&body)
                    .chars()
                    .take(200)
                    .collect::<String>()
            );
        }
    }
    err
}

/// The hot-swap figures of run `r`, its swaps `log` and its samples.
fn report(
    h: &HotSwap,
    q: &Queries,
    r: &RunResult,
    log: &SwapLog,
    samples: &Samples,
    g: Gathered,
) -> HotSwapReport {
    let interval = Duration::from_millis(h.interval_ms);
    // The engine's clock starts ~5 ms after t0; the 1 s-granular phases do not care.
    let first = log.first().map_or(h.before_s, |x| x.0);
    let last = log.last().map_or(first, |x| x.0) + interval.as_secs_f64();
    let before_end = h.before_s.min(first);
    let before = stats::summarize_window(r, 0.0, before_end);
    let during = stats::summarize_window(r, first, last);
    let after = (h.after_s > 0.0).then(|| stats::summarize_window(r, last, last + h.after_s));
    let without = stats::summarize_windows(r, &[(0.0, before_end), (last, last + h.after_s)]);
    let cpu_us_per_request = [
        samples.cpu_us(0.0, before_end, &before),
        samples.cpu_us(first, last, &during),
        after
            .as_ref()
            .and_then(|a| samples.cpu_us(last, last + h.after_s, a)),
    ];
    let phases = [(0.0, before_end), (first, last), (last, last + h.after_s)];
    let machine = phases.map(|(from, to)| samples.machine_over(from, to));
    let server = phases.map(|(from, to)| samples.server_over(from, to));
    let all = stats::summarize_run(r);
    let (failed_samples, failed_span) = failed(r);
    let quality: Quality = queries::score(q, &r.bodies);
    let (version_changes, predict_time) =
        served_by_phase(r, [before_end, last, last + h.after_s], first);
    let others = g.repository.as_ref().map_or(0, |r| r.other_bytes);
    let budget_kb = (g.sizes[0] + g.sizes[1] + others) / 1024 + 64 * 1024;
    HotSwapReport {
        rate: g.rate,
        swaps_requested: h.swaps,
        swaps_done: log.len(),
        admin_swaps: log.iter().filter(|x| x.1).count(),
        swap_errors: log
            .iter()
            .filter(|x| !x.2.is_empty())
            .map(|x| x.2.clone())
            .collect(),
        method: h.method,
        interval_ms: h.interval_ms,
        before,
        during,
        after,
        without,
        all,
        since_swap: since_swap(r, log, h.interval_ms),
        swaps_start_s: first,
        started_unix_s: g.started_unix_s,
        slowest: slowest(r, samples),
        failed_span,
        timeline: timeline(r, samples, g.total),
        failed: failed_samples + r.abandoned as u64,
        versions: quality.versions.clone(),
        version_changes,
        reloads_before: g.reloads_before,
        reloads_after: g.reloads_after,
        peak_rss_kb_hwm: g.hwm,
        peak_rss_kb_sampled: g.sampled_peak,
        cpu_us_per_request,
        predict_time,
        machine,
        server,
        bundle_bytes: g.sizes,
        repository: g.repository,
        rss_budget_kb: budget_kb,
        loadavg: g.load_before,
    }
}

/// When the worst went wrong, to line up with the server's log: the slowest requests, and
/// where each one's time went (the generator's lag, the server's prediction from its kept
/// response, and what the machine's CPUs did over the wait).
fn slowest(r: &RunResult, samples: &Samples) -> Vec<Slow> {
    let mut slowest: Vec<&engine::Sample> = r.samples.iter().filter(|x| x.ok()).collect();
    // The slowest few, without sorting a run's million samples.
    let n = slowest.len().min(SLOWEST);
    if n > 0 {
        slowest.select_nth_unstable_by_key(n - 1, |x| std::cmp::Reverse(x.latency_us));
    }
    slowest.truncate(n);
    slowest.sort_by_key(|x| std::cmp::Reverse(x.latency_us));
    slowest
        .into_iter()
        .map(|x| {
            let (at_s, ms) = (x.scheduled_us as f64 / 1e6, x.latency_us as f64 / 1e3);
            let predict_ms = r
                .bodies
                .iter()
                .find(|k| k.scheduled_us == x.scheduled_us && k.body == x.body)
                .and_then(|k| queries::served(&k.bytes)?.1)
                .map(|us| us / 1e3);
            Slow {
                at_s,
                ms,
                lag_ms: x.lag_us as f64 / 1e3,
                predict_ms,
                machine: samples.machine_over(at_s, at_s + ms / 1e3),
                server: samples.server_over(at_s, at_s + ms / 1e3),
            }
        })
        .collect()
}

/// The failed samples' count and the span of their scheduled times, in one pass.
fn failed(r: &RunResult) -> (u64, Option<(f64, f64)>) {
    r.samples
        .iter()
        .filter(|x| !x.ok())
        .map(|x| x.scheduled_us as f64 / 1e6)
        .fold((0u64, None), |(n, span): (u64, Option<(f64, f64)>), t| {
            (
                n + 1,
                Some(span.map_or((t, t), |(a, b)| (a.min(t), b.max(t)))),
            )
        })
}

/// What a swap costs the requests right after it, against drift over the whole run: the
/// requests by time since the latest swap.
fn since_swap(r: &RunResult, log: &SwapLog, interval_ms: u64) -> Vec<((u64, u64), stats::Summary)> {
    let swap_times: Vec<f64> = log.iter().map(|x| x.0).collect();
    let mut edges: Vec<u64> = [0, 50, 150, 300]
        .into_iter()
        .filter(|&e| e < interval_ms)
        .collect();
    edges.push(interval_ms);
    edges
        .windows(2)
        .map(|e| (e[0], e[1]))
        .zip(stats::summarize_since(r, &swap_times, &edges))
        .collect()
}

/// The whole run in 10 s windows.
fn timeline(r: &RunResult, samples: &Samples, total: f64) -> Vec<Window> {
    let step = 10.0;
    (0..(total / step).ceil() as usize)
        .map(|i| {
            let from = i as f64 * step;
            let to = (from + step).min(total);
            Window {
                from_s: from,
                summary: stats::summarize_window(r, from, to),
                machine: samples.machine_over(from, to),
                server: samples.server_over(from, to),
            }
        })
        .collect()
}

/// How often the serving version changed, in scheduled order; and the server's own time on
/// each prediction, by phase (the phases end at `phase_ends`; the swaps start at `first`): the
/// model's share of a phase's latency and CPU.
fn served_by_phase(
    r: &RunResult,
    phase_ends: [f64; 3],
    first: f64,
) -> (usize, [stats::Percentiles; 3]) {
    let mut kept: Vec<&engine::Kept> = r.bodies.iter().collect();
    kept.sort_by_key(|k| k.scheduled_us);
    let mut version_changes = 0usize;
    let mut prev: Option<String> = None;
    let mut predict = [(); 3].map(|_| stats::histogram());
    for k in &kept {
        let Some((v, elapsed)) = queries::served(&k.bytes) else {
            continue;
        };
        if prev.as_ref().is_some_and(|p| *p != v) {
            version_changes += 1;
        }
        prev = Some(v);
        let at = k.scheduled_us as f64 / 1e6;
        let phase = match phase_ends.iter().position(|&end| at < end) {
            Some(0) => Some(0),
            Some(_) if at < first => None,
            p => p,
        };
        if let (Some(p), Some(us)) = (phase, elapsed.filter(|u| u.is_finite() && *u >= 0.0)) {
            predict[p].saturating_record((us.round() as u64).max(1));
        }
    }
    (version_changes, predict.map(|h| stats::Percentiles::of(&h)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn around_spans_the_samples_around_a_window() {
        let s = [(0.0, 10.0), (0.05, 10.0), (0.10, 10.3), (0.15, 10.5)];
        let growth = |from, to| around(&s, from, to).map(|(a, b)| b.1 - a.1);
        // Inside one sampling step: the two samples around it.
        assert_eq!(around(&s, 0.06, 0.09), Some((&s[1], &s[2])));
        assert_eq!(growth(0.06, 0.09), Some(10.3 - 10.0));
        // On samples exactly: those samples.
        assert_eq!(around(&s, 0.05, 0.15), Some((&s[1], &s[3])));
        assert_eq!(growth(0.05, 0.15), Some(10.5 - 10.0));
        // Past either end: unknown, not a part.
        assert_eq!(growth(0.06, 0.2), None);
        assert_eq!(growth(-0.01, 0.1), None);
        assert_eq!(around::<f64>(&[], 0.0, 0.0), None);
    }
}
