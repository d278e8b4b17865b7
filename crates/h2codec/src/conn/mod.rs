//! The server's side of one HTTP/2 connection, without I/O (RFC 9113 sections 3.4, 5, 6
//! and 8.1-8.3): stream states, flow control both ways, SETTINGS, PING, GOAWAY, the
//! CONTINUATION sequence, and the checks that make a request malformed.
//!
//! How it is driven: the server reads bytes into a buffer and calls [`Conn::next`] until
//! it returns `Ok(None)`; each [`Event`] is a request head (read with
//! [`Conn::request`]), request body bytes, a stream the client reset, more send window,
//! or the client's GOAWAY. Answers go in with [`Conn::send_headers`] and
//! [`Conn::send_data`], which frame them into the connection's output, together with the
//! frames the connection owes (SETTINGS and PING acknowledgements, WINDOW_UPDATE,
//! RST_STREAM, GOAWAY). The server writes [`Conn::output`] to the socket whenever it is
//! not empty; while it holds more than [`OUTPUT_HIGH`] bytes `next` reads no more
//! frames, so a client that sends PINGs or SETTINGS and never reads is held back by TCP,
//! not by memory.
//!
//! Errors: a connection error (section 5.4.1) writes GOAWAY and makes `next` return
//! [`ConnError`]; the server writes the output and closes. A stream error (5.4.2) writes
//! RST_STREAM; if the server had seen the stream's request it gets [`Event::Reset`].
//!
//! Here: the connection, its frames read and dispatched, and stream states;
//! `receive.rs` the client's HEADERS and DATA and the receive windows; `request.rs` a
//! request head decoded and checked; `head.rs` the head as kept and read; `send.rs`
//! what the server frames.

use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};

use bytes::{Buf, Bytes, BytesMut};

use crate::frame::{self, setting, Frame, Reason, Scope};
use crate::hpack;

mod head;
mod receive;
mod request;
mod send;
#[cfg(test)]
mod tests;

use head::Head;
pub use head::{OwnedRequest, Request};

/// The connection preface a client sends first (RFC 9113 section 3.4).
pub const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Output beyond which [`Conn::next`] stops reading frames until the server has written
/// some: each PING and SETTINGS owes an answer, and a client that never reads must not
/// make the server queue them.
pub const OUTPUT_HIGH: usize = 64 * 1024;

/// Streams remembered as closed after they end, so that a late frame on one is told
/// apart from a frame on a stream that was never opened (STREAM_CLOSED against
/// PROTOCOL_ERROR, section 5.1).
const RECENTLY_CLOSED: usize = 128;

/// DATA payloads from this size on are shared with the read buffer, smaller ones copied.
const SHARE_DATA_FROM: usize = 4096;

/// The largest flow-control window (section 6.9.1).
const MAX_WINDOW: i64 = (1 << 31) - 1;

/// The window every stream and the connection start with until SETTINGS say otherwise
/// (section 6.9.2).
const DEFAULT_WINDOW: i64 = 65_535;

/// What the server announces in its SETTINGS and holds clients to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// SETTINGS_MAX_CONCURRENT_STREAMS: streams beyond it are refused (REFUSED_STREAM).
    pub max_concurrent_streams: u32,
    /// SETTINGS_INITIAL_WINDOW_SIZE: what a client may send on a stream before the
    /// server reads it.
    pub initial_stream_window: u32,
    /// The connection's receive window (raised from 65,535 with a WINDOW_UPDATE at
    /// start).
    pub initial_connection_window: u32,
    /// SETTINGS_MAX_FRAME_SIZE: the largest frame the server accepts.
    pub max_frame_size: u32,
    /// SETTINGS_HEADER_TABLE_SIZE: the HPACK table the client may use for requests.
    pub header_table_size: u32,
    /// SETTINGS_MAX_HEADER_LIST_SIZE: the decoded request head's budget (section
    /// 6.5.2). A head over it is still decoded (the HPACK table must stay in step) and
    /// comes with [`Request::oversize`] set; a header block more than four times as
    /// large is a connection error.
    pub max_header_list_size: u32,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            max_concurrent_streams: 128,
            initial_stream_window: 65_535,
            initial_connection_window: 1 << 20,
            max_frame_size: 16_384,
            header_table_size: 4096,
            max_header_list_size: 16_384,
        }
    }
}

/// What happened on the connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// A request head: read it with [`Conn::request`] before calling `next` again.
    /// `end_stream`: no body follows.
    Request { stream: u32, end_stream: bool },
    /// Request body bytes (padding removed); `end_stream` on the last. Trailers end the
    /// stream with an empty `Data`. The bytes count against the windows until the
    /// server gives them back with [`Conn::release`].
    Data {
        stream: u32,
        data: Bytes,
        end_stream: bool,
    },
    /// The stream is gone: the client reset it, or broke a rule on it (the server has
    /// sent RST_STREAM). Its answer, if any, is no longer wanted.
    Reset { stream: u32, reason: Reason },
    /// A send window grew: responses waiting for one may go on.
    Window,
    /// The client is going away: no stream above `last_stream` will be served by it.
    GoAway { last_stream: u32, reason: Reason },
}

/// A connection error: GOAWAY is in the output (unless the client broke off before the
/// preface), and the connection is over once it is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("HTTP/2 connection error: {reason}")]
pub struct ConnError {
    pub reason: Reason,
}

/// Why a send found no stream to send on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the stream is closed or was reset")]
pub struct StreamGone;

/// One stream the server is answering.
#[derive(Debug)]
struct Stream {
    /// The client may still send on it (no END_STREAM yet).
    recv_open: bool,
    /// The server has not ended its side.
    send_open: bool,
    headers_sent: bool,
    /// What the server may still send on it.
    send_window: i64,
    /// What the client may still send on it.
    recv_window: i64,
    /// Bytes the server has read but not yet given back to the client.
    unannounced: u32,
    /// The request's content-length, and the body bytes seen so far.
    length: Option<u64>,
    received: u64,
}

/// The HEADERS whose block continues in CONTINUATION frames.
#[derive(Debug)]
struct Continuing {
    stream: u32,
    end_stream: bool,
    /// The stream was reset already (for a frame error): the block is decoded only to
    /// keep the HPACK table in step.
    doomed: bool,
}

/// A map keyed by stream identifier. The identifiers are distinct integers, at most
/// `max_concurrent_streams` of them in a map at once: one multiply hashes them well
/// enough, where the default SipHash cost more than the lookup itself.
pub type IdMap<V> = HashMap<u32, V, BuildHasherDefault<IdHasher>>;

/// The hasher of [`IdMap`].
#[derive(Debug, Default, Clone, Copy)]
pub struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }

    fn write_u32(&mut self, n: u32) {
        self.0 = (self.0 ^ u64::from(n)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

/// The server's side of one HTTP/2 connection (see the module's documentation).
pub struct Conn {
    config: Config,
    /// The client's preface has arrived.
    prefaced: bool,
    /// The client's first SETTINGS has arrived (it must be its first frame).
    settled: bool,
    /// The client has acknowledged the server's SETTINGS.
    acked: bool,
    decoder: hpack::Decoder,
    encoder: hpack::Encoder,
    /// The client's SETTINGS_INITIAL_WINDOW_SIZE and SETTINGS_MAX_FRAME_SIZE.
    peer_window: i64,
    peer_max_frame: u32,
    send_window: i64,
    recv_window: i64,
    /// Connection-level bytes read but not yet given back.
    unannounced: u32,
    streams: IdMap<Stream>,
    /// The highest stream the client has opened.
    last_stream: u32,
    /// Streams recently closed, and whether the server closed them with RST_STREAM
    /// (frames the client sent before it saw that are ignored, section 5.1).
    recently_closed: VecDeque<(u32, bool)>,
    continuing: Option<Continuing>,
    /// The header block being gathered across CONTINUATION frames.
    block: Vec<u8>,
    head: Head,
    /// GOAWAY sent: the last stream it let in.
    going_away: Option<u32>,
    /// A connection error was sent.
    failed: Option<Reason>,
    out: Vec<u8>,
    /// Where the unwritten part of `out` starts.
    out_at: usize,
    /// The DATA frame [`Conn::begin_data`] started: its stream, where its head is, and
    /// how much it may carry.
    data_at: Option<(u32, usize, usize)>,
}

impl Conn {
    /// A connection with the server's preface (its SETTINGS, and the connection window's
    /// raise) already in the output.
    pub fn new(config: Config) -> Conn {
        let mut out = Vec::with_capacity(256);
        frame::write_settings(
            &mut out,
            &[
                (setting::HEADER_TABLE_SIZE, config.header_table_size),
                (setting::ENABLE_PUSH, 0),
                (
                    setting::MAX_CONCURRENT_STREAMS,
                    config.max_concurrent_streams,
                ),
                (setting::INITIAL_WINDOW_SIZE, config.initial_stream_window),
                (setting::MAX_FRAME_SIZE, config.max_frame_size),
                (setting::MAX_HEADER_LIST_SIZE, config.max_header_list_size),
            ],
        );
        let mut recv_window = DEFAULT_WINDOW;
        if i64::from(config.initial_connection_window) > DEFAULT_WINDOW {
            let raise = (i64::from(config.initial_connection_window) - DEFAULT_WINDOW) as u32;
            frame::write_window_update(&mut out, 0, raise);
            recv_window += i64::from(raise);
        }
        Conn {
            // The announced size from the start, as the h2 crate did: below the
            // protocol's 4096 a client that indexes fields before it has read the
            // server's SETTINGS can lose step (RFC 9113 section 6.5.3); requiring
            // its size update after the acknowledgement instead would refuse clients
            // that never index (h2spec's, most test clients).
            decoder: hpack::Decoder::new(config.header_table_size as usize),
            encoder: hpack::Encoder::new(),
            config,
            prefaced: false,
            settled: false,
            acked: false,
            peer_window: DEFAULT_WINDOW,
            peer_max_frame: frame::DEFAULT_MAX_FRAME_SIZE,
            send_window: DEFAULT_WINDOW,
            recv_window,
            unannounced: 0,
            streams: IdMap::default(),
            last_stream: 0,
            recently_closed: VecDeque::with_capacity(RECENTLY_CLOSED),
            continuing: None,
            block: Vec::new(),
            head: Head::default(),
            going_away: None,
            failed: None,
            out,
            out_at: 0,
            data_at: None,
        }
    }

    /// Bytes to write to the client.
    pub fn output(&self) -> &[u8] {
        &self.out[self.out_at..]
    }

    /// The first `n` bytes of [`Conn::output`] were written.
    pub fn written(&mut self, n: usize) {
        self.out_at += n;
        if self.out_at >= self.out.len() {
            self.out.clear();
            self.out_at = 0;
        } else if self.out.len() - self.out_at <= self.out_at {
            // Less is left than was written: moved to the front, cheaper than moving
            // the rest after every partial write.
            self.out.drain(..self.out_at);
            self.out_at = 0;
        }
    }

    /// Gives back the output buffer's memory when it is empty and large (a page framed
    /// a while ago): for a connection about to wait idle.
    pub fn shrink(&mut self) {
        if self.out.is_empty() && self.out.capacity() > 16 * 1024 {
            self.out = Vec::with_capacity(256);
        }
    }

    /// Streams open or half closed (the server is still answering them).
    pub fn active(&self) -> usize {
        self.streams.len()
    }

    /// The highest stream the client opened.
    pub fn last_stream(&self) -> u32 {
        self.last_stream
    }

    /// GOAWAY was sent (by [`Conn::go_away`] or for a connection error).
    pub fn is_going_away(&self) -> bool {
        self.going_away.is_some()
    }

    /// The client's SETTINGS have arrived: the handshake is done.
    pub fn started(&self) -> bool {
        self.settled
    }

    /// The head of the request [`Event::Request`] announced.
    pub fn request(&self) -> Request<'_> {
        Request { head: &self.head }
    }

    /// The next event from the bytes in `buf` (which it consumes frame by frame), or
    /// `Ok(None)` when `buf` holds no whole frame, or the output must be written first.
    pub fn next(&mut self, buf: &mut BytesMut) -> Result<Option<Event>, ConnError> {
        loop {
            if let Some(reason) = self.failed {
                return Err(ConnError { reason });
            }
            if self.output().len() > OUTPUT_HIGH {
                return Ok(None);
            }
            if !self.prefaced {
                let n = buf.len().min(PREFACE.len());
                if buf[..n] != PREFACE[..n] {
                    // Not HTTP/2 at all: no GOAWAY, the client would not read it.
                    self.failed = Some(Reason::PROTOCOL_ERROR);
                    continue;
                }
                if n < PREFACE.len() {
                    return Ok(None);
                }
                buf.advance(PREFACE.len());
                self.prefaced = true;
            }
            let (event, used) = match frame::parse(buf, self.config.max_frame_size) {
                Ok(None) => return Ok(None),
                Ok(Some((frame, used))) => {
                    if !self.settled && !matches!(frame, Frame::Settings { ack: false, .. }) {
                        return Err(self.fail(Reason::PROTOCOL_ERROR));
                    }
                    if self.continuing.is_some() && !matches!(frame, Frame::Continuation { .. }) {
                        return Err(self.fail(Reason::PROTOCOL_ERROR));
                    }
                    let data_at = match &frame {
                        Frame::Data { data, .. } => {
                            Some((data.as_ptr() as usize - buf.as_ptr() as usize, data.len()))
                        }
                        _ => None,
                    };
                    let event = self.on_frame(frame)?;
                    (event.map(|e| (e, data_at)), used)
                }
                Err(e) => {
                    let Scope::Stream {
                        id,
                        skip,
                        field_block,
                    } = e.scope
                    else {
                        return Err(self.fail(e.reason));
                    };
                    if self.continuing.is_some() || !self.settled {
                        return Err(self.fail(Reason::PROTOCOL_ERROR));
                    }
                    if let Some(block) = field_block {
                        // A HEADERS frame refused for its priority: its block still goes
                        // through the decoder (the HPACK table is the connection's), and
                        // its stream counts as opened and closed.
                        if id % 2 == 0
                            || (id <= self.last_stream && !self.streams.contains_key(&id))
                        {
                            return Err(self.fail(Reason::PROTOCOL_ERROR));
                        }
                        self.last_stream = self.last_stream.max(id);
                        if block.end_headers {
                            self.decode(&buf[block.start..block.end], false)?;
                        } else {
                            self.block.clear();
                            self.block.extend_from_slice(&buf[block.start..block.end]);
                            self.continuing = Some(Continuing {
                                stream: id,
                                end_stream: false,
                                doomed: true,
                            });
                        }
                    }
                    let event = self.stream_error(id, e.reason);
                    buf.advance(skip);
                    match event {
                        Some(e) => return Ok(Some(e)),
                        None => continue,
                    }
                }
            };
            let Some((event, data_at)) = event else {
                buf.advance(used);
                continue;
            };
            match (event, data_at) {
                (
                    Event::Data {
                        stream, end_stream, ..
                    },
                    Some((at, len)),
                ) => {
                    // A large payload is shared with the read buffer rather than copied;
                    // a small one is copied, so that it does not hold a whole read
                    // buffer alive while it waits to be read.
                    let data = if len >= SHARE_DATA_FROM {
                        buf.split_to(used).freeze().slice(at..at + len)
                    } else {
                        let data = Bytes::copy_from_slice(&buf[at..at + len]);
                        buf.advance(used);
                        data
                    };
                    return Ok(Some(Event::Data {
                        stream,
                        data,
                        end_stream,
                    }));
                }
                (event, _) => {
                    buf.advance(used);
                    return Ok(Some(event));
                }
            }
        }
    }

    /// Handles one frame; `Data` events come back with an empty payload, which `next`
    /// fills in from the read buffer.
    fn on_frame(&mut self, frame: Frame<'_>) -> Result<Option<Event>, ConnError> {
        match frame {
            Frame::Settings { ack: true, .. } => {
                self.acked = true;
                Ok(None)
            }
            Frame::Settings { ack: false, params } => {
                self.settled = true;
                let mut opened = false;
                // Each value is checked by the frame layer (section 6.5.2).
                for (id, value) in params {
                    match id {
                        setting::HEADER_TABLE_SIZE => {
                            self.encoder.set_max_table_size(value as usize)
                        }
                        setting::INITIAL_WINDOW_SIZE => {
                            let delta = i64::from(value) - self.peer_window;
                            self.peer_window = i64::from(value);
                            for s in self.streams.values_mut() {
                                s.send_window += delta;
                                if s.send_window > MAX_WINDOW {
                                    return Err(self.fail(Reason::FLOW_CONTROL_ERROR));
                                }
                            }
                            opened |= delta > 0;
                        }
                        setting::MAX_FRAME_SIZE => self.peer_max_frame = value,
                        _ => {}
                    }
                }
                frame::write_settings_ack(&mut self.out);
                Ok(opened.then_some(Event::Window))
            }
            Frame::Ping { ack, payload } => {
                if !ack {
                    frame::write_ping_ack(&mut self.out, payload);
                }
                Ok(None)
            }
            Frame::GoAway {
                last_stream,
                reason,
                ..
            } => Ok(Some(Event::GoAway {
                last_stream,
                reason,
            })),
            Frame::WindowUpdate {
                stream: 0,
                increment,
            } => {
                self.send_window += i64::from(increment);
                if self.send_window > MAX_WINDOW {
                    return Err(self.fail(Reason::FLOW_CONTROL_ERROR));
                }
                Ok(Some(Event::Window))
            }
            Frame::WindowUpdate { stream, increment } => {
                if self.is_idle(stream) {
                    return Err(self.fail(Reason::PROTOCOL_ERROR));
                }
                let Some(s) = self.streams.get_mut(&stream) else {
                    return Ok(None);
                };
                s.send_window += i64::from(increment);
                if s.send_window > MAX_WINDOW {
                    return Ok(self.stream_error(stream, Reason::FLOW_CONTROL_ERROR));
                }
                Ok(Some(Event::Window))
            }
            Frame::RstStream { stream, reason } => {
                if self.is_idle(stream) {
                    return Err(self.fail(Reason::PROTOCOL_ERROR));
                }
                match self.streams.remove(&stream) {
                    Some(_) => {
                        self.closed(stream, false);
                        Ok(Some(Event::Reset { stream, reason }))
                    }
                    None => Ok(None),
                }
            }
            Frame::Priority { .. } | Frame::Unknown { .. } => Ok(None),
            Frame::PushPromise { .. } => Err(self.fail(Reason::PROTOCOL_ERROR)),
            Frame::Data {
                stream,
                end_stream,
                data,
                flow_len,
            } => self.on_data(stream, end_stream, data.len(), flow_len),
            Frame::Headers {
                stream,
                end_stream,
                end_headers,
                block,
                ..
            } => {
                if stream % 2 == 0 {
                    return Err(self.fail(Reason::PROTOCOL_ERROR));
                }
                if end_headers {
                    return self.on_headers(stream, end_stream, block);
                }
                self.block.clear();
                self.block.extend_from_slice(block);
                self.continuing = Some(Continuing {
                    stream,
                    end_stream,
                    doomed: false,
                });
                self.check_block()?;
                Ok(None)
            }
            Frame::Continuation {
                stream,
                end_headers,
                block,
            } => {
                let Some(c) = self.continuing.as_ref() else {
                    return Err(self.fail(Reason::PROTOCOL_ERROR));
                };
                if c.stream != stream {
                    return Err(self.fail(Reason::PROTOCOL_ERROR));
                }
                self.block.extend_from_slice(block);
                self.check_block()?;
                if !end_headers {
                    return Ok(None);
                }
                let Some(Continuing {
                    stream,
                    end_stream,
                    doomed,
                }) = self.continuing.take()
                else {
                    unreachable!("checked above")
                };
                let block = std::mem::take(&mut self.block);
                let event = match doomed {
                    true => self.decode(&block, false).map(|_| None),
                    false => self.on_headers(stream, end_stream, &block),
                };
                self.block = block;
                self.block.clear();
                event
            }
        }
    }

    /// A stream error: RST_STREAM, the stream closed, and [`Event::Reset`] if the server
    /// was answering it.
    fn stream_error(&mut self, stream: u32, reason: Reason) -> Option<Event> {
        frame::write_rst_stream(&mut self.out, stream, reason);
        let known = self.streams.remove(&stream).is_some();
        self.closed(stream, true);
        known.then_some(Event::Reset { stream, reason })
    }

    /// A connection error: GOAWAY with `reason`, and the connection is over.
    fn fail(&mut self, reason: Reason) -> ConnError {
        if self.failed.is_none() {
            frame::write_goaway(&mut self.out, self.last_stream, reason, b"");
            self.going_away = Some(self.last_stream);
            self.failed = Some(reason);
        }
        ConnError { reason }
    }

    fn is_idle(&self, stream: u32) -> bool {
        stream > self.last_stream
    }

    /// Remembers a stream as closed; `reset`: by the server's RST_STREAM.
    fn closed(&mut self, stream: u32, reset: bool) {
        if self.recently_closed.len() == RECENTLY_CLOSED {
            self.recently_closed.pop_front();
        }
        self.recently_closed.push_back((stream, reset));
    }

    /// Whether `stream` closed recently, and if so whether the server reset it.
    fn closed_how(&self, stream: u32) -> Option<bool> {
        self.recently_closed
            .iter()
            .rev()
            .find(|(id, _)| *id == stream)
            .map(|&(_, reset)| reset)
    }

    /// The server has ended its side of `stream`. If the client has not ended its own,
    /// it is told to stop sending with RST_STREAM NO_ERROR (RFC 9113 section 8.1): the
    /// response is complete and the rest of the request is not wanted.
    fn sent_end(&mut self, stream: u32) {
        if self.streams.get(&stream).is_some_and(|s| s.recv_open) {
            self.streams.remove(&stream);
            frame::write_rst_stream(&mut self.out, stream, Reason::NO_ERROR);
            self.closed(stream, true);
        } else {
            self.close_if_done(stream);
        }
    }

    fn close_if_done(&mut self, stream: u32) {
        if self
            .streams
            .get(&stream)
            .is_some_and(|s| !s.recv_open && !s.send_open)
        {
            self.streams.remove(&stream);
            self.closed(stream, false);
        }
    }
}
