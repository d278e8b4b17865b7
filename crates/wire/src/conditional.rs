//! Conditional requests (RFC 9110 section 13): the request headers that make a response
//! depend on the representation's validators, gathered in one pass over the headers, and
//! their evaluation in the order section 13.2.2 prescribes. Shared by the server's static
//! files and the proxy's cache (both answer 304, 412 and If-Range from what they hold).

use crate::{trim_ows, Header};

/// The request headers a response from held bytes (a file, a cached object) depends on.
/// Absent headers are `None`.
#[derive(Default, Debug)]
pub struct Conditions<'a> {
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
pub enum Outcome {
    /// Send the representation (or the requested ranges of it).
    Proceed,
    /// 304: the client's copy is current.
    NotModified,
    /// 412: a precondition the client set does not hold.
    PreconditionFailed,
}

/// A representation's validators: its entity tag (the quoted opaque tag, `"x"`, and
/// whether it is weak, `W/"x"`) and its modification time (Unix seconds), either of
/// which it may lack.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Validators<'a> {
    pub etag: Option<&'a [u8]>,
    pub weak: bool,
    pub modified: Option<i64>,
}

impl<'a> Validators<'a> {
    /// A strong entity tag (quoted) and a modification time, as files have.
    pub fn strong(etag: &'a [u8], mtime: i64) -> Validators<'a> {
        Validators {
            etag: Some(etag),
            weak: false,
            modified: Some(mtime),
        }
    }

    /// The validators of a stored response: its `ETag` and `Last-Modified` field values.
    pub fn of_fields(etag: Option<&'a [u8]>, last_modified: Option<&[u8]>) -> Validators<'a> {
        let (weak, etag) = match etag.map(trim_ows) {
            Some(t) if t.starts_with(b"W/") => (true, Some(&t[2..])),
            t => (false, t),
        };
        let etag = etag.filter(|t| t.len() >= 2 && t[0] == b'"' && t[t.len() - 1] == b'"');
        Validators {
            etag,
            weak,
            modified: last_modified.and_then(parse_date),
        }
    }
}

/// RFC 9110 section 13.2.2, for GET and HEAD of a representation with validators `v`:
/// 1. If-Match, when present, must match (strong comparison), else 412;
/// 2. otherwise If-Unmodified-Since, when present and a valid date, must not be older
///    than the representation, else 412;
/// 3. If-None-Match, when present, must not match (weak comparison), else 304;
/// 4. otherwise If-Modified-Since, when present and a valid date, must be older than the
///    representation, else 304. A date later than `now` (the server's clock) is not a
///    time the client saw the file, only a skewed or made-up clock: it is ignored, as
///    RFC 2616 section 14.25 said and Apache does, so that such a client is not told
///    "not modified" forever.
///
/// A representation without a modification time ignores the date conditions; one
/// without an entity tag matches only `*` in If-Match and If-None-Match.
pub fn evaluate(c: &Conditions<'_>, v: Validators<'_>, now: i64) -> Outcome {
    if let Some(list) = c.if_match {
        if !list_matches(list, v, Comparison::Strong) {
            return Outcome::PreconditionFailed;
        }
    } else if let (Some(date), Some(mtime)) =
        (c.if_unmodified_since.and_then(parse_date), v.modified)
    {
        if mtime > date {
            return Outcome::PreconditionFailed;
        }
    }
    if let Some(list) = c.if_none_match {
        if list_matches(list, v, Comparison::Weak) {
            return Outcome::NotModified;
        }
    } else if let (Some(date), Some(mtime)) = (c.if_modified_since.and_then(parse_date), v.modified)
    {
        if mtime <= date && date <= now {
            return Outcome::NotModified;
        }
    }
    Outcome::Proceed
}

/// If-Range (RFC 9110 section 13.1.5): the Range applies only if the validator still
/// describes the representation: an entity tag by strong comparison (a weak one never
/// matches), or a date equal to Last-Modified. Anything else means "send it all".
pub fn if_range_holds(value: &[u8], v: Validators<'_>) -> bool {
    let value = trim_ows(value);
    if value.starts_with(b"\"") || value.starts_with(b"W/") {
        return !value.starts_with(b"W/") && !v.weak && Some(value) == v.etag;
    }
    v.modified.is_some() && parse_date(value) == v.modified
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Comparison {
    /// Both tags strong and identical (If-Match, If-Range).
    Strong,
    /// Identical opaque tags, weak or not (If-None-Match).
    Weak,
}

/// Whether `*` or any entity tag in the comma-separated `list` matches the entity tag of
/// `v`. A malformed list matches nothing.
fn list_matches(list: &[u8], v: Validators<'_>, comparison: Comparison) -> bool {
    let list = trim_ows(list);
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
        let strong = !weak && !v.weak;
        if Some(tag) == v.etag && (comparison == Comparison::Weak || strong) {
            return true;
        }
    }
}

/// An HTTP-date (IMF-fixdate, or the obsolete RFC 850 and asctime forms) as Unix seconds.
pub fn parse_date(value: &[u8]) -> Option<i64> {
    let text = std::str::from_utf8(trim_ows(value)).ok()?;
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
        evaluate(
            &Conditions::from_headers(&headers),
            Validators::strong(TAG, MTIME),
            NOW,
        )
    }

    fn list_matches_tag(list: &[u8], tag: &[u8], comparison: Comparison) -> bool {
        list_matches(list, Validators::strong(tag, MTIME), comparison)
    }

    #[test]
    fn weak_or_missing_validators_of_a_stored_response() {
        let weak = Validators::of_fields(Some(b"W/\"w1\""), None);
        assert_eq!(
            (weak.etag, weak.weak, weak.modified),
            (Some(&b"\"w1\""[..]), true, None)
        );
        let c = |name: &str, value: &str| {
            let h = [Header {
                name,
                value: value.as_bytes(),
            }];
            let c = Conditions::from_headers(&h);
            (
                evaluate(&c, weak, NOW),
                c.if_range.map(|r| if_range_holds(r, weak)),
            )
        };
        assert_eq!(c("If-None-Match", "\"w1\"").0, Outcome::NotModified);
        assert_eq!(c("If-Match", "\"w1\"").0, Outcome::PreconditionFailed);
        assert_eq!(c("If-Range", "\"w1\"").1, Some(false));
        // No Last-Modified: date conditions are ignored.
        let date = "Tue, 02 Jan 2024 03:04:05 GMT";
        assert_eq!(c("If-Modified-Since", date).0, Outcome::Proceed);
        assert_eq!(c("If-Unmodified-Since", date).0, Outcome::Proceed);
        assert_eq!(c("If-Range", date).1, Some(false));
        let none = Validators::of_fields(None, Some(date.as_bytes()));
        assert_eq!(none.modified, Some(MTIME));
        assert!(if_range_holds(date.as_bytes(), none));
    }

    #[test]
    fn entity_tag_lists() {
        assert!(list_matches_tag(b"*", TAG, Comparison::Strong));
        assert!(list_matches_tag(
            b"\"x\", \"abc-1-c\"",
            TAG,
            Comparison::Strong
        ));
        assert!(!list_matches_tag(b"W/\"abc-1-c\"", TAG, Comparison::Strong));
        assert!(list_matches_tag(b"W/\"abc-1-c\"", TAG, Comparison::Weak));
        assert!(!list_matches_tag(b"\"abc-1-c", TAG, Comparison::Weak));
        assert!(!list_matches_tag(b"abc-1-c", TAG, Comparison::Weak));
        assert!(!list_matches_tag(b"", TAG, Comparison::Weak));
        assert!(list_matches_tag(b" ,\"abc-1-c\",", TAG, Comparison::Weak));
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
        assert!(if_range_holds(TAG, Validators::strong(TAG, MTIME)));
        assert!(!if_range_holds(
            b"W/\"abc-1-c\"",
            Validators::strong(TAG, MTIME)
        ));
        assert!(!if_range_holds(
            b"\"other\"",
            Validators::strong(TAG, MTIME)
        ));
        assert!(if_range_holds(
            b"Tue, 02 Jan 2024 03:04:05 GMT",
            Validators::strong(TAG, MTIME)
        ));
        assert!(!if_range_holds(
            b"Tue, 02 Jan 2024 03:04:06 GMT",
            Validators::strong(TAG, MTIME)
        ));
        assert!(!if_range_holds(b"garbage", Validators::strong(TAG, MTIME)));
    }
}
