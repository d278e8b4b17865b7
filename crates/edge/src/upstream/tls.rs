//! TLS to the peers (`tls = true`, `https://` addresses): one rustls client configuration
//! per upstream, made at start (and at a reload that changes the upstream), shared by
//! every worker and by the health checker, so that its session store lets a connection
//! resume a session that another worker's connection began.
//!
//! The roots are the system's (`tlsclient::roots` says how they are read and why);
//! `ca = FILE` replaces them. The crypto provider is *ring*, as for the listeners
//! (crates/server/src/net/tls/mod.rs says why); TLS 1.3 and 1.2; ALPN `http/1.1`, or `h2` for
//! `protocol = "h2"`.
//!
//! The AES-128-GCM suites are offered first (rustls' default list puts AES-256-GCM
//! first), as browsers and Go's client do: their SHA-256 runs on the CPU's SHA
//! instructions where *ring* has them, where SHA-384 (SHA-512 blocks) has no such path in
//! *ring* on AMD CPUs. The handshake's hashing was the largest user-space cost of a new
//! connection to a TLS 1.2 origin (`sha512_block_data_order_nohw`, 3% of the worker's
//! samples with the pool churning; docs/benchmarks.md, "AES-128 first").
//!
//! A peer whose handshake ended at TLS 1.2 (with `verify` on, rustls checks the
//! downgrade sentinel of RFC 8446 section 4.1.3, so someone on the path cannot make a peer
//! that speaks TLS 1.3 end there) is then offered TLS 1.2 only, for `TLS12_LEARNED`, from
//! a second configuration sharing the session store: a ClientHello that offers TLS 1.3
//! carries an X25519 key share, made for each connection and thrown away by such a peer,
//! and a resumed TLS 1.2 handshake needs none. That key share was 8-9% of the worker's
//! samples (`perf record`) proxying to a TLS 1.2 origin with a pool that churns
//! (bench/upstream-protocols.sh's https part; docs/benchmarks.md, "Offering TLS 1.2 only
//! to a peer that stops there"). What is learned is the peer's own (its address and name,
//! [`Learned`]), not its name's: peers behind one name may differ. When `TLS12_LEARNED`
//! has passed, the next connection offers TLS 1.3 again (a peer upgraded in between is
//! found); a peer that refuses a TLS 1.2 offer meanwhile (it speaks only 1.3 now) is at
//! once offered 1.3 on a new connection (`stream::open`, when the failure may be such a
//! refusal: [`may_refuse_versions`]), and what was learned is dropped, as it is when such
//! a handshake does not complete at all (a peer that ignores the offer).

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use evloop::net::TcpStream;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{PrivateKeyDer, ServerName};
use rustls::{ClientConfig, HandshakeKind, ProtocolVersion, RootCertStore};
use tlsclient::{read_certs, Unverified};
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;

use crate::config::UpstreamConfig;
use crate::error::ConfigError;

/// One upstream's TLS: the client configuration with its session store, and the
/// handshakes counted by how they went (every worker's and the health checker's).
pub(crate) struct UpstreamTls {
    /// TLS 1.3 and 1.2.
    connector: TlsConnector,
    /// TLS 1.2 only, with `connector`'s session store, verifier and client certificate:
    /// for the peers that stop at TLS 1.2 ([`Learned`]).
    tls12: TlsConnector,
    /// Full handshakes, resumed ones, failed ones.
    handshakes: [AtomicU64; 3],
}

/// What one peer's handshakes found: when the last one that offered TLS 1.3 ended at
/// TLS 1.2 (milliseconds after the process's first look, plus one), or 0. Every
/// worker's connections and the health checker's share it; a reload starts it anew.
#[derive(Debug, Default)]
pub(crate) struct Learned(AtomicU64);

/// Drops what a peer's [`Learned`] holds when it goes, unless told not to.
struct Forget<'a>(Option<&'a Learned>);

impl Drop for Forget<'_> {
    fn drop(&mut self) {
        if let Some(learned) = self.0 {
            learned.0.store(0, Ordering::Relaxed);
        }
    }
}

/// Whether a failed handshake may be the peer refusing the TLS versions offered (its
/// alert, an incompatibility, or the connection dropped) rather than, say, a certificate
/// that did not verify: only then is a second connection offering TLS 1.3 worth it.
pub(crate) fn may_refuse_versions(e: &io::Error) -> bool {
    use rustls::AlertDescription as A;
    match e
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
    {
        Some(rustls::Error::AlertReceived(alert)) => matches!(
            alert,
            A::ProtocolVersion
                | A::HandshakeFailure
                | A::InsufficientSecurity
                | A::IllegalParameter
        ),
        Some(rustls::Error::PeerIncompatible(_)) => true,
        Some(_) => false,
        None => matches!(
            e.kind(),
            io::ErrorKind::UnexpectedEof
                | io::ErrorKind::ConnectionReset
                | io::ErrorKind::ConnectionAborted
                | io::ErrorKind::BrokenPipe
        ),
    }
}

/// Milliseconds since the first call in this process, plus one (never 0).
fn stamp() -> u64 {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    EPOCH.get_or_init(Instant::now).elapsed().as_millis() as u64 + 1
}

/// How long a peer found to stop at TLS 1.2 is offered TLS 1.2 only (see the module's
/// comment).
const TLS12_LEARNED: Duration = Duration::from_secs(600);

const FULL: usize = 0;
const RESUMED: usize = 1;
const FAILED: usize = 2;

/// The TLS server name of a peer whose address' host is `host`: `sni` when set.
pub(crate) fn server_name(sni: Option<&str>, host: &str) -> ServerName<'static> {
    let name = sni.unwrap_or(host).to_string();
    // validate() refused a name that is not one; this one then fails verification.
    ServerName::try_from(name).unwrap_or_else(|_| ServerName::try_from("invalid.").unwrap())
}

impl UpstreamTls {
    /// The upstream's TLS, reading the files it names; `None` when no peer speaks TLS.
    pub(crate) fn build(u: &UpstreamConfig) -> Result<Option<Arc<UpstreamTls>>, ConfigError> {
        let tls_peers = u.peer_list().iter().filter(|p| p.tls).count();
        if tls_peers == 0 {
            return Ok(None);
        }
        let bad = |msg: String| ConfigError::Invalid(format!("upstream `{}`: {msg}", u.name));
        let mut provider = rustls::crypto::ring::default_provider();
        provider.cipher_suites.sort_by_key(|suite| {
            use rustls::CipherSuite as C;
            !matches!(
                suite.suite(),
                C::TLS13_AES_128_GCM_SHA256
                    | C::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256
                    | C::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256
            )
        });
        let provider = Arc::new(provider);
        // One verifier and one client certificate for both configurations: rustls resumes
        // a session only with the verifier and certificate resolver that made it.
        let verifier: Arc<dyn rustls::client::danger::ServerCertVerifier> = if u.verify {
            let roots = Arc::new(roots(u).map_err(&bad)?);
            rustls::client::WebPkiServerVerifier::builder_with_provider(roots, provider.clone())
                .build()
                .map_err(|e| bad(format!("TLS: {e}")))?
        } else {
            tracing::warn!(upstream = %u.name,
                "verify = false: the peers' certificates are not verified; anyone on the path can pose as them");
            Arc::new(Unverified(provider.clone()))
        };
        // The builder up to the client certificate, for the versions given.
        let builder = |versions: &[&'static rustls::SupportedProtocolVersion]| {
            Ok::<_, ConfigError>(
                ClientConfig::builder_with_provider(provider.clone())
                    .with_protocol_versions(versions)
                    .map_err(|e| bad(format!("TLS: {e}")))?
                    .dangerous()
                    .with_custom_certificate_verifier(verifier.clone()),
            )
        };
        let both = builder(&[&rustls::version::TLS13, &rustls::version::TLS12])?;
        let mut both = match (&u.client_certificate, &u.client_key) {
            (Some(cert), Some(key)) => {
                let chain = read_certs(cert).map_err(&bad)?;
                let key = PrivateKeyDer::from_pem_file(key)
                    .map_err(|e| bad(format!("client_key {}: {e}", key.display())))?;
                both.with_client_auth_cert(chain, key)
                    .map_err(|e| bad(format!("client_certificate and client_key: {e}")))?
            }
            _ => both.with_no_client_auth(),
        };
        both.alpn_protocols = match u.protocol {
            crate::config::Protocol::H2 => vec![b"h2".to_vec()],
            _ => vec![b"http/1.1".to_vec()],
        };
        // Room for the 8 TLS 1.3 tickets rustls keeps per server name, for every peer's
        // name (rustls' default, 256, holds 32 names).
        let sessions = (tls_peers * 8).max(256);
        both.resumption = rustls::client::Resumption::in_memory_sessions(sessions);
        let mut tls12 = builder(&[&rustls::version::TLS12])?.with_no_client_auth();
        tls12.client_auth_cert_resolver = both.client_auth_cert_resolver.clone();
        tls12.alpn_protocols = both.alpn_protocols.clone();
        tls12.resumption = both.resumption.clone();
        Ok(Some(Arc::new(UpstreamTls {
            connector: TlsConnector::from(Arc::new(both)),
            tls12: TlsConnector::from(Arc::new(tls12)),
            handshakes: Default::default(),
        })))
    }

    /// Whether the next handshake with the peer that `learned` is of offers TLS 1.2 only.
    pub(crate) fn offers_12_only(&self, learned: &Learned) -> bool {
        let at = learned.0.load(Ordering::Relaxed);
        at != 0 && stamp().saturating_sub(at) < TLS12_LEARNED.as_millis() as u64
    }

    /// The TLS handshake on `tcp` for the server name `name`, offering TLS 1.2 only when
    /// `only_12` ([`UpstreamTls::offers_12_only`]), counted; `learned` is the peer's.
    pub(crate) async fn handshake(
        &self,
        name: ServerName<'static>,
        tcp: TcpStream,
        learned: &Learned,
        only_12: bool,
    ) -> io::Result<TlsStream<TcpStream>> {
        let connector = if only_12 {
            &self.tls12
        } else {
            &self.connector
        };
        // Offered TLS 1.2 only: unless this handshake completes, the next offers TLS 1.3
        // again (the peer may speak only 1.3 now, and refuse this offer, or ignore it
        // until the connect timeout drops this future).
        let mut forget = Forget(only_12.then_some(learned));
        let result = connector.connect(name, tcp).await;
        match (&result, only_12) {
            // What a handshake that offered TLS 1.3 found.
            (Ok(s), false) => {
                let stops = s.get_ref().1.protocol_version() == Some(ProtocolVersion::TLSv1_2);
                learned
                    .0
                    .store(if stops { stamp() } else { 0 }, Ordering::Relaxed);
            }
            (Ok(_), true) => forget.0 = None,
            (Err(_), _) => {}
        }
        let kind = match &result {
            Ok(s) if s.get_ref().1.handshake_kind() == Some(HandshakeKind::Resumed) => RESUMED,
            Ok(_) => FULL,
            Err(_) => FAILED,
        };
        self.handshakes[kind].fetch_add(1, Ordering::Relaxed);
        result
    }

    /// `tessera_upstream_tls_handshakes_total` of upstream `name`.
    pub(crate) fn metrics(&self, out: &mut handler::Metrics, name: &str) {
        for (i, result) in ["full", "resumed", "failed"].into_iter().enumerate() {
            out.counter(
                "tessera_upstream_tls_handshakes_total",
                "TLS handshakes with each upstream's peers (requests' and health checks'), \
                 by result: full, resumed (a session of an earlier connection), failed.",
                &[("upstream", name), ("result", result)],
                self.handshakes[i].load(Ordering::Relaxed),
            );
        }
    }
}

/// `ca`'s certificates, or the system's.
fn roots(u: &UpstreamConfig) -> Result<RootCertStore, String> {
    tlsclient::roots(
        u.ca.as_deref(),
        |e| tracing::warn!(upstream = %u.name, error = %e, "reading the system's CA certificates"),
    )
}
