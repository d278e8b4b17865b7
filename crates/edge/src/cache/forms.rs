//! The compressed forms of cached objects in the cache's weight: an object is weighed
//! with its forms, and when a form is made for an object already in memory the object is
//! inserted again with its new weight, so that quick_cache evicts others to make room
//! and `max_size` bounds bodies and forms together (docs/compression.md).
//!
//! Forms never weigh an object past what its shard holds: quick_cache evicts at once an
//! object heavier than its shard's hot part, so a form that would take its object there
//! is served once and not kept ([`Cache::form_room`]); the object stays.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use quick_cache::sync::{EntryAction, EntryResult};

use super::{Cache, Entry, Slot};

/// Tries of one reweighing that meets another's reweighing of the same key (its
/// placeholder) for longer than [`PLACEHOLDER_WAIT`]: the other puts the object back
/// within microseconds, so this is a bound, not a wait expected to run out.
const REWEIGH_TRIES: usize = 4;
const PLACEHOLDER_WAIT: Duration = Duration::from_millis(5);

/// The part of each shard quick_cache keeps for its hot objects (its default, set
/// explicitly so that [`shard_hot_target`] follows it).
pub(super) const HOT_ALLOCATION: f64 = 0.97;

/// The most a key may weigh in a cache of `max_size` bytes in `shards` shards: the hot
/// part of one shard, as quick_cache sizes it (a shard's share rounded up, 97% of it
/// hot). quick_cache may make fewer shards than asked (then each is larger), so this is
/// never above the real limit.
pub(super) fn shard_hot_target(max_size: u64, shards: usize) -> u64 {
    let shards = shards.max(1) as u64;
    let shard = max_size.div_ceil(shards);
    ((shard as f64 * HOT_ALLOCATION) as u64).clamp(shard.min(1), shard)
}

impl Entry {
    /// Its weight in memory now: its own bytes and its forms'.
    fn weight_with_forms(&self) -> u64 {
        self.weight + self.forms.load(Ordering::Acquire)
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

    /// The bytes of forms `entry` may count in all (its own and its memoized
    /// assemblies'), so that with its own bytes and its key it stays within what its
    /// shard holds.
    pub(crate) fn form_room(&self, entry: &Entry) -> u64 {
        let key = entry.stored_as.get().map_or(0, |k| k.len() as u64);
        self.weight_limit.saturating_sub(entry.weight + key)
    }

    /// Weighs `entry` again after a compressed form was added to it (or to its memoized
    /// assembly), if memory still holds this very entry: it is taken out and put back
    /// with its new weight in one step of quick_cache's (a placeholder in between, so a
    /// newer object stored meanwhile, or a purge, wins), which evicts other objects
    /// until the shard is within its budget again.
    ///
    /// Two workers adding forms to one object at once: the weight is read under the
    /// shard's lock and again just before the object goes back, and read once more after
    /// it is back, so a form counted while the object was out is weighed by the one that
    /// took it out; one that meets the other's placeholder waits for it (bounded).
    pub(crate) fn reweigh(&self, entry: &Arc<Entry>) {
        let Some(key) = entry.stored_as.get() else {
            return;
        };
        for _ in 0..REWEIGH_TRIES {
            // Only an object memory holds: a key gone (or taken by another's placeholder,
            // which will weigh this form) gets no placeholder of ours, which would use up
            // its S3-FIFO ghost.
            match self.mem.peek(key.as_str()) {
                Some(Slot::Object(e, w)) if Arc::ptr_eq(&e, entry) => {
                    if w == entry.weight_with_forms() {
                        return;
                    }
                }
                _ => return,
            }
            let result =
                self.mem
                    .entry(key.as_str(), Some(PLACEHOLDER_WAIT), |_, slot| match slot {
                        Slot::Object(e, w)
                            if Arc::ptr_eq(e, entry) && *w != entry.weight_with_forms() =>
                        {
                            EntryAction::ReplaceWithGuard
                        }
                        _ => EntryAction::Retain(()),
                    });
            match result {
                EntryResult::Replaced(guard, old) => {
                    let weight = entry.weight_with_forms();
                    let back = guard.insert(Slot::Object(entry.clone(), weight)).is_ok();
                    drop(old);
                    if !back {
                        return;
                    }
                    // Put back as just used: it was (the form was made for a request).
                    let _ = self.mem.get(key.as_str());
                    if entry.weight_with_forms() == weight {
                        return;
                    }
                    // A form counted meanwhile, by a worker that found the key out.
                }
                // Another's placeholder for longer than the wait: again.
                EntryResult::Timeout => {}
                // Up to date, or no longer this entry; `Vacant`: gone while waiting
                // (dropping the guard leaves it gone).
                _ => return,
            }
        }
    }
}
