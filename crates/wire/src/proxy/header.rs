//! A parsed PROXY header, the limits, and why one is refused.

use std::net::SocketAddr;

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
    /// header; read them with [`crate::Tlvs`]. Empty for v1.
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
