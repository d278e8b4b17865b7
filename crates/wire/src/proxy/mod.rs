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

mod v1;
mod v2;

use std::net::SocketAddr;

pub use v1::write_v1;
pub use v2::{write_v2, Tlvs, SIGNATURE};

/// The longest header accepted: a v1 line is at most 107 bytes; a v2 header may carry
/// TLVs up to 64 KiB, but the ones balancers send (AWS's VPC endpoint id, Azure's link
/// id, GCP's PSC connection id, TLS facts) fit in a few hundred bytes. A longer one is
/// refused rather than buffered.
pub const MAX_HEADER: usize = 4096;

/// The longest v1 line, CRLF included (the specification's figure).
pub const MAX_V1: usize = 107;

/// A parsed PROXY header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProxyHeader<'a> {
    /// 1 or 2.
    pub version: u8,
    /// The addresses of the connection the proxy received: the client (`source`) and
    /// the address it connected to (`destination`). `None` for a v1 `UNKNOWN`, a v2
    /// `LOCAL` command (the proxy's own connection, a health check) or a v2 family that
    /// carries no TCP address (`AF_UNSPEC`, `AF_UNIX`): the socket's peer stands.
    pub addresses: Option<(SocketAddr, SocketAddr)>,
    /// The v2 TLVs, raw (type, 16-bit length, value), each checked to lie within the
    /// header; read them with [`Tlvs`]. Empty for v1.
    pub tlvs: &'a [u8],
}

impl ProxyHeader<'_> {
    /// The client's address, when the header gives one.
    pub fn source(&self) -> Option<SocketAddr> {
        self.addresses.map(|(source, _)| source)
    }
}

/// Why a PROXY header was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ProxyError {
    #[error("the connection does not begin with a PROXY protocol header")]
    Missing,
    #[error("malformed PROXY v1 line")]
    BadV1,
    #[error("PROXY v1 line longer than 107 bytes")]
    V1TooLong,
    #[error("PROXY v2 version other than 2")]
    BadVersion,
    #[error("PROXY v2 command other than LOCAL or PROXY")]
    BadCommand,
    #[error("PROXY v2 address family or transport not TCP over IPv4, IPv6, UNIX or unspecified")]
    BadFamily,
    #[error("PROXY v2 address block shorter than its family's")]
    ShortAddresses,
    #[error("PROXY v2 TLV runs past the header")]
    BadTlv,
    #[error("PROXY header longer than the limit")]
    TooLong,
}

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
