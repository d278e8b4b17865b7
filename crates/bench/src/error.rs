//! The one error type of the crate.

use std::io;
use std::path::PathBuf;

/// Everything that can stop a benchmark from running. Failures of single
/// requests are not errors: they are counted in the results by kind.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    #[error("invalid URL {url:?}: {reason}")]
    Url { url: String, reason: &'static str },
    // The cause is in the message, not a `source`: the binary prints the chain, and
    // it would name the cause twice.
    #[error("cannot resolve {host}: {cause}")]
    Resolve { host: String, cause: io::Error },
    #[error("{option}: {reason}")]
    InvalidOption {
        option: &'static str,
        reason: String,
    },
    #[error("cannot read {path}: {cause}")]
    ReadFile { path: PathBuf, cause: io::Error },
    #[error("{path} line {line}: {reason}")]
    RequestFile {
        path: PathBuf,
        line: usize,
        reason: String,
    },
    #[error("target {0} is not a loopback address and loopback-only is set")]
    NotLoopback(String),
    #[error("invalid latency objective {0:?} (expected e.g. 'p99<10ms')")]
    Slo(String),
    #[error("event loop: {0}")]
    Io(#[from] io::Error),
    #[error("a worker thread panicked")]
    WorkerPanicked,
}
