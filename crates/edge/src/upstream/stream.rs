//! A connection to a peer, whatever carries it (TCP, TLS over TCP, a Unix domain
//! socket): an enum rather than a boxed trait
//! object, so that a cleartext connection costs what a bare `TcpStream` did (one match
//! per read or write, no allocation, no virtual call); and opening one: TCP, the PROXY
//! header when the upstream sends one, then TLS for a TLS peer; or the Unix socket.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};

use evloop::net::TcpStream;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::UnixStream;
use tokio_rustls::client::TlsStream;

use crate::config::SendProxy;
use crate::upstream::peers::{PeerSet, PeerShared, Transport};

pub(crate) enum Stream {
    Tcp(TcpStream),
    /// Boxed: rustls' state is large, and a cleartext connection should not carry its
    /// room.
    Tls(Box<TlsStream<TcpStream>>),
    Unix(UnixStream),
}

/// Why a connection could not be opened.
#[derive(Debug, thiserror::Error)]
pub(crate) enum OpenError {
    #[error("{0}")]
    Connect(io::Error),
    #[error("sending the PROXY header: {0}")]
    Proxy(io::Error),
    /// The handshake failed: the certificate did not verify, the peer refused ours, or
    /// it does not speak TLS.
    #[error("TLS handshake: {0}")]
    Tls(io::Error),
}

/// Opens a connection to peer `peer` of `set`; with `send_proxy`, the PROXY header names
/// the client given (or none: the proxy's own request).
pub(crate) async fn open(
    set: &PeerSet,
    peer: usize,
    send_proxy: Option<(SendProxy, Option<SocketAddr>)>,
) -> Result<Stream, OpenError> {
    let p = &set.peers[peer];
    if let Transport::Unix(path) = &p.transport {
        // validate() refused send_proxy with Unix socket peers.
        let unix = UnixStream::connect(path).await;
        return unix.map(Stream::Unix).map_err(OpenError::Connect);
    }
    let tcp = tcp_to(p, send_proxy).await?;
    match (&p.transport, &set.tls) {
        (Transport::Tcp, _) => Ok(Stream::Tcp(tcp)),
        (Transport::Tls(name), Some(tls)) => {
            let learned = &p.tls_learned;
            let only_12 = tls.offers_12_only(learned);
            let stream = match tls.handshake(name.clone(), tcp, learned, only_12).await {
                // Offered TLS 1.2 only and refused: once more on a new connection,
                // offering TLS 1.3 (crate::upstream::tls says when 1.2 only is offered).
                Err(e) if only_12 && crate::upstream::tls::may_refuse_versions(&e) => {
                    let tcp = tcp_to(p, send_proxy).await?;
                    tls.handshake(name.clone(), tcp, learned, false).await
                }
                done => done,
            };
            Ok(Stream::Tls(Box::new(stream.map_err(OpenError::Tls)?)))
        }
        (Transport::Tls(_), None) => Err(OpenError::Tls(io::Error::other(
            "the upstream has no TLS configuration",
        ))),
        (Transport::Unix(_), _) => unreachable!("connected above"),
    }
}

/// A TCP connection to peer `p`, with the PROXY header when one is sent.
async fn tcp_to(
    p: &PeerShared,
    send_proxy: Option<(SendProxy, Option<SocketAddr>)>,
) -> Result<TcpStream, OpenError> {
    let mut tcp = TcpStream::connect(&p.address)
        .await
        .map_err(OpenError::Connect)?;
    let _ = tcp.set_nodelay(true);
    if let Some((version, client)) = send_proxy {
        crate::upstream::send_proxy::introduce(&mut tcp, version, client)
            .await
            .map_err(OpenError::Proxy)?;
    }
    Ok(tcp)
}

impl Stream {
    /// Whether an idle connection is still usable: nothing arrived on it while it was
    /// idle (a close, or for TLS an alert). For TLS the byte read is of a record, which
    /// the connection is not used after.
    pub(crate) fn still_open(&mut self) -> bool {
        let mut probe = [0u8; 1];
        let read = match self {
            Stream::Tcp(s) => s.try_read(&mut probe),
            Stream::Tls(s) => s.get_mut().0.try_read(&mut probe),
            Stream::Unix(s) => s.try_read(&mut probe),
        };
        matches!(read, Err(e) if e.kind() == io::ErrorKind::WouldBlock)
    }

    /// Whether the peer chose HTTP/2 by ALPN (a TLS connection only).
    pub(crate) fn speaks_h2(&self) -> bool {
        match self {
            Stream::Tls(s) => s.get_ref().1.alpn_protocol() == Some(b"h2"),
            Stream::Tcp(_) | Stream::Unix(_) => false,
        }
    }

    /// The TCP connection, for a tunnel: only a cleartext TCP one can be spliced.
    pub(crate) fn into_tcp(self) -> Option<TcpStream> {
        match self {
            Stream::Tcp(s) => Some(s),
            Stream::Tls(_) | Stream::Unix(_) => None,
        }
    }
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Tcp(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
            Stream::Unix(s) => Pin::new(s).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Tcp(s) => Pin::new(s).poll_write(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
            Stream::Unix(s) => Pin::new(s).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Tcp(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
            Stream::Unix(s) => Pin::new(s).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Stream::Tcp(s) => s.is_write_vectored(),
            Stream::Tls(s) => s.is_write_vectored(),
            Stream::Unix(s) => s.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Tcp(_) | Stream::Unix(_) => Poll::Ready(Ok(())),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Tcp(s) => Pin::new(s).poll_shutdown(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
            Stream::Unix(s) => Pin::new(s).poll_shutdown(cx),
        }
    }
}
