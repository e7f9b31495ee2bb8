//! The OpenAPI 3.1 document of the HTTP API, generated from the request and response types.
//!
//! The schemas come from the serde types of [`super`] through `utoipa::ToSchema` (field
//! descriptions are their doc comments), so a field added to a type shows in the document; the
//! routes and their responses are listed here. Two rules of `PredictRequest` that utoipa's model
//! cannot state are added to the JSON at the end ([`refine`]): exactly one of `features` and
//! `text`, and `deadline_us` only with early stopping.
//!
//! `openapi.json` at the repository root is this document; a test checks that they are equal and
//! rewrites the file when run with `XMC_BLESS=1`. The server serves the committed file, with its
//! own limits written in ([`super::openapi`]).

use super::{BatchRequest, ModelRef, PredictRequest, PredictionBody};
use crate::serve::ReloadStatus;
use serde_json::{Value, json};
use utoipa::PartialSchema;
use utoipa::openapi::path::{
    HttpMethod, OperationBuilder, ParameterBuilder, ParameterIn, PathItem, PathsBuilder,
};
use utoipa::openapi::request_body::RequestBodyBuilder;
use utoipa::openapi::schema::{
    AdditionalProperties, ArrayBuilder, ArrayItems, ComponentsBuilder, Object, ObjectBuilder,
    Schema, SchemaType, Type,
};
use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityRequirement, SecurityScheme};
use utoipa::openapi::{
    ContentBuilder, InfoBuilder, OpenApiBuilder, Ref, RefOr, Required, Response, ResponseBuilder,
};

/// Every `code` an error answer can carry; the unit test beside `ApiError` checks the list
/// against the codes it produces.
const ERROR_CODES: [&str; 12] = [
    "malformed_json",
    "body_too_large",
    "invalid_request",
    "no_model",
    "admin_disabled",
    "unauthorized",
    "reload_failed",
    "timeout",
    "not_found",
    "method_not_allowed",
    "internal",
    "unknown_model",
];

const ERROR_CODE_DOC: &str = "What went wrong, for a client to switch on: malformed_json (400: \
     not JSON, or not valid UTF-8), body_too_large (413), invalid_request (422: e.g. both or \
     neither of features and text, or text to a model without a vectorizer), no_model (503), \
     admin_disabled (404: no admin token is configured), unauthorized (401), reload_failed (500: \
     the previous model is still serving), timeout (408), not_found (404), method_not_allowed \
     (405), internal (500: the detail is in the server's log), unknown_model (404: no repository \
     model has that name). The message is for people and may \
     change.";

const INVALID: &str = "The JSON is well-formed but the request is invalid (code \
     invalid_request): an unknown field, both or neither of features and text, text to a model \
     without a text vectorizer, a feature id or value out of range, k or beam out of range";

/// The smallest magnitude that rounds to infinity as an `f32`: 2^128 − 2^103, halfway between
/// `f32::MAX` and 2^128.
const F32_OVERFLOW: f64 = 340_282_356_779_733_661_637_539_395_458_142_568_448.0;

/// The schema of `PredictRequest.features`: `[[id, value], ...]`, each pair a tuple of a `u32` id
/// and a number that stays finite as a 32-bit float.
pub(super) fn features_schema() -> impl Into<RefOr<Schema>> {
    let id = ObjectBuilder::new()
        .schema_type(Type::Integer)
        .minimum(Some(0))
        .maximum(Some(u32::MAX))
        .description(Some(
            "below the model's feature count (the served document states the current model's)",
        ));
    let value = ObjectBuilder::new()
        .schema_type(Type::Number)
        .exclusive_minimum(Some(-F32_OVERFLOW))
        .exclusive_maximum(Some(F32_OVERFLOW))
        .description(Some("a number that rounds to a finite 32-bit float"));
    let pair = ArrayBuilder::new()
        .min_items(Some(2))
        .max_items(Some(2))
        .prefix_items([Schema::from(id.build()), Schema::from(value.build())])
        .items(ArrayItems::False);
    ArrayBuilder::new().items(pair).description(Some(
        "[[feature id, value], ...], instead of text; ids below the model's feature count, values \
         finite. Duplicates are summed (in 64-bit floats). A model that L2-normalizes queries \
         keeps only their direction, so it scales a sum beyond the 32-bit float range back into \
         it; any other model refuses such a sum (422), and likewise a DEFRAG model's sum of one \
         feature cluster's values (422).",
    ))
}

fn schema_ref(name: &str) -> RefOr<Schema> {
    RefOr::Ref(Ref::from_schema_name(name))
}

fn json_content(schema: impl Into<RefOr<Schema>>) -> utoipa::openapi::Content {
    ContentBuilder::new().schema(Some(schema)).build()
}

/// A response with a JSON body of `schema`.
fn answer(description: &str, schema: impl Into<RefOr<Schema>>) -> Response {
    ResponseBuilder::new()
        .description(description)
        .content("application/json", json_content(schema))
        .build()
}

/// An error response: the one error body.
fn error(description: &str) -> Response {
    answer(description, schema_ref("Error"))
}

fn shared(name: &str) -> RefOr<Response> {
    RefOr::Ref(Ref::from_response_name(name))
}

/// `o`, with no property besides those it names (the server refuses unknown fields).
fn closed(o: ObjectBuilder) -> ObjectBuilder {
    o.additional_properties(Some(AdditionalProperties::FreeForm(false)))
}

/// A JSON object with these properties, all required unless named in `optional`.
fn object(properties: Vec<(&str, RefOr<Schema>)>, optional: &[&str]) -> ObjectBuilder {
    let mut o = ObjectBuilder::new().schema_type(Type::Object);
    for (name, schema) in properties {
        o = o.property(name, schema);
        if !optional.contains(&name) {
            o = o.required(name);
        }
    }
    o
}

fn plain(t: Type) -> RefOr<Schema> {
    RefOr::T(Schema::Object(Object::with_type(t)))
}

fn array_of(items: RefOr<Schema>) -> RefOr<Schema> {
    RefOr::T(Schema::Array(ArrayBuilder::new().items(items).build()))
}

/// The error answers the two prediction routes share.
fn predict_errors(op: OperationBuilder, invalid: &str) -> OperationBuilder {
    op.response(
        "400",
        error("The body is not JSON, or not valid UTF-8 (code malformed_json)"),
    )
    .response("408", shared("Timeout"))
    .response(
        "413",
        error("The body is larger than the server's body_limit_bytes (code body_too_large)"),
    )
    .response("422", error(invalid))
    .response("500", shared("Internal"))
    .response("503", error("No model is loaded yet (code no_model)"))
}

/// A GET route answered with a JSON object (or the timeout and fault every route may get).
fn info_route(summary: &str, ok: &str, body: RefOr<Schema>) -> OperationBuilder {
    OperationBuilder::new()
        .summary(Some(summary))
        .response("200", answer(ok, body))
        .response("408", shared("Timeout"))
        .response("500", shared("Internal"))
}

fn json_body(schema: impl Into<RefOr<Schema>>) -> utoipa::openapi::request_body::RequestBody {
    RequestBodyBuilder::new()
        .required(Some(Required::True))
        .content("application/json", json_content(schema))
        .build()
}

/// The two prediction routes: one query, and a batch.
fn prediction_routes() -> (OperationBuilder, OperationBuilder) {
    let predict = predict_errors(
        OperationBuilder::new()
            .summary(Some(
                "Top-k labels for one sparse feature vector or one text",
            ))
            .request_body(Some(json_body(schema_ref("PredictRequest"))))
            .response("200", answer("Prediction", schema_ref("PredictResponse"))),
        &format!("{INVALID}; a batch's message names the instance"),
    );
    let batch_response = object(
        vec![
            ("predictions", array_of(schema_ref("PredictResponse"))),
            ("model", schema_ref("ModelRef")),
        ],
        &[],
    );
    let batch = predict_errors(
        OperationBuilder::new()
            .summary(Some("Top-k labels for many vectors or texts"))
            .request_body(Some(json_body(BatchRequest::schema())))
            .response("200", answer("Predictions", batch_response)),
        &format!("{INVALID}, more instances than max_batch; a batch's message names the instance"),
    );
    (predict, batch)
}

/// `GET /v1/model` and `POST /v1/admin/reload`.
fn model_routes() -> (OperationBuilder, OperationBuilder) {
    let model_info = object(
        vec![
            (
                "model",
                ObjectBuilder::new()
                    .schema_type(SchemaType::from_iter([Type::Object, Type::Null]))
                    .description(Some(
                        "the serving model (null before one is loaded): its path, loaded_unix, \
                         file_bytes and meta, the metadata `xmc inspect` shows",
                    ))
                    .into(),
            ),
            ("reloads", schema_ref("ReloadStatus")),
        ],
        &[],
    );
    let reloaded = object(
        vec![
            ("reloaded", plain(Type::Boolean)),
            ("version", plain(Type::String)),
        ],
        &["version"],
    );
    let reload = OperationBuilder::new()
        .summary(Some("Load the model path now"))
        .security(SecurityRequirement::new("bearer", Vec::<String>::new()))
        .parameter(
            ParameterBuilder::new()
                .name("force")
                .parameter_in(ParameterIn::Query)
                .required(Required::False)
                .schema(Some(plain(Type::Boolean)))
                .description(Some(
                    "reload even if the file at the model path is the one serving (default \
                     false: then nothing is loaded and the answer is {\"reloaded\": false})",
                )),
        )
        .response("200", answer("Reloaded", reloaded))
        .response("401", error("Error"))
        .response("404", error("Error"))
        .response("408", shared("Timeout"))
        .response("422", error("Error"))
        .response(
            "500",
            error(
                "The reload failed (code reload_failed: the previous model is still serving) or \
                 the server faulted (code internal, as in the Internal response).",
            ),
        );
    let model_info = info_route(
        "The serving model's metadata and reload status",
        "Model",
        model_info.into(),
    );
    (model_info, reload)
}

/// A path parameter.
fn path_param(name: &str, description: &str) -> ParameterBuilder {
    ParameterBuilder::new()
        .name(name)
        .parameter_in(ParameterIn::Path)
        .required(Required::True)
        .schema(Some(plain(Type::String)))
        .description(Some(description))
}

/// A V2 (Open Inference Protocol) error answer: `{"error": "message"}`.
fn v2_error(description: &str) -> Response {
    answer(description, schema_ref("V2Error"))
}

/// The V2 routes: `(path, operation)` pairs, with and without `/versions/{version}`.
fn v2_routes() -> Vec<(String, HttpMethod, OperationBuilder)> {
    let name = || path_param("name", "the repository model");
    let version = || {
        path_param("version", "a serving version (a positive integer)").schema(Some(
            ObjectBuilder::new()
                .schema_type(Type::String)
                .pattern(Some("^[1-9][0-9]*$")),
        ))
    };
    let any_object = || plain(Type::Object);
    let tensor = || {
        object(
            vec![
                ("name", plain(Type::String)),
                ("datatype", plain(Type::String)),
                (
                    "shape",
                    array_of(
                        ObjectBuilder::new()
                            .schema_type(Type::Integer)
                            .minimum(Some(0))
                            .into(),
                    ),
                ),
                ("parameters", plain(Type::Object)),
                ("data", array_of(RefOr::T(Schema::Object(Object::new())))),
            ],
            &["parameters", "data"],
        )
    };
    let request = object(
        vec![
            ("id", plain(Type::String)),
            ("parameters", plain(Type::Object)),
            ("inputs", array_of(closed(tensor()).into())),
            (
                "outputs",
                array_of(
                    closed(object(
                        vec![
                            ("name", plain(Type::String)),
                            ("parameters", plain(Type::Object)),
                        ],
                        &["parameters"],
                    ))
                    .into(),
                ),
            ),
        ],
        &["id", "parameters", "outputs"],
    );
    let request = closed(request).build();
    let response = object(
        vec![
            ("model_name", plain(Type::String)),
            ("model_version", plain(Type::String)),
            ("id", plain(Type::String)),
            ("outputs", array_of(tensor().into())),
        ],
        &["id"],
    )
    .build();
    let infer = |with_version: bool| {
        let mut op = OperationBuilder::new()
            .summary(Some(
                "Open Inference Protocol inference: text or the ragged feature triple in, labels, \
                 scores and names out (docs/http-api.md); binary tensors with \
                 Inference-Header-Content-Length",
            ))
            .parameter(name())
            .request_body(Some(json_body(request.clone())))
            .response("200", answer("Inference", response.clone()))
            .response("400", v2_error("A bad request: inputs, outputs, datatypes, shapes, parameters, the binary section"))
            .response("404", v2_error("No such model or version"))
            .response("408", shared("Timeout"))
            .response("413", v2_error("The body is larger than the server's body_limit_bytes"))
            .response("500", shared("Internal"))
            .response("503", v2_error("The model has no version serving yet"));
        if with_version {
            op = op.parameter(version());
        }
        op
    };
    let model_get = |summary: &str, with_version: bool| {
        let mut op = info_route(summary, "OK", any_object())
            .parameter(name())
            .response("400", v2_error("A version that is not a positive integer"))
            .response("404", v2_error("No such model or version"))
            .response("503", answer("Not ready", any_object()));
        if with_version {
            op = op.parameter(version());
        }
        op
    };
    let base = "/v2/models/{name}";
    let versioned = "/v2/models/{name}/versions/{version}";
    let mut routes = vec![
        (
            "/v2".to_string(),
            HttpMethod::Get,
            info_route("Server metadata", "Metadata", any_object()),
        ),
        (
            "/v2/health/live".to_string(),
            HttpMethod::Get,
            info_route("Liveness", "Live", any_object()),
        ),
        (
            "/v2/health/ready".to_string(),
            HttpMethod::Get,
            info_route(
                "Readiness: every repository model serves",
                "Ready",
                any_object(),
            )
            .response("503", answer("Not ready", any_object())),
        ),
    ];
    for (path, v) in [(base, false), (versioned, true)] {
        routes.push((
            path.to_string(),
            HttpMethod::Get,
            model_get("Model metadata", v),
        ));
        routes.push((
            format!("{path}/ready"),
            HttpMethod::Get,
            model_get("Model readiness", v),
        ));
        routes.push((format!("{path}/infer"), HttpMethod::Post, infer(v)));
        routes.push((
            format!("{path}/config"),
            HttpMethod::Get,
            model_get(
                "Model configuration (Triton's extension): the tensors with data_type and dims",
                v,
            ),
        ));
    }
    routes.extend(v2_repository_routes());
    routes
}

/// Triton's repository routes (admin: the bearer token).
fn v2_repository_routes() -> Vec<(String, HttpMethod, OperationBuilder)> {
    let name = || path_param("name", "the repository model");
    let any_object = || plain(Type::Object);
    let mut routes = Vec::new();
    // The one body of the three calls, which may be left out (an empty body is `{}`): `ready`
    // (the index lists only what serves), the call's own `parameters` (booleans), and nothing
    // else.
    let either = |t: Type| {
        ObjectBuilder::new()
            .schema_type(SchemaType::from_iter([t, Type::Null]))
            .into()
    };
    let body = |parameters: &[&str]| {
        let params = closed(object(
            parameters
                .iter()
                .map(|p| (*p, plain(Type::Boolean)))
                .collect(),
            parameters,
        ))
        .schema_type(SchemaType::from_iter([Type::Object, Type::Null]));
        RequestBodyBuilder::new()
            .required(Some(Required::False))
            .content(
                "application/json",
                json_content(closed(object(
                    vec![
                        ("ready", either(Type::Boolean)),
                        ("parameters", params.into()),
                    ],
                    &["ready", "parameters"],
                ))),
            )
            .build()
    };
    let repository = |summary: &str, ok: RefOr<Schema>, named: bool, parameters: &[&str]| {
        let mut op = OperationBuilder::new()
            .summary(Some(summary.to_string()))
            .security(SecurityRequirement::new("bearer", Vec::<String>::new()))
            .request_body(Some(body(parameters)))
            .response("200", answer("OK", ok))
            .response(
                "400",
                v2_error("A bad body, or (load) versions that were refused"),
            )
            .response("401", v2_error("A missing or wrong bearer token"))
            .response("404", v2_error("Admin routes off, or no such model"))
            .response("408", shared("Timeout"))
            .response("500", shared("Internal"));
        if named {
            op = op.parameter(name());
        }
        op
    };
    routes.push((
        "/v2/repository/index".to_string(),
        HttpMethod::Post,
        repository(
            "Repository index (admin): every model and version with its state and reason",
            array_of(any_object()),
            false,
            &[],
        ),
    ));
    // tritonclient's unload sends `unload_dependents` (an xmc model has none).
    let unload_parameters: &[&str] = &["unload_dependents"];
    for (action, summary, parameters) in [
        ("load", "Load a model now (admin)", &[][..]),
        (
            "unload",
            "Stop serving a model until it is loaded again (admin)",
            unload_parameters,
        ),
    ] {
        routes.push((
            format!("/v2/repository/models/{{name}}/{action}"),
            HttpMethod::Post,
            repository(summary, any_object(), true, parameters),
        ));
    }
    routes
}

/// Every route, with its operations.
fn paths() -> utoipa::openapi::Paths {
    let (predict, batch) = prediction_routes();
    let (named, _) = prediction_routes();
    let named = named
        .parameter(path_param("name", "the repository model"))
        .response(
            "404",
            error("No repository model has this name (code unknown_model)"),
        );
    let (model_info, reload) = model_routes();
    let any_object = || plain(Type::Object);
    let readyz = info_route("Readiness: a model is loaded", "Ready", any_object())
        .response("503", error("Error"));
    let metrics = OperationBuilder::new()
        .summary(Some("Prometheus metrics"))
        .response(
            "200",
            ResponseBuilder::new()
                .description("Text exposition")
                .content(
                    "text/plain",
                    ContentBuilder::new()
                        .schema(Some(plain(Type::String)))
                        .build(),
                )
                .build(),
        )
        .response("408", shared("Timeout"))
        .response("500", shared("Internal"));
    let mut paths = PathsBuilder::new()
        .path("/v1/predict", PathItem::new(HttpMethod::Post, predict))
        .path(
            "/v1/models/{name}/predict",
            PathItem::new(HttpMethod::Post, named),
        )
        .path("/v1/predict/batch", PathItem::new(HttpMethod::Post, batch))
        .path("/v1/model", PathItem::new(HttpMethod::Get, model_info))
        .path("/v1/admin/reload", PathItem::new(HttpMethod::Post, reload))
        .path(
            "/healthz",
            PathItem::new(HttpMethod::Get, info_route("Liveness", "Up", any_object())),
        )
        .path("/readyz", PathItem::new(HttpMethod::Get, readyz))
        .path("/metrics", PathItem::new(HttpMethod::Get, metrics))
        .path(
            "/openapi.json",
            PathItem::new(
                HttpMethod::Get,
                info_route("This document", "OpenAPI", any_object()),
            ),
        );
    for (path, method, op) in v2_routes() {
        paths = paths.path(path, PathItem::new(method, op));
    }
    paths.build()
}

/// The shared schemas (from the API's types, and the error body), responses and security scheme.
fn components() -> utoipa::openapi::Components {
    let error_schema = object(
        vec![(
            "error",
            object(
                vec![
                    (
                        "code",
                        ObjectBuilder::new()
                            .schema_type(Type::String)
                            .enum_values(Some(ERROR_CODES))
                            .description(Some(ERROR_CODE_DOC))
                            .into(),
                    ),
                    ("message", plain(Type::String)),
                ],
                &[],
            )
            .into(),
        )],
        &[],
    );
    ComponentsBuilder::new()
        .security_scheme(
            "bearer",
            SecurityScheme::Http(Http::new(HttpAuthScheme::Bearer)),
        )
        .schema_from::<PredictRequest>()
        .schema_from::<PredictionBody<'static>>()
        .schema_from::<ModelRef<'static>>()
        .schema_from::<ReloadStatus>()
        .schema("Error", error_schema)
        .schema("V2Error", object(vec![("error", plain(Type::String))], &[]))
        .response(
            "Timeout",
            error(
                "The request took longer than the server's request_timeout_ms. For a reload, the \
                 load goes on and publishes the model when it is done (GET /v1/model shows it).",
            ),
        )
        .response(
            "Internal",
            error(
                "A fault in the server itself (a bug, not the request): answered with code \
                 internal, the detail logged only, and counted in xmc_requests_total like any \
                 answer. No request is expected to get one.",
            ),
        )
        .build()
}

/// The document as utoipa builds it, before [`refine`].
fn generated() -> utoipa::openapi::OpenApi {
    OpenApiBuilder::new()
        .info(
            InfoBuilder::new()
                .title("xmc prediction server")
                .version("1")
                .description(Some(
                    "Top-k extreme multi-label prediction over a hot-swappable model bundle.",
                )),
        )
        .paths(paths())
        .components(Some(components()))
        .build()
}

/// Adds the two rules of `PredictRequest` that utoipa's schema model has no field for: exactly
/// one of `features` and `text` (`oneOf` of two `required` lists), and `deadline_us` only where
/// `early_stop` is not false (`dependentSchemas`). Drops the `int32`/`int64` formats utoipa
/// gives unsigned integers ([`drop_signed_formats`]).
fn refine(doc: &mut Value) {
    drop_signed_formats(doc);
    if let Some(request) = doc
        .pointer_mut("/components/schemas/PredictRequest")
        .and_then(Value::as_object_mut)
    {
        request.insert(
            "oneOf".into(),
            json!([{"required": ["features"]}, {"required": ["text"]}]),
        );
        request.insert(
            "dependentSchemas".into(),
            json!({"deadline_us": {"anyOf": [
                {"properties": {"deadline_us": {"type": "null"}}},
                {"properties": {"early_stop": {"enum": [true, null]}}}
            ]}}),
        );
    }
}

/// Removes `format: int32` and `format: int64` from every integer schema. utoipa writes them for
/// `u32` and `u64` too, but they name signed ranges: a `u64` above `i64::MAX` would break the
/// document while the server takes it, and schema-based testers (schemathesis) report that as a
/// valid request the schema forbids. `minimum` and `maximum` carry the real range.
fn drop_signed_formats(v: &mut Value) {
    match v {
        Value::Object(o) => {
            let integer = match o.get("type") {
                Some(Value::String(t)) => t == "integer",
                Some(Value::Array(ts)) => ts.iter().any(|t| t == "integer"),
                _ => false,
            };
            if integer && matches!(o.get("format"), Some(f) if f == "int32" || f == "int64") {
                o.remove("format");
            }
            o.values_mut().for_each(drop_signed_formats);
        }
        Value::Array(a) => a.iter_mut().for_each(drop_signed_formats),
        _ => {}
    }
}

/// The OpenAPI document of this API, as JSON (what `openapi.json` holds).
pub fn document() -> Value {
    // Serializing utoipa's own types to a `Value` cannot fail: every map key is a string.
    let mut doc = serde_json::to_value(generated()).unwrap_or_default();
    refine(&mut doc);
    doc
}

/// [`document`] as the committed file holds it: pretty-printed, with a final newline.
pub fn document_text() -> String {
    let mut text = serde_json::to_string_pretty(&document()).unwrap_or_default();
    text.push('\n');
    text
}
