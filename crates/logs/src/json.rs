//! JSON lines, as `tessera serve` writes them with `access_log_format = "json"`: one flat
//! object per line. Each known key's value is read in place, without building a tree:
//! strings without their quotes (escapes kept, as the text formats keep Apache's `\"`),
//! numbers as written, `null` as empty. Keys the report does not use are skipped; a line
//! that is not one flat object (a nested value, a missing quote) is malformed.

use crate::format::{parse_bytes, parse_status, quoted_len, HourCache, Record};

/// The report's view of one JSON line (without its line ending). `None`: malformed.
pub(crate) fn parse_line<'a>(line: &'a [u8], hours: &mut HourCache) -> Option<Record<'a>> {
    let mut record = Record::default();
    let (mut body_bytes, mut all_bytes) = (None, None);
    let mut rest = skip_ws(line).strip_prefix(b"{")?;
    rest = skip_ws(rest);
    if let Some(after) = rest.strip_prefix(b"}") {
        return skip_ws(after).is_empty().then_some(record);
    }
    loop {
        let (key, after) = string(rest)?;
        rest = skip_ws(skip_ws(after).strip_prefix(b":")?);
        let (value, after) = value(rest)?;
        match key {
            b"client" => record.client = value,
            b"time" if !value.is_empty() => record.hour = Some(hours.hour(value)?),
            b"method" => record.method = value,
            b"uri" => record.path = value,
            b"status" if !value.is_empty() => record.status = parse_status(value)?,
            b"body_bytes_sent" if !value.is_empty() => body_bytes = Some(parse_bytes(value)?),
            b"bytes_sent" if !value.is_empty() => all_bytes = Some(parse_bytes(value)?),
            b"referer" => record.referer = value,
            b"user_agent" => record.user_agent = value,
            b"host" => record.vhost = value,
            _ => {}
        }
        rest = skip_ws(after);
        match rest.first()? {
            b',' => rest = skip_ws(&rest[1..]),
            b'}' if skip_ws(&rest[1..]).is_empty() => break,
            _ => return None,
        }
    }
    // The body's bytes, as `%b` counts them, when the line has them.
    record.bytes = body_bytes.or(all_bytes).unwrap_or(0);
    Some(record)
}

/// Whether `line` looks like a JSON line (an object) rather than a text format's.
pub(crate) fn looks_like(line: &[u8]) -> bool {
    skip_ws(line).first() == Some(&b'{')
}

fn skip_ws(s: &[u8]) -> &[u8] {
    let n = s
        .iter()
        .position(|b| !matches!(b, b' ' | b'\t' | b'\r' | b'\n'))
        .unwrap_or(s.len());
    &s[n..]
}

/// A string at the start of `s`: its contents (escapes kept) and what follows it.
fn string(s: &[u8]) -> Option<(&[u8], &[u8])> {
    let inner = s.strip_prefix(b"\"")?;
    let len = quoted_len(inner)?;
    Some((&inner[..len], &inner[len + 1..]))
}

/// A scalar value at the start of `s`: a string's contents, a number or literal as
/// written, empty for `null`; and what follows it.
fn value(s: &[u8]) -> Option<(&[u8], &[u8])> {
    if s.first() == Some(&b'"') {
        return string(s);
    }
    let len = s
        .iter()
        .position(|b| matches!(b, b',' | b'}' | b' ' | b'\t' | b'\r' | b'\n'))
        .unwrap_or(s.len());
    let (word, rest) = s.split_at(len);
    match word {
        b"null" => Some((&[], rest)),
        b"true" | b"false" => Some((word, rest)),
        w if !w.is_empty() && w.iter().all(|b| b"0123456789+-.eE".contains(b)) => Some((w, rest)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_servers_json_line() {
        let line = br#"{"time":"2026-11-28T08:16:11Z","client":"127.0.0.1","host":"example.test","route":null,"method":"GET","uri":"/a?b=\"c\"","status":404,"bytes_sent":230,"body_bytes_sent":90,"duration":0.000210,"referer":null,"user_agent":"a \"b\" \\ \u00e9"}"#;
        let r = parse_line(line, &mut HourCache::default()).unwrap();
        assert_eq!(r.client, b"127.0.0.1");
        assert_eq!(r.vhost, b"example.test");
        assert_eq!(r.method, b"GET");
        assert_eq!(r.path, br#"/a?b=\"c\""#);
        assert_eq!((r.status, r.bytes), (404, 90));
        assert_eq!(r.referer, b"");
        assert_eq!(r.user_agent, br#"a \"b\" \\ \u00e9"#);
        assert_eq!(
            r.hour,
            Some(crate::format::days_from_civil(2026, 11, 28) * 24 + 8)
        );
    }

    #[test]
    fn refuses_what_is_not_one_flat_object() {
        let mut hours = HourCache::default();
        for line in [
            &br#"{"status":200,"x":{"y":1}}"#[..],
            br#"{"status":200"#,
            br#"{"status":200} trailing"#,
            br#"{"uri":"/a}"#,
            b"127.0.0.1 - - [x] \"GET / HTTP/1.1\" 200 1",
        ] {
            assert_eq!(
                parse_line(line, &mut hours),
                None,
                "{}",
                line.escape_ascii()
            );
        }
        assert!(parse_line(b"{}", &mut hours).is_some());
    }
}
