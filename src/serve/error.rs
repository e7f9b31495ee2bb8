//! The one error type of the HTTP API, and its single mapping to status codes and JSON.

use axum::Json;
use axum::http::{Method, StatusCode};
use axum::response::{IntoResponse, Response};

/// Everything a request can fail with. Clients see `{"error":{"code","message"}}`.
#[derive(Debug)]
pub enum ApiError {
    /// The body is not JSON.
    Malformed(String),
    /// The body is larger than the configured limit.
    TooLarge(usize),
    /// The JSON is well-formed but says something invalid (unknown field, bad id, k, value).
    Invalid(String),
    /// No model is loaded yet.
    NoModel,
    /// The admin routes are off (no token configured).
    AdminOff,
    /// A wrong or missing bearer token.
    Unauthorized,
    /// A reload was asked for and failed; the old model keeps serving.
    ReloadFailed(String),
    /// The request ran past `request_timeout_ms` (the message says what happens next).
    Timeout(String),
    /// No route has this path.
    NotFound,
    /// The route does not take this method (the router adds the `Allow` header).
    MethodNotAllowed(Method),
    /// Something that should not happen; details go to the log only.
    Internal(String),
}

impl ApiError {
    fn parts(&self) -> (StatusCode, &'static str, String) {
        match self {
            ApiError::Malformed(m) => (StatusCode::BAD_REQUEST, "malformed_json", m.clone()),
            ApiError::TooLarge(limit) => (
                StatusCode::PAYLOAD_TOO_LARGE,
                "body_too_large",
                format!("the request body is larger than {limit} bytes"),
            ),
            ApiError::Invalid(m) => (
                StatusCode::UNPROCESSABLE_ENTITY,
                "invalid_request",
                m.clone(),
            ),
            ApiError::NoModel => (
                StatusCode::SERVICE_UNAVAILABLE,
                "no_model",
                "no model is loaded yet".into(),
            ),
            ApiError::AdminOff => (
                StatusCode::NOT_FOUND,
                "admin_disabled",
                "admin routes are off: no admin token is configured".into(),
            ),
            ApiError::Unauthorized => (
                StatusCode::UNAUTHORIZED,
                "unauthorized",
                "a valid `Authorization: Bearer <token>` header is required".into(),
            ),
            ApiError::ReloadFailed(m) => (
                StatusCode::INTERNAL_SERVER_ERROR,
                "reload_failed",
                format!("{m}; the previous model is still serving"),
            ),
            ApiError::Timeout(m) => (StatusCode::REQUEST_TIMEOUT, "timeout", m.clone()),
            ApiError::NotFound => (StatusCode::NOT_FOUND, "not_found", "no such route".into()),
            ApiError::MethodNotAllowed(method) => (
                StatusCode::METHOD_NOT_ALLOWED,
                "method_not_allowed",
                format!("this route does not take {method}"),
            ),
            ApiError::Internal(_) => (
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal",
                "internal error".into(),
            ),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, code, message) = self.parts();
        if let ApiError::Internal(detail) = &self {
            tracing::error!(%detail, "internal error");
        }
        let body = serde_json::json!({"error": {"code": code, "message": message}});
        (status, Json(body)).into_response()
    }
}
