/// The largest `max_headers` a server may configure: the size of the header array that
/// [`crate::HeaderStorage`] reserves on the stack for every parse.
pub const MAX_HEADERS_CAP: usize = 256;

/// Limits applied while parsing a request. Every refusal names the limit it hit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Largest request head (request line and header fields, with their CRLFs).
    /// Default is 16 KiB: larger than any browser sends, small enough that a read buffer
    /// per connection stays cheap. Exceeding it answers 431.
    pub max_head_size: usize,
    /// Longest request target. Default is 8 KiB, as the common proxies use. Exceeding it
    /// answers 414.
    pub max_uri_length: usize,
    /// Most header fields in one request. Default is 100. Exceeding it answers 431.
    /// At most [`MAX_HEADERS_CAP`].
    pub max_headers: usize,
    /// Largest request body the server agrees to read (or discard). Default is 1 MiB, as
    /// nginx's `client_max_body_size`. A larger Content-Length answers 413.
    pub max_body_size: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_head_size: 16 * 1024,
            max_uri_length: 8 * 1024,
            max_headers: 100,
            max_body_size: 1024 * 1024,
        }
    }
}
