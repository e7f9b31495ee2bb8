//! The integration tests of what users and readers see, one module per topic, in one binary:
//! the HTTP API in process and as a process, its OpenAPI document, the command line, the
//! configuration, and the docs and layering checks.
//!
//! The library's tests are in `tests/model/`, and the tests that need a process without the
//! others in `tests/apart/`.

#[path = "../common/mod.rs"]
mod common;

mod api_docs;
mod config_docs;
mod config_refusals;
mod deploy_metrics;
mod doc_links;
mod eval_cli;
mod house_limits;
mod kserve;
mod openapi;
mod predict_cli;
mod serve_api;
mod serve_process;
mod serve_text;
mod serve_v2;
mod sweep;
