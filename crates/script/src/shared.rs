//! Dictionaries shared by every worker (`shared.NAME` in Lua): sharded maps behind short
//! mutexes, with a time to live per key. A worker holds a shard's lock only for one
//! lookup or update, never across a Lua call.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

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
    max_per_shard: usize,
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
            max_per_shard: max_entries.div_ceil(SHARDS).max(1),
        }
    }

    fn shard(&self, key: &[u8]) -> MutexGuard<'_, HashMap<Vec<u8>, Entry>> {
        // FNV-1a: keys are short, and the hash only picks a shard.
        let mut h: u32 = 0x811c_9dc5;
        for &b in key {
            h = (h ^ b as u32).wrapping_mul(0x0100_0193);
        }
        // A panic while holding a shard cannot leave an entry half-written (every
        // update is one insert or remove), so a poisoned lock is still consistent.
        self.shards[h as usize % SHARDS]
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// The live value of `key`.
    pub fn get(&self, key: &[u8]) -> Option<Value> {
        let now = Instant::now();
        let mut shard = self.shard(key);
        match shard.get(key) {
            Some(e) if e.live(now) => Some(e.value.clone()),
            Some(_) => {
                shard.remove(key);
                None
            }
            None => None,
        }
    }

    /// Stores `value` under `key`, for `ttl` (forever when `None`).
    pub fn set(&self, key: &[u8], value: Value, ttl: Option<Duration>) -> Result<(), DictError> {
        let now = Instant::now();
        let mut shard = self.shard(key);
        self.make_room(&mut shard, key, now)?;
        shard.insert(
            key.to_vec(),
            Entry {
                value,
                expires: ttl.map(|t| now + t),
            },
        );
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
        let mut shard = self.shard(key);
        if let Some(e) = shard.get_mut(key).filter(|e| e.live(now)) {
            let Value::Number(n) = &mut e.value else {
                return Err(DictError::NotANumber);
            };
            *n += by;
            return Ok(*n);
        }
        self.make_room(&mut shard, key, now)?;
        shard.insert(
            key.to_vec(),
            Entry {
                value: Value::Number(init + by),
                expires: ttl.map(|t| now + t),
            },
        );
        Ok(init + by)
    }

    pub fn delete(&self, key: &[u8]) {
        self.shard(key).remove(key);
    }

    fn make_room(
        &self,
        shard: &mut HashMap<Vec<u8>, Entry>,
        key: &[u8],
        now: Instant,
    ) -> Result<(), DictError> {
        if shard.len() < self.max_per_shard || shard.contains_key(key) {
            return Ok(());
        }
        shard.retain(|_, e| e.live(now));
        if shard.len() < self.max_per_shard {
            Ok(())
        } else {
            Err(DictError::Full)
        }
    }
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
        let d = Dict::new(SHARDS);
        let mut refused = 0;
        for i in 0..200u32 {
            if d.set(&i.to_be_bytes(), Value::Number(1.0), None).is_err() {
                refused += 1;
            }
        }
        assert!(refused >= 200 - SHARDS, "refused {refused}");
        assert!(refused < 200);
    }
}
