//! What a handler notes about one request for the access log: each upstream attempt, the
//! cache's result and an ESI page's includes (`%{upstream_addr}x`, `%{cache}x`,
//! `%{esi_failed}x`...).
//!
//! The server makes a [`LogNotes`] only for a request whose site's log writes one of
//! those fields, and hands it to the handler with the request ([`crate::Request::notes`]);
//! the handler fills it as it works and the server reads it when it writes the line, also
//! for a request the handler failed (a 502). A request whose log writes none of them gets
//! none, and costs nothing.

use std::cell::RefCell;
use std::rc::Rc;
use std::time::{Duration, Instant};

/// A request's notes, shared by the server and the handler that fills them (cloning is
/// cheap and shares them). The last of a request's handles to go gives the notes, emptied,
/// to the next request on the same thread: their allocations (the notes and the list of
/// attempts) are made once per thread, not per request.
#[derive(Debug, Clone)]
pub struct LogNotes(Rc<RefCell<Noted>>);

/// Emptied notes kept for the next requests of this thread, at most [`SPARE_NOTES`].
const SPARE_NOTES: usize = 256;

thread_local! {
    static SPARE: RefCell<Vec<Rc<RefCell<Noted>>>> = const { RefCell::new(Vec::new()) };
}

impl Default for LogNotes {
    fn default() -> LogNotes {
        let spare = SPARE.try_with(|s| s.borrow_mut().pop()).ok().flatten();
        LogNotes(spare.unwrap_or_default())
    }
}

impl Drop for LogNotes {
    fn drop(&mut self) {
        if Rc::strong_count(&self.0) != 1 {
            return;
        }
        let Ok(mut noted) = self.0.try_borrow_mut() else {
            return;
        };
        noted.clear();
        drop(noted);
        let _ = SPARE.try_with(|s| {
            let mut spare = s.borrow_mut();
            if spare.len() < SPARE_NOTES {
                spare.push(self.0.clone());
            }
        });
    }
}

impl Noted {
    /// Empties the notes, keeping their lists' room.
    fn clear(&mut self) {
        let Noted {
            attempts,
            cache,
            esi_fragments,
            esi_failed,
            not_retried,
            vars,
        } = self;
        attempts.clear();
        *cache = None;
        *esi_fragments = 0;
        esi_failed.clear();
        *not_retried = None;
        vars.clear();
    }
}

/// What [`LogNotes`] holds.
#[derive(Debug, Default)]
pub struct Noted {
    /// Each upstream attempt, in order.
    pub attempts: Vec<UpstreamAttempt>,
    /// What the cache did, when the request went through it.
    pub cache: Option<CacheResult>,
    /// The ESI includes of an assembled page, at every level.
    pub esi_fragments: usize,
    /// The `src` of each of those that failed (its `alt` too), in the order they failed.
    pub esi_failed: Vec<String>,
    /// Why a failed upstream attempt was not tried on another peer that was left:
    /// `body_sent` (a request body streaming to the peer had begun to go out).
    pub not_retried: Option<&'static str>,
    /// The variables a script wrote (`r.var.NAME = v` of a name its `vars` declares), by
    /// name: `%{var_NAME}x`.
    pub vars: Vec<(Box<str>, Vec<u8>)>,
}

/// One attempt on one upstream peer.
#[derive(Debug, Clone)]
pub struct UpstreamAttempt {
    /// The peer's address as configured (`127.0.0.1:8080`, `unix:/run/app.sock`), shared
    /// with the upstream's peer set rather than copied per request.
    pub peer: std::sync::Arc<str>,
    /// The status of its response; `None` when none came.
    pub status: Option<u16>,
    /// For an attempt without a response: whether it ran out of time (nginx logs 504 for
    /// it, else 502).
    pub timed_out: bool,
    /// Time to connect: zero on a pooled connection, `None` when it did not connect.
    pub connect: Option<Duration>,
    /// Time to the response head, `None` without one.
    pub header: Option<Duration>,
    /// When it started.
    pub started: Instant,
    /// Its whole time, once it ended; `None` for the attempt whose response is being
    /// sent, whose time runs until the log line is written.
    pub total: Option<Duration>,
}

/// What the cache did for a request (`%{cache}x`), in nginx's `$upstream_cache_status`
/// words, lower case.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheResult {
    /// Served from the cache, fresh.
    Hit,
    /// Fetched from the origin (and stored if it could be).
    Miss,
    /// Served stale: while it is refreshed, or because the origin failed.
    Stale,
    /// Sent to the origin without a lookup or a fill (not a GET, a `no-store`
    /// request, a key whose responses cannot be stored).
    Pass,
    /// Served from another request's fetch of the same key, waited for.
    Collapsed,
    /// Served from the cache after the origin confirmed it (a 304).
    Revalidated,
}

impl CacheResult {
    pub fn as_str(self) -> &'static str {
        match self {
            CacheResult::Hit => "hit",
            CacheResult::Miss => "miss",
            CacheResult::Stale => "stale",
            CacheResult::Pass => "pass",
            CacheResult::Collapsed => "collapsed",
            CacheResult::Revalidated => "revalidated",
        }
    }
}

impl LogNotes {
    /// Records a variable a script wrote (the last value of a name stands).
    pub fn var(&self, name: &str, value: &[u8]) {
        let vars = &mut self.0.borrow_mut().vars;
        vars.retain(|(n, _)| **n != *name);
        vars.push((name.into(), value.to_vec()));
    }

    /// Records the cache's result (the last one recorded stands).
    pub fn cache(&self, result: CacheResult) {
        self.0.borrow_mut().cache = Some(result);
    }

    /// Records an upstream attempt.
    pub fn attempt(&self, attempt: UpstreamAttempt) {
        self.0.borrow_mut().attempts.push(attempt);
    }

    /// Records why a failed attempt was not tried on another peer.
    pub fn not_retried(&self, why: &'static str) {
        self.0.borrow_mut().not_retried = Some(why);
    }

    /// Records `count` ESI includes, all of them answered.
    pub fn fragments(&self, count: usize) {
        self.0.borrow_mut().esi_fragments += count;
    }

    /// Records one ESI include, answered or failed (`src`: its source).
    pub fn fragment(&self, src: &str, answered: bool) {
        let mut noted = self.0.borrow_mut();
        noted.esi_fragments += 1;
        if !answered {
            noted.esi_failed.push(src.to_string());
        }
    }

    /// What has been noted.
    pub fn noted(&self) -> std::cell::Ref<'_, Noted> {
        self.0.borrow()
    }
}
