//! A request as the upstream client sends it: its head as the caller has it (a client's
//! request forwarded, a fragment's, a script's call), encoded once into the connection's
//! buffer.

use bytes::Bytes;
use http::header::{HeaderMap, HeaderValue};
use http::Method;

use crate::headers::Forwarded;

/// A request to send: its head as the caller has it, and its whole body.
pub(crate) struct Outgoing<'a> {
    pub(crate) method: &'a Method,
    /// Origin form: `/path?query`.
    pub(crate) target: &'a str,
    pub(crate) fields: Fields<'a>,
    pub(crate) body: &'a Bytes,
    /// The protocol of an upgrade request (`Upgrade: websocket`): sent with
    /// `Connection: upgrade`, and a 101 is its answer.
    pub(crate) upgrade: Option<&'a HeaderValue>,
    /// Where each attempt is noted for the access log, when it is.
    pub(crate) notes: Option<&'a handler::LogNotes>,
}

/// The fields of an outgoing request.
pub(crate) enum Fields<'a> {
    /// Sent as they are (a fragment's request, a script's call).
    Plain(&'a HeaderMap),
    /// A client's request, forwarded.
    Forwarded(Forwarded<'a>),
}

impl Outgoing<'_> {
    /// The client whose request this is (`None` for a request the proxy makes itself).
    pub(crate) fn client(&self) -> Option<std::net::SocketAddr> {
        match &self.fields {
            Fields::Plain(_) => None,
            Fields::Forwarded(f) => Some(std::net::SocketAddr::new(f.client.addr, f.client.port)),
        }
    }

    /// The request head: request line (the target after the upstream's `path_prefix`),
    /// the fields (framing fields the caller left are dropped: the body's length is known
    /// here), Content-Length when there is a body or the method expects one.
    pub(crate) fn encode(&self, buf: &mut Vec<u8>, path_prefix: &str) {
        buf.clear();
        buf.extend_from_slice(self.method.as_str().as_bytes());
        buf.push(b' ');
        buf.extend_from_slice(path_prefix.as_bytes());
        buf.extend_from_slice(self.target.as_bytes());
        buf.extend_from_slice(b" HTTP/1.1\r\n");
        match &self.fields {
            Fields::Plain(fields) => {
                for (name, value) in *fields {
                    if name == http::header::CONTENT_LENGTH
                        || name == http::header::TRANSFER_ENCODING
                    {
                        continue;
                    }
                    wire::write_field(buf, name.as_str().as_bytes(), value.as_bytes());
                }
            }
            Fields::Forwarded(f) => f.write(buf),
        }
        if let Some(protocol) = self.upgrade {
            buf.extend_from_slice(b"connection: upgrade\r\n");
            wire::write_field(buf, b"upgrade", protocol.as_bytes());
        }
        if !self.body.is_empty()
            || matches!(*self.method, Method::POST | Method::PUT | Method::PATCH)
        {
            buf.extend_from_slice(b"content-length: ");
            wire::write_decimal(buf, self.body.len() as u64);
            buf.extend_from_slice(b"\r\n");
        }
        buf.extend_from_slice(b"\r\n");
    }

    /// Whether the request may be sent again after the connection failed under it (RFC
    /// 9110 section 9.2.2).
    pub(crate) fn idempotent(&self) -> bool {
        matches!(
            *self.method,
            Method::GET | Method::HEAD | Method::OPTIONS | Method::PUT | Method::DELETE
        )
    }
}
