//! The tests that cannot share a process with the tests of `tests/model/` and `tests/service/`,
//! in one binary:
//!
//! - `predict_no_alloc` installs a counting global allocator (it counts per thread, so the
//!   other modules' threads do not disturb it);
//! - `serve_timeout` reads the process-wide in-flight gauge, which the in-process servers of
//!   `tests/service/` would move;
//! - `heap_trim` measures the process's memory, which any other test's allocations would
//!   disturb, so it runs its measurement in a child process of this binary that runs that one
//!   test alone.

#[path = "../common/mod.rs"]
mod common;

mod heap_trim;
mod predict_no_alloc;
mod serve_timeout;
