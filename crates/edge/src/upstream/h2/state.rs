//! One HTTP/2 connection's state, shared by its driver task (which owns the socket) and
//! the requests whose streams it carries: the frames read are applied here (response
//! heads, bodies and trailers handed to their streams, the peer's SETTINGS, windows,
//! PING and GOAWAY), and what the requests and the state have to say goes into `out`,
//! which the driver writes. A worker is single threaded: one `RefCell`, no lock.
//!
//! Flow control: each stream announces [`STREAM_WINDOW`] and is topped up as its reader
//! takes the body (a slow client holds its stream's origin back, not the others); the
//! connection announces [`CONNECTION_WINDOW`], topped up as DATA arrives (what is
//! buffered is bounded by the streams' windows).

use std::collections::VecDeque;
use std::task::Waker;

use bytes::{Bytes, BytesMut};
use h2codec::frame::{self, setting, Frame, Head, Reason, HEAD_LEN};
use h2codec::hpack::{Decoder, Encoder};
use handler::FieldList;

/// The connection preface every client starts with (RFC 9113 section 3.4).
const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// Each stream's receive window: 256 KiB, so that a body flows at a LAN's speed without
/// waiting on window updates, while a hundred stalled streams hold 25 MiB at most.
pub(super) const STREAM_WINDOW: u32 = 256 * 1024;
/// The connection's receive window.
const CONNECTION_WINDOW: u32 = 16 * 1024 * 1024;
/// The frame size we accept: the protocol's default.
const MAX_FRAME: u32 = 16_384;
/// The largest response header list we decode (as `MAX_HEAD` for HTTP/1.1).
const MAX_LIST: usize = 64 * 1024;
/// Bytes waiting in `out` past which a request body's sender waits for the driver.
pub(super) const OUT_FULL: usize = 256 * 1024;

/// Why a stream or the whole connection failed.
#[derive(Debug, Clone)]
pub(crate) enum Failed {
    /// The peer never saw the request: a GOAWAY's last stream is below it, or it was
    /// refused (REFUSED_STREAM). Safe to send again on another connection (RFC 9113
    /// section 8.7).
    Unprocessed,
    /// The connection could not be opened.
    Connect(crate::error::UpstreamError),
    /// The connection broke, or the peer reset the stream.
    Broken(String),
    /// The client's request body broke off (it went away, or passed a limit).
    ClientBody(String),
}

impl std::fmt::Display for Failed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failed::Unprocessed => f.write_str("the peer did not process the request"),
            Failed::Connect(e) => write!(f, "{e}"),
            Failed::Broken(why) => f.write_str(why),
            Failed::ClientBody(why) => write!(f, "the client's body: {why}"),
        }
    }
}

pub(super) struct Slot {
    pub(super) id: u32,
    /// The final response head: status and fields, until the request takes it.
    pub(super) head: Option<(u16, FieldList)>,
    /// The final response head came (DATA and trailers may follow).
    responded: bool,
    pub(super) data: VecDeque<Bytes>,
    pub(super) trailers: Option<FieldList>,
    /// END_STREAM came from the peer.
    pub(super) ended: bool,
    pub(super) failed: Option<Failed>,
    /// The request's task, waiting for its head or body.
    pub(super) waker: Option<Waker>,
    /// What the peer lets us send on it.
    pub(super) send_window: i64,
    /// Body bytes taken by the reader and not yet given back by a WINDOW_UPDATE.
    pub(super) unacked: u32,
    /// We sent END_STREAM (or reset it).
    pub(super) local_done: bool,
}

pub(crate) struct Shared {
    pub(super) out: Vec<u8>,
    encoder: Encoder,
    decoder: Decoder,
    next_stream: u32,
    pub(super) streams: Vec<Slot>,
    /// `max_streams_per_connection`.
    pub(super) max_streams: u32,
    peer_max_streams: u32,
    pub(super) peer_max_frame: u32,
    peer_initial_window: i64,
    pub(super) send_window: i64,
    /// Connection-level bytes received since the last WINDOW_UPDATE.
    received: u32,
    block: Vec<u8>,
    block_stream: u32,
    block_end: bool,
    /// The peer's GOAWAY: no new stream goes on this connection.
    pub(super) going_away: bool,
    /// The connection is over (or never opened): every stream has failed with this.
    pub(super) closed: Option<Failed>,
    /// The driver, to write `out` or to notice the end.
    pub(super) driver: Option<Waker>,
    /// Requests waiting to send body bytes: on a window, or on `out` draining.
    pub(super) senders: Vec<Waker>,
    /// Frames received since the driver last looked (PING liveness).
    pub(super) heard: bool,
    /// Streams opened on this connection, ever.
    pub(super) opened: u64,
}

impl Shared {
    /// A new connection's state, its preface and SETTINGS already in `out`.
    pub(super) fn new(max_streams: u32) -> Shared {
        let mut out = Vec::with_capacity(16 * 1024);
        out.extend_from_slice(PREFACE);
        frame::write_settings(
            &mut out,
            &[
                (setting::ENABLE_PUSH, 0),
                (setting::INITIAL_WINDOW_SIZE, STREAM_WINDOW),
                (setting::MAX_HEADER_LIST_SIZE, MAX_LIST as u32),
            ],
        );
        frame::write_window_update(&mut out, 0, CONNECTION_WINDOW - 65_535);
        Shared {
            out,
            encoder: Encoder::new(),
            decoder: Decoder::new(4096),
            next_stream: 1,
            streams: Vec::new(),
            max_streams,
            peer_max_streams: u32::MAX,
            peer_max_frame: MAX_FRAME,
            peer_initial_window: 65_535,
            send_window: 65_535,
            received: 0,
            block: Vec::new(),
            block_stream: 0,
            block_end: false,
            going_away: false,
            closed: None,
            driver: None,
            senders: Vec::new(),
            heard: false,
            opened: 0,
        }
    }

    /// How many more streams may be opened now.
    /// The peer allows no stream on this connection at all (SETTINGS_MAX_CONCURRENT_STREAMS
    /// 0) and none is open: it is of no use, and kept it would only hold a socket.
    pub(super) fn useless(&self) -> bool {
        self.peer_max_streams == 0 && self.streams.is_empty()
    }

    pub(super) fn room(&self) -> u32 {
        if self.going_away || self.closed.is_some() || self.next_stream > (1 << 31) - 2 {
            return 0;
        }
        let max = self.max_streams.min(self.peer_max_streams);
        max.saturating_sub(self.streams.len() as u32)
    }

    /// Opens a stream with the head `fields` (pseudo-fields first, lower-case names),
    /// END_STREAM on it when there is no body; returns its id.
    pub(super) fn open<'f>(
        &mut self,
        fields: impl Iterator<Item = (&'f [u8], &'f [u8])>,
        end_stream: bool,
    ) -> u32 {
        let id = self.next_stream;
        self.next_stream += 2;
        self.opened += 1;
        let at = frame::begin_headers(&mut self.out);
        let mut block = self.encoder.block(&mut self.out);
        for (name, value) in fields {
            block.field_any_case(name, value);
        }
        block.finish();
        frame::finish_headers(&mut self.out, at, id, end_stream, self.peer_max_frame);
        self.streams.push(Slot {
            id,
            head: None,
            responded: false,
            data: VecDeque::new(),
            trailers: None,
            ended: false,
            failed: None,
            waker: None,
            send_window: self.peer_initial_window,
            unacked: 0,
            local_done: end_stream,
        });
        self.wake_driver();
        id
    }

    pub(super) fn slot(&mut self, id: u32) -> Option<&mut Slot> {
        self.streams.iter_mut().find(|s| s.id == id)
    }

    pub(super) fn wake_driver(&mut self) {
        if let Some(w) = self.driver.take() {
            w.wake();
        }
    }

    fn wake_senders(&mut self) {
        for w in self.senders.drain(..) {
            w.wake();
        }
    }

    /// A reader took `n` bytes of stream `id`'s body: its window is given back once half
    /// of it was used.
    pub(super) fn consumed(&mut self, id: u32, n: usize) {
        let Some(s) = self.slot(id) else { return };
        s.unacked += n as u32;
        if s.unacked >= STREAM_WINDOW / 2 && !s.ended {
            let n = std::mem::take(&mut s.unacked);
            frame::write_window_update(&mut self.out, id, n);
            self.wake_driver();
        }
    }

    /// The stream's handle is gone: forgotten, reset if it is still open either way.
    pub(super) fn forget(&mut self, id: u32) {
        let Some(i) = self.streams.iter().position(|s| s.id == id) else {
            return;
        };
        let s = self.streams.swap_remove(i);
        if self.closed.is_none() && (!s.ended || !s.local_done) {
            frame::write_rst_stream(&mut self.out, id, Reason::CANCEL);
        }
        // Room for another request, or the end of a connection going away.
        self.wake_driver();
        self.wake_senders();
    }

    /// The connection is over: every stream fails with `why`.
    pub(super) fn close(&mut self, why: Failed) {
        if self.closed.is_some() {
            return;
        }
        self.closed = Some(why.clone());
        for s in &mut self.streams {
            if s.failed.is_none() && !s.ended {
                s.failed = Some(why.clone());
            }
            if let Some(w) = s.waker.take() {
                w.wake();
            }
        }
        self.wake_senders();
    }

    /// Applies the frames `read` holds, leaving an incomplete one; DATA payloads are
    /// split off the buffer and handed on without a copy. `Err` ends the connection.
    pub(super) fn feed(&mut self, read: &mut BytesMut) -> Result<(), String> {
        loop {
            let Some(head) = read.first_chunk::<HEAD_LEN>() else {
                return Ok(());
            };
            let head = Head::parse(head);
            if head.len > MAX_FRAME {
                return Err(format!(
                    "a frame of {} bytes (at most {MAX_FRAME})",
                    head.len
                ));
            }
            let whole = HEAD_LEN + head.len as usize;
            if read.len() < whole {
                read.reserve(whole - read.len());
                return Ok(());
            }
            self.heard = true;
            let frame = match frame::parse(&read[..whole], MAX_FRAME) {
                Ok(Some((frame, _))) => frame,
                Ok(None) => return Ok(()),
                Err(e) if e.is_connection_error() => return Err(format!("frame: {e:?}")),
                Err(_) => {
                    // A stream error: that stream is reset, the connection goes on.
                    let _ = read.split_to(whole);
                    frame::write_rst_stream(&mut self.out, head.stream, Reason::PROTOCOL_ERROR);
                    self.fail_stream(head.stream, Failed::Broken("a malformed frame".into()));
                    continue;
                }
            };
            if let Frame::Data {
                stream,
                end_stream,
                data,
                flow_len,
            } = frame
            {
                if self.block_stream != 0 {
                    return Err("DATA inside a header block".into());
                }
                let start = data.as_ptr() as usize - read.as_ptr() as usize;
                let len = data.len();
                let frame_bytes = read.split_to(whole).freeze();
                self.on_data(
                    stream,
                    frame_bytes.slice(start..start + len),
                    flow_len,
                    end_stream,
                )?;
                continue;
            }
            let result = self.on_frame(frame);
            let _ = read.split_to(whole);
            result?;
        }
    }

    fn on_data(&mut self, id: u32, data: Bytes, flow_len: u32, end: bool) -> Result<(), String> {
        self.received += flow_len;
        if self.received >= CONNECTION_WINDOW / 2 {
            frame::write_window_update(&mut self.out, 0, std::mem::take(&mut self.received));
            self.wake_driver();
        }
        let Some(s) = self.slot(id) else {
            // A stream we reset or forgot: its bytes are dropped.
            return Ok(());
        };
        if !s.responded || s.ended {
            return Err(format!(
                "DATA on stream {id} before its head or after its end"
            ));
        }
        // Padding counts against the window but never reaches the reader.
        s.unacked += flow_len - data.len() as u32;
        if !data.is_empty() {
            s.data.push_back(data);
        }
        s.ended |= end;
        if let Some(w) = s.waker.take() {
            w.wake();
        }
        Ok(())
    }

    fn on_frame(&mut self, frame: Frame<'_>) -> Result<(), String> {
        if self.block_stream != 0 && !matches!(frame, Frame::Continuation { .. }) {
            return Err("a frame inside a header block".into());
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
                    self.on_block()?;
                }
            }
            Frame::Continuation {
                stream,
                end_headers,
                block,
            } => {
                if stream != self.block_stream {
                    return Err("CONTINUATION of another stream".into());
                }
                self.block.extend_from_slice(block);
                if self.block.len() > MAX_LIST * 2 {
                    return Err("a header block too large".into());
                }
                if end_headers {
                    self.on_block()?;
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
                frame::write_settings_ack(&mut self.out);
                self.wake_senders();
            }
            Frame::Settings { ack: true, .. } => {}
            Frame::Ping {
                ack: false,
                payload,
            } => frame::write_ping_ack(&mut self.out, payload),
            Frame::Ping { ack: true, .. } => {}
            Frame::WindowUpdate { stream, increment } => {
                if stream == 0 {
                    self.send_window += increment as i64;
                } else if let Some(s) = self.slot(stream) {
                    s.send_window += increment as i64;
                }
                self.wake_senders();
            }
            Frame::RstStream { stream, reason } => {
                let why = if reason == Reason::REFUSED_STREAM {
                    Failed::Unprocessed
                } else {
                    let name = reason.name().unwrap_or("an unknown code");
                    Failed::Broken(format!("the peer reset the stream ({name})"))
                };
                self.fail_stream(stream, why);
            }
            Frame::GoAway { last_stream, .. } => {
                self.going_away = true;
                for s in &mut self.streams {
                    if s.id > last_stream && s.failed.is_none() {
                        s.failed = Some(Failed::Unprocessed);
                        if let Some(w) = s.waker.take() {
                            w.wake();
                        }
                    }
                }
                self.wake_senders();
            }
            Frame::PushPromise { .. } => return Err("PUSH_PROMISE, which we disabled".into()),
            Frame::Data { .. } | Frame::Priority { .. } | Frame::Unknown { .. } => {}
        }
        Ok(())
    }

    fn fail_stream(&mut self, id: u32, why: Failed) {
        if let Some(s) = self.slot(id) {
            if s.failed.is_none() && !(s.ended && s.responded) {
                s.failed = Some(why);
            }
            s.local_done = true;
            s.ended = true;
            if let Some(w) = s.waker.take() {
                w.wake();
            }
        }
        self.wake_senders();
    }

    /// A whole header block: a response head (interim ones passed over) or trailers.
    fn on_block(&mut self) -> Result<(), String> {
        let id = std::mem::take(&mut self.block_stream);
        let mut status = 0u16;
        let mut fields = FieldList::with_capacity(16, self.block.len() * 2 + 32);
        let decoded = self.decoder.decode(&self.block, MAX_LIST, |name, value| {
            if name == b":status" {
                status = std::str::from_utf8(value)
                    .ok()
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(0);
            } else if !name.starts_with(b":") {
                fields.append_lowercase(name, value);
            }
            Ok::<(), ()>(())
        });
        match decoded {
            Err(_) => return Err("HPACK: a header block that does not decode".into()),
            Ok(d) if d.list_too_large => {
                frame::write_rst_stream(&mut self.out, id, Reason::PROTOCOL_ERROR);
                self.fail_stream(id, Failed::Broken("a response head too large".into()));
                return Ok(());
            }
            Ok(_) => {}
        }
        let end = self.block_end;
        let Some(s) = self.slot(id) else {
            return Ok(());
        };
        if s.responded {
            if !end {
                return Err(format!("trailers without END_STREAM on stream {id}"));
            }
            s.trailers = Some(fields);
        } else if (100..200).contains(&status) {
            return Ok(());
        } else if !(200..600).contains(&status) {
            frame::write_rst_stream(&mut self.out, id, Reason::PROTOCOL_ERROR);
            let why = Failed::Broken(format!("a response head with :status {status}"));
            self.fail_stream(id, why);
            return Ok(());
        } else {
            s.head = Some((status, fields));
            s.responded = true;
        }
        s.ended |= end;
        if let Some(w) = s.waker.take() {
            w.wake();
        }
        Ok(())
    }
}
