//! `[tls]` and `[host.tls]`: certificates, HSTS, the redirect to HTTPS.

use std::path::PathBuf;

use serde::Deserialize;

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
    /// (port `redirect_https_port`, left out when 443). Without a `tls_listen`, TLS is
    /// ended in front (a load balancer), so a request whose `X-Forwarded-Proto` says
    /// `https` came over TLS and is served, not redirected. Default false.
    pub redirect_https: bool,
    /// The port `redirect_https` sends clients to. Default: the port of the first
    /// `tls_listen`, or 443 without one (a load balancer's HTTPS port).
    pub redirect_https_port: Option<u16>,
    /// In `[host.tls]` only: whether `[acme]` gets this host's certificate. Default: yes
    /// for a host without a `certificate` (when there is an `[acme]` table); `false`
    /// leaves the host to the default certificate.
    pub acme: Option<bool>,
    /// In `[tls]` only: a Lua file whose module's `certificate(sni)` chooses each
    /// handshake's certificate, by name or as PEM (docs/tls.md). Default none.
    pub certificate_script: Option<PathBuf>,
    /// `certificate_script` loaded (by `cli`, which knows Lua; no TOML key).
    #[serde(skip)]
    pub certificate_hook: Option<std::sync::Arc<dyn handler::CertificateHook>>,
}
