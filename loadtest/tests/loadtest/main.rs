//! The load generator's integration tests, in one binary (each test binary links the whole
//! `xmc` crate, so the workspace keeps its integration binaries few; see decision 0038).
//!
//! - `open_loop`: the open-loop property against mock servers, bad scenarios, and Ctrl-C.
//! - `repository_swap`: the hot-swap scenario in a model repository against an `xmc serve` run
//!   in this process. It is the only test here that starts a server, so the process-wide metrics
//!   recorder that a server installs is installed once.

mod open_loop;
mod repository_swap;
