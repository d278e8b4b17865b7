//! One name's certificate kept for as long as the process runs: ordered when there is
//! none, renewed when its plan says, an order that failed tried again after a backoff.

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use instant_acme::CertificateIdentifier;

use crate::http::RETRY_AFTER;
use crate::order::{self, Context, Failure};
use crate::renewal;
use crate::storage::fresher;
use crate::store::Stored;

/// Keeps `name`'s certificate: ordered now when there is none (`current`), else when
/// [`renewal::plan`] says (ARI's window, or two thirds of the lifetime); a failed order
/// is tried again after an exponential backoff with jitter. `ended` hears of each
/// order's end, with a certificate or not (on demand: the handshakes waiting for the
/// first).
pub(crate) async fn keep(
    context: Arc<Context>,
    name: String,
    mut current: Option<Stored>,
    ended: Option<Box<dyn Fn(bool) + Send + Sync>>,
) {
    loop {
        let mut replaces = None;
        if let Some(cert) = &current {
            let plan = renewal::plan(&context.account, cert).await;
            tracing::info!(name = %name, at = %when(plan.at), by = plan.by, "ACME renewal planned");
            context.deploy.renewal_planned(&name, plan.at);
            if let Ok(wait) = plan.at.duration_since(SystemTime::now()) {
                match plan.recheck {
                    // The CA may move the window meanwhile: ask again then.
                    Some(recheck) if recheck < wait => {
                        tokio::time::sleep(recheck).await;
                        continue;
                    }
                    _ => tokio::time::sleep(wait).await,
                }
            }
            replaces = plan.replaces;
        }
        let mut failures = 0usize;
        let mut nonces_refused = 0;
        current = Some(loop {
            // `replaces` on the first try only: a CA that refuses it (the certificate
            // was replaced already) still issues without it.
            let tried = attempt(
                &context,
                &name,
                current.as_ref(),
                (replaces.take(), failures),
            );
            // A refused request's Retry-After (a rate limit's 429) comes back here.
            let refused_until = Arc::new(Mutex::new(None));
            let tried = RETRY_AFTER.scope(refused_until.clone(), tried).await;
            let tried = tried.map_err(|mut e| {
                let refused = refused_until
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .take();
                let wait = refused.and_then(|at| at.duration_since(SystemTime::now()).ok());
                e.retry_after = e.retry_after.max(wait);
                e
            });
            match tried {
                Ok((stored, ordered)) => {
                    if let Some(ended) = &ended {
                        ended(true);
                    }
                    let expires = when(stored.not_after);
                    match ordered {
                        true => {
                            context.deploy.order_done(&name, true);
                            tracing::info!(name = %name, expires = %expires, "ACME certificate installed");
                        }
                        false => {
                            tracing::info!(name = %name, expires = %expires, "ACME certificate installed, as another tessera stored it")
                        }
                    }
                    break stored;
                }
                Err(e) => {
                    context.deploy.order_done(&name, false);
                    if let Some(ended) = &ended {
                        ended(false);
                    }
                    // A refused nonce (RFC 8555 section 6.5: the client should try
                    // again) is no reason to wait, nor a failure that makes the next
                    // wait longer, up to NONCE_RETRIES times in a row.
                    let bad_nonce = e.message.contains(BAD_NONCE);
                    nonces_refused = if bad_nonce { nonces_refused + 1 } else { 0 };
                    let quick = bad_nonce && nonces_refused <= NONCE_RETRIES;
                    if !quick {
                        failures += 1;
                    }
                    let delay = match quick {
                        true => Duration::from_millis(100),
                        false => backoff(u32::try_from(failures).unwrap_or(u32::MAX))
                            .max(e.retry_after.unwrap_or_default()),
                    };
                    tracing::warn!(name = %name, error = %e, retry_in = ?delay, "ACME order failed");
                    tokio::time::sleep(delay).await;
                }
            }
        });
    }
}

/// `name`'s stored certificate, installed, when there is one still valid (a name
/// added by a reload, or allowed on demand, that an earlier run or another process
/// got).
pub(crate) async fn stored(context: &Context, name: &str) -> Option<Stored> {
    let stored = match context.storage.load(name).await {
        Ok(stored) => stored.filter(|s| s.not_after > SystemTime::now())?,
        Err(e) => {
            tracing::warn!(name, error = %e, "cannot read the stored ACME certificate");
            return None;
        }
    };
    match context.deploy.certificate(name, &stored.chain, &stored.key) {
        Ok(()) => {
            tracing::info!(name, expires = %when(stored.not_after), "serving the stored ACME certificate");
            Some(stored)
        }
        Err(e) => {
            tracing::warn!(name, error = %e, "stored ACME certificate not usable; ordering a new one");
            None
        }
    }
}

/// Keeps a certificate for each of the names of the start (`plans`), then for those
/// each reload gives (`updates`): a name no longer there is let go (its task ended, its
/// certificate no longer renewed), a new one served from the storage or ordered.
pub(crate) async fn tend(
    context: Arc<Context>,
    plans: Vec<(String, Option<Stored>)>,
    mut updates: tokio::sync::mpsc::UnboundedReceiver<Vec<String>>,
) {
    let mut tasks = std::collections::HashMap::new();
    for (name, current) in plans {
        let task = tokio::spawn(keep(context.clone(), name.clone(), current, None));
        tasks.insert(name, task.abort_handle());
    }
    while let Some(names) = updates.recv().await {
        tasks.retain(|name, task: &mut tokio::task::AbortHandle| {
            let kept = names.contains(name);
            if !kept {
                tracing::info!(name = %name, "no longer a name of [acme]: its certificate is not renewed");
                task.abort();
            }
            kept
        });
        for name in names {
            if tasks.contains_key(&name) {
                continue;
            }
            tracing::info!(name = %name, "a new name of [acme], from the reload");
            let current = stored(&context, &name).await;
            let task = tokio::spawn(keep(context.clone(), name.clone(), current, None));
            tasks.insert(name, task.abort_handle());
        }
    }
}

/// The CA's problem type for a refused nonce.
const BAD_NONCE: &str = "urn:ietf:params:acme:error:badNonce";
/// Orders ended by a refused nonce, in a row, tried again at once before the backoff
/// applies. instant-acme already sends each request again twice with a fresh nonce,
/// so an order ends this way only when one request was refused three times (one in
/// eight with Pebble refusing half the nonces); an order makes 7 to 10 requests, so most
/// orders end this way there, and 3 quick tries in a row left a name waiting for the
/// backoff (10 s, then 20) in one CI run of the test
/// `with_half_the_nonces_rejected_every_name_ends_with_a_valid_certificate`.
const NONCE_RETRIES: u32 = 20;

/// One try at a new certificate for `name`, under its lock: the one another process
/// stored meanwhile when it is [`fresher`] than `current`, else a new order. `true`
/// with an order.
async fn attempt(
    context: &Context,
    name: &str,
    current: Option<&Stored>,
    order: (Option<CertificateIdentifier<'static>>, usize),
) -> Result<(Stored, bool), Failure> {
    let lock = context.storage.lock(name).await?;
    let found = match context.storage.load(name).await {
        Ok(stored) => stored.filter(|s| fresher(s, current)),
        Err(e) => {
            tracing::warn!(name, error = %e, "cannot read the stored ACME certificate");
            None
        }
    };
    let tried = match found {
        Some(stored) => context
            .deploy
            .certificate(name, &stored.chain, &stored.key)
            .map(|()| (stored, false))
            .map_err(Failure::from),
        None => order::obtain(context, name, order).await.map(|s| (s, true)),
    };
    lock.release().await;
    tried
}

/// A time for the log, in UTC (`Jan 27 09:41:07 2027 +00:00`).
pub(crate) fn when(t: SystemTime) -> String {
    let secs = t
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    x509_parser::time::ASN1Time::from_timestamp(secs)
        .map_or_else(|_| secs.to_string(), |t| t.to_string())
}

/// The wait after the `failures`th failure in a row: 2 s doubling up to an hour, with
/// full jitter on the upper half so that many names (or nodes) do not retry together.
pub(crate) fn backoff(failures: u32) -> Duration {
    let ceiling = Duration::from_secs(2u64 << failures.clamp(1, 12).saturating_sub(1))
        .min(Duration::from_secs(3600));
    ceiling / 2 + ceiling.mul_f64(fastrand::f64() / 2.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_with_jitter_and_stops_at_an_hour() {
        for failures in 1..20 {
            let ceiling = Duration::from_secs((2u64 << (failures.min(12) - 1)).min(3600));
            let delay = backoff(failures);
            assert!(
                delay >= ceiling / 2 && delay <= ceiling,
                "{failures}: {delay:?}"
            );
        }
    }
}
