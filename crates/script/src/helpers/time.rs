//! `tessera.http_time`, `tessera.cookie_time` and `tessera.parse_http_time`: the dates of
//! HTTP fields, as `ngx.http_time`, `ngx.cookie_time` and `ngx.parse_http_time`.

use std::time::{Duration, UNIX_EPOCH};

use mlua::{Lua, Result as LuaResult, String as LuaString, Table, Value};

/// The last second httpdate writes: 9999-12-31 23:59:59 UTC.
const LAST: f64 = 253_402_300_799.0;

pub fn install(lua: &Lua, tessera: &Table) -> LuaResult<()> {
    tessera.set(
        "http_time",
        super::raising::function(lua, |lua, t: f64| lua.create_string(http_time(seconds(t)?)))?,
    )?;
    tessera.set(
        "cookie_time",
        super::raising::function(lua, |lua, t: f64| {
            lua.create_string(cookie_time(seconds(t)?))
        })?,
    )?;
    tessera.set(
        "parse_http_time",
        super::raising::function(lua, |_, s: LuaString| {
            Ok(match parse_http_time(&s.as_bytes()) {
                Some(t) => Value::Integer(t as i64),
                None => Value::Nil,
            })
        })?,
    )?;
    Ok(())
}

/// Whole seconds since the epoch (fractions dropped), 0 to the end of year 9999.
fn seconds(t: f64) -> LuaResult<u64> {
    if !(0.0..=LAST).contains(&t) {
        return Err(mlua::Error::runtime(format!(
            "time {t} is out of range: 0 to {LAST} seconds since 1970"
        )));
    }
    Ok(t as u64)
}

/// IMF-fixdate (RFC 9110 section 5.6.7): `Thu, 18 Nov 2010 11:27:35 GMT`.
pub fn http_time(t: u64) -> String {
    httpdate::fmt_http_date(UNIX_EPOCH + Duration::from_secs(t))
}

/// nginx's cookie `expires` form: `Thu, 18-Nov-10 11:27:35 GMT`, the year in two digits up
/// to 2037 and in four after (`ngx_http_cookie_time`).
pub fn cookie_time(t: u64) -> String {
    let date = http_time(t);
    // "Thu, 18 Nov 2010 11:27:35 GMT": day at 5..7, month at 8..11, year at 12..16.
    let (day, month, year, rest) = (&date[5..7], &date[8..11], &date[12..16], &date[16..]);
    let year = match year.parse::<u32>() {
        Ok(y) if y <= 2037 => &year[2..],
        _ => year,
    };
    format!("{}{day}-{month}-{year}{rest}", &date[..5])
}

/// Seconds since the epoch of an HTTP date in any of the three forms RFC 9110 has a
/// recipient accept (IMF-fixdate, RFC 850, asctime); `None` for anything else.
pub fn parse_http_time(s: &[u8]) -> Option<u64> {
    let s = std::str::from_utf8(s).ok()?;
    let t = httpdate::parse_http_date(s.trim()).ok()?;
    t.duration_since(UNIX_EPOCH).ok().map(|d| d.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_as_nginx_writes_them() {
        assert_eq!(http_time(1290079655), "Thu, 18 Nov 2010 11:27:35 GMT");
        assert_eq!(cookie_time(1290079655), "Thu, 18-Nov-10 11:27:35 GMT");
        assert_eq!(cookie_time(2240611200), "Tue, 01-Jan-2041 00:00:00 GMT");
        assert_eq!(
            parse_http_time(b"Thu, 18 Nov 2010 11:27:35 GMT"),
            Some(1290079655)
        );
        assert_eq!(
            parse_http_time(b"Thursday, 18-Nov-10 11:27:35 GMT"),
            Some(1290079655)
        );
        assert_eq!(
            parse_http_time(b"Thu Nov 18 11:27:35 2010"),
            Some(1290079655)
        );
        assert_eq!(parse_http_time(b"yesterday"), None);
    }
}
