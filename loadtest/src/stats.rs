//! Latency summaries from HDR histograms.

use crate::engine::{RunResult, Sample, Status};
use hdrhistogram::Histogram;
use serde::Serialize;
use std::collections::BTreeMap;

/// Percentiles of one histogram, in milliseconds.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct Percentiles {
    /// Recorded values.
    pub n: u64,
    /// Mean.
    pub mean_ms: f64,
    /// Median.
    pub p50_ms: f64,
    /// 90th percentile.
    pub p90_ms: f64,
    /// 99th percentile.
    pub p99_ms: f64,
    /// 99.9th percentile.
    pub p999_ms: f64,
    /// Largest.
    pub max_ms: f64,
}

/// A histogram of microseconds from 1 µs to 1 hour at 3 significant digits.
pub fn histogram() -> Histogram<u64> {
    // The bounds are constants that hdrhistogram accepts; a failure here is a programming error
    // caught by every test.
    Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("valid histogram bounds")
}

impl Percentiles {
    /// The percentiles of `h` (values in µs).
    pub fn of(h: &Histogram<u64>) -> Self {
        if h.is_empty() {
            return Percentiles::default();
        }
        let ms = |v: u64| v as f64 / 1000.0;
        Percentiles {
            n: h.len(),
            mean_ms: h.mean() / 1000.0,
            p50_ms: ms(h.value_at_quantile(0.50)),
            p90_ms: ms(h.value_at_quantile(0.90)),
            p99_ms: ms(h.value_at_quantile(0.99)),
            p999_ms: ms(h.value_at_quantile(0.999)),
            max_ms: ms(h.max()),
        }
    }
}

/// A summary of the samples of one run, or of one time window of it.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Summary {
    /// Requests scheduled in the window.
    pub scheduled: u64,
    /// Successful (2xx) responses.
    pub ok: u64,
    /// Failed requests: non-2xx, timeouts, transport errors, in-flight cap.
    pub errors: u64,
    /// Failures by kind (`http_503`, `timeout`, `transport`, `in_flight_cap`).
    pub error_kinds: BTreeMap<String, u64>,
    /// Offered rate over the window (scheduled / seconds).
    pub offered_rps: f64,
    /// Achieved rate (successful responses / seconds).
    pub achieved_rps: f64,
    /// Latency from the scheduled send time (coordinated-omission corrected), successful requests.
    pub latency: Percentiles,
    /// Latency from the actual send (what a closed-loop tool would report).
    pub service: Percentiles,
    /// The generator's own lag (scheduled to actual send).
    pub lag: Percentiles,
}

fn error_kind(s: Status) -> String {
    match s {
        Status::Http(c) => format!("http_{c}"),
        Status::Timeout => "timeout".into(),
        Status::Transport => "transport".into(),
        Status::InFlightCap => "in_flight_cap".into(),
    }
}

/// Summarises the samples scheduled in `[from_us, to_us)`, over a window of `seconds`.
pub fn summarize<'a>(samples: impl Iterator<Item = &'a Sample>, seconds: f64) -> Summary {
    let (mut lat, mut svc, mut lag) = (histogram(), histogram(), histogram());
    let mut s = Summary::default();
    for x in samples {
        s.scheduled += 1;
        if x.ok() {
            s.ok += 1;
            // Values outside the bounds are clamped rather than lost.
            lat.saturating_record(x.latency_us.max(1));
            svc.saturating_record(x.service_us.max(1));
            lag.saturating_record(x.lag_us.max(1));
        } else {
            s.errors += 1;
            *s.error_kinds.entry(error_kind(x.status)).or_default() += 1;
        }
    }
    let secs = seconds.max(1e-9);
    s.offered_rps = s.scheduled as f64 / secs;
    s.achieved_rps = s.ok as f64 / secs;
    s.latency = Percentiles::of(&lat);
    s.service = Percentiles::of(&svc);
    s.lag = Percentiles::of(&lag);
    s
}

/// The summary of a whole run: the offered rate over the schedule, the achieved rate over the time
/// to the last response.
pub fn summarize_run(r: &RunResult) -> Summary {
    let mut s = summarize(r.samples.iter(), r.elapsed_s);
    // Offered over the span of the schedule (n - 1 gaps), achieved over the whole run.
    if r.schedule_s > 0.0 && s.scheduled > 1 {
        s.offered_rps = (s.scheduled - 1) as f64 / r.schedule_s;
    }
    s
}

/// The summary of the samples scheduled in `[from_s, to_s)` of a run.
pub fn summarize_window(r: &RunResult, from_s: f64, to_s: f64) -> Summary {
    let (a, b) = ((from_s * 1e6) as u64, (to_s * 1e6) as u64);
    summarize(
        r.samples
            .iter()
            .filter(|x| x.scheduled_us >= a && x.scheduled_us < b),
        to_s - from_s,
    )
}
