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
//!
//! QUIC (`quic_listen`) has a configuration of its own beside it, with the same
//! certificates, resolver and resumption state: TLS 1.3 only (QUIC has no other), ALPN
//! `h3`, and early data (0-RTT) only when `[http3] zero_rtt` is on.

pub(crate) mod acme;
mod certs;
mod der;
pub(crate) mod on_demand;
mod scripted;
pub(crate) mod stream;

use std::sync::Arc;

use arc_swap::ArcSwap;
use rustls::server::{ProducesTickets, ServerSessionMemoryCache, StoresServerSessions};
use rustls::ServerConfig;

use crate::config::Config;
pub use acme::{AcmeCerts, Demand};
pub(crate) use certs::ACME_TLS_ALPN;

/// TLS 1.2 sessions remembered for resumption by session ID, across all workers. Each
/// costs a few hundred bytes; 20,000 is what nginx keeps in 5 MB of `ssl_session_cache`.
const SESSION_CACHE_ENTRIES: usize = 20_000;

/// What every TLS listener of every worker shares: the current rustls configuration
/// (certificates included), swapped whole on reload, and the resumption state that
/// outlives reloads.
pub struct Tls {
    current: ArcSwap<ServerConfig>,
    /// The configuration of QUIC handshakes (`quic_listen`).
    quic: ArcSwap<ServerConfig>,
    /// The resolver inside `current`, for what a handshake decides before rustls runs
    /// (an on-demand certificate, `on_demand`).
    resolver: ArcSwap<certs::Resolver>,
    tickets: Arc<dyn ProducesTickets>,
    sessions: Arc<dyn StoresServerSessions>,
    /// `[acme]`'s certificates, which outlive reloads as the resumption state does.
    acme: Option<Arc<AcmeCerts>>,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tls").finish_non_exhaustive()
    }
}

impl Tls {
    /// Reads every certificate and key the configuration names, and serves `acme`'s
    /// (`[acme]`, when configured). `Ok(None)` when it has no `tls_listen`.
    pub fn new(config: &Config, acme: Option<Arc<AcmeCerts>>) -> Result<Option<Tls>, String> {
        if config.tls_listen.is_empty() && config.quic_listen.is_empty() {
            return Ok(None);
        }
        let tickets = rustls::crypto::ring::Ticketer::new()
            .map_err(|e| format!("cannot make TLS ticket keys: {e}"))?;
        let sessions = ServerSessionMemoryCache::new(SESSION_CACHE_ENTRIES);
        let prepared = build(config, tickets.clone(), sessions.clone(), acme.clone())?;
        Ok(Some(Tls {
            current: ArcSwap::new(prepared.config),
            quic: ArcSwap::new(prepared.quic),
            resolver: ArcSwap::new(prepared.resolver),
            tickets,
            sessions,
            acme,
        }))
    }

    /// The rustls configuration for `config`'s certificates (with the resumption state
    /// kept), built but not yet used: a reload installs it once everything else of the
    /// new configuration is ready too.
    pub(crate) fn prepare(&self, config: &Config) -> Result<Prepared, String> {
        let acme = self.acme.clone();
        build(config, self.tickets.clone(), self.sessions.clone(), acme)
    }

    /// New handshakes use `prepared` from now on.
    pub(crate) fn install(&self, prepared: Prepared) {
        self.resolver.store(prepared.resolver);
        self.current.store(prepared.config);
        self.quic.store(prepared.quic);
    }

    /// The certificate resolver of the current configuration.
    pub(crate) fn resolver(&self) -> Arc<certs::Resolver> {
        self.resolver.load_full()
    }

    /// The configuration for a new handshake.
    pub(crate) fn current(&self) -> Arc<ServerConfig> {
        self.current.load_full()
    }

    /// The configuration for a new QUIC handshake.
    pub(crate) fn quic(&self) -> Arc<ServerConfig> {
        self.quic.load_full()
    }
}

/// A rustls configuration and its certificate resolver, built for a configuration.
pub(crate) struct Prepared {
    config: Arc<ServerConfig>,
    quic: Arc<ServerConfig>,
    resolver: Arc<certs::Resolver>,
}

fn build(
    config: &Config,
    tickets: Arc<dyn ProducesTickets>,
    sessions: Arc<dyn StoresServerSessions>,
    acme: Option<Arc<AcmeCerts>>,
) -> Result<Prepared, String> {
    let resolver = Arc::new(certs::Resolver::load(config, acme)?);
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut quic = ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| format!("TLS settings: {e}"))?
        .with_no_client_auth()
        .with_cert_resolver(resolver.clone());
    quic.alpn_protocols = vec![b"h3".to_vec()];
    // With 0-RTT, sessions resume from the shared session cache, not from tickets: each
    // ticket then names a cache entry taken at its first use, so a recorded first flight
    // replayed to this server is not resumed (rustls allows 0-RTT only so).
    if !config.http3.zero_rtt {
        quic.ticketer = tickets.clone();
    }
    quic.session_storage = sessions.clone();
    // QUIC takes early data all or nothing (quinn asks for u32::MAX or 0).
    quic.max_early_data_size = if config.http3.zero_rtt { u32::MAX } else { 0 };
    let mut server_config = ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(|e| format!("TLS settings: {e}"))?
        .with_no_client_auth()
        .with_cert_resolver(resolver.clone());
    // Most preferred first: rustls picks the first of ours the client offers.
    server_config.alpn_protocols = match config.http2.enabled {
        true => vec![b"h2".to_vec(), b"http/1.1".to_vec()],
        false => vec![b"http/1.1".to_vec()],
    };
    // Last, so that no ordinary client is given it: only a CA's TLS-ALPN-01 validator
    // offers it, alone (RFC 8737).
    if config
        .acme
        .as_ref()
        .is_some_and(|a| a.offers("tls-alpn-01"))
    {
        server_config.alpn_protocols.push(ACME_TLS_ALPN.to_vec());
    }
    server_config.ignore_client_order = true;
    server_config.ticketer = tickets;
    server_config.session_storage = sessions;
    server_config.max_early_data_size = 0;
    Ok(Prepared {
        config: Arc::new(server_config),
        quic: Arc::new(quic),
        resolver,
    })
}
