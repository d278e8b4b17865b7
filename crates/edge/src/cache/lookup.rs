//! The cache's phase machine, written once for whole pages and fragments alike (as
//! Pingora drives every cached fetch through one path): the memory tier (fresh, stale
//! while revalidating, or a miss with its stale-if-error fallback), then the flight
//! (join another request's fetch of the key on any worker, or lead one), then the disk
//! tier and the Redis tier for the leader. What is left to the caller is its own origin fetch, which stores
//! the object and lands the flight.

use std::sync::Arc;

use evloop::time::Instant;
use http::header::HeaderValue;

use super::entry::Entry;
use super::flight::{wait_landing, FlightGuard, Join, Landing};
use super::memory::Cache;
use crate::clock::now_ms;

/// A request field by name, for the `Vary` of a stored object.
pub(crate) type Field<'a> = &'a (dyn Fn(&str) -> Option<HeaderValue> + Sync);

/// What the memory tier holds for a key (counted: hit or stale; a miss is counted once
/// the rest of the lookup is decided).
pub(crate) enum Memory {
    /// A fresh object: serve it.
    Fresh(Arc<Entry>),
    /// A stale object within its stale-while-revalidate window: serve it; when this
    /// request leads the key's flight, refresh it in the background with the guard.
    Stale(Arc<Entry>, Option<FlightGuard>),
    /// Nothing usable; the stale object that may be served if the origin fails, if any,
    /// and the expired object to revalidate with a conditional request, if it has
    /// validators (within its stale windows or its `keep`).
    Miss(Option<Arc<Entry>>, Option<Arc<Entry>>),
    /// Nothing, and the key's last response could not be stored (see `Cache::mark_pass`).
    Pass,
}

/// Where a memory miss stands once the flight and the Redis tier have been asked.
pub(crate) enum Flight {
    /// An object to serve, fresh from Redis.
    Hit(Arc<Entry>),
    /// An object to serve, from the fetch of another request this one waited on.
    Joined(Arc<Entry>),
    /// The fetch this request waited on failed: serve the stale-if-error object (counted).
    StaleOnError(Arc<Entry>),
    /// The fetch this request waited on failed and nothing stale may be served: the
    /// origin is not asked again per waiter.
    Failed,
    /// A stale Redis record within stale-while-revalidate: serve it and refresh the key
    /// in the background as the flight's leader.
    Refresh(Arc<Entry>, FlightGuard),
    /// Fetch from the origin: store and land `guard` (when leading) with the result, or
    /// on failure land it failed and serve `stale` if there is one. With `validate`, the
    /// fetch is a conditional request whose 304 refreshes that object.
    Fetch {
        guard: Option<FlightGuard>,
        stale: Option<Arc<Entry>>,
        validate: Option<Arc<Entry>>,
    },
}

/// The memory tier's answer for `key` in `cache`.
pub(crate) fn memory(cache: &Cache, key: &str, field: Field<'_>) -> Memory {
    let now = now_ms();
    let (found, passes) = cache.lookup_marked(key, field, now);
    match found {
        Some(e) if e.is_fresh(now) => {
            cache.count_hit();
            Memory::Fresh(e)
        }
        // Served stale; one background fetch refreshes it, started by the flight's
        // leader only (not a task per stale hit).
        Some(e) if e.may_revalidate_stale(now) => {
            cache.count_stale();
            let guard = cache.try_lead(key);
            Memory::Stale(e, guard)
        }
        // Counted once the rest of the lookup is decided (`fly`): a `miss`, or a
        // `pass` when the response may not be stored.
        None if passes => Memory::Pass,
        found => {
            let validate = found.clone().filter(|e| e.may_revalidate(now));
            Memory::Miss(found.filter(|e| e.may_serve_on_error(now)), validate)
        }
    }
}

/// After a memory miss: joins the key's flight or leads it, and as its leader asks
/// the disk tier, then Redis. A Redis record is a hit only while fresh; a stale one is served like a
/// stale memory object (refreshed), or kept as the stale-if-error fallback and to
/// revalidate. `stale` and `validate` are the memory tier's ([`Memory::Miss`]).
pub(crate) async fn fly(
    cache: &Cache,
    key: &str,
    field: Field<'_>,
    deadline: Instant,
    (mut stale, mut validate): (Option<Arc<Entry>>, Option<Arc<Entry>>),
) -> Flight {
    let guard = match cache.join(key) {
        Join::Lead(g) => g,
        Join::Wait(rx) => {
            cache.count_miss();
            return match wait_landing(rx, deadline).await {
                Landing::Stored(e) => match cache.landed_for(key, e, field) {
                    Some(e) => Flight::Joined(e),
                    // Another variant: fetch our own.
                    None => Flight::Fetch {
                        guard: None,
                        stale,
                        validate,
                    },
                },
                Landing::Failed => match stale {
                    Some(s) => {
                        cache.count_stale();
                        Flight::StaleOnError(s)
                    }
                    None => Flight::Failed,
                },
                // Not storable, or the leader went away: fetch our own.
                Landing::NotStored => Flight::Fetch {
                    guard: None,
                    stale,
                    validate,
                },
            };
        }
    };
    // This node's disk, then Redis: a stale disk object is served only when Redis has
    // nothing of use.
    let found = match cache.lookup_disk(key, field, now_ms()).await {
        Some(e) if e.is_fresh(now_ms()) => Some(e),
        on_disk => cache.lookup_shared(key, field, now_ms()).await.or(on_disk),
    };
    let now = now_ms();
    match found {
        Some(e) if e.is_fresh(now) => {
            guard.land(Landing::Stored(e.clone()));
            Flight::Hit(e)
        }
        Some(e) if e.may_revalidate_stale(now) => {
            cache.count_stale();
            Flight::Refresh(e, guard)
        }
        found => {
            if let Some(e) = found.clone().filter(|e| e.may_serve_on_error(now)) {
                stale = Some(e);
            }
            if let Some(e) = found.filter(|e| e.may_revalidate(now)) {
                validate = Some(e);
            }
            Flight::Fetch {
                guard: Some(guard),
                stale,
                validate,
            }
        }
    }
}
