//! Request coalescing: one request per key leads the fetch ([`Cache::join`]), the
//! others, on any worker, wait for what it lands.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use http::header::HeaderValue;
use tokio::sync::watch;

use super::{Cache, Entry};
use crate::clock::now_ms;

/// What a leader's fetch came to, for the requests waiting on it.
#[derive(Clone)]
pub(crate) enum Landing {
    /// Stored: serve this.
    Stored(Arc<Entry>),
    /// Not storable (or the leader went away): fetch your own.
    NotStored,
    /// The origin failed.
    Failed,
}

/// Joining the fetch of a key.
pub(crate) enum Join {
    /// Nobody is fetching it: fetch, then [`FlightGuard::land`].
    Lead(FlightGuard),
    /// Somebody is: wait for what it lands.
    Wait(watch::Receiver<Option<Landing>>),
}

/// The leader's duty: landing the fetch (also on drop, as `NotStored`, so waiters never
/// hang on a leader whose client went away).
pub(crate) struct FlightGuard {
    cache: Arc<Cache>,
    key: String,
    tx: watch::Sender<Option<Landing>>,
    /// Led after a memory miss ([`Cache::join`]), not a background refresh: its landing
    /// counts the lookup, a `miss` when the fetch was stored or failed, a `pass` when
    /// its response could not be stored.
    lookup: bool,
}

impl FlightGuard {
    pub(crate) fn land(self, landing: Landing) {
        self.tx.send_replace(Some(landing));
    }
}

impl Drop for FlightGuard {
    fn drop(&mut self) {
        self.cache
            .flights
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&self.key);
        let not_stored = self.tx.send_if_modified(|v| {
            if v.is_none() {
                *v = Some(Landing::NotStored);
                true
            } else {
                false
            }
        });
        match (self.lookup, not_stored) {
            (false, _) => {}
            (true, false) => self.cache.count_miss(),
            (true, true) => crate::metrics::passed(),
        }
    }
}

/// Waits for a leader's landing until `deadline`; `NotStored` when it does not come.
pub(crate) async fn wait_landing(
    mut rx: watch::Receiver<Option<Landing>>,
    deadline: tokio::time::Instant,
) -> Landing {
    match tokio::time::timeout_at(deadline, rx.wait_for(Option::is_some)).await {
        Ok(Ok(v)) => v.clone().unwrap_or(Landing::NotStored),
        _ => Landing::NotStored,
    }
}

impl Cache {
    /// What a waiter may serve of a leader's landed object: the object itself, unless it
    /// varies, in which case the variant for the waiter's own request fields (the
    /// leader's may be another language, another encoding...), if stored.
    pub(crate) fn landed_for(
        &self,
        key: &str,
        entry: Arc<Entry>,
        field: &dyn Fn(&str) -> Option<HeaderValue>,
    ) -> Option<Arc<Entry>> {
        if !entry.headers.contains_key(http::header::VARY) {
            return Some(entry);
        }
        let now = now_ms();
        self.lookup(key, field, now).filter(|e| e.is_fresh(now))
    }

    /// Makes the caller the leader for `key` when nobody fetches it; for a background
    /// refresh, which nobody needs to wait for (not counted as coalesced).
    pub(crate) fn try_lead(self: &Arc<Self>, key: &str) -> Option<FlightGuard> {
        match self.join_as(key, false) {
            Join::Lead(guard) => Some(guard),
            Join::Wait(_) => None,
        }
    }

    /// Makes the caller the leader for `key`, or a waiter on the leader.
    pub(crate) fn join(self: &Arc<Self>, key: &str) -> Join {
        self.join_as(key, true)
    }

    /// [`Cache::join`]; `lookup` says whether the flight counts a lookup (and a waiter
    /// a coalesced one).
    fn join_as(self: &Arc<Self>, key: &str, lookup: bool) -> Join {
        let mut flights = self.flights.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(rx) = flights.get(key) {
            if lookup {
                self.coalesced.fetch_add(1, Ordering::Relaxed);
            }
            return Join::Wait(rx.clone());
        }
        let (tx, rx) = watch::channel(None);
        flights.insert(key.to_string(), rx);
        Join::Lead(FlightGuard {
            cache: self.clone(),
            key: key.to_string(),
            tx,
            lookup,
        })
    }
}
