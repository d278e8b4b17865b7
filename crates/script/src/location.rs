//! `tessera.location.capture(uri [, opts])` and `capture_multi({ {uri, opts}, ... })`:
//! subrequests to the server's own routes, as OpenResty's `ngx.location.capture`. The
//! server answers them (`handler::Subrequests`, which it installs on each worker thread);
//! this crate only builds the request from the running one and makes a Lua table of the
//! reply.

use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::Poll;

use bytes::Bytes;
use mlua::{AnyUserData, Lua, MultiValue, Result as LuaResult, String as LuaString, Table, Value};

use crate::context::Context;
use crate::vars::Source;

/// The request whose `access` or `content` phase is running now, and its site: what a
/// subrequest is made for. Set by the engine around each poll of a phase.
pub(crate) type Running = Rc<RefCell<Option<(AnyUserData, usize)>>>;

/// No running request while a phase that cannot wait runs (`header_filter`,
/// `body_filter`, `log`), even inside a request's phase (a subrequest's response filtered
/// while its maker's `content` awaits it): a subrequest there is an error.
pub(crate) struct NoRequest<'a> {
    running: &'a Running,
    outer: Option<(AnyUserData, usize)>,
}

impl<'a> NoRequest<'a> {
    pub(crate) fn new(running: &'a Running) -> NoRequest<'a> {
        NoRequest {
            running,
            outer: running.borrow_mut().take(),
        }
    }
}

impl Drop for NoRequest<'_> {
    fn drop(&mut self) {
        *self.running.borrow_mut() = self.outer.take();
    }
}

/// Most body bytes a subrequest's reply keeps (as `tessera.http.request`'s); the rest is
/// dropped and `truncated` set.
pub(crate) const MAX_BODY: usize = 8 << 20;

/// Request fields a subrequest does not take from the request that makes it: the
/// framing of that request's body (a subrequest has its own, or none), the connection's
/// own fields, and what would make the answer other than the whole identity body
/// (compression, conditionals, ranges), as nginx answers subrequests.
const NOT_INHERITED: [&[u8]; 15] = [
    b"content-length",
    b"transfer-encoding",
    b"connection",
    b"keep-alive",
    b"upgrade",
    b"te",
    b"expect",
    b"accept-encoding",
    b"range",
    b"if-range",
    b"if-match",
    b"if-none-match",
    b"if-modified-since",
    b"if-unmodified-since",
    b"http2-settings",
];

pub(crate) fn install(lua: &Lua, tessera: &Table, running: Running) -> LuaResult<()> {
    let location = lua.create_table()?;
    let current = running.clone();
    location.set(
        "capture",
        lua.create_async_function(move |lua, (uri, opts): (LuaString, Option<Table>)| {
            let made = make(&current, &uri, opts.as_ref(), handler::Budget::default());
            async move {
                let reply = run(made?).await?;
                reply_table(&lua, reply)
            }
        })?,
    )?;
    let current = running;
    location.set(
        "capture_multi",
        lua.create_async_function(move |lua, list: Table| {
            // The list's subrequests, and all they make, share one budget.
            let budget = handler::Budget::default();
            let made = list
                .sequence_values::<Table>()
                .map(|item| {
                    let item = item.map_err(|_| {
                        mlua::Error::runtime("capture_multi: each item is a table {uri, opts}")
                    })?;
                    let uri: LuaString = item.get(1).map_err(|_| {
                        mlua::Error::runtime("capture_multi: an item without its uri")
                    })?;
                    let opts: Option<Table> = item.get(2)?;
                    make(&current, &uri, opts.as_ref(), budget.clone())
                })
                .collect::<LuaResult<Vec<_>>>();
            async move {
                let runs: Vec<_> = made?.into_iter().map(|sub| Box::pin(run(sub))).collect();
                let replies = all(runs).await;
                let mut out = MultiValue::new();
                for reply in replies {
                    out.push_back(Value::Table(reply_table(&lua, reply?)?));
                }
                Ok(out)
            }
        })?,
    )?;
    tessera.set("location", location)
}

/// Every future to its end, side by side (the order of their results is theirs).
async fn all<F: Future>(mut running: Vec<Pin<Box<F>>>) -> Vec<F::Output> {
    let mut done: Vec<Option<F::Output>> = running.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (future, slot) in running.iter_mut().zip(done.iter_mut()) {
            if slot.is_none() {
                match future.as_mut().poll(cx) {
                    Poll::Ready(out) => *slot = Some(out),
                    Poll::Pending => pending = true,
                }
            }
        }
        match pending {
            true => Poll::Pending,
            false => Poll::Ready(()),
        }
    })
    .await;
    done.into_iter().flatten().collect()
}

async fn run(sub: handler::Subrequest) -> LuaResult<handler::SubReply> {
    let Some(subrequests) = handler::subrequests() else {
        return Err(mlua::Error::runtime(
            "tessera.location.capture: subrequests are not available here",
        ));
    };
    subrequests
        .run(sub)
        .await
        .map_err(|e| mlua::Error::runtime(format!("tessera.location.capture: {e}")))
}

/// The subrequest `uri` with `opts` makes, for the running request.
fn make(
    running: &Running,
    uri: &LuaString,
    opts: Option<&Table>,
    budget: handler::Budget,
) -> LuaResult<handler::Subrequest> {
    let error = |what: &str| mlua::Error::runtime(format!("tessera.location.capture: {what}"));
    let Some((ud, site)) = running.borrow().clone() else {
        return Err(error("only in a request's access or content phase"));
    };
    let uri = uri.as_bytes();
    if !uri.starts_with(b"/") {
        return Err(error("the uri must start with /"));
    }
    let mut target = Vec::with_capacity(uri.len());
    encode_into(&mut target, &uri);
    let mut method = "GET".to_string();
    let mut body = Bytes::new();
    let mut edits: Vec<(Vec<u8>, Option<Vec<u8>>)> = Vec::new();
    if let Some(opts) = opts {
        if let Some(m) = opts.get::<Option<LuaString>>("method")? {
            let m = m.to_str()?.to_ascii_uppercase();
            if !crate::context::is_token(m.as_bytes()) {
                return Err(error("invalid method"));
            }
            method = m;
        }
        if let Some(b) = opts.get::<Option<LuaString>>("body")? {
            body = Bytes::copy_from_slice(&b.as_bytes());
        }
        match opts.get::<Value>("args")? {
            Value::Nil => {}
            Value::String(s) => append_query(&mut target, &s.as_bytes()),
            Value::Table(t) => append_query(&mut target, &crate::context::query_string(&t)?),
            other => {
                return Err(error(&format!(
                    "args must be a string or a table, not a {}",
                    other.type_name()
                )))
            }
        }
        if let Some(t) = opts.get::<Option<Table>>("headers")? {
            for pair in t.pairs::<LuaString, Value>() {
                let (name, value) = pair?;
                let name = name.as_bytes().to_vec();
                if !crate::context::is_token(&name) {
                    return Err(error("invalid header name"));
                }
                let value = match value {
                    Value::Boolean(false) => None,
                    Value::String(v) => Some(v.as_bytes().to_vec()),
                    v @ (Value::Integer(_) | Value::Number(_)) => Some(v.to_string()?.into_bytes()),
                    _ => return Err(error("a header value is a string, or false to remove it")),
                };
                if value
                    .as_ref()
                    .is_some_and(|v| v.iter().any(|&b| (b < 0x20 && b != b'\t') || b == 0x7f))
                {
                    return Err(error("invalid header value"));
                }
                if name.eq_ignore_ascii_case(b"content-length")
                    || name.eq_ignore_ascii_case(b"transfer-encoding")
                {
                    return Err(error("the body's framing is the server's to set"));
                }
                edits.push((name, value));
            }
        }
    }
    let made = ud.borrow_scoped::<Context, _>(|c| {
        let mut headers: Vec<(Vec<u8>, Vec<u8>)> = c
            .fields()
            .filter(|(n, _)| !NOT_INHERITED.iter().any(|x| n.eq_ignore_ascii_case(x)))
            .filter(|(n, _)| !edits.iter().any(|(e, _)| n.eq_ignore_ascii_case(e)))
            .map(|(n, v)| (n.to_vec(), v.to_vec()))
            .collect();
        for (name, value) in &edits {
            if let Some(value) = value {
                headers.push((name.clone(), value.clone()));
            }
        }
        let unknown = || "0.0.0.0:0".parse().expect("an address");
        handler::Subrequest {
            method,
            target,
            headers,
            body,
            site,
            client: c.client().unwrap_or_else(unknown),
            peer: c.peer().unwrap_or_else(unknown),
            secure: c.secure(),
            max_body: MAX_BODY,
            budget,
        }
    })?;
    Ok(made)
}

/// `res`: `status`, `headers` (lower-case names; a name sent more than once has an array
/// of its values), `body`, `truncated`.
fn reply_table(lua: &Lua, reply: handler::SubReply) -> LuaResult<Table> {
    let res = lua.create_table()?;
    res.set("status", reply.status)?;
    let headers = lua.create_table()?;
    for (name, value) in &reply.headers {
        let name = lua.create_string(name.to_ascii_lowercase())?;
        let value = lua.create_string(value)?;
        match headers.raw_get::<Value>(&name)? {
            Value::Nil => headers.raw_set(name, value)?,
            Value::Table(values) => values.raw_push(value)?,
            first => headers.raw_set(
                name,
                lua.create_sequence_from([first, Value::String(value)])?,
            )?,
        }
    }
    res.set("headers", headers)?;
    res.set("body", lua.create_string(&reply.body)?)?;
    res.set("truncated", reply.truncated)?;
    Ok(res)
}

/// Appends `query` to a target, after `?` or `&`.
fn append_query(target: &mut Vec<u8>, query: &[u8]) {
    if query.is_empty() {
        return;
    }
    target.push(if target.contains(&b'?') { b'&' } else { b'?' });
    encode_into(target, query);
}

/// Appends `bytes` with every byte that may not stand in a request target (outside
/// `!`..`~`, and `#`) as `%XX`.
fn encode_into(out: &mut Vec<u8>, bytes: &[u8]) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    for &b in bytes {
        if (b'!'..=b'~').contains(&b) && b != b'#' {
            out.push(b);
        } else {
            out.extend_from_slice(&[b'%', HEX[(b >> 4) as usize], HEX[(b & 15) as usize]]);
        }
    }
}
