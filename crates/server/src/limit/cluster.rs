//! A zone shared by every node through Redis (`redis = true`; docs/security.md, "Request
//! limits shared through Redis"): a sliding-window counter per key in Redis, from which
//! each node reserves tokens in batches, so that a request spends a local token and only
//! one request in a batch makes Redis be asked.
//!
//! Per key and window (one second for `Nr/s`, one minute for `Nr/m`, on the wall clock
//! so that nodes agree), a node keeps in a slot of a fixed table: the window, its tokens
//! (negative: requests passed on credit), whether a batch is being asked for, and whether
//! Redis had no more room. A request spends a token; without one it is passed on credit
//! when the zone's local bucket passes it, and the next batch asked for pays the credit
//! back first; once Redis has no more room for the window, the node refuses the key's
//! requests until the window ends. Redis is asked by one thread per zone (a blocking
//! connection with short timeouts), never by a worker: when it cannot be reached the
//! zone says so (`tessera_limit_redis_up`) and decides by its local bucket alone.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use portable_atomic::AtomicU128;

/// Slots per group (one cache line).
const GROUP: usize = 4;
/// Bytes of table per key held.
const SLOT_BYTES: u64 = 16;
/// Batches asked for and not yet answered, at most (more wait for the next request).
const QUEUE: usize = 4096;
/// Longest wait for Redis: connecting, sending, answering.
const TIMEOUT: Duration = Duration::from_millis(200);
/// How often a zone whose Redis is down tries it again.
const RETRY: Duration = Duration::from_secs(1);
/// A token count's offset in its 24-bit field (so that credit, below 0, fits).
const ZERO: i64 = 1 << 23;

#[repr(C, align(64))]
struct Group([AtomicU128; GROUP]);

/// What one slot says of a key in a window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct State {
    tag: u64,
    window: u32,
    tokens: i64,
    asking: bool,
    full: bool,
    /// When a batch was last asked for, in tenths of a second (16 bits, wrapping).
    asked: u16,
}

impl State {
    fn pack(self) -> u128 {
        let tokens = (self.tokens + ZERO).clamp(0, (1 << 24) - 1) as u128;
        (self.tag as u128) << 88
            | (self.window as u128) << 56
            | tokens << 32
            | (self.asked as u128) << 2
            | (self.asking as u128) << 1
            | self.full as u128
    }

    fn unpack(word: u128) -> State {
        State {
            tag: (word >> 88) as u64,
            window: (word >> 56) as u32,
            tokens: ((word >> 32) & ((1 << 24) - 1)) as i64 - ZERO,
            asking: word & 2 != 0,
            full: word & 1 != 0,
            asked: (word >> 2) as u16,
        }
    }
}

/// What a request in a shared zone comes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Take {
    /// It spent a token.
    Pass,
    /// Redis has no room left for its key in this window.
    Refuse,
    /// No token: it passes on credit if the zone's local bucket passes it
    /// ([`Cluster::credit`]).
    Credit,
    /// Redis cannot be reached: the zone's local bucket decides alone.
    Local,
}

/// One batch to ask Redis for.
struct Ask {
    hash: u64,
    window: u32,
    /// The tokens wanted: a batch, and the credit to pay back.
    want: u32,
}

/// Where a shared zone's counts live in Redis.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimitRedis {
    /// `redis://host:port[/db]` (`[cache.redis] url`).
    pub url: String,
    /// `[cache.redis] key_prefix`.
    pub prefix: String,
}

/// What the zone and its Redis thread share.
struct Slots {
    groups: Box<[Group]>,
    up: AtomicBool,
}

pub(crate) struct Cluster {
    slots: Arc<Slots>,
    /// Requests the local bucket decided alone, Redis being unreachable.
    fallbacks: AtomicU64,
    /// The Redis thread's queue, started by the first request that asks.
    asks: OnceLock<SyncSender<Ask>>,
    target: LimitRedis,
    /// `PREFIX limit:NAME:`, before each key's hash and window.
    key_prefix: String,
    /// Milliseconds of a window.
    window_ms: u64,
    /// Requests a window allows (its rate and the burst), over every node.
    capacity: u64,
    /// Tokens asked for at a time.
    batch: u32,
    /// Tenths of a second between two batches asked for a key Redis had no room for
    /// (room comes back as the window slides; and a Redis that died is noticed).
    retry_tenths: u16,
}

impl Cluster {
    /// The shared state of zone `name`: `per_window` requests a window of `window_ms`,
    /// and `burst` more; a table of `memory` bytes for its keys' tokens.
    pub fn new(
        target: &LimitRedis,
        (name, memory): (&str, u64),
        (per_window, window_ms): (u64, u64),
        burst: u64,
    ) -> Cluster {
        let capacity = per_window + burst;
        let groups = (memory / (SLOT_BYTES * GROUP as u64)).max(1);
        Cluster {
            // SAFETY: an all-zero `Group` is valid: atomics of 0, empty slots.
            slots: Arc::new(Slots {
                groups: unsafe { super::table::zeroed::<Group>(groups as usize) },
                up: AtomicBool::new(true),
            }),
            fallbacks: AtomicU64::new(0),
            asks: OnceLock::new(),
            target: target.clone(),
            key_prefix: format!("{}limit:{name}:", target.prefix),
            window_ms,
            capacity,
            batch: (capacity / 10).clamp(1, 1000) as u32,
            retry_tenths: (window_ms / 1000).clamp(1, 10) as u16,
        }
    }

    /// Where its counts live.
    pub fn target(&self) -> &LimitRedis {
        &self.target
    }

    /// Milliseconds of its windows.
    pub fn window_ms(&self) -> u64 {
        self.window_ms
    }

    /// Whether Redis answered the last time it was asked.
    pub fn up(&self) -> bool {
        self.slots.up.load(Ordering::Relaxed)
    }

    /// Requests decided by the local bucket alone while Redis was unreachable.
    pub fn fallbacks(&self) -> u64 {
        self.fallbacks.load(Ordering::Relaxed)
    }

    /// A request of the key of `hash` at `unix_ms` (milliseconds of the wall clock).
    pub fn take(&self, hash: u64, unix_ms: u64) -> Take {
        if !self.up() {
            self.fallbacks.fetch_add(1, Ordering::Relaxed);
            return Take::Local;
        }
        let window = (unix_ms / self.window_ms) as u32;
        let tenth = (unix_ms / 100) as u16;
        loop {
            let (slot, state) = self.slots.find(hash, window);
            if state.tokens <= 0 && !state.full {
                return Take::Credit;
            }
            if state.tokens <= 0 {
                // Ask again now and then: the window slides, Redis may have died.
                if !state.asking && tenth.wrapping_sub(state.asked) >= self.retry_tenths {
                    let asking = State {
                        asking: true,
                        asked: tenth,
                        ..state
                    };
                    let cas = slot.compare_exchange(
                        state.pack(),
                        asking.pack(),
                        Ordering::AcqRel,
                        Ordering::Relaxed,
                    );
                    if cas.is_ok() {
                        let want = self.batch as i64 - state.tokens;
                        self.ask(Ask {
                            hash,
                            window,
                            want: want.clamp(1, 1 << 20) as u32,
                        });
                    }
                }
                return Take::Refuse;
            }
            let spent = State {
                tokens: state.tokens - 1,
                ..state
            };
            let cas = slot.compare_exchange(
                state.pack(),
                spent.pack(),
                Ordering::AcqRel,
                Ordering::Relaxed,
            );
            if cas.is_ok() {
                return Take::Pass;
            }
        }
    }

    /// A request passed on credit (its local bucket passed it): counted against the
    /// next batch, which it asks for unless one is being asked for.
    pub fn credit(&self, hash: u64, unix_ms: u64) {
        let window = (unix_ms / self.window_ms) as u32;
        loop {
            let (slot, state) = self.slots.find(hash, window);
            let new = State {
                tokens: state.tokens - 1,
                asking: true,
                asked: match state.asking {
                    true => state.asked,
                    false => (unix_ms / 100) as u16,
                },
                ..state
            };
            let cas = slot.compare_exchange(
                state.pack(),
                new.pack(),
                Ordering::AcqRel,
                Ordering::Relaxed,
            );
            if cas.is_err() {
                continue;
            }
            if !state.asking {
                let want = self.batch as i64 - new.tokens;
                self.ask(Ask {
                    hash,
                    window,
                    want: want.clamp(1, 1 << 20) as u32,
                });
            }
            return;
        }
    }

    /// Queues a batch for the Redis thread (started now if it is not yet). A full
    /// queue drops it: the key's next request asks again.
    fn ask(&self, ask: Ask) {
        let sender = self.asks.get_or_init(|| {
            let (sender, receiver) = std::sync::mpsc::sync_channel(QUEUE);
            let asker = Asker {
                slots: self.slots.clone(),
                target: self.target.clone(),
                key_prefix: self.key_prefix.clone(),
                window_ms: self.window_ms,
                capacity: self.capacity,
            };
            let spawned = std::thread::Builder::new()
                .name("tessera-limit-redis".into())
                .spawn(move || asker.run(receiver));
            if let Err(e) = spawned {
                tracing::warn!(error = %e, "cannot start the Redis thread of a limit zone");
            }
            sender
        });
        let (hash, window) = (ask.hash, ask.window);
        if sender.try_send(ask).is_err() {
            self.slots.answered(hash, window, None);
        }
    }
}

impl Slots {
    /// The slot of the key of `hash` and its state in `window`, made fresh (and
    /// written) when the slot held another window or another key.
    fn find(&self, hash: u64, window: u32) -> (&AtomicU128, State) {
        let index = (((hash & 0xffff_ffff) * self.groups.len() as u64) >> 32) as usize;
        let group = &self.groups[index];
        let tag = (hash >> 24).max(1);
        let fresh = State {
            tag,
            window,
            tokens: 0,
            asking: false,
            full: false,
            asked: 0,
        };
        loop {
            let mut victim: Option<(usize, u128, u32)> = None;
            for (i, slot) in group.0.iter().enumerate() {
                let word = slot.load(Ordering::Acquire);
                let state = State::unpack(word);
                if word != 0 && state.tag == tag {
                    if state.window == window {
                        return (slot, state);
                    }
                    victim = Some((i, word, 0));
                    break;
                }
                // Empty first, then the slot of the oldest window.
                let age = if word == 0 {
                    0
                } else {
                    state.window.saturating_add(1)
                };
                if victim.is_none_or(|(_, _, best)| age < best) {
                    victim = Some((i, word, age));
                }
            }
            let (i, word, _) = victim.expect("a group has slots");
            let slot = &group.0[i];
            if slot
                .compare_exchange(word, fresh.pack(), Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
            {
                return (slot, fresh);
            }
        }
    }

    /// Redis's answer to a batch asked for the key of `hash` in `window`: `Some(n)`
    /// tokens granted (fewer than asked: no more room this window), `None` when it
    /// could not be asked. A slot that moved on to another window or key is left.
    fn answered(&self, hash: u64, window: u32, granted: Option<(u32, u32)>) {
        let index = (((hash & 0xffff_ffff) * self.groups.len() as u64) >> 32) as usize;
        let tag = (hash >> 24).max(1);
        for slot in self.groups[index].0.iter() {
            loop {
                let word = slot.load(Ordering::Acquire);
                let state = State::unpack(word);
                if word == 0 || state.tag != tag || state.window != window {
                    break;
                }
                let new = match granted {
                    Some((granted, wanted)) => State {
                        tokens: state.tokens + granted as i64,
                        asking: false,
                        full: granted < wanted,
                        ..state
                    },
                    None => State {
                        asking: false,
                        ..state
                    },
                };
                if slot
                    .compare_exchange(word, new.pack(), Ordering::AcqRel, Ordering::Relaxed)
                    .is_ok()
                {
                    return;
                }
            }
        }
    }
}

/// The sliding-window count: the window's count and the previous one's, weighted by
/// the part of it still inside the last window length; grants what room is left, up to
/// what was asked, and counts it.
const SCRIPT: &str = "\
local cur = tonumber(redis.call('GET', KEYS[1]) or '0')
local prev = tonumber(redis.call('GET', KEYS[2]) or '0')
local used = cur + math.floor(prev * (1000 - tonumber(ARGV[3])) / 1000)
local room = tonumber(ARGV[1]) - used
if room <= 0 then return 0 end
local grant = math.min(tonumber(ARGV[2]), room)
redis.call('INCRBY', KEYS[1], grant)
redis.call('PEXPIRE', KEYS[1], ARGV[4])
return grant";

/// A zone's Redis thread.
struct Asker {
    slots: Arc<Slots>,
    target: LimitRedis,
    key_prefix: String,
    window_ms: u64,
    capacity: u64,
}

impl Asker {
    /// Answers batches until the zone is gone (its queue closed).
    fn run(self, asks: Receiver<Ask>) {
        let mut conn: Option<redis::Connection> = None;
        let mut retry_at = Instant::now();
        loop {
            let ask = match asks.recv_timeout(RETRY) {
                Ok(ask) => Some(ask),
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => None,
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => return,
            };
            if conn.is_none() && Instant::now() >= retry_at {
                conn = self.connect();
                self.slots.up.store(conn.is_some(), Ordering::Relaxed);
                if conn.is_none() {
                    retry_at = Instant::now() + RETRY;
                }
            }
            let Some(ask) = ask else {
                continue;
            };
            let granted = conn.as_mut().and_then(|c| self.grant(c, &ask).ok());
            if granted.is_none() && conn.is_some() {
                tracing::warn!(url = %self.target.url, "a limit zone cannot reach Redis: its local limits decide until it answers");
                conn = None;
                self.slots.up.store(false, Ordering::Relaxed);
                retry_at = Instant::now() + RETRY;
            }
            let granted = granted.map(|g| (g, ask.want));
            self.slots.answered(ask.hash, ask.window, granted);
        }
    }

    fn connect(&self) -> Option<redis::Connection> {
        let client = redis::Client::open(self.target.url.as_str()).ok()?;
        let mut conn = client.get_connection_with_timeout(TIMEOUT).ok()?;
        conn.set_read_timeout(Some(TIMEOUT)).ok()?;
        conn.set_write_timeout(Some(TIMEOUT)).ok()?;
        redis::cmd("PING").query::<String>(&mut conn).ok()?;
        Some(conn)
    }

    /// Runs [`SCRIPT`] for one batch: the tokens granted.
    fn grant(&self, conn: &mut redis::Connection, ask: &Ask) -> redis::RedisResult<u32> {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        // The batch's own window: an answer that comes late still counts in it.
        let start = ask.window as u64 * self.window_ms;
        let elapsed = now.saturating_sub(start).min(self.window_ms) * 1000 / self.window_ms;
        let key = |window: u64| format!("{}{:016x}:{window}", self.key_prefix, ask.hash);
        let granted: i64 = redis::cmd("EVAL")
            .arg(SCRIPT)
            .arg(2)
            .arg(key(ask.window as u64))
            .arg(key((ask.window as u64).saturating_sub(1)))
            .arg(self.capacity)
            .arg(ask.want)
            .arg(elapsed)
            .arg(self.window_ms * 2)
            .query(conn)?;
        Ok(granted.max(0) as u32)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_state_reads_back_as_written() {
        let state = State {
            tag: (1 << 40) - 1,
            window: u32::MAX,
            tokens: -5,
            asking: true,
            full: false,
            asked: 65535,
        };
        assert_eq!(State::unpack(state.pack()), state);
        let full = State {
            tokens: 1000,
            asking: false,
            full: true,
            ..state
        };
        assert_eq!(State::unpack(full.pack()), full);
    }

    #[test]
    fn credit_is_paid_back_by_the_next_batch() {
        let cluster = Cluster::new(
            &LimitRedis {
                url: "redis://127.0.0.1:1".into(),
                prefix: "t:".into(),
            },
            ("z", 1 << 16),
            (10, 1000),
            0,
        );
        let hash = 7 << 40;
        // No token yet: on credit (what `credit` would ask for is answered here).
        assert_eq!(cluster.take(hash, 5_000), Take::Credit);
        let (_, state) = cluster.slots.find(hash, 5);
        assert_eq!((state.tokens, state.asking), (0, false));
        cluster.slots.answered(hash, 5, Some((3, 3)));
        assert_eq!(cluster.slots.find(hash, 5).1.tokens, 3);
        assert_eq!(cluster.take(hash, 5_100), Take::Pass);
        cluster.slots.answered(hash, 5, Some((0, 2)));
        assert_eq!(cluster.take(hash, 5_200), Take::Pass);
        assert_eq!(cluster.take(hash, 5_300), Take::Pass);
        let (_, state) = cluster.slots.find(hash, 5);
        assert_eq!((state.tokens, state.full), (0, true));
        // Redis had no room: refused, and not asked again within a tenth of the window
        // (second) of the last batch asked for.
        let slot = cluster.slots.find(hash, 5).0;
        let asked = State { asked: 54, ..state };
        slot.store(asked.pack(), Ordering::Relaxed);
        assert_eq!(cluster.take(hash, 5_400), Take::Refuse);
        assert!(!cluster.slots.find(hash, 5).1.asking);
        assert_eq!(cluster.take(hash, 6_000), Take::Credit, "a new window");
    }
}
