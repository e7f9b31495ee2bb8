//! The per-request layer: route metrics, the request deadline and panics answered 500.

use super::*;

/// Records the per-route request metrics and bounds each request by `request_timeout_ms`: one
/// layer for every route. A request past the limit is answered 408 with the usual error body,
/// a handler that panics 500, and both are counted like any other answer.
pub(super) async fn track(State(limit): State<Duration>, req: Request, next: Next) -> Response {
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_string(), |p| p.as_str().to_string());
    let _inflight = Inflight::start();
    let start = Instant::now();
    // A handler's panic becomes a 500 here, inside the count; the outer panic layer is for
    // the layers themselves.
    let run = std::panic::AssertUnwindSafe(next.run(req)).catch_unwind();
    let resp = match tokio::time::timeout(limit, run).await {
        Ok(Ok(resp)) => resp,
        Ok(Err(payload)) => panic_response(payload),
        Err(_) => timed_out(&route, limit).into_response(),
    };
    metrics::histogram!("xmc_request_duration_seconds", "route" => route.clone())
        .record(start.elapsed().as_secs_f64());
    metrics::counter!(
        "xmc_requests_total",
        "route" => route,
        "status" => resp.status().as_u16().to_string()
    )
    .increment(1);
    resp
}

/// The admin reload route's path (the router's and the request limit's message).
pub(super) const RELOAD_ROUTE: &str = "/v1/admin/reload";

/// The answer to a request that ran past `limit`.
pub(super) fn timed_out(route: &str, limit: Duration) -> ApiError {
    let mut message = format!(
        "the request took longer than request_timeout_ms ({} ms)",
        limit.as_millis()
    );
    if route == RELOAD_ROUTE {
        // The handler runs the load in a task of its own, which the timeout does not stop.
        message.push_str(
            "; the reload goes on and publishes the model when it is done (see GET /v1/model)",
        );
    }
    ApiError::Timeout(message)
}

/// The 500 for a panic; its message goes to the log only.
pub(super) fn panic_response(payload: Box<dyn std::any::Any + Send + 'static>) -> Response {
    let message = payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(not a string)");
    ApiError::Internal(format!("a handler panicked: {message}")).into_response()
}
