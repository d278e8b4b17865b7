//! End-to-end tests of `tessera serve`: the real binary on a loopback port, raw bytes.

mod harness;

mod access_log;
mod framing;
mod http_semantics;
mod lifecycle;
mod limits;
mod security;
mod static_files;
