//! The hot-swap figures and their section of the report.

use crate::report::{f, la, n};
use crate::scenario::SwapMethod;
use crate::stats::Summary;
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt::Write as _;

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
    /// In a repository: its models, the swapped one, the one under load and the other
    /// models' bundles.
    pub repository: Option<RepositoryFigures>,
    /// Both bundles (and the repository's other models' bundles) + 64 MiB, kB.
    pub rss_budget_kb: u64,
    /// 1-minute load average at the start.
    pub loadavg: Option<f64>,
}

/// A hot swap in a model repository: the swaps write new versions of one model while the load
/// goes to another.
#[derive(Clone, Debug, Serialize)]
pub struct RepositoryFigures {
    /// Models served, the swapped one included.
    pub models: usize,
    /// The model whose versions were swapped.
    pub swapped: String,
    /// The model that took the load.
    pub loaded: String,
    /// The bundles of every model but the swapped one (each one's highest version), bytes.
    pub other_bytes: u64,
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

/// The report's hot-swap section.
pub(crate) fn markdown(m: &mut String, h: &HotSwapReport) {
    phases(m, h);
    since_swap(m, h);
    timeline(m, h);
    slowest(m, h);
    summary(m, h);
}

/// The phases' table: before, during and after the swaps.
fn phases(m: &mut String, h: &HotSwapReport) {
    let _ = writeln!(m, "## Hot swap\n");
    if let Some(r) = &h.repository {
        let _ = writeln!(
            m,
            "In a repository of {} models: each swap wrote a new version of `{}`; the load went \
             to `{}` (`/v1/models/{}/predict`), whose figures these are.\n",
            r.models, r.swapped, r.loaded, r.loaded
        );
    }
    let _ = writeln!(
        m,
        "{} swaps of {} asked ({} followed by the admin route, the rest left \
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
}

/// The swap phase by time since the latest swap.
fn since_swap(m: &mut String, h: &HotSwapReport) {
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
            s.scheduled, s.latency.p50_ms, s.latency.p99_ms, s.latency.p999_ms, s.latency.max_ms
        );
    }
}

/// The whole run in 10 s windows.
fn timeline(m: &mut String, h: &HotSwapReport) {
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
}

/// The slowest requests, and where their time went.
fn slowest(m: &mut String, h: &HotSwapReport) {
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
}

/// The closing list: failures, the p99 ratio, memory, versions, CPU, steal, faults and waits.
fn summary(m: &mut String, h: &HotSwapReport) {
    let mb = |kb: u64| kb as f64 / 1024.0;
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
         RSS (VmHWM): **{:.1} MiB** (sampled VmRSS max {:.1} MiB); bundles {:.1} + {:.1} \
         MiB{} + 64 MiB = {:.1} MiB\n- model versions seen: {:?}; version changes in the response \
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
        h.repository.as_ref().map_or(String::new(), |r| format!(
            " + the other models' {:.1} MiB",
            r.other_bytes as f64 / 1048576.0
        )),
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
