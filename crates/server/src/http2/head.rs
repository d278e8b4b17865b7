//! A response head as HTTP/2 frames it, HPACK-encoded straight from fields: a handler's
//! head as data ([`Made`]) with the fields the server adds, or a head the server wrote
//! as fields itself ([`Head::Fields`]: a file, a refusal). No HTTP/1 line is written and
//! read back (RFC 9113 section 8.3.2 for what is left out). HTTP/3 takes a handler's head
//! the same way ([`Made`]: the same fields, QPACK-encoded by h3).

use h2codec::conn::{Conn, StreamGone};
use handler::{Response, ResponseHead};
use wire::Framing;

use crate::exchange;
use crate::facts::ConnFacts;
use crate::net::output::FieldsHead;
use crate::worker::Worker;

/// A head waiting to be framed.
pub(super) enum Head {
    /// Written as fields by the server (a file, a refusal, a redirect: `reply`), every
    /// field there already (a file's shared with its cache entry).
    Fields(FieldsHead),
    /// A handler's head, as data, framed with the fields the server adds.
    Made(Made),
}

impl Head {
    /// Frames the head; `Err` when the stream is gone (or was reset: a head of lines
    /// whose status does not parse, which the server never writes).
    pub(super) fn send(
        &self,
        conn: &mut Conn,
        id: u32,
        end_stream: bool,
        worker: &Worker,
        facts: &ConnFacts,
    ) -> Result<(), StreamGone> {
        match self {
            Head::Fields(head) => {
                let fields = head
                    .iter()
                    .filter(|(name, _)| !is_connection_specific(name));
                conn.send_headers(id, head.status(), fields, end_stream)
            }
            Head::Made(made) => made.send(conn, id, end_stream, worker, facts),
        }
    }
}

/// A handler's response head, framed from its fields: nothing is written as HTTP/1
/// bytes and read back.
pub(crate) struct Made {
    status: u16,
    /// Relayed from an upstream (its Date kept; no Server added), or made here.
    relayed: bool,
    head: ResponseHead,
    /// `content-length`, when the length is known.
    length: Option<u64>,
}

impl Made {
    /// Takes the head out of `response` (its body stays); whether content follows.
    pub(crate) fn take(response: &mut Response, head_only: bool) -> (Made, bool) {
        let (framing, content) = exchange::framing(response, head_only);
        let made = Made {
            status: response.head.status(),
            relayed: response.relayed,
            head: std::mem::take(&mut response.head),
            length: match framing {
                Framing::Length(n) => Some(n),
                Framing::None | Framing::Chunked => None,
            },
        };
        (made, content)
    }

    pub(crate) fn status(&self) -> u16 {
        self.status
    }

    /// Every field, in the order an HTTP/1 head has them: Server, Date and HSTS first
    /// for a response made here; a relayed one's own fields, then Date when it has none
    /// and HSTS when it has none; the length last.
    fn fields<'a>(
        &'a self,
        date: &'a [u8],
        (hsts, alt_svc): (Option<&'a [u8]>, Option<&'a [u8]>),
        length: Option<&'a [u8]>,
    ) -> impl Iterator<Item = (&'a [u8], &'a [u8])> {
        const STS: &[u8] = b"strict-transport-security";
        let made = !self.relayed;
        let lead = [
            made.then_some((&b"server"[..], &b"tessera"[..])),
            made.then_some((&b"date"[..], date)),
            hsts.filter(|_| made).map(|v| (STS, v)),
        ];
        let own = self
            .head
            .iter()
            .filter(|(name, _)| !wire::is_framing_field(name) && !is_connection_specific(name));
        let relayed = self.relayed;
        let tail = [
            (relayed && !self.head.has_date()).then_some((&b"date"[..], date)),
            hsts.filter(|_| relayed && self.head.get(STS).is_none())
                .map(|v| (STS, v)),
            alt_svc
                .filter(|_| self.head.get(b"alt-svc").is_none())
                .map(|v| (&b"alt-svc"[..], v)),
            length.map(|v| (&b"content-length"[..], v)),
        ];
        lead.into_iter()
            .flatten()
            .chain(own)
            .chain(tail.into_iter().flatten())
    }

    fn send(
        &self,
        conn: &mut Conn,
        id: u32,
        end_stream: bool,
        worker: &Worker,
        facts: &ConnFacts,
    ) -> Result<(), StreamGone> {
        self.with_fields(worker, facts, |fields| {
            conn.send_headers(id, self.status, fields, end_stream)
        })
    }

    /// The size the head would have as HTTP/1 lines: what `tessera_sent_bytes_total`
    /// counts for a head, whatever the protocol (HPACK's size depends on what the
    /// connection sent before).
    pub(crate) fn lines_len(&self, worker: &Worker, facts: &ConnFacts) -> u64 {
        let status_line = "HTTP/1.1 200 \r\n".len() + wire::reason(self.status).len();
        let fields: usize = self.with_fields(worker, facts, |fields| {
            fields
                .map(|(name, value)| name.len() + value.len() + 4)
                .sum()
        });
        (status_line + fields + 2) as u64
    }

    /// Calls `use_fields` with [`Made::fields`], given this second's Date and the HSTS
    /// value on TLS.
    pub(crate) fn with_fields<R>(
        &self,
        worker: &Worker,
        facts: &ConnFacts,
        use_fields: impl for<'a> FnOnce(&mut dyn Iterator<Item = (&'a [u8], &'a [u8])>) -> R,
    ) -> R {
        let date = worker.clock.date_value();
        let current = worker.current.borrow();
        let (hsts, alt_svc) = match &facts.tls {
            Some(tls) => (
                current.gen.config.tls.hsts.as_deref().map(str::as_bytes),
                crate::reply::alt_svc(worker, tls),
            ),
            None => (None, None),
        };
        let mut digits = itoa::Buffer::new();
        let length = self.length.map(|n| digits.format(n).as_bytes());
        let mut fields = self.fields(&date, (hsts, alt_svc), length);
        use_fields(&mut fields)
    }
}

/// Fields HTTP/2 forbids in a message (RFC 9113 section 8.2.2); the length stays (it is
/// allowed, and tells the client the size in advance).
pub(crate) fn is_connection_specific(name: &[u8]) -> bool {
    [
        &b"connection"[..],
        b"keep-alive",
        b"transfer-encoding",
        b"upgrade",
        b"proxy-connection",
        b"te",
    ]
    .iter()
    .any(|n| name.eq_ignore_ascii_case(n))
}

#[cfg(test)]
mod tests {
    #[test]
    fn connection_specific_fields_are_told_apart_in_any_case() {
        assert!(super::is_connection_specific(b"Transfer-Encoding"));
        assert!(super::is_connection_specific(b"connection"));
        assert!(!super::is_connection_specific(b"content-length"));
    }
}
