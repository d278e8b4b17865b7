//! The encoder's hash index over its dynamic table: finds an entry by whole field or by
//! name without scanning the table.
//!
//! Open addressing with linear probing over `(tag, number)` slots, where `tag` is 16
//! bits of the key's hash (odd for a name, even and never 0 for a field; 0 marks an
//! empty slot) and `number` the entry's
//! insertion number truncated to 16 bits (see [`DynamicTable::index_of`]). Each entry has
//! a field key, and the newest entry with a given name also holds that name's key. Keys
//! are removed when their entry is evicted (backward-shift deletion, so no tombstones),
//! keeping the index exactly in sync with the table. At most two keys per entry and at
//! most `max_size / 32` entries, in at most four slots per possible entry: the load
//! stays at or below one half.
//!
//! The slots start as one cache line's worth and double (rehashing) when the keys would
//! fill more than half of them. A response's lookups then touch a line or two, not 32
//! scattered over a table sized for the worst case: with a hundred connections, each
//! connection's index is out of the CPU's caches by its next response, and in issue 20's
//! profile a quarter of the encoder's time was waiting on the load of a slot.
//!
//! [`DynamicTable::index_of`]: super::table::DynamicTable::index_of

use super::table::ENTRY_OVERHEAD;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Slot {
    tag: u16,
    number: u16,
}

const EMPTY: Slot = Slot { tag: 0, number: 0 };

/// The slots an index starts with: 64 bytes.
const FIRST_SLOTS: usize = 16;

#[derive(Debug)]
pub(crate) struct Index {
    slots: Vec<Slot>,
    mask: usize,
    /// Slots in use.
    keys: usize,
    /// The most slots it grows to: four per entry the largest table can hold.
    max_slots: usize,
}

impl Index {
    /// An index for a table whose maximum size will never exceed `limit`.
    pub(crate) fn new(limit: usize) -> Index {
        let max_slots = (4 * (limit / ENTRY_OVERHEAD)).next_power_of_two().max(8);
        let slots = FIRST_SLOTS.min(max_slots);
        Index {
            slots: vec![EMPTY; slots],
            mask: slots - 1,
            keys: 0,
            max_slots,
        }
    }

    /// Doubles the slots and places every key again.
    fn grow(&mut self) {
        let len = 2 * self.slots.len();
        let old = std::mem::replace(&mut self.slots, vec![EMPTY; len]);
        self.mask = len - 1;
        for slot in old.into_iter().filter(|s| s.tag != 0) {
            let mut i = self.home(slot.tag);
            while self.slots[i].tag != 0 {
                i = (i + 1) & self.mask;
            }
            self.slots[i] = slot;
        }
    }

    /// A key's first slot: the tag without its kind bit (the lowest), so that names and
    /// fields share all slots. 15 bits address the at most 2^13 slots of a 64 KiB table.
    fn home(&self, tag: u16) -> usize {
        usize::from(tag >> 1) & self.mask
    }

    /// The number of the first entry with key `tag` for which `is_match` holds.
    pub(crate) fn find(&self, tag: u16, mut is_match: impl FnMut(u16) -> bool) -> Option<u16> {
        let mut i = self.home(tag);
        loop {
            let slot = self.slots[i];
            if slot.tag == 0 {
                return None;
            }
            if slot.tag == tag && is_match(slot.number) {
                return Some(slot.number);
            }
            i = (i + 1) & self.mask;
        }
    }

    /// Adds key `tag` for entry `number`, or, if a slot with that tag already holds an
    /// entry for which `same` holds (an older entry with the same name), points it at
    /// `number` instead.
    pub(crate) fn insert(&mut self, tag: u16, number: u16, mut same: impl FnMut(u16) -> bool) {
        // Grown before the key goes in, as if it were new (if it replaces one, the index
        // grew one doubling early at most).
        if 2 * (self.keys + 1) > self.slots.len() && self.slots.len() < self.max_slots {
            self.grow();
        }
        let mut i = self.home(tag);
        loop {
            let slot = &mut self.slots[i];
            if slot.tag == 0 {
                self.keys += 1;
                *slot = Slot { tag, number };
                return;
            }
            if slot.tag == tag && same(slot.number) {
                *slot = Slot { tag, number };
                return;
            }
            i = (i + 1) & self.mask;
        }
    }

    /// Removes key `tag` of entry `number`, if present.
    pub(crate) fn remove(&mut self, tag: u16, number: u16) {
        let wanted = Slot { tag, number };
        let mut hole = self.home(tag);
        loop {
            let slot = self.slots[hole];
            if slot.tag == 0 {
                return;
            }
            if slot == wanted {
                break;
            }
            hole = (hole + 1) & self.mask;
        }
        // Backward-shift deletion: pull each later slot of the run back into the hole
        // unless its home lies cyclically within (hole, slot].
        let mut next = hole;
        loop {
            next = (next + 1) & self.mask;
            let slot = self.slots[next];
            if slot.tag == 0 {
                break;
            }
            let home = self.home(slot.tag);
            let stays = if hole <= next {
                hole < home && home <= next
            } else {
                hole < home || home <= next
            };
            if !stays {
                self.slots[hole] = slot;
                hole = next;
            }
        }
        self.slots[hole] = EMPTY;
        self.keys -= 1;
    }

    /// Heap bytes held.
    #[cfg(test)]
    pub(crate) fn heap_bytes(&self) -> usize {
        self.slots.capacity() * std::mem::size_of::<Slot>()
    }

    /// Every key in the index, as (tag, number).
    #[cfg(test)]
    pub(crate) fn keys(&self) -> Vec<(u16, u16)> {
        let mut keys: Vec<_> = self
            .slots
            .iter()
            .filter(|s| s.tag != 0)
            .map(|s| (s.tag, s.number))
            .collect();
        keys.sort_unstable();
        keys
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn removal_keeps_colliding_keys_findable() {
        // 8 slots; tags chosen to share homes and wrap around the end.
        let keys = [(7u16, 1u16), (15, 2), (23, 3), (6, 4), (14, 5), (1, 6)];
        for remove in 0..keys.len() {
            let mut index = Index::new(0);
            for &(tag, number) in &keys {
                index.insert(tag, number, |_| false);
            }
            index.remove(keys[remove].0, keys[remove].1);
            for (i, &(tag, number)) in keys.iter().enumerate() {
                let found = index.find(tag, |n| n == number);
                assert_eq!(
                    found.is_some(),
                    i != remove,
                    "removed {remove}, looked for {i}"
                );
            }
            assert_eq!(index.keys().len(), keys.len() - 1);
            assert_eq!(index.keys, keys.len() - 1);
        }
    }

    #[test]
    fn insert_replaces_the_same_key() {
        let mut index = Index::new(0);
        index.insert(5, 1, |_| false);
        index.insert(5, 2, |n| n == 1);
        assert_eq!(index.keys(), vec![(5, 2)]);
        index.remove(5, 1);
        assert_eq!(index.keys(), vec![(5, 2)]);
        index.remove(5, 2);
        assert_eq!(index.keys(), vec![]);
        assert_eq!(index.keys, 0);
    }

    #[test]
    fn it_starts_small_and_grows_keeping_every_key() {
        let mut index = Index::new(4096);
        assert_eq!(index.slots.len(), FIRST_SLOTS);
        let keys: Vec<(u16, u16)> = (1..=256u16)
            .map(|n| (n.wrapping_mul(40503) | 1, n))
            .collect();
        for (count, &(tag, number)) in keys.iter().enumerate() {
            index.insert(tag, number, |_| false);
            assert!(
                2 * (count + 1) <= index.slots.len(),
                "load at most one half"
            );
            for &(tag, number) in &keys[..=count] {
                assert_eq!(index.find(tag, |n| n == number), Some(number));
            }
        }
        assert_eq!(
            index.slots.len(),
            512,
            "four slots per possible entry at most"
        );
        for &(tag, number) in &keys {
            index.remove(tag, number);
        }
        assert_eq!((index.keys, index.keys().len()), (0, 0));
    }
}
