//! HTTP/2 to a peer (`protocol = "h2"` over TLS, `"h2c"` in clear text): per worker and
//! per peer, a few connections, each carrying up to `max_streams_per_connection`
//! requests at once (fewer if the peer says so), each request a stream. A connection is
//! a task of the worker's event loop ([`driver`]) that owns the socket; the requests
//! reach it through its shared state ([`state`]): a request encodes its HEADERS and DATA
//! into the connection's output and wakes the driver, which wakes it back when its
//! response head, body or end arrives.
//!
//! A connection is put in the pool the moment it is opened, before the TCP (and TLS)
//! handshake is done: the requests that arrive meanwhile queue their frames behind the
//! preface instead of each opening a connection of its own, so a hundred requests at
//! once go on one connection.
//!
//! The frames and HPACK are `h2codec`'s, the server's own codec, driven here as a client
//! as `tessera bench --http2` does (crates/bench/src/h2.rs).

mod driver;
mod state;

use std::cell::RefCell;
use std::future::poll_fn;
use std::rc::Rc;
use std::task::{Context, Poll};

use bytes::Bytes;
use h2codec::frame;

pub(crate) use state::Failed;
use state::{Shared, OUT_FULL};

/// One worker's HTTP/2 connections to one peer.
#[derive(Default)]
pub(crate) struct H2Pool {
    conns: RefCell<Vec<Rc<RefCell<Shared>>>>,
}

impl H2Pool {
    /// A connection with room for another stream, or `None` (open one with [`H2Pool::open`]).
    pub(crate) fn with_room(&self) -> Option<Rc<RefCell<Shared>>> {
        let mut conns = self.conns.borrow_mut();
        conns.retain(|c| {
            let c = c.borrow();
            c.closed.is_none() && !c.going_away && !c.useless()
        });
        conns.iter().find(|c| c.borrow().room() > 0).cloned()
    }

    /// A new connection, in the pool at once: `opening` connects it, on a task of its
    /// own that then drives it.
    pub(crate) fn open(
        &self,
        max_streams: u32,
        opening: impl std::future::Future<
                Output = Result<crate::upstream::stream::Stream, crate::error::UpstreamError>,
            > + 'static,
    ) -> Rc<RefCell<Shared>> {
        let shared = Rc::new(RefCell::new(Shared::new(max_streams)));
        self.conns.borrow_mut().push(shared.clone());
        evloop::spawn_local(driver::drive(shared.clone(), opening));
        shared
    }
}

/// A request's stream on a connection: its response head, body and trailers as they
/// arrive, and its request body going out as the windows allow. Dropped before both
/// sides ended, the stream is reset (CANCEL).
pub(crate) struct H2Stream {
    conn: Rc<RefCell<Shared>>,
    id: u32,
}

impl Drop for H2Stream {
    fn drop(&mut self) {
        self.conn.borrow_mut().forget(self.id);
    }
}

impl H2Stream {
    /// Opens a stream on `conn` with the head `fields`; `end_stream` when no body follows.
    pub(crate) fn open<'f>(
        conn: Rc<RefCell<Shared>>,
        fields: impl Iterator<Item = (&'f [u8], &'f [u8])>,
        end_stream: bool,
    ) -> H2Stream {
        let id = conn.borrow_mut().open(fields, end_stream);
        H2Stream { conn, id }
    }

    /// The response's final head: status and fields.
    pub(crate) fn poll_head(
        &self,
        cx: &mut Context<'_>,
    ) -> Poll<Result<(u16, handler::FieldList), Failed>> {
        let mut s = self.conn.borrow_mut();
        let Some(slot) = s.slot(self.id) else {
            return Poll::Ready(Err(Failed::Broken("stream forgotten".into())));
        };
        if let Some(head) = slot.head.take() {
            return Poll::Ready(Ok(head));
        }
        if let Some(why) = &slot.failed {
            return Poll::Ready(Err(why.clone()));
        }
        slot.waker = Some(cx.waker().clone());
        Poll::Pending
    }

    /// The next piece of the response body; `None` at its end.
    pub(crate) fn poll_data(&self, cx: &mut Context<'_>) -> Poll<Result<Option<Bytes>, Failed>> {
        let mut s = self.conn.borrow_mut();
        let Some(slot) = s.slot(self.id) else {
            return Poll::Ready(Ok(None));
        };
        if let Some(data) = slot.data.pop_front() {
            let n = data.len();
            s.consumed(self.id, n);
            return Poll::Ready(Ok(Some(data)));
        }
        if let Some(why) = &slot.failed {
            return Poll::Ready(Err(why.clone()));
        }
        if slot.ended {
            return Poll::Ready(Ok(None));
        }
        slot.waker = Some(cx.waker().clone());
        Poll::Pending
    }

    /// The trailers, once the body ended with them.
    pub(crate) fn take_trailers(&self) -> Option<handler::FieldList> {
        self.conn.borrow_mut().slot(self.id)?.trailers.take()
    }

    /// The whole body, when it has all arrived in one piece (or none).
    pub(crate) fn take_whole(&self) -> Option<Bytes> {
        let mut s = self.conn.borrow_mut();
        let slot = s.slot(self.id)?;
        // A body with trailers is streamed, so that they follow it.
        if !slot.ended || slot.failed.is_some() || slot.data.len() > 1 || slot.trailers.is_some() {
            return None;
        }
        Some(slot.data.pop_front().unwrap_or_default())
    }

    /// Sends `data` as DATA frames as the windows allow, END_STREAM on the last when
    /// `end`. Fails when the stream or the connection did.
    pub(crate) async fn send(&self, data: Bytes, end: bool) -> Result<(), Failed> {
        send(&self.conn, self.id, data, end).await
    }

    /// A handle that sends the request body while this one reads the response (both
    /// ways at once); it does not reset the stream when dropped.
    pub(crate) fn sender(&self) -> H2Sender {
        H2Sender {
            conn: self.conn.clone(),
            id: self.id,
        }
    }
}

/// The request body's end of a stream ([`H2Stream::sender`]).
pub(crate) struct H2Sender {
    conn: Rc<RefCell<Shared>>,
    id: u32,
}

impl H2Sender {
    pub(crate) async fn send(&self, data: Bytes, end: bool) -> Result<(), Failed> {
        send(&self.conn, self.id, data, end).await
    }

    /// The body cannot go on (the client's broke off, or the peer took none of it in
    /// time): the stream is reset (CANCEL), and the request fails with `why` (a response
    /// already passed on is cut short).
    pub(crate) fn fail(&self, why: Failed) {
        let mut s = self.conn.borrow_mut();
        let Some(slot) = s.slot(self.id) else { return };
        // A response that has ended whole stays whole.
        if slot.failed.is_none() && !slot.ended {
            slot.failed = Some(why);
        }
        slot.local_done = true;
        slot.ended = true;
        if let Some(w) = slot.waker.take() {
            w.wake();
        }
        frame::write_rst_stream(&mut s.out, self.id, frame::Reason::CANCEL);
        s.wake_driver();
    }
}

async fn send(conn: &RefCell<Shared>, id: u32, mut data: Bytes, end: bool) -> Result<(), Failed> {
    poll_fn(|cx| poll_send(conn, id, cx, &mut data, end)).await
}

fn poll_send(
    conn: &RefCell<Shared>,
    id: u32,
    cx: &mut Context<'_>,
    data: &mut Bytes,
    end: bool,
) -> Poll<Result<(), Failed>> {
    let mut guard = conn.borrow_mut();
    let s = &mut *guard;
    loop {
        if let Some(why) = &s.closed {
            return Poll::Ready(Err(why.clone()));
        }
        let conn_window = s.send_window;
        let max_frame = s.peer_max_frame as i64;
        let full = s.out.len() >= OUT_FULL;
        let Some(slot) = s.streams.iter_mut().find(|x| x.id == id) else {
            return Poll::Ready(Err(Failed::Broken("stream forgotten".into())));
        };
        if let Some(why) = &slot.failed {
            return Poll::Ready(Err(why.clone()));
        }
        if slot.local_done {
            return Poll::Ready(Err(Failed::Broken("the peer ended the stream".into())));
        }
        if data.is_empty() {
            if end {
                slot.local_done = true;
                frame::write_data(&mut s.out, id, b"", true);
                s.wake_driver();
            }
            return Poll::Ready(Ok(()));
        }
        let n = (data.len() as i64)
            .min(conn_window)
            .min(slot.send_window)
            .min(max_frame);
        if n <= 0 || full {
            s.senders.push(cx.waker().clone());
            s.wake_driver();
            return Poll::Pending;
        }
        let n = n as usize;
        slot.send_window -= n as i64;
        s.send_window -= n as i64;
        let last = end && n == data.len();
        if last {
            slot.local_done = true;
        }
        let piece = data.split_to(n);
        frame::write_data(&mut s.out, id, &piece, last);
        s.wake_driver();
        if last {
            return Poll::Ready(Ok(()));
        }
    }
}

/// The HTTP/1.1 head `h1` (as [`crate::upstream::outgoing::Outgoing::encode`] wrote it,
/// so that what is forwarded, added and dropped is decided in one place for both
/// protocols) as an HTTP/2 field list: the request line and `host` as pseudo-fields,
/// the connection-specific fields dropped (RFC 9113 section 8.2.2), `te` only as
/// `trailers` (and added so for gRPC).
pub(crate) fn request_fields(h1: &[u8], https: bool) -> Vec<(&[u8], &[u8])> {
    let mut lines = h1
        .split(|&b| b == b'\n')
        .map(|l| l.strip_suffix(b"\r").unwrap_or(l));
    let mut out = Vec::with_capacity(24);
    let line = lines.next().unwrap_or_default();
    let mut parts = line.splitn(3, |&b| b == b' ');
    let method = parts.next().unwrap_or_default();
    let path = parts.next().unwrap_or_default();
    out.push((&b":method"[..], method));
    out.push((b":scheme", if https { b"https" } else { b"http" }));
    out.push((b":authority", b""));
    out.push((b":path", path));
    for line in lines {
        let Some(colon) = line.iter().position(|&b| b == b':') else {
            continue;
        };
        let name = &line[..colon];
        let value = line[colon + 1..].trim_ascii();
        let lower = |n: &[u8]| name.eq_ignore_ascii_case(n);
        if lower(b"host") {
            out[2].1 = value;
        } else if lower(b"connection")
            || lower(b"keep-alive")
            || lower(b"proxy-connection")
            || lower(b"transfer-encoding")
            || lower(b"upgrade")
            || (lower(b"te") && !value.eq_ignore_ascii_case(b"trailers"))
        {
            continue;
        } else {
            out.push((name, value));
        }
    }
    // gRPC servers want `te: trailers` (the client's was dropped with the hop-by-hop
    // fields), as nginx's grpc_pass sends it.
    let grpc = out.iter().any(|(n, v)| {
        n.eq_ignore_ascii_case(b"content-type") && v.starts_with(b"application/grpc")
    });
    if grpc && !out.iter().any(|(n, _)| n.eq_ignore_ascii_case(b"te")) {
        out.push((b"te", b"trailers"));
    }
    out
}

/// An active health check over HTTP/2 on a connection of its own (`stream`, already
/// open): `GET path` as stream 1, and the status of its response head.
pub(crate) async fn check(
    mut stream: crate::upstream::stream::Stream,
    authority: &str,
    path: &str,
    https: bool,
) -> std::io::Result<u16> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let bad = |why: String| std::io::Error::new(std::io::ErrorKind::InvalidData, why);
    let mut s = Shared::new(1);
    let scheme: &[u8] = if https { b"https" } else { b"http" };
    let fields: [(&[u8], &[u8]); 5] = [
        (b":method", b"GET"),
        (b":scheme", scheme),
        (b":authority", authority.as_bytes()),
        (b":path", path.as_bytes()),
        (b"user-agent", b"tessera-health-check"),
    ];
    let id = s.open(fields.into_iter(), true);
    let mut read = bytes::BytesMut::with_capacity(16 * 1024);
    let mut total = 0;
    loop {
        if !s.out.is_empty() {
            stream.write_all(&s.out).await?;
            stream.flush().await?;
            s.out.clear();
        }
        if let Some(slot) = s.slot(id) {
            if let Some((status, _)) = slot.head {
                return Ok(status);
            }
            if let Some(why) = &slot.failed {
                return Err(bad(why.to_string()));
            }
        }
        let n = stream.read_buf(&mut read).await?;
        total += n;
        if n == 0 || total > 256 * 1024 {
            return Err(bad("no HTTP/2 response head".into()));
        }
        s.feed(&mut read).map_err(bad)?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_http1_head_becomes_http2_fields() {
        let h1 = b"POST /api?x=1 HTTP/1.1\r\nhost: app.test\r\nconnection: keep-alive\r\n\
            transfer-encoding: chunked\r\nte: gzip\r\ncontent-type: application/grpc\r\n\
            x-forwarded-for: 10.0.0.1\r\n\r\n";
        let fields: Vec<(String, String)> = request_fields(h1, false)
            .into_iter()
            .map(|(n, v)| {
                let s = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
                (s(n), s(v))
            })
            .collect();
        let want = [
            (":method", "POST"),
            (":scheme", "http"),
            (":authority", "app.test"),
            (":path", "/api?x=1"),
            ("content-type", "application/grpc"),
            ("x-forwarded-for", "10.0.0.1"),
            ("te", "trailers"),
        ];
        let want: Vec<(String, String)> = want
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect();
        assert_eq!(fields, want);
    }

    #[test]
    fn goaway_fails_the_streams_above_its_last_as_unprocessed() {
        let mut s = Shared::new(100);
        let head: [(&[u8], &[u8]); 4] = [
            (b":method", b"GET"),
            (b":scheme", b"http"),
            (b":authority", b"a"),
            (b":path", b"/"),
        ];
        let one = s.open(head.into_iter(), true);
        let three = s.open(head.into_iter(), true);
        let mut peer = Vec::new();
        frame::write_goaway(&mut peer, one, frame::Reason::NO_ERROR, b"");
        let mut read = bytes::BytesMut::from(&peer[..]);
        s.feed(&mut read).unwrap();
        assert!(read.is_empty());
        assert_eq!(s.room(), 0);
        assert!(s.slot(one).unwrap().failed.is_none());
        assert!(matches!(
            s.slot(three).unwrap().failed,
            Some(Failed::Unprocessed)
        ));
    }
}
