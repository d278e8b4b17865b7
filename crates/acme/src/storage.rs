//! Where the account, certificates and keys live, and the lock per name that lets
//! several tessera processes (or nodes) share them: `files` (in `state_dir`, locked
//! with flock(2) on `NAME.lock`) or `redis` (the `[cache.redis]` server, keys encrypted,
//! locked with `SET NX PX`). Whoever holds a name's lock orders its certificate; the
//! others wait, then find the certificate stored and serve it (Caddy's certmagic does
//! the same through its storage).

use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use crate::redis_store::RedisStore;
use crate::store::{self, Stored};

/// How often a process that waits for a name's lock tries again.
const LOCK_POLL: Duration = Duration::from_millis(500);

/// Where the state is kept.
pub(crate) enum Storage {
    /// The CA's folder in `state_dir`.
    Files(PathBuf),
    Redis(Box<RedisStore>),
}

/// A name's lock, held until [`Lock::release`] (or, for a file lock, until dropped).
pub(crate) enum Lock {
    File(#[allow(dead_code)] std::fs::File),
    Redis(crate::redis_store::Held),
}

impl Lock {
    pub(crate) async fn release(self) {
        match self {
            Lock::File(file) => drop(file),
            Lock::Redis(held) => held.release().await,
        }
    }
}

impl Storage {
    /// The stored account's credentials (JSON), when there are some.
    pub(crate) async fn account(&self) -> Result<Option<Vec<u8>>, String> {
        match self {
            Storage::Files(dir) => match std::fs::read(store::account_path(dir)) {
                Ok(json) => Ok(Some(json)),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
                Err(e) => Err(format!("{}: {e}", store::account_path(dir).display())),
            },
            Storage::Redis(redis) => redis.account().await,
        }
    }

    pub(crate) async fn save_account(&self, json: &[u8]) -> Result<(), String> {
        match self {
            Storage::Files(dir) => {
                let path = store::account_path(dir);
                store::write_private(&path, json).map_err(|e| format!("{}: {e}", path.display()))
            }
            Storage::Redis(redis) => redis.save_account(json).await,
        }
    }

    /// `name`'s stored certificate and key, when both are there and read.
    pub(crate) async fn load(&self, name: &str) -> Result<Option<Stored>, String> {
        match self {
            Storage::Files(dir) => Ok(store::load(dir, name)),
            Storage::Redis(redis) => redis.load(name).await,
        }
    }

    pub(crate) async fn save(&self, name: &str, stored: &Stored) -> Result<(), String> {
        match self {
            Storage::Files(dir) => {
                store::save(dir, name, stored).map_err(|e| format!("{}: {e}", dir.display()))
            }
            Storage::Redis(redis) => redis.save(name, stored).await,
        }
    }

    /// With `storage = "redis"`: tells every process sharing it to answer `kind`'s
    /// challenge for `key` (token or name) with `answer`, or to stop (`None`);
    /// returns once they did (see [`crate::challenges`]). Nothing to do in files.
    pub(crate) async fn share_challenge(
        &self,
        kind_key: (&str, &str),
        answer: Option<crate::challenges::Answer<'_>>,
    ) {
        if let Storage::Redis(redis) = self {
            crate::challenges::share(redis, kind_key, answer).await;
        }
    }

    /// Waits until this process holds `name`'s lock (`account` for the account's).
    pub(crate) async fn lock(&self, name: &str) -> Result<Lock, String> {
        let mut said = false;
        loop {
            let held = match self {
                Storage::Files(dir) => store::try_lock(dir, name)
                    .map(|file| file.map(Lock::File))
                    .map_err(|e| format!("{}: lock {name}: {e}", dir.display()))?,
                Storage::Redis(redis) => redis.try_lock(name).await?.map(Lock::Redis),
            };
            if let Some(lock) = held {
                return Ok(lock);
            }
            if !said {
                tracing::info!(
                    name,
                    "another tessera holds this name's ACME lock; waiting for it"
                );
                said = true;
            }
            tokio::time::sleep(LOCK_POLL.mul_f64(0.5 + fastrand::f64())).await;
        }
    }
}

/// Whether `stored` (found after taking the lock) is one to serve rather than order a
/// new one: valid, not due for renewal, and newer than `current`.
pub(crate) fn fresher(stored: &Stored, current: Option<&Stored>) -> bool {
    let now = SystemTime::now();
    stored.not_after > now
        && stored.renew_at > now
        && current.is_none_or(|c| stored.not_after > c.not_after)
}
