//! Parsing of response heads received from an upstream (the proxy's client side), as
//! strict as request parsing: a proxy that frames an upstream's body differently from the
//! next hop is a response-splitting hazard, so anything ambiguous is refused and the
//! proxy answers 502 instead of guessing.
//!
//! One leniency the request parser does not have: a bare LF ends a line (the status line,
//! a field line, the head), as RFC 9112 section 2.2 lets a recipient accept and as nginx,
//! Varnish, HAProxy and hyper accept from origins. Old application servers, CGI scripts and
//! embedded devices still send such heads. It is safe here and not in requests because the
//! upstream client is the only reader of these bytes: no second parser downstream reads
//! the same head and could end it elsewhere (the proxy writes its own head to the client).
//! A bare CR stays refused: it ends nothing, and parsers disagree on what it is.

use crate::request::{connection_options, parse_content_length, parse_transfer_encoding};
use crate::{Header, HeaderStorage, Version, MAX_HEADERS_CAP};

/// How a response's body is delimited (RFC 9112 section 6.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResponseFraming {
    /// No body: a response to HEAD, a 1xx, 204 or 304, or `Content-Length: 0`.
    None,
    /// Exactly this many bytes follow the head.
    Length(u64),
    /// A chunked body follows; decode it with [`crate::ChunkedDecoder`].
    Chunked,
    /// The body runs until the upstream closes the connection.
    Close,
}

/// A parsed response head. It borrows the read buffer and the header storage.
#[derive(Debug)]
pub struct ParsedResponse<'h, 'b> {
    pub status: u16,
    pub version: Version,
    pub headers: &'h [Header<'b>],
    /// Length of the head, its final empty line included: the body (if any) starts here.
    pub head_len: usize,
    pub body: ResponseFraming,
    /// Whether the connection may carry another request after this response's body: not
    /// after a response whose framing the origin got wrong (see [`parse_response`]).
    pub keep_alive: bool,
}

impl ParsedResponse<'_, '_> {
    /// An interim response (1xx other than 101): the final response follows it on the
    /// same connection and the caller skips it.
    pub fn is_interim(&self) -> bool {
        (100..200).contains(&self.status) && self.status != 101
    }
}

/// Why a response head was refused. The proxy answers 502 and closes the upstream
/// connection: after a framing error it cannot know where the next response starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ResponseError {
    #[error("malformed status line")]
    BadStatusLine,
    #[error("unsupported HTTP version in the status line")]
    UnsupportedVersion,
    #[error("malformed header field")]
    BadHeader,
    #[error("bare CR (a CR not followed by LF) in the head")]
    BareCarriageReturn,
    #[error("response head larger than the limit")]
    HeadTooLarge,
    #[error("more header fields than the limit")]
    TooManyHeaders,
    #[error("invalid or repeated Content-Length")]
    BadContentLength,
    #[error("both Content-Length and Transfer-Encoding")]
    ContentLengthWithTransferEncoding,
    #[error("transfer coding other than chunked")]
    BadTransferEncoding,
    #[error("101 Switching Protocols to a request that asked for no upgrade")]
    UnexpectedUpgrade,
}

/// Parses one response head from the start of `buf`, for a request whose method was HEAD
/// when `head_request` (its response has no body, whatever its fields say).
///
/// Returns `Ok(None)` when `buf` holds only part of a head (read more and call again).
/// `max_head_size` and `max_headers` bound the head as the request limits do.
///
/// Lines end with CRLF or a bare LF. The connection is not to be reused (`keep_alive`
/// false) after a 204 or 304 whose fields announce a body (`Transfer-Encoding`, or a
/// `Content-Length` other than 0): such a response has no body whatever its fields say,
/// and if the origin sends one anyway, its bytes may arrive after the response was handed
/// on and would then be read as the next request's response. Nor after a chunked HTTP/1.0
/// response (RFC 9112 section 6.1: its framing is to be treated as faulty).
pub fn parse_response<'h, 'b>(
    buf: &'b [u8],
    storage: &'h mut HeaderStorage<'b>,
    head_request: bool,
    max_head_size: usize,
    max_headers: usize,
) -> Result<Option<ParsedResponse<'h, 'b>>, ResponseError> {
    parse_response_to(
        buf,
        storage,
        head_request,
        max_head_size,
        max_headers,
        false,
    )
}

/// [`parse_response`] of the answer to a request that asked for an upgrade
/// (`Connection: upgrade`): a `101 Switching Protocols` is then its final response, with
/// no body and no further HTTP on the connection.
pub fn parse_upgrade_response<'h, 'b>(
    buf: &'b [u8],
    storage: &'h mut HeaderStorage<'b>,
    max_head_size: usize,
    max_headers: usize,
) -> Result<Option<ParsedResponse<'h, 'b>>, ResponseError> {
    parse_response_to(buf, storage, false, max_head_size, max_headers, true)
}

fn parse_response_to<'h, 'b>(
    buf: &'b [u8],
    storage: &'h mut HeaderStorage<'b>,
    head_request: bool,
    max_head_size: usize,
    max_headers: usize,
    upgrade: bool,
) -> Result<Option<ParsedResponse<'h, 'b>>, ResponseError> {
    let mut resp = httparse::Response::new(&mut []);
    let parsed = httparse::ParserConfig::default().parse_response_with_uninit_headers(
        &mut resp,
        buf,
        &mut storage.0[..max_headers.min(MAX_HEADERS_CAP)],
    );
    let head_len = match parsed {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) => {
            if buf.len() >= max_head_size {
                return Err(ResponseError::HeadTooLarge);
            }
            check_no_bare_cr(buf)?;
            return Ok(None);
        }
        Err(e) => {
            check_no_bare_cr(buf)?;
            return Err(match e {
                httparse::Error::TooManyHeaders => ResponseError::TooManyHeaders,
                httparse::Error::Version => ResponseError::UnsupportedVersion,
                httparse::Error::HeaderName | httparse::Error::HeaderValue => {
                    ResponseError::BadHeader
                }
                _ => ResponseError::BadStatusLine,
            });
        }
    };
    if head_len > max_head_size {
        return Err(ResponseError::HeadTooLarge);
    }
    check_no_bare_cr(&buf[..head_len])?;
    let (Some(minor), Some(status)) = (resp.version, resp.code) else {
        return Err(ResponseError::BadStatusLine);
    };
    if !(100..=999).contains(&status) {
        return Err(ResponseError::BadStatusLine);
    }
    if status == 101 && !upgrade {
        return Err(ResponseError::UnexpectedUpgrade);
    }
    let version = if minor == 0 {
        Version::Http10
    } else {
        Version::Http11
    };
    let headers: &'h [Header<'b>] = resp.headers;
    let mut content_length: Option<u64> = None;
    let mut chunked = false;
    let mut close = false;
    let mut keep_alive_token = false;
    for h in headers {
        let name = h.name.as_bytes();
        if name.eq_ignore_ascii_case(b"content-length") {
            let n = parse_content_length(h.value).map_err(|_| ResponseError::BadContentLength)?;
            // Repeats of the same value are allowed (RFC 9110 section 8.6); others are
            // the classic splitting ambiguity.
            if content_length.is_some_and(|m| m != n) {
                return Err(ResponseError::BadContentLength);
            }
            content_length = Some(n);
        } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
            if chunked {
                return Err(ResponseError::BadTransferEncoding);
            }
            parse_transfer_encoding(h.value).map_err(|_| ResponseError::BadTransferEncoding)?;
            chunked = true;
        } else if name.eq_ignore_ascii_case(b"connection") {
            let (c, k) = connection_options(h.value);
            close |= c;
            keep_alive_token |= k;
        }
    }
    let bodiless_status = crate::bodiless(status);
    // A 204 or 304 that announces a body may be followed by one (see `parse_response`).
    let announces_body = chunked || content_length.is_some_and(|n| n > 0);
    let body = if head_request || bodiless_status {
        ResponseFraming::None
    } else {
        match (content_length, chunked) {
            (Some(_), true) => return Err(ResponseError::ContentLengthWithTransferEncoding),
            (None, true) => ResponseFraming::Chunked,
            (Some(0), false) => ResponseFraming::None,
            (Some(n), false) => ResponseFraming::Length(n),
            (None, false) => ResponseFraming::Close,
        }
    };
    let keep_alive = !close
        && (version == Version::Http11 || keep_alive_token)
        && body != ResponseFraming::Close
        && !(bodiless_status && !head_request && announces_body)
        && !(version == Version::Http10 && chunked);
    Ok(Some(ParsedResponse {
        status,
        version,
        headers,
        head_len,
        body,
        keep_alive,
    }))
}

/// Every CR is followed by an LF (or ends `head`, whose next byte has not arrived); a bare
/// LF is a line ending (see the module's doc). httparse refuses a bare CR itself; this
/// check keeps the refusal in one place whatever it does, and names it. Branch-free, as
/// the request parser's line-ending check, so the compiler vectorises it.
fn check_no_bare_cr(head: &[u8]) -> Result<(), ResponseError> {
    let bad = head
        .iter()
        .zip(&head[1.min(head.len())..])
        .fold(false, |bad, (&a, &b)| bad | ((a == b'\r') & (b != b'\n')));
    match bad {
        true => Err(ResponseError::BareCarriageReturn),
        false => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(buf: &[u8]) -> Result<Option<(u16, ResponseFraming, bool, usize)>, ResponseError> {
        let mut storage = HeaderStorage::new();
        parse_response(buf, &mut storage, false, 16384, 100)
            .map(|r| r.map(|r| (r.status, r.body, r.keep_alive, r.head_len)))
    }

    #[test]
    fn frames_bodies_as_rfc_9112_says() {
        assert_eq!(
            parse(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello").unwrap(),
            Some((200, ResponseFraming::Length(5), true, 38))
        );
        assert_eq!(
            parse(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n").unwrap(),
            Some((200, ResponseFraming::Chunked, true, 47))
        );
        // No length: the body runs to the close, and the connection cannot be reused.
        assert_eq!(
            parse(b"HTTP/1.1 200 OK\r\n\r\n").unwrap(),
            Some((200, ResponseFraming::Close, false, 19))
        );
        // No body whatever its fields say; announcing one costs the connection (see
        // `a_bodiless_status_announcing_a_body_closes_the_connection`).
        assert_eq!(
            parse(b"HTTP/1.1 304 Not Modified\r\nContent-Length: 5\r\n\r\n").unwrap(),
            Some((304, ResponseFraming::None, false, 48))
        );
        assert_eq!(
            parse(b"HTTP/1.0 200 OK\r\nContent-Length: 1\r\n\r\n").unwrap(),
            Some((200, ResponseFraming::Length(1), false, 38))
        );
        assert_eq!(
            parse(b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 1\r\n\r\n")
                .unwrap()
                .map(|r| r.2),
            Some(true)
        );
        assert_eq!(
            parse(b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 1\r\n\r\n")
                .unwrap()
                .map(|r| r.2),
            Some(false)
        );
        let mut storage = HeaderStorage::new();
        let head = parse_response(
            b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n",
            &mut storage,
            true,
            16384,
            100,
        )
        .unwrap()
        .unwrap();
        assert_eq!(head.body, ResponseFraming::None);
    }

    #[test]
    fn waits_for_the_whole_head() {
        assert_eq!(parse(b"HTTP/1.1 200 OK\r\nContent-Len").unwrap(), None);
        assert_eq!(parse(b"").unwrap(), None);
    }

    #[test]
    fn refuses_ambiguous_framing() {
        assert_eq!(
            parse(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n"),
            Err(ResponseError::ContentLengthWithTransferEncoding)
        );
        assert_eq!(
            parse(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n"),
            Err(ResponseError::BadContentLength)
        );
        assert_eq!(
            parse(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n")
                .unwrap()
                .map(|r| r.1),
            Some(ResponseFraming::Length(5))
        );
        assert_eq!(
            parse(b"HTTP/1.1 200 OK\r\nContent-Length: +5\r\n\r\n"),
            Err(ResponseError::BadContentLength)
        );
        assert_eq!(
            parse(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n"),
            Err(ResponseError::BadTransferEncoding)
        );
        assert_eq!(
            parse(b"HTTP/2.0 200 OK\r\n\r\n"),
            Err(ResponseError::UnsupportedVersion)
        );
        assert_eq!(
            parse(b"HTTP/1.1 2000 OK\r\n\r\n"),
            Err(ResponseError::BadStatusLine)
        );
        assert_eq!(
            parse(b"HTTP/1.1 101 Switching Protocols\r\n\r\n"),
            Err(ResponseError::UnexpectedUpgrade)
        );
        assert_eq!(
            parse(b"HTTP/1.1 200 OK\r\nBad Name: x\r\n\r\n"),
            Err(ResponseError::BadHeader)
        );
    }

    /// Varnish's e00007 and e00014 origins (issue 52): a whole bare-LF head, the body to
    /// the close.
    #[test]
    fn accepts_bare_lf_line_endings() {
        let head = b"HTTP/1.0 200 OK\nConnection: close\n\n";
        let mut buf = head.to_vec();
        buf.extend_from_slice(b"<body until the close>");
        assert_eq!(
            parse(&buf).unwrap(),
            Some((200, ResponseFraming::Close, false, head.len()))
        );
        // Each line may end either way, the head's last empty line too.
        for head in [
            &b"HTTP/1.1 200 OK\nContent-Length: 5\r\n\r\n"[..],
            b"HTTP/1.1 200 OK\r\nContent-Length: 5\n\r\n",
            b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\n",
            b"HTTP/1.1 200 OK\nContent-Length: 5\n\n",
        ] {
            let mut buf = head.to_vec();
            buf.extend_from_slice(b"hello");
            assert_eq!(
                parse(&buf).unwrap(),
                Some((200, ResponseFraming::Length(5), true, head.len())),
                "{:?}",
                String::from_utf8_lossy(head)
            );
        }
        // The fields are read the same: no LF or CR left in a name or value.
        let mut storage = HeaderStorage::new();
        let r = parse_response(
            b"HTTP/1.1 200 OK\nA: b\nC:d \n\n",
            &mut storage,
            false,
            16384,
            100,
        )
        .unwrap()
        .unwrap();
        let fields: Vec<_> = r.headers.iter().map(|h| (h.name, h.value)).collect();
        assert_eq!(fields, [("A", &b"b"[..]), ("C", b"d")]);
        assert_eq!(
            parse(b"HTTP/1.1 200 OK\nContent-Length: 5\n").unwrap(),
            None,
            "waits for the empty line"
        );
        assert_eq!(parse(b"HTTP/1.1 200 OK\r").unwrap(), None);
    }

    #[test]
    fn refuses_a_bare_cr_and_obs_fold_with_bare_lf_too() {
        for head in [
            &b"HTTP/1.1 200 OK\rContent-Length: 5\r\n\r\n"[..],
            b"HTTP/1.1 200 O\rK\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nA: b\rc\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nA: b\r\r\n\r\n",
            b"HTTP/1.1 200 OK\nA: b\n\r\r\n",
            b"HTTP/1.1 200 OK\r\nA: b\r",
        ] {
            let refused = parse(head);
            if head.ends_with(b"\r") {
                assert_eq!(refused, Ok(None), "a CR at the end may be followed by LF");
            } else {
                assert_eq!(
                    refused,
                    Err(ResponseError::BareCarriageReturn),
                    "{:?}",
                    String::from_utf8_lossy(head)
                );
            }
        }
        for fold in [
            &b"HTTP/1.1 200 OK\nA: b\n c\n\n"[..],
            b"HTTP/1.1 200 OK\r\nA: b\r\n\tc\r\n\r\n",
            b"HTTP/1.1 200 OK\n c: d\n\n",
        ] {
            assert_eq!(parse(fold), Err(ResponseError::BadHeader));
        }
    }

    /// What real origins send, as nginx and Varnish read it (docs/security.md, "What the
    /// upstream client accepts from origins").
    #[test]
    fn reads_status_lines_as_nginx_and_varnish_do() {
        for line in [
            &b"HTTP/1.1 200 OK\r\n"[..],
            b"HTTP/1.1 200 \r\n",
            b"HTTP/1.1 200\r\n",
            b"HTTP/1.1 200\n",
            b"HTTP/1.1 200 \n",
            b"HTTP/1.1 200 Very Fine Indeed\t!\n",
        ] {
            let mut buf = line.to_vec();
            buf.extend_from_slice(b"Content-Length: 0\r\n\r\n");
            assert_eq!(
                parse(&buf).unwrap().map(|r| (r.0, r.1)),
                Some((200, ResponseFraming::None)),
                "{:?}",
                String::from_utf8_lossy(line)
            );
        }
        for bad in [
            &b"HTTP/1.1 20 OK\r\n\r\n"[..],
            b"HTTP/1.1 2000\r\n\r\n",
            b"HTTP/1.1  200 OK\r\n\r\n",
            b"HTTP/1.1 200OK\r\n\r\n",
            b"HTTP/1.1\r\n\r\n",
            b"ICY 200 OK\r\n\r\n",
        ] {
            assert!(
                parse(bad).is_err(),
                "{:?} was accepted",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn refuses_whitespace_between_a_field_name_and_its_colon() {
        for head in [
            &b"HTTP/1.1 200 OK\r\nContent-Length : 5\r\n\r\nhello"[..],
            b"HTTP/1.1 200 OK\nContent-Length\t: 5\n\nhello",
            b"HTTP/1.1 200 OK\nX-A : b\n\n",
        ] {
            assert_eq!(parse(head), Err(ResponseError::BadHeader));
        }
    }

    #[test]
    fn reads_content_length_with_leading_zeros_and_identical_repeats() {
        assert_eq!(
            parse(b"HTTP/1.1 200 OK\r\nContent-Length: 0005\r\n\r\nhello")
                .unwrap()
                .map(|r| r.1),
            Some(ResponseFraming::Length(5))
        );
        assert_eq!(
            parse(b"HTTP/1.1 200 OK\nContent-Length: 5\nContent-Length: 005\n\nhello")
                .unwrap()
                .map(|r| r.1),
            Some(ResponseFraming::Length(5)),
            "the same length, spelled differently"
        );
        for bad in [
            &b"HTTP/1.1 200 OK\r\nContent-Length: 5, 5\r\n\r\n"[..],
            b"HTTP/1.1 200 OK\r\nContent-Length: 00000000000000000005\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nContent-Length: 0x5\r\n\r\n",
        ] {
            assert_eq!(parse(bad), Err(ResponseError::BadContentLength));
        }
    }

    /// A 204 or 304 has no body; one that announces one may send it after all, so its
    /// connection is not reused. A 304 without framing fields (or with `Content-Length:
    /// 0`) keeps it, and so does a response to HEAD, whose Content-Length is the norm.
    #[test]
    fn a_bodiless_status_announcing_a_body_closes_the_connection() {
        for head in [
            &b"HTTP/1.1 204 No Content\r\nContent-Length: 5\r\n\r\nhello"[..],
            b"HTTP/1.1 304 Not Modified\nContent-Length: 5\n\nhello",
            b"HTTP/1.1 204 No Content\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        ] {
            let (status, body, keep_alive, _) = parse(head).unwrap().unwrap();
            assert!(status == 204 || status == 304);
            assert_eq!((body, keep_alive), (ResponseFraming::None, false));
        }
        for head in [
            &b"HTTP/1.1 304 Not Modified\r\n\r\n"[..],
            b"HTTP/1.1 304 Not Modified\r\nContent-Length: 0\r\n\r\n",
            b"HTTP/1.1 204 No Content\n\n",
        ] {
            assert_eq!(
                parse(head).unwrap().map(|r| (r.1, r.2)),
                Some((ResponseFraming::None, true))
            );
        }
        let mut storage = HeaderStorage::new();
        let r = parse_response(
            b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n",
            &mut storage,
            true,
            16384,
            100,
        )
        .unwrap()
        .unwrap();
        assert_eq!((r.body, r.keep_alive), (ResponseFraming::None, true));
    }

    #[test]
    fn a_chunked_http10_response_is_read_and_its_connection_closed() {
        assert_eq!(
            parse(
                b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nTransfer-Encoding: chunked\r\n\r\n"
            )
            .unwrap()
            .map(|r| (r.1, r.2)),
            Some((ResponseFraming::Chunked, false))
        );
        assert_eq!(
            parse(b"HTTP/1.0 200 OK\nConnection: keep-alive\nContent-Length: 2\n\nok")
                .unwrap()
                .map(|r| (r.1, r.2)),
            Some((ResponseFraming::Length(2), true))
        );
        assert_eq!(
            parse(b"HTTP/1.0 200 OK\nConnection: keep-alive\n\nto the close")
                .unwrap()
                .map(|r| (r.1, r.2)),
            Some((ResponseFraming::Close, false))
        );
    }

    /// A head, as lines, with each line ending chosen by `lf`: CRLF, or a bare LF.
    fn head_of(lines: &[String], lf: &[bool]) -> Vec<u8> {
        let mut out = Vec::new();
        for (i, line) in lines.iter().enumerate() {
            out.extend_from_slice(line.as_bytes());
            out.extend_from_slice(if lf[i % lf.len()] { b"\n" } else { b"\r\n" });
        }
        out
    }

    fn status_line() -> impl proptest::strategy::Strategy<Value = String> {
        proptest::sample::select(vec![
            "HTTP/1.1 200 OK",
            "HTTP/1.0 200 OK",
            "HTTP/1.1 204 No Content",
            "HTTP/1.1 304",
            "HTTP/1.1 404 ",
            "HTTP/1.1 103 Early Hints",
            "HTTP/1.1 2000 OK",
            "HTTP/1.1 200 O\rK",
        ])
        .prop_map(String::from)
    }

    fn field_line() -> impl proptest::strategy::Strategy<Value = String> {
        proptest::sample::select(vec![
            "Content-Length: 5",
            "Content-Length: 005",
            "Content-Length: 6",
            "Content-Length : 5",
            "Transfer-Encoding: chunked",
            "Transfer-Encoding: gzip",
            "Connection: close",
            "Connection: keep-alive",
            "X-A: b",
            "X-A:",
            " folded",
            "X-B: c\rd",
        ])
        .prop_map(String::from)
    }

    use proptest::strategy::Strategy as _;

    proptest::proptest! {
        /// A bare LF is read exactly as a CRLF: any mix of the two line endings in a head
        /// gives the same answer (status, fields, framing, reuse, or the same refusal) as
        /// CRLF throughout, and the head ends where its empty line ends.
        #[test]
        fn a_bare_lf_reads_as_a_crlf(
            status in status_line(),
            fields in proptest::collection::vec(field_line(), 0..5),
            lf in proptest::collection::vec(proptest::bool::ANY, 1..8),
            head_request in proptest::bool::ANY,
        ) {
            let mut lines = vec![status];
            lines.extend(fields);
            lines.push(String::new());
            let crlf = head_of(&lines, &[false]);
            let mixed = head_of(&lines, &lf);
            let read = |buf: &[u8]| {
                let mut storage = HeaderStorage::new();
                parse_response(buf, &mut storage, head_request, 16384, 100).map(|r| {
                    r.map(|r| {
                        let fields: Vec<(String, Vec<u8>)> = r
                            .headers
                            .iter()
                            .map(|h| (h.name.to_string(), h.value.to_vec()))
                            .collect();
                        ((r.status, r.version, fields, r.body, r.keep_alive), r.head_len)
                    })
                })
            };
            let expected = read(&crlf).map(|r| r.map(|(read, len)| {
                assert_eq!(len, crlf.len());
                read
            }));
            let got = read(&mixed).map(|r| r.map(|(read, len)| (read, len == mixed.len())));
            proptest::prop_assert_eq!(
                got,
                expected.map(|r| r.map(|read| (read, true)))
            );
        }
    }

    #[test]
    fn bounds_the_head() {
        let mut long = b"HTTP/1.1 200 OK\r\nX: ".to_vec();
        long.resize(20000, b'a');
        assert_eq!(parse(&long), Err(ResponseError::HeadTooLarge));
        let mut many = b"HTTP/1.1 200 OK\r\n".to_vec();
        for _ in 0..101 {
            many.extend_from_slice(b"A: b\r\n");
        }
        many.extend_from_slice(b"\r\n");
        assert_eq!(parse(&many), Err(ResponseError::TooManyHeaders));
    }

    #[test]
    fn interim_responses_are_recognised() {
        let mut storage = HeaderStorage::new();
        let r = parse_response(
            b"HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n",
            &mut storage,
            false,
            16384,
            100,
        )
        .unwrap()
        .unwrap();
        assert!(r.is_interim());
        assert_eq!(r.body, ResponseFraming::None);
    }

    #[test]
    fn a_101_is_final_only_for_an_upgrade_request() {
        let head = b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n\x81\x02hi";
        let mut storage = HeaderStorage::new();
        let r = parse_upgrade_response(head, &mut storage, 16384, 100)
            .unwrap()
            .unwrap();
        assert_eq!((r.status, r.body), (101, ResponseFraming::None));
        assert!(!r.is_interim());
        assert_eq!(
            &head[r.head_len..],
            b"\x81\x02hi",
            "the protocol's bytes follow"
        );
        let mut storage = HeaderStorage::new();
        assert!(parse_response(head, &mut storage, false, 16384, 100).is_err());
    }
}
