//! TLS to the peers (`tls = true`, `https://` addresses): one rustls client configuration
//! per upstream, made at start (and at a reload that changes the upstream), shared by
//! every worker and by the health checker, so that its session store lets a connection
//! resume a session that another worker's connection began.
//!
//! The roots are the system's (`tlsclient::roots` says how they are read and why);
//! `ca = FILE` replaces them. The crypto provider is *ring*, as for the listeners
//! (crates/server/src/net/tls/mod.rs says why); TLS 1.3 and 1.2; ALPN `http/1.1`, or `h2` for
//! `protocol = "h2"`.

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use evloop::net::TcpStream;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{PrivateKeyDer, ServerName};
use rustls::{ClientConfig, HandshakeKind, RootCertStore};
use tlsclient::{read_certs, Unverified};
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;

use crate::config::UpstreamConfig;
use crate::error::ConfigError;

/// One upstream's TLS: the client configuration with its session store, and the
/// handshakes counted by how they went (every worker's and the health checker's).
pub(crate) struct UpstreamTls {
    connector: TlsConnector,
    /// Full handshakes, resumed ones, failed ones.
    handshakes: [AtomicU64; 3],
}

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
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = ClientConfig::builder_with_provider(provider.clone())
            .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
            .map_err(|e| bad(format!("TLS: {e}")))?;
        let builder = if u.verify {
            builder.with_root_certificates(roots(u).map_err(bad)?)
        } else {
            tracing::warn!(upstream = %u.name,
                "verify = false: the peers' certificates are not verified; anyone on the path can pose as them");
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(Unverified(provider)))
        };
        let mut config = match (&u.client_certificate, &u.client_key) {
            (Some(cert), Some(key)) => {
                let chain = read_certs(cert).map_err(&bad)?;
                let key = PrivateKeyDer::from_pem_file(key)
                    .map_err(|e| bad(format!("client_key {}: {e}", key.display())))?;
                builder
                    .with_client_auth_cert(chain, key)
                    .map_err(|e| bad(format!("client_certificate and client_key: {e}")))?
            }
            _ => builder.with_no_client_auth(),
        };
        config.alpn_protocols = match u.protocol {
            crate::config::Protocol::H2 => vec![b"h2".to_vec()],
            _ => vec![b"http/1.1".to_vec()],
        };
        // Room for the 8 TLS 1.3 tickets rustls keeps per server name, for every peer's
        // name (rustls' default, 256, holds 32 names).
        let sessions = (tls_peers * 8).max(256);
        config.resumption = rustls::client::Resumption::in_memory_sessions(sessions);
        Ok(Some(Arc::new(UpstreamTls {
            connector: TlsConnector::from(Arc::new(config)),
            handshakes: Default::default(),
        })))
    }

    /// The TLS handshake on `tcp` for the server name `name`, counted.
    pub(crate) async fn handshake(
        &self,
        name: ServerName<'static>,
        tcp: TcpStream,
    ) -> io::Result<TlsStream<TcpStream>> {
        let result = self.connector.connect(name, tcp).await;
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
