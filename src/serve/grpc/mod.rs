//! The Open Inference Protocol over gRPC: `inference.GRPCInferenceService`
//! (proto/open_inference.proto) on its own address, `grpc_bind`.
//!
//! This file is the wire only: messages in, messages out. An inference takes the same path as
//! V2 REST's: the request's parameters, outputs and tensors become the values REST decodes
//! from JSON, and [`v2::run_infer`] runs them, so the two protocols cannot disagree. Inputs
//! come as `raw_input_contents` (what tritonclient sends) or typed `contents`; outputs always go
//! back as `raw_output_contents`, as Triton answers. An error is the status REST's code maps to
//! ([`status`]) with REST's message. Each call takes the model published when it starts, so a
//! hot swap or a new version behaves as on REST.

use super::v2::tensor::{Datatype, InputTensor, OutputRequest, Values};
use super::v2::{self, RequestOutput, V2Error};
use super::{AppState, Inflight};
use axum::http::StatusCode;
use futures_util::FutureExt;
use serde_json::{Map, Value};
use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tonic::{Code, Request, Response, Status};

/// The code prost and tonic generate from proto/open_inference.proto.
#[allow(
    missing_docs,
    clippy::all,
    clippy::unwrap_used,
    rust_2018_idioms,
    unreachable_pub
)]
pub mod proto {
    tonic::include_proto!("inference");
}

use proto::grpc_inference_service_server::{GrpcInferenceService, GrpcInferenceServiceServer};
use proto::infer_parameter::ParameterChoice;
use proto::model_infer_request::{InferInputTensor, InferRequestedOutputTensor};
use proto::model_infer_response::InferOutputTensor;
use proto::model_metadata_response::TensorMetadata;
use proto::*;

/// The gRPC service over the server's shared state.
#[derive(Debug, Clone)]
pub struct Service {
    state: Arc<AppState>,
}

/// The service, with the server's message limit (`body_limit_bytes`) on what it receives.
pub fn service(state: Arc<AppState>) -> GrpcInferenceServiceServer<Service> {
    let limit = state.cfg.body_limit_bytes;
    GrpcInferenceServiceServer::new(Service { state })
        .max_decoding_message_size(limit)
        .max_encoding_message_size(usize::MAX)
}

/// Serves the service on `listener` until `stop` resolves, then drains its calls.
pub async fn serve(
    state: Arc<AppState>,
    listener: tokio::net::TcpListener,
    stop: impl Future<Output = ()>,
) -> std::io::Result<()> {
    let incoming = tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true));
    // The generated service answers any other path UNIMPLEMENTED itself, so it needs no router.
    tonic::transport::Server::builder()
        .serve_with_incoming_shutdown(service(state), incoming, stop)
        .await
        .map_err(std::io::Error::other)
}

/// A V2 error as a gRPC status: the code REST's status maps to, and the same message. An
/// internal error's detail goes to the log only, as on REST.
pub fn status(e: V2Error) -> Status {
    let V2Error(http, message) = e;
    let code = match http {
        StatusCode::BAD_REQUEST | StatusCode::UNPROCESSABLE_ENTITY => Code::InvalidArgument,
        StatusCode::NOT_FOUND => Code::NotFound,
        StatusCode::REQUEST_TIMEOUT | StatusCode::GATEWAY_TIMEOUT => Code::DeadlineExceeded,
        StatusCode::PAYLOAD_TOO_LARGE | StatusCode::TOO_MANY_REQUESTS => Code::ResourceExhausted,
        StatusCode::SERVICE_UNAVAILABLE => Code::Unavailable,
        StatusCode::UNAUTHORIZED => Code::Unauthenticated,
        StatusCode::INTERNAL_SERVER_ERROR => {
            tracing::error!(detail = %message, "internal error on a gRPC call");
            return Status::internal("internal error");
        }
        _ => Code::Unknown,
    };
    Status::new(code, message)
}

impl Service {
    /// Runs one call as the REST layer runs a request: counted in flight, bounded by
    /// `request_timeout_ms`, a panic answered INTERNAL, and its duration and status code
    /// recorded under the method's path. (tonic itself ends a call at the client's own
    /// `grpc-timeout`.)
    async fn call<Req, T, F>(
        &self,
        route: &'static str,
        req: Request<Req>,
        run: impl FnOnce(Arc<AppState>, Req) -> F,
    ) -> Result<Response<T>, Status>
    where
        F: Future<Output = Result<T, Status>>,
    {
        let _inflight = Inflight::start();
        let start = Instant::now();
        let method = route.rsplit('/').next().unwrap_or(route);
        let limit = Duration::from_millis(self.state.cfg.request_timeout_ms);
        let fut = std::panic::AssertUnwindSafe(run(self.state.clone(), req.into_inner()));
        let out = match tokio::time::timeout(limit, fut.catch_unwind()).await {
            Ok(Ok(r)) => r,
            Ok(Err(_)) => Err(status(V2Error(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("a gRPC handler ({method}) panicked"),
            ))),
            Err(_) => Err(status(v2::from_api(super::timed_out(method, limit)))),
        };
        metrics::histogram!("xmc_request_duration_seconds", "route" => route)
            .record(start.elapsed().as_secs_f64());
        let code = out.as_ref().map_or_else(|s| s.code(), |_| Code::Ok);
        let status = STATUS_LABELS
            .get(code as usize)
            .copied()
            .unwrap_or("grpc:unknown");
        metrics::counter!("xmc_requests_total", "route" => route, "status" => status).increment(1);
        out.map(Response::new)
    }
}

/// The `status` label of `xmc_requests_total` for each gRPC code, `grpc:` and its number.
const STATUS_LABELS: [&str; 17] = [
    "grpc:0", "grpc:1", "grpc:2", "grpc:3", "grpc:4", "grpc:5", "grpc:6", "grpc:7", "grpc:8",
    "grpc:9", "grpc:10", "grpc:11", "grpc:12", "grpc:13", "grpc:14", "grpc:15", "grpc:16",
];

/// A method's path, the `route` label its calls are counted under.
macro_rules! path {
    ($method:literal) => {
        concat!("/inference.GRPCInferenceService/", $method)
    };
}

/// An empty version field: the highest version serving.
fn version(v: &str) -> Option<&str> {
    (!v.is_empty()).then_some(v)
}

#[tonic::async_trait]
impl GrpcInferenceService for Service {
    async fn server_live(
        &self,
        req: Request<ServerLiveRequest>,
    ) -> Result<Response<ServerLiveResponse>, Status> {
        self.call(path!("ServerLive"), req, |_, _| async {
            Ok(ServerLiveResponse { live: true })
        })
        .await
    }

    async fn server_ready(
        &self,
        req: Request<ServerReadyRequest>,
    ) -> Result<Response<ServerReadyResponse>, Status> {
        self.call(path!("ServerReady"), req, |state, _| async move {
            Ok(ServerReadyResponse {
                ready: state.repo.load().all_ready(),
            })
        })
        .await
    }

    /// Ready or not; an unknown model or version is not ready (REST answers it 404, which
    /// clients read as not ready), and only a version that is no positive integer is an error.
    async fn model_ready(
        &self,
        req: Request<ModelReadyRequest>,
    ) -> Result<Response<ModelReadyResponse>, Status> {
        self.call(path!("ModelReady"), req, |state, r| async move {
            match v2::lookup(&state, &r.name, version(&r.version)) {
                Ok(_) => Ok(ModelReadyResponse { ready: true }),
                Err(V2Error(StatusCode::NOT_FOUND | StatusCode::SERVICE_UNAVAILABLE, _)) => {
                    Ok(ModelReadyResponse { ready: false })
                }
                Err(e) => Err(status(e)),
            }
        })
        .await
    }

    async fn server_metadata(
        &self,
        req: Request<ServerMetadataRequest>,
    ) -> Result<Response<ServerMetadataResponse>, Status> {
        self.call(path!("ServerMetadata"), req, |_, _| async {
            Ok(ServerMetadataResponse {
                name: "xmc".into(),
                version: env!("CARGO_PKG_VERSION").into(),
                extensions: v2::EXTENSIONS.iter().map(|e| e.to_string()).collect(),
            })
        })
        .await
    }

    async fn model_metadata(
        &self,
        req: Request<ModelMetadataRequest>,
    ) -> Result<Response<ModelMetadataResponse>, Status> {
        self.call(path!("ModelMetadata"), req, |state, r| async move {
            let loaded = v2::lookup(&state, &r.name, version(&r.version)).map_err(status)?;
            let model = &loaded.model;
            let specs = |specs: Vec<v2::tensor::TensorSpec>| -> Vec<TensorMetadata> {
                specs
                    .iter()
                    .map(|t| TensorMetadata {
                        name: t.name.into(),
                        datatype: t.datatype.name().into(),
                        shape: t.shape.to_vec(),
                    })
                    .collect()
            };
            Ok(ModelMetadataResponse {
                versions: v2::versions(&state, &r.name),
                name: r.name,
                platform: "xmc".into(),
                inputs: specs(v2::tensor::model_inputs(model.text().is_some())),
                outputs: specs(v2::tensor::model_outputs(model.label_names().is_some())),
            })
        })
        .await
    }

    /// The same configuration as REST's `GET .../config`, as Triton's `ModelConfig` message.
    async fn model_config(
        &self,
        req: Request<ModelConfigRequest>,
    ) -> Result<Response<ModelConfigResponse>, Status> {
        self.call(path!("ModelConfig"), req, |state, r| async move {
            let loaded = v2::lookup(&state, &r.name, version(&r.version)).map_err(status)?;
            let model = &loaded.model;
            let data_type = |d: Datatype| {
                proto::DataType::from_str_name(&v2::config_data_type(d))
                    .unwrap_or(proto::DataType::TypeInvalid) as i32
            };
            let input = v2::tensor::model_inputs(model.text().is_some())
                .iter()
                .map(|t| proto::ModelInput {
                    name: t.name.into(),
                    data_type: data_type(t.datatype),
                    dims: t.shape.to_vec(),
                    optional: true,
                })
                .collect();
            let output = v2::tensor::model_outputs(model.label_names().is_some())
                .iter()
                .map(|t| proto::ModelOutput {
                    name: t.name.into(),
                    data_type: data_type(t.datatype),
                    dims: t.shape.to_vec(),
                })
                .collect();
            let version = proto::ModelParameter {
                string_value: model.meta().version.clone(),
            };
            Ok(ModelConfigResponse {
                config: Some(proto::ModelConfig {
                    name: r.name,
                    platform: "xmc".into(),
                    backend: "xmc".into(),
                    max_batch_size: 0,
                    input,
                    output,
                    parameters: HashMap::from([("bundle_version".to_string(), version)]),
                }),
            })
        })
        .await
    }

    async fn model_infer(
        &self,
        req: Request<ModelInferRequest>,
    ) -> Result<Response<ModelInferResponse>, Status> {
        self.call(path!("ModelInfer"), req, |state, r| async move {
            infer(&state, r).await.map_err(status)
        })
        .await
    }
}

/// One `ModelInfer`, through the shared V2 inference.
async fn infer(state: &AppState, r: ModelInferRequest) -> Result<ModelInferResponse, V2Error> {
    let loaded = v2::lookup(state, &r.model_name, version(&r.model_version))?;
    let options = parameters("the request", r.parameters)?;
    let outputs = if r.outputs.is_empty() {
        None
    } else {
        Some(
            r.outputs
                .into_iter()
                .map(
                    |InferRequestedOutputTensor {
                         name,
                         parameters: p,
                     }| {
                        let parameters = parameters(&format!("output {name:?}"), p)?;
                        Ok(RequestOutput {
                            name,
                            parameters: Some(parameters),
                        })
                    },
                )
                .collect::<Result<Vec<_>, V2Error>>()?,
        )
    };
    let wanted = v2::wanted_outputs(outputs, false, loaded.model.label_names().is_some())?;
    let asks: Vec<OutputRequest> = wanted.into_iter().map(|w| w.ask).collect();
    let inputs = decode_inputs(r.inputs, r.raw_input_contents)?;
    let out = v2::run_infer(state, &loaded, options, &asks, inputs).await?;
    let mut raw = Vec::with_capacity(out.len());
    let outputs = out
        .into_iter()
        .map(|o| {
            let mut bytes = Vec::new();
            o.values.write_raw(&mut bytes);
            raw.push(bytes.into());
            InferOutputTensor {
                datatype: o.datatype().name().into(),
                shape: o.shape.iter().map(|&d| d as i64).collect(),
                name: o.name,
                parameters: HashMap::new(),
                contents: None,
            }
        })
        .collect();
    Ok(ModelInferResponse {
        model_name: r.model_name,
        model_version: loaded.version.to_string(),
        id: r.id,
        parameters: HashMap::new(),
        outputs,
        raw_output_contents: raw,
    })
}

/// Parameters as the JSON values REST reads, so that both check them with the same code.
fn parameters(
    owner: &str,
    params: HashMap<String, InferParameter>,
) -> Result<Map<String, Value>, V2Error> {
    params
        .into_iter()
        .map(|(k, p)| {
            let v = match p.parameter_choice {
                Some(ParameterChoice::BoolParam(b)) => Value::Bool(b),
                Some(ParameterChoice::Int64Param(i)) => Value::from(i),
                Some(ParameterChoice::Uint64Param(u)) => Value::from(u),
                Some(ParameterChoice::StringParam(s)) => Value::String(s),
                Some(ParameterChoice::DoubleParam(d)) => serde_json::Number::from_f64(d)
                    .map(Value::Number)
                    .ok_or_else(|| {
                        V2Error::bad(format!("{owner}: parameter {k} is not a finite number"))
                    })?,
                None => {
                    return Err(V2Error::bad(format!("{owner}: parameter {k} has no value")));
                }
            };
            Ok((k, v))
        })
        .collect()
}

/// The input tensors, from `raw_input_contents` (one entry per input, in order) or from each
/// input's typed `contents`.
fn decode_inputs(
    inputs: Vec<InferInputTensor>,
    raw: Vec<prost::bytes::Bytes>,
) -> Result<Vec<InputTensor>, V2Error> {
    if !raw.is_empty() && raw.len() != inputs.len() {
        return Err(V2Error::bad(format!(
            "raw_input_contents has {} entries for {} inputs: give one per input, or none",
            raw.len(),
            inputs.len()
        )));
    }
    inputs
        .into_iter()
        .enumerate()
        .map(|(i, t)| {
            let name = t.name.as_str();
            let owner = || format!("input {name:?}");
            let datatype = Datatype::parse(&t.datatype)
                .map_err(|m| V2Error::bad(format!("{}: {m}", owner())))?;
            if let Some(k) = t.parameters.keys().next() {
                return Err(V2Error::bad(format!(
                    "{}: unknown parameter {k:?}",
                    owner()
                )));
            }
            let shape = t
                .shape
                .iter()
                .map(|&d| u64::try_from(d))
                .collect::<Result<Vec<u64>, _>>()
                .map_err(|_| {
                    V2Error::bad(format!(
                        "{}: shape {:?} has a negative dimension",
                        owner(),
                        t.shape
                    ))
                })?;
            let values = match (raw.get(i), t.contents) {
                (Some(_), Some(_)) => {
                    return Err(V2Error::bad(format!(
                        "{}: both contents and raw_input_contents",
                        owner()
                    )));
                }
                (Some(bytes), None) => v2::raw_values(datatype, bytes),
                (None, Some(c)) => typed_values(datatype, c),
                (None, None) => return Err(V2Error::bad(format!("{}: no data", owner()))),
            }
            .map_err(|m| V2Error::bad(format!("{}: {m}", owner())))?;
            Ok(InputTensor {
                name: t.name,
                datatype,
                shape,
                values,
            })
        })
        .collect()
}

/// Elements from typed contents: the list the datatype names, widened as REST widens them.
fn typed_values(datatype: Datatype, c: InferTensorContents) -> Result<Values, String> {
    Ok(match datatype {
        Datatype::Bytes => Values::Bytes(c.bytes_contents.into_iter().map(Vec::from).collect()),
        Datatype::I32 => Values::Int(c.int_contents.into_iter().map(i64::from).collect()),
        Datatype::I64 => Values::Int(c.int64_contents),
        Datatype::U32 => Values::Int(c.uint_contents.into_iter().map(i64::from).collect()),
        Datatype::U64 => Values::Int(
            c.uint64_contents
                .into_iter()
                .map(|v| i64::try_from(v).unwrap_or(-1))
                .collect(),
        ),
        Datatype::F32 => Values::Float(c.fp32_contents.into_iter().map(f64::from).collect()),
        Datatype::F64 => Values::Float(c.fp64_contents),
        other => return Err(format!("datatype {other} is not taken by any xmc input")),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw_input(name: &str, datatype: &str, shape: Vec<i64>) -> InferInputTensor {
        InferInputTensor {
            name: name.into(),
            datatype: datatype.into(),
            shape,
            parameters: HashMap::new(),
            contents: None,
        }
    }

    #[test]
    fn raw_and_typed_contents_decode_to_the_same_tensors() {
        let mut text = Vec::new();
        for doc in ["a b", "c"] {
            text.extend_from_slice(&(doc.len() as u32).to_le_bytes());
            text.extend_from_slice(doc.as_bytes());
        }
        let raw =
            decode_inputs(vec![raw_input("text", "BYTES", vec![2])], vec![text.into()]).unwrap();
        let mut typed = raw_input("text", "BYTES", vec![2]);
        typed.contents = Some(InferTensorContents {
            bytes_contents: vec!["a b".into(), "c".into()],
            ..Default::default()
        });
        let typed = decode_inputs(vec![typed], vec![]).unwrap();
        assert_eq!(raw[0].values, typed[0].values);
        assert_eq!(raw[0].shape, vec![2]);

        let err = decode_inputs(
            vec![raw_input("text", "BYTES", vec![1])],
            vec![vec![9, 0, 0, 0, b'x'].into()],
        )
        .unwrap_err();
        assert!(err.1.contains("longer than the bytes left"), "{}", err.1);
        let err = decode_inputs(vec![raw_input("text", "BYTES", vec![-1])], vec![]).unwrap_err();
        assert!(err.1.contains("negative"), "{}", err.1);
        let err = decode_inputs(
            vec![
                raw_input("a", "INT64", vec![1]),
                raw_input("b", "INT64", vec![1]),
            ],
            vec![vec![0u8; 8].into()],
        )
        .unwrap_err();
        assert!(err.1.contains("1 entries for 2 inputs"), "{}", err.1);
    }

    #[test]
    fn parameters_become_the_json_values_rest_reads() {
        let p = |c| InferParameter {
            parameter_choice: Some(c),
        };
        let got = parameters(
            "the request",
            HashMap::from([
                ("k".to_string(), p(ParameterChoice::Int64Param(4))),
                (
                    "early_stop".to_string(),
                    p(ParameterChoice::BoolParam(false)),
                ),
                (
                    "rerank_alpha".to_string(),
                    p(ParameterChoice::DoubleParam(0.5)),
                ),
            ]),
        )
        .unwrap();
        assert_eq!(
            Value::Object(got),
            serde_json::json!({"k": 4, "early_stop": false, "rerank_alpha": 0.5})
        );
        let err = parameters(
            "the request",
            HashMap::from([("k".to_string(), p(ParameterChoice::DoubleParam(f64::NAN)))]),
        )
        .unwrap_err();
        assert_eq!(err.0, StatusCode::BAD_REQUEST);
    }

    #[test]
    fn statuses_follow_the_rest_codes_and_keep_the_message() {
        for (http, code) in [
            (StatusCode::BAD_REQUEST, Code::InvalidArgument),
            (StatusCode::UNPROCESSABLE_ENTITY, Code::InvalidArgument),
            (StatusCode::NOT_FOUND, Code::NotFound),
            (StatusCode::REQUEST_TIMEOUT, Code::DeadlineExceeded),
            (StatusCode::SERVICE_UNAVAILABLE, Code::Unavailable),
            (StatusCode::PAYLOAD_TOO_LARGE, Code::ResourceExhausted),
        ] {
            let s = status(V2Error(http, "the message".into()));
            assert_eq!((s.code(), s.message()), (code, "the message"));
        }
        let s = status(V2Error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "a detail".into(),
        ));
        assert_eq!((s.code(), s.message()), (Code::Internal, "internal error"));
    }
}
