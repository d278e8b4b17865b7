/// Why a request was refused. Each kind maps to exactly one status in [`Error::status`];
/// the server answers with that status and closes the connection, because after a framing
/// error it can no longer know where the next request starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    #[error("malformed request line")]
    BadRequestLine,
    #[error("malformed header field")]
    BadHeader,
    #[error("bare LF or bare CR used as a line ending")]
    BareLineEnding,
    #[error("invalid method token")]
    BadMethod,
    #[error("unsupported HTTP version")]
    UnsupportedVersion,
    #[error("request target is not in origin, absolute or asterisk form")]
    BadTarget,
    #[error("request target longer than the limit")]
    UriTooLong,
    #[error("request head larger than the limit")]
    HeadTooLarge,
    #[error("more header fields than the limit")]
    TooManyHeaders,
    #[error("missing (HTTP/1.1), duplicated or invalid Host header")]
    BadHost,
    #[error("invalid Content-Length")]
    BadContentLength,
    #[error("more than one Content-Length")]
    DuplicateContentLength,
    #[error("both Content-Length and Transfer-Encoding")]
    ContentLengthWithTransferEncoding,
    #[error("Transfer-Encoding in an HTTP/1.0 request")]
    TransferEncodingOnHttp10,
    #[error("malformed Transfer-Encoding")]
    BadTransferEncoding,
    #[error("transfer coding other than chunked")]
    UnsupportedTransferEncoding,
    #[error("malformed chunked body")]
    BadChunk,
    #[error("request body larger than the limit")]
    BodyTooLarge,
    #[error("unsupported Expect value")]
    BadExpectation,
}

impl Error {
    /// Every kind, in a fixed order (see [`Error::index`]), for per-reason counters.
    pub const ALL: [Error; 19] = [
        Error::BadRequestLine,
        Error::BadHeader,
        Error::BareLineEnding,
        Error::BadMethod,
        Error::UnsupportedVersion,
        Error::BadTarget,
        Error::UriTooLong,
        Error::HeadTooLarge,
        Error::TooManyHeaders,
        Error::BadHost,
        Error::BadContentLength,
        Error::DuplicateContentLength,
        Error::ContentLengthWithTransferEncoding,
        Error::TransferEncodingOnHttp10,
        Error::BadTransferEncoding,
        Error::UnsupportedTransferEncoding,
        Error::BadChunk,
        Error::BodyTooLarge,
        Error::BadExpectation,
    ];

    /// This kind's position in [`Error::ALL`].
    pub fn index(self) -> usize {
        Error::ALL.iter().position(|&e| e == self).unwrap_or(0)
    }

    /// A short stable name for logs and metrics.
    pub fn name(self) -> &'static str {
        match self {
            Error::BadRequestLine => "bad-request-line",
            Error::BadHeader => "bad-header",
            Error::BareLineEnding => "bare-line-ending",
            Error::BadMethod => "bad-method",
            Error::UnsupportedVersion => "unsupported-version",
            Error::BadTarget => "bad-target",
            Error::UriTooLong => "uri-too-long",
            Error::HeadTooLarge => "head-too-large",
            Error::TooManyHeaders => "too-many-headers",
            Error::BadHost => "bad-host",
            Error::BadContentLength => "bad-content-length",
            Error::DuplicateContentLength => "duplicate-content-length",
            Error::ContentLengthWithTransferEncoding => "content-length-with-transfer-encoding",
            Error::TransferEncodingOnHttp10 => "transfer-encoding-on-http10",
            Error::BadTransferEncoding => "bad-transfer-encoding",
            Error::UnsupportedTransferEncoding => "unsupported-transfer-encoding",
            Error::BadChunk => "bad-chunk",
            Error::BodyTooLarge => "body-too-large",
            Error::BadExpectation => "bad-expectation",
        }
    }

    /// The one status that answers this refusal.
    pub fn status(self) -> u16 {
        match self {
            Error::UriTooLong => 414,
            Error::HeadTooLarge | Error::TooManyHeaders => 431,
            Error::UnsupportedVersion => 505,
            Error::UnsupportedTransferEncoding => 501,
            Error::BodyTooLarge => 413,
            Error::BadExpectation => 417,
            Error::BadRequestLine
            | Error::BadHeader
            | Error::BareLineEnding
            | Error::BadMethod
            | Error::BadTarget
            | Error::BadHost
            | Error::BadContentLength
            | Error::DuplicateContentLength
            | Error::ContentLengthWithTransferEncoding
            | Error::TransferEncodingOnHttp10
            | Error::BadTransferEncoding
            | Error::BadChunk => 400,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_has_a_distinct_index_and_name() {
        for (i, e) in Error::ALL.iter().enumerate() {
            assert_eq!(e.index(), i);
            assert_eq!(
                Error::ALL.iter().filter(|o| o.name() == e.name()).count(),
                1
            );
        }
    }
}
