//! The object a phase function receives (`r`): the request, read lazily, and the
//! response being built. One per request in flight, recycled: in the steady state a
//! worker reuses the same few userdata objects and their buffers, so a request creates
//! no Lua values the script does not ask for.

use std::net::SocketAddr;

use bytes::Bytes;
use mlua::{
    AnyUserData, Lua, MultiValue, Result as LuaResult, String as LuaString, UserData,
    UserDataFields, UserDataMethods, Value,
};

use crate::vars;

/// Response body room a recycled context keeps between requests.
const KEPT_BODY_CAPACITY: usize = 64 * 1024;

/// A byte range of [`Context::head`].
type Span = (u32, u32);

/// One request and its response, as a script sees them.
#[derive(Default)]
pub struct Context {
    /// Copies of the request's method, target and header bytes (reused buffer).
    head: Vec<u8>,
    method: Span,
    target: Span,
    headers: Vec<(Span, Span)>,
    client: Option<SocketAddr>,
    peer: Option<SocketAddr>,
    /// The connection's PROXY v2 TLVs, raw (reused buffer).
    proxy_tlvs: Vec<u8>,
    body: Bytes,
    /// The response: status (200 unless set), extra headers, body.
    pub(crate) status: u16,
    pub(crate) headers_out: Vec<(Vec<u8>, Vec<u8>)>,
    pub(crate) body_out: Vec<u8>,
    /// Set by `exit` and `redirect`: the phase ends and its response goes out.
    pub(crate) exited: bool,
    /// Whether a phase wrote a response (content ran, or access exited).
    pub(crate) responded: bool,
    /// Whether a phase failed (the state may hold the failed call's garbage).
    pub(crate) failed: bool,
    /// Set by `r:no_compress()`: the response goes out without on-the-fly compression.
    pub(crate) no_compress: bool,
    /// Whether a script changed the request's target or fields (`r:set_path`,
    /// `r:set_req_header`...): the server then answers the request as edited.
    target_edited: bool,
    headers_edited: bool,
    /// Whether the request came over TLS (`$scheme`).
    secure: bool,
    /// The request's id (`$request_id`), when the server made one or a script read it.
    request_id: Option<u128>,
    /// The variables a script wrote (`r.var.NAME = v`), by name.
    vars: Vec<(Vec<u8>, Vec<u8>)>,
    /// The names its script may write (`vars` of its `[[script]]`).
    declared: Vec<String>,
    /// Where written variables go for the access log, when it writes any.
    notes: Option<handler::LogNotes>,
    /// The regex the rules chose the script by: its captures are variables.
    regex: Option<regex::bytes::Regex>,
}

/// Raised by `r:exit()` to unwind the phase function; not an error.
#[derive(Debug)]
pub(crate) struct Exit;

impl std::fmt::Display for Exit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("exit")
    }
}

impl std::error::Error for Exit {}

/// The request as the server parsed it.
pub struct RequestHead<'a, I> {
    pub method: &'a [u8],
    /// The request target: path and query.
    pub target: &'a [u8],
    pub headers: I,
    /// The client: the peer, or who a trusted proxy said it is.
    pub client: SocketAddr,
    /// The socket's peer.
    pub peer: SocketAddr,
    /// The TLVs of the connection's PROXY v2 header, raw; empty without one.
    pub proxy_tlvs: &'a [u8],
}

impl Context {
    /// Resets this context for a new request: copies its head (no allocation once the
    /// buffers have grown to the largest head seen).
    pub fn fill<'a, I>(&mut self, req: RequestHead<'a, I>)
    where
        I: Iterator<Item = (&'a [u8], &'a [u8])>,
    {
        self.head.clear();
        self.headers.clear();
        self.method = push(&mut self.head, req.method);
        self.target = push(&mut self.head, req.target);
        for (name, value) in req.headers {
            let n = push(&mut self.head, name);
            let v = push(&mut self.head, value);
            self.headers.push((n, v));
        }
        self.client = Some(req.client);
        self.peer = Some(req.peer);
        self.proxy_tlvs.clear();
        self.proxy_tlvs.extend_from_slice(req.proxy_tlvs);
        self.body = Bytes::new();
        self.status = 200;
        self.headers_out.clear();
        self.body_out.clear();
        if self.body_out.capacity() > KEPT_BODY_CAPACITY {
            // One large response must not pin its buffer in a recycled context.
            self.body_out = Vec::new();
        }
        self.exited = false;
        self.responded = false;
        self.failed = false;
        self.no_compress = false;
        self.target_edited = false;
        self.headers_edited = false;
        self.secure = false;
        self.request_id = None;
        self.vars.clear();
        self.declared.clear();
        self.notes = None;
        self.regex = None;
    }

    /// The variables the request's script may write, and where the access log reads
    /// them (`None`: the log writes none).
    pub fn set_vars(
        &mut self,
        declared: &[String],
        notes: Option<&handler::LogNotes>,
        regex: Option<&regex::bytes::Regex>,
    ) {
        self.declared.extend(declared.iter().cloned());
        self.notes = notes.cloned();
        self.regex = regex.cloned();
    }

    /// What the connection and the server know of the request beyond its head: whether
    /// it came over TLS, and its id when the server made one (`$scheme`, `$request_id`).
    pub fn set_facts(&mut self, secure: bool, request_id: Option<u128>) {
        self.secure = secure;
        self.request_id = request_id;
    }

    /// The request as a script edited it, if it did (its target, its fields, or both).
    pub fn edited_request(&self) -> Option<handler::EditedRequest> {
        if !self.target_edited && !self.headers_edited {
            return None;
        }
        let mut edited = handler::EditedRequest::default();
        if self.target_edited {
            edited.set_target(self.span(self.target));
        }
        if self.headers_edited {
            edited.set_fields(
                self.headers
                    .iter()
                    .map(|&(n, v)| (self.span(n), self.span(v))),
            );
        }
        Some(edited)
    }

    /// A new target from a path and a query (`""`: none), each written as it may stand in
    /// a request line: a byte that may not (a space, a control, non-ASCII, `#`, and `?`
    /// in the path) percent-encoded.
    fn set_target(&mut self, path: &[u8], query: &[u8]) {
        let mut target = Vec::with_capacity(path.len() + query.len() + 1);
        encode_into(&mut target, path, b"?#");
        if !query.is_empty() {
            target.push(b'?');
            encode_into(&mut target, query, b"#");
        }
        self.target = push(&mut self.head, &target);
        self.target_edited = true;
    }

    /// Sets (`replace`) or adds a request field; `value` `None` removes every field `name`.
    fn edit_header(&mut self, name: &[u8], value: Option<&[u8]>, replace: bool) {
        if replace {
            let head = &self.head;
            self.headers
                .retain(|(n, _)| !head[n.0 as usize..n.1 as usize].eq_ignore_ascii_case(name));
        }
        if let Some(value) = value {
            let n = push(&mut self.head, name);
            let v = push(&mut self.head, value);
            self.headers.push((n, v));
        }
        self.headers_edited = true;
    }

    /// The socket's peer.
    pub(crate) fn peer(&self) -> Option<SocketAddr> {
        self.peer
    }

    pub fn set_body(&mut self, body: Bytes) {
        self.body = body;
    }

    fn span(&self, s: Span) -> &[u8] {
        &self.head[s.0 as usize..s.1 as usize]
    }

    fn path(&self) -> &[u8] {
        let t = self.span(self.target);
        &t[..t.iter().position(|&b| b == b'?').unwrap_or(t.len())]
    }

    fn query(&self) -> &[u8] {
        let t = self.span(self.target);
        t.iter()
            .position(|&b| b == b'?')
            .map_or(&[], |i| &t[i + 1..])
    }

    fn header(&self, name: &[u8]) -> Option<&[u8]> {
        self.headers
            .iter()
            .find(|(n, _)| self.span(*n).eq_ignore_ascii_case(name))
            .map(|(_, v)| self.span(*v))
    }

    /// The response status the phase set.
    pub fn status(&self) -> u16 {
        self.status
    }

    /// The response headers a script set (name, value), in order.
    pub fn headers_out(&self) -> &[(Vec<u8>, Vec<u8>)] {
        &self.headers_out
    }

    /// For `header_filter`: the response's headers, to be adjusted in place.
    pub fn headers_out_mut(&mut self) -> &mut Vec<(Vec<u8>, Vec<u8>)> {
        &mut self.headers_out
    }

    pub fn set_status(&mut self, status: u16) {
        self.status = status;
    }

    /// The response body a script wrote.
    pub fn body_out(&self) -> &[u8] {
        &self.body_out
    }

    /// Whether a phase produced the response (`content` ran, or `access` called exit or
    /// redirect).
    pub fn responded(&self) -> bool {
        self.responded
    }

    /// Whether the script opted its response out of compression (`r:no_compress()`).
    pub fn no_compress(&self) -> bool {
        self.no_compress
    }

    fn set_header(&mut self, name: &[u8], value: &[u8], replace: bool) {
        if replace {
            self.headers_out
                .retain(|(n, _)| !n.eq_ignore_ascii_case(name));
        }
        self.headers_out.push((name.to_vec(), value.to_vec()));
    }

    pub(crate) fn append(&mut self, value: &Value) -> LuaResult<()> {
        match value {
            Value::String(s) => self.body_out.extend_from_slice(&s.as_bytes()),
            Value::Integer(i) => self.body_out.extend_from_slice(i.to_string().as_bytes()),
            Value::Number(n) => self.body_out.extend_from_slice(n.to_string().as_bytes()),
            Value::Table(t) => {
                for v in t.sequence_values::<Value>() {
                    self.append(&v?)?;
                }
            }
            Value::Nil => {}
            other => {
                return Err(mlua::Error::runtime(format!(
                    "cannot write a {} to the body",
                    other.type_name()
                )))
            }
        }
        Ok(())
    }
}

impl vars::Source for Context {
    fn method(&self) -> &[u8] {
        self.span(self.method)
    }

    fn path(&self) -> &[u8] {
        Context::path(self)
    }

    fn query(&self) -> &[u8] {
        Context::query(self)
    }

    fn fields(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        self.headers
            .iter()
            .map(|&(n, v)| (self.span(n), self.span(v)))
    }

    fn client(&self) -> Option<SocketAddr> {
        self.client
    }

    fn secure(&self) -> bool {
        self.secure
    }

    fn request_id(&mut self) -> &mut Option<u128> {
        &mut self.request_id
    }

    fn written(&self) -> &[(Vec<u8>, Vec<u8>)] {
        &self.vars
    }

    fn declared(&self) -> &[String] {
        &self.declared
    }

    fn regex(&self) -> Option<&regex::bytes::Regex> {
        self.regex.as_ref()
    }

    fn write(&mut self, name: &[u8], value: Vec<u8>) {
        if let Some(notes) = &self.notes {
            notes.var(&String::from_utf8_lossy(name), &value);
        }
        self.vars.retain(|(n, _)| n[..] != *name);
        self.vars.push((name.to_vec(), value));
    }

    fn set_query(&mut self, query: &[u8]) {
        let path = self.path().to_vec();
        self.set_target(&path, query);
    }
}

/// Appends `bytes` with every byte outside `!`..`~`, and those of `also`, as `%XX`.
fn encode_into(out: &mut Vec<u8>, bytes: &[u8], also: &[u8]) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    for &b in bytes {
        if (b'!'..=b'~').contains(&b) && !also.contains(&b) {
            out.push(b);
        } else {
            out.extend_from_slice(&[b'%', HEX[(b >> 4) as usize], HEX[(b & 15) as usize]]);
        }
    }
}

fn push(buf: &mut Vec<u8>, bytes: &[u8]) -> Span {
    let start = buf.len() as u32;
    buf.extend_from_slice(bytes);
    (start, buf.len() as u32)
}

/// A final response status. 1xx are interim responses: sent alone they would leave the
/// client waiting for the final one, so a script may not set them.
fn valid_status(status: i64) -> LuaResult<u16> {
    if (200..=999).contains(&status) {
        Ok(status as u16)
    } else {
        Err(mlua::Error::runtime(format!(
            "invalid status {status}: a response status must be 200 to 999"
        )))
    }
}

/// Whether `s` is an HTTP token (a method or a field name, RFC 9110 section 5.6.2).
pub(crate) fn is_token(s: &[u8]) -> bool {
    !s.is_empty()
        && s.iter()
            .all(|&b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// A header name or value a script sets must not break the response head.
fn header_bytes<'a>(what: &str, s: &'a [u8]) -> LuaResult<&'a [u8]> {
    if s.iter().any(|&b| b == b'\r' || b == b'\n' || b == 0) || (what == "name" && s.is_empty()) {
        return Err(mlua::Error::runtime(format!("invalid header {what}")));
    }
    Ok(s)
}

/// A request field name a script sets: a token (RFC 9110 section 5.6.2), not one of the
/// fields that frame the request (`Content-Length`, `Transfer-Encoding`), which the server
/// read the body by.
fn request_field_name(name: &[u8]) -> LuaResult<Vec<u8>> {
    if !is_token(name) {
        return Err(mlua::Error::runtime("invalid header name"));
    }
    if name.eq_ignore_ascii_case(b"content-length")
        || name.eq_ignore_ascii_case(b"transfer-encoding")
    {
        return Err(mlua::Error::runtime(format!(
            "{} frames the request body and cannot be changed",
            String::from_utf8_lossy(name)
        )));
    }
    Ok(name.to_vec())
}

/// `{a = "1", b = {"x", "y"}}` as `a=1&b=x&b=y` (keys in the table's order), each part
/// escaped as `tessera.uri.escape` does; `true` is a name alone.
pub(crate) fn query_string(t: &mlua::Table) -> LuaResult<Vec<u8>> {
    let mut out = Vec::new();
    let pair = |out: &mut Vec<u8>, k: &[u8], v: Option<&[u8]>| {
        if !out.is_empty() {
            out.push(b'&');
        }
        out.extend_from_slice(&crate::helpers::codec::escape_uri(k));
        if let Some(v) = v {
            out.push(b'=');
            out.extend_from_slice(&crate::helpers::codec::escape_uri(v));
        }
    };
    for kv in t.pairs::<LuaString, Value>() {
        let (k, v) = kv?;
        let k = k.as_bytes();
        match v {
            Value::Boolean(true) => pair(&mut out, &k, None),
            Value::Boolean(false) => {}
            Value::Table(values) => {
                for v in values.sequence_values::<LuaString>() {
                    pair(&mut out, &k, Some(&v?.as_bytes()));
                }
            }
            Value::String(v) => pair(&mut out, &k, Some(&v.as_bytes())),
            v @ (Value::Integer(_) | Value::Number(_)) => {
                pair(&mut out, &k, Some(v.to_string()?.as_bytes()))
            }
            other => {
                return Err(mlua::Error::runtime(format!(
                    "set_query: a {} cannot be a query value",
                    other.type_name()
                )))
            }
        }
    }
    Ok(out)
}

/// Decodes `%XX` and `+` in a query component.
fn unescape(s: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(s.len());
    let mut i = 0;
    while i < s.len() {
        match s[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < s.len() => {
                let hex = |c: u8| (c as char).to_digit(16);
                match (hex(s[i + 1]), hex(s[i + 2])) {
                    (Some(h), Some(l)) => {
                        out.push((h * 16 + l) as u8);
                        i += 2;
                    }
                    _ => out.push(b'%'),
                }
            }
            c => out.push(c),
        }
        i += 1;
    }
    out
}

fn query_pairs(query: &[u8]) -> impl Iterator<Item = (Vec<u8>, Vec<u8>)> + '_ {
    query
        .split(|&b| b == b'&')
        .filter(|p| !p.is_empty())
        .map(|p| match p.iter().position(|&b| b == b'=') {
            Some(i) => (unescape(&p[..i]), unescape(&p[i + 1..])),
            None => (unescape(p), Vec::new()),
        })
}

fn bytes_or_nil(lua: &Lua, b: Option<&[u8]>) -> LuaResult<Value> {
    match b {
        Some(b) => Ok(Value::String(lua.create_string(b)?)),
        None => Ok(Value::Nil),
    }
}

impl UserData for Context {
    fn add_fields<F: UserDataFields<Self>>(f: &mut F) {
        f.add_field_function_get("var", |lua, ud| vars::table::<Context>(lua, &ud));
    }

    fn add_methods<M: UserDataMethods<Self>>(m: &mut M) {
        // The request.
        m.add_method("method", |lua, c, ()| lua.create_string(c.span(c.method)));
        m.add_method("path", |lua, c, ()| lua.create_string(c.path()));
        m.add_method("query", |lua, c, ()| lua.create_string(c.query()));
        m.add_method("uri", |lua, c, ()| lua.create_string(c.span(c.target)));
        m.add_method("arg", |lua, c, name: LuaString| {
            let name = name.as_bytes();
            let found = query_pairs(c.query()).find(|(k, _)| k[..] == name[..]);
            bytes_or_nil(lua, found.as_ref().map(|(_, v)| &v[..]))
        });
        m.add_method("args", |lua, c, ()| {
            let t = lua.create_table()?;
            for (k, v) in query_pairs(c.query()) {
                t.set(lua.create_string(&k)?, lua.create_string(&v)?)?;
            }
            Ok(t)
        });
        m.add_method("header", |lua, c, name: LuaString| {
            bytes_or_nil(lua, c.header(&name.as_bytes()))
        });
        m.add_method("headers", |lua, c, ()| {
            let t = lua.create_table()?;
            for (n, v) in &c.headers {
                let name = c.span(*n).to_ascii_lowercase();
                t.set(lua.create_string(&name)?, lua.create_string(c.span(*v))?)?;
            }
            Ok(t)
        });
        m.add_method("cookie", |lua, c, name: LuaString| {
            let name = name.as_bytes();
            let found = c
                .headers
                .iter()
                .filter(|(n, _)| c.span(*n).eq_ignore_ascii_case(b"cookie"))
                .find_map(|(_, v)| crate::helpers::cookie::find(c.span(*v), &name));
            bytes_or_nil(lua, found)
        });
        m.add_method("body", |lua, c, ()| lua.create_string(&c.body[..]));
        m.add_method_mut("set_var", |_, c, (name, value): (LuaString, Value)| {
            vars::set(c, &name, value)
        });
        m.add_method("client", |lua, c, ()| match c.client {
            Some(a) => Ok((
                Value::String(lua.create_string(a.ip().to_string())?),
                Value::Integer(a.port() as i64),
            )),
            None => Ok((Value::Nil, Value::Nil)),
        });
        m.add_method("peer", |lua, c, ()| match c.peer {
            Some(a) => Ok((
                Value::String(lua.create_string(a.ip().to_string())?),
                Value::Integer(a.port() as i64),
            )),
            None => Ok((Value::Nil, Value::Nil)),
        });
        m.add_method("proxy_tlv", |lua, c, kind: i64| {
            let value = u8::try_from(kind)
                .ok()
                .and_then(|kind| wire::Tlvs(&c.proxy_tlvs).find(|t| t.0 == kind));
            match value {
                Some((_, v)) => Ok(Value::String(lua.create_string(v)?)),
                None => Ok(Value::Nil),
            }
        });

        // Request edits: the server answers the request as edited (from `access`).
        m.add_method_mut(
            "set_req_header",
            |_, c, (name, value): (LuaString, Option<LuaString>)| {
                let name = request_field_name(&name.as_bytes())?;
                match value {
                    Some(v) => {
                        c.edit_header(&name, Some(header_bytes("value", &v.as_bytes())?), true)
                    }
                    None => c.edit_header(&name, None, true),
                }
                Ok(())
            },
        );
        m.add_method_mut(
            "add_req_header",
            |_, c, (name, value): (LuaString, LuaString)| {
                let name = request_field_name(&name.as_bytes())?;
                c.edit_header(
                    &name,
                    Some(header_bytes("value", &value.as_bytes())?),
                    false,
                );
                Ok(())
            },
        );
        m.add_method_mut("set_path", |_, c, path: LuaString| {
            let path = path.as_bytes();
            if !path.starts_with(b"/") {
                return Err(mlua::Error::runtime("set_path: a path starts with /"));
            }
            let query = c.query().to_vec();
            c.set_target(&path, &query);
            Ok(())
        });
        m.add_method_mut("set_query", |_, c, query: Value| {
            let query = match query {
                Value::Nil => Vec::new(),
                Value::String(s) => s.as_bytes().to_vec(),
                Value::Table(t) => query_string(&t)?,
                other => {
                    return Err(mlua::Error::runtime(format!(
                        "set_query: a string or a table expected, got {}",
                        other.type_name()
                    )))
                }
            };
            let path = c.path().to_vec();
            c.set_target(&path, &query);
            Ok(())
        });

        // The response.
        m.add_method_mut("set_status", |_, c, status: i64| {
            c.status = valid_status(status)?;
            Ok(())
        });
        m.add_method("status", |_, c, ()| Ok(c.status));
        m.add_method_mut(
            "set_header",
            |_, c, (name, value): (LuaString, Option<LuaString>)| {
                let name = name.as_bytes();
                let name = header_bytes("name", &name)?;
                match value {
                    Some(v) => c.set_header(name, header_bytes("value", &v.as_bytes())?, true),
                    None => c.headers_out.retain(|(n, _)| !n.eq_ignore_ascii_case(name)),
                }
                Ok(())
            },
        );
        m.add_method_mut(
            "add_header",
            |_, c, (name, value): (LuaString, LuaString)| {
                let name = name.as_bytes();
                let value = value.as_bytes();
                c.set_header(
                    header_bytes("name", &name)?,
                    header_bytes("value", &value)?,
                    false,
                );
                Ok(())
            },
        );
        m.add_method("resp_header", |lua, c, name: LuaString| {
            let name = name.as_bytes();
            bytes_or_nil(
                lua,
                c.headers_out
                    .iter()
                    .find(|(n, _)| n.eq_ignore_ascii_case(&name))
                    .map(|(_, v)| &v[..]),
            )
        });
        m.add_method_mut("no_compress", |_, c, ()| {
            c.no_compress = true;
            Ok(())
        });
        m.add_method_mut("write", |_, c, values: MultiValue| {
            for v in values.iter() {
                c.append(v)?;
            }
            Ok(())
        });
        m.add_method_mut("say", |_, c, values: MultiValue| {
            for v in values.iter() {
                c.append(v)?;
            }
            c.body_out.push(b'\n');
            Ok(())
        });
        m.add_method_mut("exit", |_, c, (status, body): (i64, Option<Value>)| {
            c.status = valid_status(status)?;
            if let Some(body) = body {
                c.body_out.clear();
                c.append(&body)?;
            }
            c.exited = true;
            Err::<(), _>(mlua::Error::external(Exit))
        });
        m.add_method_mut(
            "redirect",
            |_, c, (url, status): (LuaString, Option<i64>)| {
                let status = valid_status(status.unwrap_or(302))?;
                if !(300..400).contains(&status) {
                    return Err(mlua::Error::runtime("redirect status must be 3xx"));
                }
                c.status = status;
                c.set_header(b"Location", header_bytes("value", &url.as_bytes())?, true);
                c.exited = true;
                Err::<(), _>(mlua::Error::external(Exit))
            },
        );
    }
}

/// The context of a userdata made by [`crate::Engine`].
pub(crate) fn with<R>(ud: &AnyUserData, f: impl FnOnce(&mut Context) -> R) -> Option<R> {
    ud.borrow_mut_scoped::<Context, R>(f).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_arguments_are_decoded() {
        let pairs: Vec<_> = query_pairs(b"a=1&b=x%20y+z&c&&d=%zz").collect();
        assert_eq!(
            pairs,
            vec![
                (b"a".to_vec(), b"1".to_vec()),
                (b"b".to_vec(), b"x y z".to_vec()),
                (b"c".to_vec(), Vec::new()),
                (b"d".to_vec(), b"%zz".to_vec()),
            ]
        );
    }
}
