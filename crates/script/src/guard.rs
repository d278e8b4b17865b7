//! Limits on what a script may do to its worker: a time limit per call into Lua and a
//! guard on pattern functions. (The memory limit is mlua's, set on each state.)
//!
//! **Time.** LuaJIT's count hooks do not fire inside compiled loops, so a hook set for
//! every call would never stop `while true do end` once it is JIT-compiled, and would
//! slow every instruction of the interpreter besides. Instead:
//! - LuaJIT is built with `LUAJIT_ENABLE_CHECKHOOK` (see `.cargo/config.toml`): compiled
//!   loops test whether a hook is set and, if so, leave the trace for the interpreter,
//!   which runs it. While no hook is set that test is one load and branch per iteration.
//! - One watchdog thread (per [`crate::Scripts`]) ticks a coarse clock every
//!   [`TICK`] and looks at each worker's [`WorkerGuard`]: when a worker has been inside
//!   one call longer than its limit, the watchdog sets a count hook on that worker's
//!   state. `lua_sethook` is documented as safe to call asynchronously (from a signal
//!   handler, so also from another thread): it stores the hook and updates the dispatch
//!   table with plain word writes.
//! - The hook runs on the worker's thread at the next instruction, checks that the call
//!   it interrupts is really over its limit (the worker may have moved on to another
//!   call since the watchdog looked) and raises a Lua error, which unwinds to the call's
//!   `pcall`: the request gets a 500 and the worker goes on. It stays set until the call
//!   ends, so a script that catches the error (`pcall`) gets it again at its next
//!   instruction.
//!
//! **Patterns.** `string.find/match/gmatch/gsub` run in C and cannot be interrupted, and a
//! backtracking pattern is polynomial (or worse) in the subject's length. They are
//! replaced by wrappers that estimate the worst case first (see [`pattern_cost`]) and
//! raise an error instead of running a match that could take minutes.

use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use mlua::ffi;

/// The watchdog's resolution: a call is stopped between its limit and its limit plus
/// two ticks.
pub const TICK: Duration = Duration::from_millis(10);

/// The shared coarse clock and the guards of every worker.
pub(crate) struct Watchdog {
    /// Ticks since start, advanced by the watchdog thread.
    ticks: AtomicU64,
    guards: Mutex<Vec<Weak<WorkerGuard>>>,
    stop: AtomicBool,
}

/// What the watchdog knows about one worker's Lua state.
pub(crate) struct WorkerGuard {
    watchdog: Arc<Watchdog>,
    /// The tick the current call started at plus one; 0 when not inside Lua.
    started: AtomicU64,
    /// Ticks the current call may run.
    limit: AtomicU64,
    /// The worker's main Lua state (hooks are per global state in LuaJIT).
    state: AtomicPtr<ffi::lua_State>,
}

impl Watchdog {
    pub(crate) fn start() -> Arc<Watchdog> {
        let watchdog = Arc::new(Watchdog {
            ticks: AtomicU64::new(1),
            guards: Mutex::new(Vec::new()),
            stop: AtomicBool::new(false),
        });
        let weak = Arc::downgrade(&watchdog);
        let spawned = std::thread::Builder::new()
            .name("tessera-lua-watchdog".into())
            .spawn(move || loop {
                std::thread::sleep(TICK);
                let Some(w) = weak.upgrade() else { return };
                if w.stop.load(Ordering::Relaxed) {
                    return;
                }
                w.tick();
            });
        if let Err(e) = spawned {
            tracing::error!(error = %e, "cannot start the Lua watchdog: scripts run without a time limit");
        }
        watchdog
    }

    fn tick(&self) {
        let now = self.ticks.fetch_add(1, Ordering::Relaxed) + 1;
        let mut guards = self.guards.lock().unwrap_or_else(|e| e.into_inner());
        guards.retain(|g| g.strong_count() > 0);
        for guard in guards.iter().filter_map(Weak::upgrade) {
            if guard.over_limit(now) {
                let state = guard.state.load(Ordering::Acquire);
                if !state.is_null() {
                    // SAFETY: `state` is the worker's live main state (the guard is
                    // unregistered before the state closes), and lua_sethook may be
                    // called asynchronously.
                    unsafe { ffi::lua_sethook(state, Some(on_hook), ffi::LUA_MASKCOUNT, 1) };
                }
            }
        }
    }

    pub(crate) fn guard(self: &Arc<Self>, state: *mut ffi::lua_State) -> Arc<WorkerGuard> {
        let guard = Arc::new(WorkerGuard {
            watchdog: self.clone(),
            started: AtomicU64::new(0),
            limit: AtomicU64::new(u64::MAX),
            state: AtomicPtr::new(state),
        });
        self.guards
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(Arc::downgrade(&guard));
        guard
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

impl WorkerGuard {
    fn over_limit(&self, now: u64) -> bool {
        let started = self.started.load(Ordering::Acquire);
        started != 0 && now.saturating_sub(started - 1) > self.limit.load(Ordering::Relaxed)
    }

    /// Marks the start of a call into Lua that may run for `limit`.
    pub(crate) fn enter(&self, limit: Duration) -> Inside<'_> {
        let ticks = (limit.as_millis() / TICK.as_millis()).max(1) as u64;
        self.limit.store(ticks, Ordering::Relaxed);
        self.started.store(
            self.watchdog.ticks.load(Ordering::Relaxed) + 1,
            Ordering::Release,
        );
        Inside(self)
    }

    /// Forgets the state before it closes.
    pub(crate) fn detach(&self) {
        self.state.store(std::ptr::null_mut(), Ordering::Release);
    }
}

/// A call into Lua in progress; dropping it ends it (also on unwinding).
pub(crate) struct Inside<'a>(&'a WorkerGuard);

impl Drop for Inside<'_> {
    fn drop(&mut self) {
        self.0.started.store(0, Ordering::Release);
        // The hook stays armed for the rest of a call that went over its limit (see
        // `on_hook`); the call is over now, so it goes.
        let state = self.0.state.load(Ordering::Acquire);
        // SAFETY: the worker's own live state, on its thread.
        if !state.is_null() && unsafe { ffi::lua_gethook(state) }.is_some() {
            unsafe { ffi::lua_sethook(state, None, 0, 0) };
        }
    }
}

thread_local! {
    /// The guard of the worker running on this thread, for the hook.
    static CURRENT: RefCell<Option<Arc<WorkerGuard>>> = const { RefCell::new(None) };
}

pub(crate) fn set_current(guard: Option<Arc<WorkerGuard>>) {
    CURRENT.with(|c| *c.borrow_mut() = guard);
}

unsafe extern "C-unwind" fn on_hook(state: *mut ffi::lua_State, ar: *mut ffi::lua_Debug) {
    let over = CURRENT.with(|c| {
        c.borrow().as_ref().is_some_and(|g| {
            let now = g.watchdog.ticks.load(Ordering::Relaxed);
            g.over_limit(now)
        })
    });
    if !over {
        // Set for a call that has ended since: this one is within its limit.
        // SAFETY: called by Lua on the worker's thread with its state.
        unsafe { ffi::lua_sethook(state, None, 0, 0) };
        return;
    }
    // The hook stays set (every instruction) until the call ends: a script that catches
    // the error with `pcall` gets it again at its next instruction outside the pcall,
    // so no loop of pcalls can keep the worker. `Inside` clears it when the call ends.
    // SAFETY: `ar` is the hook's activation record, which lua_getinfo may fill in;
    // raising an error from a hook is allowed: it unwinds to the pcall of the call that
    // ran too long. The message names the script and the line it was on.
    unsafe {
        ffi::lua_getinfo(state, c"Sl".as_ptr(), ar);
        ffi::luaL_error(
            state,
            c"%s:%d: script ran longer than its time limit (stopped by the watchdog)".as_ptr(),
            (*ar).short_src.as_ptr(),
            (*ar).currentline,
        )
    };
}

/// Longest subject a pattern with backtracking may run on is such that this estimate of
/// character comparisons stays under [`PATTERN_BUDGET`].
pub const PATTERN_BUDGET: f64 = 1e9;

/// An upper bound, in character steps, of matching `pattern` on a subject of
/// `subject_len` bytes: each quantified item (`*`, `+`, `-`, `?`) that is followed by more
/// pattern may retry everything after it at each of `n` positions, so the cost grows
/// as n^(items + 1) (one more factor when the search is not anchored with `^` and is
/// tried at every start). A quantifier at the very end does not backtrack.
pub fn pattern_cost(pattern: &[u8], subject_len: usize, anchored_search: bool) -> f64 {
    let n = subject_len.max(1) as f64;
    let mut backtracking = 0i32;
    let mut i = 0;
    let anchored = anchored_search || pattern.first() == Some(&b'^');
    let mut in_set = false;
    while i < pattern.len() {
        let c = pattern[i];
        if c == b'%' {
            i += 2;
            continue;
        }
        if in_set {
            if c == b']' {
                in_set = false;
            }
            i += 1;
            continue;
        }
        if c == b'[' {
            in_set = true;
            // A `]` right after `[` or `[^` is part of the set.
            if pattern.get(i + 1) == Some(&b'^') {
                i += 1;
            }
            i += 2;
            continue;
        }
        if matches!(c, b'*' | b'+' | b'-' | b'?') && i > 0 {
            let rest = &pattern[i + 1..];
            let trailing = rest.iter().all(|&r| matches!(r, b')' | b'$'));
            if !trailing {
                backtracking += 1;
            }
        }
        i += 1;
    }
    if backtracking == 0 {
        return n;
    }
    n.powi(backtracking + if anchored { 0 } else { 1 })
}

/// Lua code that wraps the pattern functions with the [`pattern_cost`] check (given as
/// `check`). Loaded once per state.
pub(crate) const PATTERN_GUARD: &str = r#"
local check = ...
local find, match, gmatch, gsub = string.find, string.match, string.gmatch, string.gsub
string.find = function(s, p, init, plain)
  if not plain then check(s, p, false) end
  return find(s, p, init, plain)
end
string.match = function(s, p, init)
  check(s, p, false)
  return match(s, p, init)
end
string.gmatch = function(s, p)
  check(s, p, false)
  return gmatch(s, p)
end
string.gsub = function(s, p, r, n)
  check(s, p, false)
  return gsub(s, p, r, n)
end
"#;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cost_of_common_patterns_is_linear() {
        assert_eq!(pattern_cost(b"%s+", 100_000, false), 100_000.0);
        assert_eq!(pattern_cost(b"^/api/(%w+)$", 1_000, false), 1_000.0);
        assert_eq!(pattern_cost(b"[a-z]+", 10, false), 10.0);
    }

    #[test]
    fn cost_of_backtracking_patterns_grows_with_items() {
        assert_eq!(pattern_cost(b"^%s*(.-)%s*$", 100, false), 1e4);
        assert_eq!(pattern_cost(b".-x", 1000, false), 1e6);
        let evil = "a*".repeat(20) + "b";
        assert!(pattern_cost(evil.as_bytes(), 30, false) > PATTERN_BUDGET);
    }
}
