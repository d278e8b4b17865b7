//! Header rules of a proxy (RFC 9110 section 7.6) and of a surrogate (the W3C Edge
//! Architecture note): what goes upstream, what comes back, what a fragment request
//! carries.

use std::cell::RefCell;
use std::net::IpAddr;

use handler::FieldList;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::Version;

/// Hop-by-hop fields (RFC 9110 7.6.1, plus the legacy ones every proxy drops): they
/// describe one connection and are never forwarded.
const HOP_BY_HOP: [HeaderName; 7] = [
    header::CONNECTION,
    HeaderName::from_static("proxy-connection"),
    HeaderName::from_static("keep-alive"),
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
];

/// Surrogate-Control (W3C Edge Architecture), a name looked up on every response.
pub(crate) const SURROGATE_CONTROL: HeaderName = HeaderName::from_static("surrogate-control");

/// Whether `name` (any case) is a hop-by-hop field.
pub(crate) fn is_hop_by_hop(name: &[u8]) -> bool {
    HOP_BY_HOP
        .iter()
        .any(|n| name.eq_ignore_ascii_case(n.as_str().as_bytes()))
}

/// A field value as text, when it is visible ASCII (tabs allowed): what
/// `HeaderValue::to_str` accepts, so a value with other bytes is not read as text.
pub(crate) fn field_text(value: &[u8]) -> Option<&str> {
    value
        .iter()
        .all(|&b| b == b'\t' || (0x20..0x7f).contains(&b))
        .then(|| std::str::from_utf8(value).ok())
        .flatten()
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
    /// The client's port (0 when a proxy in front named the client without one), for a
    /// PROXY header sent upstream (`send_proxy`).
    pub port: u16,
    /// When the client was read from a trusted proxy's `X-Forwarded-For`: how many of its
    /// items lie before the client's. Those are forwarded, then the client; the trusted
    /// hops after it are not, so the origin's right-most item is the client. `None`: the
    /// field goes whole, the client appended.
    pub forwarded_for: Option<usize>,
}

/// Writes the first `n` non-empty items of a list field's lines, comma-separated;
/// whether any was written.
fn write_items<'a>(
    buf: &mut Vec<u8>,
    values: impl Iterator<Item = &'a HeaderValue>,
    n: usize,
) -> bool {
    let items = values
        .flat_map(|v| v.as_bytes().split(|&b| b == b','))
        .map(wire::trim_ows)
        .filter(|i| !i.is_empty())
        .take(n);
    let mut any = false;
    for item in items {
        if any {
            buf.extend_from_slice(b", ");
        }
        buf.extend_from_slice(item);
        any = true;
    }
    any
}

/// The `X-Forwarded-For` sent upstream: the client's items (or those before the client,
/// see [`ClientInfo::forwarded_for`]), then the client.
fn forwarded_for(buf: &mut Vec<u8>, client_headers: &HeaderMap, client: &ClientInfo) {
    let values = client_headers.get_all(X_FORWARDED_FOR).iter();
    let kept = client.forwarded_for.unwrap_or(usize::MAX);
    if write_items(buf, values, kept) {
        buf.extend_from_slice(b", ");
    }
    write_ip(buf, client.addr);
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

/// Removes the hop-by-hop fields and every field the Connection field names, from a
/// response's fields.
pub(crate) fn strip_hop_by_hop(fields: &mut FieldList) {
    // Most messages have none: one pass over their few names says so.
    if !fields.iter().any(|(n, _)| is_hop_by_hop(n)) {
        return;
    }
    // The fields Connection names, one name at a time as the list shrinks (a name that
    // is hop-by-hop itself goes below with the others): none for the usual
    // `Connection: keep-alive` or `close`, so nothing is copied for those.
    loop {
        let named = fields
            .get_all(b"connection")
            .flat_map(|v| v.split(|&b| b == b','))
            .map(wire::trim_ows)
            .find(|&t| !t.is_empty() && !is_hop_by_hop(t) && fields.contains(t))
            .map(<[u8]>::to_vec);
        let Some(named) = named else {
            break;
        };
        fields.remove(&named);
    }
    fields.retain(|n, _| !is_hop_by_hop(n));
}

/// Removes the hop-by-hop fields and every field the Connection header names.
pub fn remove_hop_by_hop(headers: &mut HeaderMap) {
    // Most messages have none: one pass over their few names says so, instead of seven
    // lookups that each hash a name and find nothing.
    if !headers.keys().any(|n| HOP_BY_HOP.contains(n)) {
        return;
    }
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
    for name in &HOP_BY_HOP {
        headers.remove(name);
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
/// theirs). Host is kept: the origin sees the name the client asked for (a request
/// without one gets the upstream's name when it is written, see [`Forwarded`]).
pub fn forward_request(client_headers: &HeaderMap, client: &ClientInfo, token: &str) -> HeaderMap {
    let mut h = client_headers.clone();
    remove_hop_by_hop(&mut h);
    let mut xff = Vec::new();
    forwarded_for(&mut xff, client_headers, client);
    if let Ok(v) = HeaderValue::from_bytes(&xff) {
        h.insert(X_FORWARDED_FOR, v);
    }
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

/// A client's request as it goes upstream: the fields [`forward_request`] makes, written
/// straight from the client's fields into the request head (the proxy's own requests do
/// not build a second map per request), plus what the proxy changes for this request.
pub(crate) struct Forwarded<'a> {
    pub(crate) client_headers: &'a HeaderMap,
    pub(crate) client: &'a ClientInfo,
    pub(crate) token: &'a str,
    /// Ask for `Accept-Encoding: identity` (a response that may be a template to read).
    pub(crate) identity: bool,
    /// Leave out the client's conditionals and Range (a cache fill asks for the whole
    /// object).
    pub(crate) whole: bool,
    /// The fields of the stored object this request revalidates: its `ETag` goes as
    /// If-None-Match and its `Last-Modified` as If-Modified-Since (RFC 9111 4.3.1), in
    /// place of the client's conditionals (with `whole`).
    pub(crate) revalidate: Option<&'a FieldList>,
    /// The Host sent when the client sent none (an HTTP/1.0 request): the upstream's
    /// name, as nginx sends `$proxy_host`. An HTTP/1.1 request must have one.
    pub(crate) host: &'a str,
    /// Sent as `X-Request-Id` (32 hex digits) in place of the client's.
    pub(crate) request_id: Option<u128>,
}

/// The fields a cache fill does not forward (see [`Forwarded::whole`]).
const CONDITIONALS: &[HeaderName] = &[
    header::IF_NONE_MATCH,
    header::IF_MODIFIED_SINCE,
    header::IF_RANGE,
    header::RANGE,
];

impl Forwarded<'_> {
    /// Writes the field lines, without the framing fields (the client writes those), nor
    /// the trace fields `trace` replaces.
    pub(crate) fn write(&self, buf: &mut Vec<u8>, trace: Option<trace::Context>) {
        let h = self.client_headers;
        // The usual request has no Connection field naming others: looked up once here,
        // not once per field.
        let connection = h.contains_key(header::CONNECTION);
        // Whether the client sent any of the three lists appended to below (most send
        // none: then no lookup is made for them).
        let mut lists = false;
        for (name, value) in h {
            let appended =
                name == X_FORWARDED_FOR || name == header::VIA || name == SURROGATE_CAPABILITY;
            lists |= appended;
            let replaced = name == X_FORWARDED_PROTO
                || (self.request_id.is_some() && name == X_REQUEST_ID)
                || name == header::CONTENT_LENGTH
                || (self.identity && name == header::ACCEPT_ENCODING)
                || (self.whole && CONDITIONALS.contains(name))
                || trace.is_some_and(|t| t.replaces(name.as_str().as_bytes()));
            if appended
                || replaced
                || HOP_BY_HOP.contains(name)
                || (connection && named_in_connection(h, name))
            {
                continue;
            }
            wire::write_field(buf, name.as_str().as_bytes(), value.as_bytes());
        }
        let list = |buf: &mut Vec<u8>, name: HeaderName, item: &dyn Fn(&mut Vec<u8>)| {
            buf.extend_from_slice(name.as_str().as_bytes());
            buf.extend_from_slice(b": ");
            if lists {
                for v in h.get_all(&name) {
                    buf.extend_from_slice(v.as_bytes());
                    buf.extend_from_slice(b", ");
                }
            }
            item(buf);
            buf.extend_from_slice(b"\r\n");
        };
        buf.extend_from_slice(b"x-forwarded-for: ");
        forwarded_for(buf, h, self.client);
        buf.extend_from_slice(b"\r\n");
        wire::write_field(buf, b"x-forwarded-proto", self.client.scheme.as_bytes());
        list(buf, header::VIA, &|b| {
            b.extend_from_slice(via_protocol(self.client.version).as_bytes());
            b.push(b' ');
            b.extend_from_slice(self.token.as_bytes());
        });
        list(buf, SURROGATE_CAPABILITY, &|b| {
            b.extend_from_slice(self.token.as_bytes());
            b.extend_from_slice(b"=\"ESI/1.0\"");
        });
        if self.identity {
            wire::write_field(buf, b"accept-encoding", b"identity");
        }
        if let Some(stored) = self.revalidate {
            if let Some(tag) = stored.get(b"etag") {
                wire::write_field(buf, b"if-none-match", tag);
            }
            if let Some(date) = stored.get(b"last-modified") {
                wire::write_field(buf, b"if-modified-since", date);
            }
        }
        if !h.contains_key(header::HOST) {
            wire::write_field(buf, b"host", self.host.as_bytes());
        }
        if let Some(id) = self.request_id {
            const HEX: &[u8; 16] = b"0123456789abcdef";
            let digits: [u8; 32] =
                std::array::from_fn(|i| HEX[(id >> (124 - 4 * i)) as usize & 15]);
            wire::write_field(buf, b"x-request-id", &digits);
        }
    }
}

const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
const X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");
const X_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");
const SURROGATE_CAPABILITY: HeaderName = HeaderName::from_static("surrogate-capability");

/// Writes an address as `Display` does. An IPv4 address is written by hand: it goes
/// into every proxied request, and the formatting machinery costs about a thousand
/// instructions for it (callgrind), ten times this.
fn write_ip(buf: &mut Vec<u8>, addr: IpAddr) {
    match addr {
        IpAddr::V4(v4) => {
            for (i, octet) in v4.octets().into_iter().enumerate() {
                if i > 0 {
                    buf.push(b'.');
                }
                wire::write_decimal(buf, u64::from(octet));
            }
        }
        IpAddr::V6(v6) => {
            use std::io::Write;
            let _ = write!(buf, "{v6}");
        }
    }
}

/// Whether the Connection field names `name` (as hop-by-hop for this connection).
fn named_in_connection(headers: &HeaderMap, name: &HeaderName) -> bool {
    headers
        .get_all(header::CONNECTION)
        .iter()
        .flat_map(|v| v.as_bytes().split(|&b| b == b','))
        .any(|t| wire::trim_ows(t).eq_ignore_ascii_case(name.as_str().as_bytes()))
}

thread_local! {
    /// Maps of requests done with, cleared, for the worker's next ones.
    static SPARE_MAPS: RefCell<Vec<HeaderMap>> = const { RefCell::new(Vec::new()) };
}

/// An empty map with room for `fields`: one the worker gave back ([`give_map`]) if it
/// has one, so that the steady state allocates none. For a client's request (what
/// [`Forwarded`] reads); a response's fields are a [`FieldList`].
pub(crate) fn take_map(fields: usize) -> HeaderMap {
    match SPARE_MAPS.with_borrow_mut(Vec::pop) {
        Some(mut map) => {
            map.reserve(fields);
            map
        }
        None => HeaderMap::with_capacity(fields),
    }
}

/// Keeps `map`, cleared, for [`take_map`] (up to as many as a worker has requests in
/// flight; not a map grown unusually large).
pub(crate) fn give_map(mut map: HeaderMap) {
    if map.capacity() > 128 {
        return;
    }
    map.clear();
    let _ = SPARE_MAPS.try_with(|s| {
        if let Ok(mut spares) = s.try_borrow_mut() {
            if spares.len() < 256 {
                spares.push(map);
            }
        }
    });
}

/// Writes this hop's Via entry: `1.1 tessera`.
fn write_via(buf: &mut Vec<u8>, version: Version, token: &str) {
    buf.extend_from_slice(via_protocol(version).as_bytes());
    buf.push(b' ');
    buf.extend_from_slice(token.as_bytes());
}

/// Whether `token` may be written in a field value (`HeaderValue`'s rule).
fn value_bytes(token: &str) -> bool {
    token
        .bytes()
        .all(|b| b == b'\t' || (b >= 0x20 && b != 0x7f))
}

/// The fields an origin names an object's surrogate keys in: Fastly's `Surrogate-Key`
/// (space separated), Cloudflare's `Cache-Tag` (comma separated) and Varnish xkey's
/// `xkey`.
pub(crate) const KEY_FIELDS: [&[u8]; 3] = [b"surrogate-key", b"cache-tag", b"xkey"];

/// Puts the surrogate key fields of `upstream` back into `fields` (a route's
/// `expose_keys`), after [`forward_response`] removed them.
pub(crate) fn expose_keys(fields: &mut FieldList, upstream: &FieldList) {
    for (name, value) in upstream.iter() {
        if KEY_FIELDS.iter().any(|k| name.eq_ignore_ascii_case(k)) {
            fields.append(name, value);
        }
    }
}

/// The fields of a response sent downstream: hop-by-hop fields, Surrogate-Control and
/// the surrogate key fields ([`KEY_FIELDS`]) removed (they are addressed to surrogates,
/// and we are the last one), Via appended.
pub fn forward_response(upstream: &FieldList, version: Version, token: &str) -> FieldList {
    forward_response_owned(upstream.clone(), version, token)
}

/// [`forward_response`] of fields the caller no longer needs: changed in place.
pub(crate) fn forward_response_owned(
    mut fields: FieldList,
    version: Version,
    token: &str,
) -> FieldList {
    strip_hop_by_hop(&mut fields);
    fields.retain(|name, _| {
        !(name.eq_ignore_ascii_case(b"surrogate-control")
            || KEY_FIELDS.iter().any(|k| name.eq_ignore_ascii_case(k)))
    });
    if !value_bytes(token) {
        return fields;
    }
    if fields.contains(b"via") {
        // The upstream's values, `, ` after each, then this hop, in the first one's place.
        let mut via = Vec::with_capacity(64);
        for v in fields.get_all(b"via") {
            via.extend_from_slice(v);
            via.extend_from_slice(b", ");
        }
        write_via(&mut via, version, token);
        fields.insert(b"via", &via);
    } else {
        // The usual case: written straight into the list.
        fields.append_with(b"via", |b| write_via(b, version, token));
    }
    fields
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
pub fn surrogate_esi(fields: &FieldList, token: &str) -> bool {
    fields
        .get_all(SURROGATE_CONTROL.as_str().as_bytes())
        .filter_map(field_text)
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
pub(crate) fn page_headers(mut fields: FieldList) -> FieldList {
    fields.retain(|name, _| {
        ![
            &b"content-length"[..],
            // A template that came encoded was decoded: the page is assembled as identity.
            b"content-encoding",
            b"etag",
            b"last-modified",
            b"accept-ranges",
        ]
        .iter()
        .any(|n| name.eq_ignore_ascii_case(n))
    });
    fields
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_are_written_as_display_writes_them() {
        for addr in [
            "0.0.0.0",
            "127.0.0.1",
            "10.20.30.40",
            "255.255.255.255",
            "::1",
            "2001:db8::7",
            "::ffff:1.2.3.4",
        ] {
            let ip: IpAddr = addr.parse().unwrap();
            let mut buf = Vec::new();
            write_ip(&mut buf, ip);
            assert_eq!(String::from_utf8(buf).unwrap(), ip.to_string());
        }
    }

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

    fn fields(pairs: &[(&str, &str)]) -> FieldList {
        let mut f = FieldList::new();
        for (k, v) in pairs {
            f.append(k.as_bytes(), v.as_bytes());
        }
        f
    }

    #[test]
    fn surrogate_control_targeting() {
        let esi = |v: &str| surrogate_esi(&fields(&[("surrogate-control", v)]), "tessera");
        assert!(esi(r#"content="ESI/1.0""#));
        assert!(esi(r#"max-age=30, content="ESI/1.0";tessera"#));
        assert!(esi(r#"content="ESI/1.0 ESI-Inline/1.0""#));
        assert!(!esi(r#"content="ESI/1.0";varnish"#));
        assert!(!esi("max-age=30"));
        assert!(!esi(r#"no-store, content="ESI-Inline/1.0""#));
    }

    /// The head the proxy writes for a forwarded request says what `forward_request`'s
    /// map says (one line per field, lists joined), plus the changes a request asks for.
    #[test]
    fn forwarded_fields_match_forward_request() {
        let client_headers = map(&[
            ("host", "site.test"),
            ("connection", "keep-alive, X-Secret"),
            ("x-secret", "1"),
            ("te", "trailers"),
            ("x-forwarded-for", "10.1.1.1"),
            ("x-forwarded-proto", "https"),
            ("via", "1.1 cdn"),
            ("accept-encoding", "gzip"),
            ("if-none-match", "\"a\""),
            ("content-length", "3"),
            ("cookie", "a=1"),
        ]);
        let client = ClientInfo {
            addr: "10.0.0.7".parse().unwrap(),
            scheme: "http",
            version: Version::HTTP_11,
            port: 0,
            forwarded_for: None,
        };
        let lines = |identity: bool, whole: bool| {
            let mut buf = Vec::new();
            Forwarded {
                client_headers: &client_headers,
                client: &client,
                token: "tessera",
                identity,
                whole,
                revalidate: None,
                host: "app",
                request_id: None,
            }
            .write(&mut buf, None);
            let mut lines: Vec<String> = String::from_utf8(buf)
                .unwrap()
                .lines()
                .map(|l| l.to_ascii_lowercase())
                .collect();
            lines.sort();
            lines
        };
        let mut expected: Vec<String> = forward_request(&client_headers, &client, "tessera")
            .iter()
            .filter(|(n, _)| *n != header::CONTENT_LENGTH)
            .map(|(n, v)| format!("{}: {}", n, v.to_str().unwrap()).to_ascii_lowercase())
            .collect();
        expected.sort();
        assert_eq!(lines(false, false), expected);
        let changed = lines(true, true);
        assert!(changed.contains(&"accept-encoding: identity".to_string()));
        assert!(!changed
            .iter()
            .any(|l| l.starts_with("if-none-match") || l == "accept-encoding: gzip"));
        assert!(changed.contains(&"x-forwarded-for: 10.1.1.1, 10.0.0.7".to_string()));
        assert!(changed.contains(&"via: 1.1 cdn, 1.1 tessera".to_string()));
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

    /// A response's fields lose what a request's map loses ([`remove_hop_by_hop`]).
    #[test]
    fn a_response_loses_the_fields_named_in_connection() {
        let mut f = fields(&[
            ("Connection", "keep-alive, X-Secret"),
            ("X-Secret", "1"),
            ("Keep-Alive", "timeout=5"),
            ("te", "trailers"),
            ("accept", "*/*"),
            ("x-secret", "2"),
        ]);
        strip_hop_by_hop(&mut f);
        assert_eq!(f, fields(&[("accept", "*/*")]));
    }

    #[test]
    fn via_is_appended_or_joined_in_place() {
        let out = forward_response_owned(
            fields(&[
                ("Via", "1.0 cdn"),
                ("surrogate-control", "max-age=5"),
                ("age", "1"),
            ]),
            Version::HTTP_11,
            "tessera",
        );
        assert_eq!(
            out,
            fields(&[("Via", "1.0 cdn, 1.1 tessera"), ("age", "1")])
        );
        let out = forward_response_owned(fields(&[("age", "1")]), Version::HTTP_2, "tessera");
        assert_eq!(out, fields(&[("age", "1"), ("via", "2 tessera")]));
    }
}
