//! Integration tests for the esi crate: one binary, one module per concern.

mod api;
mod conformance;
mod robustness;
mod streaming;
