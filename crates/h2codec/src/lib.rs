//! `h2codec` is tessera's HTTP/2 codec without I/O: the frame layer (RFC 9113 section 4
//! and 6) in [`frame`], header compression (RFC 7541) in [`hpack`], and the server's
//! side of a connection (stream states, flow control, SETTINGS, the rules that make a
//! request malformed) in [`conn`], which turns bytes into events and frames responses.
//!
//! Why by hand: issue 20 measured the `h2` crate at about half of an HTTP/2 worker's CPU
//! time per request (bench/http2.sh, perf: HPACK encoding, the connection's poll, its
//! slab of streams, memmove), more than the whole of h2o's cost per request. A server
//! that frames its responses straight into the connection's output buffer, decodes
//! request heads without building maps and keeps one task per connection needs a codec
//! that borrows buffers and allocates nothing per frame. That is this crate.
//!
//! Nothing here touches a socket, spawns or allocates per call beyond the HPACK tables
//! (bounded by the table size each side allows).

pub mod conn;
pub mod frame;
pub mod hpack;
