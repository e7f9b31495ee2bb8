//! The Prometheus recorder, its upkeep, and the in-flight gauge.

use super::*;

/// The process-wide Prometheus recorder (installed once; later calls share it).
pub fn metrics_handle() -> PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            // Microsecond-scale buckets: the request path is expected to take 10 µs to 10 ms.
            let micro = [
                10e-6, 25e-6, 50e-6, 100e-6, 200e-6, 350e-6, 500e-6, 750e-6, 1e-3, 2e-3, 5e-3,
                10e-3, 50e-3, 0.25, 1.0,
            ];
            let recorder = PrometheusBuilder::new()
                .set_buckets_for_metric(
                    Matcher::Full("xmc_request_duration_seconds".into()),
                    &micro,
                )
                .and_then(|b| {
                    b.set_buckets_for_metric(
                        Matcher::Full("xmc_predict_depth".into()),
                        &[1.0, 2.0, 3.0, 4.0, 6.0, 8.0, 10.0, 12.0, 16.0, 24.0, 32.0],
                    )
                })
                .and_then(|b| {
                    b.set_buckets_for_metric(
                        Matcher::Full("xmc_predict_nodes_evaluated".into()),
                        &[
                            1.0, 5.0, 10.0, 25.0, 50.0, 100.0, 200.0, 500.0, 1000.0, 5000.0,
                        ],
                    )
                })
                .map(|b| b.build_recorder())
                .unwrap_or_else(|_| PrometheusBuilder::new().build_recorder());
            let handle = recorder.handle();
            // Another recorder may already be installed (e.g. by an embedding program); then
            // this handle renders an empty exposition rather than failing the server.
            let _ = metrics::set_global_recorder(recorder);
            handle
        })
        .clone()
}

/// How often the histograms' raw samples are folded into their buckets.
pub(super) const METRICS_UPKEEP: Duration = Duration::from_secs(5);

/// Folds the histograms' pending samples into their buckets every [`METRICS_UPKEEP`]. The
/// recorder keeps every observation until then; without upkeep a server nobody scrapes would
/// grow by 8 bytes per histogram per request, without bound
/// (docs/decisions/0014-errors-in-the-metrics-layer.md).
pub(super) async fn metrics_upkeep(handle: PrometheusHandle) {
    let mut tick = tokio::time::interval(METRICS_UPKEEP);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        handle.run_upkeep();
    }
}

/// Counts a request in `xmc_inflight_requests` for as long as it lives: also when its future is
/// dropped (a client that hangs up, a panic), which a decrement after the `await` would miss.
pub(super) struct Inflight(metrics::Gauge);

impl Inflight {
    pub(super) fn start() -> Inflight {
        let gauge = metrics::gauge!("xmc_inflight_requests");
        gauge.increment(1.0);
        Inflight(gauge)
    }
}

impl Drop for Inflight {
    fn drop(&mut self) {
        self.0.decrement(1.0);
    }
}
