//! The tests that cannot share a process with the tests of `tests/it/`, in one binary:
//!
//! - `predict_no_alloc` installs a counting global allocator (it counts per thread, so the
//!   other module's threads do not disturb it);
//! - `serve_timeout` reads the process-wide in-flight gauge, which the in-process servers of
//!   `tests/it/` would move.
//!
//! `tests/heap_trim.rs` keeps a binary of its own: it measures the process's memory, which any
//! other test's allocations would disturb.

#[path = "../common/mod.rs"]
mod common;

mod predict_no_alloc;
mod serve_timeout;
