//! Conditional requests (RFC 9110 section 13): the request headers that make a response
//! depend on the representation's validators, gathered in one pass over the headers, and
//! their evaluation in the order section 13.2.2 prescribes.

use wire::Header;

/// The request headers static file responses depend on. Absent headers are `None`.
#[derive(Default, Debug)]
pub(crate) struct Conditions<'a> {
    pub if_match: Option<&'a [u8]>,
    pub if_none_match: Option<&'a [u8]>,
    pub if_modified_since: Option<&'a [u8]>,
    pub if_unmodified_since: Option<&'a [u8]>,
    pub range: Option<&'a [u8]>,
    pub if_range: Option<&'a [u8]>,
    pub accept_encoding: Option<&'a [u8]>,
}

impl<'a> Conditions<'a> {
    /// One pass over the headers; the first of each name counts.
    pub fn from_headers(headers: &[Header<'a>]) -> Conditions<'a> {
        let mut c = Conditions::default();
        for h in headers {
            let name = h.name.as_bytes();
            let slot = match name.len() {
                5 if name.eq_ignore_ascii_case(b"range") => &mut c.range,
                8 if name.eq_ignore_ascii_case(b"if-match") => &mut c.if_match,
                8 if name.eq_ignore_ascii_case(b"if-range") => &mut c.if_range,
                13 if name.eq_ignore_ascii_case(b"if-none-match") => &mut c.if_none_match,
                15 if name.eq_ignore_ascii_case(b"accept-encoding") => &mut c.accept_encoding,
                17 if name.eq_ignore_ascii_case(b"if-modified-since") => &mut c.if_modified_since,
                19 if name.eq_ignore_ascii_case(b"if-unmodified-since") => {
                    &mut c.if_unmodified_since
                }
                _ => continue,
            };
            if slot.is_none() {
                *slot = Some(h.value);
            }
        }
        c
    }
}

/// What the preconditions decide for a GET or HEAD.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Send the representation (or the requested ranges of it).
    Proceed,
    /// 304: the client's copy is current.
    NotModified,
    /// 412: a precondition the client set does not hold.
    PreconditionFailed,
}

/// RFC 9110 section 13.2.2, for GET and HEAD of a representation with strong entity tag
/// `etag` (quoted) last modified at `mtime` (Unix seconds):
/// 1. If-Match, when present, must match (strong comparison), else 412;
/// 2. otherwise If-Unmodified-Since, when present and a valid date, must not be older
///    than the representation, else 412;
/// 3. If-None-Match, when present, must not match (weak comparison), else 304;
/// 4. otherwise If-Modified-Since, when present and a valid date, must be older than the
///    representation, else 304. A date later than `now` (the server's clock) is not a
///    time the client saw the file, only a skewed or made-up clock: it is ignored, as
///    RFC 2616 section 14.25 said and Apache does, so that such a client is not told
///    "not modified" forever.
pub(crate) fn evaluate(c: &Conditions<'_>, etag: &[u8], mtime: i64, now: i64) -> Outcome {
    if let Some(list) = c.if_match {
        if !list_matches(list, etag, Comparison::Strong) {
            return Outcome::PreconditionFailed;
        }
    } else if let Some(date) = c.if_unmodified_since.and_then(parse_date) {
        if mtime > date {
            return Outcome::PreconditionFailed;
        }
    }
    if let Some(list) = c.if_none_match {
        if list_matches(list, etag, Comparison::Weak) {
            return Outcome::NotModified;
        }
    } else if let Some(date) = c.if_modified_since.and_then(parse_date) {
        if mtime <= date && date <= now {
            return Outcome::NotModified;
        }
    }
    Outcome::Proceed
}

/// If-Range (RFC 9110 section 13.1.5): the Range applies only if the validator still
/// describes the representation: an entity tag by strong comparison (a weak one never
/// matches), or a date equal to Last-Modified. Anything else means "send it all".
pub(crate) fn if_range_holds(value: &[u8], etag: &[u8], mtime: i64) -> bool {
    let value = wire::trim_ows(value);
    if value.starts_with(b"\"") || value.starts_with(b"W/") {
        return !value.starts_with(b"W/") && value == etag;
    }
    parse_date(value) == Some(mtime)
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Comparison {
    /// Both tags strong and identical (If-Match, If-Range).
    Strong,
    /// Identical opaque tags, weak or not (If-None-Match).
    Weak,
}

/// Whether `*` or any entity tag in the comma-separated `list` matches `etag` (our own,
/// strong, quoted). A malformed list matches nothing.
fn list_matches(list: &[u8], etag: &[u8], comparison: Comparison) -> bool {
    let list = wire::trim_ows(list);
    if list == b"*" {
        return true;
    }
    let mut rest = list;
    loop {
        while let [b',' | b' ' | b'\t', tail @ ..] = rest {
            rest = tail;
        }
        if rest.is_empty() {
            return false;
        }
        let weak = rest.starts_with(b"W/");
        if weak {
            rest = &rest[2..];
        }
        if rest.first() != Some(&b'"') {
            return false;
        }
        let Some(close) = rest[1..].iter().position(|&b| b == b'"') else {
            return false;
        };
        let tag = &rest[..close + 2];
        rest = &rest[close + 2..];
        if tag == etag && (comparison == Comparison::Weak || !weak) {
            return true;
        }
    }
}

/// An HTTP-date (IMF-fixdate, or the obsolete RFC 850 and asctime forms) as Unix seconds.
fn parse_date(value: &[u8]) -> Option<i64> {
    let text = std::str::from_utf8(wire::trim_ows(value)).ok()?;
    let time = httpdate::parse_http_date(text).ok()?;
    Some(match time.duration_since(std::time::UNIX_EPOCH) {
        Ok(after) => after.as_secs() as i64,
        Err(before) => -(before.duration().as_secs() as i64),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const TAG: &[u8] = b"\"abc-1-c\"";
    // Tue, 02 Jan 2024 03:04:05 GMT
    const MTIME: i64 = 1_704_164_645;
    // A week later.
    const NOW: i64 = MTIME + 7 * 86400;

    fn eval(headers: &[(&str, &str)]) -> Outcome {
        let headers: Vec<Header<'_>> = headers
            .iter()
            .map(|(n, v)| Header {
                name: n,
                value: v.as_bytes(),
            })
            .collect();
        evaluate(&Conditions::from_headers(&headers), TAG, MTIME, NOW)
    }

    #[test]
    fn entity_tag_lists() {
        assert!(list_matches(b"*", TAG, Comparison::Strong));
        assert!(list_matches(b"\"x\", \"abc-1-c\"", TAG, Comparison::Strong));
        assert!(!list_matches(b"W/\"abc-1-c\"", TAG, Comparison::Strong));
        assert!(list_matches(b"W/\"abc-1-c\"", TAG, Comparison::Weak));
        assert!(!list_matches(b"\"abc-1-c", TAG, Comparison::Weak));
        assert!(!list_matches(b"abc-1-c", TAG, Comparison::Weak));
        assert!(!list_matches(b"", TAG, Comparison::Weak));
        assert!(list_matches(b" ,\"abc-1-c\",", TAG, Comparison::Weak));
    }

    #[test]
    fn precedence_follows_rfc_9110_13_2_2() {
        let date = "Tue, 02 Jan 2024 03:04:05 GMT";
        let older = "Mon, 01 Jan 2024 00:00:00 GMT";
        assert_eq!(eval(&[]), Outcome::Proceed);
        assert_eq!(
            eval(&[("If-None-Match", "\"abc-1-c\"")]),
            Outcome::NotModified
        );
        assert_eq!(eval(&[("If-None-Match", "\"nope\"")]), Outcome::Proceed);
        assert_eq!(eval(&[("If-Modified-Since", date)]), Outcome::NotModified);
        assert_eq!(eval(&[("If-Modified-Since", older)]), Outcome::Proceed);
        assert_eq!(
            eval(&[("If-Modified-Since", "yesterday")]),
            Outcome::Proceed
        );
        // If-None-Match wins over If-Modified-Since.
        assert_eq!(
            eval(&[("If-None-Match", "\"nope\""), ("If-Modified-Since", date)]),
            Outcome::Proceed
        );
        assert_eq!(
            eval(&[("If-Match", "\"nope\"")]),
            Outcome::PreconditionFailed
        );
        assert_eq!(eval(&[("If-Match", "*")]), Outcome::Proceed);
        assert_eq!(
            eval(&[("If-Unmodified-Since", older)]),
            Outcome::PreconditionFailed
        );
        assert_eq!(eval(&[("If-Unmodified-Since", date)]), Outcome::Proceed);
        // If-Match wins over If-Unmodified-Since; 412 wins over 304.
        assert_eq!(
            eval(&[("If-Match", "\"abc-1-c\""), ("If-Unmodified-Since", older)]),
            Outcome::Proceed
        );
        assert_eq!(
            eval(&[("If-Match", "\"nope\""), ("If-None-Match", "*")]),
            Outcome::PreconditionFailed
        );
    }

    #[test]
    fn if_range_needs_a_strong_match() {
        assert!(if_range_holds(TAG, TAG, MTIME));
        assert!(!if_range_holds(b"W/\"abc-1-c\"", TAG, MTIME));
        assert!(!if_range_holds(b"\"other\"", TAG, MTIME));
        assert!(if_range_holds(b"Tue, 02 Jan 2024 03:04:05 GMT", TAG, MTIME));
        assert!(!if_range_holds(
            b"Tue, 02 Jan 2024 03:04:06 GMT",
            TAG,
            MTIME
        ));
        assert!(!if_range_holds(b"garbage", TAG, MTIME));
    }
}
