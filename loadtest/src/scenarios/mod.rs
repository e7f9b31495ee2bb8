//! The three scenarios, one room each: its runner, its part of the report (the figures it
//! records, its Markdown section and its plots) and their tests.
//!
//! - [`depth`]: depth versus latency, every model at every rate.
//! - [`max_rate`]: the highest rate that meets the latency line, per model and endpoint.
//! - [`hot_swap`]: latency while the served bundle is swapped under load.

pub mod depth;
pub mod hot_swap;
pub mod max_rate;

use crate::context::loadavg;
use crate::queries::Queries;
use crate::report::la;
use crate::scenario::{Kind, LoadSpec, Scenario};
use anyhow::Context;
use depth::DvlRow;
use hot_swap::HotSwapReport;
use max_rate::MaxRateReport;
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
            loadavg_start: loadavg(),
            loadavg_end: None,
            cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
            dvl: Vec::new(),
            dvl_rounds: s.depth_vs_latency.as_ref().map(|d| d.rounds),
            max_rate: Vec::new(),
            hot_swap: None,
        }
    }
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
