//! The process's cache ([`Cache`]), shared by every worker's [`Edge`](crate::Edge): the
//! memory tier and its keys, the pass marks, purges and bans, and the compressed forms
//! of cached objects in the memory tier's weight.
//!
//! - **Memory tier.** A sharded, byte-bounded `quick_cache` (S3-FIFO admission and
//!   eviction, so a scan of one-hit objects does not push out the hot ones) of
//!   [`Entry`]s: fragment and page bodies as `Bytes` (a hit hands the same buffer to the
//!   writer) and ESI pages as compiled templates (a hit never re-parses).
//! - **Keys.** `authority + path?query` (authority lower-cased, `:80` dropped), the same
//!   for a page and for a fragment, so one `PURGE` removes both. A response with `Vary`
//!   stores a marker under that key naming the fields, and the object under the key plus
//!   the request's values of those fields.
//! - **Coalescing.** [`Cache::join`] makes one request the leader for a key and the
//!   others (on any worker) wait for what it stores (`flight`).
//! - **Disk tier.** With `[cache.disk]`, a memory miss asks this node's disk before Redis
//!   (`disk`, `on_disk`), and every store is also written to disk in the background;
//!   an object above `max_object_size` but within the disk's goes to disk only.
//! - **Shared tier.** With `[cache.redis]`, a memory miss asks Redis before the origin,
//!   and every store is also written to Redis in the background (`shared_tier`).
//! - **Forms.** The compressed forms of cached objects are in the cache's weight: an
//!   object is weighed with its forms, and when a form is made for an object already in
//!   memory the object is inserted again with its new weight, so that quick_cache evicts
//!   others to make room and `max_size` bounds bodies and forms together
//!   (docs/compression.md). Forms never weigh an object past what its shard holds:
//!   quick_cache evicts at once an object heavier than its shard's hot part, so a form
//!   that would take its object there is served once and not kept ([`Cache::form_room`]);
//!   the object stays.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::header::HeaderValue;
use quick_cache::sync::{EntryAction, EntryResult};

use super::entry::Entry;
use super::flight::{FlightGuard, Flights, Join};
use super::freshness::{Rules, MAX_LIFETIME};
use super::shared_tier::{SharedTier, SharedTierStats};
use crate::clock::{now_ms, now_ms_exact};
use crate::config::CacheConfig;
use crate::error::ConfigError;

/// What a key holds in memory.
#[derive(Clone)]
enum Slot {
    /// An object and its weight when it was (re)inserted: its own bytes and those of
    /// its compressed forms then. quick_cache weighs a value again whenever it moves or
    /// leaves, so the weight must not change while the value is in; a form made later is
    /// counted by inserting the object again ([`Cache::reweigh`]).
    Object(Arc<Entry>, u64),
    /// The response varies on these fields; the object is under the variant key.
    Vary(Arc<[String]>, u64),
    /// The last response for the key could not be stored (Varnish's hit-for-miss), until
    /// this time: requests for it go to the origin at once, without waiting on one
    /// another's fetch (which would queue them one by one behind an uncacheable
    /// resource) and without asking Redis. A response that can be stored replaces it.
    Pass(u64),
}

/// How long a key stays marked [`Slot::Pass`] (Varnish's built-in VCL keeps its
/// hit-for-miss objects for 120 s).
const PASS_MS: u64 = 120_000;

/// Tries of one reweighing that meets another's reweighing of the same key (its
/// placeholder) for longer than [`PLACEHOLDER_WAIT`]: the other puts the object back
/// within microseconds, so this is a bound, not a wait expected to run out.
const REWEIGH_TRIES: usize = 4;
const PLACEHOLDER_WAIT: Duration = Duration::from_millis(5);

/// The part of each shard quick_cache keeps for its hot objects (its default, set
/// explicitly so that [`shard_hot_target`] follows it).
const HOT_ALLOCATION: f64 = 0.97;

/// The most a key may weigh in a cache of `max_size` bytes in `shards` shards: the hot
/// part of one shard, as quick_cache sizes it (a shard's share rounded up, 97% of it
/// hot). quick_cache may make fewer shards than asked (then each is larger), so this is
/// never above the real limit.
fn shard_hot_target(max_size: u64, shards: usize) -> u64 {
    let shards = shards.max(1) as u64;
    let shard = max_size.div_ceil(shards);
    ((shard as f64 * HOT_ALLOCATION) as u64).clamp(shard.min(1), shard)
}

#[derive(Clone)]
struct Weigh;

impl quick_cache::Weighter<String, Slot> for Weigh {
    fn weight(&self, key: &String, slot: &Slot) -> u64 {
        key.len() as u64
            + match slot {
                Slot::Object(_, weight) => *weight,
                Slot::Vary(names, _) => 64 + names.iter().map(|n| n.len() as u64 + 24).sum::<u64>(),
                Slot::Pass(_) => 16,
            }
    }
}

/// Counts what the memory tier evicts to make room (quick_cache calls it on the thread
/// whose insert made the room).
#[derive(Clone, Copy)]
struct Evictions;

impl quick_cache::Lifecycle<String, Slot> for Evictions {
    type RequestState = ();

    fn begin_request(&self) {}

    fn on_evict(&self, _: &mut (), _: String, slot: Slot) {
        if matches!(slot, Slot::Object(..)) {
            crate::metrics::evicted(crate::metrics::Evicted::Capacity, 1);
        }
    }
}

/// Counters of the cache, for tests and metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Bytes held by the memory tier (by the weigher: bodies, templates, headers, keys).
    pub weight: u64,
    /// The memory budget.
    pub capacity: u64,
    /// Objects (and Vary and pass markers) in memory.
    pub entries: usize,
    /// Requests answered from memory while fresh.
    pub hits: u64,
    /// Requests that found nothing fresh in memory.
    pub misses: u64,
    /// Stale objects served (while revalidating, or because the origin failed).
    pub stale_served: u64,
    /// Requests that waited for another request's fetch instead of fetching.
    pub coalesced: u64,
    /// The shared tier's counters, when configured.
    pub shared: Option<SharedTierStats>,
    /// The invalidation fan-out's counters, when Redis is configured with `fan_out`.
    pub fan_out: Option<super::fanout::FanOutStats>,
    /// The disk tier's counters, when configured.
    pub disk: Option<super::disk::DiskTierStats>,
}

/// The process's cache. Create one with [`Cache::new`] and hand it to every worker's
/// [`Edge`](crate::Edge) ([`Edge::with_cache`](crate::Edge::with_cache)).
pub struct Cache {
    pub(crate) config: CacheConfig,
    stale_while_revalidate: Duration,
    stale_if_error: Duration,
    mem: quick_cache::sync::Cache<String, Slot, Weigh, quick_cache::DefaultHashBuilder, Evictions>,
    /// The most one key may weigh, forms included ([`shard_hot_target`]).
    weight_limit: u64,
    /// The fetches in flight, by key (and the lookups they count).
    flights: Arc<Flights>,
    shared: Option<SharedTier>,
    /// This node's disk tier (`[cache.disk]`).
    disk: Option<super::disk::DiskTier>,
    /// Invalidations sent to, and received from, the other processes sharing Redis.
    fan_out: Option<super::fanout::FanOut>,
    hits: AtomicU64,
    stale_served: AtomicU64,
    /// Bumped by every purge and ban, so that memoized pages are re-checked.
    generation: AtomicU64,
    /// Recent purges and bans (with Redis only), against records they did not remove.
    purges: Mutex<PurgeLog>,
    /// Bans by expression not yet applied to every object older than them.
    bans: super::ban_rule::BanList,
}

/// How many recent purges and bans are remembered (each a key or prefix and a time).
const PURGE_LOG_LEN: usize = 10_000;

/// What was purged, and when, so that a Redis record the purge did not reach (the Redis
/// breaker was open, the write queue full, or a ban on a Redis Cluster, which is not
/// scanned) is refused when it was made before the purge. Bounded: the last
/// [`PURGE_LOG_LEN`] purges, each forgotten once no record made before it can still
/// be in Redis (a record lives at most a lifetime and a stale window, each capped).
#[derive(Default)]
struct PurgeLog {
    order: std::collections::VecDeque<(u64, Purged)>,
    keys: HashMap<String, u64>,
    prefixes: HashMap<String, u64>,
    /// Surrogate keys purged.
    tags: HashMap<String, u64>,
    /// Bans by regular expression, the last [`BAN_LOG_LEN`], oldest first.
    bans: std::collections::VecDeque<(u64, Arc<super::ban_rule::BanRule>)>,
    /// When the memory tier was last dropped for invalidations it could not know
    /// (`fanout`): every record made before is refused. 0: never.
    floor: u64,
}

/// How many recent bans by regular expression are remembered against Redis records
/// (each is tested against every record read back from Redis, so fewer than purges).
const BAN_LOG_LEN: usize = 1_000;

enum Purged {
    Key(String),
    Prefix(String),
    /// A surrogate key.
    Tag(String),
}

impl PurgeLog {
    fn longest_record_ms() -> u64 {
        2 * MAX_LIFETIME.as_millis() as u64
    }

    fn record(&mut self, purged: Purged, now: u64) {
        while self
            .order
            .front()
            .is_some_and(|(t, _)| t.saturating_add(Self::longest_record_ms()) < now)
        {
            self.forget_oldest();
        }
        match &purged {
            Purged::Key(k) => self.keys.insert(k.clone(), now),
            Purged::Prefix(p) => self.prefixes.insert(p.clone(), now),
            Purged::Tag(t) => self.tags.insert(t.clone(), now),
        };
        self.order.push_back((now, purged));
        while self.order.len() > PURGE_LOG_LEN {
            self.forget_oldest();
        }
    }

    fn forget_oldest(&mut self) {
        let Some((t, purged)) = self.order.pop_front() else {
            return;
        };
        // A later purge of the same key or prefix keeps its own time.
        let (map, name) = match &purged {
            Purged::Key(k) => (&mut self.keys, k),
            Purged::Prefix(p) => (&mut self.prefixes, p),
            Purged::Tag(t) => (&mut self.tags, t),
        };
        if map.get(name) == Some(&t) {
            map.remove(name);
        }
    }

    fn record_ban(&mut self, rule: Arc<super::ban_rule::BanRule>, now: u64) {
        while self.bans.len() >= BAN_LOG_LEN
            || self
                .bans
                .front()
                .is_some_and(|(t, _)| t.saturating_add(Self::longest_record_ms()) < now)
        {
            self.bans.pop_front();
        }
        self.bans.push_back((now, rule));
    }

    /// When `key` was last banned by a regular expression that matches it.
    fn regex_banned_at(&self, key: &str) -> Option<u64> {
        self.bans
            .iter()
            .rev()
            .find(|(_, rule)| rule.matches(key))
            .map(|(t, _)| *t)
    }

    /// When an object with these surrogate keys was last purged by one of them.
    fn tag_purged_at(&self, tags: &[Box<str>]) -> Option<u64> {
        tags.iter()
            .filter_map(|t| self.tags.get(&**t))
            .copied()
            .max()
    }

    /// When `key` was last purged or banned (by a prefix of it), if remembered.
    fn purged_at(&self, key: &str) -> Option<u64> {
        let banned = self
            .prefixes
            .iter()
            .filter(|(p, _)| key.starts_with(p.as_str()))
            .map(|(_, t)| *t)
            .max();
        let floor = (self.floor > 0).then_some(self.floor);
        self.keys.get(key).copied().max(banned).max(floor)
    }
}

impl Cache {
    pub(crate) fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// Builds the memory tier and, with `[cache.redis]`, starts the shared tier's
    /// thread (it connects lazily, so a Redis that is down does not stop the start).
    pub fn new(config: &CacheConfig) -> Result<Arc<Cache>, ConfigError> {
        config.validate()?;
        let shared = match &config.redis {
            Some(r) if config.enabled => Some(SharedTier::start(r)?),
            _ => None,
        };
        let disk = match &config.disk {
            Some(d) if config.enabled => Some(super::disk::DiskTier::start(d.settings()?)?),
            _ => None,
        };
        let (fan_out, runner) = match &config.redis {
            Some(r) if config.enabled && r.fan_out => {
                let (f, runner) = super::fanout::FanOut::new(r)?;
                (Some(f), Some(runner))
            }
            _ => (None, None),
        };
        // quick_cache splits the budget across its shards; an object must fit one shard,
        // so small budgets get fewer shards.
        let per_object = 4 * config.max_object_size.max(1) as u64;
        let shards = (config.max_size / per_object).clamp(1, 64) as usize;
        // A power of two, rounded down, so every shard still fits four objects.
        let shards = 1usize << shards.ilog2();
        let estimated = (config.max_size / 8192).clamp(16, 1 << 20) as usize;
        let mem = quick_cache::sync::Cache::with_options(
            quick_cache::OptionsBuilder::new()
                .estimated_items_capacity(estimated)
                .weight_capacity(config.max_size)
                .shards(shards)
                .hot_allocation(HOT_ALLOCATION)
                .build()
                .map_err(|e| ConfigError::Invalid(format!("cache: {e:?}")))?,
            Weigh,
            Default::default(),
            Evictions,
        );
        let cache = Arc::new(Cache {
            stale_while_revalidate: crate::config::secs(config.stale_while_revalidate),
            stale_if_error: crate::config::secs(config.stale_if_error),
            config: config.clone(),
            mem,
            weight_limit: shard_hot_target(config.max_size, shards),
            flights: Arc::default(),
            shared,
            disk,
            fan_out,
            hits: AtomicU64::new(0),
            stale_served: AtomicU64::new(0),
            generation: AtomicU64::new(0),
            purges: Mutex::new(PurgeLog::default()),
            bans: Default::default(),
        });
        if let Some(runner) = runner {
            let weak: std::sync::Weak<dyn super::fanout::Invalidated> = Arc::downgrade(&cache) as _;
            runner.spawn(weak)?;
        }
        Ok(cache)
    }

    pub(crate) fn enabled(&self) -> bool {
        self.config.enabled
    }

    pub(crate) fn rules<'a>(&self, device_token: &'a str) -> Rules<'a> {
        Rules {
            device_token,
            default_stale_while_revalidate: self.stale_while_revalidate,
            default_stale_if_error: self.stale_if_error,
            store_set_cookie: self.config.store_set_cookie,
            route: None,
        }
    }

    /// Counters and sizes now.
    pub fn stats(&self) -> CacheStats {
        CacheStats {
            weight: self.mem.weight(),
            capacity: self.mem.capacity(),
            entries: self.mem.len(),
            hits: self.hits.load(Ordering::Relaxed),
            misses: self.flights.misses(),
            stale_served: self.stale_served.load(Ordering::Relaxed),
            coalesced: self.flights.coalesced(),
            shared: self.shared.as_ref().map(SharedTier::stats),
            fan_out: self.fan_out.as_ref().map(super::fanout::FanOut::stats),
            disk: self.disk.as_ref().map(super::disk::DiskTier::stats),
        }
    }

    pub(crate) fn count_hit(&self) {
        self.hits.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn count_miss(&self) {
        self.flights.count_miss();
    }

    pub(crate) fn count_stale(&self) {
        self.stale_served.fetch_add(1, Ordering::Relaxed);
    }

    /// The object stored for `key` and these request fields (`field` answers a
    /// lower-case field name with the request's value), fresh or not; `None` when there
    /// is none or it is past every stale window.
    pub(crate) fn lookup(
        &self,
        key: &str,
        field: &dyn Fn(&str) -> Option<HeaderValue>,
        now: u64,
    ) -> Option<Arc<Entry>> {
        self.lookup_marked(key, field, now).0
    }

    /// [`Cache::lookup`], and whether `key` is marked as one whose last response could
    /// not be stored, recently (see [`Slot::Pass`]), from the same read of its slot.
    pub(crate) fn lookup_marked(
        &self,
        key: &str,
        field: &dyn Fn(&str) -> Option<HeaderValue>,
        now: u64,
    ) -> (Option<Arc<Entry>>, bool) {
        let entry = match self.mem.get(key) {
            Some(Slot::Object(e, _)) => e,
            Some(Slot::Vary(names, until)) if now < until => {
                match self.mem.get(&variant_key(key, &names, field)) {
                    Some(Slot::Object(e, _)) => e,
                    _ => return (None, false),
                }
            }
            Some(Slot::Pass(until)) => return (None, now < until),
            Some(Slot::Vary(..)) | None => return (None, false),
        };
        // Bans by expression are tested when an object is next looked up (and by the
        // lurker in the background): the usual case, no ban pending, is one load.
        if self.bans.pending() && self.lazily_banned(&entry) {
            return (None, false);
        }
        ((!entry.useless(now)).then_some(entry), false)
    }

    /// Marks `key` as one whose response could not be stored (see [`Slot::Pass`]), unless
    /// memory holds an object for it (kept to be served if the origin fails) or a mark
    /// that lasts another half of its time (so that a key passed again and again is
    /// marked once a minute, not per request).
    pub(crate) fn mark_pass(&self, key: &str, now: u64) {
        let kept = |slot: &Slot| match slot {
            Slot::Object(..) | Slot::Vary(..) => true,
            Slot::Pass(until) => *until > now + PASS_MS / 2,
        };
        // The usual case, under the shard's read lock: marked already.
        if self.mem.get(key).is_some_and(|slot| kept(&slot)) {
            return;
        }
        // Decided and written under the write lock, so that an object another worker
        // stores meanwhile is never replaced by the mark.
        let until = now + PASS_MS;
        let result = self.mem.entry(key, Some(Duration::ZERO), |_, slot| {
            if !kept(slot) {
                *slot = Slot::Pass(until);
            }
            quick_cache::sync::EntryAction::Retain(())
        });
        if let quick_cache::sync::EntryResult::Vacant(guard) = result {
            let _ = guard.insert(Slot::Pass(until));
        }
    }

    /// Stores an object for `key` as fetched with these request fields, in memory and
    /// (in the background) in Redis and on disk. Objects above `max_object_size` go to
    /// disk only, when it takes them; else they are not stored.
    pub(crate) fn insert(
        &self,
        key: &str,
        field: &dyn Fn(&str) -> Option<HeaderValue>,
        entry: Arc<Entry>,
        now: u64,
    ) {
        let in_memory = entry.weight <= self.config.max_object_size as u64;
        let disk =
            (self.disk.as_ref()).filter(|d| entry.disk && entry.weight <= d.max_object_size());
        if !in_memory && disk.is_none() {
            return;
        }
        let names: Vec<String> = super::freshness::vary_names(&entry.headers).collect();
        let ttl = entry.remaining_secs(now);
        let until = now.saturating_add(ttl.saturating_mul(1000));
        let object_key = if names.is_empty() {
            key.to_string()
        } else {
            let names: Arc<[String]> = names.clone().into();
            let vk = variant_key(key, &names, field);
            if in_memory {
                self.mem
                    .insert(key.to_string(), Slot::Vary(names.clone(), until));
                if let Some(shared) = &self.shared {
                    shared.set(key, encode_vary(&names, until), ttl);
                }
            }
            vk
        };
        if let Some(disk) = disk {
            disk.write((key, &object_key), (&names, until), entry.clone(), now);
        }
        if !in_memory {
            return;
        }
        if let Some(shared) = &self.shared {
            shared.set(&object_key, entry.encode(), ttl);
        }
        self.store(object_key, entry);
        crate::metrics::stored();
    }

    /// Looks `key` up in the shared tier (Redis); what is still of use (fresh, or stale
    /// within a stale window) is copied into memory and returned. The caller decides
    /// what a stale one is good for, as for a memory object.
    pub(crate) async fn lookup_shared(
        &self,
        key: &str,
        field: &(dyn Fn(&str) -> Option<HeaderValue> + Sync),
        now: u64,
    ) -> Option<Arc<Entry>> {
        let shared = self.shared.as_ref()?;
        let raw = shared.get(key).await?;
        let (object_key, raw) = match decode_vary(&raw) {
            Some((names, until)) => {
                let vk = variant_key(key, &names, field);
                let raw = shared.get(&vk).await?;
                self.mem
                    .insert(key.to_string(), Slot::Vary(names.into(), until));
                (vk, raw)
            }
            None => (key.to_string(), raw),
        };
        let Some(entry) = Entry::decode(raw, self.config.max_object_size, now) else {
            shared.count_rejected();
            tracing::debug!(%object_key, "redis record refused");
            return None;
        };
        let purged = {
            let log = self.purges.lock().unwrap_or_else(|e| e.into_inner());
            log.purged_at(key)
                .max(log.tag_purged_at(&entry.keys))
                .max(log.regex_banned_at(&object_key))
        };
        if purged.is_some_and(|t| entry.born_ms <= t) {
            // Made before a purge that did not reach Redis.
            shared.count_rejected();
            tracing::debug!(%object_key, "redis record older than a purge refused");
            return None;
        }
        let entry = Arc::new(entry);
        if entry.useless(now) {
            return None;
        }
        self.store(object_key, entry.clone());
        crate::metrics::stored();
        Some(entry)
    }

    /// Removes `key` (and its variants) from memory, and remembers it against Redis
    /// records; how many objects memory held.
    pub(crate) fn purge(&self, key: &str) -> usize {
        self.generation.fetch_add(1, Ordering::AcqRel);
        let removed = match self.mem.remove(key) {
            Some((_, Slot::Pass(_))) => 0,
            Some((_, Slot::Vary(names, _))) => {
                let prefix = format!("{key}\0");
                let n = std::sync::atomic::AtomicU64::new(0);
                self.mem.retain(|k, _| {
                    let gone = k.starts_with(&prefix);
                    if gone {
                        n.fetch_add(1, Ordering::Relaxed);
                    }
                    !gone
                });
                drop(names);
                n.into_inner()
            }
            Some(_) => 1,
            None => 0,
        };
        crate::metrics::evicted(crate::metrics::Evicted::Purge, removed);
        // An object in both tiers counts once.
        let removed = removed.max(self.disk.as_ref().map_or(0, |d| d.purge(key)) as u64);
        if self.shared.is_some() {
            self.purges
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .record(Purged::Key(key.to_string()), now_ms_exact());
        }
        removed as usize
    }

    /// Removes every key starting with `prefix` from memory, and remembers it against
    /// Redis records; how many objects memory held.
    pub(crate) fn ban(&self, prefix: &str) -> usize {
        self.generation.fetch_add(1, Ordering::AcqRel);
        let n = std::sync::atomic::AtomicUsize::new(0);
        self.mem.retain(|k, slot| {
            let gone = k.starts_with(prefix);
            if gone && matches!(slot, Slot::Object(..)) {
                n.fetch_add(1, Ordering::Relaxed);
            }
            !gone
        });
        if self.shared.is_some() {
            self.purges
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .record(Purged::Prefix(prefix.to_string()), now_ms_exact());
        }
        crate::metrics::evicted(
            crate::metrics::Evicted::Ban,
            n.load(Ordering::Relaxed) as u64,
        );
        let on_disk = self.disk.as_ref().map_or(0, |d| {
            d.invalidate(|k, m| k.starts_with(prefix) || m.base.starts_with(prefix))
        });
        n.into_inner().max(on_disk)
    }
}

impl Cache {
    /// Puts `entry` in memory under `key`, weighed with the forms it has.
    fn store(&self, key: String, entry: Arc<Entry>) {
        // An entry is stored under one key (a Redis copy is a new entry).
        let _ = entry.stored_as.set(key.clone());
        entry.stored_ms.store(now_ms(), Ordering::Release);
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

impl Cache {
    /// What a waiter may serve of a leader's landed object: the object itself, unless it
    /// varies, in which case the variant for the waiter's own request fields (the
    /// leader's may be another language, another encoding...), if stored.
    pub(crate) fn landed_for(
        &self,
        key: &str,
        entry: Arc<Entry>,
        field: &dyn Fn(&str) -> Option<HeaderValue>,
    ) -> Option<Arc<Entry>> {
        if !entry.headers.contains(b"vary") {
            return Some(entry);
        }
        let now = now_ms();
        self.lookup(key, field, now).filter(|e| e.is_fresh(now))
    }

    /// Makes the caller the leader for `key` when nobody fetches it; for a background
    /// refresh, which nobody needs to wait for (not counted as coalesced).
    pub(crate) fn try_lead(&self, key: &str) -> Option<FlightGuard> {
        self.flights.try_lead(key)
    }

    /// Makes the caller the leader for `key`, or a waiter on the leader.
    pub(crate) fn join(&self, key: &str) -> Join {
        self.flights.join(key)
    }
}

/// The key of one variant: the base key, then each Vary field's value.
fn variant_key(key: &str, names: &[String], field: &dyn Fn(&str) -> Option<HeaderValue>) -> String {
    let mut k = String::with_capacity(key.len() + 32);
    k.push_str(key);
    k.push('\0');
    for n in names {
        k.push_str(n);
        k.push('=');
        if let Some(v) = field(n) {
            k.push_str(&String::from_utf8_lossy(v.as_bytes()));
        }
        k.push('\0');
    }
    k
}

fn encode_vary(names: &[String], until: u64) -> Vec<u8> {
    let mut out = b"TSV1".to_vec();
    out.extend_from_slice(&until.to_be_bytes());
    out.extend_from_slice(names.join(",").as_bytes());
    out
}

fn decode_vary(raw: &Bytes) -> Option<(Vec<String>, u64)> {
    let rest = raw.strip_prefix(b"TSV1")?;
    let until = u64::from_be_bytes(rest.get(..8)?.try_into().ok()?);
    let names = std::str::from_utf8(&rest[8..]).ok()?;
    Some((names.split(',').map(str::to_string).collect(), until))
}

/// The cache key of a URL: authority (normalised) then path and query.
pub(crate) fn key(authority: &str, path_and_query: &str) -> String {
    let mut k = String::with_capacity(authority.len() + path_and_query.len());
    k.push_str(authority);
    k.push_str(path_and_query);
    k
}

mod bans;
mod by_keys;
mod invalidate;
mod on_disk;
#[cfg(test)]
mod tests;
