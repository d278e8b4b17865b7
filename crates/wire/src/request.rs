use std::mem::MaybeUninit;

use crate::{Error, Limits, MAX_HEADERS_CAP};

pub use httparse::Header;

/// Uninitialised room for the header fields of one request, kept on the caller's stack so
/// that parsing never allocates and never pays for zeroing 256 entries. Make one with
/// [`HeaderStorage::new`].
pub struct HeaderStorage<'b>(pub(crate) [MaybeUninit<Header<'b>>; MAX_HEADERS_CAP]);

impl<'b> HeaderStorage<'b> {
    #[inline]
    pub fn new() -> Self {
        HeaderStorage([const { MaybeUninit::uninit() }; MAX_HEADERS_CAP])
    }
}

impl Default for HeaderStorage<'_> {
    fn default() -> Self {
        Self::new()
    }
}

/// The request method. Methods tessera does not know are `Other`; the server answers
/// them 501.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    Get,
    Head,
    Post,
    Put,
    Delete,
    Options,
    Trace,
    Connect,
    Patch,
    Other,
}

impl Method {
    /// The method a token names (`Other` for any it does not know).
    pub fn from_token(token: &str) -> Method {
        match token {
            "GET" => Method::Get,
            "HEAD" => Method::Head,
            "POST" => Method::Post,
            "PUT" => Method::Put,
            "DELETE" => Method::Delete,
            "OPTIONS" => Method::Options,
            "TRACE" => Method::Trace,
            "CONNECT" => Method::Connect,
            "PATCH" => Method::Patch,
            _ => Method::Other,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    Http10,
    Http11,
    /// A request that came over HTTP/2 (parsed by the `h2` crate, not here): handlers
    /// answer it as they answer HTTP/1.1; the connection frames the response.
    Http2,
    /// A request that came over HTTP/3 (QUIC streams, decoded by the `h3` crate): answered
    /// as HTTP/2's are.
    Http3,
}

/// How the request's body is delimited (RFC 9112 section 6.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyFraming {
    /// No body: neither Content-Length nor Transfer-Encoding.
    None,
    /// Exactly this many bytes follow the head.
    Length(u64),
    /// A chunked body follows; decode it with [`crate::ChunkedDecoder`].
    Chunked,
}

/// A parsed request head. It borrows the read buffer and the header storage.
#[derive(Debug)]
pub struct Request<'h, 'b> {
    pub method: Method,
    /// The method token as sent (useful for logs and for `Other`).
    pub method_token: &'b str,
    /// The request target as sent, in origin form (`/path?query`), asterisk form (`*`),
    /// absolute form or authority form.
    pub target: &'b [u8],
    /// The path and query of the target: the target itself in origin form, the part after
    /// the authority in absolute form (`/` when empty, `?q` when only a query follows
    /// the authority, which stands for `/?q`), `*` in asterisk form, and the whole
    /// authority for CONNECT.
    pub path: &'b [u8],
    pub version: Version,
    pub headers: &'h [Header<'b>],
    /// Length of the head, CRLFCRLF included: the body (if any) starts here.
    pub head_len: usize,
    pub body: BodyFraming,
    /// Whether the connection may carry another request after this one's response.
    pub keep_alive: bool,
    /// `Expect: 100-continue` was sent.
    pub expect_continue: bool,
}

impl Request<'_, '_> {
    /// The value of the first header named `name` (ASCII case-insensitive).
    pub fn header(&self, name: &str) -> Option<&[u8]> {
        self.headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case(name))
            .map(|h| h.value)
    }
}

/// Parses one request head from the start of `buf`.
///
/// Returns `Ok(None)` when `buf` holds only part of a head (read more and call again),
/// and an error when the head is invalid or exceeds `limits`. On success the body, if
/// any, starts at `head_len`.
pub fn parse_request<'h, 'b>(
    buf: &'b [u8],
    storage: &'h mut HeaderStorage<'b>,
    limits: &Limits,
) -> Result<Option<Request<'h, 'b>>, Error> {
    let max_headers = limits.max_headers.min(MAX_HEADERS_CAP);
    let mut req = httparse::Request::new(&mut []);
    let status = req.parse_with_uninit_headers(buf, &mut storage.0[..max_headers]);
    let head_len = match status {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) => {
            return partial(buf, limits).map(|()| None);
        }
        Err(e) => {
            // httparse accepts some things we refuse (bare LF); report those first so the
            // error names the real problem.
            check_line_endings(buf)?;
            return Err(match e {
                httparse::Error::TooManyHeaders => Error::TooManyHeaders,
                httparse::Error::Version => version_error(buf),
                httparse::Error::Token => Error::BadMethod,
                httparse::Error::HeaderName | httparse::Error::HeaderValue => Error::BadHeader,
                httparse::Error::NewLine => Error::BadRequestLine,
                httparse::Error::Status => Error::BadRequestLine,
            });
        }
    };
    if head_len > limits.max_head_size {
        return Err(Error::HeadTooLarge);
    }
    check_line_endings(&buf[..head_len])?;

    let (Some(method_token), Some(target), Some(minor)) = (req.method, req.path, req.version)
    else {
        return Err(Error::BadRequestLine);
    };
    let target = target.as_bytes();
    if target.len() > limits.max_uri_length {
        return Err(Error::UriTooLong);
    }
    let method = Method::from_token(method_token);
    let version = if minor == 0 {
        Version::Http10
    } else {
        Version::Http11
    };
    let path = request_path(method, target)?;

    let headers: &'h [Header<'b>] = req.headers;
    let mut content_length: Option<u64> = None;
    let mut transfer_encoding: Option<&[u8]> = None;
    let mut hosts = 0;
    let mut close = false;
    let mut keep_alive_token = false;
    let mut expect_continue = false;
    for h in headers {
        let name = h.name.as_bytes();
        if name.eq_ignore_ascii_case(b"content-length") {
            if content_length.is_some() {
                return Err(Error::DuplicateContentLength);
            }
            content_length = Some(parse_content_length(h.value)?);
        } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
            if transfer_encoding.is_some() {
                // Two Transfer-Encoding fields combine into one list; a list is never
                // exactly `chunked`, so refuse rather than guess.
                return Err(Error::BadTransferEncoding);
            }
            transfer_encoding = Some(h.value);
        } else if name.eq_ignore_ascii_case(b"host") {
            if !is_valid_host(h.value) {
                return Err(Error::BadHost);
            }
            hosts += 1;
        } else if name.eq_ignore_ascii_case(b"connection") {
            let (c, k) = connection_options(h.value);
            close |= c;
            keep_alive_token |= k;
        } else if name.eq_ignore_ascii_case(b"expect") {
            if trim_ows(h.value).eq_ignore_ascii_case(b"100-continue") {
                expect_continue = true;
            } else {
                return Err(Error::BadExpectation);
            }
        }
    }
    if version == Version::Http11 && hosts != 1 {
        return Err(Error::BadHost);
    }
    if hosts > 1 {
        return Err(Error::BadHost);
    }
    let body = match (content_length, transfer_encoding) {
        (Some(_), Some(_)) => return Err(Error::ContentLengthWithTransferEncoding),
        (None, Some(te)) => {
            if version == Version::Http10 {
                return Err(Error::TransferEncodingOnHttp10);
            }
            parse_transfer_encoding(te)?;
            BodyFraming::Chunked
        }
        (Some(0), None) | (None, None) => BodyFraming::None,
        (Some(n), None) => {
            if n > limits.max_body_size {
                return Err(Error::BodyTooLarge);
            }
            BodyFraming::Length(n)
        }
    };
    let keep_alive = !close && (version == Version::Http11 || keep_alive_token);
    Ok(Some(Request {
        method,
        method_token,
        target,
        path,
        version,
        headers,
        head_len,
        body,
        keep_alive,
        expect_continue: expect_continue && body != BodyFraming::None,
    }))
}

/// A head is incomplete: refuse it now if it can only end up over a limit, so a client
/// cannot make the server buffer without bound.
fn partial(buf: &[u8], limits: &Limits) -> Result<(), Error> {
    let line_end = memchr::memchr(b'\n', buf);
    if line_end.is_none() && buf.len() > limits.max_uri_length + 64 {
        // Still in the request line, and it is already longer than any line whose target
        // fits the limit ("PATCH " + target + " HTTP/1.1\r\n" is well under 64 bytes more).
        return Err(Error::UriTooLong);
    }
    if buf.len() >= limits.max_head_size {
        return Err(Error::HeadTooLarge);
    }
    check_line_endings(buf)
}

/// RFC 9112 section 2.2 lets a recipient accept a bare LF; tessera does not, because
/// two parsers that disagree on line endings disagree on where a request ends.
///
/// Every LF follows a CR and every CR is followed by an LF (or ends `head`, whose next
/// byte has not arrived): for each pair of neighbouring bytes, the first is CR exactly
/// when the second is LF. One branch-free pass the compiler vectorises: it runs on every
/// request head, where a search per line ending (memchr, twice per line)
/// cost 3% of a proxied request's instructions (callgrind).
pub(crate) fn check_line_endings(head: &[u8]) -> Result<(), Error> {
    let bad = head.first() == Some(&b'\n')
        || head
            .iter()
            .zip(&head[1.min(head.len())..])
            .fold(false, |bad, (&a, &b)| bad | ((a == b'\r') != (b == b'\n')));
    match bad {
        true => Err(Error::BareLineEnding),
        false => Ok(()),
    }
}

/// httparse reports any bad version token the same way; a well-formed `HTTP/x.y` that is
/// not 1.0 or 1.1 deserves 505, anything else is a malformed request line. The version is
/// what follows the second space: a line with more spaces (`GET /a b HTTP/1.1`) is
/// malformed, whatever its last word looks like.
fn version_error(buf: &[u8]) -> Error {
    let line = match memchr::memchr2(b'\r', b'\n', buf) {
        Some(end) => &buf[..end],
        None => buf,
    };
    let mut parts = line.splitn(3, |&b| b == b' ');
    let (Some(_method), Some(_target), Some(version)) = (parts.next(), parts.next(), parts.next())
    else {
        return Error::BadRequestLine;
    };
    match version {
        [b'H', b'T', b'T', b'P', b'/', major, b'.', minor]
            if major.is_ascii_digit() && minor.is_ascii_digit() =>
        {
            Error::UnsupportedVersion
        }
        _ => Error::BadRequestLine,
    }
}

fn request_path(method: Method, target: &[u8]) -> Result<&[u8], Error> {
    // A fragment is never part of a request target (RFC 9110 section 7.1), but some
    // clients send one: like llhttp and nginx, drop it here, so it never reaches routing,
    // a cache key, an upstream or the log.
    let target = match memchr::memchr(b'#', target) {
        Some(hash) => &target[..hash],
        None => target,
    };
    if method == Method::Connect {
        // CONNECT takes the authority form, host and port, and nothing else (RFC 9112
        // section 3.2.3).
        let has_port = memchr::memrchr(b':', target).is_some_and(|i| i + 1 < target.len());
        return if has_port && !target.starts_with(b":") && is_valid_host(target) {
            Ok(target)
        } else {
            Err(Error::BadTarget)
        };
    }
    match target.first() {
        Some(b'/') => Ok(target),
        Some(b'*') if target.len() == 1 && method == Method::Options => Ok(target),
        _ => {
            // Absolute form (RFC 9112 section 3.2.2): scheme "://" authority path-abempty.
            let rest = strip_prefix_ignore_case(target, b"http://")
                .or_else(|| strip_prefix_ignore_case(target, b"https://"))
                .ok_or(Error::BadTarget)?;
            let path_start = rest
                .iter()
                .position(|&b| b == b'/' || b == b'?')
                .unwrap_or(rest.len());
            if path_start == 0 {
                return Err(Error::BadTarget);
            }
            if rest[..path_start].contains(&b'@') {
                // Userinfo: the http(s) schemes forbid it (RFC 9110 section 4.2.4), and
                // the authority of an absolute-form target chooses the site.
                return Err(Error::BadTarget);
            }
            let path = &rest[path_start..];
            if path.is_empty() {
                // "http://host": the path is "/" (RFC 9112 section 3.2.1).
                Ok(b"/")
            } else {
                // "/p?q", or "?q" for "http://host?q", which stands for "/?q": the query
                // must survive, or two different targets would share one cache key.
                Ok(path)
            }
        }
    }
}

fn strip_prefix_ignore_case<'a>(s: &'a [u8], prefix: &[u8]) -> Option<&'a [u8]> {
    if s.len() >= prefix.len() && s[..prefix.len()].eq_ignore_ascii_case(prefix) {
        Some(&s[prefix.len()..])
    } else {
        None
    }
}

/// `Host = uri-host [ ":" port ]` (RFC 9110 section 7.2), possibly empty. RFC 9112
/// section 3.2 requires a 400 for an invalid value: a Host with `@`, `/`, spaces or
/// quotes is how cache keys get poisoned and routing gets confused further along.
fn is_valid_host(value: &[u8]) -> bool {
    let value = trim_ows(value);
    let (host, port) = if let Some(rest) = value.strip_prefix(b"[") {
        // IP-literal: an IPv6 address or IPvFuture in brackets.
        let Some(close) = memchr::memchr(b']', rest) else {
            return false;
        };
        let literal = &rest[..close];
        if literal.is_empty()
            || !literal
                .iter()
                .all(|&b| b.is_ascii_alphanumeric() || b":.-_~!$&'()*+,;=".contains(&b))
        {
            return false;
        }
        (&b""[..], &rest[close + 1..])
    } else {
        match memchr::memchr(b':', value) {
            Some(colon) => (&value[..colon], &value[colon..]),
            None => (value, &b""[..]),
        }
    };
    let reg_name_ok = host
        .iter()
        .all(|&b| b.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=%".contains(&b));
    let port_ok = match port {
        [] => true,
        [b':', digits @ ..] => digits.len() <= 5 && digits.iter().all(u8::is_ascii_digit),
        _ => false,
    };
    reg_name_ok && port_ok
}

/// `Content-Length = 1*DIGIT` and nothing else: no sign, no spaces inside, no list.
pub(crate) fn parse_content_length(value: &[u8]) -> Result<u64, Error> {
    let value = trim_ows(value);
    if value.is_empty() || value.len() > 19 {
        // 19 digits always fit a u64; a longer value is either padding or overflow.
        return Err(Error::BadContentLength);
    }
    let mut n: u64 = 0;
    for &b in value {
        if !b.is_ascii_digit() {
            return Err(Error::BadContentLength);
        }
        n = n * 10 + u64::from(b - b'0');
    }
    Ok(n)
}

/// Only `chunked` alone is accepted. A list of valid codings gets 501 (we do not decode
/// gzip or compress request bodies); anything that is not a token list gets 400.
pub(crate) fn parse_transfer_encoding(value: &[u8]) -> Result<(), Error> {
    let value = trim_ows(value);
    if value.eq_ignore_ascii_case(b"chunked") {
        return Ok(());
    }
    let is_token_list = value.split(|&b| b == b',').all(|coding| {
        let coding = trim_ows(coding);
        !coding.is_empty() && coding.iter().all(|&b| is_tchar(b))
    });
    if is_token_list {
        Err(Error::UnsupportedTransferEncoding)
    } else {
        Err(Error::BadTransferEncoding)
    }
}

/// A token character (RFC 9110 section 5.6.2 `tchar`): methods, field names,
/// transfer codings, chunk extensions.
pub fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// Whether a Connection field value lists `close` and whether it lists `keep-alive`.
pub(crate) fn connection_options(value: &[u8]) -> (bool, bool) {
    let (mut close, mut keep_alive) = (false, false);
    for token in value.split(|&b| b == b',') {
        let token = trim_ows(token);
        close |= token.eq_ignore_ascii_case(b"close");
        keep_alive |= token.eq_ignore_ascii_case(b"keep-alive");
    }
    (close, keep_alive)
}

/// `s` without optional whitespace (spaces and tabs) at either end: how field values
/// and list elements are read (RFC 9110 section 5.6.3).
pub fn trim_ows(mut s: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = s {
        s = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = s {
        s = rest;
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The definition the check must keep: every LF follows a CR, every CR is followed
    /// by an LF or ends the bytes.
    fn line_endings_as_defined(head: &[u8]) -> bool {
        head.iter().enumerate().all(|(i, &b)| match b {
            b'\n' => i > 0 && head[i - 1] == b'\r',
            b'\r' => i + 1 == head.len() || head[i + 1] == b'\n',
            _ => true,
        })
    }

    proptest::proptest! {
        #[test]
        fn line_endings_are_checked_as_defined(
            head in proptest::collection::vec(proptest::sample::select(vec![b'\r', b'\n', b'a', b':', b' ']), 0..64)
        ) {
            proptest::prop_assert_eq!(check_line_endings(&head).is_ok(), line_endings_as_defined(&head));
        }
    }

    proptest::proptest! {
        /// The response parser reads a bare LF as a line ending (issue 52); the request
        /// parser does not: any one CRLF of a request head turned into a bare LF, the head's
        /// last one included, is refused.
        #[test]
        fn a_request_with_any_bare_lf_is_refused(
            head in proptest::sample::select(vec![
                "GET / HTTP/1.1\r\nHost: x\r\n\r\n",
                "GET /a?b HTTP/1.0\r\n\r\n",
                "POST /p HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nX-A: b\r\n\r\n",
                "GET / HTTP/1.1\r\nHost: x\r\nConnection: keep-alive\r\n\r\n",
            ]),
            which in 0usize..8,
        ) {
            let crlfs: Vec<usize> = head.match_indices("\r\n").map(|(at, _)| at).collect();
            let at = crlfs[which % crlfs.len()];
            let mut bare = head.as_bytes().to_vec();
            bare.remove(at);
            proptest::prop_assert!(parse(head.as_bytes()).unwrap().is_some());
            proptest::prop_assert_eq!(parse(&bare), Err(Error::BareLineEnding));
        }
    }

    /// Method, path, head length, body framing, keep-alive.
    type Parsed = (Method, Vec<u8>, usize, BodyFraming, bool);

    fn parse(buf: &[u8]) -> Result<Option<Parsed>, Error> {
        let mut storage = HeaderStorage::new();
        parse_request(buf, &mut storage, &Limits::default())
            .map(|r| r.map(|r| (r.method, r.path.to_vec(), r.head_len, r.body, r.keep_alive)))
    }

    #[test]
    fn parses_simple_get() {
        let buf = b"GET /a?b HTTP/1.1\r\nHost: x\r\n\r\nGET";
        let (m, path, len, body, ka) = parse(buf).unwrap().unwrap();
        assert_eq!(m, Method::Get);
        assert_eq!(path, b"/a?b");
        assert_eq!(len, buf.len() - 3);
        assert_eq!(body, BodyFraming::None);
        assert!(ka);
    }

    #[test]
    fn partial_head_needs_more() {
        assert_eq!(parse(b"GET / HTTP/1.1\r\nHost: x\r\n").unwrap(), None);
    }

    #[test]
    fn http10_closes_unless_keep_alive() {
        assert!(!parse(b"GET / HTTP/1.0\r\n\r\n").unwrap().unwrap().4);
        assert!(
            parse(b"GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n")
                .unwrap()
                .unwrap()
                .4
        );
        assert!(
            !parse(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: foo, close\r\n\r\n")
                .unwrap()
                .unwrap()
                .4
        );
    }

    #[test]
    fn absolute_form_yields_path() {
        let (_, path, ..) = parse(b"GET http://example.com/x?y HTTP/1.1\r\nHost: e\r\n\r\n")
            .unwrap()
            .unwrap();
        assert_eq!(path, b"/x?y");
        let (_, path, ..) = parse(b"GET HTTP://example.com HTTP/1.1\r\nHost: e\r\n\r\n")
            .unwrap()
            .unwrap();
        assert_eq!(path, b"/");
        // Regression (found by the differential fuzzer): the query of "http://host?q"
        // was dropped.
        let (_, path, ..) = parse(b"GET http://example.com?q=1 HTTP/1.1\r\nHost: e\r\n\r\n")
            .unwrap()
            .unwrap();
        assert_eq!(path, b"?q=1");
    }

    /// A fragment in the target is dropped (as llhttp and nginx do), never kept: the
    /// resource is the one without it, for routing, the cache key and the upstream.
    #[test]
    fn drops_the_fragment_of_a_target() {
        for (target, path) in [
            ("/a#b", "/a"),
            ("/a?q#b", "/a?q"),
            ("/a#b?q", "/a"),
            ("http://h/#b", "/"),
            ("http://h#b", "/"),
        ] {
            let buf = format!("GET {target} HTTP/1.1\r\nHost: x\r\n\r\n");
            assert_eq!(
                parse(buf.as_bytes()).unwrap().unwrap().1,
                path.as_bytes(),
                "{target}"
            );
        }
    }

    /// The http(s) schemes forbid userinfo (RFC 9110 section 4.2.4), and the authority of
    /// an absolute-form target picks the site.
    #[test]
    fn rejects_userinfo_in_an_absolute_form_target() {
        for bad in ["http://user:pass@h/", "http://u@h/x", "https://@h/"] {
            let buf = format!("GET {bad} HTTP/1.1\r\nHost: x\r\n\r\n");
            assert_eq!(parse(buf.as_bytes()), Err(Error::BadTarget), "{bad}");
        }
        // An @ in the path or query is not userinfo.
        let buf = b"GET http://h/a@b?c@d HTTP/1.1\r\nHost: x\r\n\r\n";
        assert_eq!(parse(buf).unwrap().unwrap().1, b"/a@b?c@d");
    }

    /// Regression found by the differential check against hyper: CONNECT with something
    /// other than host:port.
    #[test]
    fn rejects_connect_without_authority_form() {
        for bad in ["http://h/p", "/p", "h", "h:", ":443", "a@h:443", "*"] {
            let buf = format!("CONNECT {bad} HTTP/1.1\r\nHost: x\r\n\r\n");
            assert_eq!(parse(buf.as_bytes()), Err(Error::BadTarget), "{bad}");
        }
        for good in ["h:443", "127.0.0.1:8080", "[::1]:443"] {
            let buf = format!("CONNECT {good} HTTP/1.1\r\nHost: x\r\n\r\n");
            assert_eq!(parse(buf.as_bytes()).unwrap().unwrap().1, good.as_bytes());
        }
    }

    #[test]
    fn rejects_cl_te_smuggling() {
        let buf = b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n";
        assert_eq!(parse(buf), Err(Error::ContentLengthWithTransferEncoding));
    }

    #[test]
    fn rejects_duplicate_content_length_even_if_equal() {
        let buf = b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\n";
        assert_eq!(parse(buf), Err(Error::DuplicateContentLength));
    }

    #[test]
    fn rejects_signed_hex_and_overflowing_content_length() {
        for cl in ["+3", "-3", "0x3", "3 3", "3,3", "", "99999999999999999999"] {
            let buf = format!("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: {cl}\r\n\r\n");
            assert_eq!(
                parse(buf.as_bytes()),
                Err(Error::BadContentLength),
                "{cl:?}"
            );
        }
    }

    #[test]
    fn transfer_encoding_must_be_exactly_chunked() {
        let ok = b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: Chunked\r\n\r\n";
        assert_eq!(parse(ok).unwrap().unwrap().3, BodyFraming::Chunked);
        let gzip = b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n";
        assert_eq!(parse(gzip), Err(Error::UnsupportedTransferEncoding));
        let junk = b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked;\r\n\r\n";
        assert_eq!(parse(junk), Err(Error::BadTransferEncoding));
        let twice = b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n";
        assert_eq!(parse(twice), Err(Error::BadTransferEncoding));
        let old = b"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n";
        assert_eq!(parse(old), Err(Error::TransferEncodingOnHttp10));
    }

    #[test]
    fn rejects_bare_lf_and_bare_cr() {
        assert_eq!(
            parse(b"GET / HTTP/1.1\nHost: x\r\n\r\n"),
            Err(Error::BareLineEnding)
        );
        assert_eq!(
            parse(b"GET / HTTP/1.1\r\nHost: x\n\n"),
            Err(Error::BareLineEnding)
        );
        assert!(parse(b"GET / HTTP/1.1\r\nHost: x\ry\r\n\r\n").is_err());
    }

    #[test]
    fn rejects_obs_fold_and_space_before_colon() {
        assert_eq!(
            parse(b"GET / HTTP/1.1\r\nHost: x\r\nX: a\r\n b\r\n\r\n"),
            Err(Error::BadHeader)
        );
        assert_eq!(
            parse(b"GET / HTTP/1.1\r\nHost : x\r\n\r\n"),
            Err(Error::BadHeader)
        );
    }

    #[test]
    fn host_rules() {
        assert_eq!(parse(b"GET / HTTP/1.1\r\n\r\n"), Err(Error::BadHost));
        assert_eq!(
            parse(b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n"),
            Err(Error::BadHost)
        );
        assert!(parse(b"GET / HTTP/1.0\r\n\r\n").unwrap().is_some());
    }

    #[test]
    fn rejects_invalid_host_values() {
        for good in [
            "",
            "example.com",
            "example.com:8080",
            "127.0.0.1:80",
            "[::1]:443",
            "xn--bcher-kva.de",
        ] {
            let buf = format!("GET / HTTP/1.1\r\nHost: {good}\r\n\r\n");
            assert!(parse(buf.as_bytes()).unwrap().is_some(), "{good:?}");
        }
        for bad in [
            "a b",
            "user@evil",
            "a/b",
            "a?b",
            "a#b",
            "\"a\"",
            "a:b",
            "a:80:80",
            "[::1",
            "[]",
            "a\\b",
            "a:123456",
        ] {
            let buf = format!("GET / HTTP/1.1\r\nHost: {bad}\r\n\r\n");
            assert_eq!(parse(buf.as_bytes()), Err(Error::BadHost), "{bad:?}");
        }
        assert_eq!(
            parse(b"GET / HTTP/1.1\r\nHost: \xc3\xa9\r\n\r\n"),
            Err(Error::BadHost)
        );
    }

    #[test]
    fn versions() {
        assert_eq!(
            parse(b"GET / HTTP/2.0\r\nHost: x\r\n\r\n"),
            Err(Error::UnsupportedVersion)
        );
        assert_eq!(
            parse(b"GET / HTTP/1.10\r\nHost: x\r\n\r\n"),
            Err(Error::BadRequestLine)
        );
        assert!(parse(b"GET /\r\n\r\n").is_err());
        // Regression: the last word used to be taken for the version, so a request line
        // with an extra space was answered 505 instead of 400.
        assert_eq!(
            parse(b"GET /a b HTTP/1.1\r\nHost: x\r\n\r\n"),
            Err(Error::BadRequestLine)
        );
        assert_eq!(
            parse(b"GET / HTTP/1.1 HTTP/1.1\r\nHost: x\r\n\r\n"),
            Err(Error::BadRequestLine)
        );
    }

    #[test]
    fn limits() {
        let long = format!("GET /{} HTTP/1.1\r\nHost: x\r\n\r\n", "a".repeat(9000));
        assert_eq!(parse(long.as_bytes()), Err(Error::UriTooLong));
        let unfinished = format!("GET /{}", "a".repeat(9000));
        assert_eq!(parse(unfinished.as_bytes()), Err(Error::UriTooLong));
        let big = format!("GET / HTTP/1.1\r\nHost: x\r\nX: {}\r\n", "a".repeat(17000));
        assert_eq!(parse(big.as_bytes()), Err(Error::HeadTooLarge));
        let mut many = String::from("GET / HTTP/1.1\r\nHost: x\r\n");
        for i in 0..100 {
            many.push_str(&format!("X-{i}: y\r\n"));
        }
        many.push_str("\r\n");
        assert_eq!(parse(many.as_bytes()), Err(Error::TooManyHeaders));
    }

    #[test]
    fn body_limit_and_expect() {
        let big = b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 2000000\r\n\r\n";
        assert_eq!(parse(big), Err(Error::BodyTooLarge));
        let mut storage = HeaderStorage::new();
        let buf =
            b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nExpect: 100-Continue\r\n\r\n";
        let req = parse_request(buf, &mut storage, &Limits::default())
            .unwrap()
            .unwrap();
        assert!(req.expect_continue);
        let bad = b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nExpect: fly\r\n\r\n";
        assert_eq!(parse(bad), Err(Error::BadExpectation));
    }
}
