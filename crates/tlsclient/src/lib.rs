//! What tessera's TLS clients share: the proxy's connections to HTTPS origins
//! (`edge::upstream::tls`) and `tessera bench`'s to `https://` targets.
//!
//! - [`roots`]: the certificates a client trusts: a CA file's, or the system's, read with
//!   `rustls-native-certs` (the PEM bundle that `update-ca-certificates` keeps,
//!   `SSL_CERT_FILE`/`SSL_CERT_DIR` honoured) rather than `webpki-roots` (Mozilla's list
//!   compiled into the binary): a server behind a company CA that the operator added to
//!   the system store is then trusted as curl and nginx trust it, and a distribution's
//!   updates of its roots reach tessera without a rebuild.
//! - [`Unverified`]: the verifier of `verify = false` and `--insecure`.
//!
//! The crypto provider is *ring*, as for the listeners (crates/server/src/net/tls/mod.rs
//! says why).

use std::path::Path;
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, RootCertStore, SignatureScheme};

/// The roots to verify servers with: `ca`'s certificates, or the system's. Problems met
/// reading the system's store that did not stop it go to `warn`.
pub fn roots(ca: Option<&Path>, mut warn: impl FnMut(String)) -> Result<RootCertStore, String> {
    let mut roots = RootCertStore::empty();
    match ca {
        Some(ca) => {
            let (added, _) = roots.add_parsable_certificates(read_certs(ca)?);
            if added == 0 {
                return Err(format!("ca {}: no usable CA certificate", ca.display()));
            }
        }
        None => {
            let found = rustls_native_certs::load_native_certs();
            for e in &found.errors {
                warn(e.to_string());
            }
            let (added, _) = roots.add_parsable_certificates(found.certs);
            if added == 0 {
                return Err("no CA certificates found on the system: set ca".into());
            }
        }
    }
    Ok(roots)
}

/// The PEM certificates of a file, in order; an error when it holds none.
pub fn read_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    if certs.is_empty() {
        return Err(format!("{}: no PEM certificate in it", path.display()));
    }
    Ok(certs)
}

/// Takes any certificate, but still checks the handshake's signatures against it (so the
/// connection is encrypted to whoever holds its key).
#[derive(Debug)]
pub struct Unverified(pub Arc<CryptoProvider>);

impl ServerCertVerifier for Unverified {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        let algorithms = &self.0.signature_verification_algorithms;
        rustls::crypto::verify_tls12_signature(message, cert, dss, algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        let algorithms = &self.0.signature_verification_algorithms;
        rustls::crypto::verify_tls13_signature(message, cert, dss, algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
