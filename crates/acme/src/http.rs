//! The HTTP client instant-acme reaches the CA through: a hyper client of tessera's,
//! for two things instant-acme's own does not do.
//!
//! - **A time limit per request** ([`REQUEST_TIMEOUT`]). Without one, a CA that accepts
//!   a request and never answers holds the order, and its name's storage lock, until
//!   the process ends: Pebble 2.10.3 did that, deadlocked by 100 orders at once
//!   (docs/benchmarks.md, issue 46).
//! - **`Retry-After` of a refused request** (a rate limit's 429, a 503): instant-acme
//!   turns such an answer into an error without it. It is kept in the order's
//!   [`RETRY_AFTER`] slot, and the order's next try waits at least that long.
//!
//! The `ask` endpoint's client (on demand) is built on the same connector.

use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use instant_acme::{BodyWrapper, BytesResponse, HttpClient};

/// The longest one request to the CA may take, connect to last header.
pub(crate) const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

tokio::task_local! {
    /// Where the `Retry-After` of the current order's last refused request goes.
    pub(crate) static RETRY_AFTER: Arc<Mutex<Option<SystemTime>>>;
}

/// An HTTPS (and HTTP) connector trusting `ca_root` alone when given, else the system's
/// roots (none when the system has none: each request then fails, saying why).
pub(crate) fn connector(ca_root: Option<&Path>) -> Result<HttpsConnector<HttpConnector>, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = hyper_rustls::HttpsConnectorBuilder::new();
    let builder = match ca_root {
        Some(path) => {
            let mut roots = rustls::RootCertStore::empty();
            let pem = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
            for cert in rustls_pemfile_certs(&pem) {
                roots
                    .add(cert)
                    .map_err(|e| format!("{}: {e}", path.display()))?;
            }
            if roots.is_empty() {
                return Err(format!("{}: no PEM certificate in it", path.display()));
            }
            builder.with_tls_config(client_config(provider, roots)?)
        }
        None => builder.try_with_platform_verifier().unwrap_or_else(|e| {
            tracing::warn!(error = %e, "ACME: no system roots for https:// endpoints");
            let config = client_config(provider, rustls::RootCertStore::empty())
                .expect("ring's protocol versions");
            hyper_rustls::HttpsConnectorBuilder::new().with_tls_config(config)
        }),
    };
    Ok(builder.https_or_http().enable_http1().build())
}

fn client_config(
    provider: Arc<rustls::crypto::CryptoProvider>,
    roots: rustls::RootCertStore,
) -> Result<rustls::ClientConfig, String> {
    Ok(rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth())
}

/// The certificates of a PEM file.
fn rustls_pemfile_certs(pem: &[u8]) -> Vec<rustls::pki_types::CertificateDer<'static>> {
    use rustls::pki_types::pem::PemObject;
    rustls::pki_types::CertificateDer::pem_slice_iter(pem)
        .filter_map(Result::ok)
        .collect()
}

/// instant-acme's client: hyper's, each request within [`REQUEST_TIMEOUT`], the
/// `Retry-After` of an error answer kept for the order.
pub(crate) struct Http(Client<HttpsConnector<HttpConnector>, BodyWrapper<Bytes>>);

impl Http {
    pub(crate) fn new(ca_root: Option<&Path>) -> Result<Http, String> {
        Ok(Http(
            Client::builder(TokioExecutor::new()).build(connector(ca_root)?),
        ))
    }
}

impl HttpClient for Http {
    fn request(
        &self,
        req: hyper::Request<BodyWrapper<Bytes>>,
    ) -> Pin<Box<dyn Future<Output = Result<BytesResponse, instant_acme::Error>> + Send>> {
        // Read here, while the order's task polls: the future below runs in it too, but
        // a task-local is read where it is set.
        let slot = RETRY_AFTER.try_with(Arc::clone).ok();
        let sent = HttpClient::request(&self.0, req);
        Box::pin(async move {
            let response = tokio::time::timeout(REQUEST_TIMEOUT, sent)
                .await
                .map_err(|_| instant_acme::Error::Str("the CA did not answer within 30 s"))??;
            let status = response.parts.status;
            if status.is_client_error() || status.is_server_error() {
                let at = response
                    .parts
                    .headers
                    .get(hyper::header::RETRY_AFTER)
                    .and_then(|v| v.to_str().ok())
                    .and_then(retry_after);
                if let (Some(slot), Some(at)) = (slot, at) {
                    *slot.lock().unwrap_or_else(|e| e.into_inner()) = Some(at);
                }
            }
            Ok(response)
        })
    }
}

/// A `Retry-After` value: seconds from now, or an HTTP date (RFC 9110 section 10.2.3).
fn retry_after(value: &str) -> Option<SystemTime> {
    let value = value.trim();
    match value.parse::<u64>() {
        Ok(seconds) => Some(SystemTime::now() + Duration::from_secs(seconds)),
        Err(_) => httpdate::parse_http_date(value).ok(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_takes_seconds_and_dates() {
        let soon = retry_after(" 120 ").unwrap();
        let wait = soon.duration_since(SystemTime::now()).unwrap();
        assert!(wait > Duration::from_secs(118) && wait <= Duration::from_secs(120));
        let date = retry_after("Sun, 06 Nov 1994 08:49:37 GMT").unwrap();
        assert_eq!(
            date.duration_since(SystemTime::UNIX_EPOCH).unwrap(),
            Duration::from_secs(784_111_777)
        );
        assert_eq!(retry_after("soon"), None);
    }
}
