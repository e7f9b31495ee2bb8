//! The handlers and the JSON shapes of the API.

use super::reload::{self, Loaded, ReloadOutcome};
use super::{ApiError, AppState, SinglePredict};
use crate::model::{Model, PredictOptions, Prediction, QueryError, Scratch};
use crate::text::{TextScratch, TextStats};
use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{RawQuery, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use rayon::prelude::*;
use serde::{Deserialize, Serialize, Serializer};
use serde_json::{Value, json};
use std::cell::RefCell;
use std::sync::Arc;
use std::time::Instant;

/// The OpenAPI 3 description of this API (kept in the repository as `openapi.json`).
pub const OPENAPI: &str = include_str!("../../openapi.json");

/// A JSON integer: any number with an integral value, so `3` and `3.0` mean the same (as in JSON
/// Schema's `integer`). Negative, fractional and non-numeric values are refused.
#[derive(Clone, Copy, Debug, PartialEq)]
struct JsonInt(u64);

impl<'de> Deserialize<'de> for JsonInt {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = JsonInt;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a non-negative integer")
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<JsonInt, E> {
                Ok(JsonInt(v))
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<JsonInt, E> {
                u64::try_from(v)
                    .map(JsonInt)
                    .map_err(|_| E::custom(format!("{v} is negative")))
            }
            fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<JsonInt, E> {
                // 2^64 is exact in f64; anything at or above it does not fit.
                if v.fract() == 0.0 && (0.0..18_446_744_073_709_551_616.0).contains(&v) {
                    Ok(JsonInt(v as u64))
                } else {
                    Err(E::custom(format!("{v} is not a non-negative integer")))
                }
            }
        }
        d.deserialize_any(Visitor)
    }
}

impl JsonInt {
    /// As a `usize`, saturating (every limit it is checked against is far smaller).
    fn usize(self) -> usize {
        usize::try_from(self.0).unwrap_or(usize::MAX)
    }
}

/// A request's `features`, `[[id, value], ...]`, read straight into the query's two arrays. An
/// id is a [`JsonInt`] that must fit a `u32`; a value is any JSON number that must stay finite
/// as a 32-bit float. A pair that breaks either rule is not kept, and the first such problem is
/// kept instead, for [`prepare`] to report once the whole body has parsed: a syntax error later
/// in the body still makes it a 400, and a batch names the instance.
#[derive(Debug)]
struct Features {
    idx: Vec<u32>,
    val: Vec<f32>,
    problem: Option<String>,
}

/// Room for this many features before the first growth: a typical query of the largest data
/// set has a few dozen.
const FEATURES_CAPACITY: usize = 64;

impl<'de> Deserialize<'de> for Features {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Pairs;
        impl<'de> serde::de::Visitor<'de> for Pairs {
            type Value = Features;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an array of [id, value] pairs")
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<Features, A::Error> {
                // No size hint is trusted: serde_json gives none, and another source's could
                // ask for any amount of memory up front.
                let mut out = Features {
                    idx: Vec::with_capacity(FEATURES_CAPACITY),
                    val: Vec::with_capacity(FEATURES_CAPACITY),
                    problem: None,
                };
                while let Some((JsonInt(i), v)) = seq.next_element::<(JsonInt, f64)>()? {
                    let v32 = v as f32;
                    match u32::try_from(i) {
                        Ok(i) if v32.is_finite() => {
                            out.idx.push(i);
                            out.val.push(v32);
                        }
                        Ok(i) => {
                            out.problem.get_or_insert_with(|| {
                                format!("feature {i}: value {v:e} is not a finite 32-bit float")
                            });
                        }
                        Err(_) => {
                            out.problem
                                .get_or_insert_with(|| format!("feature id {i} is out of range"));
                        }
                    }
                }
                Ok(out)
            }
        }
        d.deserialize_seq(Pairs)
    }
}

/// Deserializes a field that may be absent but not `null`: `Some` of the value itself, so that a
/// `null` is refused as the wrong type (with `#[serde(default)]` for absence).
fn present<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    T::deserialize(d).map(Some)
}

/// One prediction request: exactly one of `features` and `text`. Every other field may be absent
/// or `null`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PredictRequest {
    /// `[[id, value], ...]`.
    #[serde(default, deserialize_with = "present")]
    features: Option<Features>,
    /// Raw text, vectorized by the bundle's own vectorizer.
    #[serde(default, deserialize_with = "present")]
    text: Option<String>,
    /// How many labels (default: the server's `default_k`).
    k: Option<JsonInt>,
    /// Beam width (default: the server's, else the model's).
    beam: Option<JsonInt>,
    /// Depth-aware early stopping (default on); `false` runs the level-wise beam search.
    early_stop: Option<bool>,
    /// With early stopping: answer with the best labels found after this many microseconds.
    deadline_us: Option<JsonInt>,
    /// REFRAG reranking (default: the model's); refused by a model without prototypes.
    rerank: Option<bool>,
    /// FIAT imputation (default: the model's); refused by a model without FIAT scales.
    impute: Option<bool>,
    /// OVA reranking (default: the model's); refused by a model without an OVA reranker.
    rerank_ova: Option<bool>,
    /// REFRAG's α for this request, in [0, 1] (default: the model's).
    rerank_alpha: Option<f64>,
    /// REFRAG's γ_r for this request, finite and at least 0 (default: the model's).
    rerank_gamma: Option<f64>,
    /// The OVA reranker's α for this request, in [0, 1] (default: the model's).
    rerank_ova_alpha: Option<f64>,
    /// BP models: how many of the router's best blocks to search (default 1; more than q
    /// searches all). Ignored by a model without BP.
    block_candidates: Option<JsonInt>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct BatchRequest {
    instances: Vec<PredictRequest>,
}

/// Parses a JSON body: a syntax error is a 400, a well-formed body of the wrong shape a 422.
fn parse<T: serde::de::DeserializeOwned>(
    body: Result<Bytes, BytesRejection>,
    limit: usize,
) -> Result<T, ApiError> {
    let body = body.map_err(|r| {
        if r.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::TooLarge(limit)
        } else {
            ApiError::Malformed(r.body_text())
        }
    })?;
    serde_json::from_slice(&body).map_err(|e| match e.classify() {
        serde_json::error::Category::Data => ApiError::Invalid(e.to_string()),
        _ => ApiError::Malformed(e.to_string()),
    })
}

fn current(state: &AppState) -> Result<Arc<Loaded>, ApiError> {
    state.current.load_full().ok_or(ApiError::NoModel)
}

/// A query as the request gave it: a sparse vector, or text that the predicting thread vectorizes
/// with the bundle's vectorizer into its own buffers.
#[derive(Debug)]
enum Query {
    Features { idx: Vec<u32>, val: Vec<f32> },
    Text(String),
}

/// The answer to a text query to a model without a vectorizer.
fn no_vectorizer() -> ApiError {
    ApiError::Invalid(
        "this model has no text vectorizer (it was trained on feature vectors): send `features` \
         instead of `text`"
            .into(),
    )
}

/// A prepared request: the query and the model's options.
type Prepared = (Query, PredictOptions);

/// Checks a request against the server's limits and `model`, giving the model's inputs.
fn prepare(state: &AppState, model: &Model, req: PredictRequest) -> Result<Prepared, ApiError> {
    let k = req.k.map_or(state.cfg.default_k, JsonInt::usize);
    if k == 0 || k > state.cfg.max_k {
        return Err(ApiError::Invalid(format!(
            "k = {k} is not between 1 and {}",
            state.cfg.max_k
        )));
    }
    let beam = req.beam.map(JsonInt::usize).or(state.cfg.beam);
    if beam == Some(0) {
        return Err(ApiError::Invalid("beam must be at least 1".into()));
    }
    let early_stop = req.early_stop.unwrap_or(true);
    if req.deadline_us.is_some() && !early_stop {
        return Err(ApiError::Invalid(
            "`deadline_us` needs `early_stop`: the level-wise beam search has no deadline".into(),
        ));
    }
    let block_candidates = req.block_candidates.map(JsonInt::usize);
    if block_candidates == Some(0) {
        return Err(ApiError::Invalid(
            "block_candidates must be at least 1".into(),
        ));
    }
    let query = match (req.features, req.text) {
        (Some(Features { idx, val, problem }), None) => {
            if let Some(problem) = problem {
                return Err(ApiError::Invalid(problem));
            }
            Query::Features { idx, val }
        }
        (None, Some(text)) => {
            if model.text().is_none() {
                return Err(no_vectorizer());
            }
            Query::Text(text)
        }
        (Some(_), Some(_)) => {
            return Err(ApiError::Invalid(
                "give either `features` or `text`, not both".into(),
            ));
        }
        (None, None) => {
            return Err(ApiError::Invalid(
                "a prediction needs `features` or `text`".into(),
            ));
        }
    };
    // The model checks the weights' ranges; here they must only fit an `f32`, so that a number
    // just past its range is not rounded into it.
    let weight = |name: &str, v: Option<f64>| match v {
        Some(x) if !x.is_finite() || x.abs() > f64::from(f32::MAX) => Err(ApiError::Invalid(
            format!("`{name}` must be a finite f32, got {x}"),
        )),
        _ => Ok(v.map(|x| x as f32)),
    };
    let rerank_alpha = weight("rerank_alpha", req.rerank_alpha)?;
    let rerank_gamma = weight("rerank_gamma", req.rerank_gamma)?;
    let rerank_ova_alpha = weight("rerank_ova_alpha", req.rerank_ova_alpha)?;
    Ok((
        query,
        PredictOptions {
            k,
            beam,
            early_stop,
            deadline_us: req.deadline_us.map(|d| d.0),
            block_candidates,
            rerank: req.rerank,
            impute: req.impute,
            candidates: None,
            rerank_alpha,
            rerank_gamma,
            rerank_ova: req.rerank_ova,
            rerank_ova_alpha,
        },
    ))
}

thread_local! {
    static SCRATCH: RefCell<(Scratch, Prediction)> = RefCell::new(Default::default());
    /// The vectorizer's scratch space and the vector a text query becomes, kept per thread like
    /// [`SCRATCH`] so that a warm thread vectorizes without allocating.
    static TEXT_SCRATCH: RefCell<TextBuffers> = RefCell::new(Default::default());
}

/// A thread's buffers for text queries.
#[derive(Default)]
struct TextBuffers {
    scratch: TextScratch,
    idx: Vec<u32>,
    val: Vec<f32>,
}

/// What [`warm_scratch`] vectorizes: words of several lengths, some repeated and some not in any
/// vocabulary, so that a thread's text buffers are grown before its first real query.
const WARM_TEXT: &str = "Warm-up query: the quick brown fox jumps over the lazy dog, 42 times; \
    a library for parsing and serialising data (development files), command-line tools, \
    documentation and examples. Ünïcödé wörds, naïve café, straße, 東京 and ﬁnal ligatures.";

/// Sizes this thread's scratch space for `loaded` (with one of its spares, if it has any) and
/// runs one throwaway prediction, recording no metrics. A thread's first prediction otherwise
/// grows it on the request path: the dense query vector alone is `n_features` floats of new
/// memory.
pub(crate) fn warm_scratch(loaded: &Loaded) {
    let model = &loaded.model;
    let (idx, val) = reload::warm_query(model, 0);
    SCRATCH.with(|cell| {
        if let Ok(mut s) = cell.try_borrow_mut() {
            let (scratch, out) = &mut *s;
            loaded.scratch.fit(scratch);
            // `warm_query` reduces the ids modulo the feature count, so this cannot fail; a failure
            // would only skip warming.
            let _ = model.predict_into(&idx, &val, &PredictOptions::default(), scratch, out);
        }
    });
    if let Some(view) = model.text() {
        TEXT_SCRATCH.with(|cell| {
            if let Ok(mut t) = cell.try_borrow_mut() {
                let TextBuffers { scratch, idx, val } = &mut *t;
                // The repeat sizes the buffers for a query several times longer than the text.
                let long = WARM_TEXT.repeat(8);
                idx.clear();
                val.clear();
                view.vectorize(&long, scratch, idx, val);
            }
        });
    }
}

/// The model that served a response.
#[derive(Serialize)]
struct ModelRef<'a> {
    name: &'a str,
    version: &'a str,
}

/// A prediction's JSON, serialized straight from the prediction (no intermediate `Value`).
#[derive(Serialize)]
struct PredictionBody<'a> {
    #[serde(serialize_with = "label_ids")]
    labels: &'a [crate::data::LabelId],
    /// Written as `f64`s, exactly the stored `f32`s.
    #[serde(serialize_with = "widened")]
    scores: &'a [f32],
    #[serde(skip_serializing_if = "Option::is_none")]
    names: Option<LabelNames<'a>>,
    model: ModelRef<'a>,
    stats: Stats<'a>,
}

/// Per-request statistics (`stats` in the API).
#[derive(Serialize)]
struct Stats<'a> {
    depth: u32,
    depths: &'a [u32],
    nodes_evaluated: u32,
    block: Option<u32>,
    blocks: &'a [u32],
    classifiers_evaluated: u32,
    reranked: u32,
    early_stopped: bool,
    beam_capped: bool,
    deadline_hit: bool,
    elapsed_us: f64,
    /// Text queries only: the terms (n-grams) of the text, and how many of them the vocabulary
    /// knows (only those reach the model).
    #[serde(skip_serializing_if = "Option::is_none")]
    terms: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    known_terms: Option<usize>,
}

/// The names of `labels`, looked up as they are written.
struct LabelNames<'a> {
    names: &'a crate::model::Names,
    labels: &'a [crate::data::LabelId],
}

impl Serialize for LabelNames<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(
            self.labels
                .iter()
                .map(|l| self.names.get(l.0 as usize).unwrap_or("")),
        )
    }
}

fn label_ids<S: Serializer>(labels: &&[crate::data::LabelId], s: S) -> Result<S::Ok, S::Error> {
    s.collect_seq(labels.iter().map(|l| l.0))
}

fn widened<S: Serializer>(scores: &&[f32], s: S) -> Result<S::Ok, S::Error> {
    s.collect_seq(scores.iter().map(|&x| f64::from(x)))
}

/// Runs one prediction with this thread's scratch space and renders its JSON. A text query is
/// vectorized first, into this thread's text buffers.
fn predict_one(loaded: &Loaded, query: &Query, opts: &PredictOptions) -> Result<Vec<u8>, ApiError> {
    let start = Instant::now();
    match query {
        Query::Features { idx, val } => predict_vector(loaded, idx, val, None, opts, start),
        Query::Text(text) => {
            let view = loaded.model.text().ok_or_else(no_vectorizer)?;
            let run = |t: &mut TextBuffers| {
                t.idx.clear();
                t.val.clear();
                let stats = view.vectorize(text, &mut t.scratch, &mut t.idx, &mut t.val);
                predict_vector(loaded, &t.idx, &t.val, Some(stats), opts, start)
            };
            TEXT_SCRATCH.with(|cell| match cell.try_borrow_mut() {
                Ok(mut t) => run(&mut t),
                Err(_) => run(&mut TextBuffers::default()),
            })
        }
    }
}

/// Runs one prediction of a vector with this thread's scratch space and renders its JSON; `text`
/// holds the vectorizer's counts when the vector came from a text.
fn predict_vector(
    loaded: &Loaded,
    idx: &[u32],
    val: &[f32],
    text: Option<TextStats>,
    opts: &PredictOptions,
    start: Instant,
) -> Result<Vec<u8>, ApiError> {
    let model = &loaded.model;
    let run = |scratch: &mut Scratch, out: &mut Prediction| -> Result<Vec<u8>, ApiError> {
        model
            .predict_into(idx, val, opts, scratch, out)
            .map_err(|e: QueryError| ApiError::Invalid(e.to_string()))?;
        metrics::histogram!("xmc_predict_depth").record(f64::from(out.depth));
        metrics::histogram!("xmc_predict_nodes_evaluated").record(f64::from(out.nodes_evaluated));
        let meta = model.meta();
        let body = PredictionBody {
            labels: &out.labels,
            scores: &out.scores,
            names: model.label_names().map(|names| LabelNames {
                names,
                labels: &out.labels,
            }),
            model: ModelRef {
                name: &meta.name,
                version: &meta.version,
            },
            stats: Stats {
                depth: out.depth,
                depths: &out.depths,
                nodes_evaluated: out.nodes_evaluated,
                block: out.blocks.first().copied(),
                blocks: &out.blocks,
                classifiers_evaluated: out.outputs_evaluated,
                reranked: out.reranked,
                early_stopped: out.early_stopped,
                beam_capped: out.beam_capped,
                deadline_hit: out.deadline_hit,
                elapsed_us: start.elapsed().as_secs_f64() * 1e6,
                terms: text.map(|t| t.terms),
                known_terms: text.map(|t| t.known_terms),
            },
        };
        // Room for a typical body (five named labels and the stats) before any growth.
        let mut json = Vec::with_capacity(512);
        serde_json::to_writer(&mut json, &body).map_err(|e| ApiError::Internal(e.to_string()))?;
        Ok(json)
    };
    SCRATCH.with(|cell| match cell.try_borrow_mut() {
        Ok(mut s) => {
            let (scratch, out) = &mut *s;
            loaded.scratch.fit(scratch);
            run(scratch, out)
        }
        Err(_) => run(&mut Scratch::default(), &mut Prediction::default()),
    })
}

/// A response of JSON bytes already rendered.
fn json_bytes(body: Vec<u8>) -> Response {
    ([(header::CONTENT_TYPE, "application/json")], body).into_response()
}

/// `POST /v1/predict`. By default it runs inline on the async worker: a prediction takes tens of
/// microseconds, and a hand-off to the pool costs more than it saves (`single_predict`; the
/// figures are in docs/decisions/0011-inline-single-predictions.md).
pub async fn predict(
    State(state): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let req: PredictRequest = parse(body, state.cfg.body_limit_bytes)?;
    let loaded = current(&state)?;
    let (query, opts) = prepare(&state, &loaded.model, req)?;
    match state.cfg.single_predict {
        SinglePredict::Inline => predict_one(&loaded, &query, &opts).map(json_bytes),
        SinglePredict::Pool => {
            let (tx, rx) = tokio::sync::oneshot::channel();
            state.pool.spawn(move || {
                let _ = tx.send(predict_one(&loaded, &query, &opts));
            });
            rx.await
                .map_err(|_| ApiError::Internal("the prediction pool dropped a request".into()))?
                .map(json_bytes)
        }
    }
}

/// `POST /v1/predict/batch`: spread over the prediction pool.
pub async fn predict_batch(
    State(state): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let req: BatchRequest = parse(body, state.cfg.body_limit_bytes)?;
    if req.instances.len() > state.cfg.max_batch {
        return Err(ApiError::Invalid(format!(
            "{} instances is over the batch limit of {}",
            req.instances.len(),
            state.cfg.max_batch
        )));
    }
    let loaded = current(&state)?;
    let prepared = req
        .instances
        .into_iter()
        .enumerate()
        .map(|(i, r)| {
            prepare(&state, &loaded.model, r).map_err(|e| match e {
                ApiError::Invalid(m) => ApiError::Invalid(format!("instance {i}: {m}")),
                other => other,
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let (tx, rx) = tokio::sync::oneshot::channel();
    let l = loaded.clone();
    state.pool.spawn(move || {
        let out: Vec<Result<Vec<u8>, ApiError>> = prepared
            .par_iter()
            .map(|(query, opts)| predict_one(&l, query, opts))
            .collect();
        let _ = tx.send(out);
    });
    let results = rx
        .await
        .map_err(|_| ApiError::Internal("the prediction pool dropped a batch".into()))?;
    // `{"predictions":[…],"model":{…}}`, spliced from the rendered predictions.
    let mut body = b"{\"predictions\":[".to_vec();
    for (i, r) in results.into_iter().enumerate() {
        let one = r.map_err(|e| match e {
            ApiError::Invalid(m) => ApiError::Invalid(format!("instance {i}: {m}")),
            other => other,
        })?;
        if i > 0 {
            body.push(b',');
        }
        body.extend_from_slice(&one);
    }
    body.extend_from_slice(b"],\"model\":");
    let meta = loaded.model.meta();
    serde_json::to_writer(
        &mut body,
        &ModelRef {
            name: &meta.name,
            version: &meta.version,
        },
    )
    .map_err(|e| ApiError::Internal(e.to_string()))?;
    body.push(b'}');
    Ok(json_bytes(body))
}

/// `GET /v1/model`: the serving model's metadata and the reload status.
pub async fn model_info(State(state): State<Arc<AppState>>) -> Result<Json<Value>, ApiError> {
    let status = state
        .status
        .lock()
        .map(|s| s.clone())
        .map_err(|_| ApiError::Internal("status lock poisoned".into()))?;
    let loaded = state.current.load_full();
    let model = loaded.as_ref().map(|l| {
        json!({
            "path": state.cfg.model.display().to_string(),
            "loaded_unix": l.loaded_unix,
            "file_bytes": l.model.bundle().file_len(),
            "meta": l.model.meta(),
        })
    });
    Ok(Json(json!({ "model": model, "reloads": status })))
}

/// `POST /v1/admin/reload`: loads the model path now (needs the bearer token).
pub async fn admin_reload(
    State(state): State<Arc<AppState>>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Result<Json<Value>, ApiError> {
    let Some(token) = state.cfg.admin_token.as_deref() else {
        return Err(ApiError::AdminOff);
    };
    let given = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    if !given.is_some_and(|g| constant_time_eq(g.as_bytes(), token.as_bytes())) {
        return Err(ApiError::Unauthorized);
    }
    // `?force=true` reloads even the file that is serving; by default that is a no-op.
    let mut force = false;
    for kv in query.as_deref().unwrap_or("").split('&') {
        if let Some(v) = kv.strip_prefix("force=") {
            force = match v {
                "true" | "1" => true,
                "false" | "0" => false,
                _ => {
                    return Err(ApiError::Invalid(format!(
                        "`force` must be true or false, not {v:?}"
                    )));
                }
            };
        }
    }
    let trigger = if force {
        reload::Trigger::Force
    } else {
        reload::Trigger::Explicit
    };
    // The load runs in a task of its own, so that it finishes and publishes even when this
    // request does not: a client that hangs up, or the request timeout.
    let task = tokio::spawn(async move { reload::load_now(&state, trigger).await });
    let outcome = task
        .await
        .map_err(|e| ApiError::Internal(format!("the reload task failed: {e}")))?;
    match outcome {
        Ok(ReloadOutcome::Loaded(version)) => {
            Ok(Json(json!({"reloaded": true, "version": version})))
        }
        Ok(ReloadOutcome::Unchanged) => Ok(Json(json!({"reloaded": false}))),
        Err(e) => Err(ApiError::ReloadFailed(e)),
    }
}

/// Compares two byte strings in time independent of where they differ.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// `GET /healthz`: the process is up.
pub async fn healthz() -> Json<Value> {
    Json(json!({"status": "ok"}))
}

/// `GET /readyz`: a model is loaded.
pub async fn readyz(State(state): State<Arc<AppState>>) -> Result<Json<Value>, ApiError> {
    let loaded = current(&state)?;
    Ok(Json(
        json!({"status": "ready", "version": loaded.model.meta().version}),
    ))
}

/// `GET /metrics`: Prometheus text exposition.
pub async fn metrics(State(state): State<Arc<AppState>>) -> Response {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        state.metrics.render(),
    )
        .into_response()
}

/// `GET /openapi.json`: the repository's document with this server's limits written in (`k` at
/// most `max_k`, batches of at most `max_batch`, feature ids below the serving model's feature
/// count, `rerank`, `rerank_ova` and `impute` only false when the serving model lacks them, `text` only for a
/// model with a vectorizer), so that a client generated from it, or a schema-based tester, knows
/// them.
pub async fn openapi(State(state): State<Arc<AppState>>) -> Response {
    match serde_json::from_str::<Value>(OPENAPI) {
        Ok(mut doc) => {
            let request = "/components/schemas/PredictRequest/properties/k";
            if let Some(k) = doc.pointer_mut(request).and_then(Value::as_object_mut) {
                k.insert("maximum".into(), json!(state.cfg.max_k));
            }
            // One load of the serving model, so the document describes a single model even
            // if a swap lands meanwhile.
            if let Some(loaded) = state.current.load_full() {
                let model = &loaded.model;
                let props = "/components/schemas/PredictRequest/properties";
                let id = format!("{props}/features/items/prefixItems/0");
                if let Some(id) = doc.pointer_mut(&id).and_then(Value::as_object_mut) {
                    let n = model.meta().n_features;
                    id.insert("maximum".into(), json!(n.saturating_sub(1)));
                }
                // A model without a vectorizer takes only `features`: `text` is a 422.
                if model.text().is_none() {
                    let request = "/components/schemas/PredictRequest";
                    if let Some(r) = doc.pointer_mut(request).and_then(Value::as_object_mut) {
                        r.remove("oneOf");
                        r.insert("required".into(), json!(["features"]));
                    }
                    if let Some(p) = doc.pointer_mut(props).and_then(Value::as_object_mut) {
                        p.remove("text");
                    }
                }
                // An option the serving model lacks takes only false (or null): true is a 422.
                for (option, available) in [
                    ("rerank", model.can_rerank()),
                    ("impute", model.can_impute()),
                    ("rerank_ova", model.can_rerank_ova()),
                ] {
                    let at = format!("{props}/{option}");
                    if let (false, Some(o)) = (
                        available,
                        doc.pointer_mut(&at).and_then(Value::as_object_mut),
                    ) {
                        o.insert("enum".into(), json!([false, null]));
                    }
                }
            }
            let batch = "/paths/~1v1~1predict~1batch/post/requestBody/content/\
                         application~1json/schema/properties/instances";
            if let Some(b) = doc.pointer_mut(batch).and_then(Value::as_object_mut) {
                b.insert("maxItems".into(), json!(state.cfg.max_batch));
            }
            Json(doc).into_response()
        }
        // The document is compiled in and a test parses it; serve it as is if that ever fails.
        Err(_) => ([(header::CONTENT_TYPE, "application/json")], OPENAPI).into_response(),
    }
}

/// Unknown routes get the same error shape.
pub async fn not_found() -> ApiError {
    ApiError::NotFound
}

/// A route asked with a method it does not take gets the same error shape too (the router adds
/// the `Allow` header).
pub async fn method_not_allowed(method: Method) -> ApiError {
    ApiError::MethodNotAllowed(method)
}
