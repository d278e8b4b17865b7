//! `tessera.base64`, `tessera.hex` and `tessera.uri`: byte codecs as OpenResty has them
//! (`ngx.encode_base64`, `ngx.encode_base64url`, `resty.string.to_hex`,
//! `ngx.escape_uri`, `ngx.unescape_uri`). Decoders answer `nil` and a message for input
//! that is not in their form; a wrong argument type is an error.

use base64::alphabet;
use base64::engine::general_purpose::{GeneralPurpose, GeneralPurposeConfig};
use base64::engine::{DecodePaddingMode, Engine};
use mlua::{Lua, Result as LuaResult, String as LuaString, Table, Value};

/// Decoders take input with or without its `=` padding, and ignore bits left over in the
/// last character, as nginx's `ngx_decode_base64` does.
const LENIENT: GeneralPurposeConfig = GeneralPurposeConfig::new()
    .with_encode_padding(true)
    .with_decode_padding_mode(DecodePaddingMode::Indifferent)
    .with_decode_allow_trailing_bits(true);
const STANDARD: GeneralPurpose = GeneralPurpose::new(&alphabet::STANDARD, LENIENT);
const STANDARD_NO_PAD: GeneralPurpose =
    GeneralPurpose::new(&alphabet::STANDARD, LENIENT.with_encode_padding(false));
/// `ngx.encode_base64url` writes no padding.
const URL_SAFE: GeneralPurpose =
    GeneralPurpose::new(&alphabet::URL_SAFE, LENIENT.with_encode_padding(false));

pub fn install(lua: &Lua, tessera: &Table) -> LuaResult<()> {
    let base64 = lua.create_table()?;
    base64.set(
        "encode",
        super::raising::function(lua, |lua, (s, no_padding): (LuaString, Option<bool>)| {
            let engine = match no_padding {
                Some(true) => &STANDARD_NO_PAD,
                _ => &STANDARD,
            };
            lua.create_string(engine.encode(&s.as_bytes()[..]))
        })?,
    )?;
    base64.set(
        "decode",
        super::raising::function(lua, |lua, s: LuaString| {
            decoded(lua, STANDARD.decode(&s.as_bytes()[..]).ok(), "base64")
        })?,
    )?;
    base64.set(
        "encode_url",
        super::raising::function(lua, |lua, s: LuaString| {
            lua.create_string(URL_SAFE.encode(&s.as_bytes()[..]))
        })?,
    )?;
    base64.set(
        "decode_url",
        super::raising::function(lua, |lua, s: LuaString| {
            decoded(lua, URL_SAFE.decode(&s.as_bytes()[..]).ok(), "base64url")
        })?,
    )?;
    tessera.set("base64", base64)?;

    let hex = lua.create_table()?;
    hex.set(
        "encode",
        super::raising::function(lua, |lua, s: LuaString| {
            lua.create_string(hex_encode(&s.as_bytes()))
        })?,
    )?;
    hex.set(
        "decode",
        super::raising::function(lua, |lua, s: LuaString| {
            decoded(lua, hex_decode(&s.as_bytes()), "hex")
        })?,
    )?;
    tessera.set("hex", hex)?;

    let uri = lua.create_table()?;
    uri.set(
        "escape",
        super::raising::function(lua, |lua, s: LuaString| {
            lua.create_string(escape_uri(&s.as_bytes()))
        })?,
    )?;
    uri.set(
        "unescape",
        super::raising::function(lua, |lua, s: LuaString| {
            lua.create_string(unescape_uri(&s.as_bytes()))
        })?,
    )?;
    tessera.set("uri", uri)?;
    Ok(())
}

/// The decoded string, or `nil` and "invalid NAME".
fn decoded(lua: &Lua, bytes: Option<Vec<u8>>, name: &str) -> LuaResult<(Value, Value)> {
    Ok(match bytes {
        Some(b) => (Value::String(lua.create_string(b)?), Value::Nil),
        None => (
            Value::Nil,
            Value::String(lua.create_string(format!("invalid {name}"))?),
        ),
    })
}

const HEX: &[u8; 16] = b"0123456789abcdef";

/// Lower-case hex, two digits a byte.
pub fn hex_encode(s: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(s.len() * 2);
    for &b in s {
        out.push(HEX[(b >> 4) as usize]);
        out.push(HEX[(b & 15) as usize]);
    }
    out
}

/// Hex digits in either case, two a byte; `None` for an odd length or another character.
pub fn hex_decode(s: &[u8]) -> Option<Vec<u8>> {
    if s.len() & 1 == 1 {
        return None;
    }
    s.chunks(2)
        .map(|pair| Some((hex_value(pair[0])? << 4) | hex_value(pair[1])?))
        .collect()
}

fn hex_value(c: u8) -> Option<u8> {
    (c as char).to_digit(16).map(|d| d as u8)
}

/// `ngx.escape_uri` (a URI component): every byte but the unreserved ones of RFC 3986
/// (letters, digits, `-`, `.`, `_`, `~`) as `%XX`, upper-case.
pub fn escape_uri(s: &[u8]) -> Vec<u8> {
    const UPPER: &[u8; 16] = b"0123456789ABCDEF";
    let mut out = Vec::with_capacity(s.len());
    for &b in s {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b);
        } else {
            out.extend_from_slice(&[b'%', UPPER[(b >> 4) as usize], UPPER[(b & 15) as usize]]);
        }
    }
    out
}

/// `ngx.unescape_uri`: `%XX` decoded and `+` as a space; a `%` not followed by two hex
/// digits stays as it is.
pub fn unescape_uri(s: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(s.len());
    let mut i = 0;
    while i < s.len() {
        match s[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < s.len() => match (hex_value(s[i + 1]), hex_value(s[i + 2])) {
                (Some(h), Some(l)) => {
                    out.push((h << 4) | l);
                    i += 2;
                }
                _ => out.push(b'%'),
            },
            c => out.push(c),
        }
        i += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_round_trips_and_refuses_odd_or_foreign_input() {
        assert_eq!(hex_encode(b"\x00\xffAz"), b"00ff417a");
        assert_eq!(hex_decode(b"00FF417a").unwrap(), b"\x00\xffAz");
        assert_eq!(hex_decode(b"abc"), None);
        assert_eq!(hex_decode(b"zz"), None);
        assert_eq!(hex_decode(b"").unwrap(), b"");
    }

    #[test]
    fn uri_escapes_everything_but_unreserved() {
        assert_eq!(
            escape_uri(b"a b/c?d=e&f~g.h-i_j"),
            b"a%20b%2Fc%3Fd%3De%26f~g.h-i_j"
        );
        assert_eq!(escape_uri("é".as_bytes()), b"%C3%A9");
        assert_eq!(unescape_uri(b"a%20b+c%2fd%zz%4"), b"a b c/d%zz%4");
        assert_eq!(unescape_uri(b"%41%"), b"A%");
    }
}
