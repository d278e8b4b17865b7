//! The socket's methods (`impl UserData for Socket`): what each does, and, for those
//! that may wait, a part that finishes at once when it can (`_*_now`, a plain call: the
//! data is buffered, the write fits in the socket, the pool has a connection) and one
//! that awaits (a call that yields). `socket.lua` joins the two into the method a script
//! calls, so the common case pays for no future.

use std::cell::RefCell;
use std::rc::Rc;
use std::task::{Context, Poll};
use std::time::Duration;

use mlua::{IntoLua, IntoLuaMulti, Lua, MultiValue, Table, UserData, UserDataMethods, Value};
use tokio::io::AsyncWrite;

use super::conn::{self, Conn, Failed, Io};
use super::{
    busy, duration_ms, fail, fail_partial, millis, one, owner, pool, tally, Held, Socket, State,
    DEFAULT_IDLE, DEFAULT_POOL_SIZE, DEFAULT_TIMEOUT, MAX_RECEIVE, OPEN,
};

thread_local! {
    /// The pool name `host:port` made last on this thread, given again to the next
    /// socket that connects to the same server.
    static LAST_POOL: RefCell<Option<Rc<str>>> = const { RefCell::new(None) };
}

impl UserData for Socket {
    fn add_methods<M: UserDataMethods<Self>>(methods: &mut M) {
        methods.add_method(
            "_connect_now",
            |lua, this, (host, port, opts): (mlua::String, Value, Option<Table>)| {
                connect_now(lua, &this.0, &host.to_str()?, port, opts)
            },
        );
        methods.add_async_method("_connect", |lua, this, ()| {
            let state = this.0.clone();
            drop(this);
            async move { connect(&lua, state).await }
        });
        methods.add_async_method(
            "sslhandshake",
            |lua, this, (first, second, third): (Value, Value, Value)| {
                let state = this.0.clone();
                drop(this);
                async move { sslhandshake(&lua, state, first, second, third).await }
            },
        );
        methods.add_method("_send_now", |lua, this, data: Value| {
            send_now(lua, &this.0, &data)
        });
        methods.add_async_method("_send", |lua, this, ()| {
            let state = this.0.clone();
            drop(this);
            async move { send(&lua, state).await }
        });
        methods.add_method("_receive_now", |lua, this, pattern: Option<Value>| {
            receive_now(lua, &this.0, &Want::of(pattern.as_ref())?)
        });
        methods.add_async_method("_receive", |lua, this, pattern: Option<Value>| {
            let state = this.0.clone();
            drop(this);
            async move { receive(&lua, state, Want::of(pattern.as_ref())?).await }
        });
        methods.add_method("_receiveany_now", |lua, this, max: f64| {
            receive_now(lua, &this.0, &Want::any(max)?)
        });
        methods.add_async_method("_receiveany", |lua, this, max: f64| {
            let state = this.0.clone();
            drop(this);
            async move { receive(&lua, state, Want::any(max)?).await }
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

/// What `connect` can do at once: check its arguments, close what the socket held, and
/// take a connection from the pool. `(true, 1)` when it took one, `false` when a new
/// connection must be made ([`connect`]).
fn connect_now(
    lua: &Lua,
    state: &Rc<RefCell<State>>,
    host: &str,
    port: Value,
    opts: Option<Table>,
) -> mlua::Result<MultiValue> {
    let owner = owner()?;
    if host.starts_with("unix:") {
        let f = Failed {
            kind: conn::Kind::Other,
            message: "unix domain sockets are not supported".into(),
        };
        return done(lua, fail(lua, f)?);
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
    let port = match u16::try_from(port) {
        Ok(p) if p > 0 => p,
        _ => return Err(mlua::Error::runtime(format!("bad port number: {port}"))),
    };
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
    let pool: Option<Rc<str>> = pool.map(Into::into);
    match attach(state, owner, host, port, pool, pool_size) {
        Attach::Busy => done(lua, fail(lua, busy())?),
        Attach::Pooled => done(lua, one(lua)?),
        Attach::New => false.into_lua_multi(lua),
    }
}

/// What [`attach`] did.
pub(super) enum Attach {
    /// A call on the socket is in progress: nothing done.
    Busy,
    /// A connection was taken from the pool.
    Pooled,
    /// Host and port are recorded; a new connection must be made ([`connect`]).
    New,
}

/// `connect`'s part that never waits, its arguments checked: closes what the socket
/// held, records host, port and pool, and takes a connection from the pool.
pub(super) fn attach(
    state: &Rc<RefCell<State>>,
    owner: u64,
    host: &str,
    port: u16,
    pool: Option<Rc<str>>,
    pool_size: Option<usize>,
) -> Attach {
    let name: Rc<str> = match pool {
        Some(name) => name,
        None => {
            // The same name as last time (a socket reused request after request) costs
            // no allocation; nor does the same name as this worker's last (a new socket
            // per request, to the same server).
            let mut digits = itoa::Buffer::new();
            let digits = digits.format(port);
            let is = |p: &Rc<str>| {
                p.strip_prefix(host).and_then(|rest| rest.strip_prefix(':')) == Some(digits)
            };
            let mine = state.borrow().pool.clone().filter(is);
            let last = || LAST_POOL.with(|l| l.borrow().clone().filter(is));
            match mine.or_else(last) {
                Some(name) => name,
                None => {
                    let name: Rc<str> = format!("{host}:{port}").into();
                    LAST_POOL.with(|l| *l.borrow_mut() = Some(name.clone()));
                    name
                }
            }
        }
    };
    let previous = {
        let mut s = state.borrow_mut();
        if s.busy {
            return Attach::Busy;
        }
        s.owner = owner;
        s.pool = Some(name.clone());
        s.pool_size = pool_size;
        s.reused = 0;
        s.port = port;
        if s.host != host {
            host.clone_into(&mut s.host);
        }
        if s.registered != Some(owner) {
            s.registered = Some(owner);
            OPEN.with(|o| o.borrow_mut().push((owner, Rc::downgrade(state))));
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
        return Attach::Pooled;
    }
    Attach::New
}

/// `true` and what a `_*_now` call finished with.
fn done(lua: &Lua, results: MultiValue) -> mlua::Result<MultiValue> {
    let mut out = results;
    out.push_front(true.into_lua(lua)?);
    Ok(out)
}

/// A new connection to the host and port [`connect_now`] recorded.
async fn connect(lua: &Lua, state: Rc<RefCell<State>>) -> mlua::Result<MultiValue> {
    owner()?;
    let (host, port, wait) = {
        let s = state.borrow();
        (s.host.clone(), s.port, s.connect_timeout)
    };
    let held = {
        let mut s = state.borrow_mut();
        if s.busy {
            drop(s);
            return fail(lua, busy());
        }
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
    if io.conn.is_tls() {
        // A connection from the pool that had its handshake already: given only to a
        // handshake of the same name that asks for no more verification than it had.
        let same = io
            .tls
            .as_ref()
            .is_some_and(|(had, verified)| *had == name && (*verified || !verify));
        if same {
            held.give_back(io);
            return true.into_lua_multi(lua);
        }
        drop(io);
        return fail(
            lua,
            Failed {
                kind: conn::Kind::Tls,
                message: "handshake failed: the pooled connection was made for another \
                          server name or without verification (use another pool name)"
                    .into(),
            },
        );
    }
    let Io { conn, buf, pos, .. } = io;
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
            let mut io = Io::new(conn);
            io.tls = Some((name, verify));
            held.give_back(io);
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

/// What `send` can do at once: the whole of `data` written without waiting, `(true,
/// bytes)`; otherwise `false`, with what is left to send kept for [`send`].
fn send_now(lua: &Lua, state: &Rc<RefCell<State>>, data: &Value) -> mlua::Result<MultiValue> {
    owner()?;
    let mut bytes = Vec::new();
    flatten(data, &mut bytes, 0)?;
    let (held, mut io) = match Held::take(state) {
        Ok(taken) => taken,
        Err(f) => return done(lua, fail(lua, f)?),
    };
    let total = bytes.len();
    let mut sent = 0;
    if let Conn::Plain(tcp) = &mut io.conn {
        // A request of a few KiB fits in the socket's buffer: written here, no future.
        let mut cx = Context::from_waker(std::task::Waker::noop());
        while sent < total {
            match std::pin::Pin::new(&mut *tcp).poll_write(&mut cx, &bytes[sent..]) {
                Poll::Ready(Ok(n)) if n > 0 => sent += n,
                Poll::Ready(Ok(_)) => break,
                Poll::Ready(Err(e)) => return done(lua, fail(lua, Failed::io(&e))?),
                Poll::Pending => break,
            }
        }
    }
    held.give_back(io);
    if sent == total {
        return done(lua, total.into_lua_multi(lua)?);
    }
    bytes.drain(..sent);
    state.borrow_mut().unsent = Some((bytes, total));
    false.into_lua_multi(lua)
}

/// Sends what [`send_now`] could not, and returns the bytes of the whole `send`.
async fn send(lua: &Lua, state: Rc<RefCell<State>>) -> mlua::Result<MultiValue> {
    owner()?;
    let Some((bytes, total)) = state.borrow_mut().unsent.take() else {
        return fail(lua, Failed::closed());
    };
    let (held, mut io) = match Held::take(&state) {
        Ok(taken) => taken,
        Err(f) => return fail(lua, f),
    };
    let wait = state.borrow().send_timeout;
    match io.send(&bytes, wait).await {
        Ok(()) => {
            held.give_back(io);
            total.into_lua_multi(lua)
        }
        // Any failure closes the connection, a timeout too (part of the data may have
        // gone).
        Err(f) => fail(lua, f),
    }
}

/// What a `receive` waits for.
pub(super) enum Want {
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
    /// `receive`'s pattern (none: a line).
    fn of(v: Option<&Value>) -> mlua::Result<Want> {
        let Some(v) = v else {
            return Ok(Want::Line);
        };
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
            Value::Nil => Ok(Want::Line),
            _ => Err(mlua::Error::runtime("bad pattern argument")),
        }
    }

    /// `receiveany`'s size.
    fn any(max: f64) -> mlua::Result<Want> {
        if !(max >= 1.0 && max.fract() == 0.0) {
            return Err(mlua::Error::runtime(
                "bad argument #1 to 'receiveany': a size >= 1 expected",
            ));
        }
        Ok(Want::Any(max as usize))
    }
}

/// Where `want` is met in `buffered` (searched from `scanned` on): how many bytes to
/// take and how many of those to return.
pub(super) fn ready(want: &Want, buffered: &[u8], scanned: usize) -> Option<(usize, usize)> {
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

/// The Lua string of what `want` takes from the front of `io`'s buffer (`take` bytes, of
/// which the first `keep` are returned), taken.
fn deliver(
    lua: &Lua,
    io: &mut Io,
    want: &Want,
    take: usize,
    keep: usize,
) -> mlua::Result<MultiValue> {
    let data = &io.buffered()[..keep];
    let s = if matches!(want, Want::Line) && data.contains(&b'\r') {
        let line: Vec<u8> = data.iter().copied().filter(|&b| b != b'\r').collect();
        lua.create_string(&line)?
    } else {
        lua.create_string(data)?
    };
    io.consume(take);
    s.into_lua_multi(lua)
}

/// What `receive` can answer at once, from what is buffered: `(true, data)`, or the
/// socket's error; `false` when it must wait for more ([`receive`]).
fn receive_now(lua: &Lua, state: &Rc<RefCell<State>>, want: &Want) -> mlua::Result<MultiValue> {
    owner()?;
    let mut s = state.borrow_mut();
    if s.busy {
        drop(s);
        return done(lua, fail(lua, busy())?);
    }
    let Some(io) = s.io.as_mut() else {
        drop(s);
        return done(lua, fail(lua, Failed::closed())?);
    };
    match ready(want, io.buffered(), 0) {
        Some((take, keep)) => done(lua, deliver(lua, io, want, take, keep)?),
        None => false.into_lua_multi(lua),
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
            let out = deliver(lua, &mut io, &want, take, keep);
            held.give_back(io);
            return out;
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
        Some(ms) => Some(duration_ms(ms, "keepalive")?),
    };
    let size = match size {
        None => None,
        Some(n) if n >= 1.0 && n.fract() == 0.0 => Some(n as usize),
        Some(n) => return Err(mlua::Error::runtime(format!("bad pool size: {n}"))),
    };
    match keep(state, idle, size) {
        Ok(()) => one(lua),
        Err(f) => fail(lua, f),
    }
}

/// `setkeepalive`'s work, its arguments checked: the connection put in its pool (idle
/// at most `idle`; the pool holding at most `size`, else the `connect`'s or the
/// default), or why not (it is closed then, unless a call holds it).
pub(super) fn keep(
    state: &Rc<RefCell<State>>,
    idle: Option<Duration>,
    size: Option<usize>,
) -> Result<(), Failed> {
    let mut s = state.borrow_mut();
    if s.busy {
        return Err(busy());
    }
    let Some(io) = s.io.take() else {
        return Err(Failed::closed());
    };
    if !io.buffered().is_empty() {
        // What the script did not read would be the next user's first answer.
        return Err(Failed {
            kind: conn::Kind::Other,
            message: "unread data in buffer (connection closed)".into(),
        });
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
    Ok(())
}
