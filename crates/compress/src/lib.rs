//! `compress` is on-the-fly compression (docs/compression.md).
//!
//! What it is for: content-coding negotiation ([`Accepted`]), the `[compression]` policy
//! ([`CompressionConfig`], [`Compression`]), the codecs (gzip with flate2's zlib-rs
//! backend, Brotli, zstd: [`Encoder`], [`compress`], [`decode`]), the body filter the
//! server runs on every response a handler makes ([`compress_response`]), a route's own
//! policy carried on the response head ([`HeadPolicy`]) and the memory budget of the
//! compressing streams ([`STREAM_MEMORY`]).
//!
//! What it is not for: deciding which responses reach it (the server calls the filter
//! once per response, after the route's response filter), static files' precompressed
//! siblings and cached compressed forms (`server`), the proxy's cached variants (`edge`).
//! It knows nothing of the handler that made a response.
//!
//! How it fits: it is one link of the filter chain, written against the seam's types
//! (`handler`'s [`handler::Response`], [`handler::Body`], [`handler::ResponseHead`]), so
//! it depends on `handler` and `wire` and the seam does not depend on it: a crate that
//! needs only the seam (`script`) does not build the codecs. `server` runs the filter and
//! compresses static files, `edge` decodes upstream bodies and keeps compressed variants
//! in its cache, `cli` reads `[compression]` into the server's configuration.

mod accept;
mod budget;
mod config;
mod decoding;
mod encoder;
mod filter;
mod head;

pub use accept::{Accepted, Coding};
pub use budget::{
    stream_state_bytes, Reservation, StreamMemory, DEFAULT_STREAM_MEMORY, STREAM_MEMORY,
};
pub use config::{
    Compression, CompressionConfig, CompressionConfigError, Levels, DEFAULT_FILE_CACHE_BYTES,
    DEFAULT_TYPES,
};
pub use encoder::{compress, decode, DecodeError, Encoder};
pub use filter::{
    add_vary, compress_response, compressible, decode_response, mark_encoded, Compressed,
};
pub use head::HeadPolicy;
