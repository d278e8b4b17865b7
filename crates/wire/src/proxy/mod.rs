//! The PROXY protocol (HAProxy's specification, versions 1 and 2): the header a load
//! balancer sends before anything else on a connection to say whose connection it is.
//!
//! Parsing is strict: a header that the specification does not allow (a v1 line with a
//! leading zero in a port, two spaces, a lower-case `tcp4`; a v2 header with an unknown
//! version or command, addresses shorter than their family's, a TLV that overruns the
//! header) is refused, and so is a connection that does not begin with a header at all.
//! Nothing is allocated: a parsed header borrows its TLVs from the caller's buffer.
//!
//! The caller peeks at the connection's first bytes, calls [`parse_proxy`], and on
//! `Ok(Some((header, len)))` takes exactly `len` bytes off the socket; `Ok(None)` means
//! the bytes so far are a prefix of a valid header (wait for more, up to
//! [`MAX_HEADER`]). The writers ([`write_v1`], [`write_v2`]) make the header a proxy
//! sends to its upstreams.

mod header;
mod v1;
mod v2;

pub use header::{ProxyError, ProxyHeader, MAX_HEADER};
pub use v1::write_v1;
pub use v2::{write_v2, Tlvs, SIGNATURE};

/// Parses the PROXY header at the start of `buf`: `Ok(Some((header, length)))` when a
/// whole one is there, `Ok(None)` when `buf` is a strict prefix of one that may still
/// be valid, an error otherwise (including a connection that does not start with one).
pub fn parse_proxy(buf: &[u8]) -> Result<Option<(ProxyHeader<'_>, usize)>, ProxyError> {
    if buf.is_empty() {
        return Ok(None);
    }
    let n = buf.len().min(SIGNATURE.len());
    if buf[..n] == SIGNATURE[..n] {
        return v2::parse(buf);
    }
    let n = buf.len().min(v1::PREFIX.len());
    if buf[..n] == v1::PREFIX[..n] {
        return v1::parse(buf);
    }
    Err(ProxyError::Missing)
}

#[cfg(test)]
mod tests;
