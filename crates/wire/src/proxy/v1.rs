//! PROXY v1: one line of text, `PROXY TCP4 SRC DST SPORT DPORT\r\n` (or `TCP6`, or
//! `UNKNOWN` followed by anything up to the CRLF), at most 107 bytes.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use super::header::{ProxyError, ProxyHeader, MAX_V1};

pub(super) const PREFIX: &[u8] = b"PROXY ";

pub(super) fn parse(buf: &[u8]) -> Result<Option<(ProxyHeader<'_>, usize)>, ProxyError> {
    let window = &buf[..buf.len().min(MAX_V1)];
    let Some(lf) = memchr::memchr(b'\n', window) else {
        // A CR must be the line's last byte but one: one seen anywhere else is wrong
        // already.
        if let Some(cr) = memchr::memchr(b'\r', window) {
            if cr + 1 != window.len() {
                return Err(ProxyError::BadV1);
            }
        }
        return match buf.len() >= MAX_V1 {
            true => Err(ProxyError::V1TooLong),
            false => Ok(None),
        };
    };
    if lf < PREFIX.len() + 1 || window[lf - 1] != b'\r' {
        return Err(ProxyError::BadV1);
    }
    let line = &window[PREFIX.len()..lf - 1];
    if line.contains(&b'\r') {
        return Err(ProxyError::BadV1);
    }
    let len = lf + 1;
    let header = |addresses| ProxyHeader {
        version: 1,
        addresses,
        tlvs: &[],
    };
    if line == b"UNKNOWN" || line.starts_with(b"UNKNOWN ") {
        // The specification: "the receiver must ignore anything presented before the
        // CRLF is found".
        return Ok(Some((header(None), len)));
    }
    let mut parts = line.split(|&b| b == b' ');
    let family = parts.next().ok_or(ProxyError::BadV1)?;
    let v6 = match family {
        b"TCP4" => false,
        b"TCP6" => true,
        _ => return Err(ProxyError::BadV1),
    };
    let mut next = || parts.next().ok_or(ProxyError::BadV1);
    let (source, destination) = (address(next()?, v6)?, address(next()?, v6)?);
    let (source_port, destination_port) = (port(next()?)?, port(next()?)?);
    if parts.next().is_some() {
        return Err(ProxyError::BadV1);
    }
    let addresses = (
        SocketAddr::new(source, source_port),
        SocketAddr::new(destination, destination_port),
    );
    Ok(Some((header(Some(addresses)), len)))
}

/// An address of the line's family: dotted quad (no leading zeros: Rust's parser refuses
/// them) or IPv6 text.
fn address(text: &[u8], v6: bool) -> Result<IpAddr, ProxyError> {
    let text = std::str::from_utf8(text).map_err(|_| ProxyError::BadV1)?;
    let ip = match v6 {
        false => text.parse::<Ipv4Addr>().map(IpAddr::V4),
        true => text.parse::<Ipv6Addr>().map(IpAddr::V6),
    };
    ip.map_err(|_| ProxyError::BadV1)
}

/// A port: 0 to 65535 in decimal, without a sign or a leading zero.
fn port(text: &[u8]) -> Result<u16, ProxyError> {
    let digits = !text.is_empty() && text.len() <= 5 && text.iter().all(u8::is_ascii_digit);
    if !digits || (text.len() > 1 && text[0] == b'0') {
        return Err(ProxyError::BadV1);
    }
    let n = text.iter().fold(0u32, |n, &d| n * 10 + u32::from(d - b'0'));
    u16::try_from(n).map_err(|_| ProxyError::BadV1)
}

/// Writes a v1 line for a connection from `source` to `destination` (`UNKNOWN` without
/// them). The line has one family: an IPv4 address beside an IPv6 one is written as
/// IPv4-mapped IPv6.
pub fn write_v1(out: &mut Vec<u8>, addresses: Option<(SocketAddr, SocketAddr)>) {
    use std::io::Write;
    let Some((source, destination)) = addresses else {
        out.extend_from_slice(b"PROXY UNKNOWN\r\n");
        return;
    };
    let (s, d) = (source.ip(), destination.ip());
    let (s, d, family) = match (s, d) {
        (IpAddr::V4(_), IpAddr::V4(_)) => (s, d, "TCP4"),
        _ => (IpAddr::V6(v6_of(s)), IpAddr::V6(v6_of(d)), "TCP6"),
    };
    let _ = write!(
        out,
        "PROXY {family} {s} {d} {} {}\r\n",
        source.port(),
        destination.port()
    );
}

pub(super) fn v6_of(ip: IpAddr) -> Ipv6Addr {
    match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped(),
        IpAddr::V6(v6) => v6,
    }
}
