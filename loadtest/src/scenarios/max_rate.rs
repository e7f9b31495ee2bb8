//! Max rate: the highest offered rate whose run meets the latency line, per model and endpoint.

use super::Report;
use crate::context::{Ctx, Measured, health_target, loadavg, predict_target};
use crate::engine::Target;
use crate::plot::{self, Axes, Series};
use crate::queries::Queries;
use crate::report::{PICKS, f, la};
use crate::scenario::MaxRate;
use crate::stats::{self, Summary};
use serde::Serialize;
use std::fmt::Write as _;
use std::path::Path;

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
pub(crate) async fn find_max(
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

pub(crate) async fn max_rate_all(ctx: &Ctx, q: &Queries, rep: &mut Report) -> anyhow::Result<()> {
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
            super::write(rep, &ctx.out)?;
            srv.stop();
        }
    }
    Ok(())
}

/// The report's max-rate sections: one table per search, then each model's `/v1/predict` as a
/// share of its own server's `/healthz`.
pub(crate) fn markdown(m: &mut String, r: &Report) {
    searches(m, r);
    shares(m, r);
}

/// One table per (model, endpoint) search.
fn searches(m: &mut String, r: &Report) {
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
}

/// Each model's `/v1/predict` max rate against the `/healthz` of the same server.
fn shares(m: &mut String, r: &Report) {
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
}

/// Latency against offered rate over every search.
pub(crate) fn max_rate_plot(r: &Report, out: &Path) -> anyhow::Result<()> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::{Kind, LoadSpec};

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
        let md = crate::scenarios::markdown(&r);
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
        let md = crate::scenarios::markdown(&r);
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
        let md = crate::scenarios::markdown(&r);
        assert!(
            md.contains("1 s warm-up, 512 connections opened before each; latency"),
            "{md}"
        );
    }
}
