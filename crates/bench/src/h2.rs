//! HTTP/2 on a load connection (`--http2`): prior knowledge on cleartext, ALPN `h2` over
//! TLS. The frames and HPACK are `h2codec`'s, the server's own codec; what is here is the
//! client's side of a connection: streams opened in order, responses framed out of order
//! (`:status` from the HEADERS, bodies skipped as they arrive, never buffered whole), the
//! peer's SETTINGS, PING, GOAWAY and RST_STREAM, and flow control both ways.
//!
//! Flow control: the connection and every stream announce windows of 2^31-1 bytes, as
//! h2load's `-w 30 -W 30` nearly does, so a WINDOW_UPDATE goes out only after a GiB of a
//! response; request bodies go out as the peer's windows allow.
//!
//! Request heads are HPACK-encoded per request with the connection's dynamic table, as
//! h2load and browsers do: after the first request, `:authority`, `:path` and
//! `user-agent` are one indexed byte each. An earlier version encoded each head once, as
//! literals that never touch the table, to spend nothing per request on HPACK; against
//! h2o, the server then decoded ~60 bytes of literals per request and answered 13-16%
//! fewer requests a second than under h2load (bench/loadgen-h2.sh, 2026-11-28). The
//! encoding costs the client less than that difference cost the server.

use std::collections::VecDeque;

use h2codec::frame::{self, flag, kind, setting, Frame, Head, Reason, HEAD_LEN};
use h2codec::hpack::{Decoder, Encoder};

use crate::wire::Wire;

/// The connection preface every client starts with (RFC 9113 section 3.4).
const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// The windows this client announces: the largest a window may be.
const WINDOW: u32 = (1 << 31) - 1;
/// A window is topped up once this much of it was used.
const REFILL: u64 = 1 << 30;
/// The frame size we accept: the protocol's default.
const MAX_FRAME: u32 = 16_384;
/// The largest header list of a response we decode.
const MAX_LIST: usize = 256 * 1024;

/// A request's head as HTTP/2 fields (lower-case names, pseudo-fields first), to be
/// HPACK-encoded per request by [`Conn::request`].
pub(crate) fn head_fields(
    method: &str,
    https: bool,
    authority: &str,
    path: &str,
    headers: &[(String, String)],
    body_len: Option<usize>,
) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut out = Vec::with_capacity(8);
    let mut field = |name: &[u8], value: &[u8]| out.push((name.to_vec(), value.to_vec()));
    field(b":method", method.as_bytes());
    let scheme: &[u8] = if https { b"https" } else { b"http" };
    field(b":scheme", scheme);
    let authority = headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case("host"))
        .map_or(authority, |(_, v)| v.trim());
    field(b":authority", authority.as_bytes());
    field(b":path", path.as_bytes());
    let has = |name: &str| headers.iter().any(|(n, _)| n.eq_ignore_ascii_case(name));
    if !has("user-agent") {
        field(b"user-agent", b"tessera-bench");
    }
    for (name, value) in headers {
        let lower = name.to_ascii_lowercase();
        // Connection-specific fields have no place in HTTP/2 (RFC 9113 section 8.2.2).
        if matches!(
            lower.as_str(),
            "host"
                | "connection"
                | "keep-alive"
                | "proxy-connection"
                | "transfer-encoding"
                | "upgrade"
        ) {
            continue;
        }
        field(lower.as_bytes(), value.trim().as_bytes());
    }
    if let Some(n) = body_len {
        if !has("content-length") {
            field(b"content-length", n.to_string().as_bytes());
        }
    }
    out
}

/// What a connection's frames brought.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Event {
    /// The stream's response is complete, with this status.
    Complete { stream: u32, status: u16 },
    /// The server reset the stream.
    Reset { stream: u32 },
    /// The server is going away: streams above `last_stream` were not processed.
    GoAway { last_stream: u32 },
}

/// Why the connection cannot go on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ProtocolError;

#[derive(Debug, Clone, Copy)]
struct Stream {
    id: u32,
    /// The final status, once its HEADERS came.
    status: u16,
    /// Body bytes received since the stream's window was last topped up.
    received: u64,
    /// What the peer lets us send on it.
    send_window: i64,
}

/// A request body not yet sent in full.
#[derive(Debug, Clone, Copy)]
struct Pending {
    stream: u32,
    wire: u16,
    sent: usize,
}

/// One HTTP/2 connection's state (see the module docs).
pub(crate) struct Conn {
    decoder: Decoder,
    encoder: Encoder,
    next_stream: u32,
    streams: Vec<Stream>,
    /// The peer's SETTINGS_MAX_CONCURRENT_STREAMS.
    peer_max_streams: u32,
    /// The peer's SETTINGS_MAX_FRAME_SIZE.
    peer_max_frame: u32,
    /// The peer's SETTINGS_INITIAL_WINDOW_SIZE.
    peer_initial_window: i64,
    /// What the peer lets us send on the connection.
    send_window: i64,
    /// Response bytes received since the connection's window was last topped up.
    received: u64,
    /// A DATA frame's payload still to skip, and what ends with it.
    data_left: u32,
    data_stream: u32,
    data_end: bool,
    /// A header block split over CONTINUATION frames, and its stream.
    block: Vec<u8>,
    block_stream: u32,
    block_end: bool,
    pending: VecDeque<Pending>,
    going_away: bool,
}

impl Conn {
    /// A new connection; its preface, SETTINGS and window update are appended to `out`.
    pub(crate) fn new(out: &mut Vec<u8>) -> Conn {
        out.extend_from_slice(PREFACE);
        frame::write_settings(
            out,
            &[
                (setting::ENABLE_PUSH, 0),
                (setting::INITIAL_WINDOW_SIZE, WINDOW),
                (setting::MAX_HEADER_LIST_SIZE, MAX_LIST as u32),
            ],
        );
        frame::write_window_update(out, 0, WINDOW - 65_535);
        Conn {
            decoder: Decoder::new(4096),
            encoder: Encoder::new(),
            next_stream: 1,
            streams: Vec::new(),
            peer_max_streams: u32::MAX,
            peer_max_frame: MAX_FRAME,
            peer_initial_window: 65_535,
            send_window: 65_535,
            received: 0,
            data_left: 0,
            data_stream: 0,
            data_end: false,
            block: Vec::new(),
            block_stream: 0,
            block_end: false,
            pending: VecDeque::new(),
            going_away: false,
        }
    }

    /// How many more streams the peer lets us open now.
    pub(crate) fn room(&self) -> usize {
        if self.going_away || self.next_stream > (1 << 31) - 2 {
            return 0;
        }
        (self.peer_max_streams as usize).saturating_sub(self.streams.len())
    }

    /// Opens a stream for request `wire` of `wires`, appending its frames to `out`;
    /// returns its id.
    pub(crate) fn request(&mut self, wires: &[Wire], wire: u16, out: &mut Vec<u8>) -> u32 {
        let id = self.next_stream;
        self.next_stream += 2;
        let w = &wires[wire as usize];
        let body = w.body.as_deref().filter(|b| !b.is_empty());
        let at = frame::begin_headers(out);
        let mut block = self.encoder.block(out);
        for (name, value) in &w.fields {
            block.field(name, value);
        }
        block.finish();
        frame::finish_headers(out, at, id, body.is_none(), self.peer_max_frame);
        self.streams.push(Stream {
            id,
            status: 0,
            received: 0,
            send_window: self.peer_initial_window,
        });
        if body.is_some() {
            self.pending.push_back(Pending {
                stream: id,
                wire,
                sent: 0,
            });
            self.send_bodies(wires, out);
        }
        id
    }

    /// Sends what the windows allow of the bodies waiting, oldest first.
    fn send_bodies(&mut self, wires: &[Wire], out: &mut Vec<u8>) {
        while let Some(p) = self.pending.front_mut() {
            let body = wires[p.wire as usize].body.as_deref().unwrap_or_default();
            let Some(s) = self.streams.iter_mut().find(|s| s.id == p.stream) else {
                // Reset meanwhile.
                self.pending.pop_front();
                continue;
            };
            let left = body.len() - p.sent;
            let n = (left as i64)
                .min(self.send_window)
                .min(s.send_window)
                .min(self.peer_max_frame as i64)
                .max(0) as usize;
            if n == 0 {
                return;
            }
            let end = n == left;
            frame::write_data(out, p.stream, &body[p.sent..p.sent + n], end);
            p.sent += n;
            s.send_window -= n as i64;
            self.send_window -= n as i64;
            if end {
                self.pending.pop_front();
            }
        }
    }

    /// Frames what `buf` holds, appending to `out` what must be answered (SETTINGS and
    /// PING acknowledgements, window updates, bodies the windows now allow) and handing
    /// each event to `event`. Returns the bytes used; the rest is an incomplete frame.
    pub(crate) fn feed(
        &mut self,
        buf: &[u8],
        wires: &[Wire],
        out: &mut Vec<u8>,
        event: &mut impl FnMut(Event),
    ) -> Result<usize, ProtocolError> {
        let mut at = 0;
        loop {
            if self.data_left > 0 {
                let n = (self.data_left as usize).min(buf.len() - at);
                if n == 0 {
                    return Ok(at);
                }
                at += n;
                self.data_left -= n as u32;
                if self.data_left == 0 {
                    self.data_done(event);
                }
                continue;
            }
            let Some(head) = buf[at..].first_chunk::<HEAD_LEN>() else {
                return Ok(at);
            };
            let head = Head::parse(head);
            if head.len > MAX_FRAME {
                return Err(ProtocolError);
            }
            if head.kind == kind::DATA && !self.in_block() {
                // Skipped as it arrives: a body is never held whole.
                if head.stream == 0 {
                    return Err(ProtocolError);
                }
                at += HEAD_LEN;
                self.count_received(head.stream, head.len as u64, out);
                self.data_left = head.len;
                self.data_stream = head.stream;
                self.data_end = head.has(flag::END_STREAM);
                if head.len == 0 {
                    self.data_done(event);
                }
                continue;
            }
            let frame = match frame::parse(&buf[at..], MAX_FRAME) {
                Ok(Some((frame, used))) => {
                    at += used;
                    frame
                }
                Ok(None) => return Ok(at),
                Err(e) if e.is_connection_error() => return Err(ProtocolError),
                Err(_) => {
                    // A stream error: the frame is skipped, its stream reset by us.
                    at += HEAD_LEN + head.len as usize;
                    frame::write_rst_stream(out, head.stream, Reason::PROTOCOL_ERROR);
                    self.end_stream(head.stream);
                    event(Event::Reset {
                        stream: head.stream,
                    });
                    continue;
                }
            };
            self.on_frame(frame, wires, out, event)?;
        }
    }

    fn in_block(&self) -> bool {
        self.block_stream != 0
    }

    fn data_done(&mut self, event: &mut impl FnMut(Event)) {
        if self.data_end {
            self.finish(self.data_stream, event);
        }
    }

    /// Counts `n` bytes of DATA against both windows, topping them up past [`REFILL`].
    fn count_received(&mut self, stream: u32, n: u64, out: &mut Vec<u8>) {
        self.received += n;
        if self.received >= REFILL {
            frame::write_window_update(out, 0, self.received as u32);
            self.received = 0;
        }
        if let Some(s) = self.streams.iter_mut().find(|s| s.id == stream) {
            s.received += n;
            if s.received >= REFILL {
                frame::write_window_update(out, stream, s.received as u32);
                s.received = 0;
            }
        }
    }

    fn on_frame(
        &mut self,
        frame: Frame<'_>,
        wires: &[Wire],
        out: &mut Vec<u8>,
        event: &mut impl FnMut(Event),
    ) -> Result<(), ProtocolError> {
        if self.in_block() && !matches!(frame, Frame::Continuation { .. }) {
            return Err(ProtocolError);
        }
        match frame {
            Frame::Headers {
                stream,
                end_stream,
                end_headers,
                block,
                ..
            } => {
                self.block.clear();
                self.block.extend_from_slice(block);
                self.block_stream = stream;
                self.block_end = end_stream;
                if end_headers {
                    self.on_block(event)?;
                }
            }
            Frame::Continuation {
                stream,
                end_headers,
                block,
            } => {
                if stream != self.block_stream {
                    return Err(ProtocolError);
                }
                self.block.extend_from_slice(block);
                if end_headers {
                    self.on_block(event)?;
                }
            }
            Frame::Settings { ack: false, params } => {
                for (id, value) in params {
                    match id {
                        setting::MAX_CONCURRENT_STREAMS => self.peer_max_streams = value,
                        setting::MAX_FRAME_SIZE => self.peer_max_frame = value,
                        setting::HEADER_TABLE_SIZE => {
                            self.encoder.set_max_table_size(value as usize)
                        }
                        setting::INITIAL_WINDOW_SIZE => {
                            let delta = value as i64 - self.peer_initial_window;
                            self.peer_initial_window = value as i64;
                            for s in &mut self.streams {
                                s.send_window += delta;
                            }
                        }
                        _ => {}
                    }
                }
                frame::write_settings_ack(out);
                self.send_bodies(wires, out);
            }
            Frame::Settings { ack: true, .. } => {}
            Frame::Ping {
                ack: false,
                payload,
            } => frame::write_ping_ack(out, payload),
            Frame::Ping { ack: true, .. } => {}
            Frame::WindowUpdate { stream, increment } => {
                if stream == 0 {
                    self.send_window += increment as i64;
                } else if let Some(s) = self.streams.iter_mut().find(|s| s.id == stream) {
                    s.send_window += increment as i64;
                }
                self.send_bodies(wires, out);
            }
            Frame::RstStream { stream, .. } => {
                if self.end_stream(stream) {
                    event(Event::Reset { stream });
                }
            }
            Frame::GoAway { last_stream, .. } => {
                self.going_away = true;
                event(Event::GoAway { last_stream });
            }
            // The server may not push (we said so); a PUSH_PROMISE is a protocol error.
            Frame::PushPromise { .. } => return Err(ProtocolError),
            Frame::Data { .. } | Frame::Priority { .. } | Frame::Unknown { .. } => {}
        }
        Ok(())
    }

    /// A whole header block: `:status` of a response or nothing of trailers.
    fn on_block(&mut self, event: &mut impl FnMut(Event)) -> Result<(), ProtocolError> {
        let stream = std::mem::take(&mut self.block_stream);
        let mut status = 0u16;
        let decoded = self.decoder.decode(&self.block, MAX_LIST, |name, value| {
            if name == b":status" {
                status = std::str::from_utf8(value)
                    .ok()
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(0);
            }
            Ok::<(), ()>(())
        });
        if decoded.is_err() {
            return Err(ProtocolError);
        }
        if let Some(s) = self.streams.iter_mut().find(|s| s.id == stream) {
            // An interim response (1xx) is followed by the final one.
            if status >= 200 || (status != 0 && s.status == 0 && status < 100) {
                s.status = status;
            }
        }
        if self.block_end {
            self.finish(stream, event);
        }
        Ok(())
    }

    /// The stream ended from the server's side: its response is complete.
    fn finish(&mut self, stream: u32, event: &mut impl FnMut(Event)) {
        if let Some(i) = self.streams.iter().position(|s| s.id == stream) {
            let s = self.streams.swap_remove(i);
            event(Event::Complete {
                stream,
                status: s.status,
            });
        }
    }

    /// Forgets a stream; whether it was open.
    fn end_stream(&mut self, stream: u32) -> bool {
        match self.streams.iter().position(|s| s.id == stream) {
            Some(i) => {
                self.streams.swap_remove(i);
                true
            }
            None => false,
        }
    }

    /// Streams above `last_stream` that a GOAWAY said were not processed: forgotten.
    pub(crate) fn drop_unprocessed(&mut self, last_stream: u32) {
        self.streams.retain(|s| s.id <= last_stream);
        self.pending.retain(|p| p.stream <= last_stream);
    }

    /// Whether the server said it is going away.
    pub(crate) fn going_away(&self) -> bool {
        self.going_away
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use h2codec::hpack::Encoder;

    fn wires() -> Vec<Wire> {
        vec![Wire {
            bytes: Vec::new(),
            fields: head_fields("GET", true, "h:1", "/x", &[], None),
            head: false,
            body: None,
        }]
    }

    fn response(out: &mut Vec<u8>, enc: &mut Encoder, stream: u32, status: u16, body: &[u8]) {
        let mut block = Vec::new();
        enc.response(status, &mut block).finish();
        frame::write_headers(out, stream, &block, body.is_empty(), MAX_FRAME);
        let chunks: Vec<&[u8]> = body.chunks(MAX_FRAME as usize).collect();
        for (i, chunk) in chunks.iter().enumerate() {
            frame::write_data(out, stream, chunk, i + 1 == chunks.len());
        }
    }

    #[test]
    fn frames_responses_out_of_order_and_across_reads() {
        let wires = wires();
        let mut out = Vec::new();
        let mut c = Conn::new(&mut out);
        assert!(out.starts_with(PREFACE));
        out.clear();
        let a = c.request(&wires, 0, &mut out);
        let b = c.request(&wires, 0, &mut out);
        assert_eq!((a, b), (1, 3));
        let mut server = Vec::new();
        frame::write_settings(&mut server, &[(setting::MAX_CONCURRENT_STREAMS, 100)]);
        let mut enc = Encoder::new();
        response(&mut server, &mut enc, 3, 404, b"");
        response(&mut server, &mut enc, 1, 200, &[7; 20_000]);
        let mut events = Vec::new();
        let mut at = 0;
        // Fed a few bytes at a time, as reads may bring them.
        for end in (0..=server.len()).step_by(7).chain([server.len()]) {
            at += c
                .feed(&server[at..end], &wires, &mut out, &mut |e| events.push(e))
                .unwrap();
        }
        assert_eq!(at, server.len());
        assert_eq!(
            events,
            vec![
                Event::Complete {
                    stream: 3,
                    status: 404
                },
                Event::Complete {
                    stream: 1,
                    status: 200
                }
            ]
        );
        assert_eq!(c.room(), 100);
    }

    #[test]
    fn resets_and_goaway_are_reported() {
        let wires = wires();
        let mut out = Vec::new();
        let mut c = Conn::new(&mut out);
        c.request(&wires, 0, &mut out);
        c.request(&wires, 0, &mut out);
        let mut server = Vec::new();
        frame::write_rst_stream(&mut server, 1, Reason::REFUSED_STREAM);
        frame::write_goaway(&mut server, 1, Reason::NO_ERROR, b"");
        let mut events = Vec::new();
        let used = c
            .feed(&server, &wires, &mut out, &mut |e| events.push(e))
            .unwrap();
        assert_eq!(used, server.len());
        assert_eq!(
            events,
            vec![Event::Reset { stream: 1 }, Event::GoAway { last_stream: 1 }]
        );
        assert_eq!(c.room(), 0);
        c.drop_unprocessed(1);
        assert!(c.streams.is_empty());
    }

    #[test]
    fn bodies_wait_for_the_window() {
        let body = vec![1u8; 100_000];
        let wires = vec![Wire {
            bytes: Vec::new(),
            fields: head_fields("POST", false, "h", "/", &[], Some(body.len())),
            head: false,
            body: Some(body),
        }];
        let mut out = Vec::new();
        let mut c = Conn::new(&mut out);
        out.clear();
        c.request(&wires, 0, &mut out);
        // The default window: 65,535 bytes go out, in frames of at most 16 KiB.
        let mut sent = 0;
        let mut at = 0;
        while let Ok(Some((f, used))) = frame::parse(&out[at..], 1 << 20) {
            if let Frame::Data { data, .. } = f {
                sent += data.len();
            }
            at += used;
        }
        assert_eq!(sent, 65_535);
        out.clear();
        let mut server = Vec::new();
        frame::write_window_update(&mut server, 0, 50_000);
        frame::write_window_update(&mut server, 1, 50_000);
        c.feed(&server, &wires, &mut out, &mut |_| {}).unwrap();
        let mut rest = 0;
        let mut ended = false;
        let mut at = 0;
        while let Ok(Some((f, used))) = frame::parse(&out[at..], 1 << 20) {
            if let Frame::Data {
                data, end_stream, ..
            } = f
            {
                rest += data.len();
                ended |= end_stream;
            }
            at += used;
        }
        assert_eq!((sent + rest, ended), (100_000, true));
    }
}
