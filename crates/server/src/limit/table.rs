//! The state of one `[[limit]]` zone: nginx's `limit_req` leaky bucket per key
//! (`ngx_http_limit_req_lookup` in ngx_http_limit_req_module.c), in a table of fixed size
//! that every worker reads and writes without a lock.
//!
//! The table is allocated once, when the zone is made: `memory` bytes of 16-byte slots in
//! groups of four (one cache line). A slot is one 128-bit atomic word: a 48-bit tag from
//! the key's 64-bit hash, when the key was last counted (milliseconds since the process
//! started, 40 bits: 34 years) and its excess (millirequests, 40 bits). A request reads
//! the four slots of its key's group and updates its own with one compare-and-swap; no
//! allocation, no lock. A key the group does not hold takes an empty slot, else one whose
//! excess has drained (its state is the one a new key starts with), else the one counted
//! longest ago: nginx too drops its least recently used states when its zone is full.
//!
//! Two keys are confused only when their hashes give the same group and the same 48-bit
//! tag: with the group's four slots, about one lookup in 2^46 when the zone is full.

use std::sync::atomic::{AtomicU64, Ordering};

use portable_atomic::AtomicU128;

/// Bytes of `memory` per key.
pub(crate) const SLOT_BYTES: u64 = 16;
/// Slots per group (one cache line).
const GROUP: usize = 4;
const FIELD: u128 = (1 << 40) - 1;

#[repr(C, align(64))]
struct Group([AtomicU128; GROUP]);

/// A zone's bucket, in nginx's units.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Bucket {
    /// Millirequests per second (nginx's `ctx->rate`: `10r/s` is 10000, `600r/m` 10000).
    pub rate: u64,
    /// Millirequests of excess allowed (`burst * 1000`).
    pub burst: u64,
    /// Millirequests of excess passed without delay (`delay * 1000`; `u64::MAX` for
    /// `nodelay`).
    pub delay: u64,
}

/// The key's state in one slot word.
fn pack(tag: u64, last: u64, excess: u64) -> u128 {
    (tag as u128) << 80 | (last as u128 & FIELD) << 40 | (excess as u128 & FIELD)
}

fn tag_of(word: u128) -> u64 {
    (word >> 80) as u64
}

fn last_of(word: u128) -> u64 {
    ((word >> 40) & FIELD) as u64
}

fn excess_of(word: u128) -> u64 {
    (word & FIELD) as u64
}

/// Milliseconds from `last` to `now` as nginx counts them: a clock that went back up to
/// a minute (another worker's clock, read a little later) counts 0, further back 1.
fn elapsed(now: u64, last: u64) -> u64 {
    let ms = now as i64 - last as i64;
    match ms {
        ms if ms < -60_000 => 1,
        ms if ms < 0 => 0,
        ms => ms as u64,
    }
}

/// The excess a request at `now` brings a key whose slot holds `word`: nginx's
/// `lr->excess - ctx->rate * ms / 1000 + 1000`, at least 0. And the elapsed time.
fn excess_now(word: u128, now: u64, rate: u64) -> (u64, u64) {
    let ms = elapsed(now, last_of(word));
    let drained = rate as i128 * ms as i128 / 1000;
    let excess = (excess_of(word) as i128 - drained + 1000).max(0);
    (excess.min(FIELD as i128) as u64, ms)
}

pub(crate) struct Table {
    groups: Box<[Group]>,
    /// Slots taken from empty (keys held; a slot reused for another key counts once).
    keys: AtomicU64,
}

impl Table {
    /// A table of `memory` bytes (at least one group), zeroed by the allocator: its
    /// pages become resident as keys reach them, never beyond `memory`.
    pub fn new(memory: u64) -> Table {
        let groups = (memory / (SLOT_BYTES * GROUP as u64)).max(1) as usize;
        // SAFETY: an all-zero `Group` is valid: atomics of 0, empty slots.
        let groups = unsafe { zeroed::<Group>(groups) };
        Table {
            groups,
            keys: AtomicU64::new(0),
        }
    }

    /// How many keys it holds at most.
    #[cfg(test)]
    pub fn capacity(&self) -> u64 {
        (self.groups.len() * GROUP) as u64
    }

    /// Keys held now.
    pub fn keys(&self) -> u64 {
        self.keys.load(Ordering::Relaxed)
    }

    /// nginx's lookup for the key of `hash` at `now` (milliseconds): `Ok(excess)` when
    /// the request fits its bucket's burst, with the excess it leaves (0 for a key not
    /// held: its state starts there), written when `commit`; `Err(excess)` when it does
    /// not, nothing written (a refused request does not count, as in nginx).
    pub fn take(&self, hash: u64, now: u64, bucket: &Bucket, commit: bool) -> Result<u64, u64> {
        let group =
            &self.groups[(((hash & 0xffff_ffff) * self.groups.len() as u64) >> 32) as usize];
        let tag = (hash >> 16).max(1);
        'lookup: loop {
            // The slot a new key would take: empty, else drained, else the oldest.
            let mut victim = (0, u128::MAX, (2u8, u64::MAX));
            for (i, slot) in group.0.iter().enumerate() {
                let mut word = slot.load(Ordering::Acquire);
                if word != 0 && tag_of(word) == tag {
                    loop {
                        let (excess, ms) = excess_now(word, now, bucket.rate);
                        if excess > bucket.burst {
                            return Err(excess);
                        }
                        if !commit {
                            return Ok(excess);
                        }
                        let last = if ms != 0 { now } else { last_of(word) };
                        let new = pack(tag, last, excess);
                        match slot.compare_exchange(word, new, Ordering::AcqRel, Ordering::Acquire)
                        {
                            Ok(_) => return Ok(excess),
                            Err(now_there) if tag_of(now_there) == tag => word = now_there,
                            // Taken by another key meanwhile: look again.
                            Err(_) => continue 'lookup,
                        }
                    }
                }
                let rank = match word {
                    0 => (0, 0),
                    _ if excess_now(word, now, bucket.rate).0 <= 1000 => (1, last_of(word)),
                    _ => (2, last_of(word)),
                };
                if rank < victim.2 {
                    victim = (i, word, rank);
                }
            }
            if !commit {
                return Ok(0);
            }
            let (i, word, _) = victim;
            let new = pack(tag, now, 0);
            let taken = group.0[i].compare_exchange(word, new, Ordering::AcqRel, Ordering::Relaxed);
            if taken.is_ok() {
                if word == 0 {
                    self.keys.fetch_add(1, Ordering::Relaxed);
                }
                return Ok(0);
            }
        }
    }
}

/// `n` values of `T` (at least one) zeroed by the allocator: its pages become resident
/// only as they are written.
///
/// # Safety
/// All-zero bytes must be a valid `T` (atomics, arrays of them).
pub(crate) unsafe fn zeroed<T>(n: usize) -> Box<[T]> {
    let n = n.max(1);
    let layout = std::alloc::Layout::array::<T>(n).expect("a table's size fits memory");
    // SAFETY: the layout is not empty (n >= 1, and a table's `T` has a size); zeroed
    // memory is a valid `T` (the caller's promise); the box owns the pointer from here.
    unsafe {
        let ptr = std::alloc::alloc_zeroed(layout).cast::<T>();
        if ptr.is_null() {
            std::alloc::handle_alloc_error(layout);
        }
        Box::from_raw(std::ptr::slice_from_raw_parts_mut(ptr, n))
    }
}

/// How long a request that left `excess` waits (milliseconds): nginx's
/// `(excess - delay) * 1000 / rate` beyond the excess passed at once.
pub(crate) fn delay_ms(excess: u64, bucket: &Bucket) -> u64 {
    match excess > bucket.delay {
        true => (excess - bucket.delay) * 1000 / bucket.rate,
        false => 0,
    }
}

/// Seconds until a request refused at `excess` would pass (`Retry-After`): until the
/// bucket has drained `excess - burst`, rounded up, at least 1.
pub(crate) fn retry_after(excess: u64, bucket: &Bucket) -> u64 {
    let ms = (excess - bucket.burst.min(excess)) * 1000;
    ms.div_ceil(bucket.rate).div_ceil(1000).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEN_A_SECOND_BURST_5: Bucket = Bucket {
        rate: 10_000,
        burst: 5_000,
        delay: u64::MAX,
    };

    #[test]
    fn a_burst_passes_then_one_request_per_tenth_of_a_second() {
        let table = Table::new(1 << 20);
        let b = &TEN_A_SECOND_BURST_5;
        // A new key's first request leaves excess 0 (nginx), then five more fit.
        let (seven, eight) = (7 << 40, 8 << 40);
        let at_once: Vec<_> = (0..8).map(|_| table.take(seven, 1000, b, true)).collect();
        assert_eq!(
            at_once,
            [
                Ok(0),
                Ok(1000),
                Ok(2000),
                Ok(3000),
                Ok(4000),
                Ok(5000),
                Err(6000),
                Err(6000)
            ]
        );
        // 100 ms drain one request's excess.
        assert_eq!(table.take(seven, 1099, b, true), Err(5010));
        assert_eq!(table.take(seven, 1100, b, true), Ok(5000));
        assert_eq!(retry_after(6000, b), 1);
        assert_eq!(table.keys(), 1);
        // Another key has its own bucket.
        assert_eq!(table.take(eight, 1100, b, true), Ok(0));
        assert_eq!(table.keys(), 2);
    }

    #[test]
    fn without_nodelay_every_excess_request_waits_its_turn() {
        let b = Bucket {
            delay: 0,
            ..TEN_A_SECOND_BURST_5
        };
        assert_eq!(delay_ms(0, &b), 0);
        assert_eq!(delay_ms(1000, &b), 100);
        assert_eq!(delay_ms(5000, &b), 500);
        let two_stage = Bucket { delay: 2000, ..b };
        assert_eq!(delay_ms(2000, &two_stage), 0);
        assert_eq!(delay_ms(3000, &two_stage), 100);
    }

    #[test]
    fn a_peek_writes_nothing() {
        let table = Table::new(1 << 20);
        let b = &TEN_A_SECOND_BURST_5;
        let key = 1 << 40;
        assert_eq!(table.take(key, 0, b, false), Ok(0));
        assert_eq!(table.keys(), 0);
        table.take(key, 0, b, true).unwrap();
        assert_eq!(table.take(key, 0, b, false), Ok(1000));
        assert_eq!(table.take(key, 0, b, true), Ok(1000));
    }

    #[test]
    fn a_full_group_gives_its_oldest_slot_to_a_new_key() {
        // One group: four keys fit, the fifth takes the slot of the one counted longest
        // ago, whose state is then lost.
        let table = Table::new(64);
        assert_eq!(table.capacity(), 4);
        let b = &TEN_A_SECOND_BURST_5;
        for (key, at) in [
            (1u64 << 20, 10),
            (2 << 20, 20),
            (3 << 20, 30),
            (4 << 20, 40),
        ] {
            table.take(key, at, b, true).unwrap();
            table.take(key, at, b, true).unwrap();
        }
        assert_eq!(table.take(5 << 20, 50, b, true), Ok(0));
        assert_eq!(table.take(1 << 20, 50, b, true), Ok(0), "key 1 was dropped");
        assert_eq!(table.take(3 << 20, 50, b, true), Ok(1800), "key 3 was kept");
        assert_eq!(table.keys(), 4);
    }

    #[test]
    fn a_million_keys_stay_in_their_table() {
        // 16 MiB: 1,048,576 slots. Distinct keys land in it without growing it; what a
        // group of four cannot hold replaces its oldest (docs/security.md): held are
        // 99.6% of a quarter as many keys as slots, 96% of half, 89% of three quarters,
        // and 82% of a million, as many as hashes spread at random over groups allow.
        let b = &TEN_A_SECOND_BURST_5;
        let hasher = foldhash::quality::FixedState::with_seed(42);
        for (keys, held) in [
            (262_144u64, 0.994..0.998),
            (524_288, 0.955..0.97),
            (786_432, 0.885..0.90),
            (1_000_000, 0.81..0.83),
        ] {
            let table = Table::new(16 << 20);
            assert_eq!(table.capacity(), 1 << 20);
            for key in 0..keys {
                let hash = std::hash::BuildHasher::hash_one(&hasher, key);
                assert_eq!(table.take(hash, 5, b, true), Ok(0));
            }
            let fraction = table.keys() as f64 / keys as f64;
            assert!(held.contains(&fraction), "{fraction} of {keys} keys held");
        }
    }

    #[test]
    fn workers_racing_on_one_key_count_every_request() {
        let table = std::sync::Arc::new(Table::new(1 << 16));
        let b = Bucket {
            rate: 1,
            burst: 1_000_000_000,
            delay: u64::MAX,
        };
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let table = table.clone();
                std::thread::spawn(move || {
                    for _ in 0..10_000 {
                        table.take(99 << 40, 0, &b, true).unwrap();
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        // 40,000 requests: the first left 0, each other one 1000 more.
        assert_eq!(table.take(99 << 40, 0, &b, false), Ok(40_000 * 1000));
    }
}
