//! What each listening address speaks.

/// What a listening address speaks: the first bytes of its connections.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Kind {
    /// `listen`: HTTP/1.1, or HTTP/2 when a connection starts with its preface (and
    /// `http2` is on).
    Plain,
    /// `tls_listen`: a TLS handshake, then the protocol ALPN chose.
    Tls,
    /// `h2c_listen`: HTTP/2 with prior knowledge, nothing else.
    H2c,
    /// `quic_listen`: a UDP socket, HTTP/3 over QUIC.
    Quic,
}

impl Kind {
    /// The configuration key that lists addresses of this kind.
    pub fn key(self) -> &'static str {
        match self {
            Kind::Plain => "listen",
            Kind::Tls => "tls_listen",
            Kind::H2c => "h2c_listen",
            Kind::Quic => "quic_listen",
        }
    }
}
