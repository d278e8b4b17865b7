//! `bench` is Tessera's HTTP load generator: the engine behind `tessera bench`
//! and its reports.
//!
//! It runs a closed model (a fixed number of connections, each sending its next
//! request when the previous answer arrives, optionally pipelined) or an open
//! model (a fixed request rate, latency corrected for coordinated omission),
//! records latencies in HDR histograms, and renders the result as text, JSON or a
//! self-contained HTML page. On top of single runs it can search for the highest
//! rate that meets a latency objective ([`find_max`]) and compare two targets in
//! alternating rounds ([`compare`]).
//!
//! It speaks HTTP/1.1 and HTTP/2 (`--http2`: with prior knowledge on cleartext, ALPN
//! `h2` over TLS), over TCP, TLS (`https://`, rustls) or a Unix socket. It is not a
//! browser or a functional test tool: it only frames responses, skipping their bodies.
//!
//! How it fits: the `tessera` binary parses arguments into a [`Config`], calls
//! [`run`], and prints [`Report::text`], [`Report::json`] or [`html::render`].
//! This crate never prints; the binary owns the terminal.

pub mod compare;
pub mod config;
mod engine;
mod error;
pub mod find_max;
mod h2;
pub mod html;
mod os;
pub mod report;
pub mod response;
mod stats;
mod stream;
pub mod sysinfo;
pub mod testserver;
mod tls;
mod wire;

pub use config::{Config, RequestSpec};
pub use engine::Progress;
pub use error::Error;
pub use report::{Invocation, Report};
pub use stats::{FailureKind, Failures};

use std::sync::Arc;

/// Runs one benchmark and returns its report. Blocks until the run ends (by
/// duration, request count or `progress.stop`).
pub fn run(
    cfg: &Config,
    inv: &Invocation,
    progress: Option<Arc<Progress>>,
) -> Result<Report, Error> {
    let plan = config::Plan::new(cfg)?;
    let measured = engine::run(&plan, progress)?;
    Ok(report::build(cfg, &plan, measured, inv))
}
