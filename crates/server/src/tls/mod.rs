//! TLS termination with rustls: the settings every TLS listener shares ([`Tls`]), the
//! certificates chosen by SNI (`certs`), and one connection's encrypted stream
//! (`stream`), which the HTTP/1 connection uses through `transport::Stream`.
//!
//! The crypto provider is *ring*, not aws-lc-rs: both run the same BoringSSL-derived
//! assembly for AES-GCM, ChaCha20-Poly1305, X25519 and P-256, but ring builds from crates
//! with a C compiler alone (aws-lc-sys compiles a whole C library, with CMake on some
//! targets), which keeps a clean clone's build short and its toolchain needs as they
//! were. aws-lc-rs would add FIPS and post-quantum key exchange; neither is asked for.
//!
//! Secure by default, with nothing to turn on: TLS 1.3 and 1.2 only; rustls has no RSA
//! key exchange, no CBC or RC4 suite, no renegotiation and no compression at all, and
//! every suite it has is an AEAD with ephemeral (EC)DHE, so those are absent rather than
//! disabled. The server's suite order wins for TLS 1.2; 0-RTT stays off; ALPN offers
//! `http/1.1`.
//!
//! Shared by every worker, so a client resumes on any of them: the TLS 1.3 ticket keys
//! (rotated every 6 hours, a ticket accepted for at most 12) and the TLS 1.2 session
//! cache. Certificates are swapped whole ([`Tls::reload`]): a handshake reads the
//! current configuration once, lock-free; connections already open keep theirs.

mod certs;
pub(crate) mod stream;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::Arc;

use crate::reactor::Socket;
use arc_swap::ArcSwap;
use rustls::server::{ProducesTickets, ServerSessionMemoryCache, StoresServerSessions};
use rustls::ServerConfig;
use serde::Deserialize;

use crate::config::Config;
use crate::conn::{self, Conn};
use crate::metrics::Handshake;
use crate::transport::Stream;
use crate::worker::Worker;

/// `[tls]`: the default certificate, served to a client whose SNI names no `[[host]]`
/// with a certificate of its own (or that sends no SNI).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TlsConfig {
    /// PEM file: the certificate, then its chain (intermediates), leaf first.
    pub certificate: Option<PathBuf>,
    /// PEM file: the private key (PKCS#8, PKCS#1 RSA or SEC1 EC).
    pub key: Option<PathBuf>,
    /// `Strict-Transport-Security` value added to every response sent over TLS
    /// (`"max-age=31536000"`). Default none: HSTS is a promise for the whole name, for
    /// as long as max-age says, so only the operator can make it.
    pub hsts: Option<String>,
    /// Answer every request on a cleartext listener with 308 to the same URL on https
    /// (the port of the first `tls_listen`, left out when 443). Default false.
    pub redirect_https: bool,
}

/// What a request needs to know about the TLS connection it came on.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TlsFacts {
    /// The site the client's SNI named, or the default site without one (or for a name
    /// no `[[host]]` has): the only site this connection may be served by.
    pub site: usize,
    /// Whether the client sent SNI. Without it every request is the default site's,
    /// whatever its Host: the client could not say which certificate it wanted.
    pub sni: bool,
    /// `TLSv1.3` or `TLSv1.2`, for `%{tls_version}x`.
    pub version: &'static str,
    /// The cipher suite's IANA name (`TLS13_AES_128_GCM_SHA256`), for `%{tls_cipher}x`.
    pub cipher: &'static str,
    /// ALPN chose `h2`: the connection speaks HTTP/2.
    pub h2: bool,
}

/// TLS 1.2 sessions remembered for resumption by session ID, across all workers. Each
/// costs a few hundred bytes; 20,000 is what nginx keeps in 5 MB of `ssl_session_cache`.
const SESSION_CACHE_ENTRIES: usize = 20_000;

/// What every TLS listener of every worker shares: the current rustls configuration
/// (certificates included), swapped whole on reload, and the resumption state that
/// outlives reloads.
pub struct Tls {
    current: ArcSwap<ServerConfig>,
    tickets: Arc<dyn ProducesTickets>,
    sessions: Arc<dyn StoresServerSessions>,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tls").finish_non_exhaustive()
    }
}

impl Tls {
    /// Reads every certificate and key the configuration names. `Ok(None)` when it
    /// has no `tls_listen`.
    pub fn new(config: &Config) -> Result<Option<Tls>, String> {
        if config.tls_listen.is_empty() {
            return Ok(None);
        }
        let tickets = rustls::crypto::ring::Ticketer::new()
            .map_err(|e| format!("cannot make TLS ticket keys: {e}"))?;
        let sessions = ServerSessionMemoryCache::new(SESSION_CACHE_ENTRIES);
        let server_config = build(config, tickets.clone(), sessions.clone())?;
        Ok(Some(Tls {
            current: ArcSwap::from_pointee(server_config),
            tickets,
            sessions,
        }))
    }

    /// The rustls configuration for `config`'s certificates (with the resumption state
    /// kept), built but not yet used: a reload installs it once everything else of the
    /// new configuration is ready too.
    pub(crate) fn prepare(&self, config: &Config) -> Result<Arc<ServerConfig>, String> {
        build(config, self.tickets.clone(), self.sessions.clone()).map(Arc::new)
    }

    /// New handshakes use `prepared` from now on.
    pub(crate) fn install(&self, prepared: Arc<ServerConfig>) {
        self.current.store(prepared);
    }

    /// The configuration for a new handshake.
    pub(crate) fn current(&self) -> Arc<ServerConfig> {
        self.current.load_full()
    }
}

/// A TLS connection's task: the handshake, then HTTP/1 over it. Its slot was taken at
/// accept, in `ReadingHead`: a handshake counts against the connection budget and is
/// closed by the worker's check after `timeouts.head`, like a slow request head.
pub(crate) async fn serve(tcp: Socket, peer: SocketAddr, worker: Rc<Worker>, slot: pool::SlotId) {
    let Some(tls) = worker.shared.tls.as_ref() else {
        worker.free(slot);
        return;
    };
    let current = worker.current();
    match stream::TlsStream::accept(tcp, tls.current(), &current.gen.sites.hosts).await {
        Ok(mut stream) => {
            if let Some(metrics) = worker.metrics() {
                let resumed = stream.tls.handshake_kind() == Some(rustls::HandshakeKind::Resumed);
                metrics.handshake(if resumed {
                    Handshake::Resumed
                } else {
                    Handshake::Full
                });
            }
            let facts = stream.facts;
            if facts.h2 {
                // HTTP/2 writes the frames of a pass, then flushes once.
                stream.hold_writes_until_flush();
            }
            let stream = Stream::Tls(stream);
            if facts.h2 {
                // Boxed, as in `conn`: the HTTP/2 connection's future is several KiB, and
                // every TLS connection's task would otherwise carry room for it.
                let prefix = bytes::Bytes::new();
                Box::pin(crate::http2::serve(
                    stream,
                    prefix,
                    peer,
                    worker,
                    slot,
                    Some(facts),
                ))
                .await;
            } else {
                conn::serve(Conn::new(stream, peer, worker, slot)).await;
            }
        }
        Err(e) => {
            tracing::debug!(%peer, error = %e, "TLS handshake failed");
            if let Some(metrics) = worker.metrics() {
                metrics.handshake(Handshake::Failed);
            }
            worker.free(slot);
        }
    }
}

/// Every problem of the TLS keys (values only, like `Config::problems`).
pub(crate) fn problems(config: &Config) -> Vec<String> {
    let mut problems = Vec::new();
    let pair = |key: &str, tls: &TlsConfig, problems: &mut Vec<String>| {
        if tls.certificate.is_some() != tls.key.is_some() {
            problems.push(format!(
                "`{key}` needs both `certificate` and `key`, or neither"
            ));
        }
    };
    pair("tls", &config.tls, &mut problems);
    if let Some(hsts) = &config.tls.hsts {
        if hsts.is_empty() || hsts.bytes().any(|b| b < 0x20 || b == 0x7f) {
            problems.push("`tls.hsts` must be non-empty printable text".into());
        }
    }
    if config.tls.redirect_https && config.tls_listen.is_empty() {
        problems.push("`tls.redirect_https` needs a `tls_listen` to send clients to".into());
    }
    for (i, host) in config.host.iter().enumerate() {
        if let Some(tls) = &host.tls {
            pair(&format!("host[{i}].tls"), tls, &mut problems);
        }
    }
    if !config.tls_listen.is_empty()
        && config.tls.certificate.is_none()
        && !config
            .host
            .iter()
            .any(|h| h.tls.as_ref().is_some_and(|t| t.certificate.is_some()))
    {
        problems.push(
            "`tls_listen` needs a certificate: `[tls] certificate` and `key` (or --cert and --key)"
                .into(),
        );
    }
    problems
}

fn build(
    config: &Config,
    tickets: Arc<dyn ProducesTickets>,
    sessions: Arc<dyn StoresServerSessions>,
) -> Result<ServerConfig, String> {
    let resolver = certs::Resolver::load(config)?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut server_config = ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(|e| format!("TLS settings: {e}"))?
        .with_no_client_auth()
        .with_cert_resolver(Arc::new(resolver));
    // Most preferred first: rustls picks the first of ours the client offers.
    server_config.alpn_protocols = match config.http2.enabled {
        true => vec![b"h2".to_vec(), b"http/1.1".to_vec()],
        false => vec![b"http/1.1".to_vec()],
    };
    server_config.ignore_client_order = true;
    server_config.ticketer = tickets;
    server_config.session_storage = sessions;
    server_config.max_early_data_size = 0;
    Ok(server_config)
}
