//! `r:var(name)` and `r.var.NAME`: the variables of the configuration's routing rules
//! (docs/config.md, "Routing and rewriting"), read from a script as nginx's `ngx.var`.
//! Each is worked out from the request as the script sees it (after its own edits),
//! when it is asked for.

use std::net::SocketAddr;

use mlua::{AnyUserData, Lua, Result as LuaResult, String as LuaString, Table, UserData, Value};

/// What the variables are worked out from: the request as a script sees it (the
/// context `r` stands for).
pub(crate) trait Source {
    fn method(&self) -> &[u8];
    /// The path, without the query, as it stands in the target.
    fn path(&self) -> &[u8];
    fn query(&self) -> &[u8];
    /// The request's fields (name, value), in order.
    fn fields(&self) -> impl Iterator<Item = (&[u8], &[u8])>;
    fn client(&self) -> Option<SocketAddr>;
    fn secure(&self) -> bool;
    fn request_id(&mut self) -> &mut Option<u128>;
    /// The variables a script wrote, by name.
    fn written(&self) -> &[(Vec<u8>, Vec<u8>)];
    /// The names a script may write.
    fn declared(&self) -> &[String];
    /// The regex the rules chose the script by, whose captures are variables.
    fn regex(&self) -> Option<&regex::bytes::Regex>;
    /// Writes a declared variable.
    fn write(&mut self, name: &[u8], value: Vec<u8>);
    /// Gives the request another query (`args`), as `r:set_query`.
    fn set_query(&mut self, query: &[u8]);
}

/// Whether `name` may be declared in a script's `vars`: letters, digits and `_`, not
/// starting with a digit (those are captures), and none of tessera's own variables.
pub(crate) fn declarable(name: &str) -> bool {
    let word = !name.is_empty()
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
    let prefixed = ["arg_", "http_", "cookie_"]
        .iter()
        .any(|p| name.starts_with(p));
    word && !prefixed && !BUILT_IN.contains(&name)
}

/// The names of tessera's own variables (besides `arg_`, `http_` and `cookie_` ones).
const BUILT_IN: [&str; 11] = [
    "host",
    "uri",
    "args",
    "query_string",
    "request_method",
    "remote_addr",
    "remote_port",
    "scheme",
    "server_port",
    "request_id",
    "request_uri",
];

fn header<'c, C: Source>(c: &'c C, name: &[u8]) -> Option<&'c [u8]> {
    c.fields()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v)
}

/// The value of the variable `name` for the request in `c`: `Ok(None)` for one the
/// request does not have (a missing argument, field or cookie), an error for a name that
/// is no variable.
pub(crate) fn read<C: Source>(c: &mut C, name: &[u8]) -> LuaResult<Option<Vec<u8>>> {
    if let Some(rest) = name.strip_prefix(b"arg_").filter(|r| !r.is_empty()) {
        return Ok(arg(c.query(), rest).map(<[u8]>::to_vec));
    }
    if let Some(rest) = name.strip_prefix(b"http_").filter(|r| !r.is_empty()) {
        return Ok(field(c, rest).map(<[u8]>::to_vec));
    }
    if let Some(rest) = name.strip_prefix(b"cookie_").filter(|r| !r.is_empty()) {
        let found = c
            .fields()
            .filter(|(n, _)| n.eq_ignore_ascii_case(b"cookie"))
            .find_map(|(_, v)| crate::helpers::cookie::find(v, rest));
        return Ok(found.map(<[u8]>::to_vec));
    }
    if let Some(value) = c.written().iter().find(|(n, _)| n[..] == *name) {
        return Ok(Some(value.1.clone()));
    }
    if c.declared().iter().any(|d| d.as_bytes() == name) {
        // Declared, not written yet: empty, as after nginx's `set $name "";`.
        return Ok(Some(Vec::new()));
    }
    let value = match name {
        b"host" => host(header(c, b"host").unwrap_or_default()).to_ascii_lowercase(),
        b"uri" => {
            let mut normal = Vec::new();
            match wire::normalize_path(c.path(), &mut normal) {
                Ok(()) => normal,
                Err(_) => Vec::new(),
            }
        }
        b"args" | b"query_string" => c.query().to_vec(),
        b"request_method" => c.method().to_vec(),
        b"remote_addr" => c
            .client()
            .map(|a| a.ip().to_string())
            .unwrap_or_default()
            .into(),
        b"remote_port" => c
            .client()
            .map(|a| a.port().to_string())
            .unwrap_or_default()
            .into(),
        b"scheme" => match c.secure() {
            true => b"https".to_vec(),
            false => b"http".to_vec(),
        },
        b"server_port" => server_port(header(c, b"host").unwrap_or_default(), c.secure())
            .to_string()
            .into(),
        b"request_id" => {
            let id = match *c.request_id() {
                Some(id) => id,
                None => {
                    // Made on first use, as nginx makes its `$request_id`; kept for the
                    // request's later reads.
                    let mut bytes = [0u8; 16];
                    getrandom::fill(&mut bytes).map_err(|e| {
                        mlua::Error::runtime(format!("no random bytes for request_id: {e}"))
                    })?;
                    let id = u128::from_ne_bytes(bytes);
                    *c.request_id() = Some(id);
                    id
                }
            };
            format!("{id:032x}").into()
        }
        _ => {
            if let Some(found) = capture(c, name) {
                return Ok(Some(found));
            }
            return Err(mlua::Error::runtime(format!(
                "unknown variable `{}`",
                String::from_utf8_lossy(name)
            )));
        }
    };
    Ok(Some(value))
}

/// A capture group of the script's regex (`1`-`9`, or a group's name) on the normalised
/// path, as the rules matched it: empty when the group took no part or the path no
/// longer matches; `None` when the regex has no such group.
fn capture<C: Source>(c: &C, name: &[u8]) -> Option<Vec<u8>> {
    let regex = c.regex()?;
    let name = std::str::from_utf8(name).ok()?;
    let group = match name.parse::<usize>() {
        Ok(n) if (1..regex.captures_len()).contains(&n) && name.len() == 1 => n,
        Ok(_) => return None,
        Err(_) => regex.capture_names().position(|n| n == Some(name))?,
    };
    let mut path = Vec::new();
    if wire::normalize_path(c.path(), &mut path).is_err() {
        return Some(Vec::new());
    }
    let found = regex.captures(&path).and_then(|caps| caps.get(group));
    Some(found.map_or_else(Vec::new, |m| m.as_bytes().to_vec()))
}

/// The host a Host field names, without its port; empty when it is not a host name or
/// address (as the rules' `$host`).
fn host(field: &[u8]) -> &[u8] {
    let name = match field.iter().rposition(|&b| b == b':') {
        Some(colon) if !field[colon..].contains(&b']') => &field[..colon],
        _ => field,
    };
    let byte = |b: &u8| b.is_ascii_alphanumeric() || b"-.[]:_".contains(b);
    match name.iter().all(byte) && !name.windows(2).any(|w| w == b"..") {
        true => name,
        false => b"",
    }
}

/// The port a Host field names, else the scheme's.
fn server_port(field: &[u8], secure: bool) -> u16 {
    let port = field
        .iter()
        .rposition(|&b| b == b':')
        .filter(|&c| !field[c..].contains(&b']'))
        .and_then(|c| std::str::from_utf8(&field[c + 1..]).ok()?.parse().ok());
    port.unwrap_or(if secure { 443 } else { 80 })
}

/// The first query parameter `name`, as sent (not decoded, as nginx's `$arg_NAME`).
fn arg<'q>(query: &'q [u8], name: &[u8]) -> Option<&'q [u8]> {
    query.split(|&b| b == b'&').find_map(|pair| {
        let (n, v) = match memchr_eq(pair) {
            Some(eq) => (&pair[..eq], &pair[eq + 1..]),
            None => (pair, &b""[..]),
        };
        (n == name).then_some(v)
    })
}

fn memchr_eq(pair: &[u8]) -> Option<usize> {
    pair.iter().position(|&b| b == b'=')
}

/// The request field `name`, `_` standing for `-`, any case (nginx's `$http_NAME`).
fn field<'c, C: Source>(c: &'c C, name: &[u8]) -> Option<&'c [u8]> {
    c.fields()
        .find(|(n, _)| {
            n.len() == name.len()
                && n.iter()
                    .zip(name)
                    .all(|(a, &b)| a.eq_ignore_ascii_case(&b) || (*a == b'-' && b == b'_'))
        })
        .map(|(_, v)| v)
}

/// `r:var(name)` as a Lua value.
pub(crate) fn get<C: Source>(lua: &Lua, c: &mut C, name: &LuaString) -> LuaResult<Value> {
    match read(c, &name.as_bytes())? {
        Some(v) => Ok(Value::String(lua.create_string(&v)?)),
        None => Ok(Value::Nil),
    }
}

/// `r.var`: a table whose fields read (and write) the variables of `r`, and which, called
/// (`r:var(name)`), reads one; made once per context and kept with it.
pub(crate) fn table<C: Source + UserData + 'static>(
    lua: &Lua,
    ud: &AnyUserData,
) -> LuaResult<Table> {
    if let Some(t) = ud.named_user_value::<Option<Table>>("var")? {
        return Ok(t);
    }
    let t = lua.create_table()?;
    let meta = lua.create_table()?;
    // The context is kept in the metatable (a reference Lua's collector sees), not in
    // the functions, which would hold it from Rust for good.
    meta.set("__owner", ud)?;
    let owner = |t: &Table| -> LuaResult<AnyUserData> {
        t.metatable()
            .ok_or_else(|| mlua::Error::runtime("r.var has lost its request"))?
            .get("__owner")
    };
    meta.set(
        "__index",
        lua.create_function(move |lua, (t, name): (Table, LuaString)| {
            owner(&t)?.borrow_mut_scoped::<C, _>(|c| get(lua, c, &name))?
        })?,
    )?;
    // `r:var(name)` is `r.var(r, name)`: the same table, called.
    meta.set(
        "__call",
        lua.create_function(move |lua, (t, _, name): (Table, Value, LuaString)| {
            owner(&t)?.borrow_mut_scoped::<C, _>(|c| get(lua, c, &name))?
        })?,
    )?;
    meta.set(
        "__newindex",
        lua.create_function(move |_, (t, name, value): (Table, LuaString, Value)| {
            owner(&t)?.borrow_mut_scoped::<C, _>(|c| set(c, &name, value))?
        })?,
    )?;
    t.set_metatable(Some(meta))?;
    ud.set_named_user_value("var", &t)?;
    Ok(t)
}

/// `r.var.NAME = value`: `args` (or `query_string`) gives the request another query, as
/// `r:set_query`; a name the script's `vars` declares takes the value; another name is
/// an error.
pub(crate) fn set<C: Source>(c: &mut C, name: &LuaString, value: Value) -> LuaResult<()> {
    let name = name.as_bytes();
    let value = match value {
        Value::Nil => Vec::new(),
        Value::String(s) => s.as_bytes().to_vec(),
        v @ (Value::Integer(_) | Value::Number(_)) => v.to_string()?.into_bytes(),
        other => {
            return Err(mlua::Error::runtime(format!(
                "variable `{}`: a string or a number, not a {}",
                String::from_utf8_lossy(&name),
                other.type_name()
            )))
        }
    };
    if name[..] == *b"args" || name[..] == *b"query_string" {
        c.set_query(&value);
        return Ok(());
    }
    if c.declared().iter().any(|d| d.as_bytes() == &name[..]) {
        c.write(&name, value);
        return Ok(());
    }
    let name = String::from_utf8_lossy(&name);
    Err(mlua::Error::runtime(match declarable(&name) {
        true => format!("variable `{name}` is not declared: add it to the script's `vars`"),
        false => format!("variable `{name}` cannot be written"),
    }))
}
