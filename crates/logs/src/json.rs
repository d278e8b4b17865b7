//! JSON lines, as `tessera serve` writes them with `access_log_format = "json"`: one flat
//! object per line. Each known key's value is read in place, without building a tree:
//! strings without their quotes (escapes kept, as the text formats keep Apache's `\"`),
//! numbers as written, `null` as empty. Keys the report does not use are skipped; a line
//! that is not one flat object (a nested value, a missing quote) is malformed.

/// The values of one JSON line the report reads, as written (strings without their
/// quotes, `null` as empty); `crate::format` turns them into a record.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Fields<'a> {
    pub client: &'a [u8],
    pub time: &'a [u8],
    pub method: &'a [u8],
    pub uri: &'a [u8],
    pub status: &'a [u8],
    pub body_bytes_sent: &'a [u8],
    pub bytes_sent: &'a [u8],
    pub referer: &'a [u8],
    pub user_agent: &'a [u8],
    pub host: &'a [u8],
    pub duration: &'a [u8],
    pub route: &'a [u8],
    pub upstream_addr: &'a [u8],
    pub upstream_status: &'a [u8],
    pub upstream_response_time: &'a [u8],
    pub cache: &'a [u8],
    pub esi_failed: &'a [u8],
}

/// The fields of one JSON line (without its line ending). `None`: malformed.
pub(crate) fn fields(line: &[u8]) -> Option<Fields<'_>> {
    let mut f = Fields::default();
    let mut rest = skip_ws(line).strip_prefix(b"{")?;
    rest = skip_ws(rest);
    if let Some(after) = rest.strip_prefix(b"}") {
        return skip_ws(after).is_empty().then_some(f);
    }
    loop {
        let (key, after) = string(rest)?;
        rest = skip_ws(skip_ws(after).strip_prefix(b":")?);
        let (value, after) = value(rest)?;
        let slot = match key {
            b"client" => &mut f.client,
            b"time" => &mut f.time,
            b"method" => &mut f.method,
            b"uri" => &mut f.uri,
            b"status" => &mut f.status,
            b"body_bytes_sent" => &mut f.body_bytes_sent,
            b"bytes_sent" => &mut f.bytes_sent,
            b"referer" => &mut f.referer,
            b"user_agent" => &mut f.user_agent,
            b"host" => &mut f.host,
            b"duration" => &mut f.duration,
            b"route" => &mut f.route,
            b"upstream_addr" => &mut f.upstream_addr,
            b"upstream_status" => &mut f.upstream_status,
            b"upstream_response_time" => &mut f.upstream_response_time,
            b"cache" => &mut f.cache,
            b"esi_failed" => &mut f.esi_failed,
            _ => &mut &b""[..],
        };
        *slot = value;
        rest = skip_ws(after);
        match rest.first()? {
            b',' => rest = skip_ws(&rest[1..]),
            b'}' if skip_ws(&rest[1..]).is_empty() => return Some(f),
            _ => return None,
        }
    }
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
    let mut i = 0;
    loop {
        i += memchr::memchr2(b'"', b'\\', &inner[i..])?;
        if inner[i] == b'"' {
            return Some((&inner[..i], &inner[i + 1..]));
        }
        // An escape: the next byte is its, whatever it is.
        i += 2;
        if i > inner.len() {
            return None;
        }
    }
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
        let f = fields(line).unwrap();
        assert_eq!(f.client, b"127.0.0.1");
        assert_eq!(f.time, b"2026-11-28T08:16:11Z");
        assert_eq!(f.host, b"example.test");
        assert_eq!(f.method, b"GET");
        assert_eq!(f.uri, br#"/a?b=\"c\""#);
        assert_eq!((f.status, f.body_bytes_sent), (&b"404"[..], &b"90"[..]));
        assert_eq!(f.referer, b"");
        assert_eq!(f.user_agent, br#"a \"b\" \\ \u00e9"#);
    }

    #[test]
    fn refuses_what_is_not_one_flat_object() {
        for line in [
            &br#"{"status":200,"x":{"y":1}}"#[..],
            br#"{"status":200"#,
            br#"{"status":200} trailing"#,
            br#"{"uri":"/a}"#,
            br#"{"uri":"/a\"}"#,
            b"127.0.0.1 - - [x] \"GET / HTTP/1.1\" 200 1",
        ] {
            assert_eq!(fields(line), None, "{}", line.escape_ascii());
        }
        assert_eq!(fields(b"{}"), Some(Fields::default()));
    }
}
