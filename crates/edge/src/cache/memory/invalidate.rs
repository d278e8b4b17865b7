//! Invalidations as a whole (docs/cache.md, "Purging"): a client's, applied here, its
//! Redis records removed and sent to the other processes sharing Redis (`fanout`); and
//! theirs, applied here only. When what was missed cannot be known, the memory tier is
//! dropped.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::cache::ban_rule::BanRule;
use crate::cache::fanout::{Invalidated, Invalidation};
use crate::clock::now_ms;

use super::Cache;

impl Cache {
    /// A client's PURGE or BAN: applied to memory, remembered against Redis records,
    /// removed from Redis (a URL, a prefix) and sent to the other processes. How many
    /// objects memory held (removed, or marked stale by a soft purge); `None` for a ban
    /// by expression, applied lazily. An expression that does not compile is an error
    /// naming its field.
    pub(crate) fn invalidate(
        self: &Arc<Self>,
        what: Invalidation,
    ) -> Result<Option<usize>, String> {
        let n = match &what {
            Invalidation::Purge { key, soft } => {
                let n = if *soft {
                    self.soft_purge(key)
                } else {
                    self.purge(key)
                };
                if let Some(shared) = &self.shared {
                    // A soft purge too: the next fill writes a fresh record.
                    shared.purge(key);
                }
                Some(n)
            }
            Invalidation::PurgeKeys { keys, soft } => {
                let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
                Some(self.purge_keys(&keys, *soft))
            }
            Invalidation::Ban { prefix } => {
                let n = self.ban(prefix);
                if let Some(shared) = &self.shared {
                    shared.ban(prefix);
                }
                Some(n)
            }
            Invalidation::BanMatching { url, host } => {
                self.ban_matching(BanRule::new(url.as_deref(), host.as_deref())?);
                None
            }
        };
        crate::metrics::invalidated(matches!(
            what,
            Invalidation::Ban { .. } | Invalidation::BanMatching { .. }
        ));
        if let Some(fan_out) = &self.fan_out {
            fan_out.send(what);
        }
        Ok(n)
    }
}

impl Invalidated for Cache {
    /// Another process's invalidation: applied to memory and remembered against Redis
    /// records (that process removed what it could from Redis).
    fn apply_remote(self: Arc<Self>, what: &Invalidation) {
        match what {
            Invalidation::Purge { key, soft: false } => {
                self.purge(key);
            }
            Invalidation::Purge { key, soft: true } => {
                self.soft_purge(key);
            }
            Invalidation::PurgeKeys { keys, soft } => {
                let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
                self.purge_keys(&keys, *soft);
            }
            Invalidation::Ban { prefix } => {
                self.ban(prefix);
            }
            Invalidation::BanMatching { url, host } => {
                match BanRule::new(url.as_deref(), host.as_deref()) {
                    Ok(rule) => self.ban_matching(rule),
                    // Compiled by the process that sent it: only a different regex
                    // engine could refuse it. What it bans is unknown here.
                    Err(e) => {
                        tracing::warn!(error = %e, "another process's ban does not compile here");
                        self.drop_memory("a ban by expression that does not compile here");
                    }
                }
            }
        }
    }

    /// Whether the memory tier holds nothing (not even a marker).
    fn memory_empty(&self) -> bool {
        self.mem.is_empty()
    }

    /// Drops every object of the memory tier, and refuses every Redis record made
    /// before now: invalidations were missed and which is not known.
    fn drop_memory(&self, why: &str) {
        self.generation.fetch_add(1, Ordering::AcqRel);
        let objects = std::sync::atomic::AtomicU64::new(0);
        self.mem.retain(|_, slot| {
            if matches!(slot, super::Slot::Object(..)) {
                objects.fetch_add(1, Ordering::Relaxed);
            }
            false
        });
        let objects = objects.into_inner();
        self.ban_on_disk(|_, _| true);
        self.purges.lock().unwrap_or_else(|e| e.into_inner()).floor = now_ms();
        crate::metrics::evicted(crate::metrics::Evicted::Purge, objects);
        tracing::warn!(
            objects,
            "invalidations from other processes may have been missed ({why}): the memory tier is dropped"
        );
    }
}
