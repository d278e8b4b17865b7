//! Revalidation (RFC 9111 4.3): an expired object with validators is asked for again
//! with a conditional request, and a `304 Not Modified` refreshes it without its body
//! being sent again. Here, what a 304 changes in the stored object's fields
//! ([`updated_fields`]); the request is made by the proxy (`crate::revalidation`).

use handler::FieldList;
use http::header::{HeaderMap, HeaderValue, IF_MODIFIED_SINCE, IF_NONE_MATCH};

/// Fields of a 304 that do not replace the stored ones: those that describe the stored
/// body's bytes, which the 304 did not send (RFC 9111 3.2 keeps Content-Length; the
/// others frame or encode those bytes).
const KEPT_FROM_STORED: &[&[u8]] = &[
    b"content-length",
    b"content-encoding",
    b"content-range",
    b"transfer-encoding",
];

/// The stored object's fields updated with a 304's (RFC 9111 3.2 and 4.3.4): every field
/// the 304 carries replaces the stored field of that name, but those of
/// [`KEPT_FROM_STORED`]. `Age` is the 304's alone: the stored one was the age of the
/// first response, not of this one. `not_modified` has its hop-by-hop fields removed.
pub(crate) fn updated_fields(stored: &FieldList, not_modified: &FieldList) -> FieldList {
    let kept = |name: &[u8]| {
        KEPT_FROM_STORED
            .iter()
            .any(|k| name.eq_ignore_ascii_case(k))
    };
    let mut fields = stored.clone();
    fields.retain(|name, _| {
        !name.eq_ignore_ascii_case(b"age") && (kept(name) || !not_modified.contains(name))
    });
    for (name, value) in not_modified.iter() {
        if !kept(name) {
            fields.append_lowercase(name, value);
        }
    }
    fields
}

/// A fragment request made conditional on the stored object's validators: its `ETag`
/// as If-None-Match, its `Last-Modified` as If-Modified-Since (a page's request writes
/// them itself, `headers::Forwarded::revalidate`).
pub(crate) fn conditional_request(fields: &HeaderMap, stored: &FieldList) -> HeaderMap {
    let mut fields = fields.clone();
    for (name, from) in [
        (IF_NONE_MATCH, "etag"),
        (IF_MODIFIED_SINCE, "last-modified"),
    ] {
        if let Some(v) = stored
            .get(from)
            .and_then(|v| HeaderValue::from_bytes(v).ok())
        {
            fields.insert(name, v);
        }
    }
    fields
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(list: &[(&str, &str)]) -> FieldList {
        let mut f = FieldList::new();
        for (n, v) in list {
            f.append_lowercase(n.as_bytes(), v.as_bytes());
        }
        f
    }

    #[test]
    fn a_304_replaces_the_fields_it_carries_but_the_bodys() {
        let stored = fields(&[
            ("content-type", "text/html"),
            ("content-length", "20"),
            ("cache-control", "max-age=60"),
            ("etag", "\"v1\""),
            ("x-old", "1"),
            ("age", "30"),
            ("date", "Mon, 01 Jan 2024 00:00:00 GMT"),
        ]);
        let not_modified = fields(&[
            ("Cache-Control", "max-age=120"),
            ("date", "Tue, 02 Jan 2024 00:00:00 GMT"),
            ("etag", "\"v1\""),
            ("content-length", "0"),
            ("x-new", "2"),
        ]);
        let got = updated_fields(&stored, &not_modified);
        assert_eq!(got.get(b"cache-control"), Some(&b"max-age=120"[..]));
        assert_eq!(
            got.get(b"date"),
            Some(&b"Tue, 02 Jan 2024 00:00:00 GMT"[..])
        );
        assert_eq!(got.get(b"content-length"), Some(&b"20"[..]));
        assert_eq!(got.get(b"content-type"), Some(&b"text/html"[..]));
        assert_eq!(got.get(b"x-old"), Some(&b"1"[..]));
        assert_eq!(got.get(b"x-new"), Some(&b"2"[..]));
        assert_eq!(got.get_all(b"etag").count(), 1);
        assert_eq!(got.get_all(b"cache-control").count(), 1);
        assert!(
            !got.contains(b"age"),
            "the first response's Age is not this one's"
        );
        let aged = updated_fields(&stored, &fields(&[("age", "5")]));
        assert_eq!(aged.get(b"age"), Some(&b"5"[..]));
    }

    #[test]
    fn a_conditional_request_carries_the_stored_validators() {
        let mut request = HeaderMap::new();
        request.insert("accept", HeaderValue::from_static("text/html"));
        let both = fields(&[
            ("etag", "W/\"x\""),
            ("last-modified", "Tue, 02 Jan 2024 03:04:05 GMT"),
        ]);
        let r = conditional_request(&request, &both);
        assert_eq!(r["if-none-match"], "W/\"x\"");
        assert_eq!(r["if-modified-since"], "Tue, 02 Jan 2024 03:04:05 GMT");
        assert_eq!(r["accept"], "text/html");
        let r = conditional_request(&request, &fields(&[("etag", "\"y\"")]));
        assert!(!r.contains_key("if-modified-since"));
        assert_eq!(r.len(), 2);
    }
}
