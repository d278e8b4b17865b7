//! Dictionaries shared by every worker (`shared.NAME` in Lua): sharded maps behind short
//! mutexes, with a time to live per key. A worker holds a shard's lock only for one
//! lookup or update, never across a Lua call.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use mlua::Value as LuaValue;

use crate::config::SharedDictConfig;

const SHARDS: usize = 16;

/// A stored value: what Lua may put in.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Bytes(Vec<u8>),
    Number(f64),
    Bool(bool),
}

struct Entry {
    value: Value,
    expires: Option<Instant>,
}

impl Entry {
    fn live(&self, now: Instant) -> bool {
        self.expires.is_none_or(|t| t > now)
    }
}

/// One dictionary.
pub struct Dict {
    shards: Vec<Mutex<HashMap<Vec<u8>, Entry>>>,
    max_entries: usize,
    /// Entries stored in all shards (live or expired but not yet removed): the limit is
    /// on the whole dictionary, whatever shards its keys hash to.
    len: AtomicUsize,
    /// The earliest expiry of an entry stored since the last sweep, in nanoseconds since
    /// `epoch` (`u64::MAX`: none). A full dictionary sweeps its shards for expired
    /// entries only once one may have expired, so a full dictionary of live keys
    /// refuses a new one at the cost of an atomic load, not a walk over every entry.
    next_expiry: AtomicU64,
    epoch: Instant,
}
/// Why an update failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DictError {
    /// The dictionary holds `max_entries` live keys.
    Full,
    /// `incr` on a value that is not a number.
    NotANumber,
}

impl DictError {
    pub fn as_str(self) -> &'static str {
        match self {
            DictError::Full => "full",
            DictError::NotANumber => "not a number",
        }
    }
}

impl Dict {
    fn new(max_entries: usize) -> Dict {
        Dict {
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            max_entries,
            len: AtomicUsize::new(0),
            next_expiry: AtomicU64::new(u64::MAX),
            epoch: Instant::now(),
        }
    }

    fn shard_of(&self, key: &[u8]) -> &Mutex<HashMap<Vec<u8>, Entry>> {
        // FNV-1a: keys are short, and the hash only picks a shard.
        let mut h: u32 = 0x811c_9dc5;
        for &b in key {
            h = (h ^ b as u32).wrapping_mul(0x0100_0193);
        }
        &self.shards[h as usize % SHARDS]
    }

    fn shard(&self, key: &[u8]) -> MutexGuard<'_, HashMap<Vec<u8>, Entry>> {
        lock(self.shard_of(key))
    }

    /// The live value of `key`.
    pub fn get(&self, key: &[u8]) -> Option<Value> {
        let now = Instant::now();
        let mut shard = self.shard(key);
        match shard.get(key) {
            Some(e) if e.live(now) => Some(e.value.clone()),
            Some(_) => {
                shard.remove(key);
                self.len.fetch_sub(1, Ordering::Relaxed);
                None
            }
            None => None,
        }
    }

    /// Stores `value` under `key`, for `ttl` (forever when `None`).
    pub fn set(&self, key: &[u8], value: Value, ttl: Option<Duration>) -> Result<(), DictError> {
        let now = Instant::now();
        let mut shard = self.admit(key, now)?;
        self.insert(&mut shard, key, value, ttl, now);
        Ok(())
    }

    /// Adds `by` to the number under `key` (a missing or expired key counts from `init`,
    /// with `ttl`) and returns the new value.
    pub fn incr(
        &self,
        key: &[u8],
        by: f64,
        init: f64,
        ttl: Option<Duration>,
    ) -> Result<f64, DictError> {
        let now = Instant::now();
        {
            let mut shard = self.shard(key);
            if let Some(e) = shard.get_mut(key).filter(|e| e.live(now)) {
                let Value::Number(n) = &mut e.value else {
                    return Err(DictError::NotANumber);
                };
                *n += by;
                return Ok(*n);
            }
        }
        let mut shard = self.admit(key, now)?;
        // Another worker may have stored the key between the two locks.
        if let Some(e) = shard.get_mut(key).filter(|e| e.live(now)) {
            let Value::Number(n) = &mut e.value else {
                return Err(DictError::NotANumber);
            };
            *n += by;
            return Ok(*n);
        }
        self.insert(&mut shard, key, Value::Number(init + by), ttl, now);
        Ok(init + by)
    }

    pub fn delete(&self, key: &[u8]) {
        if self.shard(key).remove(key).is_some() {
            self.len.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// The locked shard of `key` with room for it: the key is there already (an update),
    /// or the dictionary holds fewer than `max_entries` entries and one is counted for
    /// it. Only when full are expired entries swept, from every shard, one at a time and
    /// without holding `key`'s (no lock is ever taken while holding another).
    fn admit(
        &self,
        key: &[u8],
        now: Instant,
    ) -> Result<MutexGuard<'_, HashMap<Vec<u8>, Entry>>, DictError> {
        let shard = self.shard(key);
        if shard.contains_key(key) || self.reserve() {
            return Ok(shard);
        }
        drop(shard);
        if self.nanos(now) >= self.next_expiry.load(Ordering::Relaxed) {
            self.sweep(now);
        }
        let shard = self.shard(key);
        if shard.contains_key(key) || self.reserve() {
            Ok(shard)
        } else {
            Err(DictError::Full)
        }
    }

    /// Counts one more entry, unless the dictionary is full.
    fn reserve(&self) -> bool {
        self.len
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                (n < self.max_entries).then_some(n + 1)
            })
            .is_ok()
    }

    /// Stores an entry in a shard from [`Dict::admit`] (its count is already taken when
    /// the key is new).
    fn insert(
        &self,
        shard: &mut HashMap<Vec<u8>, Entry>,
        key: &[u8],
        value: Value,
        ttl: Option<Duration>,
        now: Instant,
    ) {
        let expires = ttl.map(|t| now + t);
        if let Some(at) = expires {
            self.next_expiry
                .fetch_min(self.nanos(at), Ordering::Relaxed);
        }
        shard.insert(key.to_vec(), Entry { value, expires });
    }

    /// Removes expired entries from every shard and notes the next expiry.
    fn sweep(&self, now: Instant) {
        // Reset first: an entry stored during the sweep lowers it again.
        self.next_expiry.store(u64::MAX, Ordering::Relaxed);
        let mut next = u64::MAX;
        for shard in &self.shards {
            let mut shard = lock(shard);
            let before = shard.len();
            shard.retain(|_, e| e.live(now));
            self.len.fetch_sub(before - shard.len(), Ordering::Relaxed);
            for at in shard.values().filter_map(|e| e.expires) {
                next = next.min(self.nanos(at));
            }
        }
        self.next_expiry.fetch_min(next, Ordering::Relaxed);
    }

    fn nanos(&self, at: Instant) -> u64 {
        at.saturating_duration_since(self.epoch)
            .as_nanos()
            .try_into()
            .unwrap_or(u64::MAX - 1)
    }
}

fn lock(shard: &Mutex<HashMap<Vec<u8>, Entry>>) -> MutexGuard<'_, HashMap<Vec<u8>, Entry>> {
    // A panic while holding a shard cannot leave an entry half-written (every update is
    // one insert or remove), so a poisoned lock is still consistent.
    shard.lock().unwrap_or_else(|e| e.into_inner())
}

/// Every `[[shared_dict]]`, by name.
#[derive(Default)]
pub struct SharedDicts {
    dicts: HashMap<String, Dict>,
}

impl SharedDicts {
    pub fn new(configs: &[SharedDictConfig]) -> SharedDicts {
        SharedDicts {
            dicts: configs
                .iter()
                .map(|c| (c.name.clone(), Dict::new(c.max_entries)))
                .collect(),
        }
    }

    pub fn get(&self, name: &str) -> Option<&Dict> {
        self.dicts.get(name)
    }

    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.dicts.keys().map(String::as_str)
    }
}

/// `shared.NAME` in Lua.
pub(crate) struct DictHandle {
    dicts: Arc<SharedDicts>,
    name: String,
}

impl DictHandle {
    pub(crate) fn new(dicts: Arc<SharedDicts>, name: &str) -> DictHandle {
        DictHandle {
            dicts,
            name: name.to_string(),
        }
    }

    fn dict(&self) -> &Dict {
        self.dicts
            .get(&self.name)
            .expect("handles are made for configured dictionaries only")
    }
}

fn ttl(seconds: Option<f64>) -> mlua::Result<Option<Duration>> {
    match seconds {
        None => Ok(None),
        Some(0.0) => Ok(None),
        Some(s) if s.is_finite() && s > 0.0 => Ok(Some(Duration::from_secs_f64(s))),
        Some(_) => Err(mlua::Error::runtime("ttl must be >= 0 seconds")),
    }
}

impl mlua::UserData for DictHandle {
    fn add_methods<M: mlua::UserDataMethods<Self>>(m: &mut M) {
        m.add_method("get", |lua, d, key: mlua::String| {
            Ok(match d.dict().get(&key.as_bytes()) {
                None => LuaValue::Nil,
                Some(Value::Bytes(b)) => LuaValue::String(lua.create_string(&b)?),
                Some(Value::Number(n)) => LuaValue::Number(n),
                Some(Value::Bool(b)) => LuaValue::Boolean(b),
            })
        });
        m.add_method(
            "set",
            |lua, d, (key, value, seconds): (mlua::String, LuaValue, Option<f64>)| {
                let value = match value {
                    LuaValue::Nil => {
                        d.dict().delete(&key.as_bytes());
                        return Ok((true, LuaValue::Nil));
                    }
                    LuaValue::String(s) => Value::Bytes(s.as_bytes().to_vec()),
                    LuaValue::Integer(i) => Value::Number(i as f64),
                    LuaValue::Number(n) => Value::Number(n),
                    LuaValue::Boolean(b) => Value::Bool(b),
                    other => {
                        return Err(mlua::Error::runtime(format!(
                            "cannot store a {} in a shared dictionary",
                            other.type_name()
                        )))
                    }
                };
                match d.dict().set(&key.as_bytes(), value, ttl(seconds)?) {
                    Ok(()) => Ok((true, LuaValue::Nil)),
                    Err(e) => Ok((false, LuaValue::String(lua.create_string(e.as_str())?))),
                }
            },
        );
        m.add_method(
            "incr",
            |lua, d, (key, by, init, seconds): (mlua::String, f64, Option<f64>, Option<f64>)| {
                match d
                    .dict()
                    .incr(&key.as_bytes(), by, init.unwrap_or(0.0), ttl(seconds)?)
                {
                    Ok(n) => Ok((LuaValue::Number(n), LuaValue::Nil)),
                    Err(e) => Ok((
                        LuaValue::Nil,
                        LuaValue::String(lua.create_string(e.as_str())?),
                    )),
                }
            },
        );
        m.add_method("delete", |_, d, key: mlua::String| {
            d.dict().delete(&key.as_bytes());
            Ok(())
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ttl_expires_and_incr_counts_from_init() {
        let d = Dict::new(100);
        d.set(
            b"a",
            Value::Bytes(b"x".to_vec()),
            Some(Duration::from_millis(1)),
        )
        .unwrap();
        std::thread::sleep(Duration::from_millis(5));
        assert_eq!(d.get(b"a"), None);
        assert_eq!(d.incr(b"n", 2.0, 10.0, None), Ok(12.0));
        assert_eq!(d.incr(b"n", 1.0, 0.0, None), Ok(13.0));
        d.set(b"s", Value::Bool(true), None).unwrap();
        assert_eq!(d.incr(b"s", 1.0, 0.0, None), Err(DictError::NotANumber));
    }

    #[test]
    fn full_dictionary_refuses_new_keys_but_updates_old_ones() {
        // The limit is the whole dictionary's, however the keys spread over the shards.
        let d = Dict::new(100);
        for i in 0..100u32 {
            d.set(&i.to_be_bytes(), Value::Number(1.0), None)
                .unwrap_or_else(|e| panic!("key {i}: {e:?}"));
        }
        assert_eq!(
            d.set(b"one more", Value::Number(1.0), None),
            Err(DictError::Full)
        );
        assert_eq!(d.incr(b"one more", 1.0, 0.0, None), Err(DictError::Full));
        assert_eq!(d.set(&7u32.to_be_bytes(), Value::Number(2.0), None), Ok(()));
        assert_eq!(d.incr(&7u32.to_be_bytes(), 1.0, 0.0, None), Ok(3.0));
        d.delete(&7u32.to_be_bytes());
        assert_eq!(d.set(b"one more", Value::Number(1.0), None), Ok(()));
    }

    #[test]
    fn expired_entries_make_room_in_a_full_dictionary() {
        let d = Dict::new(50);
        for i in 0..50u32 {
            d.set(
                &i.to_be_bytes(),
                Value::Bool(true),
                Some(Duration::from_millis(1)),
            )
            .unwrap();
        }
        // Polls until the last key set (so every key) has expired, however loaded the
        // machine. Reading it removes it; the other 49 expired entries are still there.
        let deadline = Instant::now() + Duration::from_secs(10);
        while d.get(&49u32.to_be_bytes()).is_some() {
            assert!(Instant::now() < deadline, "the entries never expired");
            std::thread::yield_now();
        }
        // The first new key takes the freed place; the next finds the dictionary full
        // of expired entries, which the sweep removes.
        d.set(b"new", Value::Bool(true), None).unwrap();
        for i in 0..49u32 {
            d.set(format!("k{i}").as_bytes(), Value::Bool(true), None)
                .unwrap();
        }
        assert_eq!(
            d.set(b"full", Value::Bool(true), None),
            Err(DictError::Full)
        );
    }
}
