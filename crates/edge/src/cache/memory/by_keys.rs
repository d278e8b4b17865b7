//! Purges by surrogate key, and soft purges (docs/cache.md, "Surrogate keys" and "Soft
//! purge"): every object of the memory tier whose keys include one of those purged is
//! removed, or marked stale (a soft purge: served within its stale-while-revalidate
//! window while one request refreshes it). The disk tier's index is scanned the same way,
//! and its objects removed (soft or not). The Redis tier is not scanned: its records
//! carry their keys, and a record made before a purge of one of them is refused.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use quick_cache::sync::EntryAction;

use super::{Cache, Purged, Slot, PLACEHOLDER_WAIT};
use crate::cache::Entry;
use crate::clock::now_ms_exact;

impl Cache {
    /// Removes every object with one of the surrogate `keys`, or with `soft` marks it
    /// stale; how many objects memory held.
    pub(crate) fn purge_keys(&self, keys: &[&str], soft: bool) -> usize {
        self.generation.fetch_add(1, Ordering::AcqRel);
        let now = now_ms_exact();
        let tagged = |slot: &Slot| match slot {
            Slot::Object(e, _) => e.keys.iter().any(|k| keys.contains(&&**k)),
            _ => false,
        };
        let n = if soft {
            let found = Mutex::new(Vec::new());
            self.mem.retain(|key, slot| {
                if tagged(slot) {
                    found
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push(key.clone());
                }
                true
            });
            let found = found.into_inner().unwrap_or_else(|e| e.into_inner());
            found.iter().filter(|k| self.mark_stale(k, now)).count()
        } else {
            let n = AtomicUsize::new(0);
            self.mem.retain(|_, slot| {
                let gone = tagged(slot);
                if gone {
                    n.fetch_add(1, Ordering::Relaxed);
                }
                !gone
            });
            n.into_inner()
        };
        if !soft {
            crate::metrics::evicted(crate::metrics::Evicted::Purge, n as u64);
        }
        // The disk tier keeps no stale copies: a soft purge removes its objects too.
        let n = n.max(self.purge_keys_on_disk(keys));
        if self.shared.is_some() {
            let mut log = self.purges.lock().unwrap_or_else(|e| e.into_inner());
            for key in keys {
                log.record(Purged::Tag(key.to_string()), now);
            }
        }
        n
    }

    /// Marks the object of URL `key` (every variant) stale, and remembers the purge
    /// against Redis records; how many objects memory held.
    pub(crate) fn soft_purge(&self, key: &str) -> usize {
        self.generation.fetch_add(1, Ordering::AcqRel);
        let now = now_ms_exact();
        let marked = match self.mem.peek(key) {
            Some(Slot::Vary(..)) => {
                let prefix = format!("{key}\0");
                let found = Mutex::new(Vec::new());
                self.mem.retain(|k, _| {
                    if k.starts_with(&prefix) {
                        found
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .push(k.clone());
                    }
                    true
                });
                let found = found.into_inner().unwrap_or_else(|e| e.into_inner());
                found.iter().filter(|k| self.mark_stale(k, now)).count()
            }
            Some(Slot::Object(..)) => usize::from(self.mark_stale(key, now)),
            _ => 0,
        };
        let marked = marked.max(self.purge_on_disk(key));
        if self.shared.is_some() {
            self.purges
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .record(Purged::Key(key.to_string()), now);
        }
        marked
    }

    /// Replaces the object under `key` with a copy expired at `now`
    /// ([`Entry::expired_at`]), in place: its weight as counted stays. Whether there was
    /// an object.
    fn mark_stale(&self, key: &str, now: u64) -> bool {
        let mut marked = false;
        let _ = self.mem.entry(key, Some(PLACEHOLDER_WAIT), |_, slot| {
            if let Slot::Object(e, _) = slot {
                let stale: Entry = e.expired_at(now);
                let _ = stale.stored_as.set(key.to_string());
                *e = Arc::new(stale);
                marked = true;
            }
            EntryAction::Retain(())
        });
        marked
    }
}
