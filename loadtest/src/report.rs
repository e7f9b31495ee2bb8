//! The formatting every scenario's section of the report shares: figures or dashes, and the
//! percentiles drawn. The report itself, which the scenarios fill, is [`crate::scenarios::Report`].

use crate::stats::Summary;

/// A figure to `digits` decimals, or a dash where it is unknown or not finite.
pub(crate) fn f(v: Option<f64>, digits: usize) -> String {
    v.filter(|x| x.is_finite())
        .map_or("–".into(), |x| format!("{x:.digits$}"))
}

/// A count, or a dash where it is unknown.
pub(crate) fn n(v: Option<u64>) -> String {
    v.map_or("–".into(), |x| x.to_string())
}

/// A load average, or a dash.
pub(crate) fn la(v: Option<f64>) -> String {
    f(v, 2)
}

/// The percentiles drawn: p50 and p99 of the corrected latency.
pub(crate) type Pick = (&'static str, fn(&Summary) -> f64);
pub(crate) const PICKS: [Pick; 2] = [
    ("p50", |s: &Summary| s.latency.p50_ms),
    ("p99", |s: &Summary| s.latency.p99_ms),
];
