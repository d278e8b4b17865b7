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
    /// The body as it arrives from the client, in place of `body`: sent with the length
    /// the client declared, or chunked.
    pub(crate) streamed: Option<&'a handler::RequestBody>,
    /// The protocol of an upgrade request (`Upgrade: websocket`): sent with
    /// `Connection: upgrade`, and a 101 is its answer.
    pub(crate) upgrade: Option<&'a HeaderValue>,
    /// Where each attempt is noted for the access log, when it is.
    pub(crate) notes: Option<&'a handler::LogNotes>,
    /// The trace context of the request this one is sent for: each attempt goes as a
    /// child span, with the `traceparent` of [`Outgoing::encode`]'s hop in place of any
    /// the fields have (and their `tracestate` unless the trace came from the client).
    pub(crate) trace: Option<trace::Context>,
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
    /// here), `traceparent` for the attempt's span `hop`, Content-Length when there is a
    /// body or the method expects one (a streamed body of unknown length: chunked).
    pub(crate) fn encode(&self, buf: &mut Vec<u8>, path_prefix: &str, hop: Option<trace::Hop>) {
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
                        || self
                            .trace
                            .is_some_and(|t| t.replaces(name.as_str().as_bytes()))
                    {
                        continue;
                    }
                    wire::write_field(buf, name.as_str().as_bytes(), value.as_bytes());
                }
            }
            Fields::Forwarded(f) => f.write(buf, self.trace),
        }
        if let Some(hop) = hop {
            wire::write_field(buf, b"traceparent", &hop.traceparent());
        }
        if let Some(protocol) = self.upgrade {
            buf.extend_from_slice(b"connection: upgrade\r\n");
            wire::write_field(buf, b"upgrade", protocol.as_bytes());
        }
        if let Some(streamed) = self.streamed {
            match streamed.length() {
                Some(length) => {
                    buf.extend_from_slice(b"content-length: ");
                    wire::write_decimal(buf, length);
                    buf.extend_from_slice(b"\r\n");
                }
                None => buf.extend_from_slice(b"transfer-encoding: chunked\r\n"),
            }
        } else if !self.body.is_empty()
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

/// One attempt's span in the request's trace: its `traceparent` (the hop) and when it
/// began. Exported when it ends, if the trace is sampled.
pub(crate) struct Span {
    pub(crate) hop: trace::Hop,
    started: std::time::SystemTime,
}

impl Span {
    pub(crate) fn begin(context: trace::Context) -> Span {
        // The clock only for a span that will be exported: with 1% sampling, 99 requests
        // in 100 would read it for nothing.
        let started = match context.sampled {
            true => std::time::SystemTime::now(),
            false => std::time::UNIX_EPOCH,
        };
        Span {
            hop: context.hop(),
            started,
        }
    }

    /// The attempt ended, on `peer` of `upstream`, with a response head of `status`
    /// (`None`: no response): its client span, when the trace is sampled.
    pub(crate) fn end(
        self,
        req: &Outgoing<'_>,
        (upstream, peer): (&str, &str),
        status: Option<u16>,
    ) {
        use trace::Attribute::{Int, Str};
        if !self.hop.context.sampled {
            return;
        }
        let path = req.target.split('?').next().unwrap_or_default();
        let mut attributes = vec![
            Str("http.request.method", req.method.as_str().into()),
            Str("url.path", path.into()),
            Str("server.address", peer.into()),
            Str("tessera.upstream", upstream.into()),
        ];
        if let Some(status) = status {
            attributes.push(Int("http.response.status_code", i64::from(status)));
        }
        trace::emit(trace::SpanRecord {
            trace_id: self.hop.context.trace_id,
            span_id: self.hop.span_id,
            parent_id: self.hop.context.span_id,
            name: req.method.as_str().to_string(),
            kind: trace::Kind::Client,
            start: self.started,
            end: std::time::SystemTime::now(),
            attributes,
            error: !matches!(status, Some(s) if s < 500),
        });
    }
}
