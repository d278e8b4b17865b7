//! On-the-fly compression (docs/compression.md): content-coding negotiation
//! ([`Accepted`]), the `[compression]` policy ([`CompressionConfig`], [`Compression`]),
//! the codecs ([`Encoder`], [`compress`], [`decode`]), the body filter the server
//! runs on every response a handler makes ([`compress_response`]) and the memory budget
//! of its compressing streams ([`STREAM_MEMORY`]).
//!
//! It lives in the seam because every side needs a part of it: the server runs the
//! filter, the proxy decodes upstream bodies and keeps compressed variants in its cache,
//! and nothing of it knows which handler made a response.

mod accept;
mod budget;
mod config;
mod decoding;
mod encoder;
mod filter;

pub use accept::{Accepted, Coding};
pub use budget::{
    stream_state_bytes, Reservation, StreamMemory, DEFAULT_STREAM_MEMORY, STREAM_MEMORY,
};
pub use config::{
    Compression, CompressionConfig, CompressionConfigError, Levels, DEFAULT_FILE_CACHE_BYTES,
    DEFAULT_TYPES,
};
pub use encoder::{compress, decode, DecodeError, Encoder};
pub use filter::{add_vary, compress_response, compressible, mark_encoded, Compressed};
