//! TLS for `https://` targets: the client configuration every load connection shares,
//! and the connection itself driven by hand over a non-blocking socket.
//!
//! Each connection makes a full handshake: the session store is off, so that
//! `--no-keepalive` measures what a server pays for a new client, as h2load does by
//! default. Roots: the system's, or `--ca FILE`; `--insecure` takes any certificate.

use std::io::{self, Read, Write};
use std::path::Path;
use std::sync::Arc;

use mio::net::TcpStream;
use rustls::client::Resumption;
use rustls::pki_types::ServerName;
use rustls::{ClientConfig, ClientConnection};

use crate::Error;

/// What every connection of a run needs to speak TLS.
#[derive(Debug, Clone)]
pub(crate) struct Tls {
    pub config: Arc<ClientConfig>,
    /// The server name each request of the mix (by wire index) sends: its URL's host.
    pub names: Vec<ServerName<'static>>,
}

impl Tls {
    /// The configuration for `hosts` (each request's, by wire index), offering `alpn`
    /// (`h3`, `h2` or `http/1.1`).
    pub(crate) fn new(
        hosts: &[&str],
        ca: Option<&Path>,
        insecure: bool,
        alpn: &[u8],
    ) -> Result<Tls, Error> {
        let bad = |reason: String| Error::InvalidOption {
            option: "tls",
            reason,
        };
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = ClientConfig::builder_with_provider(provider.clone())
            .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
            .map_err(|e| bad(e.to_string()))?;
        let builder = if insecure {
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(tlsclient::Unverified(provider)))
        } else {
            let roots = tlsclient::roots(ca, |_| {}).map_err(|reason| Error::InvalidOption {
                option: "ca",
                reason,
            })?;
            builder.with_root_certificates(roots)
        };
        let mut config = builder.with_no_client_auth();
        config.alpn_protocols = vec![alpn.to_vec()];
        config.resumption = Resumption::disabled();
        let names = hosts
            .iter()
            .map(|host| {
                let host = host.trim_start_matches('[').trim_end_matches(']');
                ServerName::try_from(host.to_string())
                    .map_err(|_| bad(format!("{host:?} is not a TLS server name")))
            })
            .collect::<Result<_, _>>()?;
        Ok(Tls {
            config: Arc::new(config),
            names,
        })
    }
}

/// A TLS connection over a non-blocking TCP socket, read and written as a plain one:
/// plaintext written before the handshake ends is sent when it does.
pub(crate) struct TlsStream {
    pub tcp: TcpStream,
    conn: ClientConnection,
    /// `--http2`: the server must agree to `h2` by ALPN; checked once the handshake ends.
    needs_h2: bool,
}

impl TlsStream {
    /// A connection whose server name is that of the mix's request `wire`.
    pub(crate) fn new(tcp: TcpStream, tls: &Tls, wire: usize) -> io::Result<TlsStream> {
        let mut conn = ClientConnection::new(tls.config.clone(), tls.names[wire].clone())
            .map_err(io::Error::other)?;
        // The engine's own buffers bound what is written; rustls need not refuse any.
        conn.set_buffer_limit(None);
        let needs_h2 = tls.config.alpn_protocols.iter().any(|p| p == b"h2");
        Ok(TlsStream {
            tcp,
            conn,
            needs_h2,
        })
    }

    /// Plaintext received, reading records off the socket as needed. `WouldBlock` once
    /// the socket is drained with no plaintext to give: the caller must read until then,
    /// as records past the first may wait in the socket.
    pub(crate) fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            match self.conn.reader().read(buf) {
                Ok(n) => return Ok(n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                // The peer closed without close_notify: an end like any other here.
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(0),
                Err(e) => return Err(e),
            }
            match self.conn.read_tls(&mut self.tcp) {
                Ok(0) => return Ok(0),
                Ok(_) => {}
                Err(e) => return Err(e),
            }
            if let Err(e) = self.conn.process_new_packets() {
                // Tell the server why (an alert), as far as the socket takes it.
                let _ = self.flush();
                return Err(io::Error::new(io::ErrorKind::InvalidData, e));
            }
            if self.needs_h2 && !self.conn.is_handshaking() {
                if self.conn.alpn_protocol() != Some(b"h2") {
                    let e = "the server did not agree to HTTP/2 (ALPN h2)";
                    return Err(io::Error::new(io::ErrorKind::InvalidData, e));
                }
                self.needs_h2 = false;
            }
            self.flush()?;
        }
    }

    /// Takes all of `buf` (rustls buffers it) and sends what the socket accepts.
    pub(crate) fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.conn.writer().write_all(buf)?;
        self.flush()?;
        Ok(buf.len())
    }

    /// Sends the records waiting; stops quietly when the socket is full (the rest goes
    /// at the next writable event).
    pub(crate) fn flush(&mut self) -> io::Result<()> {
        while self.conn.wants_write() {
            match self.conn.write_tls(&mut self.tcp) {
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Whether records wait for the socket to take them.
    pub(crate) fn wants_write(&self) -> bool {
        self.conn.wants_write()
    }
}
