//! When to renew a certificate. With ACME Renewal Information (ARI, RFC 9773), when the
//! CA's directory offers it: at a random time in the window the CA suggests for this
//! certificate (spreading renewals out, and moving them earlier when the CA must revoke),
//! asking again when its Retry-After says; never later than a sixth of the lifetime
//! before expiry, whatever the window. Without ARI: at two thirds of the lifetime.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use instant_acme::{Account, CertificateIdentifier};
use rustls_pki_types::CertificateDer;

use crate::store::Stored;

/// The bounds of the CA's Retry-After for asking ARI again: often enough to see a
/// window moved earlier within a day, never more than once a minute.
const RECHECK_MIN: Duration = Duration::from_secs(60);
const RECHECK_MAX: Duration = Duration::from_secs(6 * 3600);

/// When to renew, and what to tell the CA.
pub(crate) struct Plan {
    pub at: SystemTime,
    /// Ask the CA again after this, when it may move the window.
    pub recheck: Option<Duration>,
    /// `ari` or `two_thirds`, for the log.
    pub by: &'static str,
    /// The certificate the new order replaces (ARI).
    pub replaces: Option<CertificateIdentifier<'static>>,
}

pub(crate) async fn plan(account: &Account, cert: &Stored) -> Plan {
    let two_thirds = |recheck| Plan {
        at: cert.renew_at,
        recheck,
        by: "two_thirds",
        replaces: None,
    };
    let Some(id) = identifier(cert) else {
        return two_thirds(None);
    };
    match account.renewal_info(&id).await {
        Ok((info, retry)) => {
            let window = &info.suggested_window;
            let (start, end) = (
                unix(window.start.unix_timestamp()),
                unix(window.end.unix_timestamp()),
            );
            let span = end.duration_since(start).unwrap_or_default();
            let lifetime = cert
                .not_after
                .duration_since(cert.not_before)
                .unwrap_or_default();
            let latest = cert.not_after - lifetime / 6;
            Plan {
                at: (start + span.mul_f64(fastrand::f64())).min(latest),
                recheck: Some(retry.clamp(RECHECK_MIN, RECHECK_MAX)),
                by: "ari",
                replaces: Some(id),
            }
        }
        Err(instant_acme::Error::Unsupported(_)) => two_thirds(None),
        Err(e) => {
            tracing::warn!(error = %e, "ACME renewal information not available; renewing at two thirds of the lifetime");
            two_thirds(Some(RECHECK_MIN * 10))
        }
    }
}

/// The certificate's ARI identifier (its authority key identifier and serial).
fn identifier(cert: &Stored) -> Option<CertificateIdentifier<'static>> {
    let der = CertificateDer::from(cert.leaf()?);
    CertificateIdentifier::try_from(&der)
        .ok()
        .map(CertificateIdentifier::into_owned)
}

fn unix(secs: i64) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(secs.max(0) as u64)
}
