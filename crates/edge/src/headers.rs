//! Header rules of a proxy (RFC 9110 section 7.6) and of a surrogate (the W3C Edge
//! Architecture note): what goes upstream, what comes back, what a fragment request
//! carries.

use std::net::IpAddr;

use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::Version;

/// Hop-by-hop fields (RFC 9110 7.6.1, plus the legacy ones every proxy drops): they
/// describe one connection and are never forwarded.
const HOP_BY_HOP: &[&str] = &[
    "connection",
    "proxy-connection",
    "keep-alive",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

/// Whether `name` (lower case) is a hop-by-hop field.
pub(crate) fn is_hop_by_hop(name: &str) -> bool {
    HOP_BY_HOP.contains(&name)
}

/// Fields a fragment request never carries: a fragment is a whole GET of another
/// resource, so the page request's conditionals and ranges would be wrong for it (a 304
/// or 206 cannot be included), its body fields describe a body it does not have, and
/// the client's Accept-Encoding is replaced by `identity` ([`fragment_request`]): an
/// absent Accept-Encoding tells an origin any coding will do (RFC 9110 section 12.5.3),
/// and a page is assembled from text.
pub(crate) const NOT_FOR_FRAGMENTS: &[&str] = &[
    "if-match",
    "if-none-match",
    "if-modified-since",
    "if-unmodified-since",
    "if-range",
    "range",
    "content-length",
    "content-type",
    "content-encoding",
    "content-language",
    "content-location",
    "content-range",
    "content-md5",
    "expect",
    "accept-encoding",
];

/// What a forwarded request needs to know about its client connection.
#[derive(Debug, Clone)]
pub struct ClientInfo {
    /// The client's address, appended to X-Forwarded-For.
    pub addr: IpAddr,
    /// `http` or `https`, sent as X-Forwarded-Proto.
    pub scheme: &'static str,
    /// The client's HTTP version, named in Via.
    pub version: Version,
}

fn via_protocol(version: Version) -> &'static str {
    match version {
        Version::HTTP_09 => "0.9",
        Version::HTTP_10 => "1.0",
        Version::HTTP_2 => "2",
        Version::HTTP_3 => "3",
        _ => "1.1",
    }
}

/// Removes the hop-by-hop fields and every field the Connection header names.
pub fn remove_hop_by_hop(headers: &mut HeaderMap) {
    let named: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|t| HeaderName::from_bytes(t.trim().as_bytes()).ok())
        .collect();
    for name in named {
        headers.remove(name);
    }
    for name in HOP_BY_HOP {
        headers.remove(*name);
    }
}

fn append_list(headers: &mut HeaderMap, name: HeaderName, item: &str) {
    let joined = {
        let existing: Vec<&str> = headers
            .get_all(&name)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .collect();
        if existing.is_empty() {
            item.to_string()
        } else {
            format!("{}, {item}", existing.join(", "))
        }
    };
    if let Ok(v) = HeaderValue::from_str(&joined) {
        headers.insert(name, v);
    }
}

/// The headers of a request forwarded to an upstream: the client's, minus hop-by-hop
/// fields, plus X-Forwarded-For (appended), X-Forwarded-Proto (replaced), Via
/// (appended) and our Surrogate-Capability (appended, so surrogates behind us keep
/// theirs). Host is kept: the origin sees the name the client asked for.
pub fn forward_request(client_headers: &HeaderMap, client: &ClientInfo, token: &str) -> HeaderMap {
    let mut h = client_headers.clone();
    remove_hop_by_hop(&mut h);
    append_list(
        &mut h,
        HeaderName::from_static("x-forwarded-for"),
        &client.addr.to_string(),
    );
    h.insert(
        HeaderName::from_static("x-forwarded-proto"),
        HeaderValue::from_static(client.scheme),
    );
    append_list(
        &mut h,
        header::VIA,
        &format!("{} {token}", via_protocol(client.version)),
    );
    append_list(
        &mut h,
        HeaderName::from_static("surrogate-capability"),
        &format!("{token}=\"ESI/1.0\""),
    );
    h
}

/// The headers of a response sent downstream: hop-by-hop fields and Surrogate-Control
/// removed (it is addressed to surrogates, and we are the last one), Via appended.
pub fn forward_response(upstream: &HeaderMap, version: Version, token: &str) -> HeaderMap {
    let mut h = upstream.clone();
    remove_hop_by_hop(&mut h);
    h.remove("surrogate-control");
    append_list(
        &mut h,
        header::VIA,
        &format!("{} {token}", via_protocol(version)),
    );
    h
}

/// The headers of a fragment request, from the page's forwarded request headers: the
/// fields a fragment server needs to personalise (Cookie, Authorization, Accept-Language,
/// User-Agent, X-Forwarded-*, ...), minus conditionals, ranges and body fields, minus
/// Cookie and Authorization unless `credentials` (the fragment is on the page's own
/// origin or on a host trusted with them). Host is the fragment's.
pub fn fragment_request(page_forwarded: &HeaderMap, host: &str, credentials: bool) -> HeaderMap {
    let mut h = page_forwarded.clone();
    for name in NOT_FOR_FRAGMENTS {
        h.remove(*name);
    }
    h.insert(
        header::ACCEPT_ENCODING,
        HeaderValue::from_static("identity"),
    );
    if !credentials {
        h.remove(header::COOKIE);
        h.remove(header::AUTHORIZATION);
    }
    if let Ok(v) = HeaderValue::from_str(host) {
        h.insert(header::HOST, v);
    }
    h
}

/// Whether Surrogate-Control turns ESI on for us: a `content` directive naming
/// `ESI/1.0`, untargeted or targeted at `token` (`content="ESI/1.0";tessera`).
/// Directives targeted at other devices are ignored.
pub fn surrogate_esi(headers: &HeaderMap, token: &str) -> bool {
    headers
        .get_all("surrogate-control")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(split_directives)
        .any(|d| {
            let (body, target) = match d.rsplit_once(';') {
                // A `;` inside a quoted value is not a target separator.
                Some((b, t)) if !t.contains('"') => (b.trim(), Some(t.trim())),
                _ => (d.trim(), None),
            };
            if target.is_some_and(|t| !t.eq_ignore_ascii_case(token)) {
                return false;
            }
            let Some((name, value)) = body.split_once('=') else {
                return false;
            };
            name.trim().eq_ignore_ascii_case("content")
                && value
                    .trim()
                    .trim_matches('"')
                    .split_ascii_whitespace()
                    .any(|v| v.eq_ignore_ascii_case("ESI/1.0"))
        })
}

/// Splits a Surrogate-Control value at commas outside quotes.
pub(crate) fn split_directives(value: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut quoted = false;
    for (i, b) in value.bytes().enumerate() {
        match b {
            b'"' => quoted = !quoted,
            b',' if !quoted => {
                out.push(&value[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&value[start..]);
    out
}

/// An assembled page is new content: the upstream's length and validators do not
/// describe it.
pub(crate) fn page_headers(mut headers: HeaderMap) -> HeaderMap {
    for name in [
        http::header::CONTENT_LENGTH,
        http::header::ETAG,
        http::header::LAST_MODIFIED,
        http::header::ACCEPT_RANGES,
    ] {
        headers.remove(name);
    }
    headers
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        h
    }

    #[test]
    fn surrogate_control_targeting() {
        let esi = |v: &str| surrogate_esi(&map(&[("surrogate-control", v)]), "tessera");
        assert!(esi(r#"content="ESI/1.0""#));
        assert!(esi(r#"max-age=30, content="ESI/1.0";tessera"#));
        assert!(esi(r#"content="ESI/1.0 ESI-Inline/1.0""#));
        assert!(!esi(r#"content="ESI/1.0";varnish"#));
        assert!(!esi("max-age=30"));
        assert!(!esi(r#"no-store, content="ESI-Inline/1.0""#));
    }

    #[test]
    fn removes_fields_named_in_connection() {
        let mut h = map(&[
            ("connection", "keep-alive, X-Secret"),
            ("x-secret", "1"),
            ("keep-alive", "timeout=5"),
            ("te", "trailers"),
            ("accept", "*/*"),
        ]);
        remove_hop_by_hop(&mut h);
        assert_eq!(h.len(), 1);
        assert_eq!(h["accept"], "*/*");
    }
}
