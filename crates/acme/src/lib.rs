//! `acme` is tessera's ACME client (RFC 8555): it keeps one account with a CA, orders a
//! certificate for each name `[acme]` manages, answers the CA's challenges through the
//! server (HTTP-01 on the cleartext listeners, TLS-ALPN-01 on the TLS ones), keeps the
//! account, certificates and keys in `state_dir`, and renews each certificate in the
//! window the CA suggests (ARI, RFC 9773), else at two thirds of its lifetime.
//!
//! What it is not for: serving anything. The challenge answers and the certificates
//! reach the server through [`Deploy`], which `cli` implements over the server's
//! certificate store; this crate knows neither the server nor its configuration types.
//!
//! Why instant-acme and not rustls-acme: rustls-acme brings its own TLS acceptor and
//! certificate resolver (and a futures-io stack around them), built to own the
//! listener; tessera has its own handshake path, its own resolver (chosen by SNI, with
//! the certificate reload that drops no connection) and its own request path, where the
//! challenges must be answered before any route. instant-acme is the protocol alone:
//! accounts, orders, authorizations, challenges, finalization and ARI, async on tokio,
//! with the *ring* backend that the server's TLS uses already, and a custom root for a
//! private or test CA's directory (`ca_root`). It is kept by a rustls maintainer.
//!
//! How it fits: [`start`] loads what `state_dir` holds (a name with a stored
//! certificate that is not due for renewal is handed to the server at once, so a
//! restart orders nothing), then runs the orders and renewals on a thread of its own
//! with a small tokio runtime, so the listeners never wait for the CA.

mod order;
mod renewal;
mod settings;
mod store;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use order::Context;
pub use settings::{Challenge, Deploy, Settings};
pub use store::Stored;

/// Why the client could not start.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// `state_dir` cannot be created or read.
    StateDir(PathBuf, std::io::Error),
    /// The client's thread or runtime cannot be started.
    Start(std::io::Error),
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::StateDir(path, e) => write!(f, "acme.state_dir {}: {e}", path.display()),
            Error::Start(e) => write!(f, "cannot start the ACME client: {e}"),
        }
    }
}

impl std::error::Error for Error {}

/// Serves what `state_dir` holds at once, then orders and renews in the background.
/// Returns the names that wait for a first certificate.
pub fn start(settings: Settings, deploy: Arc<dyn Deploy>) -> Result<Vec<String>, Error> {
    let dir = store::prepare(&settings.state_dir, &settings.directory)
        .map_err(|e| Error::StateDir(settings.state_dir.clone(), e))?;
    let now = SystemTime::now();
    let mut plans = Vec::new();
    let mut waiting = Vec::new();
    for name in &settings.names {
        let stored = store::load(&dir, name);
        let served = stored.as_ref().filter(|s| s.not_after > now).is_some_and(|s| {
            match deploy.certificate(name, &s.chain, &s.key) {
                Ok(()) => true,
                Err(e) => {
                    tracing::warn!(name, error = %e, "stored ACME certificate not usable; ordering a new one");
                    false
                }
            }
        });
        let current = match (stored, served) {
            (Some(s), true) => {
                tracing::info!(name, expires = %when(s.not_after), "serving the stored ACME certificate");
                Some(s)
            }
            _ => {
                waiting.push(name.clone());
                None
            }
        };
        plans.push((name.clone(), current));
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(Error::Start)?;
    std::thread::Builder::new()
        .name("acme".into())
        .spawn(move || runtime.block_on(run(settings, dir, deploy, plans)))
        .map_err(Error::Start)?;
    Ok(waiting)
}

async fn run(
    settings: Settings,
    dir: PathBuf,
    deploy: Arc<dyn Deploy>,
    plans: Vec<(String, Option<Stored>)>,
) {
    let mut failures = 0;
    let account = loop {
        match order::account(&settings, &dir).await {
            Ok(account) => break account,
            Err(e) => {
                failures += 1;
                let delay = backoff(failures);
                tracing::warn!(directory = %settings.directory, error = %e, retry_in = ?delay, "ACME account not ready");
                tokio::time::sleep(delay).await;
            }
        }
    };
    let context = Arc::new(Context {
        settings,
        dir,
        deploy,
        account,
    });
    let mut tasks = tokio::task::JoinSet::new();
    for (name, current) in plans {
        tasks.spawn(keep(context.clone(), name, current));
    }
    while tasks.join_next().await.is_some() {}
}

/// Keeps `name`'s certificate: ordered now when there is none (`current`), else when
/// [`renewal::plan`] says (ARI's window, or two thirds of the lifetime); a failed order
/// is tried again after an exponential backoff with jitter.
async fn keep(context: Arc<Context>, name: String, mut current: Option<Stored>) {
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
        current = Some(loop {
            // `replaces` on the first try only: a CA that refuses it (the certificate
            // was replaced already) still issues without it.
            match order::obtain(&context, &name, (replaces.take(), failures)).await {
                Ok(stored) => {
                    context.deploy.order_done(&name, true);
                    tracing::info!(name = %name, expires = %when(stored.not_after), "ACME certificate installed");
                    break stored;
                }
                Err(e) => {
                    context.deploy.order_done(&name, false);
                    failures += 1;
                    let delay = backoff(u32::try_from(failures).unwrap_or(u32::MAX))
                        .max(e.retry_after.unwrap_or_default());
                    tracing::warn!(name = %name, error = %e, retry_in = ?delay, "ACME order failed");
                    tokio::time::sleep(delay).await;
                }
            }
        });
    }
}

/// A time for the log, in UTC (`Jan 27 09:41:07 2027 +00:00`).
fn when(t: SystemTime) -> String {
    let secs = t
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    x509_parser::time::ASN1Time::from_timestamp(secs)
        .map_or_else(|_| secs.to_string(), |t| t.to_string())
}

/// The wait after the `failures`th failure in a row: 2 s doubling up to an hour, with
/// full jitter on the upper half so that many names (or nodes) do not retry together.
fn backoff(failures: u32) -> Duration {
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
