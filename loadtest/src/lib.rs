//! `xmc-loadtest`: an open-loop HTTP load generator for `xmc serve`.
//!
//! - [`engine`]: the open-loop sender (fixed schedule, keep-alive pool, latency from the
//!   scheduled send time).
//! - [`stats`]: HDR-histogram summaries.
//! - [`scenario`]: the TOML scenario files.
//! - [`queries`]: request bodies and truth from an XC file; quality through `xmc::eval`.
//! - [`pin`]: pinning the generator and the servers to CPUs.
//! - [`server`]: starting `xmc serve`, probing a server, reading its memory.
//! - [`runner`]: the run context and the dispatch to a scenario.
//! - [`scenarios`]: depth-vs-latency, max-rate and hot-swap, each with its report section.
//! - [`report`] and [`plot`]: JSON, Markdown, SVG and PNG.

pub mod context;
pub mod engine;
pub mod pin;
pub mod plot;
pub mod queries;
pub mod report;
pub mod runner;
pub mod scenario;
pub mod scenarios;
pub mod server;
pub mod stats;
