//! The report: `report.json`, `report.md` and the figures (`*.svg`, `*.png`). Each scenario's
//! figures, Markdown section and plots live with its runner in [`crate::scenarios`]; this
//! module holds the report they fill, its opening lines and the formatting they share.

pub use crate::scenarios::depth::DvlRow;
pub use crate::scenarios::hot_swap::{HotSwapReport, Slow, Span, Window};
pub use crate::scenarios::max_rate::{MaxRateReport, Step};

use crate::queries::Queries;
use crate::scenario::{Kind, LoadSpec, Scenario};
use crate::scenarios::{depth, hot_swap, max_rate};
use crate::stats::Summary;
use anyhow::Context;
use serde::Serialize;
use std::fmt::Write as _;
use std::path::Path;

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

/// A figure to `digits` decimals, or a dash where it is unknown or not finite.
pub(crate) fn f(v: Option<f64>, digits: usize) -> String {
    v.filter(|x| x.is_finite())
        .map_or("–".into(), |x| format!("{x:.digits$}"))
}

/// A count, or a dash where it is unknown.
pub(crate) fn n(v: Option<u64>) -> String {
    v.map_or("–".into(), |x| x.to_string())
}

/// A span's TCP sockets in use, `start → end`, or a dash.
pub(crate) fn sockets(s: Option<&Span>) -> String {
    s.and_then(|s| s.tcp_sockets)
        .map_or("–".into(), |[a, b]| format!("{a} → {b}"))
}

/// A span's host steal time, ms.
pub(crate) fn steal(s: Option<&Span>) -> Option<f64> {
    s.map(|s| s.cpu_ms.steal)
}

/// A span's `kdamond` time, ms.
pub(crate) fn kdamond(s: Option<&Span>) -> Option<f64> {
    s.and_then(|s| s.kdamond_ms)
}

/// A span's minor faults of the generator.
pub(crate) fn generator_faults(s: Option<&Span>) -> Option<u64> {
    s.and_then(|s| s.generator_minor_faults)
}

/// A load average, or a dash.
pub(crate) fn la(v: Option<f64>) -> String {
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
        depth::markdown(&mut m, r);
    }
    max_rate::markdown(&mut m, r);
    if let Some(h) = &r.hot_swap {
        hot_swap::markdown(&mut m, h);
    }
    m
}

/// The percentiles drawn: p50 and p99 of the corrected latency.
pub(crate) type Pick = (&'static str, fn(&Summary) -> f64);
pub(crate) const PICKS: [Pick; 2] = [
    ("p50", |s: &Summary| s.latency.p50_ms),
    ("p99", |s: &Summary| s.latency.p99_ms),
];

/// Writes `report.json`, `report.md` and the figures into `out`.
pub fn write(r: &Report, out: &Path) -> anyhow::Result<()> {
    let json = serde_json::to_string_pretty(r)?;
    let p = out.join("report.json");
    std::fs::write(&p, json).with_context(|| format!("writing {}", p.display()))?;
    let p = out.join("report.md");
    std::fs::write(&p, markdown(r)).with_context(|| format!("writing {}", p.display()))?;
    if !r.dvl.is_empty() {
        depth::depth_plots(r, out)?;
    }
    if !r.max_rate.is_empty() {
        max_rate::max_rate_plot(r, out)?;
    }
    Ok(())
}
