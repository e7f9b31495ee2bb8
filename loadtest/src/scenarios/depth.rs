//! Depth versus latency: every model's server at every rate, in interleaved rounds.

use super::Report;
use crate::context::{Ctx, loadavg, predict_target};
use crate::engine::RunResult;
use crate::plot::{self, Axes, Series};
use crate::queries::{self, Quality, Queries};
use crate::report::{PICKS, f, la};
use crate::stats::{self, Summary};
use serde::Serialize;
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

/// Every model's server runs for the whole sweep. Per rate, `rounds` rounds each run every model
/// for `duration_s / rounds` (after its own warm-up, since its caches cooled while the others
/// ran), starting from a different model each round; a model's runs continue one query
/// sequence, so every model answers the same queries, and its rounds are merged into one row.
pub(crate) async fn depth_vs_latency(
    ctx: &Ctx,
    q: &Queries,
    rep: &mut Report,
) -> anyhow::Result<()> {
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
        super::write(rep, &ctx.out)?;
    }
    for mut srv in servers {
        srv.stop();
    }
    Ok(())
}

/// The report's depth-versus-latency section.
pub(crate) fn markdown(m: &mut String, r: &Report) {
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

/// The depth plots: latency against expected depth, precision against depth, latency against
/// rate.
pub(crate) fn depth_plots(r: &Report, out: &Path) -> anyhow::Result<()> {
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
