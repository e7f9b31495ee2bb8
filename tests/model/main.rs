//! The library's integration tests, one module per topic, in one binary: data files, the bundle
//! container, training and searching each stage, and whole models.
//!
//! Each test binary links the whole crate, so the tests live in three binaries rather than one
//! per file: this one, `tests/service/` (the HTTP server, the command line and the docs) and
//! `tests/apart/` (the tests that need a process without the others). Two binaries of about the
//! same size compile side by side on two cores.

#[path = "../common/mod.rs"]
mod common;

mod bp_router;
mod bundle_corruption;
mod bundle_golden;
mod bundle_roundtrip;
mod data_io;
mod data_stats;
mod data_write;
mod defrag;
mod fiat;
mod flat;
mod lambda_tree;
mod linear_solver;
mod matcher_negatives;
mod model_e2e;
mod model_golden;
mod rerank;
mod search_exact;
mod sharded;
mod text;
mod text_reference;
mod tree_build;
mod tree_build_scale;
