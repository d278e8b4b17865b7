//! Reading the PROXY protocol header (v1 or v2, `wire::parse_proxy`) that begins every
//! connection on a `proxy_protocol` listener, before TLS or HTTP see a byte.
//!
//! The header is peeked at, parsed, and then exactly its bytes are taken off the socket,
//! so what follows it (a TLS ClientHello, a request) stays in the socket for whatever
//! reads next; nothing read has to be handed over. A header split over several segments
//! is peeked at again when more bytes come.

use std::io;
use std::net::SocketAddr;

use crate::net::reactor::Socket;

/// What a valid header said.
pub(crate) struct Header {
    /// The client's address, when the header gives one (not for v1 `UNKNOWN`, v2
    /// `LOCAL`, or a v2 family without a TCP address).
    pub source: Option<SocketAddr>,
    /// The v2 TLVs, raw.
    pub tlvs: Box<[u8]>,
}

/// Why a connection's header was refused.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Refused {
    #[error("{0}")]
    Invalid(#[from] wire::ProxyError),
    #[error("the connection ended before a whole PROXY header")]
    Truncated,
    #[error("reading the PROXY header: {0}")]
    Io(#[from] io::Error),
}

/// Reads the header at the start of `socket`'s stream (the caller bounds the wait).
pub(crate) async fn read_header(socket: &Socket) -> Result<Header, Refused> {
    let mut seen = 0;
    loop {
        socket.readable().await?;
        match step(socket, &mut seen)? {
            Some(header) => return Ok(header),
            None => socket.wait_for_more(),
        }
    }
}

/// One look at the bytes there: the header when it is whole, `None` to wait for more.
/// The buffer is on this function's stack, not in the connection's future.
fn step(socket: &Socket, seen: &mut usize) -> Result<Option<Header>, Refused> {
    let mut buf = [0u8; wire::MAX_PROXY_HEADER];
    let n = match socket.try_peek(&mut buf) {
        Ok(0) => return Err(Refused::Truncated),
        Ok(n) => n,
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    match wire::parse_proxy(&buf[..n])? {
        Some((header, len)) => {
            let header = Header {
                source: header.source(),
                tlvs: header.tlvs.into(),
            };
            // The bytes were peeked at: they are there to be taken.
            if socket.try_read(&mut buf[..len])? != len {
                return Err(Refused::Truncated);
            }
            Ok(Some(header))
        }
        None if n == buf.len() => Err(wire::ProxyError::TooLong.into()),
        // Woken with nothing new: the peer closed its side part-way through.
        None if n == *seen => Err(Refused::Truncated),
        None => {
            *seen = n;
            Ok(None)
        }
    }
}
