//! The report: `report.json`, `report.md` and the figures (`*.svg`, `*.png`).

use crate::plot::{self, Axes, Series};
use crate::queries::{Quality, Queries};
use crate::scenario::{Kind, LoadSpec, Scenario, SwapMethod};
use crate::stats::Summary;
use anyhow::Context;
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

/// One (model, rate) of depth-vs-latency.
#[derive(Clone, Debug, Serialize)]
pub struct DvlRow {
    /// The model's label.
    pub label: String,
    /// Its bundle, when the tool served it.
    pub bundle: Option<String>,
    /// Offered rate.
    pub rate: f64,
    /// Latency and throughput.
    pub summary: Summary,
    /// P@k, expected depth@k, nodes evaluated.
    pub quality: Quality,
    /// Most requests in flight.
    pub peak_in_flight: usize,
    /// 1-minute load average when the step began.
    pub loadavg: Option<f64>,
    /// Cut short by Ctrl-C.
    pub cancelled: bool,
}

/// One max-rate trial.
#[derive(Clone, Debug, Serialize)]
pub struct Step {
    /// Offered rate.
    pub rate: f64,
    /// Whether it met the criteria.
    pub pass: bool,
    /// Its figures.
    pub summary: Summary,
    /// 1-minute load average after it.
    pub loadavg: Option<f64>,
    /// The host's steal time over the measured run, ms summed over every CPU (see
    /// [`crate::server::host_steal_s`]).
    pub steal_ms: Option<f64>,
    /// The server's CPU time, its threads' run-queue wait and its page faults over the
    /// measured run, when this tool started the server.
    pub server: Option<crate::server::ProcTimes>,
}

/// The max-rate search for one (model, endpoint).
#[derive(Clone, Debug, Serialize)]
pub struct MaxRateReport {
    /// Model label.
    pub label: String,
    /// `predict` or `healthz`.
    pub endpoint: String,
    /// The p99 target.
    pub target_p99_ms: f64,
    /// Every trial, in order.
    pub steps: Vec<Step>,
    /// The highest passing rate (0: none).
    pub max_rate: f64,
    /// The ceiling itself passed: the search stopped there, and the true max may be higher.
    pub at_ceiling: bool,
    /// The run at half the max rate.
    pub half: Option<Step>,
}

/// The hot-swap figures.
#[derive(Clone, Debug, Serialize)]
pub struct HotSwapReport {
    /// Offered rate.
    pub rate: f64,
    /// Swaps asked for.
    pub swaps_requested: usize,
    /// Swaps made.
    pub swaps_done: usize,
    /// Of those, followed by `POST /v1/admin/reload`.
    pub admin_swaps: usize,
    /// Swap or admin-call failures.
    pub swap_errors: Vec<String>,
    /// How swaps were triggered.
    pub method: SwapMethod,
    /// Between swaps.
    pub interval_ms: u64,
    /// Load before the first swap.
    pub before: Summary,
    /// Load from the first swap to one interval after the last.
    pub during: Summary,
    /// Load for `after_s` after that, if the scenario asked for it.
    pub after: Option<Summary>,
    /// The baseline: the load without swaps, before and (with `after_s`) after them.
    pub without: Summary,
    /// The whole run.
    pub all: Summary,
    /// The swap phase's requests by how long after the latest swap they were scheduled: per
    /// window `[from, to)` ms, their summary.
    pub since_swap: Vec<((u64, u64), Summary)>,
    /// When the first swap started, seconds into the run.
    pub swaps_start_s: f64,
    /// When the run started, Unix seconds (to line times in the run up with the server's log).
    pub started_unix_s: f64,
    /// The slowest successful requests, slowest first.
    pub slowest: Vec<Slow>,
    /// The first and the last failed request's scheduled time, seconds into the run.
    pub failed_span: Option<(f64, f64)>,
    /// The whole run in 10 s windows.
    pub timeline: Vec<Window>,
    /// Failed requests over the whole run (errors plus abandoned).
    pub failed: u64,
    /// Model versions in the responses, with counts.
    pub versions: BTreeMap<String, usize>,
    /// How often the version changed between consecutive (by schedule) responses.
    pub version_changes: usize,
    /// `xmc_model_reloads_total` before the run.
    pub reloads_before: Vec<String>,
    /// … and after.
    pub reloads_after: Vec<String>,
    /// The server's VmHWM at the end, kB.
    pub peak_rss_kb_hwm: Option<u64>,
    /// The largest VmRSS sampled every 50 ms, kB.
    pub peak_rss_kb_sampled: u64,
    /// The server's CPU time (user + system, every thread, the loads' included) per request
    /// scheduled, µs: before the swaps, during them, and after them (with `after_s`). Sampled
    /// every 50 ms from `/proc/PID/stat`, so each figure is good to a few clock ticks over its
    /// phase.
    pub cpu_us_per_request: [Option<f64>; 3],
    /// The server's own time on each prediction (`stats.elapsed_us` of the responses) before,
    /// during and after the swaps. Against the CPU per request, it tells the model's part of a
    /// change from the HTTP path's.
    pub predict_time: [crate::stats::Percentiles; 3],
    /// What the machine's CPUs did before, during and after the swaps (to the 50 ms sampling
    /// around each phase): the host's steal time (the VM's CPUs waiting for the hypervisor,
    /// which stalls the server and the generator alike), `kdamond`'s time on a CPU (on this VM
    /// a waiting thread cannot preempt it), the generator's minor faults (a fresh page's first
    /// touch stops its thread while on a CPU) and the TCP sockets in use.
    pub machine: [Option<Span>; 3],
    /// The server's CPU time, its threads' run-queue wait and its page faults before, during
    /// and after the swaps (to the 50 ms sampling around each phase): a phase whose tail grew
    /// with the wait had requests waiting for a core; with major faults, for the disk.
    pub server: [Option<crate::server::ProcTimes>; 3],
    /// The two bundles' sizes, bytes.
    pub bundle_bytes: [u64; 2],
    /// Both bundles + 64 MiB, kB.
    pub rss_budget_kb: u64,
    /// 1-minute load average at the start.
    pub loadavg: Option<f64>,
}

/// One of a hot-swap run's slowest requests, with where its time is known to have gone.
#[derive(Clone, Debug, Serialize)]
pub struct Slow {
    /// Scheduled send time, seconds into the run.
    pub at_s: f64,
    /// Latency from the scheduled send, ms.
    pub ms: f64,
    /// Of that, the generator's own lag before it sent the request, ms.
    pub lag_ms: f64,
    /// The server's own time on the prediction (`stats.elapsed_us` of the response), ms.
    pub predict_ms: Option<f64>,
    /// What the machine's CPUs did over at least that wait (to the sampling's 50 ms).
    pub machine: Option<Span>,
    /// What the server's counters did over the same span.
    pub server: Option<crate::server::ProcTimes>,
}

/// Ten seconds of a hot-swap run.
#[derive(Clone, Debug, Serialize)]
pub struct Window {
    /// Its start, seconds into the run.
    pub from_s: f64,
    /// The requests scheduled in it.
    pub summary: Summary,
    /// What the machine's CPUs did over it (to the 50 ms sampling): host steal, the generator's
    /// and `kdamond`'s time on a CPU, the generator's minor faults.
    pub machine: Option<Span>,
    /// The server's counters' growth over it (to the 50 ms sampling).
    pub server: Option<crate::server::ProcTimes>,
}

/// What the machine's CPUs did over a span of time.
#[derive(Clone, Debug, Serialize)]
pub struct Span {
    /// The span, ms.
    pub ms: f64,
    /// The CPUs' time in it by state, ms summed over every CPU.
    pub cpu_ms: crate::server::CpuTimes,
    /// Of that, the load generator's threads' time on a CPU, ms.
    pub generator_ms: Option<f64>,
    /// The load generator's minor page faults in it: fresh pages it touched.
    pub generator_minor_faults: Option<u64>,
    /// … and the kernel's DAMON reclaim threads' (`kdamond`), ms.
    pub kdamond_ms: Option<f64>,
    /// TCP sockets in use on the machine at its start and its end: connections that the
    /// generator opened (two sockets each on the loopback) in it show as growth.
    pub tcp_sockets: Option<[u64; 2]>,
}

/// A scenario's report.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// Title.
    pub title: String,
    /// Scenario kind.
    pub kind: Kind,
    /// The load settings.
    pub load: LoadSpec,
    /// The data replayed.
    pub data: String,
    /// Queries available.
    pub queries: usize,
    /// k per request.
    pub k: usize,
    /// Cut short (Ctrl-C or an error).
    pub partial: bool,
    /// The error that ended the run, if any.
    pub error: Option<String>,
    /// Load average at the start and end.
    pub loadavg_start: Option<f64>,
    /// …
    pub loadavg_end: Option<f64>,
    /// CPUs available.
    pub cpus: usize,
    /// Depth-vs-latency rows.
    pub dvl: Vec<DvlRow>,
    /// Depth-vs-latency: the interleaved rounds each (model, rate) row merges.
    pub dvl_rounds: Option<usize>,
    /// Max-rate searches.
    pub max_rate: Vec<MaxRateReport>,
    /// Hot-swap figures.
    pub hot_swap: Option<HotSwapReport>,
}

impl Report {
    /// An empty report for `s`.
    pub fn new(s: &Scenario, q: &Queries) -> Report {
        Report {
            title: s.title.clone().unwrap_or_else(|| {
                format!("{:?}", s.kind)
                    .chars()
                    .flat_map(|c| c.to_lowercase())
                    .collect()
            }),
            kind: s.kind,
            load: s.load.clone(),
            data: s.data.test.display().to_string(),
            queries: q.bodies.len(),
            k: q.k,
            partial: true,
            error: None,
            loadavg_start: crate::runner::loadavg(),
            loadavg_end: None,
            cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
            dvl: Vec::new(),
            dvl_rounds: s.depth_vs_latency.as_ref().map(|d| d.rounds),
            max_rate: Vec::new(),
            hot_swap: None,
        }
    }
}

fn f(v: Option<f64>, digits: usize) -> String {
    v.filter(|x| x.is_finite())
        .map_or("–".into(), |x| format!("{x:.digits$}"))
}

/// A count, or a dash where it is unknown.
fn n(v: Option<u64>) -> String {
    v.map_or("–".into(), |x| x.to_string())
}

/// A span's TCP sockets in use, `start → end`, or a dash.
fn sockets(s: Option<&Span>) -> String {
    s.and_then(|s| s.tcp_sockets)
        .map_or("–".into(), |[a, b]| format!("{a} → {b}"))
}

/// A span's host steal time, ms.
fn steal(s: Option<&Span>) -> Option<f64> {
    s.map(|s| s.cpu_ms.steal)
}

/// A span's `kdamond` time, ms.
fn kdamond(s: Option<&Span>) -> Option<f64> {
    s.and_then(|s| s.kdamond_ms)
}

/// A span's minor faults of the generator.
fn generator_faults(s: Option<&Span>) -> Option<u64> {
    s.and_then(|s| s.generator_minor_faults)
}

fn la(v: Option<f64>) -> String {
    f(v, 2)
}

/// The Markdown report.
pub fn markdown(r: &Report) -> String {
    let mut m = String::new();
    let _ = writeln!(m, "# {}\n", r.title);
    let _ = writeln!(
        m,
        "{} queries from `{}`, k = {}; {:?} arrivals{}, {} s per run after {} s warm-up{}; \
         latency from the scheduled send time (coordinated-omission corrected); {} CPUs; load \
         average {} at the start, {} at the end.{}\n",
        r.queries,
        r.data,
        r.k,
        r.load.arrivals,
        if r.load.senders > 1 {
            format!(" from {} sending threads", r.load.senders)
        } else {
            String::new()
        },
        r.load.duration_s,
        r.load.warmup_s,
        if r.load.connections > 0 {
            format!(", {} connections opened before each", r.load.connections)
        } else {
            String::new()
        },
        r.cpus,
        la(r.loadavg_start),
        la(r.loadavg_end),
        if r.partial {
            " **Partial report** (interrupted or failed)."
        } else {
            ""
        }
    );
    if let Some(e) = &r.error {
        let _ = writeln!(m, "Error: {e}\n");
    }
    if !r.dvl.is_empty() {
        let k = r.k;
        let _ = writeln!(m, "## Depth versus latency\n");
        if let Some(rounds) = r.dvl_rounds {
            let _ = writeln!(
                m,
                "Every model's server ran throughout; per rate, {rounds} rounds each ran every \
                 model for {:.1} s after a {:.1} s warm-up, the order rotating from round to \
                 round. A row merges a model's rounds.\n",
                r.load.duration_s / rounds.max(1) as f64,
                r.load.warmup_s
            );
        }
        // With k = 1 the @1 and @k columns would be the same figures twice.
        let ks: Vec<usize> = if k == 1 { vec![1] } else { vec![1, k] };
        let mut cols: Vec<String> = ["model", "rate", "achieved"].map(String::from).to_vec();
        cols.extend(ks.iter().map(|kk| format!("P@{kk}")));
        cols.extend(ks.iter().map(|kk| format!("E[depth]@{kk}")));
        cols.extend(
            [
                "nodes",
                "server µs mean",
                "p50 ms",
                "p90 ms",
                "p99 ms",
                "p99.9 ms",
                "errors",
                "load",
            ]
            .map(String::from),
        );
        // The separator row is derived from the header, so the two cannot disagree.
        let head = format!(
            "| {} |\n|---|{}",
            cols.join(" | "),
            "---:|".repeat(cols.len() - 1)
        );
        let _ = writeln!(m, "{head}");
        for x in &r.dvl {
            let q = &x.quality;
            let s = &x.summary;
            let mut row = format!("| {} | {:.0} | {:.0} |", x.label, x.rate, s.achieved_rps);
            for kk in &ks {
                let _ = write!(row, " {} |", f(q.get(&format!("p@{kk}")), 4));
            }
            for kk in &ks {
                let _ = write!(row, " {} |", f(q.get(&format!("expected_depth@{kk}")), 3));
            }
            let _ = writeln!(
                m,
                "{row} {} | {:.1} | {:.3} | {:.3} | {:.3} | {:.3} | {} | {} |",
                f(q.get("nodes_evaluated_mean"), 1),
                q.server_elapsed.mean_ms * 1000.0,
                s.latency.p50_ms,
                s.latency.p90_ms,
                s.latency.p99_ms,
                s.latency.p999_ms,
                s.errors,
                la(x.loadavg)
            );
        }
        m.push('\n');
    }
    for x in &r.max_rate {
        let _ = writeln!(
            m,
            "## Max rate: {} `{}` (p99 ≤ {} ms, no errors, ≥ 95% achieved)\n\n\
             | offered | achieved | p50 ms | p99 ms | p99.9 ms | errors | generator lag p99 ms | \
             host steal ms | server CPU µs/request | server run-queue wait ms | server major / \
             minor faults | pass | load |\n\
             |---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|",
            x.label, x.endpoint, x.target_p99_ms
        );
        for st in x.steps.iter().chain(&x.half) {
            let s = &st.summary;
            let srv = st.server.as_ref();
            let _ = writeln!(
                m,
                "| {:.0} | {:.0} | {:.3} | {:.3} | {:.3} | {} | {:.3} | {} | {} | {} | {} | {} | \
                 {} |",
                st.rate,
                s.achieved_rps,
                s.latency.p50_ms,
                s.latency.p99_ms,
                s.latency.p999_ms,
                s.errors,
                s.lag.p99_ms,
                f(st.steal_ms, 0),
                f(
                    srv.filter(|_| s.scheduled > 0)
                        .map(|x| x.cpu_ms * 1e3 / s.scheduled as f64),
                    1
                ),
                f(srv.map(|x| x.run_wait_ms), 0),
                srv.map_or("–".to_string(), |x| format!(
                    "{} / {}",
                    x.major_faults, x.minor_faults
                )),
                if st.pass { "yes" } else { "no" },
                la(st.loadavg)
            );
        }
        let _ = writeln!(
            m,
            "\nMax rate: **{:.0} req/s**{}.",
            x.max_rate,
            if x.at_ceiling {
                " (the search's ceiling: the true max may be higher)"
            } else {
                ""
            }
        );
        if let Some(h) = &x.half {
            let _ = writeln!(
                m,
                "At half of it ({:.0} req/s, the last row): p50 {:.3} ms, **p99 {:.3} ms**, \
                 {} errors.",
                h.rate, h.summary.latency.p50_ms, h.summary.latency.p99_ms, h.summary.errors
            );
        }
        m.push('\n');
    }
    // One share per model: its `/v1/predict` against the `/healthz` of the same server.
    for p in r.max_rate.iter().filter(|x| x.endpoint == "predict") {
        let health = r
            .max_rate
            .iter()
            .find(|x| x.endpoint == "healthz" && x.label == p.label);
        let Some(h) = health.filter(|h| h.max_rate > 0.0) else {
            continue;
        };
        // The floor's own p99 at half its max rate says whether the hour could meet a latency
        // line at all: when even `/healthz` misses it, no route of the server can.
        let halves = match (&p.half, &h.half) {
            (Some(ph), Some(hh)) => format!(
                " At half of each: `/v1/predict` p99 {:.3} ms, `/healthz` p99 {:.3} ms.",
                ph.summary.latency.p99_ms, hh.summary.latency.p99_ms
            ),
            _ => String::new(),
        };
        let _ = writeln!(
            m,
            "{}: `/v1/predict` max rate is {}{:.0}% of `/healthz`'s ({:.0} / {:.0} req/s{}).{}\n",
            p.label,
            if h.at_ceiling { "at most " } else { "" },
            100.0 * p.max_rate / h.max_rate,
            p.max_rate,
            h.max_rate,
            if h.at_ceiling {
                "; `/healthz` reached the ceiling"
            } else {
                ""
            },
            halves
        );
    }
    if let Some(h) = &r.hot_swap {
        let mb = |kb: u64| kb as f64 / 1024.0;
        let _ = writeln!(
            m,
            "## Hot swap\n\n{} swaps of {} asked ({} followed by the admin route, the rest left \
             to the poller), every {} ms, at {:.0} req/s; load average {}.\n\n\
             | phase | requests | failed | achieved | p50 ms | p99 ms | p99.9 ms | max ms |\n\
             |---|---:|---:|---:|---:|---:|---:|---:|",
            h.swaps_done,
            h.swaps_requested,
            h.admin_swaps,
            h.interval_ms,
            h.rate,
            la(h.loadavg)
        );
        let mut phases = vec![("before", &h.before), ("during", &h.during)];
        if let Some(after) = &h.after {
            phases.push(("after", after));
            phases.push(("without swaps (before + after)", &h.without));
        }
        phases.push(("all", &h.all));
        for (name, s) in phases {
            let _ = writeln!(
                m,
                "| {name} | {} | {} | {:.0} | {:.3} | {:.3} | {:.3} | {:.3} |",
                s.scheduled,
                s.errors,
                s.achieved_rps,
                s.latency.p50_ms,
                s.latency.p99_ms,
                s.latency.p999_ms,
                s.latency.max_ms
            );
        }
        let _ = writeln!(
            m,
            "\nThe swap phase by time since the latest swap was started (a rename, then for \
             admin swaps the reload call; a poller swap lands up to one poll interval later):\n\n\
             | since swap | requests | p50 ms | p99 ms | p99.9 ms | max ms |\n\
             |---|---:|---:|---:|---:|---:|"
        );
        for ((a, b), s) in &h.since_swap {
            let _ = writeln!(
                m,
                "| {a}–{b} ms | {} | {:.3} | {:.3} | {:.3} | {:.3} |",
                s.scheduled,
                s.latency.p50_ms,
                s.latency.p99_ms,
                s.latency.p999_ms,
                s.latency.max_ms
            );
        }
        let _ = writeln!(
            m,
            "\nThe whole run in 10 s windows (swaps start at {:.0} s):\n\n\
             | from s | requests | p50 ms | p99 ms | max ms | host steal ms | kdamond ms | \
             generator minor faults | TCP sockets | server run-queue wait ms | server major / \
             minor faults |\n\
             |---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
            h.swaps_start_s
        );
        for w in &h.timeline {
            let s = &w.summary;
            let _ = writeln!(
                m,
                "| {:.0} | {} | {:.3} | {:.3} | {:.3} | {} | {} | {} | {} | {} | {} |",
                w.from_s,
                s.scheduled,
                s.latency.p50_ms,
                s.latency.p99_ms,
                s.latency.max_ms,
                f(steal(w.machine.as_ref()), 0),
                f(kdamond(w.machine.as_ref()), 1),
                n(generator_faults(w.machine.as_ref())),
                sockets(w.machine.as_ref()),
                f(w.server.map(|x| x.run_wait_ms), 1),
                w.server.map_or("–".to_string(), |x| format!(
                    "{} / {}",
                    x.major_faults, x.minor_faults
                ))
            );
        }
        let slowest = h
            .slowest
            .iter()
            .map(|x| {
                let machine = x.machine.as_ref().map_or(String::new(), |s| {
                    let c = &s.cpu_ms;
                    format!(
                        "; over the {:.0} ms around it, the CPUs' user {:.0}, system {:.0}, \
                         interrupts {:.0}, idle {:.0}, host steal {:.0} ms, of which the \
                         generator ran {} ms (taking {} minor faults) and kdamond {} ms; \
                         TCP sockets in use {}",
                        s.ms,
                        c.user,
                        c.system,
                        c.irq,
                        c.idle,
                        c.steal,
                        f(s.generator_ms, 1),
                        n(s.generator_minor_faults),
                        f(s.kdamond_ms, 1),
                        sockets(Some(s))
                    )
                });
                let server = x.server.map_or(String::new(), |s| {
                    format!(
                        "; the server's threads waited {:.1} ms for a CPU and took {} major \
                         and {} minor faults",
                        s.run_wait_ms, s.major_faults, s.minor_faults
                    )
                });
                format!(
                    "{:.1} ms at {:.2} s (generator lag {:.1} ms, prediction {} ms{machine}\
                     {server})",
                    x.ms,
                    x.at_s,
                    x.lag_ms,
                    f(x.predict_ms, 3),
                )
            })
            .collect::<Vec<_>>()
            .join(", ");
        let _ = writeln!(
            m,
            "\nThe slowest requests (scheduled, seconds into the run, which started at Unix time \
             {:.3}): {slowest}. Failed requests: {}.",
            h.started_unix_s,
            h.failed_span.map_or("none".to_string(), |(a, b)| format!(
                "scheduled from {a:.2} s to {b:.2} s"
            ))
        );
        let over = |base: &Summary| {
            if base.latency.p99_ms > 0.0 {
                h.during.latency.p99_ms / base.latency.p99_ms
            } else {
                f64::NAN
            }
        };
        let ratio = match &h.after {
            Some(after) => format!(
                "p99 during / without swaps (before and after): **{:.2}×** (during / before \
                 {:.2}×, during / after {:.2}×)",
                over(&h.without),
                over(&h.before),
                over(after)
            ),
            None => format!("p99 during / before: **{:.2}×**", over(&h.before)),
        };
        let peak = h.peak_rss_kb_hwm.unwrap_or(h.peak_rss_kb_sampled);
        let pt = |p: &crate::stats::Percentiles| {
            if p.n == 0 {
                "–".to_string()
            } else {
                format!("{:.1} / {:.1} µs", p.p50_ms * 1e3, p.p99_ms * 1e3)
            }
        };
        let cpu = match h.cpu_us_per_request {
            [Some(b), Some(d), a] => format!(
                "{b:.1} µs before, {d:.1} µs during ({:.2}×; the loads' own CPU included){}",
                d / b,
                a.map_or(String::new(), |a| format!(", {a:.1} µs after"))
            ),
            _ => "not read".to_string(),
        };
        // A phase's wait, also per second of the phase: the phases differ in length.
        let phase_s = [Some(&h.before), Some(&h.during), h.after.as_ref()].map(|s| {
            s.filter(|s| s.offered_rps > 0.0)
                .map(|s| s.scheduled as f64 / s.offered_rps)
        });
        let wait = |i: usize| {
            h.server[i]
                .zip(phase_s[i])
                .map_or("–".to_string(), |(x, secs)| {
                    format!(
                        "{:.0} ms ({:.1} ms/s)",
                        x.run_wait_ms,
                        x.run_wait_ms / secs.max(1e-9)
                    )
                })
        };
        let phase = |i: usize| h.machine[i].as_ref();
        let faults = |i: usize| {
            h.server[i].map_or("–".to_string(), |x| {
                format!("{} major / {} minor", x.major_faults, x.minor_faults)
            })
        };
        let _ = writeln!(
            m,
            "\n- failed requests: **{}**\n- {ratio}\n- peak server \
             RSS (VmHWM): **{:.1} MiB** (sampled VmRSS max {:.1} MiB); bundles {:.1} + {:.1} MiB \
             + 64 MiB = {:.1} MiB\n- model versions seen: {:?}; version changes in the response \
             stream: {}\n- reloads metric before: `{}`; after: `{}`\n- swap errors: {}\n\
             - server CPU per request: {cpu}\n- the server's own time per prediction \
             (`stats.elapsed_us`), p50 / p99: {} before, {} during, {} after the swaps\n\
             - host steal time (every CPU): {} ms before, {} ms during, {} ms after the swaps\n\
             - kdamond's time on a CPU: {} ms before, {} ms during, {} ms after the swaps\n\
             - the generator's minor faults: {} before, {} during, {} after the swaps\n\
             - the server's threads' run-queue wait: {} before, {} during, {} after the swaps; \
             its faults: {} before, {} during, {} after\n",
            h.failed,
            mb(peak),
            mb(h.peak_rss_kb_sampled),
            h.bundle_bytes[0] as f64 / 1048576.0,
            h.bundle_bytes[1] as f64 / 1048576.0,
            mb(h.rss_budget_kb),
            h.versions,
            h.version_changes,
            h.reloads_before.join(", "),
            h.reloads_after.join(", "),
            if h.swap_errors.is_empty() {
                "none".to_string()
            } else {
                h.swap_errors.join("; ")
            },
            pt(&h.predict_time[0]),
            pt(&h.predict_time[1]),
            pt(&h.predict_time[2]),
            f(steal(phase(0)), 0),
            f(steal(phase(1)), 0),
            f(steal(phase(2)), 0),
            f(kdamond(phase(0)), 1),
            f(kdamond(phase(1)), 1),
            f(kdamond(phase(2)), 1),
            n(generator_faults(phase(0))),
            n(generator_faults(phase(1))),
            n(generator_faults(phase(2))),
            wait(0),
            wait(1),
            wait(2),
            faults(0),
            faults(1),
            faults(2)
        );
    }
    m
}

/// The percentiles drawn: p50 and p99 of the corrected latency.
type Pick = (&'static str, fn(&Summary) -> f64);
const PICKS: [Pick; 2] = [
    ("p50", |s: &Summary| s.latency.p50_ms),
    ("p99", |s: &Summary| s.latency.p99_ms),
];

fn depth_plots(r: &Report, out: &Path) -> anyhow::Result<()> {
    let k = r.k;
    let mut rates: Vec<f64> = r.dvl.iter().map(|x| x.rate).collect();
    rates.sort_by(f64::total_cmp);
    rates.dedup();
    let mut models: Vec<&str> = Vec::new();
    for x in &r.dvl {
        if !models.contains(&x.label.as_str()) {
            models.push(&x.label);
        }
    }
    // Expected depth@1 and @k against p50 and p99, one point per model, per rate.
    for kk in [1, k] {
        let key = format!("expected_depth@{kk}");
        let mut series = Vec::new();
        for &rate in &rates {
            let rows: Vec<&DvlRow> = {
                let mut v: Vec<&DvlRow> = r.dvl.iter().filter(|x| x.rate == rate).collect();
                v.sort_by(|a, b| {
                    a.quality
                        .get(&key)
                        .unwrap_or(0.0)
                        .total_cmp(&b.quality.get(&key).unwrap_or(0.0))
                });
                v
            };
            for (name, pick) in PICKS {
                series.push(Series {
                    name: format!("{name} @ {rate:.0} req/s"),
                    points: rows
                        .iter()
                        .map(|x| (x.quality.get(&key).unwrap_or(f64::NAN), pick(&x.summary)))
                        .collect(),
                    labels: rows.iter().map(|x| x.label.clone()).collect(),
                    scatter: false,
                });
            }
        }
        plot::write(
            &out.join(format!("depth{kk}_latency")),
            Axes {
                title: &format!("latency vs expected depth@{kk} (over HTTP)"),
                x: &format!("expected depth@{kk}"),
                y: "latency from scheduled send (ms, log scale)",
                log_y: true,
            },
            &series,
        )?;
    }
    // P@k against expected depth@k: one point per model (its lowest-rate row).
    let mut series = Vec::new();
    for kk in [1, k] {
        let mut pts = Vec::new();
        let mut labels = Vec::new();
        for &mname in &models {
            if let Some(x) = r.dvl.iter().find(|x| x.label == mname) {
                pts.push((
                    x.quality
                        .get(&format!("expected_depth@{kk}"))
                        .unwrap_or(f64::NAN),
                    x.quality.get(&format!("p@{kk}")).unwrap_or(f64::NAN),
                ));
                labels.push(mname.to_string());
            }
        }
        series.push(Series {
            name: format!("P@{kk} vs expected depth@{kk}"),
            points: pts,
            labels,
            scatter: true,
        });
    }
    plot::write(
        &out.join("precision_depth"),
        Axes {
            title: "precision vs expected depth (from the HTTP responses)",
            x: "expected depth@k",
            y: "P@k",
            log_y: false,
        },
        &series,
    )?;
    // Latency against offered rate, per model.
    let mut series = Vec::new();
    for &mname in &models {
        let rows: Vec<&DvlRow> = r.dvl.iter().filter(|x| x.label == mname).collect();
        for (name, pick) in PICKS {
            series.push(Series {
                name: format!("{mname} {name}"),
                points: rows.iter().map(|x| (x.rate, pick(&x.summary))).collect(),
                labels: Vec::new(),
                scatter: false,
            });
        }
    }
    plot::write(
        &out.join("latency_rate"),
        Axes {
            title: "latency vs offered rate",
            x: "offered rate (req/s)",
            y: "latency (ms, log scale)",
            log_y: true,
        },
        &series,
    )
}

fn max_rate_plot(r: &Report, out: &Path) -> anyhow::Result<()> {
    let mut series = Vec::new();
    for x in &r.max_rate {
        let mut steps: Vec<&Step> = x.steps.iter().chain(&x.half).collect();
        steps.sort_by(|a, b| a.rate.total_cmp(&b.rate));
        for (name, pick) in PICKS {
            series.push(Series {
                name: format!("{} {} {name}", x.label, x.endpoint),
                points: steps.iter().map(|s| (s.rate, pick(&s.summary))).collect(),
                labels: Vec::new(),
                scatter: false,
            });
        }
    }
    plot::write(
        &out.join("max_rate_latency"),
        Axes {
            title: "latency vs offered rate (max-rate search)",
            x: "offered rate (req/s)",
            y: "latency (ms, log scale)",
            log_y: true,
        },
        &series,
    )
}

/// Writes `report.json`, `report.md` and the figures into `out`.
pub fn write(r: &Report, out: &Path) -> anyhow::Result<()> {
    let json = serde_json::to_string_pretty(r)?;
    let p = out.join("report.json");
    std::fs::write(&p, json).with_context(|| format!("writing {}", p.display()))?;
    let p = out.join("report.md");
    std::fs::write(&p, markdown(r)).with_context(|| format!("writing {}", p.display()))?;
    if !r.dvl.is_empty() {
        depth_plots(r, out)?;
    }
    if !r.max_rate.is_empty() {
        max_rate_plot(r, out)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn search(label: &str, endpoint: &str, max_rate: f64) -> MaxRateReport {
        MaxRateReport {
            label: label.into(),
            endpoint: endpoint.into(),
            target_p99_ms: 10.0,
            steps: Vec::new(),
            max_rate,
            at_ceiling: false,
            half: None,
        }
    }

    /// Each model's `/v1/predict` is set against the `/healthz` of its own server.
    #[test]
    fn every_model_gets_its_own_share_of_the_http_floor() {
        let mut r = Report {
            title: "t".into(),
            kind: Kind::MaxRate,
            load: LoadSpec::default(),
            data: "d".into(),
            queries: 1,
            k: 5,
            partial: false,
            error: None,
            loadavg_start: None,
            loadavg_end: None,
            cpus: 2,
            dvl: Vec::new(),
            dvl_rounds: None,
            max_rate: vec![
                search("a", "predict", 18000.0),
                search("a", "healthz", 32000.0),
                search("b", "predict", 14000.0),
                search("b", "healthz", 28000.0),
            ],
            hot_swap: None,
        };
        let md = markdown(&r);
        assert!(
            md.contains("a: `/v1/predict` max rate is 56% of `/healthz`'s (18000 / 32000 req/s)"),
            "{md}"
        );
        assert!(
            md.contains("b: `/v1/predict` max rate is 50% of `/healthz`'s (14000 / 28000 req/s)"),
            "{md}"
        );
        // Without half-rate runs there are no half-rate figures to set side by side.
        assert!(!md.contains("At half of each"), "{md}");
        let half = |p99_ms: f64| {
            let mut summary = Summary::default();
            summary.latency.p99_ms = p99_ms;
            Step {
                rate: 0.0,
                pass: true,
                summary,
                loadavg: None,
                steal_ms: None,
                server: None,
            }
        };
        r.max_rate[0].half = Some(half(4.123));
        r.max_rate[1].half = Some(half(0.857));
        let md = markdown(&r);
        assert!(
            md.contains(
                "(18000 / 32000 req/s). At half of each: `/v1/predict` p99 4.123 ms, \
                 `/healthz` p99 0.857 ms."
            ),
            "{md}"
        );
        // Model b has no half-rate runs, so its line is as before.
        assert!(md.contains("(14000 / 28000 req/s).\n"), "{md}");
        // The load shape says when connections were opened first, and only then.
        assert!(!md.contains("connections opened"), "{md}");
        r.load.connections = 512;
        let md = markdown(&r);
        assert!(
            md.contains("1 s warm-up, 512 connections opened before each; latency"),
            "{md}"
        );
    }
}
