//! Cookies of a request's `Cookie` fields (RFC 6265 section 5.4): `r:cookie(name)` and
//! `tessera.cookie.parse(header)`. Values are returned as sent: not unquoted, not
//! percent-decoded (as nginx's `$cookie_NAME`).

use mlua::{Lua, Result as LuaResult, String as LuaString, Table};

pub fn install(lua: &Lua, tessera: &Table) -> LuaResult<()> {
    let cookie = lua.create_table()?;
    cookie.set(
        "parse",
        super::raising::function(lua, |lua, header: LuaString| {
            let header = header.as_bytes();
            let t = lua.create_table()?;
            for (name, value) in pairs(&header) {
                // The first of a repeated name, as `r:cookie` and nginx answer.
                if !t.contains_key(lua.create_string(name)?)? {
                    t.raw_set(lua.create_string(name)?, lua.create_string(value)?)?;
                }
            }
            Ok(t)
        })?,
    )?;
    tessera.set("cookie", cookie)?;
    Ok(())
}

/// The `name=value` pairs of one `Cookie` field, split at `;`, spaces around each trimmed;
/// a pair without `=` or with an empty name is skipped.
pub fn pairs(header: &[u8]) -> impl Iterator<Item = (&[u8], &[u8])> {
    header.split(|&b| b == b';').filter_map(|pair| {
        let pair = pair.trim_ascii();
        let eq = pair.iter().position(|&b| b == b'=')?;
        let name = pair[..eq].trim_ascii();
        (!name.is_empty()).then(|| (name, pair[eq + 1..].trim_ascii()))
    })
}

/// The value of the first cookie `name` in one `Cookie` field.
pub fn find<'a>(header: &'a [u8], name: &[u8]) -> Option<&'a [u8]> {
    pairs(header).find(|(n, _)| *n == name).map(|(_, v)| v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cookies_split_trimmed_first_wins() {
        let h = b" a=1; b = two ;junk; =x; c=\"q\";a=3";
        let all: Vec<_> = pairs(h).collect();
        assert_eq!(
            all,
            vec![
                (&b"a"[..], &b"1"[..]),
                (b"b", b"two"),
                (b"c", b"\"q\""),
                (b"a", b"3")
            ]
        );
        assert_eq!(find(h, b"a"), Some(&b"1"[..]));
        assert_eq!(find(h, b"zz"), None);
    }
}
