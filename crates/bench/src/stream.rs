//! A load connection's socket: TCP or a Unix socket, behind one set of calls.

use std::io::{self, Read, Write};

use mio::event::Source;
use mio::net::{TcpStream, UnixStream};

use crate::config::Address;

pub(crate) enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl Stream {
    /// `nodelay` only matters when a connection carries more than one request:
    /// a single request goes out in one write, which Nagle never delays.
    pub(crate) fn connect(addr: &Address, nodelay: bool) -> io::Result<Stream> {
        Ok(match addr {
            Address::Tcp(a) => {
                let s = TcpStream::connect(*a)?;
                if nodelay {
                    s.set_nodelay(true)?;
                }
                Stream::Tcp(s)
            }
            Address::Unix(p) => Stream::Unix(UnixStream::connect(p)?),
        })
    }

    pub(crate) fn source(&mut self) -> &mut dyn Source {
        match self {
            Stream::Tcp(s) => s,
            Stream::Unix(s) => s,
        }
    }

    /// `Ok(true)` once connected, `Ok(false)` while the connect is in progress.
    pub(crate) fn connected(&self) -> io::Result<bool> {
        let err = match self {
            Stream::Tcp(s) => s.take_error()?,
            Stream::Unix(s) => s.take_error()?,
        };
        if let Some(e) = err {
            return Err(e);
        }
        let peer = match self {
            Stream::Tcp(s) => s.peer_addr().map(|_| ()),
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
            Stream::Unix(s) => s.read(buf),
        }
    }

    #[inline]
    pub(crate) fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.write(buf),
            Stream::Unix(s) => s.write(buf),
        }
    }
}
