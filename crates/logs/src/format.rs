//! Log formats: Apache `LogFormat` strings (`%h %l %u %t "%r" %>s %b ...`), nginx
//! `log_format` strings (`$remote_addr - $remote_user [$time_local] ...`), the named
//! presets, and the line parser they compile to.
//!
//! A format compiles to alternating literals and fields. Parsing a line walks that list
//! once: a literal must match exactly; a field ends at the first byte of the literal that
//! follows it (found with `memchr`), except that a field between quotes ends at the first
//! unescaped quote (Apache writes `\"` and `\\` inside quoted fields) and a field between
//! brackets ends at `]`. Anything that does not fit is a malformed line, never an error.

pub use crate::time::HourCache;
use crate::Error;

/// What a field of the format means to the report. Fields the report does not use (`%l`,
/// `%u`, `%D`, `$request_time`, ...) are `Ignored` but still parsed over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Field {
    /// `%h`, `%a`, `$remote_addr`: host name, IPv4 or IPv6 address.
    Client,
    /// `%t`, `$time_local` (`[10/Oct/2000:13:55:36 -0700]`) or `$time_iso8601`.
    Time,
    /// `%r`, `$request`: the request line `GET /path HTTP/1.1`.
    Request,
    /// `%U`, `$uri`, `$request_uri`: the path on its own.
    Path,
    /// `%s`, `%>s`, `$status`.
    Status,
    /// `%b`, `%B`, `%O`, `$body_bytes_sent`, `$bytes_sent`: `-` counts as zero.
    Bytes,
    /// `%{Referer}i`, `$http_referer`.
    Referer,
    /// `%{User-Agent}i`, `$http_user_agent`.
    UserAgent,
    /// `%v`, `%V`, `$host`, `$server_name`: the site the request was for.
    Vhost,
    /// `%D`, `%{us}T`: the time taken, in microseconds.
    Micros,
    /// `%{ms}T`: the time taken, in milliseconds.
    Millis,
    /// `%T`, `$request_time`, JSON `duration`: the time taken, in seconds (a fraction
    /// allowed: `0.012`).
    Seconds,
    /// `%{route}x`, JSON `route`: the routing rule that chose the handling.
    Route,
    /// `%{upstream_addr}x`, `$upstream_addr`: the upstream peers tried, in order
    /// (`10.0.0.1:80, 10.0.0.2:80`, as nginx lists them).
    UpstreamAddr,
    /// `%{upstream_status}x`, `$upstream_status`: each attempt's status (`502, 200`).
    UpstreamStatus,
    /// `%{upstream_response_time}x`, `$upstream_response_time`: each attempt's time in
    /// seconds (`0.003, 0.012`).
    UpstreamTime,
    /// `%{cache}x`, `$upstream_cache_status`: the cache's answer (hit, miss, stale, ...).
    Cache,
    /// `%{esi_failed}x`, JSON `esi_failed`: the ESI includes of the page that failed
    /// (`http://a/x, http://a/y`).
    EsiFailed,
    /// Any other directive: skipped.
    Ignored,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    Literal(Vec<u8>),
    /// A field, and whether it writes its own brackets (Apache `%t`).
    Field(Field, bool),
}

/// How a field's end is found; decided once when the format is compiled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    /// Up to the first byte of the next literal.
    Byte(u8),
    /// Up to the first unescaped `"`.
    Quote,
    /// To the end of the line: a free-text field (request, referrer, agent) that ends the
    /// format.
    Line,
    /// Up to a space or the end of the line: any other field that ends the format, so
    /// that text after it (the extra fields of a longer format) is ignored.
    Word,
    /// Apache's `%t`, which writes its own brackets: `[` up to and including `]`.
    Bracketed,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Step {
    Literal(Vec<u8>),
    Field(Field, End),
}

/// A compiled log format.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogFormat {
    spec: String,
    steps: Vec<Step>,
    /// JSON lines (`json`), read by `crate::json` rather than by `steps`.
    json: bool,
}

/// Apache's Common Log Format.
pub const COMMON: &str = r#"%h %l %u %t "%r" %>s %b"#;
/// Apache's combined format (also what nginx writes by default).
pub const COMBINED: &str = r#"%h %l %u %t "%r" %>s %b "%{Referer}i" "%{User-Agent}i""#;
/// Debian's `vhost_combined`: combined with `host:port` in front.
pub const VCOMBINED: &str = r#"%v:%p %h %l %u %t "%r" %>s %O "%{Referer}i" "%{User-Agent}i""#;
/// nginx's built-in `combined` log_format, in nginx's own syntax.
pub const NGINX: &str = r#"$remote_addr - $remote_user [$time_local] "$request" $status $body_bytes_sent "$http_referer" "$http_user_agent""#;

/// The named formats `--format` accepts, in the order `auto` tries them.
pub const PRESETS: [(&str, &str); 4] = [
    ("vcombined", VCOMBINED),
    ("combined", COMBINED),
    ("common", COMMON),
    ("nginx", NGINX),
];

/// One parsed line. Slices borrow from the log; missing fields are empty.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Record<'a> {
    pub client: &'a [u8],
    /// Hours since 1970-01-01 00:00 in the clock the log was written in (the UTC offset
    /// is ignored, so hours read as they appear in the log). `None` without a time field.
    pub hour: Option<i64>,
    /// The time field as logged (empty without one): [`utc_seconds`] reads it whole.
    pub time: &'a [u8],
    pub method: &'a [u8],
    /// The request target as logged (path and query string).
    pub path: &'a [u8],
    pub status: u16,
    pub bytes: u64,
    pub referer: &'a [u8],
    pub user_agent: &'a [u8],
    pub vhost: &'a [u8],
    /// The time taken, in microseconds, when the format has it.
    pub micros: Option<u64>,
    pub route: &'a [u8],
    /// As logged: one entry per attempt, separated by `, ` (or ` : ` between nginx's
    /// internal redirects); see [`crate::report`]'s peer section.
    pub upstream_addr: &'a [u8],
    pub upstream_status: &'a [u8],
    pub upstream_time: &'a [u8],
    pub cache: &'a [u8],
    /// As logged: each failed ESI include of the page, separated by `, `.
    pub esi_failed: &'a [u8],
}

impl LogFormat {
    /// A preset by name (`common`, `combined`, `vcombined`, `nginx`), or else a format
    /// string in Apache (`%h ...`) or nginx (`$remote_addr ...`) syntax.
    pub fn new(name_or_spec: &str) -> Result<LogFormat, Error> {
        if name_or_spec == "json" {
            return Ok(LogFormat::json());
        }
        match PRESETS.iter().find(|(name, _)| *name == name_or_spec) {
            Some((_, spec)) => LogFormat::parse(spec),
            None => LogFormat::parse(name_or_spec),
        }
    }

    /// JSON lines, as `tessera serve` writes them with `access_log_format = "json"`.
    pub fn json() -> LogFormat {
        LogFormat {
            spec: "json".into(),
            steps: Vec::new(),
            json: true,
        }
    }

    /// The first preset that parses `line`, trying the most specific first; JSON lines
    /// for a line that is a JSON object.
    pub fn detect(line: &[u8]) -> Option<LogFormat> {
        if crate::json::looks_like(line) {
            let json = LogFormat::json();
            return json.parse_line(line).is_some().then_some(json);
        }
        PRESETS[..3]
            .iter()
            .map(|(_, spec)| LogFormat::parse(spec).expect("presets are valid"))
            .find(|format| format.parse_line(line).is_some())
    }

    /// The format string this was compiled from.
    pub fn spec(&self) -> &str {
        &self.spec
    }

    /// Compiles a format string.
    pub fn parse(spec: &str) -> Result<LogFormat, Error> {
        let fail = |reason| Error::Format {
            format: spec.to_string(),
            reason,
        };
        let tokens = tokenize(spec.as_bytes()).map_err(fail)?;
        if !tokens.iter().any(|t| matches!(t, Token::Field(..))) {
            return Err(fail("it has no fields"));
        }
        let mut steps = Vec::with_capacity(tokens.len());
        for (i, token) in tokens.iter().enumerate() {
            match token {
                Token::Literal(text) => steps.push(Step::Literal(text.clone())),
                Token::Field(field, bracketed) => {
                    let before = match i.checked_sub(1).map(|j| &tokens[j]) {
                        Some(Token::Literal(text)) => text.last().copied(),
                        _ => None,
                    };
                    let end = match tokens.get(i + 1) {
                        _ if *bracketed => End::Bracketed,
                        None if matches!(
                            field,
                            Field::Request | Field::Referer | Field::UserAgent | Field::Ignored
                        ) =>
                        {
                            End::Line
                        }
                        None => End::Word,
                        Some(Token::Field(..)) => {
                            return Err(fail("two fields need text between them"))
                        }
                        Some(Token::Literal(next)) => {
                            if before == Some(b'"') && next[0] == b'"' {
                                End::Quote
                            } else {
                                End::Byte(next[0])
                            }
                        }
                    };
                    steps.push(Step::Field(*field, end));
                }
            }
        }
        Ok(LogFormat {
            spec: spec.to_string(),
            steps,
            json: false,
        })
    }

    /// Parses one line (without its line ending). `None` means malformed.
    #[inline]
    pub fn parse_line<'a>(&self, line: &'a [u8]) -> Option<Record<'a>> {
        self.parse_line_with(line, &mut HourCache::default())
    }

    /// [`parse_line`](Self::parse_line) for a run of lines, remembering the last time
    /// field's hour in `hours`: consecutive lines of a log mostly share it.
    #[inline]
    pub fn parse_line_with<'a>(&self, line: &'a [u8], hours: &mut HourCache) -> Option<Record<'a>> {
        if self.json {
            return json_record(line, hours);
        }
        let mut record = Record::default();
        let mut pos = 0;
        for step in &self.steps {
            match step {
                Step::Literal(text) => {
                    if !starts_with(&line[pos..], text) {
                        return None;
                    }
                    pos += text.len();
                }
                Step::Field(field, end) => {
                    let rest = &line[pos..];
                    let len = match end {
                        End::Line => rest.len(),
                        End::Word => find_byte(b' ', rest).unwrap_or(rest.len()),
                        End::Byte(b) => find_byte(*b, rest)?,
                        End::Quote => quoted_len(rest)?,
                        End::Bracketed if rest.first() == Some(&b'[') => find_byte(b']', rest)? + 1,
                        End::Bracketed => return None,
                    };
                    let value = &rest[..len];
                    pos += len;
                    match field {
                        Field::Client => record.client = value,
                        Field::Time => {
                            record.hour = Some(hours.hour(value)?);
                            record.time = value;
                        }
                        Field::Request => {
                            let (method, path) = split_request(value);
                            record.method = method;
                            record.path = path;
                        }
                        Field::Path => record.path = value,
                        Field::Status => record.status = parse_status(value)?,
                        Field::Bytes => record.bytes = parse_bytes(value)?,
                        Field::Referer => record.referer = value,
                        Field::UserAgent => record.user_agent = value,
                        Field::Vhost => record.vhost = value,
                        Field::Micros => record.micros = whole_number(value),
                        Field::Millis => record.micros = whole_number(value).map(|ms| ms * 1000),
                        Field::Seconds => record.micros = seconds_to_micros(value),
                        Field::Route => record.route = dash_empty(value),
                        Field::UpstreamAddr => record.upstream_addr = dash_empty(value),
                        Field::UpstreamStatus => record.upstream_status = dash_empty(value),
                        Field::UpstreamTime => record.upstream_time = dash_empty(value),
                        Field::Cache => record.cache = dash_empty(value),
                        Field::EsiFailed => record.esi_failed = dash_empty(value),
                        Field::Ignored => {}
                    }
                }
            }
        }
        Some(record)
    }
}

/// A JSON line's record: its values as the text formats' fields are read.
fn json_record<'a>(line: &'a [u8], hours: &mut HourCache) -> Option<Record<'a>> {
    let f = crate::json::fields(line)?;
    let number = |v: &[u8]| (!v.is_empty()).then(|| parse_bytes(v)).flatten();
    let bytes = match (f.body_bytes_sent, f.bytes_sent) {
        (b"", b"") => 0,
        (b"", all) => number(all)?,
        (body, _) => number(body)?,
    };
    Some(Record {
        client: f.client,
        hour: match f.time {
            b"" => None,
            time => Some(hours.hour(time)?),
        },
        time: f.time,
        method: f.method,
        path: f.uri,
        status: match f.status {
            b"" => 0,
            status => parse_status(status)?,
        },
        bytes,
        referer: f.referer,
        user_agent: f.user_agent,
        vhost: f.host,
        micros: seconds_to_micros(f.duration),
        route: f.route,
        upstream_addr: f.upstream_addr,
        upstream_status: f.upstream_status,
        upstream_time: f.upstream_response_time,
        cache: f.cache,
        esi_failed: f.esi_failed,
    })
}

/// A lone `-` (what both Apache and nginx write for a value a request has not) as empty.
fn dash_empty(value: &[u8]) -> &[u8] {
    if value == b"-" {
        b""
    } else {
        value
    }
}

/// A whole number; `None` for `-`, empty, or anything but digits.
fn whole_number(value: &[u8]) -> Option<u64> {
    match value {
        b"-" => None,
        value => parse_bytes(value),
    }
}

/// `0.012` (seconds, as nginx's `$request_time`), `3` or `-` → microseconds; `None` for
/// `-`, empty or anything else.
pub(crate) fn seconds_to_micros(value: &[u8]) -> Option<u64> {
    let (whole, fraction) = match memchr::memchr(b'.', value) {
        Some(dot) => (&value[..dot], &value[dot + 1..]),
        None => (value, &b""[..]),
    };
    if !fraction.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let mut micros = whole_number(whole)?.checked_mul(1_000_000)?;
    let mut scale = 100_000;
    for &d in fraction.iter().take(6) {
        micros += u64::from(d - b'0') * scale;
        scale /= 10;
    }
    Some(micros)
}

fn tokenize(spec: &[u8]) -> Result<Vec<Token>, &'static str> {
    let mut tokens = Vec::new();
    let mut literal = Vec::new();
    let mut i = 0;
    let push_field = |tokens: &mut Vec<Token>, literal: &mut Vec<u8>, field| {
        if !literal.is_empty() {
            tokens.push(Token::Literal(std::mem::take(literal)));
        }
        tokens.push(Token::Field(field, false));
    };
    while i < spec.len() {
        match spec[i] {
            b'%' => {
                i += 1;
                if spec.get(i) == Some(&b'%') {
                    literal.push(b'%');
                    i += 1;
                    continue;
                }
                // Modifiers: `<`/`>` pick the original or final request, `!` and status
                // lists make the field conditional. Both leave the field's place intact.
                while matches!(spec.get(i), Some(b'<' | b'>' | b'!' | b',' | b'0'..=b'9')) {
                    i += 1;
                }
                let mut arg: &[u8] = b"";
                if spec.get(i) == Some(&b'{') {
                    let close = spec[i..]
                        .iter()
                        .position(|&b| b == b'}')
                        .ok_or("unclosed %{")?;
                    arg = &spec[i + 1..i + close];
                    i += close + 1;
                }
                let directive = *spec
                    .get(i)
                    .ok_or("format ends in the middle of a directive")?;
                i += 1;
                let field = match directive {
                    // `%{c}a` is the socket's peer (the proxy in front), not the client.
                    b'h' | b'a' if arg.is_empty() => Field::Client,
                    b't' if arg.is_empty() => Field::Time,
                    b'r' => Field::Request,
                    b'U' => Field::Path,
                    b's' => Field::Status,
                    b'b' | b'B' | b'O' => Field::Bytes,
                    b'v' | b'V' => Field::Vhost,
                    b'D' => Field::Micros,
                    b'T' if arg.is_empty() || arg == b"s" => Field::Seconds,
                    b'T' if arg == b"ms" => Field::Millis,
                    b'T' if arg == b"us" => Field::Micros,
                    b'x' if arg == b"route" => Field::Route,
                    b'x' if arg == b"upstream_addr" => Field::UpstreamAddr,
                    b'x' if arg == b"upstream_status" => Field::UpstreamStatus,
                    b'x' if arg == b"upstream_response_time" => Field::UpstreamTime,
                    b'x' if arg == b"cache" => Field::Cache,
                    b'x' if arg == b"esi_failed" => Field::EsiFailed,
                    b'i' if arg.eq_ignore_ascii_case(b"referer") => Field::Referer,
                    b'i' if arg.eq_ignore_ascii_case(b"user-agent") => Field::UserAgent,
                    b if b.is_ascii_alphabetic() || b == b'^' => Field::Ignored,
                    _ => return Err("unknown % directive"),
                };
                push_field(&mut tokens, &mut literal, field);
                if field == Field::Time {
                    tokens.pop();
                    tokens.push(Token::Field(Field::Time, true));
                }
            }
            b'$' if spec
                .get(i + 1)
                .is_some_and(|b| b.is_ascii_alphabetic() || *b == b'{') =>
            {
                i += 1;
                let braced = spec[i] == b'{';
                if braced {
                    i += 1;
                }
                let start = i;
                while spec
                    .get(i)
                    .is_some_and(|b| b.is_ascii_alphanumeric() || *b == b'_')
                {
                    i += 1;
                }
                let name = &spec[start..i];
                if braced {
                    if spec.get(i) != Some(&b'}') {
                        return Err("unclosed ${");
                    }
                    i += 1;
                }
                let field = match name {
                    b"remote_addr" | b"binary_remote_addr" | b"realip_remote_addr" => Field::Client,
                    b"time_local" | b"time_iso8601" => Field::Time,
                    b"request" => Field::Request,
                    b"uri" | b"request_uri" => Field::Path,
                    b"status" => Field::Status,
                    b"body_bytes_sent" | b"bytes_sent" => Field::Bytes,
                    b"http_referer" => Field::Referer,
                    b"http_user_agent" => Field::UserAgent,
                    b"host" | b"server_name" | b"http_host" => Field::Vhost,
                    b"request_time" => Field::Seconds,
                    b"upstream_addr" => Field::UpstreamAddr,
                    b"upstream_status" => Field::UpstreamStatus,
                    b"upstream_response_time" => Field::UpstreamTime,
                    b"upstream_cache_status" => Field::Cache,
                    _ => Field::Ignored,
                };
                push_field(&mut tokens, &mut literal, field);
            }
            b'\\' if spec.get(i + 1).is_some() => {
                // `\"` and `\t` as they appear when a format is copied out of a config file.
                literal.push(match spec[i + 1] {
                    b't' => b'\t',
                    b'n' => b'\n',
                    other => other,
                });
                i += 2;
            }
            b => {
                literal.push(b);
                i += 1;
            }
        }
    }
    if !literal.is_empty() {
        tokens.push(Token::Literal(literal));
    }
    Ok(tokens)
}

/// `haystack.starts_with(prefix)` for the one- to three-byte separators of log formats
/// (` `, `" "`, ` [`) without a call to `memcmp`: ten of those per line were a fifth of
/// the report's time in profiles.
#[inline]
fn starts_with(haystack: &[u8], prefix: &[u8]) -> bool {
    match (prefix, haystack) {
        ([a], [x, ..]) => a == x,
        ([a, b], [x, y, ..]) => a == x && b == y,
        ([a, b, c], [x, y, z, ..]) => a == x && b == y && c == z,
        ([_] | [_, _] | [_, _, _], _) => false,
        _ => haystack.starts_with(prefix),
    }
}

/// The first `needle` in `hay`. Most fields of a log line (client, `-`, time, status,
/// size, method, path) end within 32 bytes, where `memchr`'s call, dispatch and set-up
/// cost more than the search: those were a third of `report`'s instructions. So the
/// first 32 bytes are compared inline, 16 at a time, and only longer fields call `memchr`.
#[inline(always)]
fn find_byte(needle: u8, hay: &[u8]) -> Option<usize> {
    #[cfg(target_arch = "x86_64")]
    {
        if hay.len() >= 32 {
            let m = sse2::eq_mask32(hay, needle);
            if m != 0 {
                return Some(m.trailing_zeros() as usize);
            }
            return memchr::memchr(needle, &hay[32..]).map(|i| i + 32);
        }
        if hay.len() >= 16 {
            let m = sse2::eq_mask_16_to_32(hay, needle);
            return (m != 0).then(|| m.trailing_zeros() as usize);
        }
    }
    hay.iter().position(|&b| b == needle)
}

/// The first `"` or `\` in `hay`, as [`find_byte`] does it: quoted fields are often `-`.
#[inline(always)]
fn find_quote_or_backslash(hay: &[u8]) -> Option<usize> {
    #[cfg(target_arch = "x86_64")]
    {
        if hay.len() >= 32 {
            let m = sse2::eq_mask32(hay, b'"') | sse2::eq_mask32(hay, b'\\');
            if m != 0 {
                return Some(m.trailing_zeros() as usize);
            }
            return memchr::memchr2(b'"', b'\\', &hay[32..]).map(|i| i + 32);
        }
        if hay.len() >= 16 {
            let m = sse2::eq_mask_16_to_32(hay, b'"') | sse2::eq_mask_16_to_32(hay, b'\\');
            return (m != 0).then(|| m.trailing_zeros() as usize);
        }
    }
    hay.iter().position(|&b| b == b'"' || b == b'\\')
}

#[cfg(target_arch = "x86_64")]
mod sse2 {
    use std::arch::x86_64::{
        __m128i, _mm_cmpeq_epi8, _mm_loadu_si128, _mm_movemask_epi8, _mm_set1_epi8,
    };

    /// Bit `i` set where `hay[i] == needle`, for `i` in `0..32`.
    #[inline(always)]
    pub(super) fn eq_mask32(hay: &[u8], needle: u8) -> u32 {
        assert!(hay.len() >= 32);
        // SAFETY: SSE2 is part of the x86_64 baseline, and both unaligned 16-byte loads
        // read inside `hay`, which holds at least 32 bytes (checked above).
        unsafe {
            let n = _mm_set1_epi8(needle as i8);
            let lo = _mm_loadu_si128(hay.as_ptr() as *const __m128i);
            let hi = _mm_loadu_si128(hay.as_ptr().add(16) as *const __m128i);
            let lo = _mm_movemask_epi8(_mm_cmpeq_epi8(lo, n)) as u32;
            let hi = _mm_movemask_epi8(_mm_cmpeq_epi8(hi, n)) as u32;
            lo | hi << 16
        }
    }

    /// Bit `i` set where `hay[i] == needle`, for all of a `hay` of 16 to 32 bytes: the
    /// first 16 bytes and the last 16 (overlapping), shifted into place.
    #[inline(always)]
    pub(super) fn eq_mask_16_to_32(hay: &[u8], needle: u8) -> u32 {
        assert!((16..=32).contains(&hay.len()));
        let tail = hay.len() - 16;
        // SAFETY: SSE2 is part of the x86_64 baseline; the loads at 0 and at `len - 16`
        // read 16 bytes each inside `hay`, which holds at least 16 (checked above).
        unsafe {
            let n = _mm_set1_epi8(needle as i8);
            let lo = _mm_loadu_si128(hay.as_ptr() as *const __m128i);
            let hi = _mm_loadu_si128(hay.as_ptr().add(tail) as *const __m128i);
            let lo = _mm_movemask_epi8(_mm_cmpeq_epi8(lo, n)) as u32;
            let hi = _mm_movemask_epi8(_mm_cmpeq_epi8(hi, n)) as u32;
            lo | hi << tail
        }
    }
}

/// Length of a quoted field's content: up to the first `"` not escaped by a backslash.
#[inline]
fn quoted_len(rest: &[u8]) -> Option<usize> {
    let mut i = 0;
    loop {
        i += find_quote_or_backslash(&rest[i..])?;
        if rest[i] == b'"' {
            return Some(i);
        }
        i += 2;
        if i > rest.len() {
            return None;
        }
    }
}

/// `GET /path HTTP/1.1` → (`GET`, `/path`). HTTP/0.9 lines have no protocol; a request
/// line that is not one (`-`, garbage from a TLS handshake) has no path.
#[inline]
fn split_request(request: &[u8]) -> (&[u8], &[u8]) {
    let Some(sp) = find_byte(b' ', request) else {
        return (b"", b"");
    };
    let target = &request[sp + 1..];
    let end = find_byte(b' ', target).unwrap_or(target.len());
    (&request[..sp], &target[..end])
}

#[inline]
fn parse_status(value: &[u8]) -> Option<u16> {
    match *value {
        [a @ b'1'..=b'9', b @ b'0'..=b'9', c @ b'0'..=b'9'] => {
            Some((a - b'0') as u16 * 100 + (b - b'0') as u16 * 10 + (c - b'0') as u16)
        }
        _ => None,
    }
}

#[inline]
fn parse_bytes(value: &[u8]) -> Option<u64> {
    if value == b"-" {
        return Some(0);
    }
    if value.is_empty() || value.len() > 19 {
        return None;
    }
    let mut n: u64 = 0;
    for &b in value {
        if !b.is_ascii_digit() {
            return None;
        }
        n = n * 10 + (b - b'0') as u64;
    }
    Some(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn find_byte_agrees_with_a_plain_search() {
        // Every length across the inline (16, 32) and memchr boundaries, the needle at
        // every position, once and twice, and absent.
        for len in 0..80usize {
            let hay: Vec<u8> = (0..len).map(|i| b'a' + (i % 20) as u8).collect();
            let plain = |h: &[u8], b: u8| h.iter().position(|&x| x == b);
            assert_eq!(find_byte(b' ', &hay), None);
            for at in 0..len {
                for second in [None, Some((at + 5).min(len - 1))] {
                    let mut h = hay.clone();
                    h[at] = b' ';
                    if let Some(j) = second {
                        h[j] = b'"';
                    }
                    assert_eq!(find_byte(b' ', &h), plain(&h, b' '), "len {len} at {at}");
                    let either = h.iter().position(|&x| x == b'"' || x == b'\\');
                    let mut q = h.clone();
                    q[at] = b'\\';
                    let either_q = q.iter().position(|&x| x == b'"' || x == b'\\');
                    assert_eq!(find_quote_or_backslash(&h), either, "len {len} at {at}");
                    assert_eq!(find_quote_or_backslash(&q), either_q, "len {len} at {at}");
                }
            }
        }
    }

    #[test]
    fn quoted_fields_skip_escapes() {
        assert_eq!(quoted_len(br#"a \"b\" c" rest"#), Some(9));
        assert_eq!(quoted_len(br#"ends in backslash \\" x"#), Some(20));
        assert_eq!(quoted_len(br#"never closed \""#), None);
        assert_eq!(quoted_len(br#"dangling \"#), None);
    }

    #[test]
    fn rejects_formats_it_cannot_parse() {
        assert!(LogFormat::parse("%h%u").is_err());
        assert!(LogFormat::parse("no fields").is_err());
        assert!(LogFormat::parse("%{Referer").is_err());
        assert!(LogFormat::parse("%h %").is_err());
    }
}
