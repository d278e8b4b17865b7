//! End-to-end tests of `tessera serve`: the real binary on a loopback port, raw bytes.

mod harness;

mod framing;
mod lifecycle;
mod paths;
mod security;
mod smuggling;
mod static_files;
