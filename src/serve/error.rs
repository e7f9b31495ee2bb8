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
    /// No repository model has this name.
    UnknownModel(String),
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
    /// The status, the error code and the message this error answers with.
    pub(super) fn parts(&self) -> (StatusCode, &'static str, String) {
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
            ApiError::UnknownModel(name) => (
                StatusCode::NOT_FOUND,
                "unknown_model",
                format!("no model named {name:?} is in the repository"),
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;
    use std::collections::BTreeSet;

    /// How many variants `ApiError` has: the arms of [`variant`].
    const VARIANTS: usize = 12;

    /// A distinct number below [`VARIANTS`] for each variant. The match is exhaustive, so a new
    /// variant does not compile until it has an arm here, a reminder to number it, raise
    /// [`VARIANTS`] and list one in [`one_of_each`].
    fn variant(e: &ApiError) -> usize {
        match e {
            ApiError::Malformed(_) => 0,
            ApiError::TooLarge(_) => 1,
            ApiError::Invalid(_) => 2,
            ApiError::NoModel => 3,
            ApiError::AdminOff => 4,
            ApiError::Unauthorized => 5,
            ApiError::ReloadFailed(_) => 6,
            ApiError::Timeout(_) => 7,
            ApiError::NotFound => 8,
            ApiError::MethodNotAllowed(_) => 9,
            ApiError::Internal(_) => 10,
            ApiError::UnknownModel(_) => 11,
        }
    }

    fn one_of_each() -> Vec<ApiError> {
        vec![
            ApiError::Malformed("expected value at line 1 column 1".into()),
            ApiError::TooLarge(1024),
            ApiError::Invalid("k must be at least 1".into()),
            ApiError::NoModel,
            ApiError::AdminOff,
            ApiError::Unauthorized,
            ApiError::ReloadFailed("bundle is truncated".into()),
            ApiError::Timeout("the request took longer than 2000 ms".into()),
            ApiError::NotFound,
            ApiError::MethodNotAllowed(Method::PUT),
            ApiError::Internal("a handler panicked".into()),
            ApiError::UnknownModel("nope".into()),
        ]
    }

    #[test]
    fn every_code_is_in_the_openapi_error_schema() {
        let all = one_of_each();
        let variants: BTreeSet<usize> = all.iter().map(variant).collect();
        assert_eq!(
            variants,
            (0..VARIANTS).collect(),
            "one_of_each misses a variant"
        );
        assert_eq!(all.len(), VARIANTS, "one_of_each lists a variant twice");

        let doc: Value = serde_json::from_str(super::super::routes::OPENAPI).expect("openapi.json");
        let at = "/components/schemas/Error/properties/error/properties/code/enum";
        let listed: BTreeSet<&str> = doc
            .pointer(at)
            .and_then(Value::as_array)
            .unwrap_or_else(|| panic!("openapi.json has no {at}"))
            .iter()
            .map(|c| c.as_str().expect("a code is a string"))
            .collect();
        let produced: BTreeSet<&str> = all.iter().map(|e| e.parts().1).collect();
        assert_eq!(listed, produced);
    }
}
