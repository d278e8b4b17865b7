use crate::Version;

/// The reason phrase of a status: those of the IANA HTTP status code registry (RFC 9110
/// section 15 and later RFCs), `Unknown` for any other.
pub fn reason(status: u16) -> &'static str {
    match status {
        100 => "Continue",
        101 => "Switching Protocols",
        102 => "Processing",
        103 => "Early Hints",
        200 => "OK",
        201 => "Created",
        202 => "Accepted",
        203 => "Non-Authoritative Information",
        204 => "No Content",
        205 => "Reset Content",
        206 => "Partial Content",
        207 => "Multi-Status",
        208 => "Already Reported",
        226 => "IM Used",
        300 => "Multiple Choices",
        301 => "Moved Permanently",
        302 => "Found",
        303 => "See Other",
        304 => "Not Modified",
        305 => "Use Proxy",
        307 => "Temporary Redirect",
        308 => "Permanent Redirect",
        400 => "Bad Request",
        401 => "Unauthorized",
        402 => "Payment Required",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        406 => "Not Acceptable",
        407 => "Proxy Authentication Required",
        408 => "Request Timeout",
        409 => "Conflict",
        410 => "Gone",
        411 => "Length Required",
        412 => "Precondition Failed",
        413 => "Content Too Large",
        414 => "URI Too Long",
        415 => "Unsupported Media Type",
        416 => "Range Not Satisfiable",
        417 => "Expectation Failed",
        421 => "Misdirected Request",
        422 => "Unprocessable Content",
        423 => "Locked",
        424 => "Failed Dependency",
        425 => "Too Early",
        426 => "Upgrade Required",
        428 => "Precondition Required",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        451 => "Unavailable For Legal Reasons",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        505 => "HTTP Version Not Supported",
        506 => "Variant Also Negotiates",
        507 => "Insufficient Storage",
        508 => "Loop Detected",
        511 => "Network Authentication Required",
        _ => "Unknown",
    }
}

/// The full status line, `HTTP/1.1 200 OK\r\n`, for a status tessera sends. Always
/// HTTP/1.1: a server answers with its own highest version (RFC 9110 section 6.2).
pub fn status_line(status: u16) -> &'static [u8] {
    macro_rules! lines {
        ($($code:literal $text:literal),* $(,)?) => {
            match status {
                $($code => concat!("HTTP/1.1 ", $code, " ", $text, "\r\n").as_bytes(),)*
                _ => b"HTTP/1.1 500 Internal Server Error\r\n",
            }
        };
    }
    lines! {
        100 "Continue", 200 "OK", 204 "No Content", 206 "Partial Content",
        301 "Moved Permanently", 302 "Found", 304 "Not Modified",
        307 "Temporary Redirect", 308 "Permanent Redirect",
        400 "Bad Request", 403 "Forbidden", 404 "Not Found", 405 "Method Not Allowed",
        408 "Request Timeout", 411 "Length Required", 412 "Precondition Failed",
        413 "Content Too Large", 414 "URI Too Long", 416 "Range Not Satisfiable",
        417 "Expectation Failed", 431 "Request Header Fields Too Large",
        500 "Internal Server Error", 501 "Not Implemented", 502 "Bad Gateway",
        503 "Service Unavailable", 504 "Gateway Timeout", 505 "HTTP Version Not Supported",
    }
}

/// How a response body is delimited on an HTTP/1.1 connection. The connection decides
/// it, never a handler's fields: `Content-Length`, `Transfer-Encoding`, `Connection` and
/// `Keep-Alive` from a handler or an upstream are dropped ([`is_framing_field`]) and
/// written here from this.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// No length field: a response without content (204, 304, 1xx), or one whose end is
    /// the connection's close.
    None,
    /// `Content-Length: n` (also on a HEAD answer, which then sends no content).
    Length(u64),
    /// `Transfer-Encoding: chunked` (HTTP/1.1 only).
    Chunked,
}

/// Whether the response has no content whatever its fields say: an answer to HEAD
/// (RFC 9110 section 9.3.2) or a 1xx, 204 or 304 (section 6.4.1).
pub fn no_body(head_request: bool, status: u16) -> bool {
    head_request || bodiless(status)
}

/// Whether a status never carries content (1xx, 204, 304).
pub fn bodiless(status: u16) -> bool {
    status == 204 || status == 304 || status < 200
}

/// Fields that are the connection's to write (the framing), whatever a handler, a script
/// or an upstream says.
#[inline]
pub fn is_framing_field(name: &[u8]) -> bool {
    // By length first: every field of every relayed head passes through here.
    match name.len() {
        10 => name.eq_ignore_ascii_case(b"connection") || name.eq_ignore_ascii_case(b"keep-alive"),
        14 => name.eq_ignore_ascii_case(b"content-length"),
        17 => name.eq_ignore_ascii_case(b"transfer-encoding"),
        _ => false,
    }
}

/// Appends the status line of any status: the precomputed one for a status tessera
/// knows, else `HTTP/1.1 NNN Unknown` (a status passed through from an upstream).
pub fn write_status_line(buf: &mut Vec<u8>, status: u16) {
    let line = status_line(status);
    if &line[9..12] == status_digits(status).as_slice() {
        buf.extend_from_slice(line);
        return;
    }
    buf.extend_from_slice(b"HTTP/1.1 ");
    buf.extend_from_slice(&status_digits(status));
    buf.push(b' ');
    buf.extend_from_slice(reason(status).as_bytes());
    buf.extend_from_slice(b"\r\n");
}

/// A status as three digits (statuses are 100-999; others are clamped to 999).
fn status_digits(status: u16) -> [u8; 3] {
    let status = status.min(999);
    [
        b'0' + (status / 100) as u8,
        b'0' + (status / 10 % 10) as u8,
        b'0' + (status % 10) as u8,
    ]
}

/// Appends one field line.
#[inline]
pub fn write_field(buf: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    buf.extend_from_slice(name);
    buf.extend_from_slice(b": ");
    buf.extend_from_slice(value);
    buf.extend_from_slice(b"\r\n");
}

/// Appends the framing fields, the connection's persistence and the blank line that ends
/// the head. HTTP/1.0 has no chunked coding: a caller gives it a length or closes.
pub fn write_framing(buf: &mut Vec<u8>, framing: Framing, version: Version, keep_alive: bool) {
    match framing {
        Framing::None => {}
        Framing::Length(n) => {
            buf.extend_from_slice(b"Content-Length: ");
            write_decimal(buf, n);
            buf.extend_from_slice(b"\r\n");
        }
        Framing::Chunked => buf.extend_from_slice(b"Transfer-Encoding: chunked\r\n"),
    }
    match (version, keep_alive) {
        (Version::Http11 | Version::Http2 | Version::Http3, true) => {}
        (Version::Http10, true) => buf.extend_from_slice(b"Connection: keep-alive\r\n"),
        (_, false) => buf.extend_from_slice(b"Connection: close\r\n"),
    }
    buf.extend_from_slice(b"\r\n");
}

/// Appends `n` in decimal.
pub fn write_decimal(buf: &mut Vec<u8>, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    buf.extend_from_slice(&digits[i..]);
}

/// The chunk-size line of a chunk of `n` bytes (`n` in hex and CRLF) in `out`; returns
/// its length.
pub fn chunk_size_line(mut n: usize, out: &mut [u8; 20]) -> usize {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut digits = [0u8; 16];
    let mut len = 0;
    loop {
        digits[len] = DIGITS[n & 15];
        len += 1;
        n >>= 4;
        if n == 0 {
            break;
        }
    }
    for i in 0..len {
        out[i] = digits[len - 1 - i];
    }
    out[len] = b'\r';
    out[len + 1] = b'\n';
    len + 2
}

/// The last chunk and the empty trailer section of a chunked body.
pub const LAST_CHUNK: &[u8] = b"0\r\n\r\n";

/// The interim response a client that sent `Expect: 100-continue` waits for.
pub const CONTINUE: &[u8] = b"HTTP/1.1 100 Continue\r\n\r\n";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn any_status_gets_a_status_line() {
        let mut buf = Vec::new();
        write_status_line(&mut buf, 404);
        write_status_line(&mut buf, 599);
        write_status_line(&mut buf, 201);
        assert_eq!(
            buf,
            b"HTTP/1.1 404 Not Found\r\nHTTP/1.1 599 Unknown\r\nHTTP/1.1 201 Created\r\n"
        );
    }

    #[test]
    fn framing_and_chunk_sizes() {
        let mut buf = Vec::new();
        write_framing(&mut buf, Framing::Length(1234), Version::Http10, true);
        assert_eq!(
            buf,
            b"Content-Length: 1234\r\nConnection: keep-alive\r\n\r\n"
        );
        buf.clear();
        write_framing(&mut buf, Framing::Chunked, Version::Http11, false);
        assert_eq!(
            buf,
            b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
        );
        let mut line = [0u8; 20];
        let n = chunk_size_line(0x1a2f, &mut line);
        assert_eq!(&line[..n], b"1a2f\r\n");
        let n = chunk_size_line(0, &mut line);
        assert_eq!(&line[..n], b"0\r\n");
        assert!(no_body(true, 200) && no_body(false, 304) && !no_body(false, 200));
        assert!(is_framing_field(b"Content-Length") && !is_framing_field(b"content-type"));
    }

    #[test]
    fn status_lines_agree_with_reasons() {
        for code in [
            100, 200, 204, 206, 301, 304, 400, 404, 413, 414, 431, 501, 505,
        ] {
            let expected = format!("HTTP/1.1 {code} {}\r\n", reason(code));
            assert_eq!(status_line(code), expected.as_bytes());
        }
    }
}
