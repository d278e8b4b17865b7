//! What a request needs to know about the connection it came on.

/// What a request needs to know about the TLS connection it came on.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TlsFacts {
    /// The site the client's SNI named, or the default site without one (or for a name
    /// no `[[host]]` has): the only site this connection may be served by.
    pub site: usize,
    /// Whether the client sent SNI. Without it every request is the default site's,
    /// whatever its Host: the client could not say which certificate it wanted.
    pub sni: bool,
    /// `TLSv1.3` or `TLSv1.2`, for `%{tls_version}x`.
    pub version: &'static str,
    /// The cipher suite's IANA name (`TLS13_AES_128_GCM_SHA256`), for `%{tls_cipher}x`.
    pub cipher: &'static str,
    /// ALPN chose `h2`: the connection speaks HTTP/2.
    pub h2: bool,
}

/// A request's id (`$request_id`, `%{request_id}x`) as 32 lower-case hex digits, as
/// nginx writes its `$request_id`.
pub(crate) fn request_id_hex(id: u128) -> [u8; 32] {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut out = [0u8; 32];
    for (i, digit) in out.iter_mut().enumerate() {
        *digit = HEX[((id >> (124 - 4 * i)) & 0xf) as usize];
    }
    out
}

/// The connection a request came on, as its exchange sees it: passed with the request
/// from the connection to whatever answers, counts and logs it (never kept in the
/// worker, where a connection that forgot to set it would mislabel another's request).
#[derive(Debug, Clone, Copy)]
pub(crate) struct ConnFacts {
    /// The client's address (the socket's peer).
    pub peer: std::net::SocketAddr,
    /// The TLS connection's facts, `None` in cleartext.
    pub tls: Option<TlsFacts>,
}

impl ConnFacts {
    /// Whether the connection is encrypted (TLS).
    pub fn secure(&self) -> bool {
        self.tls.is_some()
    }
}
