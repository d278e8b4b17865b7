//! A load connection's socket: TCP, TLS over TCP or a Unix socket, behind one set of
//! calls.

use std::io::{self, Read, Write};

use mio::event::Source;
use mio::net::{TcpStream, UnixStream};

use crate::config::Address;
use crate::tls::{Tls, TlsStream};

pub(crate) enum Stream {
    Tcp(TcpStream),
    Tls(Box<TlsStream>),
    Unix(UnixStream),
}

impl Stream {
    /// `nodelay` only matters when a connection carries more than one request:
    /// a single request goes out in one write, which Nagle never delays. Over TLS the
    /// connection sends the server name of the mix's request `wire`.
    pub(crate) fn connect(
        addr: &Address,
        nodelay: bool,
        tls: Option<(&Tls, usize)>,
    ) -> io::Result<Stream> {
        Ok(match addr {
            Address::Tcp(a) => {
                let s = TcpStream::connect(*a)?;
                // With TLS, a request's records may leave in more than one write.
                if nodelay || tls.is_some() {
                    s.set_nodelay(true)?;
                }
                match tls {
                    Some((tls, wire)) => Stream::Tls(Box::new(TlsStream::new(s, tls, wire)?)),
                    None => Stream::Tcp(s),
                }
            }
            Address::Unix(p) => Stream::Unix(UnixStream::connect(p)?),
        })
    }

    pub(crate) fn source(&mut self) -> &mut dyn Source {
        match self {
            Stream::Tcp(s) => s,
            Stream::Tls(s) => &mut s.tcp,
            Stream::Unix(s) => s,
        }
    }

    /// `Ok(true)` once connected, `Ok(false)` while the connect is in progress.
    pub(crate) fn connected(&self) -> io::Result<bool> {
        let err = match self {
            Stream::Tcp(s) => s.take_error()?,
            Stream::Tls(s) => s.tcp.take_error()?,
            Stream::Unix(s) => s.take_error()?,
        };
        if let Some(e) = err {
            return Err(e);
        }
        let peer = match self {
            Stream::Tcp(s) => s.peer_addr().map(|_| ()),
            Stream::Tls(s) => s.tcp.peer_addr().map(|_| ()),
            Stream::Unix(s) => s.peer_addr().map(|_| ()),
        };
        match peer {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == io::ErrorKind::NotConnected => Ok(false),
            Err(e) => Err(e),
        }
    }

    #[inline]
    pub(crate) fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.read(buf),
            Stream::Tls(s) => s.read(buf),
            Stream::Unix(s) => s.read(buf),
        }
    }

    #[inline]
    pub(crate) fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.write(buf),
            Stream::Tls(s) => s.write(buf),
            Stream::Unix(s) => s.write(buf),
        }
    }

    /// Whether a read shorter than the buffer means the socket is drained. Not with TLS:
    /// plaintext comes a record at a time, and more records may wait in the socket.
    #[inline]
    pub(crate) fn short_read_drains(&self) -> bool {
        !matches!(self, Stream::Tls(_))
    }

    /// Sends what TLS holds back for a full socket (a writable event).
    pub(crate) fn flush_pending(&mut self) -> io::Result<()> {
        match self {
            Stream::Tls(s) if s.wants_write() => s.flush(),
            _ => Ok(()),
        }
    }
}
