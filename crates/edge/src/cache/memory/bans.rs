//! Bans by regular expression (docs/cache.md, "Purging"): `BAN /` with `X-Ban-Url:
//! REGEX` and optionally `X-Ban-Host: REGEX` (Varnish's `ban("req.url ~ ...")`) bans
//! every object whose URL (path and query, as its key holds them) and host match. As in
//! Varnish, the ban is not applied at once: it joins the ban list, an object is tested
//! against the bans made after it was stored when it is next looked up, and the lurker,
//! a thread of its own while bans are pending, passes over memory and retires the bans
//! every object has been tested against. The Redis tier is not scanned: each process
//! remembers its recent bans and refuses a Redis record made before one that matches it.
//! What a ban matches is `cache::ban_rule`.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use quick_cache::sync::EntryAction;

use super::{Cache, Slot, PLACEHOLDER_WAIT};
use crate::cache::ban_rule::{banned_by, BanRule};
use crate::cache::Entry;
use crate::clock::{now_ms, now_ms_exact};

/// The lurker's pause before each pass. Also its margin: a ban is retired by a pass
/// that started this long after it, so that an object stored as the ban came (its time
/// taken just before it went into memory) was in memory when the pass began.
const LURKER_PAUSE: Duration = Duration::from_secs(1);

impl Cache {
    /// Adds a ban by expression: objects stored before now whose key `rule` matches are
    /// no longer served (tested on lookup), and the lurker removes them. With Redis, the
    /// ban is remembered against records.
    pub(crate) fn ban_matching(self: &Arc<Self>, rule: BanRule) {
        self.generation.fetch_add(1, Ordering::AcqRel);
        let rule = Arc::new(rule);
        let now = now_ms_exact();
        self.bans.add(now, rule.clone());
        if self.shared.is_some() {
            self.purges
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .record_ban(rule, now);
        }
        if self.bans.start_lurking() {
            let cache = Arc::downgrade(self);
            let started = std::thread::Builder::new()
                .name("tessera-ban-lurker".into())
                .spawn(move || lurk(cache));
            if let Err(e) = started {
                // Bans still apply on lookup; the next ban tries again.
                tracing::warn!(error = %e, "the ban lurker could not start");
                self.bans.stop_lurking();
            }
        }
    }

    /// Whether a pending ban concerns `entry` (looked up in memory); it is removed from
    /// memory then, unless another object took its key meanwhile.
    pub(super) fn lazily_banned(&self, entry: &Arc<Entry>) -> bool {
        let Some(key) = entry.stored_as.get() else {
            return false;
        };
        if !self.bans.bans(key, entry.stored_ms.load(Ordering::Acquire)) {
            return false;
        }
        let _ = self
            .mem
            .entry(key.as_str(), Some(PLACEHOLDER_WAIT), |_, slot| match slot {
                Slot::Object(e, _) if Arc::ptr_eq(e, entry) => EntryAction::Remove,
                _ => EntryAction::Retain(()),
            });
        crate::metrics::evicted(crate::metrics::Evicted::Ban, 1);
        true
    }

    /// One pass of the lurker: every object in memory tested against the bans pending
    /// now (those it matches removed), then the bans made a pause before the pass began
    /// retired.
    fn lurker_pass(&self) {
        let started = now_ms();
        let bans = self.bans.snapshot();
        let removed = AtomicUsize::new(0);
        self.mem.retain(|key, slot| match slot {
            Slot::Object(e, _) => {
                let gone = banned_by(&bans, key, e.stored_ms.load(Ordering::Acquire));
                if gone {
                    removed.fetch_add(1, Ordering::Relaxed);
                }
                !gone
            }
            _ => true,
        });
        crate::metrics::evicted(crate::metrics::Evicted::Ban, removed.into_inner() as u64);
        self.ban_on_disk(|key, stored_ms| banned_by(&bans, key, stored_ms));
        self.bans
            .retire(started.saturating_sub(LURKER_PAUSE.as_millis() as u64));
    }
}

/// The lurker's thread: passes while bans are pending; ends with the cache.
fn lurk(cache: Weak<Cache>) {
    loop {
        std::thread::sleep(LURKER_PAUSE);
        let Some(cache) = cache.upgrade() else {
            return;
        };
        cache.lurker_pass();
        if cache.bans.stop_lurking() {
            return;
        }
    }
}
