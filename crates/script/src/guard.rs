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
//!   one call longer than its limit, the watchdog sends the worker's thread a signal
//!   ([`signal_number`]), again at every tick until the call ends. It never touches a
//!   Lua state itself: in LuaJIT `lua_sethook` is an unsynchronised read-modify-write of
//!   the global state's hook mask and dispatch table, safe from a signal handler on the
//!   state's own thread (what `luajit.c` does on Ctrl-C and `lj_profile.c` on SIGPROF)
//!   but a data race from another thread.
//! - The signal handler runs on the worker's thread. It reads the thread-local pointer
//!   to the state of the call in progress (set by [`WorkerGuard::enter`], cleared when
//!   the call ends, so a late signal finds none and does nothing) and sets a count hook
//!   there.
//! - The hook runs on the worker's thread at the next instruction, checks that the call
//!   it interrupts is really over its limit (the signal may have been meant for a call
//!   that ended since) and raises a Lua error, which unwinds to the call's `pcall`: the
//!   request gets a 500 and the worker goes on. It stays set until the call ends, so a
//!   script that catches the error (`pcall`) gets it again at its next instruction.
//!
//! **Patterns.** `string.find/match/gmatch/gsub` run in C and cannot be interrupted, and a
//! backtracking pattern is polynomial (or worse) in the subject's length. They are
//! replaced by wrappers that estimate the worst case first (see [`pattern_cost`]) and
//! raise an error instead of running a match that could take minutes.

use std::cell::Cell;
use std::sync::atomic::{compiler_fence, AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

use mlua::ffi;

/// The watchdog's resolution: a call is stopped between its limit and its limit plus
/// two ticks.
pub const TICK: Duration = Duration::from_millis(10);

/// The signal the watchdog sends a worker whose call is over its limit: a real-time
/// signal, so it is not one the rest of the process (tokio's handlers for TERM, INT, HUP,
/// USR1) or LuaJIT's profiler (PROF) uses. SIGRTMIN itself and the next two are left to
/// whatever else may want "the first" real-time signals.
pub fn signal_number() -> libc::c_int {
    libc::SIGRTMIN() + 3
}

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
    /// The worker's thread, to signal; `None` once its engine is gone. The watchdog
    /// signals while holding the lock, and the engine detaches (on its thread, before
    /// the thread can exit) by taking it, so a signal never goes to a thread that ended.
    thread: Mutex<Option<libc::pthread_t>>,
    /// The worker's main Lua state (hooks are per global state in LuaJIT), as an
    /// address; 0 once detached. Only the worker's thread uses it.
    state: AtomicUsize,
}

impl Watchdog {
    pub(crate) fn start() -> Arc<Watchdog> {
        let watchdog = Arc::new(Watchdog {
            ticks: AtomicU64::new(1),
            guards: Mutex::new(Vec::new()),
            stop: AtomicBool::new(false),
        });
        if let Err(e) = install_handler() {
            tracing::error!(error = %e, "cannot install the Lua watchdog's signal handler: scripts run without a time limit");
            return watchdog;
        }
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
                let thread = guard.thread.lock().unwrap_or_else(|e| e.into_inner());
                if let Some(thread) = *thread {
                    // SAFETY: the thread is alive (see `WorkerGuard::thread`); the
                    // handler is installed.
                    unsafe { libc::pthread_kill(thread, signal_number()) };
                }
            }
        }
    }

    /// A guard for the Lua state `state`, whose calls run on the calling thread.
    pub(crate) fn guard(self: &Arc<Self>, state: *mut ffi::lua_State) -> Arc<WorkerGuard> {
        let guard = Arc::new(WorkerGuard {
            watchdog: self.clone(),
            started: AtomicU64::new(0),
            limit: AtomicU64::new(u64::MAX),
            // SAFETY: pthread_self has no preconditions.
            thread: Mutex::new(Some(unsafe { libc::pthread_self() })),
            state: AtomicUsize::new(state as usize),
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

    /// Marks the start of a call into Lua that may run for `limit`. Call it on the
    /// worker's thread.
    pub(crate) fn enter(&self, limit: Duration) -> Inside<'_> {
        let mut ticks = (limit.as_millis() / TICK.as_millis()).max(1) as u64;
        // A call inside a call (a subrequest's phase, run while its maker's phase is
        // polled) gives the outer one its start and limit back when it ends, and ends no
        // later than the outer one must: else subrequests made one inside another would
        // each start afresh and the maker would never be stopped.
        let outer = (
            self.started.load(Ordering::Acquire),
            self.limit.load(Ordering::Relaxed),
        );
        let now = self.watchdog.ticks.load(Ordering::Relaxed);
        if outer.0 != 0 {
            let outer_end = (outer.0 - 1).saturating_add(outer.1);
            ticks = ticks.min(outer_end.saturating_sub(now));
        }
        self.limit.store(ticks, Ordering::Relaxed);
        self.started.store(now + 1, Ordering::Release);
        let state = self.state.load(Ordering::Relaxed) as *mut ffi::lua_State;
        let previous = (
            IN_CALL_STATE.replace(state),
            IN_CALL_GUARD.replace(self as *const WorkerGuard),
        );
        Inside {
            guard: self,
            previous,
            outer,
        }
    }

    /// Forgets the worker's thread and state: its engine is going away (a timer's call
    /// may still hold this guard). Call it on the worker's thread.
    pub(crate) fn detach(&self) {
        *self.thread.lock().unwrap_or_else(|e| e.into_inner()) = None;
        self.state.store(0, Ordering::Relaxed);
    }
}

/// A call into Lua in progress; dropping it ends it (also on unwinding).
pub(crate) struct Inside<'a> {
    guard: &'a WorkerGuard,
    /// The thread's call before this one: calls nest when a subrequest's phase runs
    /// inside its maker's.
    previous: (*mut ffi::lua_State, *const WorkerGuard),
    /// The start and limit of the call this one runs inside (a start of 0: none).
    outer: (u64, u64),
}

impl Drop for Inside<'_> {
    fn drop(&mut self) {
        // First the pointer the signal handler reads: from here on a signal does nothing.
        IN_CALL_STATE.set(self.previous.0);
        IN_CALL_GUARD.set(self.previous.1);
        compiler_fence(Ordering::SeqCst);
        self.guard.limit.store(self.outer.1, Ordering::Relaxed);
        self.guard.started.store(self.outer.0, Ordering::Release);
        // The hook stays armed for the rest of a call that went over its limit (see
        // `on_hook`); the call is over now, so it goes.
        let state = self.guard.state.load(Ordering::Relaxed) as *mut ffi::lua_State;
        // SAFETY: the worker's own state, live until its engine detaches this guard, on
        // its thread, and no signal handler touches it any more.
        if !state.is_null() && unsafe { ffi::lua_gethook(state) }.is_some() {
            unsafe { ffi::lua_sethook(state, None, 0, 0) };
        }
    }
}

thread_local! {
    /// The Lua state of the call in progress on this thread, for the signal handler;
    /// null between calls. Const-initialised and without a destructor, so reading it
    /// from a signal handler is a plain load.
    static IN_CALL_STATE: Cell<*mut ffi::lua_State> = const { Cell::new(std::ptr::null_mut()) };
    /// The guard of that call, for the hook.
    static IN_CALL_GUARD: Cell<*const WorkerGuard> = const { Cell::new(std::ptr::null()) };
}

/// Installs [`on_signal`] for [`signal_number`], once per process.
fn install_handler() -> std::io::Result<()> {
    static INSTALLED: OnceLock<Option<i32>> = OnceLock::new();
    let failed = *INSTALLED.get_or_init(|| {
        // SAFETY: a zeroed sigaction is valid; the handler only touches this thread's
        // state. SA_RESTART: a signal that lands on a worker in a system call (it may
        // have left Lua since the watchdog looked) restarts it instead of failing it
        // with EINTR; epoll_wait, which is never restarted, is retried by tokio.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as usize;
            action.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut action.sa_mask);
            if libc::sigaction(signal_number(), &action, std::ptr::null_mut()) != 0 {
                return Some(std::io::Error::last_os_error().raw_os_error().unwrap_or(0));
            }
        }
        None
    });
    match failed {
        None => Ok(()),
        Some(e) => Err(std::io::Error::from_raw_os_error(e)),
    }
}

/// The watchdog's signal, on a worker's thread: arms the hook on the state of the call in
/// progress, if any.
extern "C" fn on_signal(_: libc::c_int) {
    let state = IN_CALL_STATE.get();
    if state.is_null() {
        return;
    }
    // SAFETY: `state` is the live state of the call this signal interrupted, on its own
    // thread: lua_sethook may be called from a signal handler. Clearing first makes
    // LuaJIT rewrite its whole dispatch table: if the signal interrupted the worker in
    // the middle of its own dispatch update (the trace recorder starting or stopping),
    // that update may leave the table stale when it resumes; the next tick repairs it.
    unsafe {
        ffi::lua_sethook(state, None, 0, 0);
        ffi::lua_sethook(state, Some(on_hook), ffi::LUA_MASKCOUNT, 1);
    }
}

unsafe extern "C-unwind" fn on_hook(state: *mut ffi::lua_State, ar: *mut ffi::lua_Debug) {
    let guard = IN_CALL_GUARD.get();
    // SAFETY: a non-null guard is the one of the call in progress, which outlives it.
    let over = !guard.is_null() && {
        let guard = unsafe { &*guard };
        guard.over_limit(guard.watchdog.ticks.load(Ordering::Relaxed))
    };
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

/// What the error of a call the watchdog stopped says (the message of `on_hook`), by
/// which metrics tell a time-limit kill from other errors.
pub(crate) const TIME_LIMIT_MESSAGE: &str = "script ran longer than its time limit";

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

/// Takes out of a worker's Lua environment what would let one script stop, block or
/// crash every worker (all share the process): `os.exit` and `os.execute`, the `os`
/// calls that change files or the process's locale, reading a chunk from stdin
/// (`dofile()`, `loadfile()` without a name) and loading precompiled bytecode, which
/// LuaJIT does not verify (crafted bytecode can corrupt memory). C modules are already
/// refused by mlua's safe mode, `io`, `debug` and `ffi` are not loaded. docs/lua.md
/// lists what stays.
pub(crate) const SANDBOX: &str = r#"
for _, name in ipairs{ "exit", "execute", "remove", "rename", "tmpname", "setlocale" } do
  os[name] = nil
end
local load, loadfile = load, loadfile
_G.load = function(chunk, name, mode, ...) return load(chunk, name, "t", ...) end
_G.loadstring = function(s, name) return load(s, name, "t") end
_G.loadfile = function(name, mode, ...)
  if type(name) ~= "string" then
    error("loadfile needs a file name (scripts cannot read stdin)", 2)
  end
  return loadfile(name, "t", ...)
end
_G.dofile = function(name)
  if type(name) ~= "string" then
    error("dofile needs a file name (scripts cannot read stdin)", 2)
  end
  return assert(loadfile(name, "t"))()
end
"#;

#[cfg(test)]
mod tests {
    use super::*;

    fn raise_on_this_thread() {
        // SAFETY: the handler is installed; a signal to the calling thread is delivered
        // before pthread_kill returns.
        assert_eq!(
            unsafe { libc::pthread_kill(libc::pthread_self(), signal_number()) },
            0
        );
    }

    #[test]
    fn the_watchdog_signal_arms_the_hook_only_inside_a_call() {
        let lua = mlua::Lua::new();
        let mut state = std::ptr::null_mut();
        // SAFETY: only reads the state pointer.
        unsafe { lua.exec_raw::<()>((), |s| state = s) }.unwrap();
        let watchdog = Watchdog::start();
        let guard = watchdog.guard(state);
        // Between calls a signal finds no state and does nothing.
        raise_on_this_thread();
        // SAFETY: the state is live, on this thread.
        assert!(unsafe { ffi::lua_gethook(state) }.is_none());
        {
            let _inside = guard.enter(Duration::from_secs(60));
            raise_on_this_thread();
            assert!(unsafe { ffi::lua_gethook(state) }.is_some());
            // Within its limit, the hook lets the call run and clears itself.
            assert_eq!(lua.load("return 1 + 1").eval::<i32>().unwrap(), 2);
            assert!(unsafe { ffi::lua_gethook(state) }.is_none());
            raise_on_this_thread();
        }
        // The end of the call cleared what the last signal set.
        assert!(unsafe { ffi::lua_gethook(state) }.is_none());
        guard.detach();
        raise_on_this_thread();
    }

    #[test]
    fn cost_of_common_patterns_is_linear() {
        assert_eq!(pattern_cost(b"%s+", 100_000, false), 100_000.0);
        assert_eq!(pattern_cost(b"^/api/(%w+)$", 1_000, false), 1_000.0);
        assert_eq!(pattern_cost(b"[a-z]+", 10, false), 10.0);
    }

    #[test]
    fn documented_linear_trim_is_linear_and_the_trim_idiom_is_not() {
        // docs/lua.md: the trim idiom has two backtracking items (it is quadratic on a
        // long run of inner spaces) and is refused past sqrt(budget) bytes; the
        // documented trim's patterns have none.
        let limit = PATTERN_BUDGET.sqrt() as usize;
        assert!(pattern_cost(b"^%s*(.-)%s*$", limit, false) <= PATTERN_BUDGET);
        assert!(pattern_cost(b"^%s*(.-)%s*$", limit + 1, false) > PATTERN_BUDGET);
        assert_eq!(pattern_cost(b"%S", 1 << 30, false), (1u64 << 30) as f64);
    }

    #[test]
    fn cost_of_backtracking_patterns_grows_with_items() {
        assert_eq!(pattern_cost(b"^%s*(.-)%s*$", 100, false), 1e4);
        assert_eq!(pattern_cost(b".-x", 1000, false), 1e6);
        let evil = "a*".repeat(20) + "b";
        assert!(pattern_cost(evil.as_bytes(), 30, false) > PATTERN_BUDGET);
    }
}
