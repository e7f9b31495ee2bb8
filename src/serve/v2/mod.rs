//! The Open Inference Protocol ("V2") over REST, with Triton's binary tensor data and
//! classification extensions: `/v2`, `/v2/health/{live,ready}`,
//! `/v2/models/{name}[/versions/{v}][/ready|/infer]`.
//!
//! This file is the wire: JSON bodies, the binary section after the JSON header
//! (`Inference-Header-Content-Length`), and the `{"error": "..."}` answers the protocol asks for.
//! What the tensors mean for xmc is in [`tensor`], which knows no HTTP; [`run_infer`] is the
//! inference every wire shares (the gRPC service in `super::grpc` calls it too).

pub mod tensor;

use super::reload::Loaded;
use super::repository::{self, Missing, ModelLoadError};
use super::routes::{self, PredictRequest};
use super::{ApiError, AppState};
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use rayon::prelude::*;
use serde::Deserialize;
use serde_json::{Map, Value, json};
use std::sync::Arc;
use tensor::{Datatype, InputTensor, OutValues, OutputRequest, OutputTensor, Query, Row, Values};

/// The header that gives the JSON part's length when a binary section follows it.
pub const HEADER_LENGTH: &str = "inference-header-content-length";

/// A V2 error: a status and `{"error": message}`.
#[derive(Debug)]
pub struct V2Error(pub(crate) StatusCode, pub(crate) String);

impl V2Error {
    pub(crate) fn bad(m: impl Into<String>) -> V2Error {
        V2Error(StatusCode::BAD_REQUEST, m.into())
    }
}

impl IntoResponse for V2Error {
    fn into_response(self) -> Response {
        // An internal error's detail goes to the log only, as on the /v1 routes.
        let message = if self.0 == StatusCode::INTERNAL_SERVER_ERROR {
            tracing::error!(detail = %self.1, "internal error on a V2 route");
            "internal error".to_string()
        } else {
            self.1
        };
        (self.0, axum::Json(json!({ "error": message }))).into_response()
    }
}

/// An `ApiError` from the shared prediction code as a V2 error: a refused query or option is a
/// 400 with its message; any other keeps the status `/v1` gives it (a timeout, no model).
pub(crate) fn from_api(e: ApiError) -> V2Error {
    match e {
        ApiError::Invalid(m) => V2Error::bad(m),
        ApiError::Internal(detail) => V2Error(StatusCode::INTERNAL_SERVER_ERROR, detail),
        other => {
            let (status, _, message) = other.parts();
            V2Error(status, message)
        }
    }
}

/// The protocol extensions the server speaks.
pub(crate) const EXTENSIONS: [&str; 2] = ["binary_tensor_data", "classification"];

/// The extensions only the REST routes serve (gRPC has no configuration or repository calls).
const REST_EXTENSIONS: &[&str] = &["model_configuration", "model_repository"];

/// `GET /v2`: server metadata.
pub async fn server_metadata() -> axum::Json<Value> {
    axum::Json(json!({
        "name": "xmc",
        "version": env!("CARGO_PKG_VERSION"),
        "extensions": EXTENSIONS.iter().chain(REST_EXTENSIONS).collect::<Vec<_>>(),
    }))
}

/// `GET /v2/health/live`.
pub async fn live() -> axum::Json<Value> {
    axum::Json(json!({"live": true}))
}

/// `GET /v2/health/ready`: every repository model has a version serving (503 otherwise).
pub async fn ready(State(state): State<Arc<AppState>>) -> Response {
    let ready = state.repo.load().all_ready();
    let status = if ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, axum::Json(json!({"ready": ready}))).into_response()
}

/// A version path segment: a positive integer, written as the repository's directories are
/// (no sign, no leading zero). One too large for any version directory names no version that
/// serves (404), like any other that does not serve.
fn parse_version(v: &str) -> Result<u64, V2Error> {
    let canonical = !v.is_empty() && !v.starts_with('0') && v.bytes().all(|b| b.is_ascii_digit());
    if !canonical {
        return Err(V2Error::bad(format!(
            "version {v:?} is not a positive integer"
        )));
    }
    v.parse::<u64>().map_err(|_| {
        V2Error(
            StatusCode::NOT_FOUND,
            format!("version {v} is past the largest version a repository can hold"),
        )
    })
}

/// The serving version `version` (or the highest) of model `name`.
pub(crate) fn lookup(
    state: &AppState,
    name: &str,
    version: Option<&str>,
) -> Result<Arc<Loaded>, V2Error> {
    let v = version.map(parse_version).transpose()?;
    state
        .repo
        .load()
        .get(name, v)
        .cloned()
        .map_err(|m| match m {
            Missing::Model => V2Error(
                StatusCode::NOT_FOUND,
                format!("no model named {name:?} is in the repository"),
            ),
            Missing::Version => V2Error(
                StatusCode::NOT_FOUND,
                format!("model {name:?} has no version {} serving", v.unwrap_or(0)),
            ),
            Missing::NotReady => V2Error(
                StatusCode::SERVICE_UNAVAILABLE,
                format!("model {name:?} has no version serving yet"),
            ),
        })
}

/// The route's model name and optional version.
#[derive(Deserialize)]
pub struct ModelPath {
    name: String,
    version: Option<String>,
}

/// `GET /v2/models/{name}[/versions/{v}]`: the model's inputs and outputs.
pub async fn model_metadata(
    State(state): State<Arc<AppState>>,
    Path(p): Path<ModelPath>,
) -> Result<axum::Json<Value>, V2Error> {
    let loaded = lookup(&state, &p.name, p.version.as_deref())?;
    let model = &loaded.model;
    let specs = |specs: Vec<tensor::TensorSpec>| -> Vec<Value> {
        specs
            .iter()
            .map(|t| json!({"name": t.name, "datatype": t.datatype.name(), "shape": t.shape}))
            .collect()
    };
    Ok(axum::Json(json!({
        "name": p.name,
        "versions": versions(&state, &p.name),
        "platform": "xmc",
        "inputs": specs(tensor::model_inputs(model.text().is_some())),
        "outputs": specs(tensor::model_outputs(model.label_names().is_some())),
    })))
}

/// The versions of model `name` that serve, lowest first.
pub(crate) fn versions(state: &AppState, name: &str) -> Vec<String> {
    state
        .repo
        .load()
        .versions(name)
        .unwrap_or_default()
        .iter()
        .map(|l| l.version.to_string())
        .collect()
}

/// A datatype's name in Triton's model configuration: `TYPE_` and the protocol's name, with
/// `BYTES` as `TYPE_STRING`.
pub fn config_data_type(d: Datatype) -> String {
    match d {
        Datatype::Bytes => "TYPE_STRING".to_string(),
        other => format!("TYPE_{}", other.name()),
    }
}

/// `GET /v2/models/{name}[/versions/{v}]/config` (Triton's model configuration extension):
/// the model's inputs and outputs in the model configuration's terms, which `perf_analyzer`
/// reads. xmc batches along each input's own first dimension, so `max_batch_size` is 0 and the
/// dims are the metadata's shapes. Every input is optional: a request gives the text or the
/// feature triple.
pub async fn model_config(
    State(state): State<Arc<AppState>>,
    Path(p): Path<ModelPath>,
) -> Result<axum::Json<Value>, V2Error> {
    let loaded = lookup(&state, &p.name, p.version.as_deref())?;
    let model = &loaded.model;
    let inputs = tensor::model_inputs(model.text().is_some())
        .iter()
        .map(|t| {
            json!({"name": t.name, "data_type": config_data_type(t.datatype),
                   "dims": t.shape, "optional": true})
        })
        .collect::<Vec<_>>();
    let outputs = tensor::model_outputs(model.label_names().is_some())
        .iter()
        .map(
            |t| json!({"name": t.name, "data_type": config_data_type(t.datatype), "dims": t.shape}),
        )
        .collect::<Vec<_>>();
    Ok(axum::Json(json!({
        "name": p.name,
        "platform": "xmc",
        "backend": "xmc",
        "max_batch_size": 0,
        "input": inputs,
        "output": outputs,
        "parameters": {
            "bundle_version": {"string_value": loaded.model.meta().version},
        },
    })))
}

/// The body of a repository call: `{"ready": bool}` for the index, `{"parameters": {..}}` for
/// load (none is taken) and unload (`unload_dependents`), or nothing.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RepositoryRequest {
    #[serde(default)]
    ready: Option<bool>,
    #[serde(default)]
    parameters: Option<Map<String, Value>>,
}

/// Authorizes a repository call and reads its body (empty is `{}`), taking only the
/// `allowed` parameters (booleans).
fn repository_request(
    state: &AppState,
    headers: &HeaderMap,
    body: &[u8],
    allowed: &[&str],
) -> Result<RepositoryRequest, V2Error> {
    routes::authorize(state, headers).map_err(from_api)?;
    let body = body.trim_ascii_start();
    if body.is_empty() {
        return Ok(RepositoryRequest::default());
    }
    // serde would also read the struct from a JSON array of its fields.
    if body.first() != Some(&b'{') {
        return Err(V2Error::bad(
            "the request body is not valid: a JSON object is expected".to_string(),
        ));
    }
    let req: RepositoryRequest = serde_json::from_slice(body)
        .map_err(|e| V2Error::bad(format!("the request body is not valid: {e}")))?;
    for (key, value) in req.parameters.iter().flatten() {
        // tritonclient's unload sends `unload_dependents`; an xmc model has no dependents.
        let known = allowed.contains(&key.as_str());
        if !known {
            return Err(V2Error::bad(format!("unknown parameter {key:?}")));
        }
        if !value.is_boolean() {
            return Err(V2Error::bad(format!(
                "parameter {key:?} must be true or false"
            )));
        }
    }
    Ok(req)
}

/// `POST /v2/repository/index` (admin token): every model and version on disk or serving, with
/// its state and, when unavailable, why. `{"ready": true}` lists only what serves.
pub async fn repository_index(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<axum::Json<Value>, V2Error> {
    let req = repository_request(&state, &headers, &body, &[])?;
    let mut rows = repository::index(&state)
        .await
        .map_err(|e| V2Error(StatusCode::INTERNAL_SERVER_ERROR, e))?;
    if req.ready == Some(true) {
        rows.retain(|r| r.state == "READY");
    }
    Ok(axum::Json(json!(rows)))
}

/// The route's model name for load and unload.
#[derive(Deserialize)]
pub struct RepositoryPath {
    name: String,
}

/// `POST /v2/repository/models/{name}/load` (admin token): loads the model now, in a task of
/// its own so that the load finishes even if the client hangs up.
pub async fn repository_load(
    State(state): State<Arc<AppState>>,
    Path(p): Path<RepositoryPath>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<axum::Json<Value>, V2Error> {
    repository_request(&state, &headers, &body, &[])?;
    let name = p.name.clone();
    let result = tokio::spawn(async move { repository::load_one(&state, &name).await })
        .await
        .map_err(|e| V2Error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?;
    repository_answer(&p.name, result)
}

/// `POST /v2/repository/models/{name}/unload` (admin token): takes the model out of service
/// until it is loaded again.
pub async fn repository_unload(
    State(state): State<Arc<AppState>>,
    Path(p): Path<RepositoryPath>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<axum::Json<Value>, V2Error> {
    repository_request(&state, &headers, &body, &["unload_dependents"])?;
    repository_answer(&p.name, repository::unload_one(&state, &p.name).await)
}

fn repository_answer(
    name: &str,
    r: Result<(), ModelLoadError>,
) -> Result<axum::Json<Value>, V2Error> {
    match r {
        Ok(()) => Ok(axum::Json(json!({}))),
        Err(ModelLoadError::NoSuchModel) => Err(V2Error(
            StatusCode::NOT_FOUND,
            format!("no model named {name:?} is in the repository"),
        )),
        Err(ModelLoadError::Refused(why)) => Err(V2Error::bad(format!(
            "failed to load {name:?}: {why}; what served keeps serving"
        ))),
    }
}

/// `GET /v2/models/{name}[/versions/{v}]/ready`.
pub async fn model_ready(
    State(state): State<Arc<AppState>>,
    Path(p): Path<ModelPath>,
) -> Result<Response, V2Error> {
    match lookup(&state, &p.name, p.version.as_deref()) {
        Ok(_) => Ok(axum::Json(json!({"name": p.name, "ready": true})).into_response()),
        Err(V2Error(StatusCode::SERVICE_UNAVAILABLE, _)) => Ok((
            StatusCode::SERVICE_UNAVAILABLE,
            axum::Json(json!({"name": p.name, "ready": false})),
        )
            .into_response()),
        Err(e) => Err(e),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct InferRequest {
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    parameters: Option<Map<String, Value>>,
    inputs: Vec<RequestInput>,
    #[serde(default)]
    outputs: Option<Vec<RequestOutput>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RequestInput {
    name: String,
    shape: Vec<u64>,
    datatype: String,
    #[serde(default)]
    parameters: Option<Map<String, Value>>,
    #[serde(default)]
    data: Option<Value>,
}

/// A requested output and its parameters (gRPC's are turned into the same JSON values).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RequestOutput {
    pub(crate) name: String,
    #[serde(default)]
    pub(crate) parameters: Option<Map<String, Value>>,
}

/// Splits a body into its JSON header and binary section, as the header's length says.
fn split_body<'a>(headers: &HeaderMap, body: &'a [u8]) -> Result<(&'a [u8], &'a [u8]), V2Error> {
    let Some(len) = headers.get(HEADER_LENGTH) else {
        return Ok((body, &[]));
    };
    let len: usize = len
        .to_str()
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .ok_or_else(|| V2Error::bad("Inference-Header-Content-Length is not a byte count"))?;
    if len > body.len() {
        return Err(V2Error::bad(format!(
            "Inference-Header-Content-Length is {len}, but the body has {} bytes",
            body.len()
        )));
    }
    Ok(body.split_at(len))
}

/// A `parameters` entry that must be a non-negative integer.
fn count_param(owner: &str, key: &str, v: &Value) -> Result<usize, V2Error> {
    v.as_u64()
        .and_then(|n| usize::try_from(n).ok())
        .ok_or_else(|| {
            V2Error::bad(format!(
                "{owner}: parameter {key} must be a non-negative integer"
            ))
        })
}

/// Reads one input's elements, from its JSON `data` or its slice of the binary section.
fn decode_input(input: RequestInput, binary: &mut &[u8]) -> Result<InputTensor, V2Error> {
    let owner = format!("input {:?}", input.name);
    let datatype =
        Datatype::parse(&input.datatype).map_err(|m| V2Error::bad(format!("{owner}: {m}")))?;
    let mut size = None;
    for (k, v) in input.parameters.iter().flatten() {
        match k.as_str() {
            "binary_data_size" => size = Some(count_param(&owner, k, v)?),
            other => {
                return Err(V2Error::bad(format!(
                    "{owner}: unknown parameter {other:?}"
                )));
            }
        }
    }
    let values = match (size, input.data) {
        (Some(_), Some(_)) => {
            return Err(V2Error::bad(format!(
                "{owner}: both data and binary_data_size"
            )));
        }
        (None, None) => return Err(V2Error::bad(format!("{owner}: no data"))),
        (Some(n), None) => {
            if n > binary.len() {
                return Err(V2Error::bad(format!(
                    "{owner}: binary_data_size is {n}, but only {} bytes of the binary section \
                     are left",
                    binary.len()
                )));
            }
            let (mine, rest) = binary.split_at(n);
            *binary = rest;
            raw_values(datatype, mine).map_err(|m| V2Error::bad(format!("{owner}: {m}")))?
        }
        (None, Some(data)) => {
            json_values(datatype, data).map_err(|m| V2Error::bad(format!("{owner}: {m}")))?
        }
    };
    Ok(InputTensor {
        name: input.name,
        datatype,
        shape: input.shape,
        values,
    })
}

/// Elements from raw little-endian bytes (the binary extension): `BYTES` as 4-byte lengths
/// each followed by that many bytes.
pub(crate) fn raw_values(datatype: Datatype, raw: &[u8]) -> Result<Values, String> {
    let Some(width) = datatype.width() else {
        let mut out = Vec::new();
        let mut rest = raw;
        while !rest.is_empty() {
            let (len, tail) = rest
                .split_first_chunk::<4>()
                .ok_or("a BYTES element's length prefix is cut short")?;
            let len = u32::from_le_bytes(*len) as usize;
            if len > tail.len() {
                return Err("a BYTES element is longer than the bytes left".into());
            }
            out.push(tail[..len].to_vec());
            rest = &tail[len..];
        }
        return Ok(Values::Bytes(out));
    };
    if raw.len() % width != 0 {
        return Err(format!(
            "{} bytes are not a whole number of {datatype} elements",
            raw.len()
        ));
    }
    let chunks = raw.chunks_exact(width);
    Ok(match datatype {
        Datatype::I32 => Values::Int(
            chunks
                .map(|c| i64::from(i32::from_le_bytes([c[0], c[1], c[2], c[3]])))
                .collect(),
        ),
        Datatype::U32 => Values::Int(
            chunks
                .map(|c| i64::from(u32::from_le_bytes([c[0], c[1], c[2], c[3]])))
                .collect(),
        ),
        Datatype::I64 => Values::Int(
            chunks
                .map(|c| i64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
                .collect(),
        ),
        Datatype::U64 => Values::Int(
            chunks
                .map(|c| {
                    let v = u64::from_le_bytes(c.try_into().unwrap_or([0; 8]));
                    i64::try_from(v).unwrap_or(-1)
                })
                .collect(),
        ),
        Datatype::F32 => Values::Float(
            chunks
                .map(|c| f64::from(f32::from_le_bytes([c[0], c[1], c[2], c[3]])))
                .collect(),
        ),
        Datatype::F64 => Values::Float(
            chunks
                .map(|c| f64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
                .collect(),
        ),
        other => return Err(format!("datatype {other} is not taken by any xmc input")),
    })
}

/// Elements from JSON `data`: a flat or nested array, in row-major order.
fn json_values(datatype: Datatype, data: Value) -> Result<Values, String> {
    fn flatten(v: Value, out: &mut Vec<Value>) {
        match v {
            Value::Array(a) => a.into_iter().for_each(|x| flatten(x, out)),
            x => out.push(x),
        }
    }
    let mut flat = Vec::new();
    flatten(data, &mut flat);
    let bad = |i: usize, what: &str| format!("data element {i} is not {what}");
    Ok(match datatype {
        Datatype::Bytes => Values::Bytes(
            flat.into_iter()
                .enumerate()
                .map(|(i, v)| match v {
                    Value::String(s) => Ok(s.into_bytes()),
                    _ => Err(bad(i, "a string")),
                })
                .collect::<Result<_, _>>()?,
        ),
        Datatype::I32 | Datatype::I64 | Datatype::U32 | Datatype::U64 => Values::Int(
            flat.iter()
                .enumerate()
                .map(|(i, v)| {
                    v.as_i64()
                        .ok_or_else(|| bad(i, "an integer that fits INT64"))
                })
                .collect::<Result<_, _>>()?,
        ),
        Datatype::F32 | Datatype::F64 => Values::Float(
            flat.iter()
                .enumerate()
                .map(|(i, v)| v.as_f64().ok_or_else(|| bad(i, "a number")))
                .collect::<Result<_, _>>()?,
        ),
        other => return Err(format!("datatype {other} is not taken by any xmc input")),
    })
}

/// A requested output: what it asks for, and whether it comes back in the binary section.
pub(crate) struct Wanted {
    pub(crate) ask: OutputRequest,
    pub(crate) binary: bool,
}

/// The outputs a request asks for (`None`: all the model has), from their parameters.
pub(crate) fn wanted_outputs(
    req: Option<Vec<RequestOutput>>,
    binary_default: bool,
    has_names: bool,
) -> Result<Vec<Wanted>, V2Error> {
    let Some(outputs) = req else {
        let mut all = vec![tensor::LABELS, tensor::SCORES];
        if has_names {
            all.push(tensor::NAMES_OUTPUT);
        }
        return Ok(all
            .into_iter()
            .map(|n| Wanted {
                ask: OutputRequest {
                    name: n.into(),
                    classification: None,
                },
                binary: binary_default,
            })
            .collect());
    };
    outputs
        .into_iter()
        .map(|o| {
            let owner = format!("output {:?}", o.name);
            let mut w = Wanted {
                ask: OutputRequest {
                    name: o.name,
                    classification: None,
                },
                binary: binary_default,
            };
            for (k, v) in o.parameters.iter().flatten() {
                match k.as_str() {
                    "binary_data" => {
                        w.binary = v.as_bool().ok_or_else(|| {
                            V2Error::bad(format!("{owner}: binary_data must be true or false"))
                        })?
                    }
                    "classification" => w.ask.classification = Some(count_param(&owner, k, v)?),
                    other => {
                        return Err(V2Error::bad(format!(
                            "{owner}: unknown parameter {other:?}"
                        )));
                    }
                }
            }
            Ok(w)
        })
        .collect()
}

/// `POST /v2/models/{name}[/versions/{v}]/infer`.
pub async fn infer(
    State(state): State<Arc<AppState>>,
    Path(p): Path<ModelPath>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, V2Error> {
    let limit = state.cfg.body_limit_bytes;
    let body = body.map_err(|r| {
        if r.status() == StatusCode::PAYLOAD_TOO_LARGE {
            V2Error(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("the request body is larger than {limit} bytes"),
            )
        } else {
            V2Error::bad(r.body_text())
        }
    })?;
    let loaded = lookup(&state, &p.name, p.version.as_deref())?;
    let (head, mut binary) = split_body(&headers, &body)?;
    let req: InferRequest =
        serde_json::from_slice(head).map_err(|e| V2Error::bad(format!("request JSON: {e}")))?;
    // Request parameters: the protocol's own, and every /v1 prediction option.
    let mut binary_default = false;
    let mut options = Map::new();
    for (k, v) in req.parameters.into_iter().flatten() {
        match k.as_str() {
            "binary_data_output" => {
                binary_default = v
                    .as_bool()
                    .ok_or_else(|| V2Error::bad("binary_data_output must be true or false"))?
            }
            _ => {
                options.insert(k, v);
            }
        }
    }
    let has_names = loaded.model.label_names().is_some();
    let wanted = wanted_outputs(req.outputs, binary_default, has_names)?;
    let asks: Vec<OutputRequest> = wanted.iter().map(|w| w.ask.clone()).collect();
    let inputs = req
        .inputs
        .into_iter()
        .map(|i| decode_input(i, &mut binary))
        .collect::<Result<Vec<_>, _>>()?;
    if !binary.is_empty() {
        return Err(V2Error::bad(format!(
            "the binary section has {} bytes that no input's binary_data_size claims",
            binary.len()
        )));
    }
    let outputs = run_infer(&state, &loaded, options, &asks, inputs).await?;
    let binary_flags: Vec<bool> = wanted.iter().map(|w| w.binary).collect();
    Ok(render(
        &p.name,
        loaded.version,
        req.id,
        outputs,
        &binary_flags,
    ))
}

/// Triton's request parameter for decoupled models; accepted and, without streams, moot.
const EMPTY_FINAL_RESPONSE: &str = "triton_enable_empty_final_response";

/// One inference on `loaded`, whatever the wire: `options` are the request's parameters less
/// the wire's own (every `/v1` prediction option), `asks` the outputs, `inputs` the tensors.
/// Short batches run inline, larger ones on the prediction pool, each row through the same
/// prediction code as `/v1`.
pub(crate) async fn run_infer(
    state: &AppState,
    loaded: &Arc<Loaded>,
    options: Map<String, Value>,
    asks: &[OutputRequest],
    inputs: Vec<InputTensor>,
) -> Result<Vec<OutputTensor>, V2Error> {
    let mut options = options;
    // Triton's flag for decoupled (streaming) models, which perf_analyzer sends on every gRPC
    // request: one request gets one response here, so either value means the same.
    if let Some(v) = options.remove(EMPTY_FINAL_RESPONSE) {
        if !v.is_boolean() {
            return Err(V2Error::bad(format!(
                "{EMPTY_FINAL_RESPONSE} must be true or false"
            )));
        }
    }
    let opts_req: PredictRequest = serde_json::from_value(Value::Object(options))
        .map_err(|e| V2Error::bad(format!("parameters: {e}")))?;
    if routes::has_query(&opts_req) {
        return Err(V2Error::bad(
            "parameters: features and text are inputs (tensors), not parameters",
        ));
    }
    let mut opts = routes::options(state, &opts_req).map_err(from_api)?;
    let model = &loaded.model;
    tensor::check_outputs(asks, model.label_names().is_some()).map_err(V2Error::bad)?;
    if let Some(c) = asks.iter().filter_map(|a| a.classification).max() {
        if c > state.cfg.max_k {
            return Err(V2Error::bad(format!(
                "classification {c} is over the server's max_k of {}",
                state.cfg.max_k
            )));
        }
        opts.k = opts.k.max(c);
    }
    let queries = tensor::decode_queries(inputs, model.text().is_some(), state.cfg.max_batch)
        .map_err(V2Error::bad)?;
    let rows = if queries.len() == 1 {
        vec![predict_row(loaded, &queries[0], &opts).map_err(from_api)?]
    } else {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let l = loaded.clone();
        state.pool.spawn(move || {
            let out: Result<Vec<Row>, ApiError> = queries
                .par_iter()
                .map(|q| predict_row(&l, q, &opts))
                .collect();
            let _ = tx.send(out);
        });
        rx.await
            .map_err(|_| {
                V2Error(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "the pool dropped a batch".into(),
                )
            })?
            .map_err(from_api)?
    };
    let names = model.label_names();
    Ok(tensor::encode_outputs(&rows, asks, |l| {
        names.and_then(|n| n.get(l as usize))
    }))
}

/// One query's labels and scores, through the same prediction code as `/v1`.
fn predict_row(
    loaded: &Loaded,
    query: &Query,
    opts: &crate::model::PredictOptions,
) -> Result<Row, ApiError> {
    let copy = |out: &crate::model::Prediction| {
        Ok(Row {
            labels: out.labels.iter().map(|l| l.0).collect(),
            scores: out.scores.clone(),
        })
    };
    match query {
        Query::Features { idx, val } => routes::with_prediction(loaded, idx, val, opts, copy),
        Query::Text(text) => routes::with_text_vector(loaded, text, |idx, val, _| {
            routes::with_prediction(loaded, idx, val, opts, copy)
        }),
    }
}

/// The response: JSON, with the outputs asked for in binary after it.
fn render(
    name: &str,
    version: u64,
    id: Option<String>,
    outputs: Vec<OutputTensor>,
    binary: &[bool],
) -> Response {
    let mut section: Vec<u8> = Vec::new();
    let mut json_outputs = Vec::with_capacity(outputs.len());
    for (o, &bin) in outputs.iter().zip(binary) {
        let mut entry = json!({
            "name": o.name,
            "datatype": o.datatype().name(),
            "shape": o.shape,
        });
        if bin {
            let before = section.len();
            o.values.write_raw(&mut section);
            entry["parameters"] = json!({"binary_data_size": section.len() - before});
        } else {
            entry["data"] = match &o.values {
                OutValues::I64(v) => json!(v),
                // Widened exactly, as /v1 writes scores.
                OutValues::F32(v) => json!(v.iter().map(|&x| f64::from(x)).collect::<Vec<_>>()),
                OutValues::Bytes(v) => json!(v),
            };
        }
        json_outputs.push(entry);
    }
    let mut head = json!({
        "model_name": name,
        "model_version": version.to_string(),
        "outputs": json_outputs,
    });
    if let Some(id) = id {
        head["id"] = json!(id);
    }
    let mut body = serde_json::to_vec(&head).unwrap_or_default();
    if section.is_empty() {
        return ([(header::CONTENT_TYPE, "application/json")], body).into_response();
    }
    let len = HeaderValue::from(body.len());
    body.extend_from_slice(&section);
    (
        [
            (
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/octet-stream"),
            ),
            (header::HeaderName::from_static(HEADER_LENGTH), len),
        ],
        body,
    )
        .into_response()
}
