//! `tessera.socket.tcp()`: OpenResty's cosockets (`ngx.socket.tcp`), TCP and TLS
//! connections a script drives with `connect`, `send`, `receive`, `sslhandshake`,
//! `setkeepalive` and `close`, each a call that yields to the worker's event loop while
//! it waits (docs/lua.md, "TCP sockets"). What OpenResty applications build on them
//! (lua-resty-redis, lua-resty-mysql) runs through the `tessera.ngx_compat` table
//! ([`compat`]).
//!
//! A socket belongs to the request (or timer callback) that connected it: when the
//! request ends its sockets are closed, unless put in the worker's keep-alive pool
//! ([`pool`]). The engine says who runs now with a [`Scope`] ([`enter`]) and ends a
//! request's sockets with [`release`]; where no request or timer runs (`init`,
//! `header_filter`, `body_filter`, `log`) the calls are refused with an error naming
//! the phase, as OpenResty refuses them.

mod compat;
mod conn;
mod fast;
mod ops;
mod pool;
pub(crate) mod setup;
mod tally;

use std::cell::{Cell, RefCell};
use std::pin::Pin;
use std::rc::{Rc, Weak};
use std::task::Waker;
use std::time::Duration;

use mlua::{AnyUserData, IntoLuaMulti, Lua, MultiValue, Value};

use crate::tally::Phase;
use conn::{Failed, Io};
pub(crate) use tally::write as write_metrics;

/// `lua_socket_connect_timeout`, `send_timeout` and `read_timeout`'s default: 60 s.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);
/// `lua_socket_keepalive_timeout`'s default: 60 s.
const DEFAULT_IDLE: Duration = Duration::from_secs(60);
/// `lua_socket_pool_size`'s default: 30 connections per pool.
const DEFAULT_POOL_SIZE: usize = 30;
/// Most bytes one `receive` gathers (outside the Lua state's memory limit, so bounded
/// here): 8 MiB, as `tessera.http.request`'s bodies.
const MAX_RECEIVE: usize = 8 << 20;

/// Who the sockets used now belong to: a request or a timer callback (an id), or
/// nobody (a phase where cosockets are refused, named in the error).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Scope {
    Owner(u64),
    Refused(&'static str),
}

impl Scope {
    /// The request whose context userdata is `ud`.
    pub(crate) fn request(ud: &AnyUserData) -> Scope {
        Scope::Owner(ud.to_pointer() as usize as u64)
    }

    /// A new timer callback (ids apart from the requests', which are addresses).
    pub(crate) fn timer() -> Scope {
        let id = NEXT_TIMER.with(|n| n.replace(n.get() + 1));
        Scope::Owner(1 << 63 | id)
    }

    /// A phase in which cosockets are refused.
    pub(crate) fn refused(phase: Phase) -> Scope {
        Scope::Refused(match phase {
            Phase::Access => "access",
            Phase::Content => "content",
            Phase::HeaderFilter => "header_filter",
            Phase::BodyFilter => "body_filter",
            Phase::Log => "log",
            Phase::Timer => "a timer",
            Phase::Balancer => "balancer_script",
            Phase::Certificate => "certificate_script",
        })
    }
}

thread_local! {
    static SCOPE: Cell<Scope> = const { Cell::new(Scope::Refused("init")) };
    static NEXT_TIMER: Cell<u64> = const { Cell::new(1) };
    /// The connected sockets and their owners, for [`release`].
    static OPEN: RefCell<Vec<(u64, Weak<RefCell<State>>)>> = const { RefCell::new(Vec::new()) };
}

/// Marks `scope` as running until dropped (restoring what ran before).
pub(crate) struct Entered(Scope);

pub(crate) fn enter(scope: Scope) -> Entered {
    Entered(SCOPE.with(|s| s.replace(scope)))
}

impl Drop for Entered {
    fn drop(&mut self) {
        SCOPE.with(|s| s.set(self.0));
    }
}

/// The owner running now, or the error of a phase that may not use cosockets.
fn owner() -> mlua::Result<u64> {
    match SCOPE.with(Cell::get) {
        Scope::Owner(id) => Ok(id),
        Scope::Refused(phase) => Err(mlua::Error::runtime(format!(
            "tessera.socket: not available in {phase} (cosockets work in access, content and \
             timers)"
        ))),
    }
}

/// Closes the sockets of `scope` (a request or timer that ended) that are still
/// connected; those put in the keep-alive pool are no longer theirs.
pub(crate) fn release(scope: Scope) {
    let Scope::Owner(owner) = scope else {
        return;
    };
    let mine: Vec<Rc<RefCell<State>>> = OPEN.with(|open| {
        let mut open = open.borrow_mut();
        if open.is_empty() {
            return Vec::new();
        }
        let mut mine = Vec::new();
        open.retain(|(id, socket)| {
            if *id != owner {
                return socket.strong_count() > 0;
            }
            mine.extend(socket.upgrade());
            false
        });
        mine
    });
    for socket in mine {
        let (io, waiting) = {
            let mut s = socket.borrow_mut();
            s.registered = None;
            match s.owner == owner {
                true => {
                    // A receive waiting in `fast` holds the connection in place: it
                    // ends with it, as an async call's hold ends with its future.
                    let waiting = s.waiting.take();
                    if waiting.is_some() {
                        s.busy = false;
                    }
                    (s.io.take(), waiting)
                }
                false => (None, None),
            }
        };
        drop((io, waiting));
    }
}

thread_local! {
    /// The waker of the script call being polled ([`polled`]): what a receive that
    /// waits in [`fast`] registers.
    static WAKER: Cell<*const Waker> = const { Cell::new(std::ptr::null()) };
}

/// Marks `waker` as the one of the script call being polled until dropped (restoring
/// what was before).
pub(crate) struct Polled(*const Waker);

pub(crate) fn polled(waker: &Waker) -> Polled {
    Polled(WAKER.with(|w| w.replace(waker)))
}

impl Drop for Polled {
    fn drop(&mut self) {
        WAKER.with(|w| w.set(self.0));
    }
}

/// Runs `f` with the waker of the script call being polled, if one is.
fn with_waker<R>(f: impl FnOnce(&Waker) -> R) -> Option<R> {
    let waker = WAKER.with(Cell::get);
    // SAFETY: set by `polled` from a live `&Waker` whose guard, which restores the
    // previous value, lives in the poll that lent it; this runs inside that poll.
    (!waker.is_null()).then(|| f(unsafe { &*waker }))
}

/// One socket's state, shared by its userdata and the calls in progress on it.
struct State {
    /// The connection, when connected and no call holds it.
    io: Option<Io>,
    /// A call holds the connection (`io` is `None` meanwhile).
    busy: bool,
    owner: u64,
    /// The owner it is listed in [`OPEN`] for.
    registered: Option<u64>,
    connect_timeout: Duration,
    send_timeout: Duration,
    read_timeout: Duration,
    /// The pool it goes to with `setkeepalive`: `host:port`, or `connect`'s `pool`.
    pool: Option<Rc<str>>,
    pool_size: Option<usize>,
    /// Times the connection was taken from the pool.
    reused: u32,
    /// The host and port given to `connect` (the host is the TLS name when
    /// `sslhandshake` gets none).
    host: String,
    port: u16,
    /// What a `send` left to the waiting part, and the bytes of the whole send.
    unsent: Option<(Vec<u8>, usize)>,
    /// The read timeout's timer of a `receive` waiting in [`fast::wait_receive`] (which
    /// keeps `io` in place and sets `busy` meanwhile).
    waiting: Option<Pin<Box<evloop::time::Sleep>>>,
}

impl State {
    /// A socket of `owner`, not connected.
    fn new(owner: u64) -> State {
        State {
            io: None,
            busy: false,
            owner,
            registered: None,
            connect_timeout: DEFAULT_TIMEOUT,
            send_timeout: DEFAULT_TIMEOUT,
            read_timeout: DEFAULT_TIMEOUT,
            pool: None,
            pool_size: None,
            reused: 0,
            host: String::new(),
            port: 0,
            unsent: None,
            waiting: None,
        }
    }
}

/// A socket's methods of ops.rs (through mlua): made for a socket when `socket.lua`
/// first needs one of them. A socket's number is freed when its handle
/// ([`fast::new_socket`]) is collected.
struct Socket(Rc<RefCell<State>>);

/// The sockets of this thread by number: how [`fast`]'s C functions, given a socket's
/// number, reach it.
#[derive(Default)]
struct Numbers {
    rows: Vec<Option<Rc<RefCell<State>>>>,
    free: Vec<u32>,
}

thread_local! {
    static NUMBERS: RefCell<Numbers> = RefCell::new(Numbers::default());
}

/// Gives `state` a number (until [`unregister`]).
fn register(state: &Rc<RefCell<State>>) -> u32 {
    NUMBERS.with(|t| {
        let mut t = t.borrow_mut();
        match t.free.pop() {
            Some(id) => {
                t.rows[id as usize] = Some(state.clone());
                id
            }
            None => {
                t.rows.push(Some(state.clone()));
                (t.rows.len() - 1) as u32
            }
        }
    })
}

/// Frees number `id` (its socket was collected).
fn unregister(id: u32) {
    // At the thread's end the table may be gone before the Lua state.
    let _ = NUMBERS.try_with(|t| {
        let mut t = t.borrow_mut();
        if let Some(row) = t.rows.get_mut(id as usize) {
            if row.take().is_some() {
                t.free.push(id);
            }
        }
    });
}

/// The socket numbered `id`.
fn numbered(id: u32) -> Option<Rc<RefCell<State>>> {
    NUMBERS.with(|t| t.borrow().rows.get(id as usize).cloned().flatten())
}

/// A call's hold on a socket's connection: gives it back (or not) when done, and
/// clears `busy` even if the call is dropped (its request ended).
struct Held {
    state: Rc<RefCell<State>>,
}

impl Held {
    /// Takes the connection for a call: `Err("closed")` when not connected.
    fn take(state: &Rc<RefCell<State>>) -> Result<(Held, Io), Failed> {
        let mut s = state.borrow_mut();
        if s.busy {
            return Err(busy());
        }
        let io = s.io.take().ok_or_else(Failed::closed)?;
        s.busy = true;
        Ok((
            Held {
                state: state.clone(),
            },
            io,
        ))
    }

    fn give_back(self, io: Io) {
        self.state.borrow_mut().io = Some(io);
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.state.borrow_mut().busy = false;
    }
}

fn busy() -> Failed {
    Failed {
        kind: conn::Kind::Other,
        message: "socket busy".into(),
    }
}

/// `nil, message` (counted).
fn fail(lua: &Lua, f: Failed) -> mlua::Result<MultiValue> {
    tally::error(f.kind);
    (Value::Nil, f.message).into_lua_multi(lua)
}

/// `nil, message, partial` (counted).
fn fail_partial(lua: &Lua, f: Failed, partial: &[u8]) -> mlua::Result<MultiValue> {
    tally::error(f.kind);
    (Value::Nil, f.message, lua.create_string(partial)?).into_lua_multi(lua)
}

fn one(lua: &Lua) -> mlua::Result<MultiValue> {
    1.into_lua_multi(lua)
}

/// Milliseconds as Lua gives them: a number >= 0; 0 is the default.
fn millis(v: Option<f64>, what: &str, default: Duration) -> mlua::Result<Option<Duration>> {
    match v {
        None => Ok(None),
        Some(0.0) => Ok(Some(default)),
        Some(ms) => duration_ms(ms, what).map(Some),
    }
}

/// Timeouts above this are refused (as nginx's timers, about 24.8 days): a deadline
/// `now + d` must not overflow the clock.
const MAX_TIMEOUT_MS: f64 = 2_147_483_647.0;

/// `ms` milliseconds as a duration; an error naming `what` when it is negative, not a
/// number or above [`MAX_TIMEOUT_MS`].
fn duration_ms(ms: f64, what: &str) -> mlua::Result<Duration> {
    if !(0.0..=MAX_TIMEOUT_MS).contains(&ms) {
        return Err(mlua::Error::runtime(format!(
            "bad {what} timeout: {ms} (0 to {MAX_TIMEOUT_MS} ms)"
        )));
    }
    Ok(Duration::from_secs_f64(ms / 1000.0))
}
