//! The integration tests, one module per topic, in one test binary: each binary links the whole
//! crate, so one binary instead of one per file saves most of the link time of `cargo test`.
//!
//! Three tests run elsewhere, because they need a process without the others:
//! `tests/apart/` holds `predict_no_alloc` (a counting global allocator) and `serve_timeout` (it
//! reads the one process-wide in-flight gauge, which the servers here would move), and
//! `tests/heap_trim.rs` measures the process's memory, which other tests' allocations would
//! disturb.

#[path = "../common/mod.rs"]
mod common;

mod bp_router;
mod bundle_corruption;
mod bundle_golden;
mod bundle_roundtrip;
mod config_docs;
mod config_refusals;
mod data_io;
mod data_stats;
mod data_write;
mod defrag;
mod deploy_metrics;
mod doc_links;
mod eval_cli;
mod house_limits;
mod lambda_tree;
mod linear_solver;
mod matcher_negatives;
mod model_e2e;
mod model_golden;
mod predict_cli;
mod rerank;
mod search_exact;
mod serve_api;
mod serve_process;
mod serve_text;
mod sweep;
mod text;
mod text_reference;
mod tree_build;
mod tree_build_scale;
