//! PROXY v2: a 16-byte binary preamble (signature, version and command, family and
//! transport, length), the addresses of the family, then TLVs (type, 16-bit length,
//! value) to the end of the header.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use super::header::{ProxyError, ProxyHeader, MAX_HEADER};

/// The 12 bytes every v2 header begins with.
pub const SIGNATURE: [u8; 12] = *b"\r\n\r\n\0\r\nQUIT\n";

const LOCAL: u8 = 0x20;
const PROXY: u8 = 0x21;
const UNSPEC: u8 = 0x00;
const TCP4: u8 = 0x11;
const TCP6: u8 = 0x21;
const UNIX_STREAM: u8 = 0x31;

pub(super) fn parse(buf: &[u8]) -> Result<Option<(ProxyHeader<'_>, usize)>, ProxyError> {
    if buf.len() < 16 {
        // The version, when it is there already, must be 2.
        if buf.len() > 12 && buf[12] >> 4 != 2 {
            return Err(ProxyError::BadVersion);
        }
        return Ok(None);
    }
    let (command, family) = (buf[12], buf[13]);
    if command >> 4 != 2 {
        return Err(ProxyError::BadVersion);
    }
    if command != LOCAL && command != PROXY {
        return Err(ProxyError::BadCommand);
    }
    let body = usize::from(u16::from_be_bytes([buf[14], buf[15]]));
    let len = 16 + body;
    if len > MAX_HEADER {
        return Err(ProxyError::TooLong);
    }
    // The address block's length, by family (UNIX: two 108-byte paths).
    let block = match family {
        UNSPEC => 0,
        TCP4 => 12,
        TCP6 => 36,
        UNIX_STREAM => 216,
        _ => return Err(ProxyError::BadFamily),
    };
    // A LOCAL header's addresses are not read (the specification: the receiver must
    // ignore them), but its length still says where the connection's bytes begin.
    if command == PROXY && body < block {
        return Err(ProxyError::ShortAddresses);
    }
    if buf.len() < len {
        return Ok(None);
    }
    let rest = &buf[16..len];
    let addresses = match (command, family) {
        (PROXY, TCP4) => {
            let ip = |at: usize| {
                IpAddr::V4(Ipv4Addr::from(
                    <[u8; 4]>::try_from(&rest[at..at + 4]).unwrap(),
                ))
            };
            let port = |at: usize| u16::from_be_bytes([rest[at], rest[at + 1]]);
            Some((
                SocketAddr::new(ip(0), port(8)),
                SocketAddr::new(ip(4), port(10)),
            ))
        }
        (PROXY, TCP6) => {
            let ip = |at: usize| {
                IpAddr::V6(Ipv6Addr::from(
                    <[u8; 16]>::try_from(&rest[at..at + 16]).unwrap(),
                ))
            };
            let port = |at: usize| u16::from_be_bytes([rest[at], rest[at + 1]]);
            Some((
                SocketAddr::new(ip(0), port(32)),
                SocketAddr::new(ip(16), port(34)),
            ))
        }
        _ => None,
    };
    let tlvs = match command {
        PROXY => &rest[block..],
        _ => &rest[rest.len()..],
    };
    // Every TLV must end within the header.
    let mut check = Tlvs(tlvs);
    while check.next().is_some() {}
    if !check.0.is_empty() {
        return Err(ProxyError::BadTlv);
    }
    let header = ProxyHeader {
        version: 2,
        addresses,
        tlvs,
    };
    Ok(Some((header, len)))
}

/// The TLVs of a v2 header as (type, value); stops at the first that does not fit
/// (the parser refused such a header, so for a parsed one that is the end).
#[derive(Debug, Clone)]
pub struct Tlvs<'a>(pub &'a [u8]);

impl<'a> Iterator for Tlvs<'a> {
    type Item = (u8, &'a [u8]);

    fn next(&mut self) -> Option<(u8, &'a [u8])> {
        let [kind, high, low, ..] = *self.0 else {
            return None;
        };
        let len = usize::from(u16::from_be_bytes([high, low]));
        let value = self.0.get(3..3 + len)?;
        self.0 = &self.0[3 + len..];
        Some((kind, value))
    }
}

/// Writes a v2 header for a connection from `source` to `destination`: the PROXY
/// command, TCP over the addresses' family (an IPv4 address beside an IPv6 one written
/// as IPv4-mapped IPv6); without them, the LOCAL command (the proxy's own connection).
pub fn write_v2(out: &mut Vec<u8>, addresses: Option<(SocketAddr, SocketAddr)>) {
    out.extend_from_slice(&SIGNATURE);
    let Some((source, destination)) = addresses else {
        out.extend_from_slice(&[LOCAL, UNSPEC, 0, 0]);
        return;
    };
    match (source.ip(), destination.ip()) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            out.extend_from_slice(&[PROXY, TCP4, 0, 12]);
            out.extend_from_slice(&s.octets());
            out.extend_from_slice(&d.octets());
        }
        (s, d) => {
            out.extend_from_slice(&[PROXY, TCP6, 0, 36]);
            out.extend_from_slice(&super::v1::v6_of(s).octets());
            out.extend_from_slice(&super::v1::v6_of(d).octets());
        }
    }
    out.extend_from_slice(&source.port().to_be_bytes());
    out.extend_from_slice(&destination.port().to_be_bytes());
}
