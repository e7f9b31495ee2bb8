//! The three scenarios. Each writes its report after every step, so an interrupted run (Ctrl-C)
//! leaves a partial report marked `"partial": true`.

use crate::engine::{self, Cancel, HttpClient, RunResult, RunSpec, Senders, Target};
use crate::queries::{self, Quality, Queries};
use crate::report::{self, DvlRow, HotSwapReport, MaxRateReport, Report, Step};
use crate::scenario::{Kind, MaxRate, Scenario, SwapMethod};
use crate::server::{self, Server};
use crate::stats;
use anyhow::Context;
use bytes::Bytes;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Everything a scenario run needs.
#[derive(Debug)]
pub struct Ctx {
    /// The scenario.
    pub scenario: Scenario,
    /// The report directory.
    pub out: PathBuf,
    /// The stop flag.
    pub cancel: Cancel,
    /// The HTTP client.
    pub client: HttpClient,
    /// With `load.senders` above 1, the sending threads; else the load is sent from this
    /// runtime with `client`.
    pub senders: Option<Senders>,
}

/// A measured run and what was happening around it.
struct Measured {
    r: RunResult,
    /// The host's steal time over the run, ms.
    steal_ms: Option<f64>,
    /// The server's counters' growth over the run, when this tool started it.
    server: Option<server::ProcTimes>,
}

/// The 1-minute load average, if readable.
pub fn loadavg() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

impl Ctx {
    /// One run of `spec` against `target`: from this runtime's thread, or from every sender.
    async fn load(&self, target: &Target, spec: &RunSpec) -> anyhow::Result<RunResult> {
        match &self.senders {
            Some(s) => s.run(target, spec, &self.cancel).await,
            None => Ok(engine::run(&self.client, target, spec, &self.cancel).await),
        }
    }

    fn spec(&self, rate: f64, duration_s: f64, keep: bool, first_body: usize) -> RunSpec {
        let l = &self.scenario.load;
        RunSpec {
            rate,
            arrivals: l.arrivals,
            duration: Duration::from_secs_f64(duration_s),
            max_requests: (l.max_requests > 0).then_some(l.max_requests),
            timeout: Duration::from_millis(l.timeout_ms),
            max_in_flight: l.max_in_flight,
            keep_bodies: keep,
            seed: l.seed,
            first_body,
            connections: l.connections,
        }
    }

    /// The unmeasured warm-up before a measured run at `rate` (`load.warmup_s`; none at 0). It
    /// takes its queries from the end of the bodies, and the measured runs from the start.
    async fn warm_up(&self, target: &Target, rate: f64) -> anyhow::Result<()> {
        let l = &self.scenario.load;
        if l.warmup_s > 0.0 {
            let n = target.bodies.len().max(1);
            let warm = ((rate * l.warmup_s) as usize).min(n);
            let mut w = self.spec(rate, l.warmup_s, false, n - warm);
            w.max_requests = None;
            let _ = self.load(target, &w).await?;
        }
        Ok(())
    }

    /// A warm-up (unmeasured) then a measured run at `rate`, with what the host and the
    /// server (process `pid`, when this tool started it) went through over the measured run.
    async fn measure(
        &self,
        target: &Target,
        pid: Option<u32>,
        rate: f64,
    ) -> anyhow::Result<Measured> {
        self.warm_up(target, rate).await?;
        // Every measured run replays the queries from the first, so the rates of one model
        // answer the same queries.
        let spec = self.spec(rate, self.scenario.load.duration_s, false, 0);
        self.run_watched(target, pid, &spec).await
    }

    /// One run of `spec`, with the host's steal time over it (ms, every CPU together; see
    /// [`server::host_steal_s`]) and the growth of the server's counters (process `pid`).
    async fn run_watched(
        &self,
        target: &Target,
        pid: Option<u32>,
        spec: &RunSpec,
    ) -> anyhow::Result<Measured> {
        let mut sampler = pid.map(server::ProcSampler::new);
        let server_before = sampler.as_mut().and_then(server::ProcSampler::read);
        let before = server::host_steal_s();
        let r = self.load(target, spec).await?;
        let steal_ms = server::host_steal_s()
            .zip(before)
            .map(|(after, before)| (after - before) * 1e3);
        let server = sampler
            .as_mut()
            .and_then(server::ProcSampler::read)
            .zip(server_before)
            .map(|(after, before)| after.since(&before));
        Ok(Measured {
            r,
            steal_ms,
            server,
        })
    }

    /// The server of one `[[models]]` entry: started on its bundle, or found at its URL. A
    /// started one logs to `serve-{label}{phase}.log`.
    async fn model_server(
        &self,
        m: &crate::scenario::ModelSpec,
        phase: &str,
    ) -> anyhow::Result<Server> {
        self.server_for(
            m.bundle.as_deref(),
            m.url.as_deref(),
            &format!("{}{phase}", safe_tag(&m.label)),
            &[],
        )
        .await
    }

    async fn server_for(
        &self,
        bundle: Option<&Path>,
        url: Option<&str>,
        tag: &str,
        env: &[(String, String)],
    ) -> anyhow::Result<Server> {
        match (bundle, url) {
            (_, Some(u)) => Server::existing(&self.client, u).await,
            (Some(b), None) => {
                let mut all: Vec<(String, String)> = self
                    .scenario
                    .server
                    .env
                    .iter()
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                all.extend(env.iter().cloned());
                let server = Server::start(
                    &self.client,
                    &self.scenario.server.xmc,
                    b,
                    &all,
                    &self.out.join(format!("serve-{tag}.log")),
                    Duration::from_secs_f64(self.scenario.server.startup_timeout_s),
                )
                .await?;
                // A started server inherits the generator's CPUs; it gets its own, or all of them.
                let (load, cpus) = (&self.scenario.load.cpus, &self.scenario.server.cpus);
                if let Some(pid) = server.pid()
                    && !(load.is_empty() && cpus.is_empty())
                {
                    let cpus = if cpus.is_empty() {
                        crate::pin::allowed()
                    } else {
                        cpus
                    };
                    crate::pin::pin_process(pid, cpus)?;
                }
                Ok(server)
            }
            (None, None) => anyhow::bail!("no bundle or url for {tag}"),
        }
    }
}

fn predict_target(base: &str, q: &Queries) -> anyhow::Result<Target> {
    Ok(Target {
        uri: server::uri(base, "/v1/predict")?,
        bodies: Arc::new(q.bodies.clone()),
    })
}

fn health_target(base: &str) -> anyhow::Result<Target> {
    Ok(Target {
        uri: server::uri(base, "/healthz")?,
        bodies: Arc::new(Vec::new()),
    })
}

fn safe_tag(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect()
}

/// Runs the scenario, writing the report (also when interrupted). Returns the report.
pub async fn run(ctx: &Ctx) -> anyhow::Result<Report> {
    std::fs::create_dir_all(&ctx.out).with_context(|| format!("creating {}", ctx.out.display()))?;
    let s = &ctx.scenario;
    let queries = Queries::load(&s.data.test, s.data.k, s.data.limit)?;
    let mut rep = Report::new(s, &queries);
    let result = match s.kind {
        Kind::DepthVsLatency => depth_vs_latency(ctx, &queries, &mut rep).await,
        Kind::MaxRate => max_rate_all(ctx, &queries, &mut rep).await,
        Kind::HotSwap => hot_swap(ctx, &queries, &mut rep).await,
    };
    rep.partial = ctx.cancel.is_cancelled() || result.is_err();
    if let Err(e) = &result {
        rep.error = Some(format!("{e:#}"));
    }
    rep.loadavg_end = loadavg();
    report::write(&rep, &ctx.out)?;
    result.map(|()| rep)
}

/// Every model's server runs for the whole sweep. Per rate, `rounds` rounds each run every model
/// for `duration_s / rounds` (after its own warm-up, since its caches cooled while the others
/// ran), starting from a different model each round; a model's runs continue one query
/// sequence, so every model answers the same queries, and its rounds are merged into one row.
async fn depth_vs_latency(ctx: &Ctx, q: &Queries, rep: &mut Report) -> anyhow::Result<()> {
    let Some(dvl) = ctx.scenario.depth_vs_latency.clone() else {
        return Ok(());
    };
    let models = &ctx.scenario.models;
    let mut servers = Vec::with_capacity(models.len());
    for m in models {
        servers.push(ctx.model_server(m, "").await?);
    }
    let targets = servers
        .iter()
        .map(|s| predict_target(&s.url, q))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let l = &ctx.scenario.load;
    let rounds = dvl.rounds.max(1);
    let per_round = l.duration_s / rounds as f64;
    for &rate in &dvl.rates {
        if ctx.cancel.is_cancelled() {
            break;
        }
        let load_before = loadavg();
        let mut merged: Vec<RunResult> = models.iter().map(|_| RunResult::default()).collect();
        'rounds: for round in 0..rounds {
            for j in 0..models.len() {
                if ctx.cancel.is_cancelled() {
                    break 'rounds;
                }
                let i = (round + j) % models.len();
                let target = &targets[i];
                ctx.warm_up(target, rate).await?;
                let n = target.bodies.len().max(1);
                let first = (rate * per_round * round as f64) as usize % n;
                let spec = ctx.spec(rate, per_round, true, first);
                merged[i].absorb(ctx.load(target, &spec).await?);
            }
        }
        for (m, r) in models.iter().zip(merged) {
            let summary = stats::summarize_run(&r);
            let quality = queries::score(q, &r.bodies);
            eprintln!(
                "{} @ {rate} req/s: achieved {:.0}, p50 {:.3} ms, p99 {:.3} ms, errors {}, \
                 P@1 {:.4}, depth@1 {:.3}",
                m.label,
                summary.achieved_rps,
                summary.latency.p50_ms,
                summary.latency.p99_ms,
                summary.errors,
                quality.get("p@1").unwrap_or(f64::NAN),
                quality.get("expected_depth@1").unwrap_or(f64::NAN),
            );
            rep.dvl.push(DvlRow {
                label: m.label.clone(),
                bundle: m.bundle.as_ref().map(|b| b.display().to_string()),
                rate,
                summary,
                quality,
                peak_in_flight: r.peak_in_flight,
                loadavg: load_before,
                cancelled: r.cancelled,
            });
        }
        report::write(rep, &ctx.out)?;
    }
    for mut srv in servers {
        srv.stop();
    }
    Ok(())
}

/// One max-rate trial: passes with no errors, achieved ≥ 95% of offered, p99 ≤ target.
async fn trial(
    ctx: &Ctx,
    target: &Target,
    pid: Option<u32>,
    rate: f64,
    mr: &MaxRate,
) -> anyhow::Result<Step> {
    let Measured {
        r,
        steal_ms,
        server,
    } = ctx.measure(target, pid, rate).await?;
    let summary = stats::summarize_run(&r);
    let pass = !r.cancelled
        && summary.errors == 0
        && summary.achieved_rps >= 0.95 * rate
        && summary.latency.p99_ms <= mr.target_p99_ms;
    eprintln!(
        "  {rate:.0} req/s: achieved {:.0}, p99 {:.3} ms, errors {}, lag p99 {:.3} ms -> {}",
        summary.achieved_rps,
        summary.latency.p99_ms,
        summary.errors,
        summary.lag.p99_ms,
        if pass { "pass" } else { "fail" }
    );
    Ok(Step {
        rate,
        pass,
        summary,
        loadavg: loadavg(),
        steal_ms,
        server,
    })
}

/// Runs `rate` until it passes or has failed `1 + retries` times, recording every run; whether
/// it passed.
async fn attempt(
    ctx: &Ctx,
    target: &Target,
    pid: Option<u32>,
    rate: f64,
    mr: &MaxRate,
    steps: &mut Vec<Step>,
) -> anyhow::Result<bool> {
    for _ in 0..=mr.retries {
        let st = trial(ctx, target, pid, rate, mr).await?;
        let pass = st.pass;
        steps.push(st);
        if pass {
            return Ok(true);
        }
        if ctx.cancel.is_cancelled() {
            break;
        }
    }
    Ok(false)
}

/// Doubles from `start_rate` until a rate fails, then bisects `refine` times. The last doubling
/// is cut to the ceiling, so the ceiling itself is tried; the flag says it passed, in which case
/// the true max rate may be higher.
async fn find_max(
    ctx: &Ctx,
    target: &Target,
    pid: Option<u32>,
    mr: &MaxRate,
) -> anyhow::Result<(Vec<Step>, f64, bool)> {
    let mut steps = Vec::new();
    let (mut lo, mut hi) = (0.0f64, f64::INFINITY);
    let mut at_ceiling = false;
    let mut rate = mr.start_rate;
    while rate <= mr.ceiling && !ctx.cancel.is_cancelled() {
        if attempt(ctx, target, pid, rate, mr, &mut steps).await? {
            lo = rate;
            if rate >= mr.ceiling {
                at_ceiling = true;
                break;
            }
            rate = (rate * 2.0).min(mr.ceiling);
        } else {
            hi = rate;
            break;
        }
    }
    if hi.is_finite() {
        for _ in 0..mr.refine {
            if ctx.cancel.is_cancelled() {
                break;
            }
            let mid = if lo > 0.0 { (lo + hi) / 2.0 } else { hi / 2.0 };
            if attempt(ctx, target, pid, mid, mr, &mut steps).await? {
                lo = mid;
            } else {
                hi = mid;
            }
        }
    }
    Ok((steps, lo, at_ceiling))
}

async fn max_rate_all(ctx: &Ctx, q: &Queries, rep: &mut Report) -> anyhow::Result<()> {
    let Some(mr) = ctx.scenario.max_rate.clone() else {
        return Ok(());
    };
    for m in &ctx.scenario.models {
        if ctx.cancel.is_cancelled() {
            break;
        }
        for ep in &mr.endpoints {
            if ctx.cancel.is_cancelled() {
                break;
            }
            eprintln!("max rate: {} {ep}", m.label);
            let target_of = |url: &str| {
                if ep == "healthz" {
                    health_target(url)
                } else {
                    predict_target(url, q)
                }
            };
            // The search overloads its server on purpose, and an overloaded server keeps the
            // heap of its queued connections (bench/results/2026-11-25-max-rate-runs.md;
            // docs/decisions/0008-heap-trimmer.md). So, as in the hot-swap scenario, a started model gets a fresh server for
            // each search and another for the run at half the max rate.
            let mut srv = ctx.model_server(m, &format!("-{ep}")).await?;
            let target = target_of(&srv.url)?;
            let (steps, max, at_ceiling) = find_max(ctx, &target, srv.pid(), &mr).await?;
            let mut entry = MaxRateReport {
                label: m.label.clone(),
                endpoint: ep.clone(),
                target_p99_ms: mr.target_p99_ms,
                steps,
                max_rate: max,
                at_ceiling,
                half: None,
            };
            if mr.half_s > 0.0 && max > 0.0 && !ctx.cancel.is_cancelled() {
                srv.stop();
                srv = ctx.model_server(m, &format!("-{ep}-half")).await?;
                let target = target_of(&srv.url)?;
                let la = loadavg();
                let mut spec = ctx.spec(max / 2.0, mr.half_s, false, 0);
                spec.max_requests = None;
                let _ = ctx
                    .load(
                        &target,
                        &ctx.spec(max / 2.0, ctx.scenario.load.warmup_s.max(0.5), false, 0),
                    )
                    .await?;
                let Measured {
                    r,
                    steal_ms,
                    server,
                } = ctx.run_watched(&target, srv.pid(), &spec).await?;
                let summary = stats::summarize_run(&r);
                eprintln!(
                    "  half max ({:.0} req/s, {} s): p50 {:.3} ms, p99 {:.3} ms, errors {}",
                    max / 2.0,
                    mr.half_s,
                    summary.latency.p50_ms,
                    summary.latency.p99_ms,
                    summary.errors
                );
                entry.half = Some(Step {
                    rate: max / 2.0,
                    pass: summary.errors == 0,
                    summary,
                    loadavg: la,
                    steal_ms,
                    server,
                });
            }
            rep.max_rate.push(entry);
            report::write(rep, &ctx.out)?;
            srv.stop();
        }
    }
    Ok(())
}

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

async fn hot_swap(ctx: &Ctx, q: &Queries, rep: &mut Report) -> anyhow::Result<()> {
    let Some(h) = ctx.scenario.hot_swap.clone() else {
        return Ok(());
    };
    let abs = |p: &Path| {
        std::fs::canonicalize(p).with_context(|| format!("bundle {} not found", p.display()))
    };
    let bundles = [abs(&h.bundles[0])?, abs(&h.bundles[1])?];
    let link = std::path::absolute(ctx.out.join("serving.xmcb"))?;
    let _ = std::fs::remove_file(&link);
    swap_link(&link, &bundles[0])?;
    let token = format!("loadtest-{}", std::process::id());
    let mut env = vec![
        (
            "XMC_POLL_INTERVAL_MS".to_string(),
            h.poll_interval_ms.to_string(),
        ),
        ("XMC_ADMIN_TOKEN".to_string(), token.clone()),
    ];
    // Started servers log warnings only. These log each model published and released, with
    // how long each took, to line up with the report's slowest requests; 200 lines a run. A
    // scenario's own `XMC_LOG` wins.
    if !ctx.scenario.server.env.contains_key("XMC_LOG") {
        env.push(("XMC_LOG".to_string(), "info".to_string()));
    }
    let rate = match (h.rate, h.rate_fraction, &ctx.scenario.max_rate) {
        (Some(r), _, _) => r,
        (None, Some(f), Some(mr)) => {
            eprintln!("hot swap: measuring the max rate first");
            // The search overloads its server on purpose. The queued requests' buffers would
            // stay in that process's peak RSS (VmHWM) and in its allocator's heap, so the search
            // gets a server of its own and the swaps a fresh one.
            let probe = ctx
                .server_for(Some(&link), None, "hot-swap-max-rate", &env)
                .await?;
            let target = predict_target(&probe.url, q)?;
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
    };
    let srv = ctx.server_for(Some(&link), None, "hot-swap", &env).await?;
    let pid = srv.pid();
    let target = predict_target(&srv.url, q)?;
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
    let swapper = {
        let (client, cancel, bundles, link, url, token) = (
            ctx.client.clone(),
            ctx.cancel.clone(),
            bundles.clone(),
            link.clone(),
            srv.url.clone(),
            token.clone(),
        );
        let (swaps, method, before, force) = (h.swaps, h.method, h.before_s, h.force);
        tokio::spawn(async move {
            let mut log: Vec<(f64, bool, String)> = Vec::new();
            let start = t0 + Duration::from_secs_f64(before);
            for i in 0..swaps {
                tokio::time::sleep_until((start + interval * i as u32).into()).await;
                if cancel.is_cancelled() {
                    break;
                }
                let to = &bundles[(i + 1) % 2];
                let admin = match method {
                    SwapMethod::Rename => false,
                    SwapMethod::Admin => true,
                    SwapMethod::Both => i % 4 >= 2,
                };
                let at = t0.elapsed().as_secs_f64();
                let mut err = String::new();
                if let Err(e) = swap_link(&link, to) {
                    err = format!("{e:#}");
                } else if admin {
                    let auth = format!("Bearer {token}");
                    let route = if force {
                        "/v1/admin/reload?force=true"
                    } else {
                        "/v1/admin/reload"
                    };
                    let u = server::uri(&url, route);
                    if let Ok(u) = u {
                        let (st, body) = engine::send(
                            &client,
                            &u,
                            Some(Bytes::new()),
                            &[("authorization", auth.as_str())],
                            Duration::from_secs(30),
                        )
                        .await;
                        if st != engine::Status::Http(200) {
                            err = format!(
                                "admin reload: {st:?} {}",
                                String::from_utf8_lossy(&body)
                                    .chars()
                                    .take(200)
                                    .collect::<String>()
                            );
                        }
                    }
                }
                log.push((at, admin, err));
            }
            log
        })
    };
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
    // What the machine's CPUs did over at least `[from, to]`, to the sampling's 50 ms.
    let machine_over = |from: f64, to: f64| {
        around(&machine, from, to).map(|(a, b)| {
            let grew = |f: fn(&server::Machine) -> Option<f64>| Some(f(&b.1)? - f(&a.1)?);
            report::Span {
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
    };
    // What the server's counters did over at least `[from, to]`, likewise.
    let server_over = |from: f64, to: f64| around(&procs, from, to).map(|(a, b)| b.1.since(&a.1));
    let hwm = pid.and_then(|p| server::proc_status_kb(p, "VmHWM"));
    let reloads_after = reload_metrics(&ctx.client, &srv.url).await;
    // The engine's clock starts ~5 ms after t0; the 1 s-granular phases do not care.
    let first = log.first().map_or(h.before_s, |x| x.0);
    let last = log.last().map_or(first, |x| x.0) + interval.as_secs_f64();
    let before_end = h.before_s.min(first);
    let before = stats::summarize_window(&r, 0.0, before_end);
    let during = stats::summarize_window(&r, first, last);
    let after = (h.after_s > 0.0).then(|| stats::summarize_window(&r, last, last + h.after_s));
    let without = stats::summarize_windows(&r, &[(0.0, before_end), (last, last + h.after_s)]);
    let cpu_us = |from: f64, to: f64, s: &stats::Summary| {
        let spent_ms = at(&procs, to)?.since(at(&procs, from)?).cpu_ms;
        (s.scheduled > 0).then(|| spent_ms * 1e3 / s.scheduled as f64)
    };
    let cpu_us_per_request = [
        cpu_us(0.0, before_end, &before),
        cpu_us(first, last, &during),
        after
            .as_ref()
            .and_then(|a| cpu_us(last, last + h.after_s, a)),
    ];
    let phases = [(0.0, before_end), (first, last), (last, last + h.after_s)];
    let machine = phases.map(|(from, to)| machine_over(from, to));
    let server = phases.map(|(from, to)| server_over(from, to));
    let all = stats::summarize_run(&r);
    // When the worst went wrong, to line up with the server's log.
    let mut slowest: Vec<&engine::Sample> = r.samples.iter().filter(|x| x.ok()).collect();
    // The slowest few, without sorting a run's million samples.
    let n = slowest.len().min(SLOWEST);
    if n > 0 {
        slowest.select_nth_unstable_by_key(n - 1, |x| std::cmp::Reverse(x.latency_us));
    }
    slowest.truncate(n);
    slowest.sort_by_key(|x| std::cmp::Reverse(x.latency_us));
    // Where each one's time went: the generator's lag, the server's prediction (from its kept
    // response), and what the machine's CPUs did over the wait.
    let slowest = slowest
        .into_iter()
        .map(|x| {
            let (at_s, ms) = (x.scheduled_us as f64 / 1e6, x.latency_us as f64 / 1e3);
            let predict_ms = r
                .bodies
                .iter()
                .find(|k| k.scheduled_us == x.scheduled_us && k.body == x.body)
                .and_then(|k| queries::served(&k.bytes)?.1)
                .map(|us| us / 1e3);
            report::Slow {
                at_s,
                ms,
                lag_ms: x.lag_us as f64 / 1e3,
                predict_ms,
                machine: machine_over(at_s, at_s + ms / 1e3),
                server: server_over(at_s, at_s + ms / 1e3),
            }
        })
        .collect();
    // The failed samples' count and the span of their scheduled times, in one pass.
    let (failed_samples, failed_span) = r
        .samples
        .iter()
        .filter(|x| !x.ok())
        .map(|x| x.scheduled_us as f64 / 1e6)
        .fold((0u64, None), |(n, span): (u64, Option<(f64, f64)>), t| {
            (
                n + 1,
                Some(span.map_or((t, t), |(a, b)| (a.min(t), b.max(t)))),
            )
        });
    // What a swap costs the requests right after it, against drift over the whole run.
    let swap_times: Vec<f64> = log.iter().map(|x| x.0).collect();
    let mut edges: Vec<u64> = [0, 50, 150, 300]
        .into_iter()
        .filter(|&e| e < h.interval_ms)
        .collect();
    edges.push(h.interval_ms);
    let since_swap = edges
        .windows(2)
        .map(|e| (e[0], e[1]))
        .zip(stats::summarize_since(&r, &swap_times, &edges))
        .collect();
    let step = 10.0;
    let timeline = (0..(total / step).ceil() as usize)
        .map(|i| {
            let from = i as f64 * step;
            let to = (from + step).min(total);
            report::Window {
                from_s: from,
                summary: stats::summarize_window(&r, from, to),
                machine: machine_over(from, to),
                server: server_over(from, to),
            }
        })
        .collect();
    let quality: Quality = queries::score(q, &r.bodies);
    // How often the serving version changed, in scheduled order; and the server's own time
    // on each prediction, by phase: the model's share of a phase's latency and CPU.
    let mut kept: Vec<&engine::Kept> = r.bodies.iter().collect();
    kept.sort_by_key(|k| k.scheduled_us);
    let mut version_changes = 0usize;
    let mut prev: Option<String> = None;
    let mut predict = [(); 3].map(|_| stats::histogram());
    let phase_ends = [before_end, last, last + h.after_s];
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
    let predict_time = predict.map(|h| stats::Percentiles::of(&h));
    let budget_kb = (sizes[0] + sizes[1]) / 1024 + 64 * 1024;
    rep.hot_swap = Some(HotSwapReport {
        rate,
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
        since_swap,
        swaps_start_s: first,
        started_unix_s,
        slowest,
        failed_span,
        timeline,
        failed: failed_samples + r.abandoned as u64,
        versions: quality.versions.clone(),
        version_changes,
        reloads_before,
        reloads_after,
        peak_rss_kb_hwm: hwm,
        peak_rss_kb_sampled: sampled_peak,
        cpu_us_per_request,
        predict_time,
        machine,
        server,
        bundle_bytes: sizes,
        rss_budget_kb: budget_kb,
        loadavg: load_before,
    });
    report::write(rep, &ctx.out)?;
    Ok(())
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
