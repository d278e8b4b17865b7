//! Counts of things in flight per key (nginx's `limit_conn`): a route's requests per key
//! (`limit_conn = { key, max }`), a client's connections (`limit_conn_per_client`).
//!
//! A table of fixed size shared by every worker: 8-byte slots in groups of eight (one
//! cache line), each one 64-bit word holding a 40-bit tag of the key's hash and the
//! key's count (24 bits). Taking one is a compare-and-swap that adds 1 to the key's
//! slot (or claims a free one, count 0, for a key the group does not hold); giving it
//! back subtracts 1 from the same slot, which is never given to another key while its
//! count is above 0. A group whose eight slots all have something in flight refuses a
//! ninth key, as nginx's `limit_conn` refuses when its zone is full.

use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::key::KeyHasher;

/// Bytes of a table per key.
pub(crate) const SLOT_BYTES: u64 = 8;
const GROUP: usize = 8;
const COUNT: u64 = (1 << 24) - 1;

#[repr(C, align(64))]
struct Group([AtomicU64; GROUP]);

/// Why a key cannot be counted once more.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NoRoom {
    /// It has `max` in flight already.
    AtMost,
    /// Its group's eight slots all count other keys in flight.
    GroupFull,
}

/// The counts of the keys in flight.
pub(crate) struct Slots {
    groups: Box<[Group]>,
}

impl Slots {
    /// A table of `memory` bytes (at least one group).
    pub fn new(memory: u64) -> Slots {
        let groups = (memory / (SLOT_BYTES * GROUP as u64)).max(1) as usize;
        Slots {
            // SAFETY: an all-zero `Group` is valid: atomics of 0, free slots.
            groups: unsafe { super::table::zeroed::<Group>(groups) },
        }
    }

    /// Adds one to the count of the key of `hash` if it is below `max`: the slot to
    /// give it back to; else why not.
    pub fn take(&self, hash: u64, max: u32) -> Result<u32, NoRoom> {
        let index = (((hash & 0xffff_ffff) * self.groups.len() as u64) >> 32) as usize;
        let group = &self.groups[index];
        let tag = (hash >> 24).max(1);
        loop {
            let mut free = None;
            let mut held = None;
            for (i, slot) in group.0.iter().enumerate() {
                let word = slot.load(Ordering::Acquire);
                match (word >> 24 == tag, word & COUNT) {
                    (true, count) if count > 0 => {
                        held = Some((i, word, count));
                        break;
                    }
                    (_, 0) if free.is_none() => free = Some((i, word)),
                    _ => {}
                }
            }
            let (i, word, new) = match (held, free) {
                (Some((_, _, count)), _) if count >= max as u64 => return Err(NoRoom::AtMost),
                (Some((i, word, _)), _) => (i, word, word + 1),
                (None, Some((i, word))) => (i, word, tag << 24 | 1),
                (None, None) => return Err(NoRoom::GroupFull),
            };
            let slot = &group.0[i];
            if slot
                .compare_exchange(word, new, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
            {
                return Ok((index * GROUP + i) as u32);
            }
        }
    }

    /// Gives back one taken from `slot` (what [`Slots::take`] returned).
    pub fn give_back(&self, slot: u32) {
        let (group, i) = (slot as usize / GROUP, slot as usize % GROUP);
        if let Some(group) = self.groups.get(group) {
            group.0[i].fetch_sub(1, Ordering::AcqRel);
        }
    }
}

/// A route's or a host's `limit_conn`: its key, its most and its counts.
pub(crate) struct InFlight {
    /// Where it was written (`route[2]`, `host[0]`): a reload keeps the counts of the
    /// same place with the same settings.
    pub at: String,
    config: rules::config::LimitConn,
    key: KeyHasher,
    slots: Slots,
}

impl InFlight {
    /// The `limit_conn` of `config`, written at `at`.
    pub fn new(config: &rules::config::LimitConn, at: &str) -> Result<InFlight, String> {
        let fault = |key: &str, e: String| format!("`{at}.limit_conn`: `{key}`: {e}");
        if !(1..=COUNT as u32).contains(&config.max) {
            return Err(fault("max", format!("{} is not 1 to {COUNT}", config.max)));
        }
        if !(400..=599).contains(&config.status) {
            return Err(fault("status", format!("{} is not 400-599", config.status)));
        }
        let memory = super::size(&config.memory).map_err(|e| fault("memory", e))?;
        if !(64..=1 << 40).contains(&memory) {
            return Err(fault(
                "memory",
                format!("`{}` is not 64 bytes to 1 TiB", config.memory),
            ));
        }
        Ok(InFlight {
            at: at.to_string(),
            config: config.clone(),
            key: KeyHasher::new(&config.key, fastrand::u64(..)).map_err(|e| fault("key", e))?,
            slots: Slots::new(memory),
        })
    }

    /// Whether `config` would make the same limit (its counts carry over a reload).
    pub fn same(&self, config: &rules::config::LimitConn) -> bool {
        self.config == *config
    }

    /// A place among its key's requests in flight, held until dropped; `Ok(None)` when
    /// the key is empty; `Err(status)` when there is none.
    pub fn take(self: &Arc<Self>, ctx: &rules::Ctx<'_>) -> Result<Option<Held>, u16> {
        let Some(hash) = self.key.hash(ctx) else {
            return Ok(None);
        };
        // A full group refuses, as nginx's `limit_conn` refuses when its zone is full.
        match self.slots.take(hash, self.config.max) {
            Ok(slot) => Ok(Some(Held {
                of: self.clone(),
                slot,
            })),
            Err(_) => Err(self.config.status),
        }
    }
}

/// A request in flight, counted in its `limit_conn` until it is dropped (with the
/// exchange that answers it, or at once for a response ready at once).
pub(crate) struct Held {
    of: Arc<InFlight>,
    slot: u32,
}

impl Drop for Held {
    fn drop(&mut self) {
        self.of.slots.give_back(self.slot);
    }
}

/// The connections each client has open (`limit_conn_per_client`), shared by the
/// workers: a table with eight slots per connection slot, so that a group of eight is
/// all taken only by chance (about one in a million when every connection is another
/// client's); a connection that finds its group so is let in uncounted.
pub(crate) struct PerClient {
    slots: Slots,
    hasher: foldhash::quality::FixedState,
}

impl PerClient {
    pub fn new(max_connections: usize) -> PerClient {
        PerClient {
            slots: Slots::new(max_connections.max(1) as u64 * 8 * SLOT_BYTES),
            hasher: foldhash::quality::FixedState::with_seed(fastrand::u64(..)),
        }
    }

    /// Counts a connection of `client` if it has fewer than `max` open: the slot to give
    /// back when it closes (`None`: its group was full, not counted); `Err` when it has
    /// `max` open.
    pub fn take(&self, client: IpAddr, max: u32) -> Result<Option<u32>, ()> {
        use std::hash::{BuildHasher, Hasher};
        let mut hasher = self.hasher.build_hasher();
        match client {
            IpAddr::V4(a) => hasher.write(&a.octets()),
            IpAddr::V6(a) => hasher.write(&a.octets()),
        }
        match self.slots.take(hasher.finish(), max) {
            Ok(slot) => Ok(Some(slot)),
            Err(NoRoom::GroupFull) => Ok(None),
            Err(NoRoom::AtMost) => Err(()),
        }
    }

    pub fn give_back(&self, slot: u32) {
        self.slots.give_back(slot);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_takes_up_to_max_and_gets_room_back() {
        let counts = Slots::new(1 << 10);
        let (a, b) = (1u64 << 40, 2u64 << 40);
        let taken: Vec<_> = (0..3).map(|_| counts.take(a, 2)).collect();
        assert!(taken[0].is_ok() && taken[1].is_ok());
        assert_eq!(taken[2], Err(NoRoom::AtMost));
        assert!(counts.take(b, 2).is_ok(), "another key has its own count");
        counts.give_back(taken[0].unwrap());
        assert!(counts.take(a, 2).is_ok());
    }

    #[test]
    fn a_full_group_refuses_a_ninth_key_until_one_is_given_back() {
        let counts = Slots::new(64);
        let slots: Vec<u32> = (1..=8).map(|k| counts.take(k << 30, 1).unwrap()).collect();
        assert_eq!(counts.take(9 << 30, 1), Err(NoRoom::GroupFull));
        counts.give_back(slots[3]);
        assert!(counts.take(9 << 30, 1).is_ok());
        // Key 4's slot went to key 9: key 4 finds the group full again.
        assert_eq!(counts.take(4 << 30, 1), Err(NoRoom::GroupFull));
    }
}
