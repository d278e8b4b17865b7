//! One TLS connection: rustls' `ServerConnection` over the worker's non-blocking socket,
//! driven by hand (no tokio-rustls) so that the connection's output batch is encrypted
//! straight from where it lies, a few records per write, and so that waiting is done on
//! the socket's own readiness as on a cleartext connection.
//!
//! Reads: the socket's bytes go into rustls, which decrypts them; the connection copies
//! the plaintext into its read buffer. Writes: the batch (heads, small bodies, file
//! pieces read with pread(2) into one reused per-worker buffer) goes into rustls as
//! 16 KiB records until rustls holds its limit (64 KiB), then one vectored write sends
//! them all. kTLS would replace the second half (the kernel encrypting, sendfile again)
//! behind a start-up probe; nothing above this file would change.

use std::cell::RefCell;
use std::future::poll_fn;
use std::io::{self, Read, Write};
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use rustls::{ServerConfig, ServerConnection};
use tokio::net::TcpStream;

use super::TlsFacts;
use crate::output::{Output, Progress};

/// Plaintext taken from a batch per record: TLS's largest record.
const RECORD: usize = 16 * 1024;

thread_local! {
    /// The worker's buffer for a batch's plaintext on its way into rustls (each worker
    /// is one thread; a connection never holds it across a wait).
    static SCRATCH: RefCell<Box<[u8]>> = RefCell::new(vec![0; RECORD].into_boxed_slice());
}

pub(crate) struct TlsStream {
    pub tcp: TcpStream,
    pub tls: ServerConnection,
    /// Known once the handshake is done.
    pub facts: TlsFacts,
}

/// The socket as rustls sees it: reads and writes that never wait (tokio clears the
/// socket's readiness on `WouldBlock`, so the next wait goes to epoll).
struct Socket<'a>(&'a TcpStream);

impl Read for Socket<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.0.try_read(buf)
    }
}

impl Write for Socket<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.try_write(buf)
    }

    fn write_vectored(&mut self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
        self.0.try_write_vectored(bufs)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl TlsStream {
    /// The server's side of a handshake. It has no timer of its own: the connection's
    /// slot is in `ReadingHead` from accept, so the worker's periodic check closes a
    /// handshake that takes longer than `timeouts.head`, and the slot counts against
    /// the connection budget meanwhile.
    pub async fn accept(
        tcp: TcpStream,
        config: Arc<ServerConfig>,
        hosts: &handler::Hosts,
    ) -> io::Result<TlsStream> {
        let tls = ServerConnection::new(config).map_err(io::Error::other)?;
        let facts = TlsFacts {
            site: hosts.default_site(),
            sni: false,
            version: "-",
            cipher: "-",
            h2: false,
        };
        let mut stream = TlsStream { tcp, tls, facts };
        while stream.tls.is_handshaking() {
            poll_fn(|cx| stream.poll_send(cx)).await?;
            if !stream.tls.is_handshaking() {
                break;
            }
            poll_fn(|cx| stream.tcp.poll_read_ready(cx)).await?;
            match stream.receive() {
                Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(e),
            }
        }
        // The TLS 1.3 session tickets, queued as the handshake completed.
        poll_fn(|cx| stream.poll_send(cx)).await?;
        let tls = &stream.tls;
        stream.facts.sni = tls.server_name().is_some();
        if let Some(site) = tls.server_name().and_then(|n| hosts.named(n.as_bytes())) {
            stream.facts.site = site;
        }
        stream.facts.version = match tls.protocol_version() {
            Some(rustls::ProtocolVersion::TLSv1_3) => "TLSv1.3",
            Some(rustls::ProtocolVersion::TLSv1_2) => "TLSv1.2",
            _ => "-",
        };
        stream.facts.h2 = tls.alpn_protocol() == Some(b"h2");
        stream.facts.cipher = tls
            .negotiated_cipher_suite()
            .and_then(|s| s.suite().as_str())
            .unwrap_or("-");
        Ok(stream)
    }

    /// Reads what the socket has into rustls and processes it. A protocol error (a
    /// client speaking cleartext HTTP to a TLS port, a refused version or suite) sends
    /// rustls' alert, without waiting, and ends the connection.
    fn receive(&mut self) -> io::Result<usize> {
        let n = self.tls.read_tls(&mut Socket(&self.tcp))?;
        if n > 0 {
            if let Err(e) = self.tls.process_new_packets() {
                let _ = self.tls.write_tls(&mut Socket(&self.tcp));
                return Err(io::Error::new(io::ErrorKind::InvalidData, e));
            }
            // A key update or an alert to answer: best effort now, else with the next
            // write.
            if self.tls.wants_write() {
                let _ = self.tls.write_tls(&mut Socket(&self.tcp));
            }
        }
        Ok(n)
    }

    /// Sends every record rustls holds, waiting for writability when the socket is full.
    fn poll_send(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.tls.wants_write() {
            match self.tls.write_tls(&mut Socket(&self.tcp)) {
                Ok(0) => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    ready!(self.tcp.poll_write_ready(cx))?;
                }
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
        Poll::Ready(Ok(()))
    }

    /// Ready when plaintext is waiting in rustls, or the socket is readable.
    pub fn poll_read_ready(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.tls.process_new_packets() {
            Ok(state) if state.plaintext_bytes_to_read() == 0 && !state.peer_has_closed() => {
                self.tcp.poll_read_ready(cx)
            }
            // Plaintext, the peer's close_notify, or an error: the read reports it.
            _ => Poll::Ready(Ok(())),
        }
    }

    /// Decrypted bytes into `buf`; 0 at the end of the stream.
    pub fn poll_read(&mut self, cx: &mut Context<'_>, buf: &mut [u8]) -> Poll<io::Result<usize>> {
        loop {
            match self.tls.reader().read(buf) {
                Ok(n) => return Poll::Ready(Ok(n)),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Poll::Ready(Err(e)),
            }
            match self.receive() {
                Ok(0) => return Poll::Ready(Ok(0)),
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    ready!(self.tcp.poll_read_ready(cx))?;
                }
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }

    /// Encrypts `bufs` (several pieces become one record while they fit) once what
    /// rustls held before has gone out, so that it never holds more than one write's
    /// worth; then sends what the socket takes without waiting.
    pub fn poll_write_vectored(
        &mut self,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        ready!(self.poll_send(cx))?;
        let n = self.tls.writer().write_vectored(bufs)?;
        match self.tls.write_tls(&mut Socket(&self.tcp)) {
            Err(e) if e.kind() != io::ErrorKind::WouldBlock => Poll::Ready(Err(e)),
            _ => Poll::Ready(Ok(n)),
        }
    }

    pub fn poll_flush(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.poll_send(cx)
    }

    pub fn poll_shutdown(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.tls.send_close_notify();
        ready!(self.poll_send(cx))?;
        Poll::Ready(socket2::SockRef::from(&self.tcp).shutdown(std::net::Shutdown::Write))
    }

    /// The output batch, encrypted and written without waiting: the plaintext is taken
    /// a record at a time (in the worker's scratch buffer; file pieces read into it)
    /// until rustls holds its limit, then one vectored write sends those records.
    pub fn try_write_output(&mut self, out: &mut Output) -> io::Result<Progress> {
        SCRATCH.with_borrow_mut(|scratch| {
            let mut wrote = false;
            loop {
                while !out.is_taken() {
                    let n = match out.copy_out(scratch) {
                        Ok(n) => n,
                        Err(e) => {
                            out.clear();
                            return Err(e);
                        }
                    };
                    let taken = self.tls.writer().write(&scratch[..n])?;
                    out.advance(taken as u64);
                    if taken < n || n == 0 {
                        break;
                    }
                }
                if !self.tls.wants_write() {
                    // rustls holds nothing, so it took all it was given.
                    out.clear();
                    return Ok(Progress::Done);
                }
                match self.tls.write_tls(&mut Socket(&self.tcp)) {
                    Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                    Ok(_) => wrote = true,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        return Ok(Progress::Blocked { wrote });
                    }
                    Err(e) => {
                        out.clear();
                        return Err(e);
                    }
                }
            }
        })
    }

    /// Best effort at closing cleanly: a close_notify alert, if the socket takes it now.
    pub fn close_notify(&mut self) {
        self.tls.send_close_notify();
        let _ = self.tls.write_tls(&mut Socket(&self.tcp));
    }
}
