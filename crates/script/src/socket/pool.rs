//! The keep-alive pool of one worker (`setkeepalive`): idle connections by pool name
//! (`host:port`, or `connect`'s `pool` option), the most recently put first, each with
//! how often it has been reused and when it expires.
//!
//! As OpenResty's: a pool's capacity is fixed by the first connection put in it (or by
//! `connect`'s `pool_size`), and when it is full the connection idle the longest is
//! closed to make room. Over every pool a worker keeps at most [`MAX_IDLE`]
//! connections: one more put in is closed instead. A connection on which anything
//! arrives while it is idle (the peer's close) is closed when it is next taken; the idle
//! timeout is enforced by a task that runs while the pool holds connections, waking
//! at least once a second.

use std::cell::{Cell, RefCell};
use std::collections::{HashMap, VecDeque};
use std::rc::Rc;
use std::time::Duration;

use evloop::time::Instant;

use super::conn::Io;
use super::tally;

/// Idle connections a worker keeps over all its pools.
pub(super) const MAX_IDLE: usize = 1024;

struct Idle {
    /// With its (empty) read buffer, kept for the next user.
    io: Io,
    reused: u32,
    expires: Option<Instant>,
}

struct Pool {
    capacity: usize,
    idle: VecDeque<Idle>,
}

#[derive(Default)]
struct Pools {
    by_name: HashMap<Rc<str>, Pool>,
    idle: usize,
}

thread_local! {
    static POOLS: RefCell<Pools> = RefCell::new(Pools::default());
    static SWEEPING: Cell<bool> = const { Cell::new(false) };
}

/// The newest open idle connection of pool `name` and its reuse count so far.
pub(super) fn take(name: &str) -> Option<(Io, u32)> {
    POOLS.with(|p| {
        let mut pools = p.borrow_mut();
        let pools = &mut *pools;
        let pool = pools.by_name.get_mut(name)?;
        let now = Instant::now();
        while let Some(idle) = pool.idle.pop_front() {
            pools.idle -= 1;
            tally::idle(-1);
            if idle.expires.is_none_or(|e| e > now) && idle.io.conn.is_idle_and_open() {
                return Some((idle.io, idle.reused));
            }
        }
        None
    })
}

/// Pools kept by name at most, counting the empty ones whose capacity a `connect` fixed:
/// past it, the empty ones are let go (a script naming a pool per request, by a header's
/// value, would grow the table without bound). The pools holding connections are
/// [`MAX_IDLE`] at most, so room is always made.
const MAX_POOLS: usize = 4 * MAX_IDLE;

/// Fixes the capacity of pool `name` if it has none yet (`connect`'s `pool_size`).
pub(super) fn reserve(name: &Rc<str>, capacity: usize) {
    POOLS.with(|p| {
        let mut pools = p.borrow_mut();
        if pools.by_name.len() >= MAX_POOLS && !pools.by_name.contains_key(name) {
            pools.by_name.retain(|_, pool| !pool.idle.is_empty());
        }
        pools.by_name.entry(name.clone()).or_insert_with(|| Pool {
            capacity,
            idle: VecDeque::new(),
        });
    })
}

/// Puts `io` (nothing left unread in it) in pool `name` (made with `capacity` if new),
/// closed after `idle` (`None`: kept until the pool needs room).
pub(super) fn put(name: Rc<str>, io: Io, reused: u32, idle: Option<Duration>, capacity: usize) {
    let closed = POOLS.with(|p| {
        let mut pools = p.borrow_mut();
        if pools.idle >= MAX_IDLE {
            return Some(io);
        }
        let pool = pools.by_name.entry(name).or_insert_with(|| Pool {
            capacity,
            idle: VecDeque::new(),
        });
        let mut dropped = None;
        if pool.idle.len() >= pool.capacity {
            dropped = pool.idle.pop_back().map(|i| i.io);
        }
        pool.idle.push_front(Idle {
            io,
            reused,
            expires: idle.map(|d| Instant::now() + d),
        });
        if dropped.is_none() {
            pools.idle += 1;
            tally::idle(1);
        }
        dropped
    });
    // Closed outside the borrow: dropping a connection touches the loop's tables.
    drop(closed);
    sweep_later();
}

/// Closes the idle connections whose time is up; whether any connection is left.
fn sweep() -> bool {
    let now = Instant::now();
    let expired: Vec<Io> = POOLS.with(|p| {
        let mut pools = p.borrow_mut();
        let mut expired = Vec::new();
        for pool in pools.by_name.values_mut() {
            let before = pool.idle.len();
            let mut kept = VecDeque::with_capacity(before);
            for idle in pool.idle.drain(..) {
                if idle.expires.is_some_and(|e| e <= now) {
                    expired.push(idle.io);
                } else {
                    kept.push_back(idle);
                }
            }
            pool.idle = kept;
        }
        pools.idle -= expired.len();
        pools.by_name.retain(|_, pool| !pool.idle.is_empty());
        expired
    });
    tally::idle(-(expired.len() as i64));
    drop(expired);
    POOLS.with(|p| p.borrow().idle > 0)
}

/// Starts the task that closes expired connections, unless it runs.
fn sweep_later() {
    if SWEEPING.with(|s| s.replace(true)) {
        return;
    }
    evloop::spawn_local(async {
        loop {
            let next = POOLS.with(|p| {
                p.borrow()
                    .by_name
                    .values()
                    .flat_map(|pool| pool.idle.iter().filter_map(|i| i.expires))
                    .min()
            });
            let second = Instant::now() + Duration::from_secs(1);
            evloop::time::sleep_until(next.map_or(second, |n| n.min(second))).await;
            if !sweep() {
                SWEEPING.with(|s| s.set(false));
                return;
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pools_named_per_request_do_not_grow_the_table_without_bound() {
        for n in 0..3 * MAX_POOLS {
            reserve(&Rc::from(format!("tenant-{n}")), 5);
        }
        let kept = POOLS.with(|p| p.borrow().by_name.len());
        assert!(kept <= MAX_POOLS, "{kept}");
    }
}
