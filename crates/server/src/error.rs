//! Why the server could not start, or a reload was refused.

use std::net::SocketAddr;
use std::path::PathBuf;

use crate::access_log::FormatError;

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    #[error("cannot open root directory {path}")]
    Root {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot listen on {addr}")]
    Listen {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("invalid configuration: {0}")]
    Config(String),
    /// A certificate or key that cannot be used; the message names the file.
    #[error("{0}")]
    Tls(String),
    #[error("invalid access_log_format: {0}")]
    LogFormat(#[from] FormatError),
    #[error("cannot open access log {path}")]
    AccessLog {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot start worker thread: {0}")]
    Thread(std::io::Error),
    #[error(
        "the kernel does not support openat2(2) (Linux 5.6 or newer is needed to serve files safely): {0}"
    )]
    NoOpenat2(std::io::Error),
}
