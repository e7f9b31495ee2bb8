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
    summarize_windows(r, &[(from_s, to_s)])
}

/// The summary of the samples scheduled in any of the windows `[from_s, to_s)` (disjoint), over
/// their total length: one baseline from, say, a phase before some events and one after them.
pub fn summarize_windows(r: &RunResult, windows: &[(f64, f64)]) -> Summary {
    let us: Vec<(u64, u64)> = windows
        .iter()
        .map(|&(a, b)| ((a * 1e6) as u64, (b * 1e6) as u64))
        .collect();
    summarize(
        r.samples.iter().filter(|x| {
            us.iter()
                .any(|&(a, b)| x.scheduled_us >= a && x.scheduled_us < b)
        }),
        windows.iter().map(|&(a, b)| (b - a).max(0.0)).sum(),
    )
}

/// The samples scheduled from the first of `events` (seconds into the run, ascending) to the
/// last edge after the last event, split by how long after the latest event each was
/// scheduled: one summary per window `[edges_ms[i], edges_ms[i + 1])`. A window's rate is over
/// its share of that span.
///
/// This separates what an event (a model swap) costs the requests right after it from a drift
/// that affects the whole phase alike.
pub fn summarize_since(r: &RunResult, events: &[f64], edges_ms: &[u64]) -> Vec<Summary> {
    let events_us: Vec<u64> = events.iter().map(|&e| (e * 1e6) as u64).collect();
    let (Some(&first_us), Some(&last_us)) = (events_us.first(), events_us.last()) else {
        return Vec::new();
    };
    let gap_us = |i: usize| {
        events_us
            .get(i + 1)
            .map_or(u64::MAX, |next| next - events_us[i])
    };
    let end_us = last_us + edges_ms.last().copied().unwrap_or(0) * 1000;
    let windows = edges_ms.windows(2).collect::<Vec<_>>();
    let mut picked: Vec<Vec<&Sample>> = vec![Vec::new(); windows.len()];
    let mut span_us = vec![0u64; windows.len()];
    for i in 0..events_us.len() {
        for (w, edge) in windows.iter().enumerate() {
            let (a, b) = (edge[0] * 1000, (edge[1] * 1000).min(gap_us(i)));
            span_us[w] += b.saturating_sub(a);
        }
    }
    for x in &r.samples {
        let t = x.scheduled_us;
        if t < first_us || t >= end_us {
            continue;
        }
        let i = events_us.partition_point(|&e| e <= t) - 1;
        let since_ms = (t - events_us[i]) / 1000;
        if let Some(w) = windows
            .iter()
            .position(|e| since_ms >= e[0] && since_ms < e[1])
        {
            picked[w].push(x);
        }
    }
    picked
        .into_iter()
        .zip(span_us)
        .map(|(xs, us)| summarize(xs.into_iter(), us as f64 / 1e6))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(scheduled_ms: u64, latency_us: u64) -> Sample {
        Sample {
            scheduled_us: scheduled_ms * 1000,
            latency_us,
            service_us: latency_us,
            lag_us: 0,
            status: Status::Http(200),
            body: 0,
        }
    }

    #[test]
    fn since_splits_by_time_after_the_latest_event() {
        // One request every 10 ms for 3 s; events at 1.0 s and 2.0 s. Requests in the first
        // 50 ms after an event take 5 ms, the rest 1 ms.
        let samples = (0..300u64)
            .map(|i| {
                let t = i * 10;
                let after = [1000, 2000].iter().any(|&e| t >= e && t < e + 50);
                sample(t, if after { 5000 } else { 1000 })
            })
            .collect();
        let r = RunResult {
            samples,
            ..RunResult::default()
        };
        let s = summarize_since(&r, &[1.0, 2.0], &[0, 50, 1000]);
        assert_eq!(s.len(), 2);
        // Before the first event nothing counts; after the last, up to the last edge (1 s).
        assert_eq!(s[0].scheduled, 10);
        assert_eq!(s[1].scheduled, 190);
        assert!(
            (s[0].latency.p50_ms - 5.0).abs() < 0.05,
            "{:?}",
            s[0].latency
        );
        assert!(
            (s[1].latency.p99_ms - 1.0).abs() < 0.05,
            "{:?}",
            s[1].latency
        );
        // The windows' spans add up to the two 1 s gaps: 2 × 50 ms and 2 × 950 ms.
        assert!(
            (s[0].offered_rps - 100.0).abs() < 1e-6,
            "{}",
            s[0].offered_rps
        );
        assert!(
            (s[1].offered_rps - 100.0).abs() < 1e-6,
            "{}",
            s[1].offered_rps
        );
        assert!(summarize_since(&r, &[], &[0, 50]).is_empty());
    }

    #[test]
    fn windows_pool_the_phases_around_events() {
        // One request every 10 ms for 3 s: 1 ms before 1.0 s, 9 ms in [1.0, 2.0), 2 ms after.
        let samples = (0..300u64)
            .map(|i| {
                let t = i * 10;
                let ms = match t {
                    0..1000 => 1000,
                    1000..2000 => 9000,
                    _ => 2000,
                };
                sample(t, ms)
            })
            .collect();
        let r = RunResult {
            samples,
            ..RunResult::default()
        };
        let s = summarize_windows(&r, &[(0.0, 1.0), (2.0, 2.5)]);
        // 100 before and 50 after; nothing from between them.
        assert_eq!(s.scheduled, 150);
        assert!((s.offered_rps - 100.0).abs() < 1e-6, "{}", s.offered_rps);
        assert!(s.latency.max_ms < 2.1, "{:?}", s.latency);
        assert!((s.latency.p50_ms - 1.0).abs() < 0.05, "{:?}", s.latency);
        assert!((s.latency.p99_ms - 2.0).abs() < 0.05, "{:?}", s.latency);
        // An empty second window adds nothing: the baseline of a run without an after phase.
        let before = summarize_windows(&r, &[(0.0, 1.0), (3.0, 3.0)]);
        assert_eq!(before.scheduled, 100);
        assert!((before.offered_rps - 100.0).abs() < 1e-6);
    }
}
