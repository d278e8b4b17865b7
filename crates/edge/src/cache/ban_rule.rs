//! What a ban by regular expression matches (`BAN /` with `X-Ban-Url` and `X-Ban-Host`,
//! docs/cache.md, "Purging"): the URL and host of a cache key. The memory tier applies
//! it in `memory/bans.rs`.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};

use regex::Regex;

/// One ban: what a key's URL and host must match.
pub(crate) struct BanRule {
    url: Option<Regex>,
    host: Option<Regex>,
}

/// The most compiled program a ban's expression may make (regex's own default is
/// 10 MiB; a ban is a short pattern, and each one is kept in the ban list).
const REGEX_SIZE_LIMIT: usize = 1 << 20;

impl BanRule {
    /// From the `X-Ban-Url` and `X-Ban-Host` values (at least one); the error names the
    /// field whose expression does not compile.
    pub(crate) fn new(url: Option<&str>, host: Option<&str>) -> Result<BanRule, String> {
        let compile = |field: &str, pattern: Option<&str>| {
            pattern
                .map(|p| {
                    regex::RegexBuilder::new(p)
                        .size_limit(REGEX_SIZE_LIMIT)
                        .build()
                        .map_err(|e| format!("{field}: {e}"))
                })
                .transpose()
        };
        Ok(BanRule {
            url: compile("X-Ban-Url", url)?,
            host: compile("X-Ban-Host", host)?,
        })
    }

    /// Whether the object (or marker) under cache key `key` is banned: its host (the
    /// key up to the path) and URL (from the path to the end of the URL part: a key
    /// rule's digest and a variant's fields are not part of it) match.
    pub(crate) fn matches(&self, key: &str) -> bool {
        let path_at = key.find('/').unwrap_or(key.len());
        let (host, rest) = key.split_at(path_at);
        let url = rest.split([' ', '\0']).next().unwrap_or_default();
        self.url.as_ref().map_or(true, |r| r.is_match(url))
            && self.host.as_ref().map_or(true, |r| r.is_match(host))
    }
}

/// The bans by expression that an object older than them may still be in memory for
/// (Varnish's ban list): each is tested against an object when it is next looked up,
/// and the lurker's pass (`memory/bans.rs`) tests every object and then retires it.
#[derive(Default)]
pub(crate) struct BanList {
    /// How many bans the list holds: the lookup's test when none is, one load.
    pending: AtomicUsize,
    /// (when it was made, Unix ms; the ban), oldest first.
    list: RwLock<Vec<(u64, Arc<BanRule>)>>,
    /// Whether the lurker's thread runs.
    lurking: AtomicBool,
}

impl BanList {
    pub(crate) fn pending(&self) -> bool {
        self.pending.load(Ordering::Acquire) > 0
    }

    pub(crate) fn add(&self, at: u64, rule: Arc<BanRule>) {
        let mut list = self.list.write().unwrap_or_else(|e| e.into_inner());
        list.push((at, rule));
        self.pending.store(list.len(), Ordering::Release);
    }

    /// Whether an object put in memory at `stored_ms` under `key` is banned: a ban made
    /// at or after that time matches its key.
    pub(crate) fn bans(&self, key: &str, stored_ms: u64) -> bool {
        let list = self.list.read().unwrap_or_else(|e| e.into_inner());
        banned_by(&list, key, stored_ms)
    }

    /// The bans now, for one pass over memory.
    pub(crate) fn snapshot(&self) -> Vec<(u64, Arc<BanRule>)> {
        self.list.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Forgets the bans made at or before `upto`: every object older than them has been
    /// tested.
    pub(crate) fn retire(&self, upto: u64) {
        let mut list = self.list.write().unwrap_or_else(|e| e.into_inner());
        list.retain(|(at, _)| *at > upto);
        self.pending.store(list.len(), Ordering::Release);
    }

    /// Whether the caller is to start the lurker (none runs).
    pub(crate) fn start_lurking(&self) -> bool {
        !self.lurking.swap(true, Ordering::AcqRel)
    }

    /// Whether the lurker may stop: no ban is pending. A ban added as it stops (which
    /// started no lurker, this one running) keeps it going.
    pub(crate) fn stop_lurking(&self) -> bool {
        if self.pending() {
            return false;
        }
        self.lurking.store(false, Ordering::Release);
        !(self.pending() && self.start_lurking())
    }
}

/// Whether a ban of `list` made at or after `stored_ms` matches `key`.
pub(crate) fn banned_by(list: &[(u64, Arc<BanRule>)], key: &str, stored_ms: u64) -> bool {
    list.iter()
        .rev()
        .take_while(|(at, _)| *at >= stored_ms)
        .any(|(_, rule)| rule.matches(key))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ban_matches_the_url_and_host_of_a_key() {
        let rule = BanRule::new(Some(r"^/news/.*\.html$"), None).unwrap();
        assert!(rule.matches("a.example/news/x.html"));
        assert!(rule.matches("b.example/news/x.html\0accept-language=fr\0"));
        assert!(!rule.matches("a.example/news/x.htm"));
        assert!(!rule.matches("a.example/old/news/x.html"));
        // A key rule's digest is not part of the URL.
        let query = BanRule::new(Some(r"\?id=1$"), None).unwrap();
        assert!(query.matches("a.example/p?id=1 3f2a"));
        let host = BanRule::new(Some("^/news/"), Some(r"^a\.")).unwrap();
        assert!(host.matches("a.example/news/1"));
        assert!(!host.matches("b.example/news/1"));
        let whole_host = BanRule::new(None, Some("^b.example$")).unwrap();
        assert!(whole_host.matches("b.example/anything"));
        let e = BanRule::new(Some("(unclosed"), None).err().unwrap();
        assert!(e.starts_with("X-Ban-Url: "), "{e}");
    }

    #[test]
    fn a_ban_concerns_objects_stored_before_it_until_retired() {
        let list = BanList::default();
        assert!(!list.pending());
        list.add(100, Arc::new(BanRule::new(Some("^/a"), None).unwrap()));
        list.add(200, Arc::new(BanRule::new(Some("^/b"), None).unwrap()));
        assert!(list.pending());
        assert!(list.bans("h/a", 50) && list.bans("h/a", 100));
        assert!(!list.bans("h/a", 101), "stored after the ban");
        assert!(list.bans("h/b", 150) && !list.bans("h/c", 0));
        list.retire(150);
        assert!(!list.bans("h/a", 50) && list.bans("h/b", 50));
        assert!(list.start_lurking() && !list.start_lurking());
        assert!(!list.stop_lurking(), "a ban is pending");
        list.retire(200);
        assert!(list.stop_lurking() && list.start_lurking());
    }
}
