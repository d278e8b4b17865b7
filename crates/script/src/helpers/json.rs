//! `tessera.json`: JSON encode and decode with lua-cjson's API and edge cases (docs/lua.md,
//! "JSON"). Written by hand rather than through serde_json: a Lua value is walked once and
//! written straight into a reused buffer, and a document is parsed straight into Lua
//! tables, with no tree of serde values between (which would cost an allocation per node
//! and a second walk). Both work on Lua's C API, as cjson does (inside one protected call
//! that mlua makes: a Lua error there, out of memory, becomes an mlua error): through
//! mlua's safe values every table read and write was a protected call of its own, and a
//! 2 KB document cost twice cjson's time (docs/benchmarks.md). LuaJIT raises its errors by
//! unwinding (on x86-64 and arm64), which mlua's protected call catches, so the encoder's
//! and decoder's frames are unwound like any Rust frames; their only owned value is the
//! decoder's scratch buffer.

use std::cell::RefCell;
use std::ffi::c_void;
use std::rc::Rc;

use std::ffi::c_int;

use mlua::{ffi, LightUserData, Lua, Result as LuaResult, Table, Value};

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

/// The registry key of `array_mt`, for the encoder and decoder on the C API.
const ARRAY_MT: &std::ffi::CStr = c"tessera.json.array_mt";

/// Installs `tessera.json`.
pub fn install(lua: &Lua, tessera: &Table) -> LuaResult<()> {
    let json = lua.create_table()?;
    let array_mt = lua.create_table()?;
    json.set("null", null())?;
    json.set("empty_array", Value::LightUserData(empty_array()))?;
    json.set("array_mt", array_mt.clone())?;
    // cjson has both; a table with either encodes as an array, empty or not.
    json.set("empty_array_mt", array_mt.clone())?;
    lua.set_named_registry_value(ARRAY_MT.to_str().unwrap_or_default(), array_mt)?;

    let buffer = Rc::new(RefCell::new(Vec::new()));
    json.set(
        "encode",
        super::raising::function(lua, move |lua, value: Value| {
            let mut out = buffer.borrow_mut();
            out.clear();
            let mut failed = None;
            // SAFETY: the closure keeps the stack balanced (it leaves nothing) and reads
            // only values it pushed or was given.
            unsafe {
                lua.exec_raw::<()>(value, |l| {
                    let top = ffi::lua_gettop(l);
                    ffi::lua_getfield(l, ffi::LUA_REGISTRYINDEX, ARRAY_MT.as_ptr());
                    let mut encoder = Encoder {
                        l,
                        out: &mut out,
                        array_mt: top + 1,
                    };
                    failed = encoder.value(top, 0).err();
                    ffi::lua_settop(l, top - 1);
                })?;
            }
            let result = match failed {
                Some(message) => Err(mlua::Error::runtime(message)),
                None => lua.create_string(&out[..]),
            };
            if out.capacity() > KEPT_BUFFER {
                *out = Vec::new();
            }
            result
        })?,
    )?;
    json.set(
        "decode",
        super::raising::function(lua, move |lua, text: mlua::String| {
            let bytes = text.as_bytes();
            let mut failed = None;
            // SAFETY: as for encode; the closure leaves the decoded value alone.
            let value: Value = unsafe {
                lua.exec_raw((), |l| {
                    let base = ffi::lua_gettop(l);
                    ffi::lua_getfield(l, ffi::LUA_REGISTRYINDEX, ARRAY_MT.as_ptr());
                    let mut decoder = Decoder {
                        l,
                        text: &bytes,
                        at: 0,
                        array_mt: base + 1,
                        scratch: Vec::new(),
                    };
                    match decoder.document() {
                        Ok(()) => ffi::lua_remove(l, base + 1),
                        Err(message) => {
                            failed = Some(message);
                            ffi::lua_settop(l, base);
                        }
                    }
                })?
            };
            match failed {
                Some(message) => Err(mlua::Error::runtime(message)),
                None => Ok(value),
            }
        })?,
    )?;
    tessera.set("json", json)?;
    Ok(())
}

/// Writes Lua values as JSON, reading them on the stack of `l`.
struct Encoder<'a> {
    l: *mut ffi::lua_State,
    out: &'a mut Vec<u8>,
    /// Where `array_mt` is on the stack.
    array_mt: c_int,
}

fn cannot(what: &str, why: &str) -> String {
    format!("Cannot serialise {what}: {why}")
}

fn type_name(t: c_int) -> &'static str {
    match t {
        ffi::LUA_TNIL => "nil",
        ffi::LUA_TBOOLEAN => "boolean",
        ffi::LUA_TLIGHTUSERDATA => "lightuserdata",
        ffi::LUA_TNUMBER => "number",
        ffi::LUA_TSTRING => "string",
        ffi::LUA_TTABLE => "table",
        ffi::LUA_TFUNCTION => "function",
        ffi::LUA_TUSERDATA => "userdata",
        ffi::LUA_TTHREAD => "thread",
        _ => "value",
    }
}

/// The bytes of the string at `idx` (which must be a string: `lua_tolstring` would turn a
/// number in place, which `lua_next` does not survive).
unsafe fn bytes<'s>(l: *mut ffi::lua_State, idx: c_int) -> &'s [u8] {
    let mut len = 0;
    let p = ffi::lua_tolstring(l, idx, &mut len);
    if p.is_null() {
        return &[];
    }
    std::slice::from_raw_parts(p as *const u8, len)
}

impl Encoder<'_> {
    /// The value at `idx`, an absolute index.
    unsafe fn value(&mut self, idx: c_int, depth: usize) -> Result<(), String> {
        let l = self.l;
        match ffi::lua_type(l, idx) {
            ffi::LUA_TNIL => self.out.extend_from_slice(b"null"),
            ffi::LUA_TBOOLEAN => match ffi::lua_toboolean(l, idx) != 0 {
                true => self.out.extend_from_slice(b"true"),
                false => self.out.extend_from_slice(b"false"),
            },
            ffi::LUA_TNUMBER => number(self.out, ffi::lua_tonumber(l, idx))?,
            ffi::LUA_TSTRING => string(self.out, bytes(l, idx)),
            ffi::LUA_TLIGHTUSERDATA => match ffi::lua_touserdata(l, idx) {
                p if p.is_null() => self.out.extend_from_slice(b"null"),
                p if p == empty_array().0 => self.out.extend_from_slice(b"[]"),
                _ => return Err(cannot("lightuserdata", "type not supported")),
            },
            ffi::LUA_TTABLE => self.table(idx, depth + 1)?,
            t => return Err(cannot(type_name(t), "type not supported")),
        }
        Ok(())
    }

    unsafe fn table(&mut self, idx: c_int, depth: usize) -> Result<(), String> {
        let l = self.l;
        if depth > MAX_DEPTH || ffi::lua_checkstack(l, 4) == 0 {
            return Err(format!("Cannot serialise, excessive nesting ({depth})"));
        }
        if ffi::lua_getmetatable(l, idx) != 0 {
            let marked = ffi::lua_rawequal(l, -1, self.array_mt) != 0;
            ffi::lua_pop(l, 1);
            if marked {
                return self.array(idx, ffi::lua_rawlen(l, idx), depth);
            }
        }
        match array_length(l, idx)? {
            Some(len) if len > 0 => self.array(idx, len, depth),
            // cjson's encode_empty_table_as_object: `{}`.
            Some(_) => {
                self.out.extend_from_slice(b"{}");
                Ok(())
            }
            None => self.object(idx, depth),
        }
    }

    unsafe fn array(&mut self, idx: c_int, len: usize, depth: usize) -> Result<(), String> {
        let l = self.l;
        self.out.push(b'[');
        for i in 1..=len {
            if i > 1 {
                self.out.push(b',');
            }
            ffi::lua_rawgeti(l, idx, i as ffi::lua_Integer);
            self.value(ffi::lua_gettop(l), depth)?;
            ffi::lua_pop(l, 1);
        }
        self.out.push(b']');
        Ok(())
    }

    unsafe fn object(&mut self, idx: c_int, depth: usize) -> Result<(), String> {
        let l = self.l;
        self.out.push(b'{');
        let mut first = true;
        ffi::lua_pushnil(l);
        while ffi::lua_next(l, idx) != 0 {
            let value = ffi::lua_gettop(l);
            if !first {
                self.out.push(b',');
            }
            first = false;
            match ffi::lua_type(l, value - 1) {
                ffi::LUA_TSTRING => string(self.out, bytes(l, value - 1)),
                ffi::LUA_TNUMBER => {
                    self.out.push(b'"');
                    number(self.out, ffi::lua_tonumber(l, value - 1))?;
                    self.out.push(b'"');
                }
                t => return Err(cannot(type_name(t), "table key must be a number or string")),
            }
            self.out.push(b':');
            self.value(value, depth)?;
            ffi::lua_pop(l, 1);
        }
        self.out.push(b'}');
        Ok(())
    }
}

/// The length of the array the table at `idx` is (`None`: an object): every key a
/// positive integer, not excessively sparse (cjson's rule; the missing items encode as
/// `null`). `Some(0)` for an empty table.
unsafe fn array_length(l: *mut ffi::lua_State, idx: c_int) -> Result<Option<usize>, String> {
    let (mut max, mut items) = (0f64, 0usize);
    ffi::lua_pushnil(l);
    while ffi::lua_next(l, idx) != 0 {
        let key = match ffi::lua_type(l, -2) {
            ffi::LUA_TNUMBER => ffi::lua_tonumber(l, -2),
            _ => 0.0,
        };
        ffi::lua_pop(l, 1);
        if !(key >= 1.0 && key.floor() == key) {
            ffi::lua_pop(l, 1);
            return Ok(None);
        }
        max = max.max(key);
        items += 1;
    }
    if max > (items * SPARSE_RATIO) as f64 && max > SPARSE_SAFE as f64 {
        return Err(cannot("table", "excessively sparse array"));
    }
    Ok(Some(max as usize))
}

/// A number: integral values below 10^17 as integers (`12`, not `12.0`; every integer up
/// to 2^53 is exact), others in the shortest form that reads back as the same double
/// (`0.1`, `1e300`).
fn number(out: &mut Vec<u8>, n: f64) -> Result<(), String> {
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

/// Parses JSON onto the stack of `l`.
struct Decoder<'a> {
    l: *mut ffi::lua_State,
    text: &'a [u8],
    at: usize,
    /// Where `array_mt` is on the stack.
    array_mt: c_int,
    /// A string's bytes after its escapes are decoded.
    scratch: Vec<u8>,
}

impl Decoder<'_> {
    /// The whole text as one value, pushed.
    unsafe fn document(&mut self) -> Result<(), String> {
        self.value(0)?;
        self.skip_space();
        if self.at < self.text.len() {
            return Err(self.expected("the end"));
        }
        Ok(())
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

    fn expected(&self, what: &str) -> String {
        self.error(&format!("Expected {what} but found {}", self.found()))
    }

    fn error(&self, message: &str) -> String {
        format!("{message} at character {}", self.at + 1)
    }

    /// One value, pushed.
    unsafe fn value(&mut self, depth: usize) -> Result<(), String> {
        let l = self.l;
        self.skip_space();
        let Some(&b) = self.text.get(self.at) else {
            return Err(self.expected("value"));
        };
        match b {
            b'{' => return self.object(depth + 1),
            b'[' => return self.array(depth + 1),
            b'"' => {
                self.string()?;
                push_bytes(l, &self.scratch);
            }
            b'-' | b'0'..=b'9' => self.number()?,
            b't' => {
                self.word(b"true")?;
                ffi::lua_pushboolean(l, 1);
            }
            b'f' => {
                self.word(b"false")?;
                ffi::lua_pushboolean(l, 0);
            }
            b'n' => {
                self.word(b"null")?;
                ffi::lua_pushlightuserdata(l, std::ptr::null_mut());
            }
            _ => return Err(self.expected("value")),
        }
        Ok(())
    }

    fn word(&mut self, word: &[u8]) -> Result<(), String> {
        if self.text[self.at..].starts_with(word) {
            self.at += word.len();
            Ok(())
        } else {
            Err(self.expected("value"))
        }
    }

    unsafe fn nest(&self, depth: usize) -> Result<(), String> {
        // A table and a key on the stack per level, and room for one value.
        if depth > MAX_DEPTH || ffi::lua_checkstack(self.l, 4) == 0 {
            return Err(self.error(&format!("Found too many nested data structures ({depth})")));
        }
        Ok(())
    }

    unsafe fn array(&mut self, depth: usize) -> Result<(), String> {
        let l = self.l;
        self.nest(depth)?;
        self.at += 1;
        ffi::lua_createtable(l, 0, 0);
        // Decoded arrays keep their kind: `[]` encodes back as `[]` (cjson with
        // `decode_array_with_array_mt(true)`).
        ffi::lua_pushvalue(l, self.array_mt);
        ffi::lua_setmetatable(l, -2);
        self.skip_space();
        if self.text.get(self.at) == Some(&b']') {
            self.at += 1;
            return Ok(());
        }
        let mut i = 1;
        loop {
            self.value(depth)?;
            ffi::lua_rawseti(l, -2, i);
            i += 1;
            self.skip_space();
            match self.text.get(self.at) {
                Some(b',') => self.at += 1,
                Some(b']') => {
                    self.at += 1;
                    return Ok(());
                }
                _ => return Err(self.expected("comma or array end")),
            }
        }
    }

    unsafe fn object(&mut self, depth: usize) -> Result<(), String> {
        let l = self.l;
        self.nest(depth)?;
        self.at += 1;
        ffi::lua_createtable(l, 0, 0);
        self.skip_space();
        if self.text.get(self.at) == Some(&b'}') {
            self.at += 1;
            return Ok(());
        }
        loop {
            self.skip_space();
            if self.text.get(self.at) != Some(&b'"') {
                return Err(self.expected("object key string"));
            }
            self.string()?;
            push_bytes(l, &self.scratch);
            self.skip_space();
            if self.text.get(self.at) != Some(&b':') {
                return Err(self.expected("colon"));
            }
            self.at += 1;
            self.value(depth)?;
            ffi::lua_rawset(l, -3);
            self.skip_space();
            match self.text.get(self.at) {
                Some(b',') => self.at += 1,
                Some(b'}') => {
                    self.at += 1;
                    return Ok(());
                }
                _ => return Err(self.expected("comma or object end")),
            }
        }
    }

    /// The string at the cursor, its escapes decoded, into `scratch`.
    fn string(&mut self) -> Result<(), String> {
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

    fn escape(&mut self) -> Result<(), String> {
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
    fn unicode_escape(&mut self) -> Result<(), String> {
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
    unsafe fn number(&mut self) -> Result<(), String> {
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
        match s.parse::<i64>() {
            // LuaJIT's numbers are doubles: an integer beyond 2^53 is rounded as cjson
            // rounds it.
            Ok(n) if integral => ffi::lua_pushinteger(self.l, n as ffi::lua_Integer),
            _ => ffi::lua_pushnumber(self.l, s.parse::<f64>().unwrap_or(f64::NAN)),
        }
        Ok(())
    }
}

/// Pushes `bytes` as a Lua string.
unsafe fn push_bytes(l: *mut ffi::lua_State, bytes: &[u8]) {
    ffi::lua_pushlstring(l, bytes.as_ptr() as *const std::ffi::c_char, bytes.len());
}
