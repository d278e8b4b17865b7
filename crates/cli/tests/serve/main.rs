//! End-to-end tests of `tessera serve`: the real binary on a loopback port, raw bytes.

mod harness;

mod access_log;
mod cache;
mod check_config;
mod client_identity;
mod compression;
mod compression_budget;
mod compression_cache;
mod compression_routes;
mod demo;
mod framing;
mod h2c_listen;
mod hosts;
mod http2;
mod http_semantics;
mod lifecycle;
mod limits;
mod lua;
mod lua_edits;
mod lua_helpers;
mod metrics;
mod paths;
mod proxy;
mod reload;
mod routing;
mod security;
mod smuggling;
mod static_files;
mod tls;
mod tls_records;
mod tunnel;
mod upgrade;
mod upstream_heads;
mod upstream_state;
mod upstreams;
