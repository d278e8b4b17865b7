//! `wire` is tessera's HTTP/1.1 codec, both ways: it turns bytes into request heads and
//! body framing, and response heads into bytes (status line, fields, the framing fields
//! and the "no body" rule, chunk sizes): the one place either is written.
//!
//! What it is for: strict parsing (RFC 9112) of requests received by the server, with
//! explicit limits and one typed error per refusal, each mapped to exactly one HTTP status
//! in [`Error::status`]. It does no I/O and never allocates: a request borrows the caller's
//! buffer and header array, so the server can parse pipelined requests in a batch straight
//! out of its read buffer.
//!
//! It also parses the response heads a proxy receives from its upstreams
//! ([`parse_response`]), as strictly: `edge`'s upstream client frames bodies with it.
//! And what proxies in front say about the client: the PROXY protocol header that begins
//! a connection ([`parse_proxy`], v1 and v2, strict and fuzzed; [`write_v1`] and
//! [`write_v2`] for the header a proxy sends), and the client an `X-Forwarded-For` or
//! RFC 7239 `Forwarded` field names ([`client_from_x_forwarded_for`],
//! [`client_from_forwarded`]).
//!
//! What it is not for: routing, responses bodies, or anything that touches a socket; that
//! is `server`'s and `edge`'s job.
//!
//! How it fits: `server` reads into a per-connection buffer and calls [`parse_request`] until
//! it returns `Ok(None)` (need more bytes). Each request says how its body is framed
//! ([`BodyFraming`]); the server reads or discards exactly that many bytes (with
//! [`ChunkedDecoder`] for chunked bodies) so that keep-alive stays in sync.

mod chunked;
pub mod conditional;
mod error;
mod forwarded;
mod limits;
mod parse_response;
mod path;
mod pieces;
mod proxy;
pub mod range;
mod request;
mod response;

pub use chunked::{Chunk, ChunkedDecoder};
pub use error::Error;
pub use forwarded::{client_from_forwarded, client_from_x_forwarded_for, ForwardedClient};
pub use limits::{Limits, MAX_HEADERS_CAP};
pub use parse_response::{
    parse_response, parse_upgrade_response, ParsedResponse, ResponseError, ResponseFraming,
};
pub use path::{normalize_path, InvalidPath};
pub use pieces::unsent;
pub use proxy::{
    parse_proxy, write_v1, write_v2, ProxyError, ProxyHeader, Tlvs, MAX_HEADER as MAX_PROXY_HEADER,
    SIGNATURE as PROXY_V2_SIGNATURE,
};
pub use request::{
    is_tchar, parse_request, trim_ows, BodyFraming, Header, HeaderStorage, Method, Request, Version,
};
pub use response::{
    bodiless, chunk_size_line, is_framing_field, no_body, reason, status_line, write_decimal,
    write_field, write_framing, write_status_line, Framing, CONTINUE, LAST_CHUNK,
};
