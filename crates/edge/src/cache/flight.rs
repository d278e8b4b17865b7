//! Request coalescing: one request per key leads the fetch ([`Flights::join`]), the
//! others, on any worker, wait for what it lands.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::watch;

use super::entry::Entry;

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
    flights: Arc<Flights>,
    key: String,
    tx: watch::Sender<Option<Landing>>,
    /// Led after a memory miss ([`Flights::join`]), not a background refresh: its landing
    /// counts the lookup, a `miss` when the fetch was stored or failed, a `pass` when
    /// its response could not be stored.
    lookup: bool,
}

impl FlightGuard {
    pub(crate) fn land(self, landing: Landing) {
        self.tx.send_replace(Some(landing));
    }

    /// Gives the waiters, and the requests that join from now, `landing` while the
    /// leader goes on (a streaming fill: the object is read as it is written); the
    /// flight ends when the guard is dropped.
    pub(crate) fn land_early(&self, landing: Landing) {
        self.tx.send_replace(Some(landing));
    }
}

impl Drop for FlightGuard {
    fn drop(&mut self) {
        self.flights
            .table
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
            (true, false) => self.flights.count_miss(),
            (true, true) => crate::metrics::passed(),
        }
    }
}

/// Waits for a leader's landing until `deadline`; `NotStored` when it does not come.
pub(crate) async fn wait_landing(
    mut rx: watch::Receiver<Option<Landing>>,
    deadline: evloop::time::Instant,
) -> Landing {
    match evloop::time::timeout_at(deadline, rx.wait_for(Option::is_some)).await {
        Ok(Ok(v)) => v.clone().unwrap_or(Landing::NotStored),
        _ => Landing::NotStored,
    }
}

/// The fetches in flight in the process, by key: the receiver of each one's landing.
#[derive(Default)]
pub(crate) struct Flights {
    table: Mutex<HashMap<String, watch::Receiver<Option<Landing>>>>,
    /// Requests that found nothing fresh in memory: counted here, where a flight's
    /// landing decides most of them.
    misses: AtomicU64,
    /// Requests that waited for another request's fetch instead of fetching.
    coalesced: AtomicU64,
}

impl Flights {
    pub(crate) fn count_miss(&self) {
        self.misses.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn misses(&self) -> u64 {
        self.misses.load(Ordering::Relaxed)
    }

    pub(crate) fn coalesced(&self) -> u64 {
        self.coalesced.load(Ordering::Relaxed)
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

    /// [`Flights::join`]; `lookup` says whether the flight counts a lookup (and a waiter
    /// a coalesced one).
    fn join_as(self: &Arc<Self>, key: &str, lookup: bool) -> Join {
        let mut flights = self.table.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(rx) = flights.get(key) {
            if lookup {
                self.coalesced.fetch_add(1, Ordering::Relaxed);
            }
            return Join::Wait(rx.clone());
        }
        let (tx, rx) = watch::channel(None);
        flights.insert(key.to_string(), rx);
        Join::Lead(FlightGuard {
            flights: self.clone(),
            key: key.to_string(),
            tx,
            lookup,
        })
    }
}
