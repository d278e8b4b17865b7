//! `acme` is tessera's ACME client (RFC 8555): it keeps one account with a CA, orders a
//! certificate for each name `[acme]` manages, answers the CA's challenges through the
//! server (HTTP-01 on the cleartext listeners, TLS-ALPN-01 on the TLS ones), keeps the
//! account, certificates and keys in its storage (`state_dir`, or Redis, locked per
//! name so that processes sharing it order once), renews each certificate in the
//! window the CA suggests (ARI, RFC 9773), else at two thirds of its lifetime, and
//! orders on demand for names first seen in SNI that the `ask` endpoint allows.
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
//! How it fits: [`start`] loads what the storage holds (a name with a stored
//! certificate that is not due for renewal is handed to the server at once, so a
//! restart orders nothing), then runs the orders and renewals on a thread of its own
//! with a small tokio runtime, so the listeners never wait for the CA.

mod challenges;
mod http;
mod keep;
mod on_demand;
mod order;
mod redis_store;
mod renewal;
mod settings;
mod storage;
mod store;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::SystemTime;

use keep::{backoff, when};
pub use on_demand::{OnDemand, ORDERS, ORDERS_WINDOW, REFUSED_FOR};
use order::Context;
pub use redis_store::storage_key;
use redis_store::RedisStore;
pub use settings::{Challenge, Deploy, KeyType, RedisStorage, Settings};
use storage::Storage;
pub use store::Stored;

/// Why the client could not start.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// `state_dir` cannot be created or read.
    StateDir(PathBuf, std::io::Error),
    /// The client's thread or runtime cannot be started.
    Start(std::io::Error),
    /// `storage = "redis"` cannot be used as configured.
    Storage(String),
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::StateDir(path, e) => write!(f, "acme.state_dir {}: {e}", path.display()),
            Error::Start(e) => write!(f, "cannot start the ACME client: {e}"),
            Error::Storage(e) => write!(f, "acme.storage: {e}"),
        }
    }
}

impl std::error::Error for Error {}

/// What [`start`] says.
#[derive(Clone)]
#[non_exhaustive]
pub struct Started {
    /// The names that wait for a first certificate.
    pub waiting: Vec<String>,
    /// With `on_demand`: where the server asks for a name first seen.
    pub on_demand: Option<OnDemand>,
    /// Where a reload's new names go.
    pub names: Names,
}

/// The client's names, changed by a reload.
#[derive(Clone)]
pub struct Names(tokio::sync::mpsc::UnboundedSender<Vec<String>>);

impl Names {
    /// Keeps certificates for `names` from now on (lowercase): new ones are served from
    /// the storage or ordered, those no longer there are no longer renewed.
    pub fn set(&self, names: Vec<String>) {
        let _ = self.0.send(names);
    }
}

/// Serves what `state_dir` holds at once, then orders and renews in the background.
pub fn start(settings: Settings, deploy: Arc<dyn Deploy>) -> Result<Started, Error> {
    let storage = match &settings.redis {
        Some(redis) => {
            let store = RedisStore::new(&redis.url, &redis.prefix, &settings.directory, &redis.key);
            Storage::Redis(Box::new(store.map_err(Error::Storage)?))
        }
        None => Storage::Files(
            store::prepare(&settings.state_dir, &settings.directory)
                .map_err(|e| Error::StateDir(settings.state_dir.clone(), e))?,
        ),
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(Error::Start)?;
    let now = SystemTime::now();
    let mut plans = Vec::new();
    let mut waiting = Vec::new();
    for name in &settings.names {
        let stored = match runtime.block_on(storage.load(name)) {
            Ok(stored) => stored,
            Err(e) => {
                tracing::warn!(name, error = %e, "cannot read the stored ACME certificate");
                None
            }
        };
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
    let (names, updates) = tokio::sync::mpsc::unbounded_channel();
    let (on_demand, demands) = match settings.on_demand.is_some() {
        true => {
            let (door, demands) = on_demand::door();
            (Some(door), Some(demands))
        }
        false => (None, None),
    };
    std::thread::Builder::new()
        .name("acme".into())
        .spawn(move || runtime.block_on(run(settings, storage, deploy, plans, demands, updates)))
        .map_err(Error::Start)?;
    Ok(Started {
        waiting,
        on_demand,
        names: Names(names),
    })
}

async fn run(
    settings: Settings,
    storage: Storage,
    deploy: Arc<dyn Deploy>,
    plans: Vec<(String, Option<Stored>)>,
    demands: Option<tokio::sync::mpsc::Receiver<(String, tokio::sync::oneshot::Sender<bool>)>>,
    updates: tokio::sync::mpsc::UnboundedReceiver<Vec<String>>,
) {
    // The other processes' challenge answers are heard from the start: they may be
    // ordering while this one waits for the account.
    let storage = Arc::new(storage);
    if let Storage::Redis(_) = &*storage {
        let (storage, deploy) = (storage.clone(), deploy.clone());
        tokio::spawn(async move {
            if let Storage::Redis(redis) = &*storage {
                challenges::follow(redis, deploy).await;
            }
        });
    }
    let mut failures = 0;
    let account = loop {
        match order::account(&settings, &storage).await {
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
        storage,
        deploy,
        account,
    });
    let ask = context.settings.on_demand.clone();
    let kept = plans.iter().map(|(name, _)| name.clone()).collect();
    tokio::spawn(keep::tend(context.clone(), plans, updates));
    match (ask, demands) {
        (Some(ask), Some(demands)) => on_demand::serve(context, ask, demands, kept).await,
        // The names' tasks run for as long as the process.
        _ => std::future::pending().await,
    }
}
