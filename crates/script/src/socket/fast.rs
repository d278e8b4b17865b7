//! The socket methods a client library calls several times per request (lua-resty-redis:
//! `settimeouts`, `connect`, `send`, three `receive`s, `setkeepalive`), in their common
//! case, as plain Lua C functions; `socket.lua` calls them first and the methods of
//! `ops.rs` (through mlua) only when one answers `nil`: an argument it does not take (a
//! table of options, a pattern other than a size or `*l`, a TLS connection's write), a
//! socket busy or closed, a phase where cosockets are refused. Those methods then give
//! the answer or the error, so a script sees the same results either way.
//!
//! Written by hand because the hot path needs it: an mlua method call reads its
//! arguments into `Value`s (a registry reference each for strings), checks the
//! userdata's type, and returns a `MultiValue` (a `VecDeque`); a C function reads the
//! stack and pushes its results. Measured with `bench/lua.sh redis` (docs/benchmarks.md,
//! issue 50, "Socket methods as C functions"): a lua-resty-redis GET cost 17.05 µs of CPU
//! through mlua alone and 15.54 µs with these.
//!
//! A Lua error raised inside Rust frames would unwind through them, and a panic must not
//! unwind into Lua's: each function does its Rust part inside `catch_unwind`, holding no
//! borrow while it calls the Lua API, and calls only API functions that cannot raise
//! there (reading the stack, pushing booleans, numbers and nil) except for the one
//! string it pushes last, after every borrow is released. Sockets are named by a number
//! (their row in a per-thread table) rather than by the userdata's address: a script can
//! change the number in its socket table, but can then reach only sockets that exist.

use std::cell::RefCell;
use std::future::Future;
use std::os::raw::{c_char, c_int};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::rc::Rc;
use std::task::{Context, Poll};
use std::time::Duration;

use mlua::ffi::{self, lua_State};
use tokio::io::AsyncWrite;

use super::conn::{Conn, Failed};
use super::ops::{attach, keep, ready, Attach, Want};
use super::{
    duration_ms, millis, numbered, tally, Scope, State, DEFAULT_IDLE, DEFAULT_TIMEOUT, MAX_RECEIVE,
    SCOPE,
};

/// The socket named by argument `idx`.
unsafe fn socket_at(l: *mut lua_State, idx: c_int) -> Option<Rc<RefCell<State>>> {
    let n = number_at(l, idx)?;
    if !(0.0..u32::MAX as f64).contains(&n) || n.fract() != 0.0 {
        return None;
    }
    numbered(n as u32)
}

/// Argument `idx` when it is a number (not a string that converts).
unsafe fn number_at(l: *mut lua_State, idx: c_int) -> Option<f64> {
    (ffi::lua_type(l, idx) == ffi::LUA_TNUMBER).then(|| ffi::lua_tonumber(l, idx))
}

/// Whether argument `idx` is absent or nil.
unsafe fn absent(l: *mut lua_State, idx: c_int) -> bool {
    ffi::lua_type(l, idx) <= ffi::LUA_TNIL
}

/// Argument `idx`'s bytes when it is a string (valid while it is on the stack).
unsafe fn bytes_at<'a>(l: *mut lua_State, idx: c_int) -> Option<&'a [u8]> {
    if ffi::lua_type(l, idx) != ffi::LUA_TSTRING {
        return None;
    }
    let mut len = 0;
    let p = ffi::lua_tolstring(l, idx, &mut len);
    Some(std::slice::from_raw_parts(p as *const u8, len))
}

/// The request or timer running now, when cosockets are allowed.
fn running() -> Option<u64> {
    match SCOPE.with(|s| s.get()) {
        Scope::Owner(id) => Some(id),
        Scope::Refused(_) => None,
    }
}

/// What a function pushes once its Rust part is done.
enum Out {
    /// Not handled here: `nil`, and `socket.lua` calls the method of `ops.rs`.
    Pass,
    /// Must wait: `false`, and `socket.lua` calls the method's waiting part.
    Wait,
    /// Done: `true, n`.
    Count(usize),
    /// Done: `true, nil, message`.
    Failed(String),
    /// Done: `true, nil, message, partial` (pushed by [`wait_receive`]).
    FailedWith(String, Vec<u8>),
}

/// Runs `work` (no Lua API calls inside), a panic counting as [`Out::Pass`], and pushes
/// its outcome.
unsafe fn finish(l: *mut lua_State, work: impl FnOnce() -> Out) -> c_int {
    match catch_unwind(AssertUnwindSafe(work)).unwrap_or(Out::Pass) {
        Out::Pass => {
            ffi::lua_pushnil(l);
            1
        }
        Out::Wait => {
            ffi::lua_pushboolean(l, 0);
            1
        }
        Out::Count(n) => {
            ffi::lua_pushboolean(l, 1);
            ffi::lua_pushinteger(l, n as ffi::lua_Integer);
            2
        }
        Out::Failed(message) => {
            ffi::lua_pushboolean(l, 1);
            ffi::lua_pushnil(l);
            ffi::lua_pushlstring(l, message.as_ptr() as *const c_char, message.len());
            3
        }
        Out::FailedWith(message, partial) => {
            ffi::lua_pushboolean(l, 1);
            ffi::lua_pushnil(l);
            ffi::lua_pushlstring(l, message.as_ptr() as *const c_char, message.len());
            ffi::lua_pushlstring(l, partial.as_ptr() as *const c_char, partial.len());
            4
        }
    }
}

/// `(id, host, port)`: `connect` without options.
pub(super) unsafe extern "C-unwind" fn connect(l: *mut lua_State) -> c_int {
    let state = socket_at(l, 1);
    let host = bytes_at(l, 2);
    let port = number_at(l, 3);
    let plain = absent(l, 4);
    finish(l, || {
        let (Some(state), Some(host), Some(port), true) = (state, host, port, plain) else {
            return Out::Pass;
        };
        let (Some(owner), Ok(host)) = (running(), std::str::from_utf8(host)) else {
            return Out::Pass;
        };
        if host.starts_with("unix:") || !(1.0..=65535.0).contains(&port) || port.fract() != 0.0 {
            return Out::Pass;
        }
        match attach(&state, owner, host, port as u16, None, None) {
            Attach::Busy => Out::Pass,
            Attach::Pooled => Out::Count(1),
            Attach::New => Out::Wait,
        }
    })
}

/// `(id, data)`: `send` of a string over a plain connection, when it all fits in the
/// socket now (`true, bytes`), or else with what is left kept for the waiting part.
pub(super) unsafe extern "C-unwind" fn send(l: *mut lua_State) -> c_int {
    let state = socket_at(l, 1);
    let data = bytes_at(l, 2);
    finish(l, || {
        let (Some(state), Some(data), Some(_)) = (state, data, running()) else {
            return Out::Pass;
        };
        let Ok(mut s) = state.try_borrow_mut() else {
            return Out::Pass;
        };
        let s = &mut *s;
        if s.busy {
            return Out::Pass;
        }
        let Some(Conn::Plain(tcp)) = s.io.as_mut().map(|io| &mut io.conn) else {
            return Out::Pass;
        };
        let mut cx = Context::from_waker(std::task::Waker::noop());
        let mut sent = 0;
        while sent < data.len() {
            match std::pin::Pin::new(&mut *tcp).poll_write(&mut cx, &data[sent..]) {
                Poll::Ready(Ok(n)) if n > 0 => sent += n,
                Poll::Ready(Ok(_)) | Poll::Pending => break,
                // The method of ops.rs meets the error again and reports it.
                Poll::Ready(Err(_)) if sent == 0 => return Out::Pass,
                Poll::Ready(Err(_)) => break,
            }
        }
        if sent == data.len() {
            return Out::Count(sent);
        }
        s.unsent = Some((data[sent..].to_vec(), data.len()));
        Out::Wait
    })
}

/// `(id, pattern)`: `receive` of a size or a line (`*l`, or none) that is buffered
/// already (`true, data`), or `false` when it must wait.
pub(super) unsafe extern "C-unwind" fn receive(l: *mut lua_State) -> c_int {
    let state = socket_at(l, 1);
    let want = want_at(l, 2);
    // The data's place in the socket's buffer (pushed once the borrow has ended), the
    // bytes to push and the bytes to consume.
    let located = catch_unwind(AssertUnwindSafe(|| {
        let (Some(state), Some(want), Some(_)) = (&state, want, running()) else {
            return Err(Out::Pass);
        };
        let s = state.try_borrow().map_err(|_| Out::Pass)?;
        let Some(io) = s.io.as_ref().filter(|_| !s.busy) else {
            return Err(Out::Pass);
        };
        found(&want, io.buffered()).unwrap_or(Err(Out::Wait))
    }))
    .unwrap_or(Err(Out::Pass));
    match (located, state) {
        (Ok((data, keep, take)), Some(state)) => deliver(l, &state, data, keep, take),
        (Err(out), _) => finish(l, || out),
        (Ok(_), None) => finish(l, || Out::Pass),
    }
}

/// Argument `idx` when it is a pattern the C functions take: a size or a line.
unsafe fn want_at(l: *mut lua_State, idx: c_int) -> Option<Want> {
    match ffi::lua_type(l, idx) {
        ffi::LUA_TNONE | ffi::LUA_TNIL => Some(Want::Line),
        ffi::LUA_TNUMBER => {
            let n = ffi::lua_tonumber(l, idx);
            (n >= 0.0 && n.fract() == 0.0).then_some(Want::Size(n as usize))
        }
        _ => (bytes_at(l, idx) == Some(b"*l")).then_some(Want::Line),
    }
}

/// Where the data `want` takes is in a buffer: its start, the bytes to return and the
/// bytes to consume; `None` when it is not all there, `Some(Err(Out::Pass))` for a line
/// with a CR inside (left to ops.rs).
fn found(want: &Want, buffered: &[u8]) -> Option<Result<(*const u8, usize, usize), Out>> {
    let (take, mut keep) = ready(want, buffered, 0)?;
    if matches!(want, Want::Line) {
        // A line's CR is dropped; one with a CR elsewhere is left to ops.rs.
        keep -= usize::from(keep > 0 && buffered[keep - 1] == b'\r');
        if buffered[..keep].contains(&b'\r') {
            return Some(Err(Out::Pass));
        }
    }
    Some(Ok((buffered.as_ptr(), keep, take)))
}

/// Pushes `true` and the `keep` bytes at `data`, then consumes `take` bytes of the
/// socket's buffer (where `data` points).
unsafe fn deliver(
    l: *mut lua_State,
    state: &Rc<RefCell<State>>,
    data: *const u8,
    keep: usize,
    take: usize,
) -> c_int {
    ffi::lua_pushboolean(l, 1);
    // The buffer is the socket's, which `state` keeps alive, and nothing touches it until
    // it is consumed below (a collection this allocation may run finalizes other
    // sockets, never this one, which the script holds).
    ffi::lua_pushlstring(l, data as *const c_char, keep);
    if let Ok(mut s) = state.try_borrow_mut() {
        if let Some(io) = s.io.as_mut() {
            io.consume(take);
        }
    }
    2
}

/// `(id, pattern)`: the waiting part of `receive` (a size or a line, none buffered yet)
/// on a plain connection, without a future: each call reads what has arrived and
/// answers `true, data` when it is all there, `true, nil, message, partial` when the
/// read failed or timed out (as ops.rs's `receive` answers), and `false` when it must
/// wait: the socket's readiness and the read timeout's timer then wake the script call
/// being polled, and `socket.lua` yields its coroutine as mlua's async calls do (with
/// mlua's pending marker) and calls again when resumed. `nil` leaves the call to ops.rs
/// (TLS, another call holding the socket, the peer closed, a line with a CR inside, no
/// script call polled), which finds what this one left buffered. The connection stays
/// in place while it waits, with `busy` set; [`give_up`] or the end of the request
/// ([`super::release`]) ends a wait whose coroutine is dropped.
pub(super) unsafe extern "C-unwind" fn wait_receive(l: *mut lua_State) -> c_int {
    let state = socket_at(l, 1);
    let want = want_at(l, 2);
    let polled = catch_unwind(AssertUnwindSafe(|| {
        let (Some(state), Some(want), Some(_)) = (&state, want, running()) else {
            return Err(Out::Pass);
        };
        super::with_waker(|waker| wait(state, &want, &mut Context::from_waker(waker)))
            .unwrap_or(Err(Out::Pass))
    }))
    .unwrap_or(Err(Out::Pass));
    match (polled, state) {
        (Ok((data, keep, take)), Some(state)) => deliver(l, &state, data, keep, take),
        (Err(Out::FailedWith(message, partial)), _) => {
            ffi::lua_pushboolean(l, 1);
            ffi::lua_pushnil(l);
            ffi::lua_pushlstring(l, message.as_ptr() as *const c_char, message.len());
            ffi::lua_pushlstring(l, partial.as_ptr() as *const c_char, partial.len());
            4
        }
        (Err(out), _) => finish(l, || out),
        (Ok(_), None) => finish(l, || Out::Pass),
    }
}

/// [`wait_receive`]'s Rust part.
fn wait(
    state: &Rc<RefCell<State>>,
    want: &Want,
    cx: &mut Context<'_>,
) -> Result<(*const u8, usize, usize), Out> {
    let mut s = state.try_borrow_mut().map_err(|_| Out::Pass)?;
    let s = &mut *s;
    if s.waiting.is_none() {
        // The wait begins: the connection is held, the read timeout starts.
        if s.busy || s.io.as_ref().is_none_or(|io| io.conn.is_tls()) {
            return Err(Out::Pass);
        }
        s.busy = true;
        let deadline = evloop::time::Instant::now() + s.read_timeout;
        s.waiting = Some(Box::pin(evloop::time::sleep_until(deadline)));
    }
    let end = |s: &mut State| {
        s.waiting = None;
        s.busy = false;
    };
    // Whether bytes came in this call: the read timeout then starts again (it bounds
    // the time between two reads, as ops.rs's and lua-nginx-module's do).
    let mut progressed = false;
    loop {
        let Some(io) = s.io.as_mut() else {
            end(s);
            return Err(Out::Pass);
        };
        let buffered = io.buffered();
        if let Some(found) = found(want, buffered) {
            end(s);
            return found;
        }
        if buffered.len() >= MAX_RECEIVE {
            end(s);
            return Err(Out::Pass);
        }
        match io.poll_fill(cx) {
            Some(Poll::Ready(Ok(0))) | None => {
                // The peer closed (ops.rs reads the end again and answers with what
                // came before it), or TLS.
                end(s);
                return Err(Out::Pass);
            }
            Some(Poll::Ready(Ok(_))) => progressed = true,
            Some(Poll::Ready(Err(f))) => {
                // As ops.rs: the connection is closed, what had arrived goes back.
                let rest = io.take(io.buffered().len());
                s.io = None;
                end(s);
                tally::error(f.kind);
                return Err(Out::FailedWith(f.message, rest));
            }
            Some(Poll::Pending) => {
                let timer = s.waiting.as_mut().expect("set while waiting");
                if progressed {
                    let deadline = evloop::time::Instant::now() + s.read_timeout;
                    timer.as_mut().reset(deadline);
                }
                if timer.as_mut().poll(cx).is_pending() {
                    return Err(Out::Wait);
                }
                // As ops.rs: a read timeout leaves the connection open; what had
                // arrived goes back.
                let rest = io.take(io.buffered().len());
                end(s);
                let f = Failed::timeout();
                tally::error(f.kind);
                return Err(Out::FailedWith(f.message, rest));
            }
        }
    }
}

/// `(v)`: whether `v` is a light userdata: what mlua resumes a waiting coroutine with
/// when it drops the call (a script's own `coroutine.resume` can pass none).
pub(super) unsafe extern "C-unwind" fn is_light(l: *mut lua_State) -> c_int {
    ffi::lua_pushboolean(
        l,
        c_int::from(ffi::lua_type(l, 1) == ffi::LUA_TLIGHTUSERDATA),
    );
    1
}

/// `(id)`: ends a wait of [`wait_receive`] whose coroutine mlua dropped (its request
/// ended first): the connection is closed, as a dropped async receive closes it.
pub(super) unsafe extern "C-unwind" fn give_up(l: *mut lua_State) -> c_int {
    let state = socket_at(l, 1);
    let _ = catch_unwind(AssertUnwindSafe(|| {
        let Some(state) = state else {
            return;
        };
        let Ok(mut s) = state.try_borrow_mut() else {
            return;
        };
        if s.waiting.take().is_some() {
            s.busy = false;
            let io = s.io.take();
            drop(s);
            drop(io);
        }
    }));
    0
}

/// `(mt)`: a new socket, not connected: its handle, a userdata holding its number with
/// metatable `mt` (whose `__gc` is [`collect`]), and its number; `nil` where cosockets
/// are refused (`socket.lua` then raises the phase's error). Made here rather than as an
/// mlua userdata, which costs a callback and a typed userdata per request: the methods
/// of ops.rs get one only when `socket.lua` first needs them.
pub(super) unsafe extern "C-unwind" fn new_socket(l: *mut lua_State) -> c_int {
    let Some(owner) = running().filter(|_| ffi::lua_type(l, 1) == ffi::LUA_TTABLE) else {
        ffi::lua_pushnil(l);
        return 1;
    };
    // Made first, while nothing of Rust's is to be dropped: it may raise (out of memory).
    let handle = ffi::lua_newuserdata(l, std::mem::size_of::<u32>()).cast::<u32>();
    handle.write_unaligned(u32::MAX);
    ffi::lua_pushvalue(l, 1);
    ffi::lua_setmetatable(l, -2);
    let id = catch_unwind(|| super::register(&Rc::new(RefCell::new(State::new(owner)))));
    match id {
        Ok(id) => {
            handle.write_unaligned(id);
            ffi::lua_pushnumber(l, id as ffi::lua_Number);
            2
        }
        Err(_) => {
            ffi::lua_pop(l, 1);
            ffi::lua_pushnil(l);
            1
        }
    }
}

/// `(handle)`: a handle's `__gc`: frees its socket's number, and leaves the handle
/// holding none. A script can still reach a handle after its `__gc` (LuaJIT keeps a
/// finalized userdata as a weak table's key until the next collection), and by then its
/// number may be another socket's.
pub(super) unsafe extern "C-unwind" fn collect(l: *mut lua_State) -> c_int {
    let handle = ffi::lua_touserdata(l, 1).cast::<u32>();
    if !handle.is_null() {
        let id = handle.read_unaligned();
        handle.write_unaligned(u32::MAX);
        if id != u32::MAX {
            let _ = catch_unwind(|| super::unregister(id));
        }
    }
    0
}

/// `(handle, mt)`: the number a handle holds, when it is one (its metatable is `mt`);
/// else `nil`.
pub(super) unsafe extern "C-unwind" fn handle_number(l: *mut lua_State) -> c_int {
    let top = ffi::lua_gettop(l);
    let id = (ffi::lua_type(l, 1) == ffi::LUA_TUSERDATA && ffi::lua_getmetatable(l, 1) != 0)
        .then(|| {
            let same = ffi::lua_rawequal(l, -1, 2) != 0;
            same.then(|| ffi::lua_touserdata(l, 1).cast::<u32>().read_unaligned())
        })
        .flatten()
        .filter(|&id| id != u32::MAX);
    ffi::lua_settop(l, top);
    match id {
        Some(id) => ffi::lua_pushnumber(l, id as ffi::lua_Number),
        None => ffi::lua_pushnil(l),
    }
    1
}

/// `(id, idle, size)`: `setkeepalive` with numbers or nothing: `true, 1`, or `true, nil,
/// message` when the connection could not be kept.
pub(super) unsafe extern "C-unwind" fn setkeepalive(l: *mut lua_State) -> c_int {
    let state = socket_at(l, 1);
    let idle = if absent(l, 2) {
        Some(None)
    } else {
        number_at(l, 2).map(Some)
    };
    let size = if absent(l, 3) {
        Some(None)
    } else {
        number_at(l, 3).map(Some)
    };
    finish(l, || {
        let (Some(state), Some(idle), Some(size)) = (state, idle, size) else {
            return Out::Pass;
        };
        let idle = match idle {
            None => Some(DEFAULT_IDLE),
            Some(0.0) => None,
            Some(ms) => match duration_ms(ms, "keepalive") {
                Ok(d) => Some(d),
                Err(_) => return Out::Pass,
            },
        };
        let size = match size {
            None => None,
            Some(n) if n >= 1.0 && n.fract() == 0.0 => Some(n as usize),
            Some(_) => return Out::Pass,
        };
        match keep(&state, idle, size) {
            Ok(()) => Out::Count(1),
            Err(Failed { kind, message }) => {
                tally::error(kind);
                Out::Failed(message)
            }
        }
    })
}

/// `(id, connect, send, read)`: `settimeouts` with numbers or nothing: `true` when they
/// are set, `nil` to leave them to ops.rs (which names a bad value).
pub(super) unsafe extern "C-unwind" fn settimeouts(l: *mut lua_State) -> c_int {
    let state = socket_at(l, 1);
    let arg = |i| -> Option<Option<f64>> {
        if absent(l, i) {
            Some(None)
        } else {
            number_at(l, i).map(Some)
        }
    };
    let (c, w, r) = (arg(2), arg(3), arg(4));
    let out = catch_unwind(AssertUnwindSafe(|| {
        let (Some(state), Some(c), Some(w), Some(r)) = (state, c, w, r) else {
            return false;
        };
        let ms = |v| millis(v, "", DEFAULT_TIMEOUT);
        let (Ok(c), Ok(w), Ok(r)) = (ms(c), ms(w), ms(r)) else {
            return false;
        };
        let Ok(mut s) = state.try_borrow_mut() else {
            return false;
        };
        let keep = |now: Duration, new: Option<Duration>| new.unwrap_or(now);
        s.connect_timeout = keep(s.connect_timeout, c);
        s.send_timeout = keep(s.send_timeout, w);
        s.read_timeout = keep(s.read_timeout, r);
        true
    }))
    .unwrap_or(false);
    match out {
        true => ffi::lua_pushboolean(l, 1),
        false => ffi::lua_pushnil(l),
    }
    1
}
