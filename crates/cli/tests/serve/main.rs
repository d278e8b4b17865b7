//! End-to-end tests of `tessera serve`: the real binary on a loopback port, raw bytes.

mod harness;

mod framing;
mod http_semantics;
mod lifecycle;
mod limits;
mod security;
mod static_files;
