//! Bans by regular expression (docs/cache.md, "Purging"): `BAN /` with `X-Ban-Url:
//! REGEX` and optionally `X-Ban-Host: REGEX` (Varnish's `ban("req.url ~ ...")`) removes
//! every object whose URL (path and query, as its key holds them) and host match. The
//! memory tier is scanned at once; the Redis tier is not: each process remembers its
//! recent bans and refuses a Redis record made before one that matches it. What a ban
//! matches is `cache::ban_rule`.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use super::{Cache, Slot};
use crate::cache::ban_rule::BanRule;
use crate::clock::now_ms;

impl Cache {
    /// Removes every key `rule` matches from memory (objects, variants, markers);
    /// how many objects memory held. With Redis, the ban is remembered against records.
    pub(crate) fn ban_matching(&self, rule: BanRule) -> usize {
        self.generation.fetch_add(1, Ordering::AcqRel);
        let n = AtomicUsize::new(0);
        self.mem.retain(|key, slot| {
            let gone = rule.matches(key);
            if gone && matches!(slot, Slot::Object(..)) {
                n.fetch_add(1, Ordering::Relaxed);
            }
            !gone
        });
        if self.shared.is_some() {
            self.purges
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .record_ban(Arc::new(rule), now_ms());
        }
        let n = n.into_inner();
        crate::metrics::invalidated(true);
        crate::metrics::evicted(crate::metrics::Evicted::Ban, n as u64);
        n
    }
}
