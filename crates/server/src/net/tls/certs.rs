//! Certificates: read from PEM files, checked against their keys, and chosen per
//! handshake by SNI: `[acme]`'s answer when it decides, then `[tls] certificate_script`'s
//! when there is one and it chooses, then a `[[host]]`'s own certificate when the name is
//! one of its names (exact, then wildcard, as requests are routed), else the default
//! certificate.

use std::path::Path;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use rustls::crypto::KeyProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

use super::acme::AcmeCerts;
use super::der::not_after;
use super::scripted::Scripted;
use crate::config::tls::TlsConfig;
use crate::config::Config;

/// The ALPN protocol of a TLS-ALPN-01 validation (RFC 8737).
pub(crate) const ACME_TLS_ALPN: &[u8] = b"acme-tls/1";

/// Chooses a handshake's certificate by its server name.
#[derive(Debug)]
pub(crate) struct Resolver {
    hosts: handler::Hosts,
    /// Per site (0 is the top level, `[[host]]` `i` is `i + 1`): its own certificate.
    keys: Vec<Option<Arc<CertifiedKey>>>,
    /// For a name no host with a certificate claims, and for no SNI: `[tls]`, else the
    /// default host's.
    default: Option<Arc<CertifiedKey>>,
    /// `[acme]`'s certificates and challenge answers, when it is configured.
    acme: Option<Arc<AcmeCerts>>,
    /// With `[acme] on_demand`: which names may get a certificate on demand.
    on_demand: Option<OnDemandScope>,
    /// `[tls] certificate_script`, asked after `[acme]` and before the hosts.
    scripted: Option<Scripted>,
}

/// The names `[acme] on_demand` may order for: not a `[[host]]` name (those are
/// `[acme]`'s, or have their own certificate, or opted out), and of a site (a wildcard
/// host's, or the default one) with no certificate of its own, no `acme = false`, and
/// no wildcard certificate from `[acme]`.
#[derive(Debug)]
struct OnDemandScope {
    /// Every `[[host]]` name that is not a wildcard, lowercase.
    exact: std::collections::HashSet<Box<str>>,
    /// Per site: whether its names may get one (no `[host.tls] acme = false`).
    sites: Vec<bool>,
}

impl OnDemandScope {
    fn new(config: &Config) -> OnDemandScope {
        let exact = config.host.iter().flat_map(|h| &h.names);
        let exact = exact
            .filter(|n| !n.starts_with("*."))
            .map(|n| n.trim_end_matches('.').to_ascii_lowercase().into())
            .collect();
        // A wildcard host whose certificate `[acme]` gets (by DNS-01) covers its names.
        let acme_names = config.acme_names();
        let covered = |names: &[String]| {
            names
                .iter()
                .any(|n| n.starts_with("*.") && acme_names.contains(&n.to_ascii_lowercase()))
        };
        let hosts = config.host.iter();
        let sites = std::iter::once(true)
            .chain(hosts.map(|h| {
                h.tls.as_ref().is_none_or(|t| t.acme != Some(false)) && !covered(&h.names)
            }))
            .collect();
        OnDemandScope { exact, sites }
    }
}

impl Resolver {
    /// Reads every certificate the configuration names; the first failure is the error.
    pub fn load(config: &Config, acme: Option<Arc<AcmeCerts>>) -> Result<Resolver, String> {
        let provider = rustls::crypto::ring::default_provider();
        let keys = std::iter::once(Some(&config.tls))
            .chain(config.host.iter().map(|h| h.tls.as_ref()))
            .map(|tls| tls.map(|t| load(t, provider.key_provider)).transpose())
            .map(|r| r.map(Option::flatten))
            .collect::<Result<Vec<_>, _>>()?;
        let hosts = config.hosts();
        let default = keys[0]
            .clone()
            .or_else(|| keys[hosts.default_site()].clone());
        let on_demand = config
            .acme
            .as_ref()
            .filter(|a| a.on_demand)
            .map(|_| OnDemandScope::new(config));
        let scripted = config.tls.certificate_hook.clone().map(Scripted::new);
        Ok(Resolver {
            hosts,
            keys,
            default,
            acme,
            on_demand,
            scripted,
        })
    }

    /// Whether `name` (lowercase) is one `[acme] on_demand` may get a certificate for
    /// (when the ask endpoint allows it): one no configured certificate covers.
    pub(crate) fn on_demand(&self, name: &str) -> bool {
        let Some(scope) = &self.on_demand else {
            return false;
        };
        if scope.exact.contains(name) {
            return false;
        }
        let site = self
            .hosts
            .named(name.as_bytes())
            .unwrap_or(self.hosts.default_site());
        scope.sites[site] && self.keys[site].is_none()
    }

    /// The ACME answer for a handshake, when ACME decides it: `Some(None)` refuses it.
    /// A TLS-ALPN-01 validation (it offers `acme-tls/1`) gets its challenge
    /// certificate; a name `[acme]` manages gets its certificate, or, while it has
    /// none yet, an alert (the default certificate would only be refused by the
    /// client, for the wrong name); a name obtained on demand gets its certificate.
    fn acme(&self, hello: &ClientHello<'_>) -> Option<Option<Arc<CertifiedKey>>> {
        let acme = self.acme.as_ref()?;
        let sni = hello.server_name()?;
        let lower;
        let name = match sni.bytes().any(|b| b.is_ascii_uppercase()) {
            true => {
                lower = sni.to_ascii_lowercase();
                &lower[..]
            }
            false => sni,
        };
        let validation = hello
            .alpn()
            .is_some_and(|mut protocols| protocols.any(|p| p == ACME_TLS_ALPN));
        if validation {
            let found = acme.alpn_challenge(name);
            if found.is_none() {
                tracing::info!(
                    name,
                    "TLS-ALPN-01 validation for a name with no challenge out: refused"
                );
            }
            return Some(found);
        }
        let site = self.hosts.named(name.as_bytes());
        // The name's own certificate, else its wildcard's (a `*.` host's, by DNS-01).
        let wildcard;
        let managed = match acme.manages(name) {
            true => Some(name),
            false if acme.manages_wildcards() => {
                wildcard = name.find('.').map(|dot| format!("*{}", &name[dot..]));
                wildcard.as_deref().filter(|w| acme.manages(w))
            }
            false => None,
        };
        if let Some(managed) = managed.filter(|_| site.is_some_and(|s| self.keys[s].is_none())) {
            let found = acme.certificate(managed);
            if found.is_none() {
                tracing::warn!(
                    name,
                    "TLS handshake refused: the certificate from [acme] is not there yet"
                );
            }
            return Some(found);
        }
        // On demand: the certificate once there; until then (or when the ask endpoint
        // refused the name) what the name gets without `on_demand`.
        match self.on_demand(name) {
            true => acme.certificate(name).map(Some),
            false => None,
        }
    }
}

impl ResolvesServerCert for Resolver {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        super::stream::note_sni(hello.server_name());
        if let Some(answer) = self.acme(&hello) {
            return answer;
        }
        if let Some(scripted) = &self.scripted {
            let named = |name: &str| {
                let site = self.hosts.named(name.as_bytes());
                let own = site.and_then(|s| self.keys[s].clone());
                own.or_else(|| self.acme.as_ref()?.certificate(name))
            };
            if let Some(chosen) = scripted.choose(hello.server_name(), named) {
                return Some(chosen);
            }
        }
        hello
            .server_name()
            .and_then(|name| self.hosts.named(name.as_bytes()))
            .and_then(|site| self.keys[site].clone())
            .or_else(|| self.default.clone())
    }
}

/// One certificate chain and its key; `None` when the table names no files.
fn load(tls: &TlsConfig, keys: &dyn KeyProvider) -> Result<Option<Arc<CertifiedKey>>, String> {
    let (Some(cert_path), Some(key_path)) = (&tls.certificate, &tls.key) else {
        return Ok(None);
    };
    let chain = read_chain(cert_path)?;
    let key = PrivateKeyDer::from_pem_file(key_path).map_err(|e| {
        format!(
            "cannot read TLS key {}: {}",
            key_path.display(),
            pem_error(e)
        )
    })?;
    let key = keys.load_private_key(key).map_err(|e| {
        format!(
            "TLS key {}: {e} (supported: ECDSA P-256/P-384, Ed25519, RSA 2048 bits or more)",
            key_path.display()
        )
    })?;
    let certified = CertifiedKey::new(chain, key);
    certified.keys_match().map_err(|e| {
        format!(
            "TLS key {} does not match certificate {}: {e}",
            key_path.display(),
            cert_path.display()
        )
    })?;
    if let Some(not_after) = not_after(&certified.cert[0]) {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() as i64);
        if not_after < now {
            tracing::warn!(
                certificate = %cert_path.display(),
                "TLS certificate has expired; clients will refuse it"
            );
        }
    }
    Ok(Some(Arc::new(certified)))
}

fn read_chain(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let err = |e| format!("cannot read TLS certificate {}: {}", path.display(), e);
    let chain = CertificateDer::pem_file_iter(path)
        .map_err(|e| err(pem_error(e)))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| err(pem_error(e)))?;
    if chain.is_empty() {
        return Err(err("no PEM CERTIFICATE in it".into()));
    }
    Ok(chain)
}

fn pem_error(e: rustls::pki_types::pem::Error) -> String {
    match e {
        rustls::pki_types::pem::Error::Io(io) => io.to_string(),
        rustls::pki_types::pem::Error::NoItemsFound => "no PEM item of the expected kind".into(),
        other => format!("not valid PEM ({other:?})"),
    }
}
