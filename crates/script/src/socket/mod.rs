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
mod pool;
mod tally;

use std::cell::{Cell, RefCell};
use std::rc::{Rc, Weak};
use std::time::Duration;

use mlua::{AnyUserData, IntoLuaMulti, Lua, MultiValue, Table, UserData, UserDataMethods, Value};

use crate::tally::Phase;
use conn::{Conn, Failed, Io};
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
        let io = {
            let mut s = socket.borrow_mut();
            s.registered = None;
            match s.owner == owner {
                true => s.io.take(),
                false => None,
            }
        };
        drop(io);
    }
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
    /// The host given to `connect`: the TLS name when `sslhandshake` gets none.
    host: String,
}

/// A socket as Lua sees it (`tessera.socket.tcp()`).
struct Socket(Rc<RefCell<State>>);

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
        Some(ms) => Duration::try_from_secs_f64(ms / 1000.0)
            .map(Some)
            .map_err(|_| mlua::Error::runtime(format!("bad {what} timeout: {ms}"))),
    }
}

/// Sets `tessera.socket.tcp` and `tessera.ngx_compat`.
pub(crate) fn install(lua: &Lua, tessera: &Table) -> mlua::Result<()> {
    let socket = lua.create_table()?;
    socket.set(
        "tcp",
        lua.create_function(|_, ()| {
            let owner = owner()?;
            Ok(Socket(Rc::new(RefCell::new(State {
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
            }))))
        })?,
    )?;
    tessera.set("socket", socket)?;
    compat::install(lua, tessera)
}

impl UserData for Socket {
    fn add_methods<M: UserDataMethods<Self>>(methods: &mut M) {
        methods.add_async_method(
            "connect",
            |lua, this, (host, port, opts): (String, Value, Option<Table>)| {
                let state = this.0.clone();
                drop(this);
                async move { connect(&lua, state, host, port, opts).await }
            },
        );
        methods.add_async_method(
            "sslhandshake",
            |lua, this, (first, second, third): (Value, Value, Value)| {
                let state = this.0.clone();
                drop(this);
                async move { sslhandshake(&lua, state, first, second, third).await }
            },
        );
        methods.add_async_method("send", |lua, this, data: Value| {
            let state = this.0.clone();
            drop(this);
            async move { send(&lua, state, data).await }
        });
        methods.add_async_method("receive", |lua, this, pattern: Option<Value>| {
            let state = this.0.clone();
            drop(this);
            async move {
                let want = match pattern {
                    None | Some(Value::Nil) => Want::Line,
                    Some(p) => Want::of(&p)?,
                };
                receive(&lua, state, want).await
            }
        });
        methods.add_async_method("receiveany", |lua, this, max: f64| {
            let state = this.0.clone();
            drop(this);
            async move {
                if !(max >= 1.0 && max.fract() == 0.0) {
                    return Err(mlua::Error::runtime(
                        "bad argument #1 to 'receiveany': a size >= 1 expected",
                    ));
                }
                receive(&lua, state, Want::Any(max as usize)).await
            }
        });
        methods.add_method(
            "receiveuntil",
            |lua, this, (pattern, opts): (mlua::String, Option<Table>)| {
                let pattern = pattern.as_bytes().to_vec();
                if pattern.is_empty() {
                    return Err(mlua::Error::runtime("receiveuntil: the pattern is empty"));
                }
                let inclusive = match opts {
                    Some(t) => t.get::<Option<bool>>("inclusive")?.unwrap_or(false),
                    None => false,
                };
                let state = this.0.clone();
                lua.create_async_function(move |lua, size: Option<Value>| {
                    let state = state.clone();
                    let pattern = pattern.clone();
                    async move {
                        if size.is_some_and(|s| !s.is_nil()) {
                            return Err(mlua::Error::runtime(
                                "a receiveuntil reader takes no size argument here",
                            ));
                        }
                        receive(&lua, state, Want::Until(pattern, inclusive)).await
                    }
                })
            },
        );
        methods.add_method("settimeout", |_, this, ms: Option<f64>| {
            let Some(t) = millis(ms, "socket", DEFAULT_TIMEOUT)? else {
                return Ok(());
            };
            let mut s = this.0.borrow_mut();
            (s.connect_timeout, s.send_timeout, s.read_timeout) = (t, t, t);
            Ok(())
        });
        methods.add_method(
            "settimeouts",
            |_, this, (c, w, r): (Option<f64>, Option<f64>, Option<f64>)| {
                let c = millis(c, "connect", DEFAULT_TIMEOUT)?;
                let w = millis(w, "send", DEFAULT_TIMEOUT)?;
                let r = millis(r, "read", DEFAULT_TIMEOUT)?;
                let mut s = this.0.borrow_mut();
                s.connect_timeout = c.unwrap_or(s.connect_timeout);
                s.send_timeout = w.unwrap_or(s.send_timeout);
                s.read_timeout = r.unwrap_or(s.read_timeout);
                Ok(())
            },
        );
        methods.add_method(
            "setkeepalive",
            |lua, this, (idle, size): (Option<f64>, Option<f64>)| {
                setkeepalive(lua, &this.0, idle, size)
            },
        );
        methods.add_method("getreusedtimes", |lua, this, ()| {
            let s = this.0.borrow();
            match s.io.is_some() || s.busy {
                true => s.reused.into_lua_multi(lua),
                false => fail(lua, Failed::closed()),
            }
        });
        methods.add_method("close", |lua, this, ()| {
            let io = {
                let mut s = this.0.borrow_mut();
                if s.busy {
                    return fail(lua, busy());
                }
                s.io.take()
            };
            match io {
                Some(io) => {
                    drop(io);
                    one(lua)
                }
                None => fail(lua, Failed::closed()),
            }
        });
    }
}

async fn connect(
    lua: &Lua,
    state: Rc<RefCell<State>>,
    host: String,
    port: Value,
    opts: Option<Table>,
) -> mlua::Result<MultiValue> {
    let owner = owner()?;
    if host.starts_with("unix:") {
        return fail(
            lua,
            Failed {
                kind: conn::Kind::Other,
                message: "unix domain sockets are not supported".into(),
            },
        );
    }
    let port = match &port {
        Value::Integer(n) => *n,
        Value::Number(n) if n.fract() == 0.0 => *n as i64,
        Value::String(s) => s.to_str()?.parse().unwrap_or(-1),
        _ => {
            return Err(mlua::Error::runtime(
                "bad argument #2 to 'connect': a port number expected",
            ))
        }
    };
    let Ok(port) = u16::try_from(port) else {
        return Err(mlua::Error::runtime(format!("bad port number: {port}")));
    };
    if port == 0 {
        return Err(mlua::Error::runtime("bad port number: 0"));
    }
    let (pool, pool_size) = match &opts {
        Some(o) => (
            o.get::<Option<String>>("pool")?,
            o.get::<Option<f64>>("pool_size")?,
        ),
        None => (None, None),
    };
    let pool_size = match pool_size {
        Some(n) if n >= 1.0 && n.fract() == 0.0 => Some(n as usize),
        Some(n) => {
            return Err(mlua::Error::runtime(format!(
                "bad \"pool_size\" option value: {n}"
            )))
        }
        None => None,
    };
    let name: Rc<str> = pool.unwrap_or_else(|| format!("{host}:{port}")).into();
    let previous = {
        let mut s = state.borrow_mut();
        if s.busy {
            return fail(lua, busy());
        }
        s.owner = owner;
        s.pool = Some(name.clone());
        s.pool_size = pool_size;
        s.reused = 0;
        s.host = host.clone();
        if s.registered != Some(owner) {
            s.registered = Some(owner);
            OPEN.with(|o| o.borrow_mut().push((owner, Rc::downgrade(&state))));
        }
        s.io.take()
    };
    // Connecting again closes what the socket held, as OpenResty does.
    drop(previous);
    if let Some(size) = pool_size {
        pool::reserve(&name, size);
    }
    if let Some((io, reused)) = pool::take(&name) {
        let mut s = state.borrow_mut();
        s.io = Some(io);
        s.reused = reused + 1;
        tally::connect(tally::Connect::Pooled);
        return one(lua);
    }
    let wait = state.borrow().connect_timeout;
    let held = {
        let mut s = state.borrow_mut();
        s.busy = true;
        Held {
            state: state.clone(),
        }
    };
    match conn::connect(&host, port, wait).await {
        Ok(tcp) => {
            held.give_back(Io::new(Conn::Plain(tcp)));
            tally::connect(tally::Connect::New);
            one(lua)
        }
        Err(f) => {
            drop(held);
            tally::connect(tally::Connect::Failed);
            fail(lua, f)
        }
    }
}

/// `sslhandshake(reused_session, server_name, verify)` (OpenResty's order) or
/// `sslhandshake(server_name, verify)`: told apart by the first argument's type.
async fn sslhandshake(
    lua: &Lua,
    state: Rc<RefCell<State>>,
    first: Value,
    second: Value,
    third: Value,
) -> mlua::Result<MultiValue> {
    owner()?;
    let truthy = |v: &Value| !matches!(v, Value::Nil | Value::Boolean(false));
    let name_of = |v: &Value| -> mlua::Result<Option<String>> {
        match v {
            Value::Nil => Ok(None),
            Value::String(s) => Ok(Some(s.to_str()?.to_string())),
            _ => Err(mlua::Error::runtime(
                "bad argument to 'sslhandshake': server_name must be a string",
            )),
        }
    };
    let (name, verify) = match &first {
        Value::String(_) => (name_of(&first)?, truthy(&second)),
        _ => (name_of(&second)?, truthy(&third)),
    };
    let (held, io) = match Held::take(&state) {
        Ok(taken) => taken,
        Err(f) => return fail(lua, f),
    };
    if io.conn.is_tls() {
        // A connection from the pool that had its handshake already.
        held.give_back(io);
        return true.into_lua_multi(lua);
    }
    let (wait, host) = {
        let s = state.borrow();
        (s.connect_timeout, s.host.clone())
    };
    let name = name.unwrap_or_else(|| {
        host.strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(&host)
            .to_string()
    });
    let Io { conn, buf, pos } = io;
    let Conn::Plain(tcp) = conn else {
        unreachable!("is_tls checked above")
    };
    if pos < buf.len() {
        return fail(
            lua,
            Failed {
                kind: conn::Kind::Tls,
                message: "handshake failed: unread data in buffer".into(),
            },
        );
    }
    match conn::handshake(tcp, &name, verify, wait).await {
        Ok(conn) => {
            held.give_back(Io::new(conn));
            true.into_lua_multi(lua)
        }
        Err(f) => fail(lua, f),
    }
}

/// Appends what `send` takes to `out`: a string, a number, or an array of them (nested
/// arrays too), as OpenResty's.
fn flatten(v: &Value, out: &mut Vec<u8>, depth: usize) -> mlua::Result<()> {
    match v {
        Value::String(s) => out.extend_from_slice(&s.as_bytes()),
        Value::Integer(n) => out.extend_from_slice(n.to_string().as_bytes()),
        Value::Number(n) => {
            out.extend_from_slice(v.to_string().unwrap_or(n.to_string()).as_bytes())
        }
        Value::Boolean(b) => out.extend_from_slice(if *b { b"true" } else { b"false" }),
        Value::Nil => out.extend_from_slice(b"nil"),
        Value::Table(t) if depth < 100 => {
            for item in t.sequence_values::<Value>() {
                flatten(&item?, out, depth + 1)?;
            }
        }
        other => {
            return Err(mlua::Error::runtime(format!(
                "bad argument #1 to 'send' (string, number, boolean, nil, or array table \
                 expected, got {})",
                other.type_name()
            )))
        }
    }
    Ok(())
}

async fn send(lua: &Lua, state: Rc<RefCell<State>>, data: Value) -> mlua::Result<MultiValue> {
    owner()?;
    let mut bytes = Vec::new();
    flatten(&data, &mut bytes, 0)?;
    let (held, mut io) = match Held::take(&state) {
        Ok(taken) => taken,
        Err(f) => return fail(lua, f),
    };
    let wait = state.borrow().send_timeout;
    match io.send(&bytes, wait).await {
        Ok(()) => {
            held.give_back(io);
            bytes.len().into_lua_multi(lua)
        }
        // Any failure closes the connection, a timeout too (part of the data may have
        // gone).
        Err(f) => fail(lua, f),
    }
}

/// What a `receive` waits for.
enum Want {
    Size(usize),
    /// `*l`: a line, its LF and every CR dropped.
    Line,
    /// `*a`: everything until the peer closes.
    All,
    /// `receiveany(max)`: what is there, at most `max`.
    Any(usize),
    /// A `receiveuntil` reader: up to the pattern (with it, when inclusive).
    Until(Vec<u8>, bool),
}

impl Want {
    fn of(v: &Value) -> mlua::Result<Want> {
        let size = |n: f64| -> mlua::Result<Want> {
            if n >= 0.0 && n.fract() == 0.0 {
                Ok(Want::Size(n as usize))
            } else {
                Err(mlua::Error::runtime(format!("bad pattern argument: {n}")))
            }
        };
        match v {
            Value::Integer(n) => size(*n as f64),
            Value::Number(n) => size(*n),
            Value::String(s) => match &*s.as_bytes() {
                b"*l" => Ok(Want::Line),
                b"*a" => Ok(Want::All),
                other => match std::str::from_utf8(other).ok().and_then(|t| t.parse().ok()) {
                    Some(n) => size(n),
                    None => Err(mlua::Error::runtime(format!(
                        "bad pattern argument: {}",
                        String::from_utf8_lossy(other)
                    ))),
                },
            },
            _ => Err(mlua::Error::runtime("bad pattern argument")),
        }
    }
}

/// Where `want` is met in `buffered` (searched from `scanned` on): how many bytes to
/// take and how many of those to return.
fn ready(want: &Want, buffered: &[u8], scanned: usize) -> Option<(usize, usize)> {
    match want {
        Want::Size(n) => (buffered.len() >= *n).then_some((*n, *n)),
        Want::Line => buffered[scanned..]
            .iter()
            .position(|&b| b == b'\n')
            .map(|i| (scanned + i + 1, scanned + i)),
        Want::All => None,
        Want::Any(max) => (!buffered.is_empty()).then(|| {
            let n = buffered.len().min(*max);
            (n, n)
        }),
        Want::Until(pattern, inclusive) => {
            let from = scanned.saturating_sub(pattern.len() - 1);
            buffered[from..]
                .windows(pattern.len())
                .position(|w| w == &pattern[..])
                .map(|i| {
                    let end = from + i + pattern.len();
                    (end, if *inclusive { end } else { from + i })
                })
        }
    }
}

async fn receive(lua: &Lua, state: Rc<RefCell<State>>, want: Want) -> mlua::Result<MultiValue> {
    owner()?;
    let (held, mut io) = match Held::take(&state) {
        Ok(taken) => taken,
        Err(f) => return fail(lua, f),
    };
    let wait = state.borrow().read_timeout;
    let mut scanned = 0;
    loop {
        if let Some((take, keep)) = ready(&want, io.buffered(), scanned) {
            let data = &io.buffered()[..keep];
            let s = if matches!(want, Want::Line) && data.contains(&b'\r') {
                let line: Vec<u8> = data.iter().copied().filter(|&b| b != b'\r').collect();
                lua.create_string(&line)?
            } else {
                lua.create_string(data)?
            };
            io.consume(take);
            held.give_back(io);
            return s.into_lua_multi(lua);
        }
        scanned = io.buffered().len();
        if scanned >= MAX_RECEIVE {
            // The socket is closed: what follows in the stream is lost anyway.
            let f = Failed {
                kind: conn::Kind::Other,
                message: "receive of more than 8 MiB refused (connection closed)".into(),
            };
            return fail(lua, f);
        }
        match io.fill(wait).await {
            Ok(0) => {
                let rest = io.take(io.buffered().len());
                // The peer closed: so is the socket.
                drop(io);
                if matches!(want, Want::All) {
                    return lua.create_string(&rest)?.into_lua_multi(lua);
                }
                return fail_partial(lua, Failed::closed(), &rest);
            }
            Ok(_) => {}
            Err(f) if f.kind == conn::Kind::Timeout => {
                // A read timeout leaves the connection open, as OpenResty's does; what
                // had arrived goes back as `partial`.
                let rest = io.take(io.buffered().len());
                held.give_back(io);
                return fail_partial(lua, f, &rest);
            }
            Err(f) => {
                let rest = io.take(io.buffered().len());
                return fail_partial(lua, f, &rest);
            }
        }
    }
}

fn setkeepalive(
    lua: &Lua,
    state: &Rc<RefCell<State>>,
    idle: Option<f64>,
    size: Option<f64>,
) -> mlua::Result<MultiValue> {
    let idle = match idle {
        None => Some(DEFAULT_IDLE),
        Some(0.0) => None,
        Some(ms) => Some(
            Duration::try_from_secs_f64(ms / 1000.0)
                .map_err(|_| mlua::Error::runtime(format!("bad keepalive timeout: {ms}")))?,
        ),
    };
    let size = match size {
        None => None,
        Some(n) if n >= 1.0 && n.fract() == 0.0 => Some(n as usize),
        Some(n) => return Err(mlua::Error::runtime(format!("bad pool size: {n}"))),
    };
    let mut s = state.borrow_mut();
    if s.busy {
        drop(s);
        return fail(lua, busy());
    }
    let Some(io) = s.io.take() else {
        drop(s);
        return fail(lua, Failed::closed());
    };
    if !io.buffered().is_empty() {
        // What the script did not read would be the next user's first answer.
        drop(io);
        drop(s);
        return fail(
            lua,
            Failed {
                kind: conn::Kind::Other,
                message: "unread data in buffer (connection closed)".into(),
            },
        );
    }
    let name = s.pool.clone().expect("a connected socket has a pool name");
    let capacity = size.or(s.pool_size).unwrap_or(DEFAULT_POOL_SIZE);
    let reused = s.reused;
    drop(s);
    let mut io = io;
    if io.buf.capacity() > 64 << 10 {
        // A large answer's room is not kept for the next user.
        io.buf = Vec::new();
    }
    pool::put(name, io, reused, idle, capacity);
    one(lua)
}
