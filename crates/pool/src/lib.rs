//! A fixed-capacity pool of slots, each in one of a few user-chosen states, that
//! always knows which slot has been in a given state the longest.
//!
//! # What it is for
//!
//! Holding a fixed number of long-lived things (connections) whose memory is
//! allocated once, at start, and finding the ones that have waited too long
//! without a timer per thing. Every slot holds user data `T`, a state `S` and
//! the time it entered that state. Each state has its own intrusive,
//! doubly-linked list of slots, linked by `u32` index. Moving a slot to a state
//! (or re-stamping it in its current one with [`Pool::touch`]) is O(1) and puts
//! it at the tail of that state's list, so the head of each list is always the
//! slot that has been in that state the longest. The design follows libsxe's
//! `lib-sxe-pool`.
//!
//! Nothing allocates after [`Pool::new`]: every operation is a few index
//! updates in arrays sized at construction (a test with a counting allocator
//! proves it).
//!
//! # What it is not for
//!
//! - Growing: the capacity is fixed. When every slot is busy the caller
//!   decides what to give up (evict the oldest idle one, stop accepting).
//! - Sharing between threads: a pool belongs to one worker and has no locks.
//! - Reading the clock: the caller passes `now` into every call that stamps a
//!   slot, as a `u64` in a unit of its choice (milliseconds since the worker
//!   started, say). That keeps the pool free of system calls and its tests
//!   deterministic. `now` must never go backwards: a list is in the order its
//!   slots were moved, and that is oldest-first only if the clock is monotonic
//!   (debug builds check this).
//! - Ordering by anything but time in state: there is no priority, no search.
//!
//! # How it fits
//!
//! Each `server` worker owns one `Pool` of connection slots, sized
//! `max_connections / workers`. One state is the free list: accepting a
//! connection is [`Pool::take_oldest`]`(Free, ReadingHead, now)`, closing one
//! is a move back to `Free`. Timeouts are one periodic check per worker that,
//! for each timed state, looks at the oldest slot and closes it while it has
//! expired, stopping at the first one that has not: everything behind it in
//! the list is younger. When no slot is free, the oldest idle keep-alive
//! connection is [`Pool::oldest`]`(Idle)`. The per-state [`Pool::count`]s feed
//! metrics.
//!
//! # Example
//!
//! ```
//! use pool::{Pool, State};
//!
//! #[derive(Clone, Copy, Debug, PartialEq, Eq)]
//! enum Conn { Free, ReadingHead, Idle }
//!
//! impl State for Conn {
//!     const COUNT: usize = 3;
//!     fn index(self) -> usize { self as usize }
//! }
//!
//! // Four slots, all free at time 0; each holds a request counter.
//! let mut pool: Pool<Conn, u32> = Pool::new(4, Conn::Free, 0, |_| 0);
//!
//! // Accept two connections.
//! let a = pool.take_oldest(Conn::Free, Conn::ReadingHead, 10).unwrap();
//! let b = pool.take_oldest(Conn::Free, Conn::ReadingHead, 20).unwrap();
//! pool[a] += 1;
//! assert_eq!(pool.count(Conn::ReadingHead), 2);
//! assert_eq!(pool.oldest(Conn::ReadingHead), Some(a));
//!
//! // `a` sends its head and goes idle; `b` is still reading at time 50.
//! pool.set_state(a, Conn::ReadingHead, Conn::Idle, 30);
//!
//! // The timeout sweep: a head timeout of 25 closes `b` (in state since 20)
//! // and stops at the first slot that has not expired.
//! let (now, head_timeout) = (50, 25);
//! while let Some(slot) = pool.oldest_expired(Conn::ReadingHead, now, head_timeout) {
//!     pool.set_state(slot, Conn::ReadingHead, Conn::Free, now);
//! }
//! assert_eq!(pool.count(Conn::ReadingHead), 0);
//! assert_eq!(pool.state(b), Conn::Free);
//! assert_eq!(pool.state(a), Conn::Idle);
//! assert_eq!(pool[a], 1);
//! ```

#![forbid(unsafe_code)]
#![warn(missing_docs)]

use std::fmt;
use std::ops::{Index, IndexMut};

/// The states a slot can be in: a small, fieldless enum, usually.
///
/// `index` must map the states one-to-one onto `0..COUNT`; it is called on every
/// operation, so keep it trivial (`self as usize` for a fieldless enum).
pub trait State: Copy + Eq + fmt::Debug {
    /// How many states there are.
    const COUNT: usize;

    /// This state's position in `0..COUNT`.
    fn index(self) -> usize;
}

/// A handle to one slot of a [`Pool`]: its index, stable for the pool's life.
///
/// A `SlotId` is only meaningful for the pool that handed it out; using it with
/// another pool gives that pool's slot at the same index, or panics if there
/// is none.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SlotId(u32);

impl SlotId {
    /// The slot's index in `0..capacity`, for keeping per-slot data in arrays
    /// beside the pool.
    #[inline]
    pub fn index(self) -> usize {
        self.0 as usize
    }

    /// The slot at `index` (the inverse of [`SlotId::index`]), for code that keeps a
    /// slot's index rather than its id.
    #[inline]
    pub fn from_index(index: usize) -> SlotId {
        SlotId(index as u32)
    }
}

impl fmt::Display for SlotId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "slot {}", self.0)
    }
}

/// The end of a list. Capacity is limited to `u32::MAX` so that no slot has
/// this index.
const NIL: u32 = u32::MAX;

/// The bookkeeping of one slot, kept apart from the user data so that a sweep
/// over lists and timestamps touches only these small records.
#[derive(Clone, Copy, Debug)]
struct Link<S> {
    prev: u32,
    next: u32,
    entered: u64,
    state: S,
}

/// One state's list: head is the oldest, tail the newest.
#[derive(Clone, Copy, Debug)]
struct List {
    head: u32,
    tail: u32,
    count: u32,
}

const EMPTY: List = List {
    head: NIL,
    tail: NIL,
    count: 0,
};

/// A fixed number of slots holding `T`, each in a state `S`, with a list per
/// state ordered by the time each slot entered it. See the [crate] docs.
#[derive(Debug)]
pub struct Pool<S, T> {
    links: Box<[Link<S>]>,
    lists: Box<[List]>,
    data: Box<[T]>,
}

impl<S: State, T> Pool<S, T> {
    /// Allocates `capacity` slots, all in state `initial`, entered at `now`,
    /// each holding `init(slot)`. The `initial` list is in slot order, so
    /// slot 0 is its oldest.
    ///
    /// This is the only call that allocates.
    ///
    /// # Panics
    ///
    /// If `capacity` is more than `u32::MAX`, or `initial.index()` is not
    /// below `S::COUNT`.
    pub fn new(capacity: usize, initial: S, now: u64, mut init: impl FnMut(SlotId) -> T) -> Self {
        assert!(
            capacity <= NIL as usize,
            "pool capacity {capacity} is more than {NIL}"
        );
        assert!(
            initial.index() < S::COUNT,
            "{initial:?} has index {} but there are {} states",
            initial.index(),
            S::COUNT
        );
        let mut lists = vec![EMPTY; S::COUNT].into_boxed_slice();
        let links = (0..capacity as u32)
            .map(|i| Link {
                prev: if i == 0 { NIL } else { i - 1 },
                next: if i + 1 == capacity as u32 { NIL } else { i + 1 },
                entered: now,
                state: initial,
            })
            .collect();
        let data = (0..capacity as u32).map(|i| init(SlotId(i))).collect();
        if capacity > 0 {
            lists[initial.index()] = List {
                head: 0,
                tail: capacity as u32 - 1,
                count: capacity as u32,
            };
        }
        Pool { links, lists, data }
    }

    /// The number of slots, fixed at construction.
    #[inline]
    pub fn capacity(&self) -> usize {
        self.links.len()
    }

    /// How many slots are in `state`.
    #[inline]
    pub fn count(&self, state: S) -> usize {
        self.lists[state.index()].count as usize
    }

    /// The slot that has been in `state` the longest, if any is.
    #[inline]
    #[must_use]
    pub fn oldest(&self, state: S) -> Option<SlotId> {
        let head = self.lists[state.index()].head;
        (head != NIL).then_some(SlotId(head))
    }

    /// The oldest slot in `state` if it has been there for `timeout` or more
    /// at `now`, that is if `now - entered >= timeout`.
    ///
    /// This is the step of a timeout sweep: call it in a loop, moving each
    /// slot it returns out of `state`, until it returns `None`. It never looks
    /// past the first unexpired slot, since every slot behind it is younger.
    #[inline]
    #[must_use]
    pub fn oldest_expired(&self, state: S, now: u64, timeout: u64) -> Option<SlotId> {
        self.oldest(state)
            .filter(|&slot| now.saturating_sub(self.entered(slot)) >= timeout)
    }

    /// The slots in `state` with the time each entered it, oldest first.
    ///
    /// For a read-only walk that stops early, use [`Iterator::take_while`]; to
    /// move slots while sweeping, loop on [`Pool::oldest_expired`] instead.
    pub fn iter(&self, state: S) -> Iter<'_, S> {
        let list = self.lists[state.index()];
        Iter {
            links: &self.links,
            next: list.head,
            remaining: list.count as usize,
        }
    }

    /// The state `slot` is in.
    #[inline]
    pub fn state(&self, slot: SlotId) -> S {
        self.links[slot.index()].state
    }

    /// When `slot` entered its current state, or was last touched.
    #[inline]
    pub fn entered(&self, slot: SlotId) -> u64 {
        self.links[slot.index()].entered
    }

    /// Re-stamps `slot` with `now` and moves it to the tail of its state's
    /// list, as if it had just entered that state (a connection that made
    /// progress restarts its timeout).
    #[inline]
    pub fn touch(&mut self, slot: SlotId, now: u64) {
        let state = self.state(slot);
        self.unlink(slot.0, state);
        self.push_back(slot.0, state, now);
    }

    /// Moves `slot` from state `from` to the tail of state `to`, entered at
    /// `now`. `from == to` is the same as [`Pool::touch`].
    ///
    /// `from` is what the caller believes the slot's state is; saying it keeps
    /// state machines honest. A wrong `from` is a bug: debug builds panic,
    /// release builds move the slot from the state it is really in, so the
    /// lists stay consistent.
    #[inline]
    pub fn set_state(&mut self, slot: SlotId, from: S, to: S, now: u64) {
        let actual = self.state(slot);
        debug_assert_eq!(actual, from, "{slot} is not in the state the caller said");
        self.unlink(slot.0, actual);
        self.push_back(slot.0, to, now);
    }

    /// Moves the oldest slot in `from` to state `to`, entered at `now`, and
    /// returns it; `None` if `from` is empty.
    ///
    /// With a free state this is allocation: `take_oldest(Free, InUse, now)`.
    /// Taking the oldest free slot spreads reuse over all slots.
    #[inline]
    #[must_use = "the slot taken is lost if its id is dropped"]
    pub fn take_oldest(&mut self, from: S, to: S, now: u64) -> Option<SlotId> {
        let slot = self.oldest(from)?;
        self.unlink(slot.0, from);
        self.push_back(slot.0, to, now);
        Some(slot)
    }

    /// The data in `slot`.
    #[inline]
    pub fn get(&self, slot: SlotId) -> &T {
        &self.data[slot.index()]
    }

    /// The data in `slot`, mutably.
    #[inline]
    pub fn get_mut(&mut self, slot: SlotId) -> &mut T {
        &mut self.data[slot.index()]
    }

    /// Takes slot `i` out of `state`'s list, leaving its own links stale.
    #[inline]
    fn unlink(&mut self, i: u32, state: S) {
        let Link { prev, next, .. } = self.links[i as usize];
        let list = &mut self.lists[state.index()];
        if prev == NIL {
            list.head = next;
        } else {
            self.links[prev as usize].next = next;
        }
        if next == NIL {
            list.tail = prev;
        } else {
            self.links[next as usize].prev = prev;
        }
        list.count -= 1;
    }

    /// Appends slot `i`, which is in no list, to the tail of `state`'s list.
    #[inline]
    fn push_back(&mut self, i: u32, state: S, now: u64) {
        let list = &mut self.lists[state.index()];
        let tail = list.tail;
        if tail == NIL {
            list.head = i;
        } else {
            debug_assert!(
                self.links[tail as usize].entered <= now,
                "the clock went backwards: {now} is before the newest entry in {state:?}"
            );
            self.links[tail as usize].next = i;
        }
        list.tail = i;
        list.count += 1;
        self.links[i as usize] = Link {
            prev: tail,
            next: NIL,
            entered: now,
            state,
        };
    }
}

impl<S: State, T> Index<SlotId> for Pool<S, T> {
    type Output = T;

    #[inline]
    fn index(&self, slot: SlotId) -> &T {
        self.get(slot)
    }
}

impl<S: State, T> IndexMut<SlotId> for Pool<S, T> {
    #[inline]
    fn index_mut(&mut self, slot: SlotId) -> &mut T {
        self.get_mut(slot)
    }
}

/// The slots in one state with the time each entered it, oldest first; made
/// by [`Pool::iter`].
#[derive(Clone, Debug)]
pub struct Iter<'a, S> {
    links: &'a [Link<S>],
    next: u32,
    remaining: usize,
}

impl<S: Copy> Iterator for Iter<'_, S> {
    type Item = (SlotId, u64);

    #[inline]
    fn next(&mut self) -> Option<(SlotId, u64)> {
        if self.next == NIL {
            return None;
        }
        let slot = SlotId(self.next);
        let link = &self.links[slot.index()];
        self.next = link.next;
        self.remaining -= 1;
        Some((slot, link.entered))
    }

    #[inline]
    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.remaining, Some(self.remaining))
    }
}

impl<S: Copy> ExactSizeIterator for Iter<'_, S> {}

impl<S: Copy> std::iter::FusedIterator for Iter<'_, S> {}

#[cfg(test)]
mod tests;
