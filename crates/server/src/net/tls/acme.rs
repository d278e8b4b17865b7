//! What the ACME client (the `acme` crate, wired by `cli`) hands the server: the
//! certificates it obtained, and the answers to the CA's challenges while an order is
//! being validated. Each is a map swapped whole behind an `ArcSwap` (the way a reload
//! swaps the whole TLS configuration): a handshake or a request reads it without a
//! lock, connections already open keep the certificate they were given, and nothing is
//! closed when one is replaced.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use arc_swap::ArcSwap;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::sign::CertifiedKey;

use super::der::not_after;

type Map<V> = ArcSwap<HashMap<Box<str>, V>>;

/// The names `[acme]` manages.
#[derive(Default)]
struct Names {
    list: Vec<Box<str>>,
    /// Whether one of them is a wildcard (`*.example.com`, by DNS-01).
    wildcards: bool,
}

impl Names {
    fn new(names: Vec<String>) -> Names {
        Names {
            wildcards: names.iter().any(|n| n.starts_with("*.")),
            list: names.into_iter().map(Box::from).collect(),
        }
    }
}

/// How the server asks the ACME client for a certificate on demand (`[acme]
/// on_demand`): given a name, it returns where the answer comes (`true` once a
/// certificate is installed, `false` when the ask endpoint or the rate limit refused
/// the name or the order failed), or `None` when the client's queue is full.
pub type Demand = Box<dyn Fn(&str) -> Option<tokio::sync::oneshot::Receiver<bool>> + Send + Sync>;

/// The ACME state every worker reads: certificates by name, TLS-ALPN-01 challenge
/// certificates by name, HTTP-01 key authorizations by token.
#[derive(Default)]
pub struct AcmeCerts {
    /// The names `[acme]` gets certificates for (lowercase); a handshake for one of
    /// them without a certificate yet is refused, not given the default certificate.
    /// Swapped whole when a reload changes them.
    names: ArcSwap<Names>,
    certs: Map<Arc<CertifiedKey>>,
    alpn: Map<Arc<CertifiedKey>>,
    tokens: Map<Box<str>>,
    /// Whether any HTTP-01 token is out: a request reads the map only then.
    tokens_out: AtomicBool,
    /// When each installed certificate expires, in Unix seconds, for `/metrics`.
    expiry: Map<i64>,
    /// When each name's certificate is to be renewed next, in Unix seconds, for
    /// `/metrics` and `/status`.
    renewal: Map<i64>,
    /// Orders ended, by result: `issued`, `failed`.
    orders: [AtomicU64; 2],
    /// With `[acme] on_demand`: the ACME client's door for names first seen in SNI.
    demand: std::sync::OnceLock<Demand>,
}

impl std::fmt::Debug for AcmeCerts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AcmeCerts")
            .field("names", &self.names.load().list)
            .finish_non_exhaustive()
    }
}

impl AcmeCerts {
    /// The state for `names`, with no certificate yet.
    pub fn new(names: Vec<String>) -> AcmeCerts {
        AcmeCerts {
            names: ArcSwap::from_pointee(Names::new(names)),
            ..AcmeCerts::default()
        }
    }

    /// Installs `name`'s certificate (PEM chain, leaf first) and key (PEM PKCS#8):
    /// every new handshake for `name` gets it from now on.
    pub fn set_certificate(&self, name: &str, chain: &str, key: &str) -> Result<(), String> {
        let chain = CertificateDer::pem_slice_iter(chain.as_bytes())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| format!("certificate for {name}: not valid PEM ({e:?})"))?;
        if chain.is_empty() {
            return Err(format!("certificate for {name}: no PEM CERTIFICATE in it"));
        }
        let key = PrivateKeyDer::from_pem_slice(key.as_bytes())
            .map_err(|e| format!("key for {name}: not valid PEM ({e:?})"))?;
        let certified = certified(chain, key)?;
        if let Some(at) = not_after(&certified.cert[0]) {
            insert(&self.expiry, name, at);
        }
        insert(&self.certs, name, Arc::new(certified));
        Ok(())
    }

    /// Installs (or with `None` removes) the TLS-ALPN-01 challenge certificate of
    /// `name` (RFC 8737): DER certificate and PKCS#8 key.
    pub fn set_alpn_challenge(
        &self,
        name: &str,
        cert: Option<(Vec<u8>, Vec<u8>)>,
    ) -> Result<(), String> {
        match cert {
            Some((cert, key)) => {
                let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key));
                // Not checked against its key: webpki refuses the critical
                // acmeIdentifier extension it does not know, and the client made both.
                let key = rustls::crypto::ring::default_provider()
                    .key_provider
                    .load_private_key(key)
                    .map_err(|e| format!("TLS-ALPN-01 key: {e}"))?;
                let certified = CertifiedKey::new(vec![CertificateDer::from(cert)], key);
                insert(&self.alpn, name, Arc::new(certified));
            }
            None => remove(&self.alpn, name),
        }
        Ok(())
    }

    /// Answers (or with `None` stops answering) `/.well-known/acme-challenge/TOKEN`
    /// with `key_authorization` (HTTP-01).
    pub fn set_http_challenge(&self, token: &str, key_authorization: Option<&str>) {
        match key_authorization {
            Some(answer) => insert(&self.tokens, token, Box::from(answer)),
            None => remove(&self.tokens, token),
        }
        self.tokens_out
            .store(!self.tokens.load().is_empty(), Ordering::Release);
    }

    /// With `[acme] on_demand`: how a handshake for a name without a certificate asks
    /// the ACME client for one (set once, before the listeners start).
    pub fn set_on_demand(&self, demand: Demand) {
        let _ = self.demand.set(demand);
    }

    /// Asks the ACME client for `name`'s certificate on demand (see [`Demand`]).
    pub(crate) fn demand(&self, name: &str) -> Option<tokio::sync::oneshot::Receiver<bool>> {
        (self.demand.get()?)(name)
    }

    /// Whether the ACME client takes names on demand.
    pub(crate) fn takes_demands(&self) -> bool {
        self.demand.get().is_some()
    }

    /// The ACME client planned `name`'s next renewal for `at` (Unix seconds).
    pub fn renewal_planned(&self, name: &str, at: i64) {
        insert(&self.renewal, name, at);
    }

    /// Counts an order that ended, with a certificate (`issued`) or not.
    pub fn order_done(&self, issued: bool) {
        self.orders[usize::from(!issued)].fetch_add(1, Ordering::Relaxed);
    }

    /// `tessera_tls_certificate_expiry_seconds`, `tessera_acme_renewal_time_seconds`
    /// and `tessera_acme_orders_total`.
    pub(crate) fn metrics(&self, out: &mut handler::Metrics) {
        let renewal = self.renewal.load();
        let mut planned: Vec<_> = renewal.iter().collect();
        planned.sort();
        for (name, at) in planned {
            out.gauge(
                "tessera_acme_renewal_time_seconds",
                "When [acme] plans to renew a name's certificate next (ARI's window, or two \
                 thirds of its lifetime), in seconds since the Unix epoch.",
                &[("name", name)],
                *at as f64,
            );
        }
        let expiry = self.expiry.load();
        let mut names: Vec<_> = expiry.iter().collect();
        names.sort();
        for (name, at) in names {
            out.gauge(
                "tessera_tls_certificate_expiry_seconds",
                "When the certificate [acme] got for a name expires, in seconds since the \
                 Unix epoch (its notAfter).",
                &[("name", name)],
                *at as f64,
            );
        }
        for (i, result) in ["issued", "failed"].into_iter().enumerate() {
            out.counter(
                "tessera_acme_orders_total",
                "ACME orders that ended, by result: issued (a certificate installed) or \
                 failed (tried again after a backoff).",
                &[("result", result)],
                self.orders[i].load(Ordering::Relaxed),
            );
        }
    }

    /// Whether `[acme]` gets `name`'s certificate (`name` lowercase).
    pub(crate) fn manages(&self, name: &str) -> bool {
        self.names.load().list.iter().any(|n| **n == *name)
    }

    /// The names `[acme]` gets certificates for from now on (a reload added or
    /// removed hosts): a handshake for a new one waits for its certificate as at start.
    pub fn set_names(&self, names: Vec<String>) {
        self.names.store(Arc::new(Names::new(names)));
    }

    /// Whether one of the names is a wildcard.
    pub(crate) fn manages_wildcards(&self) -> bool {
        self.names.load().wildcards
    }

    pub(crate) fn certificate(&self, name: &str) -> Option<Arc<CertifiedKey>> {
        self.certs.load().get(name).cloned()
    }

    pub(crate) fn alpn_challenge(&self, name: &str) -> Option<Arc<CertifiedKey>> {
        self.alpn.load().get(name).cloned()
    }

    /// The key authorization for an HTTP-01 `token`, when one is out.
    pub(crate) fn http_challenge(&self, token: &[u8]) -> Option<Box<str>> {
        if !self.tokens_out.load(Ordering::Acquire) {
            return None;
        }
        let token = std::str::from_utf8(token).ok()?;
        self.tokens.load().get(token).cloned()
    }
}

fn certified(
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
) -> Result<CertifiedKey, String> {
    let provider = rustls::crypto::ring::default_provider();
    let key = provider
        .key_provider
        .load_private_key(key)
        .map_err(|e| format!("key: {e}"))?;
    let certified = CertifiedKey::new(chain, key);
    certified
        .keys_match()
        .map_err(|e| format!("key does not match its certificate: {e}"))?;
    Ok(certified)
}

fn insert<V: Clone>(map: &Map<V>, name: &str, value: V) {
    map.rcu(|m| {
        let mut m = HashMap::clone(m);
        m.insert(Box::from(name), value.clone());
        m
    });
}

fn remove<V: Clone>(map: &Map<V>, name: &str) {
    map.rcu(|m| {
        let mut m = HashMap::clone(m);
        m.remove(name);
        m
    });
}
