//! What a connection reads from and writes to: the socket itself, or TLS over it. The
//! HTTP/1 connection (`conn`) is written once against [`Stream`]; each method is one
//! `match`, so the cleartext path stays what it was.

use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::facts::TlsFacts;
use crate::net::output::{Output, Progress};
use crate::net::reactor::Socket;
use crate::net::tls::stream::TlsStream;

pub(crate) enum Stream {
    Plain(Socket),
    /// Boxed: rustls' connection state is large, and every cleartext connection's future
    /// would otherwise carry room for it.
    Tls(Box<TlsStream>),
}

impl Stream {
    /// The socket under the stream (for a lingering close, which drains raw bytes).
    pub fn tcp(&self) -> &Socket {
        match self {
            Stream::Plain(tcp) => tcp,
            Stream::Tls(tls) => &tls.tcp,
        }
    }

    /// Ready when a read would find bytes (or the end): the socket's readiness, and on
    /// TLS also plaintext already decrypted.
    pub fn poll_read_ready(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self {
            Stream::Plain(tcp) => tcp.poll_read_ready(cx),
            Stream::Tls(tls) => tls.poll_read_ready(cx),
        }
    }

    /// Whether a read would find bytes (or the end) as far as is known now, without
    /// waiting and without spending the task's cooperative budget.
    pub fn read_ready_now(&self) -> bool {
        match self {
            Stream::Plain(tcp) => tcp.read_ready_now(),
            Stream::Tls(tls) => tls.read_ready_now(),
        }
    }

    pub fn poll_write_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.tcp().poll_write_ready(cx)
    }

    /// Writes as much of the batch as the socket takes without waiting.
    pub fn try_write_output(&mut self, out: &mut Output) -> io::Result<Progress> {
        match self {
            Stream::Plain(tcp) => out.try_write(tcp),
            Stream::Tls(tls) => tls.try_write_output(out),
        }
    }

    /// The TLS connection's facts (`None` in cleartext).
    pub fn tls_facts(&self) -> Option<TlsFacts> {
        match self {
            Stream::Plain(_) => None,
            Stream::Tls(tls) => Some(tls.facts.clone()),
        }
    }

    /// Before the socket closes: TLS says so with close_notify (if the socket takes it).
    pub fn close_notify(&mut self) {
        if let Stream::Tls(tls) = self {
            tls.close_notify();
        }
    }
}

impl AsRawFd for Stream {
    fn as_raw_fd(&self) -> RawFd {
        self.tcp().as_raw_fd()
    }
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(tcp) => Pin::new(tcp).poll_read(cx, buf),
            Stream::Tls(tls) => tls.poll_read(cx, buf),
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
            Stream::Plain(tcp) => Pin::new(tcp).poll_write(cx, buf),
            Stream::Tls(tls) => tls.poll_write_vectored(cx, &[io::IoSlice::new(buf)]),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(tcp) => Pin::new(tcp).poll_write_vectored(cx, bufs),
            Stream::Tls(tls) => tls.poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(tcp) => Pin::new(tcp).poll_flush(cx),
            Stream::Tls(tls) => tls.poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(tcp) => Pin::new(tcp).poll_shutdown(cx),
            Stream::Tls(tls) => tls.poll_shutdown(cx),
        }
    }
}
