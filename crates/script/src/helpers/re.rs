//! `tessera.re`: regular expressions with `ngx.re`'s API (`match`, `find`, `gmatch`, `sub`,
//! `gsub`, captures numbered and named, `ctx.pos`), on the `regex` crate (docs/lua.md,
//! "Regular expressions", says how its syntax differs from PCRE's). Its matching takes time
//! linear in the subject whatever the pattern, so no pattern can stall a worker the way a
//! backtracking one can, and it needs no cost guard as Lua's own patterns do.
//!
//! Compiled regexes are kept per worker (each worker has its own Lua state) in a bounded
//! cache keyed by pattern and options: every call is "compiled once" (PCRE's `o`).

use std::cell::{Cell, RefCell};
use std::collections::{HashMap, VecDeque};
use std::rc::Rc;

use mlua::{Function, Lua, Result as LuaResult, String as LuaString, Table, Value};
use regex::bytes::{Captures, Regex, RegexBuilder};

/// Regexes a worker keeps compiled, as nginx's `lua_regex_cache_max_entries` default; past
/// it, the oldest goes.
pub const CACHE_ENTRIES: usize = 1024;

/// The largest a compiled regex may be (the `regex` crate's `size_limit`): a pattern that
/// compiles to more is refused, so the cache holds at most about `CACHE_ENTRIES` MiB.
pub const MAX_COMPILED: usize = 1 << 20;

/// The options of `ngx.re` that mean something here.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
struct Options {
    caseless: bool,
    multiline: bool,
    dotall: bool,
    extended: bool,
    unicode: bool,
    anchored: bool,
}

impl Options {
    fn parse(s: &[u8]) -> Result<Options, String> {
        let mut o = Options::default();
        for &c in s {
            match c {
                b'i' => o.caseless = true,
                b'm' => o.multiline = true,
                b's' => o.dotall = true,
                b'x' => o.extended = true,
                b'u' | b'U' => o.unicode = true,
                b'a' => o.anchored = true,
                // JIT and compile-once: what every regex here is anyway.
                b'j' | b'o' => {}
                b'd' | b'D' | b'J' => {
                    return Err(format!(
                        "regex option \"{}\" is not supported (docs/lua.md)",
                        c as char
                    ))
                }
                _ => return Err(format!("unknown regex option \"{}\"", c.escape_ascii())),
            }
        }
        Ok(o)
    }
}

struct Compiled {
    regex: Regex,
    /// Group names with their numbers.
    names: Vec<(usize, String)>,
    unicode: bool,
}

/// The regexes compiled from one pattern, by their options.
type ByOptions = Vec<(Options, Rc<Compiled>)>;

#[derive(Default)]
struct Cache {
    by_pattern: HashMap<Box<[u8]>, ByOptions>,
    order: VecDeque<(Box<[u8]>, Options)>,
}

impl Cache {
    fn get(&mut self, pattern: &[u8], options: &[u8]) -> Result<Rc<Compiled>, String> {
        let options = Options::parse(options)?;
        if let Some(found) = self
            .by_pattern
            .get(pattern)
            .and_then(|v| v.iter().find(|(o, _)| *o == options))
        {
            return Ok(found.1.clone());
        }
        let compiled = Rc::new(compile(pattern, options)?);
        if self.order.len() >= CACHE_ENTRIES {
            if let Some((old, o)) = self.order.pop_front() {
                if let Some(v) = self.by_pattern.get_mut(&old) {
                    v.retain(|(x, _)| *x != o);
                    if v.is_empty() {
                        self.by_pattern.remove(&old);
                    }
                }
            }
        }
        let key: Box<[u8]> = pattern.into();
        self.order.push_back((key.clone(), options));
        self.by_pattern
            .entry(key)
            .or_default()
            .push((options, compiled.clone()));
        Ok(compiled)
    }
}

fn compile(pattern: &[u8], o: Options) -> Result<Compiled, String> {
    let pattern =
        std::str::from_utf8(pattern).map_err(|_| "regex is not valid UTF-8".to_string())?;
    let wrapped;
    let pattern = if o.anchored {
        // A newline ends an `x`-mode comment that would hide the closing parenthesis.
        wrapped = format!("\\A(?:{pattern}{})", if o.extended { "\n" } else { "" });
        &wrapped
    } else {
        pattern
    };
    let regex = RegexBuilder::new(pattern)
        .case_insensitive(o.caseless)
        .multi_line(o.multiline)
        .dot_matches_new_line(o.dotall)
        .ignore_whitespace(o.extended)
        .unicode(o.unicode)
        .size_limit(MAX_COMPILED)
        .build()
        .map_err(|e| format!("failed to compile regex: {e}"))?;
    let names = regex
        .capture_names()
        .enumerate()
        .filter_map(|(i, n)| n.map(|n| (i, n.to_string())))
        .collect();
    Ok(Compiled {
        regex,
        names,
        unicode: o.unicode,
    })
}

pub fn install(lua: &Lua, tessera: &Table) -> LuaResult<()> {
    let cache = Rc::new(RefCell::new(Cache::default()));
    let re = lua.create_table()?;
    let compiled = move |pattern: &LuaString, options: &Option<LuaString>| {
        let options = options.as_ref().map(|o| o.as_bytes());
        let options = options.as_deref().map_or(&b""[..], |o| o);
        cache.borrow_mut().get(&pattern.as_bytes(), options)
    };

    let get = compiled.clone();
    re.set(
        "match",
        super::raising::function(
            lua,
            move |lua,
                  (subject, pattern, options, ctx): (
                LuaString,
                LuaString,
                Option<LuaString>,
                Option<Table>,
            )| {
                let c = match get(&pattern, &options) {
                    Ok(c) => c,
                    Err(e) => return Ok((Value::Nil, Value::String(lua.create_string(e)?))),
                };
                let bytes = subject.as_bytes();
                let Some(start) = start(&ctx, bytes.len())? else {
                    return Ok((Value::Nil, Value::Nil));
                };
                match c.regex.captures_at(&bytes, start) {
                    None => Ok((Value::Nil, Value::Nil)),
                    Some(caps) => {
                        set_pos(&ctx, caps.get(0).map_or(start, |m| m.end()))?;
                        Ok((Value::Table(captures(lua, &c, &caps)?), Value::Nil))
                    }
                }
            },
        )?,
    )?;

    let get = compiled.clone();
    re.set(
        "find",
        super::raising::function(
            lua,
            move |lua,
                  (subject, pattern, options, ctx, nth): (
                LuaString,
                LuaString,
                Option<LuaString>,
                Option<Table>,
                Option<usize>,
            )| {
                let c = match get(&pattern, &options) {
                    Ok(c) => c,
                    Err(e) => {
                        return Ok((Value::Nil, Value::Nil, Value::String(lua.create_string(e)?)))
                    }
                };
                let bytes = subject.as_bytes();
                let none = Ok((Value::Nil, Value::Nil, Value::Nil));
                let Some(start) = start(&ctx, bytes.len())? else {
                    return none;
                };
                let Some(caps) = c.regex.captures_at(&bytes, start) else {
                    return none;
                };
                set_pos(&ctx, caps.get(0).map_or(start, |m| m.end()))?;
                match caps.get(nth.unwrap_or(0)) {
                    // 1-based, inclusive: an empty match at 5 is (5, 4), as ngx.re.find.
                    Some(m) => Ok((
                        Value::Integer(m.start() as i64 + 1),
                        Value::Integer(m.end() as i64),
                        Value::Nil,
                    )),
                    None => none,
                }
            },
        )?,
    )?;

    let get = compiled.clone();
    re.set(
        "gmatch",
        super::raising::function(
            lua,
            move |lua, (subject, pattern, options): (LuaString, LuaString, Option<LuaString>)| {
                let c = match get(&pattern, &options) {
                    Ok(c) => c,
                    Err(e) => return Ok((Value::Nil, Value::String(lua.create_string(e)?))),
                };
                let walk = Walk::default();
                let iterator = lua.create_function(move |lua, ()| {
                    let bytes = subject.as_bytes();
                    match walk.next(&c, &bytes) {
                        Some(caps) => Ok(Value::Table(captures(lua, &c, &caps)?)),
                        None => Ok(Value::Nil),
                    }
                })?;
                Ok((Value::Function(iterator), Value::Nil))
            },
        )?,
    )?;

    for (name, all) in [("sub", false), ("gsub", true)] {
        let get = compiled.clone();
        re.set(
            name,
            super::raising::function(
                lua,
                move |lua,
                      (subject, pattern, replace, options): (
                    LuaString,
                    LuaString,
                    Value,
                    Option<LuaString>,
                )| {
                    let c = match get(&pattern, &options) {
                        Ok(c) => c,
                        Err(e) => {
                            return Ok((
                                Value::Nil,
                                Value::Nil,
                                Value::String(lua.create_string(e)?),
                            ))
                        }
                    };
                    let replace = match replace {
                        Value::Function(f) => Replace::Function(f),
                        Value::String(s) => Replace::Template(
                            template(&s.as_bytes()).map_err(mlua::Error::runtime)?,
                        ),
                        Value::Integer(_) | Value::Number(_) => {
                            let s = replace.to_string()?;
                            Replace::Template(template(s.as_bytes()).map_err(mlua::Error::runtime)?)
                        }
                        other => {
                            return Err(mlua::Error::runtime(format!(
                                "bad replace argument: a string or a function expected, got {}",
                                other.type_name()
                            )))
                        }
                    };
                    let (out, n) = substitute(lua, &c, &subject.as_bytes(), &replace, all)?;
                    let out = match out {
                        Some(out) => lua.create_string(out)?,
                        None => subject,
                    };
                    Ok((Value::String(out), Value::Integer(n as i64), Value::Nil))
                },
            )?,
        )?;
    }
    tessera.set("re", re)?;
    Ok(())
}

/// Where a search starts: `ctx.pos` (1-based) or the beginning; `None` past the end.
fn start(ctx: &Option<Table>, len: usize) -> LuaResult<Option<usize>> {
    let Some(ctx) = ctx else { return Ok(Some(0)) };
    let pos: Option<i64> = ctx.get("pos")?;
    match pos.unwrap_or(1) {
        p if p < 1 => Err(mlua::Error::runtime(format!(
            "bad ctx.pos {p}: positions start at 1"
        ))),
        p if p as usize > len + 1 => Ok(None),
        p => Ok(Some(p as usize - 1)),
    }
}

/// `ctx.pos` after a match: the position just after it (1-based).
fn set_pos(ctx: &Option<Table>, end: usize) -> LuaResult<()> {
    match ctx {
        Some(ctx) => ctx.set("pos", end as i64 + 1),
        None => Ok(()),
    }
}

/// `ngx.re.match`'s table: `[0]` the whole match, `[n]` each group, named groups by name
/// too; a group that did not take part is `false`.
fn captures(lua: &Lua, c: &Compiled, caps: &Captures<'_>) -> LuaResult<Table> {
    let t = lua.create_table_with_capacity(caps.len(), c.names.len())?;
    let value = |i: usize| -> LuaResult<Value> {
        Ok(match caps.get(i) {
            Some(m) => Value::String(lua.create_string(m.as_bytes())?),
            None => Value::Boolean(false),
        })
    };
    for i in 0..caps.len() {
        t.raw_set(i, value(i)?)?;
    }
    for (i, name) in &c.names {
        t.raw_set(name.as_str(), value(*i)?)?;
    }
    Ok(t)
}

/// The successive matches in one subject, as the `regex` crate's iterators find them: an
/// empty match right where the previous match ended is skipped.
#[derive(Default)]
struct Walk {
    at: Cell<usize>,
    last_end: Cell<Option<usize>>,
    done: Cell<bool>,
}

impl Walk {
    fn next<'s>(&self, c: &Compiled, subject: &'s [u8]) -> Option<Captures<'s>> {
        while !self.done.get() && self.at.get() <= subject.len() {
            let Some(caps) = c.regex.captures_at(subject, self.at.get()) else {
                break;
            };
            let m = caps.get(0)?;
            if m.is_empty() && self.last_end.get() == Some(m.end()) {
                let mut next = m.end() + 1;
                if c.unicode {
                    while subject.get(next).is_some_and(|b| b & 0xc0 == 0x80) {
                        next += 1;
                    }
                }
                self.at.set(next);
                continue;
            }
            self.last_end.set(Some(m.end()));
            self.at.set(m.end());
            return Some(caps);
        }
        self.done.set(true);
        None
    }
}

/// A replacement template: literal bytes and groups (`$0`, `$1`, `${1}`, `${name}`; `$$`
/// is a `$`).
enum Part {
    Literal(Vec<u8>),
    Group(usize),
    Named(String),
}

enum Replace {
    Template(Vec<Part>),
    Function(Function),
}

fn template(t: &[u8]) -> Result<Vec<Part>, String> {
    let mut parts = Vec::new();
    let mut literal = Vec::new();
    let mut i = 0;
    let invalid = || {
        format!(
            "invalid capturing variable name in replace template \"{}\"",
            t.escape_ascii()
        )
    };
    while i < t.len() {
        if t[i] != b'$' {
            literal.push(t[i]);
            i += 1;
            continue;
        }
        let part = match t.get(i + 1) {
            Some(b'$') => {
                literal.push(b'$');
                i += 2;
                continue;
            }
            Some(b'0'..=b'9') => {
                let digits = t[i + 1..].iter().take_while(|b| b.is_ascii_digit()).count();
                let n = std::str::from_utf8(&t[i + 1..i + 1 + digits]).map_err(|_| invalid())?;
                i += 1 + digits;
                Part::Group(n.parse().map_err(|_| invalid())?)
            }
            Some(b'{') => {
                let close = t[i..].iter().position(|&b| b == b'}').ok_or_else(invalid)?;
                let name = std::str::from_utf8(&t[i + 2..i + close]).map_err(|_| invalid())?;
                i += close + 1;
                if name.is_empty() {
                    return Err(invalid());
                }
                match name.parse() {
                    Ok(n) => Part::Group(n),
                    Err(_) => Part::Named(name.to_string()),
                }
            }
            _ => return Err(invalid()),
        };
        if !literal.is_empty() {
            parts.push(Part::Literal(std::mem::take(&mut literal)));
        }
        parts.push(part);
    }
    if !literal.is_empty() {
        parts.push(Part::Literal(literal));
    }
    Ok(parts)
}

/// The subject with the first match (or every match) replaced, and how many were; `None`
/// when nothing matched.
fn substitute(
    lua: &Lua,
    c: &Compiled,
    subject: &[u8],
    replace: &Replace,
    all: bool,
) -> LuaResult<(Option<Vec<u8>>, usize)> {
    let walk = Walk::default();
    let mut out = Vec::new();
    let mut copied = 0;
    let mut n = 0;
    while let Some(caps) = walk.next(c, subject) {
        let Some(m) = caps.get(0) else { break };
        if n == 0 {
            out.reserve(subject.len());
        }
        out.extend_from_slice(&subject[copied..m.start()]);
        match replace {
            Replace::Template(parts) => {
                for part in parts {
                    let group = match part {
                        Part::Literal(l) => {
                            out.extend_from_slice(l);
                            continue;
                        }
                        Part::Group(i) => caps.get(*i),
                        Part::Named(name) => caps.name(name),
                    };
                    if let Some(g) = group {
                        out.extend_from_slice(g.as_bytes());
                    }
                }
            }
            Replace::Function(f) => match f.call::<Value>(captures(lua, c, &caps)?)? {
                Value::String(s) => out.extend_from_slice(&s.as_bytes()),
                v @ (Value::Integer(_) | Value::Number(_)) => {
                    out.extend_from_slice(v.to_string()?.as_bytes())
                }
                other => {
                    return Err(mlua::Error::runtime(format!(
                        "the replace function returned a {}: a string expected",
                        other.type_name()
                    )))
                }
            },
        }
        copied = m.end();
        n += 1;
        if !all {
            break;
        }
    }
    if n == 0 {
        return Ok((None, 0));
    }
    out.extend_from_slice(&subject[copied..]);
    Ok((Some(out), n))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_and_templates() {
        assert!(Options::parse(b"ijo").unwrap().caseless);
        assert!(Options::parse(b"d").is_err());
        assert!(Options::parse(b"z").is_err());
        assert!(template(b"a$").is_err());
        assert!(template(b"$x").is_err());
        assert!(template(b"${1").is_err());
        let parts = template(b"<$1|${name}|$$|$10>").unwrap();
        assert_eq!(parts.len(), 7);
    }

    #[test]
    fn the_cache_is_bounded() {
        let mut cache = Cache::default();
        for i in 0..CACHE_ENTRIES + 10 {
            cache.get(format!("a{i}").as_bytes(), b"").unwrap();
        }
        assert_eq!(cache.order.len(), CACHE_ENTRIES);
        assert_eq!(cache.by_pattern.len(), CACHE_ENTRIES);
        let a = cache.get(b"x+", b"i").unwrap();
        let b = cache.get(b"x+", b"i").unwrap();
        assert!(Rc::ptr_eq(&a, &b));
    }

    #[test]
    fn bytes_mode_takes_non_ascii_literals() {
        let c = compile("é+".as_bytes(), Options::default()).unwrap();
        assert!(c.regex.is_match("ééé".as_bytes()));
        let c = compile(b"^.$", Options::default()).unwrap();
        assert!(c.regex.is_match(b"\xff"));
    }
}
