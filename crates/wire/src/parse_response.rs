//! Parsing of response heads received from an upstream (the proxy's client side), as
//! strict as request parsing: a proxy that frames an upstream's body differently from the
//! next hop is a response-splitting hazard, so anything ambiguous is refused and the
//! proxy answers 502 instead of guessing.

use crate::request::{
    check_line_endings, connection_options, parse_content_length, parse_transfer_encoding,
};
use crate::{Error, Header, HeaderStorage, Version, MAX_HEADERS_CAP};

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
    /// Length of the head, CRLFCRLF included: the body (if any) starts here.
    pub head_len: usize,
    pub body: ResponseFraming,
    /// Whether the connection may carry another request after this response's body.
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
    #[error("bare LF or bare CR used as a line ending")]
    BareLineEnding,
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
            check_line_endings(buf).map_err(line_error)?;
            return Ok(None);
        }
        Err(e) => {
            check_line_endings(buf).map_err(line_error)?;
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
    check_line_endings(&buf[..head_len]).map_err(line_error)?;
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
    let body = if head_request || crate::bodiless(status) {
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
        && body != ResponseFraming::Close;
    Ok(Some(ParsedResponse {
        status,
        version,
        headers,
        head_len,
        body,
        keep_alive,
    }))
}

fn line_error(_: Error) -> ResponseError {
    ResponseError::BareLineEnding
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
        assert_eq!(
            parse(b"HTTP/1.1 304 Not Modified\r\nContent-Length: 5\r\n\r\n").unwrap(),
            Some((304, ResponseFraming::None, true, 48))
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
            parse(b"HTTP/1.1 200 OK\nContent-Length: 5\r\n\r\n"),
            Err(ResponseError::BareLineEnding)
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
