//! A hook that chooses a TLS handshake's certificate (`[tls] certificate_script`: Lua's
//! `certificate(sni)`): the interface is here, `server` calls it from its certificate
//! resolver, `script` implements it, and `cli` hands one to the other.

/// What a certificate hook chose.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChosenCertificate {
    /// The certificate the server has for this name (a `[[host]]` name, or a name
    /// `[acme]` holds a certificate for).
    Named(String),
    /// A certificate chain and its private key, both PEM: parsed by the server, once.
    Pem { chain: Vec<u8>, key: Vec<u8> },
}

/// Chooses a handshake's certificate before the server's own choice, on the thread that
/// runs the handshake. `sni` is the name the client asked for (`None` without SNI).
pub trait CertificateHook: Send + Sync + std::fmt::Debug {
    /// The hook's choice, or `None`: the server chooses as it would without it. A hook
    /// that fails or answers something else logs why and answers `None`.
    fn certificate(&self, sni: Option<&str>) -> Option<ChosenCertificate>;
}
