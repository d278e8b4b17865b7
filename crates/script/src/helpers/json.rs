//! `tessera.json`: JSON encode and decode with lua-cjson's API and edge cases (docs/lua.md,
//! "JSON"). Written by hand rather than through serde_json: a Lua value is walked once and
//! written straight into a reused buffer, and a document is parsed straight into Lua
//! tables, with no tree of serde values between (which would cost an allocation per node
//! and a second walk).

use std::cell::RefCell;
use std::ffi::c_void;
use std::rc::Rc;

use mlua::{LightUserData, Lua, Result as LuaResult, Table, Value};

/// Nesting allowed when encoding and decoding, as cjson's `encode_max_depth` and
/// `decode_max_depth` defaults: deeper is an error (and a table that contains itself is
/// caught by it).
pub const MAX_DEPTH: usize = 1000;

/// cjson's `encode_sparse_array` defaults: a table whose keys are all positive integers is
/// an array unless its largest key is above `SPARSE_SAFE` and more than `SPARSE_RATIO`
/// times the number of keys; such an "excessively sparse array" is an error.
const SPARSE_RATIO: usize = 2;
const SPARSE_SAFE: usize = 10;

/// An encode buffer larger than this is not kept between calls.
const KEPT_BUFFER: usize = 256 * 1024;

/// The address `tessera.json.empty_array` points at (a light userdata, as cjson's).
static EMPTY_ARRAY: u8 = 0;

fn empty_array() -> LightUserData {
    LightUserData(&EMPTY_ARRAY as *const u8 as *mut c_void)
}

/// `tessera.json.null`: cjson's null, a light userdata holding NULL (`ngx.null` too).
pub fn null() -> Value {
    Value::LightUserData(LightUserData(std::ptr::null_mut()))
}

/// Installs `tessera.json`.
pub fn install(lua: &Lua, tessera: &Table) -> LuaResult<()> {
    let json = lua.create_table()?;
    let array_mt = lua.create_table()?;
    json.set("null", null())?;
    json.set("empty_array", Value::LightUserData(empty_array()))?;
    json.set("array_mt", array_mt.clone())?;
    // cjson has both; a table with either encodes as an array, empty or not.
    json.set("empty_array_mt", array_mt.clone())?;

    let marker = array_mt.to_pointer();
    let buffer = Rc::new(RefCell::new(Vec::new()));
    json.set(
        "encode",
        super::raising::function(lua, move |lua, value: Value| {
            let mut out = buffer.borrow_mut();
            out.clear();
            let mut encoder = Encoder {
                out: &mut out,
                array_mt: marker,
                pairs: Vec::new(),
            };
            let result = encoder.value(&value, 0);
            let string = result.and_then(|()| lua.create_string(&encoder.out[..]));
            if out.capacity() > KEPT_BUFFER {
                *out = Vec::new();
            }
            string
        })?,
    )?;
    json.set(
        "decode",
        super::raising::function(lua, move |lua, text: mlua::String| {
            let bytes = text.as_bytes();
            let mut decoder = Decoder {
                lua,
                text: &bytes,
                at: 0,
                array_mt: &array_mt,
                scratch: Vec::new(),
            };
            decoder.document()
        })?,
    )?;
    tessera.set("json", json)?;
    Ok(())
}

struct Encoder<'a> {
    out: &'a mut Vec<u8>,
    array_mt: *const c_void,
    /// A table's pairs, gathered before it is known to be an array or an object; one
    /// vector per nesting level, reused.
    pairs: Vec<Vec<(Value, Value)>>,
}

fn cannot(what: &str, why: &str) -> mlua::Error {
    mlua::Error::runtime(format!("Cannot serialise {what}: {why}"))
}

impl Encoder<'_> {
    fn value(&mut self, value: &Value, depth: usize) -> LuaResult<()> {
        match value {
            Value::Nil => self.out.extend_from_slice(b"null"),
            Value::Boolean(true) => self.out.extend_from_slice(b"true"),
            Value::Boolean(false) => self.out.extend_from_slice(b"false"),
            Value::Integer(i) => self
                .out
                .extend_from_slice(itoa::Buffer::new().format(*i).as_bytes()),
            Value::Number(n) => number(self.out, *n)?,
            Value::String(s) => string(self.out, &s.as_bytes()),
            Value::LightUserData(p) if p.0.is_null() => self.out.extend_from_slice(b"null"),
            Value::LightUserData(p) if *p == empty_array() => self.out.extend_from_slice(b"[]"),
            Value::Table(t) => self.table(t, depth + 1)?,
            other => return Err(cannot(other.type_name(), "type not supported")),
        }
        Ok(())
    }

    fn table(&mut self, t: &Table, depth: usize) -> LuaResult<()> {
        if depth > MAX_DEPTH {
            return Err(mlua::Error::runtime(format!(
                "Cannot serialise, excessive nesting ({depth})"
            )));
        }
        if t.metatable()
            .is_some_and(|mt| mt.to_pointer() == self.array_mt)
        {
            let len = t.raw_len();
            return self.array(t, len, depth);
        }
        let mut pairs = self.pairs.pop().unwrap_or_default();
        pairs.clear();
        t.for_each(|k: Value, v: Value| {
            pairs.push((k, v));
            Ok(())
        })?;
        let result = match array_length(&pairs)? {
            Some(len) if len > 0 => self.array(t, len, depth),
            _ if pairs.is_empty() => {
                // cjson's encode_empty_table_as_object: `{}`.
                self.out.extend_from_slice(b"{}");
                Ok(())
            }
            _ => self.object(&pairs, depth),
        };
        pairs.clear();
        self.pairs.push(pairs);
        result
    }

    fn array(&mut self, t: &Table, len: usize, depth: usize) -> LuaResult<()> {
        self.out.push(b'[');
        for i in 1..=len {
            if i > 1 {
                self.out.push(b',');
            }
            let v: Value = t.raw_get(i)?;
            self.value(&v, depth)?;
        }
        self.out.push(b']');
        Ok(())
    }

    fn object(&mut self, pairs: &[(Value, Value)], depth: usize) -> LuaResult<()> {
        self.out.push(b'{');
        for (i, (k, v)) in pairs.iter().enumerate() {
            if i > 0 {
                self.out.push(b',');
            }
            match k {
                Value::String(s) => string(self.out, &s.as_bytes()),
                Value::Integer(n) => {
                    self.out.push(b'"');
                    self.out
                        .extend_from_slice(itoa::Buffer::new().format(*n).as_bytes());
                    self.out.push(b'"');
                }
                Value::Number(n) => {
                    self.out.push(b'"');
                    number(self.out, *n)?;
                    self.out.push(b'"');
                }
                other => {
                    return Err(cannot(
                        other.type_name(),
                        "table key must be a number or string",
                    ))
                }
            }
            self.out.push(b':');
            self.value(v, depth)?;
        }
        self.out.push(b'}');
        Ok(())
    }
}

/// The length of the array a table's pairs make (`None`: an object): every key a positive
/// integer, not excessively sparse (cjson's rule; the missing items encode as `null`).
fn array_length(pairs: &[(Value, Value)]) -> LuaResult<Option<usize>> {
    let mut max = 0usize;
    for (k, _) in pairs {
        let index = match k {
            Value::Integer(i) if *i >= 1 => *i as f64,
            Value::Number(n) if *n >= 1.0 && n.floor() == *n => *n,
            _ => return Ok(None),
        };
        if index > (u32::MAX as f64) {
            return Err(cannot("table", "excessively sparse array"));
        }
        max = max.max(index as usize);
    }
    if max > pairs.len() * SPARSE_RATIO && max > SPARSE_SAFE {
        return Err(cannot("table", "excessively sparse array"));
    }
    Ok(Some(max))
}

/// A number: integral values below 10^17 as integers (`12`, not `12.0`; every integer up
/// to 2^53 is exact), others in the shortest form that reads back as the same double
/// (`0.1`, `1e300`).
fn number(out: &mut Vec<u8>, n: f64) -> LuaResult<()> {
    if !n.is_finite() {
        return Err(cannot("number", "must not be NaN or Infinity"));
    }
    if n.floor() == n && n.abs() < 1e17 {
        out.extend_from_slice(itoa::Buffer::new().format(n as i64).as_bytes());
        return Ok(());
    }
    let mut buffer = ryu::Buffer::new();
    let s = buffer.format_finite(n);
    // ryu writes `1e300` and `1.5e-7`: JSON reads both.
    out.extend_from_slice(s.as_bytes());
    Ok(())
}

/// cjson's escapes: the control characters (`\b`, `\t`, `\n`, `\f`, `\r` by name, the
/// others as `\u00XX`), `"`, `\`, `/` and DEL; every other byte as it is (UTF-8 is not
/// checked).
fn string(out: &mut Vec<u8>, s: &[u8]) {
    out.reserve(s.len() + 2);
    out.push(b'"');
    let mut start = 0;
    for (i, &b) in s.iter().enumerate() {
        let escape: &[u8] = match b {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            b'/' => b"\\/",
            b'\n' => b"\\n",
            b'\r' => b"\\r",
            b'\t' => b"\\t",
            0x08 => b"\\b",
            0x0c => b"\\f",
            0..=0x1f | 0x7f => b"",
            _ => continue,
        };
        out.extend_from_slice(&s[start..i]);
        if escape.is_empty() {
            const HEX: &[u8; 16] = b"0123456789abcdef";
            out.extend_from_slice(b"\\u00");
            out.push(HEX[(b >> 4) as usize]);
            out.push(HEX[(b & 15) as usize]);
        } else {
            out.extend_from_slice(escape);
        }
        start = i + 1;
    }
    out.extend_from_slice(&s[start..]);
    out.push(b'"');
}

struct Decoder<'a> {
    lua: &'a Lua,
    text: &'a [u8],
    at: usize,
    array_mt: &'a Table,
    /// A string's bytes after its escapes are decoded.
    scratch: Vec<u8>,
}

impl Decoder<'_> {
    fn document(&mut self) -> LuaResult<Value> {
        let value = self.value(0)?;
        self.skip_space();
        if self.at < self.text.len() {
            return Err(self.expected("the end"));
        }
        Ok(value)
    }

    fn skip_space(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.text.get(self.at) {
            self.at += 1;
        }
    }

    /// What is at the cursor, as cjson names it in its errors.
    fn found(&self) -> &'static str {
        match self.text.get(self.at) {
            None => "T_END",
            Some(b'{') => "T_OBJ_BEGIN",
            Some(b'}') => "T_OBJ_END",
            Some(b'[') => "T_ARR_BEGIN",
            Some(b']') => "T_ARR_END",
            Some(b'"') => "T_STRING",
            Some(b'-' | b'0'..=b'9') => "T_NUMBER",
            Some(b':') => "T_COLON",
            Some(b',') => "T_COMMA",
            Some(_) => "invalid token",
        }
    }

    fn expected(&self, what: &str) -> mlua::Error {
        self.error(&format!("Expected {what} but found {}", self.found()))
    }

    fn error(&self, message: &str) -> mlua::Error {
        mlua::Error::runtime(format!("{message} at character {}", self.at + 1))
    }

    fn value(&mut self, depth: usize) -> LuaResult<Value> {
        self.skip_space();
        let Some(&b) = self.text.get(self.at) else {
            return Err(self.expected("value"));
        };
        match b {
            b'{' => self.object(depth + 1),
            b'[' => self.array(depth + 1),
            b'"' => {
                self.string()?;
                Ok(Value::String(self.lua.create_string(&self.scratch)?))
            }
            b'-' | b'0'..=b'9' => self.number(),
            b't' => self.word(b"true", Value::Boolean(true)),
            b'f' => self.word(b"false", Value::Boolean(false)),
            b'n' => self.word(b"null", null()),
            _ => Err(self.expected("value")),
        }
    }

    fn word(&mut self, word: &[u8], value: Value) -> LuaResult<Value> {
        if self.text[self.at..].starts_with(word) {
            self.at += word.len();
            Ok(value)
        } else {
            Err(self.expected("value"))
        }
    }

    fn nest(&self, depth: usize) -> LuaResult<()> {
        if depth > MAX_DEPTH {
            return Err(self.error(&format!("Found too many nested data structures ({depth})")));
        }
        Ok(())
    }

    fn array(&mut self, depth: usize) -> LuaResult<Value> {
        self.nest(depth)?;
        self.at += 1;
        let table = self.lua.create_table()?;
        // Decoded arrays keep their kind: `[]` encodes back as `[]` (cjson with
        // `decode_array_with_array_mt(true)`).
        table.set_metatable(Some(self.array_mt.clone()))?;
        self.skip_space();
        if self.text.get(self.at) == Some(&b']') {
            self.at += 1;
            return Ok(Value::Table(table));
        }
        let mut i = 1;
        loop {
            let v = self.value(depth)?;
            table.raw_set(i, v)?;
            i += 1;
            self.skip_space();
            match self.text.get(self.at) {
                Some(b',') => self.at += 1,
                Some(b']') => {
                    self.at += 1;
                    return Ok(Value::Table(table));
                }
                _ => return Err(self.expected("comma or array end")),
            }
        }
    }

    fn object(&mut self, depth: usize) -> LuaResult<Value> {
        self.nest(depth)?;
        self.at += 1;
        let table = self.lua.create_table()?;
        self.skip_space();
        if self.text.get(self.at) == Some(&b'}') {
            self.at += 1;
            return Ok(Value::Table(table));
        }
        loop {
            self.skip_space();
            if self.text.get(self.at) != Some(&b'"') {
                return Err(self.expected("object key string"));
            }
            self.string()?;
            let key = self.lua.create_string(&self.scratch)?;
            self.skip_space();
            if self.text.get(self.at) != Some(&b':') {
                return Err(self.expected("colon"));
            }
            self.at += 1;
            let v = self.value(depth)?;
            table.raw_set(key, v)?;
            self.skip_space();
            match self.text.get(self.at) {
                Some(b',') => self.at += 1,
                Some(b'}') => {
                    self.at += 1;
                    return Ok(Value::Table(table));
                }
                _ => return Err(self.expected("comma or object end")),
            }
        }
    }

    /// The string at the cursor, its escapes decoded, into `scratch`.
    fn string(&mut self) -> LuaResult<()> {
        self.scratch.clear();
        self.at += 1;
        let text = self.text;
        loop {
            let start = self.at;
            while let Some(&b) = text.get(self.at) {
                if b == b'"' || b == b'\\' || b < 0x20 {
                    break;
                }
                self.at += 1;
            }
            self.scratch.extend_from_slice(&text[start..self.at]);
            match text.get(self.at) {
                None => return Err(self.error("unexpected end of string")),
                Some(b'"') => {
                    self.at += 1;
                    return Ok(());
                }
                Some(b'\\') => self.escape()?,
                Some(_) => return Err(self.error("control character in string")),
            }
        }
    }

    fn escape(&mut self) -> LuaResult<()> {
        let c = match self.text.get(self.at + 1) {
            Some(b'"') => b'"',
            Some(b'\\') => b'\\',
            Some(b'/') => b'/',
            Some(b'b') => 0x08,
            Some(b'f') => 0x0c,
            Some(b'n') => b'\n',
            Some(b'r') => b'\r',
            Some(b't') => b'\t',
            Some(b'u') => return self.unicode_escape(),
            _ => return Err(self.error("invalid escape code")),
        };
        self.scratch.push(c);
        self.at += 2;
        Ok(())
    }

    /// `\uXXXX`, or a surrogate pair of them, as UTF-8.
    fn unicode_escape(&mut self) -> LuaResult<()> {
        let invalid = |d: &Self| d.error("invalid unicode escape code");
        let hex4 = |at: usize| -> Option<u32> {
            let digits = self.text.get(at..at + 4)?;
            let s = std::str::from_utf8(digits).ok()?;
            if !s.bytes().all(|b| b.is_ascii_hexdigit()) {
                return None;
            }
            u32::from_str_radix(s, 16).ok()
        };
        let Some(unit) = hex4(self.at + 2) else {
            return Err(invalid(self));
        };
        let (code, len) = match unit {
            0xd800..=0xdbff => {
                if self.text.get(self.at + 6..self.at + 8) != Some(b"\\u") {
                    return Err(invalid(self));
                }
                match hex4(self.at + 8) {
                    Some(low @ 0xdc00..=0xdfff) => {
                        (0x10000 + ((unit - 0xd800) << 10) + (low - 0xdc00), 12)
                    }
                    _ => return Err(invalid(self)),
                }
            }
            0xdc00..=0xdfff => return Err(invalid(self)),
            unit => (unit, 6),
        };
        let c = char::from_u32(code).ok_or_else(|| invalid(self))?;
        let mut utf8 = [0; 4];
        self.scratch
            .extend_from_slice(c.encode_utf8(&mut utf8).as_bytes());
        self.at += len;
        Ok(())
    }

    /// A number as JSON writes it (`-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?`): an
    /// integer when it has neither fraction nor exponent and fits, else a double.
    fn number(&mut self) -> LuaResult<Value> {
        let text = self.text;
        let start = self.at;
        let mut i = start;
        let digits = |i: &mut usize| {
            let from = *i;
            while text.get(*i).is_some_and(u8::is_ascii_digit) {
                *i += 1;
            }
            *i - from
        };
        if text.get(i) == Some(&b'-') {
            i += 1;
        }
        let int_start = i;
        let n = digits(&mut i);
        if n == 0 || (text[int_start] == b'0' && n > 1) {
            // `-` alone, or a leading zero (`01`).
            self.at = int_start + usize::from(n > 0);
            return Err(self.error("invalid number"));
        }
        let mut integral = true;
        if text.get(i) == Some(&b'.') {
            i += 1;
            integral = false;
            if digits(&mut i) == 0 {
                self.at = i;
                return Err(self.error("invalid number"));
            }
        }
        if let Some(b'e' | b'E') = text.get(i) {
            i += 1;
            integral = false;
            if let Some(b'+' | b'-') = text.get(i) {
                i += 1;
            }
            if digits(&mut i) == 0 {
                self.at = i;
                return Err(self.error("invalid number"));
            }
        }
        self.at = i;
        // ASCII digits, signs, dots and exponents only: valid UTF-8.
        let s = std::str::from_utf8(&text[start..i]).unwrap_or("0");
        if integral {
            if let Ok(n) = s.parse::<i64>() {
                // LuaJIT's numbers are doubles: an integer beyond 2^53 is rounded as
                // cjson rounds it.
                return Ok(Value::Integer(n));
            }
        }
        Ok(Value::Number(s.parse::<f64>().unwrap_or(f64::NAN)))
    }
}
