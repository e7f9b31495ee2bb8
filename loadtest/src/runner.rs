//! [`run`]: runs the scenario a file names (see [`crate::scenarios`]) in the context
//! [`crate::context`] holds. Each scenario writes its report after every step, so an interrupted
//! run (Ctrl-C) leaves a partial report marked `"partial": true`.

pub use crate::context::Ctx;
use crate::context::loadavg;
use crate::queries::Queries;
use crate::scenario::Kind;
use crate::scenarios::{self, Report, depth, hot_swap, max_rate};
use anyhow::Context;

/// Runs the scenario, writing the report (also when interrupted). Returns the report.
pub async fn run(ctx: &Ctx) -> anyhow::Result<Report> {
    std::fs::create_dir_all(&ctx.out).with_context(|| format!("creating {}", ctx.out.display()))?;
    let s = &ctx.scenario;
    let queries = Queries::load(&s.data.test, s.data.k, s.data.limit)?;
    let mut rep = Report::new(s, &queries);
    let result = match s.kind {
        Kind::DepthVsLatency => depth::depth_vs_latency(ctx, &queries, &mut rep).await,
        Kind::MaxRate => max_rate::max_rate_all(ctx, &queries, &mut rep).await,
        Kind::HotSwap => hot_swap::hot_swap(ctx, &queries, &mut rep).await,
    };
    rep.partial = ctx.cancel.is_cancelled() || result.is_err();
    if let Err(e) = &result {
        rep.error = Some(format!("{e:#}"));
    }
    rep.loadavg_end = loadavg();
    scenarios::write(&rep, &ctx.out)?;
    result.map(|()| rep)
}
