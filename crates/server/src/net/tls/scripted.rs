//! `[tls] certificate_script`: a Lua hook that chooses a handshake's certificate before
//! the server does, by name (a certificate the server holds) or as PEM, which is parsed
//! once and kept (per configuration: a reload starts afresh).

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex};

use handler::{CertificateHook, ChosenCertificate};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::sign::CertifiedKey;

/// Most PEM certificates kept; past it the cache starts again empty (a script that makes
/// a new certificate per handshake must not grow the process without bound).
pub(crate) const MAX_CACHED: usize = 1024;

/// The hook and the certificates its PEM answers made.
#[derive(Debug)]
pub(crate) struct Scripted {
    hook: Arc<dyn CertificateHook>,
    cache: Mutex<HashMap<u64, Cached>>,
}

/// One PEM answer and what it parsed to (`None`: it did not; logged once).
#[derive(Debug)]
struct Cached {
    chain: Vec<u8>,
    key: Vec<u8>,
    loaded: Option<Arc<CertifiedKey>>,
}

impl Scripted {
    pub(crate) fn new(hook: Arc<dyn CertificateHook>) -> Scripted {
        Scripted {
            hook,
            cache: Mutex::new(HashMap::new()),
        }
    }

    /// The hook's certificate for a handshake that asked for `sni`: `named` finds the
    /// one the server holds for a name. `None`: the server chooses as usual (the hook
    /// answered nil, failed, or named a certificate that cannot be had; logged).
    pub(crate) fn choose(
        &self,
        sni: Option<&str>,
        named: impl Fn(&str) -> Option<Arc<CertifiedKey>>,
    ) -> Option<Arc<CertifiedKey>> {
        match self.hook.certificate(sni)? {
            ChosenCertificate::Named(name) => {
                let found = named(&name.to_ascii_lowercase());
                if found.is_none() {
                    tracing::warn!(sni, name = %name,
                        "certificate_script named no certificate the server holds; the usual choice is made");
                }
                found
            }
            ChosenCertificate::Pem { chain, key } => self.pem(sni, chain, key),
        }
    }

    /// The certificate of a PEM answer: from the cache, or parsed and kept.
    fn pem(&self, sni: Option<&str>, chain: Vec<u8>, key: Vec<u8>) -> Option<Arc<CertifiedKey>> {
        let mut hasher = std::hash::DefaultHasher::new();
        (&chain, &key).hash(&mut hasher);
        let digest = hasher.finish();
        let lock = || self.cache.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(cached) = lock().get(&digest) {
            if cached.chain == chain && cached.key == key {
                return cached.loaded.clone();
            }
        }
        // Parsed without the lock: other handshakes go on meanwhile.
        let loaded = match from_pem(&chain, &key) {
            Ok(certified) => Some(Arc::new(certified)),
            Err(e) => {
                tracing::warn!(sni, error = %e,
                    "certificate_script answered a certificate that cannot be used; the usual choice is made");
                None
            }
        };
        let mut cache = lock();
        if cache.len() >= MAX_CACHED {
            cache.clear();
        }
        let cached = Cached {
            chain,
            key,
            loaded: loaded.clone(),
        };
        cache.insert(digest, cached);
        loaded
    }
}

/// A certificate chain (leaf first) and its key, from PEM, checked to match.
fn from_pem(chain: &[u8], key: &[u8]) -> Result<CertifiedKey, String> {
    let chain = CertificateDer::pem_slice_iter(chain)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("the certificate chain is not PEM: {e:?}"))?;
    if chain.is_empty() {
        return Err("no PEM CERTIFICATE in the chain".into());
    }
    let key = PrivateKeyDer::from_pem_slice(key)
        .map_err(|e| format!("the key is not a PEM private key: {e:?}"))?;
    let provider = rustls::crypto::ring::default_provider();
    let key = provider
        .key_provider
        .load_private_key(key)
        .map_err(|e| format!("the key: {e}"))?;
    let certified = CertifiedKey::new(chain, key);
    certified
        .keys_match()
        .map_err(|e| format!("the key does not match the certificate: {e}"))?;
    Ok(certified)
}
