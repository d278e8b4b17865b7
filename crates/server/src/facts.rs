//! What a request needs to know about the connection it came on.

use std::net::SocketAddr;
use std::rc::Rc;

/// What a request needs to know about the TLS connection it came on.
#[derive(Debug, Clone)]
pub(crate) struct TlsFacts {
    /// The site the client's SNI named, or the default site without one (or for a name
    /// no `[[host]]` has): the only site this connection may be served by. (`u32`, with
    /// the SNI a thin pointer: the facts are in every TLS connection's future, whose
    /// room is fixed, net/tasks.rs.)
    pub site: u32,
    /// The name the client sent in SNI (`%{tls_sni}x`), once per connection. Without it
    /// every request is the default site's, whatever its Host: the client could not say
    /// which certificate it wanted.
    pub sni: Option<Rc<Box<str>>>,
    /// `TLSv1.3` or `TLSv1.2`, for `%{tls_version}x`.
    pub version: &'static str,
    /// The cipher suite's IANA name (`TLS13_AES_128_GCM_SHA256`), for `%{tls_cipher}x`.
    pub cipher: &'static str,
    /// ALPN chose `h2`: the connection speaks HTTP/2.
    pub h2: bool,
    /// The connection is QUIC's (HTTP/3), not TLS over TCP.
    pub quic: bool,
}

/// A request id sent by a trusted proxy: 32 hex digits, or a UUID (`8-4-4-4-12` hex
/// digits); `None` for anything else.
pub(crate) fn parse_request_id(value: &[u8]) -> Option<u128> {
    const DASHES: [usize; 4] = [8, 13, 18, 23];
    let dashed = value.len() == 36 && DASHES.iter().all(|&i| value[i] == b'-');
    let mut digits = [0u8; 32];
    let mut n = 0;
    for (i, &b) in value.iter().enumerate() {
        if dashed && DASHES.contains(&i) {
            continue;
        }
        if !b.is_ascii_hexdigit() || n == 32 {
            return None;
        }
        digits[n] = b;
        n += 1;
    }
    let text = std::str::from_utf8(&digits[..n]).ok()?;
    (n == 32)
        .then(|| u128::from_str_radix(text, 16).ok())
        .flatten()
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

/// Where a connection comes from: its socket's peer, or, on a `proxy_protocol`
/// listener, also what the PROXY header said (kept apart, so that the connection of the
/// usual listener holds no more than its peer).
#[derive(Debug, Clone)]
pub(crate) enum Origin {
    Direct(SocketAddr),
    Proxied(Rc<Proxied>),
}

/// What a PROXY header told about a connection.
#[derive(Debug)]
pub(crate) struct Proxied {
    /// The socket's peer (the proxy).
    pub peer: SocketAddr,
    /// The connection's client: the header's source address when the peer is trusted
    /// (`client::of_connection`), else the peer.
    pub client: SocketAddr,
    /// The header's v2 TLVs, raw (`wire::Tlvs` reads them); empty for v1.
    pub tlvs: Box<[u8]>,
}

impl Origin {
    pub fn peer(&self) -> SocketAddr {
        match self {
            Origin::Direct(peer) => *peer,
            Origin::Proxied(p) => p.peer,
        }
    }

    /// The connection's client (before any forwarding field of a request is read).
    pub fn client(&self) -> SocketAddr {
        match self {
            Origin::Direct(peer) => *peer,
            Origin::Proxied(p) => p.client,
        }
    }

    /// The facts a request on this connection is answered with.
    pub fn facts(&self, tls: Option<TlsFacts>) -> ConnFacts {
        ConnFacts {
            peer: self.peer(),
            client: self.client(),
            tls,
            proxied: match self {
                Origin::Direct(_) => None,
                Origin::Proxied(p) => Some(p.clone()),
            },
        }
    }
}

/// The connection a request came on, as its exchange sees it: passed with the request
/// from the connection to whatever answers, counts and logs it (never kept in the
/// worker, where a connection that forgot to set it would mislabel another's request).
#[derive(Debug, Clone)]
pub(crate) struct ConnFacts {
    /// The socket's peer (`%{peer}x`).
    pub peer: SocketAddr,
    /// The client (`%a`): the peer, the source a trusted PROXY header named, or, for
    /// the facts of one request, the address a trusted proxy's forwarding field named
    /// (`client::Identity::of_request`).
    pub client: SocketAddr,
    /// The TLS connection's facts, `None` in cleartext.
    pub tls: Option<TlsFacts>,
    /// What the connection's PROXY header said, on a `proxy_protocol` listener.
    pub proxied: Option<Rc<Proxied>>,
}

impl ConnFacts {
    /// Whether the connection is encrypted (TLS).
    pub fn secure(&self) -> bool {
        self.tls.is_some()
    }

    /// The PROXY header's TLVs, raw (empty without any).
    pub fn proxy_tlvs(&self) -> &[u8] {
        self.proxied.as_deref().map_or(&[], |p| &p.tlvs[..])
    }
}
