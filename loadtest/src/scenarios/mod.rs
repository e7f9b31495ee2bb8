//! The three scenarios, one room each: its runner, its part of the report (the figures it
//! records, its Markdown section and its plots) and their tests.
//!
//! - [`depth`]: depth versus latency, every model at every rate.
//! - [`max_rate`]: the highest rate that meets the latency line, per model and endpoint.
//! - [`hot_swap`]: latency while the served bundle is swapped under load.

pub mod depth;
pub mod hot_swap;
pub mod max_rate;
