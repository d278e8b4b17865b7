//! The compressed forms of cached objects in the cache's weight: an object is weighed
//! with its forms, and when a form is made for an object already in memory the object is
//! inserted again with its new weight, so that quick_cache evicts others to make room
//! and `max_size` bounds bodies and forms together (docs/compression.md).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use quick_cache::sync::{EntryAction, EntryResult};

use super::{Cache, Entry, Slot};

impl Entry {
    /// Its weight in memory now: its own bytes and its forms'.
    fn weight_with_forms(&self) -> u64 {
        self.weight + self.forms.load(Ordering::Relaxed)
    }
}

impl Cache {
    /// Puts `entry` in memory under `key`, weighed with the forms it has.
    pub(super) fn store(&self, key: String, entry: Arc<Entry>) {
        // An entry is stored under one key (a Redis copy is a new entry).
        let _ = entry.stored_as.set(key.clone());
        let weight = entry.weight_with_forms();
        self.mem.insert(key, Slot::Object(entry, weight));
    }

    /// Weighs `entry` again after a compressed form was added to it (or to its memoized
    /// assembly), if memory still holds this very entry: it is taken out and put back
    /// with its new weight in one step of quick_cache's (a placeholder in between, so a
    /// newer object stored meanwhile, or a purge, wins), which evicts other objects
    /// until the shard is within its budget again.
    pub(crate) fn reweigh(&self, entry: &Arc<Entry>) {
        let Some(key) = entry.stored_as.get() else {
            return;
        };
        let weight = entry.weight_with_forms();
        let result = self
            .mem
            .entry(key.as_str(), Some(Duration::ZERO), |_, slot| match slot {
                Slot::Object(e, w) if Arc::ptr_eq(e, entry) && *w != weight => {
                    EntryAction::ReplaceWithGuard
                }
                _ => EntryAction::Retain(()),
            });
        if let EntryResult::Replaced(guard, old) = result {
            if guard.insert(Slot::Object(entry.clone(), weight)).is_ok() {
                // Put back as just used: it was (the form was made for a request).
                let _ = self.mem.get(key.as_str());
            }
            drop(old);
        }
        // `Vacant`: the key had gone; dropping the guard leaves it gone.
    }
}
