/// The reason phrase for a status tessera sends (RFC 9110 section 15).
pub fn reason(status: u16) -> &'static str {
    match status {
        100 => "Continue",
        200 => "OK",
        204 => "No Content",
        206 => "Partial Content",
        301 => "Moved Permanently",
        302 => "Found",
        304 => "Not Modified",
        307 => "Temporary Redirect",
        308 => "Permanent Redirect",
        400 => "Bad Request",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        411 => "Length Required",
        412 => "Precondition Failed",
        413 => "Content Too Large",
        414 => "URI Too Long",
        416 => "Range Not Satisfiable",
        417 => "Expectation Failed",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        505 => "HTTP Version Not Supported",
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

#[cfg(test)]
mod tests {
    use super::*;

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
