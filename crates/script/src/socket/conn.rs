//! A cosocket's connection: TCP on the worker's loop (`evloop::net::TcpStream`), or TLS
//! over it (rustls through tokio-rustls), with the buffer its reads fill; connecting
//! (names resolved off the worker), the TLS handshake, and the errors as OpenResty words
//! them.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use std::time::Duration;

use evloop::time::Instant;

use evloop::net::TcpStream;
use rustls::pki_types::ServerName;
use rustls::ClientConfig;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt, ReadBuf};
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;

/// Bytes asked of the kernel per read at least (the buffer grows by this when full).
const READ_ROOM: usize = 16 << 10;

pub(super) enum Conn {
    Plain(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

/// A connected socket's connection and what it has read and not yet handed to Lua
/// (`buf[pos..]`).
pub(super) struct Io {
    pub(super) conn: Conn,
    pub(super) buf: Vec<u8>,
    pub(super) pos: usize,
    /// Over TLS: the server name of its handshake, and whether the certificate was
    /// verified (a pooled connection is given again only to a handshake it satisfies).
    pub(super) tls: Option<(String, bool)>,
}

/// Why an operation failed: the message Lua gets (`"timeout"`, `"closed"`,
/// `"connection refused"`, ...) and its kind, for `/metrics`.
#[derive(Debug)]
pub(super) struct Failed {
    pub(super) kind: Kind,
    pub(super) message: String,
}

/// The `error` label of `tessera_lua_socket_errors_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Timeout,
    Closed,
    Refused,
    Resolve,
    Tls,
    Other,
}

impl Failed {
    pub(super) fn timeout() -> Failed {
        Failed {
            kind: Kind::Timeout,
            message: "timeout".into(),
        }
    }

    pub(super) fn closed() -> Failed {
        Failed {
            kind: Kind::Closed,
            message: "closed".into(),
        }
    }

    /// An I/O error in OpenResty's words: `strerror`'s, lower-case, without Rust's
    /// `(os error N)`.
    pub(super) fn io(e: &io::Error) -> Failed {
        let kind = match e.kind() {
            io::ErrorKind::ConnectionRefused => Kind::Refused,
            io::ErrorKind::TimedOut => Kind::Timeout,
            io::ErrorKind::UnexpectedEof => Kind::Closed,
            _ => Kind::Other,
        };
        let message = match e.kind() {
            io::ErrorKind::ConnectionRefused => "connection refused".to_string(),
            io::ErrorKind::ConnectionReset => "connection reset by peer".to_string(),
            io::ErrorKind::BrokenPipe => "broken pipe".to_string(),
            io::ErrorKind::TimedOut => "timeout".to_string(),
            io::ErrorKind::UnexpectedEof => "closed".to_string(),
            _ => {
                let text = e.to_string();
                let text = text.split(" (os error").next().unwrap_or(&text);
                text.to_lowercase()
            }
        };
        Failed { kind, message }
    }
}

impl Conn {
    pub(super) fn tcp(&self) -> &TcpStream {
        match self {
            Conn::Plain(s) => s,
            Conn::Tls(s) => s.get_ref().0,
        }
    }

    pub(super) fn is_tls(&self) -> bool {
        matches!(self, Conn::Tls(_))
    }

    /// Whether an idle connection can be used again: nothing has arrived on it (the
    /// peer's close, data nobody asked for, a TLS alert) since it was put aside.
    pub(super) fn is_idle_and_open(&self) -> bool {
        let mut probe = [0u8; 1];
        matches!(self.tcp().try_read(&mut probe), Err(e) if e.kind() == io::ErrorKind::WouldBlock)
    }

    async fn write_all(&mut self, data: &[u8]) -> io::Result<()> {
        match self {
            Conn::Plain(s) => s.write_all(data).await,
            Conn::Tls(s) => {
                s.write_all(data).await?;
                s.flush().await
            }
        }
    }
}

impl Io {
    pub(super) fn new(conn: Conn) -> Io {
        Io {
            conn,
            buf: Vec::new(),
            pos: 0,
            tls: None,
        }
    }

    /// Bytes read and not yet taken.
    pub(super) fn buffered(&self) -> &[u8] {
        &self.buf[self.pos..]
    }

    /// Takes `n` buffered bytes.
    pub(super) fn take(&mut self, n: usize) -> Vec<u8> {
        let out = self.buf[self.pos..self.pos + n].to_vec();
        self.consume(n);
        out
    }

    /// Drops `n` buffered bytes.
    pub(super) fn consume(&mut self, n: usize) {
        self.pos += n;
        if self.pos == self.buf.len() {
            self.buf.clear();
            self.pos = 0;
        }
    }

    /// Reads more into the buffer, waiting at most `wait` for something to arrive:
    /// the bytes read, 0 at the end of the stream.
    pub(super) async fn fill(&mut self, wait: Duration) -> Result<usize, Failed> {
        self.make_room();
        let buf = &mut self.buf;
        let read = async {
            match &mut self.conn {
                Conn::Plain(s) => s.read_buf(buf).await,
                Conn::Tls(s) => s.read_buf(buf).await,
            }
        };
        match evloop::time::timeout(wait, read).await {
            Err(_) => Err(Failed::timeout()),
            Ok(Err(e)) => Err(Failed::io(&e)),
            Ok(Ok(n)) => Ok(n),
        }
    }

    /// Room for a read at the end of the buffer (what was consumed dropped first).
    fn make_room(&mut self) {
        if self.pos > 0 && self.pos == self.buf.len() {
            self.buf.clear();
            self.pos = 0;
        }
        if self.buf.capacity() - self.buf.len() < READ_ROOM / 4 {
            if self.pos > 0 {
                self.buf.drain(..self.pos);
                self.pos = 0;
            }
            self.buf.reserve(READ_ROOM);
        }
    }

    /// [`Io::fill`]'s read without its timer, polled by hand (`fast::wait_receive`,
    /// which keeps the timer): `None` on a TLS connection, which it leaves to `fill`.
    pub(super) fn poll_fill(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Option<Poll<Result<usize, Failed>>> {
        if !matches!(self.conn, Conn::Plain(_)) {
            return None;
        }
        self.make_room();
        let Conn::Plain(tcp) = &mut self.conn else {
            return None;
        };
        let mut read = ReadBuf::uninit(self.buf.spare_capacity_mut());
        Some(match Pin::new(tcp).poll_read(cx, &mut read) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Err(e)) => Poll::Ready(Err(Failed::io(&e))),
            Poll::Ready(Ok(())) => {
                let n = read.filled().len();
                // SAFETY: the read initialised the first n bytes of the spare capacity.
                unsafe { self.buf.set_len(self.buf.len() + n) };
                Poll::Ready(Ok(n))
            }
        })
    }

    /// Sends `data` whole, waiting at most `wait` each time the socket is full.
    pub(super) async fn send(&mut self, data: &[u8], wait: Duration) -> Result<(), Failed> {
        // One timer for the whole write: a write that fills the socket and waits is
        // rare for what scripts send (requests of a few KiB).
        match evloop::time::timeout(wait, self.conn.write_all(data)).await {
            Err(_) => Err(Failed::timeout()),
            Ok(Err(e)) => Err(Failed::io(&e)),
            Ok(Ok(())) => Ok(()),
        }
    }
}

/// Connects to `host` (an IP address, taken as it is, or a name, resolved off the
/// worker's thread by tokio's resolver pool) and `port`, trying each address in turn,
/// all within `wait`.
pub(super) async fn connect(host: &str, port: u16, wait: Duration) -> Result<TcpStream, Failed> {
    let deadline = Instant::now() + wait;
    let literal = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    let addrs: Vec<SocketAddr> = match literal.parse::<IpAddr>() {
        Ok(ip) => vec![SocketAddr::new(ip, port)],
        Err(_) => {
            match evloop::time::timeout_at(deadline, tokio::net::lookup_host((host, port))).await {
                Err(_) => return Err(Failed::timeout()),
                Ok(Err(e)) => {
                    return Err(Failed {
                        kind: Kind::Resolve,
                        message: format!("{host} could not be resolved ({e})"),
                    })
                }
                Ok(Ok(addrs)) => addrs.collect(),
            }
        }
    };
    let mut last = Failed {
        kind: Kind::Resolve,
        message: format!("{host} could not be resolved (no address)"),
    };
    for addr in addrs {
        match evloop::time::timeout_at(deadline, TcpStream::connect(&addr.to_string())).await {
            Err(_) => return Err(Failed::timeout()),
            Ok(Ok(stream)) => {
                // Requests and answers are small and wait on each other.
                let _ = stream.set_nodelay(true);
                return Ok(stream);
            }
            Ok(Err(e)) => last = Failed::io(&e),
        }
    }
    Err(last)
}

/// The TLS handshake over `tcp` for `name` (SNI, and the name the certificate must
/// hold when `verify`), within `wait`.
pub(super) async fn handshake(
    tcp: TcpStream,
    name: &str,
    verify: bool,
    wait: Duration,
) -> Result<Conn, Failed> {
    let tls = |message: String| Failed {
        kind: Kind::Tls,
        message,
    };
    let server_name = ServerName::try_from(name.to_string())
        .map_err(|_| tls(format!("handshake failed: `{name}` is not a server name")))?;
    let config = if verify {
        verifying_config().await.map_err(tls)?
    } else {
        unverified_config()
    };
    let handshake = TlsConnector::from(config).connect(server_name, tcp);
    match evloop::time::timeout(wait, handshake).await {
        Err(_) => Err(Failed::timeout()),
        Ok(Err(e)) => Err(tls(format!("handshake failed: {e}"))),
        Ok(Ok(stream)) => Ok(Conn::Tls(Box::new(stream))),
    }
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The configuration of `verify = false`: any certificate (the handshake's signatures
/// still checked), one per process.
fn unverified_config() -> Arc<ClientConfig> {
    static CONFIG: OnceLock<Arc<ClientConfig>> = OnceLock::new();
    CONFIG
        .get_or_init(|| {
            let provider = provider();
            let config = ClientConfig::builder_with_provider(provider.clone())
                .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
                .expect("ring supports TLS 1.2 and 1.3")
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(tlsclient::Unverified(provider)))
                .with_no_client_auth();
            Arc::new(config)
        })
        .clone()
}

/// The configuration that verifies against the system's roots, one per process. The
/// roots are read from disk at the first use, on tokio's blocking pool (not on the
/// worker's thread); a failure to find any is that handshake's error, and the next
/// handshake tries again.
async fn verifying_config() -> Result<Arc<ClientConfig>, String> {
    static CONFIG: OnceLock<Arc<ClientConfig>> = OnceLock::new();
    if let Some(config) = CONFIG.get() {
        return Ok(config.clone());
    }
    let roots = tokio::task::spawn_blocking(|| {
        tlsclient::roots(
            None,
            |w| tracing::warn!(error = %w, "tessera.socket: reading the system's CA certificates"),
        )
    })
    .await
    .map_err(|e| format!("handshake failed: reading the system's CA certificates: {e}"))?
    .map_err(|e| format!("handshake failed: {e}"))?;
    let config = ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .expect("ring supports TLS 1.2 and 1.3")
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(CONFIG.get_or_init(|| Arc::new(config)).clone())
}
