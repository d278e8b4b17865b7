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

use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};

use bytes::{Buf, Bytes, BytesMut};

use crate::frame::{self, setting, Frame, Reason, Scope};
use crate::hpack;

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

/// Where a request field sits in [`Conn`]'s head buffer.
#[derive(Debug, Clone, Copy)]
struct Span {
    name: (u32, u32),
    value: (u32, u32),
}

/// The request head last decoded.
#[derive(Debug, Default, Clone)]
struct Head {
    bytes: Vec<u8>,
    fields: Vec<Span>,
    method: Option<(u32, u32)>,
    scheme: Option<(u32, u32)>,
    authority: Option<(u32, u32)>,
    path: Option<(u32, u32)>,
    oversize: bool,
}

impl Head {
    fn clear(&mut self) {
        self.bytes.clear();
        self.fields.clear();
        self.method = None;
        self.scheme = None;
        self.authority = None;
        self.path = None;
        self.oversize = false;
    }

    fn push(&mut self, bytes: &[u8]) -> (u32, u32) {
        let start = self.bytes.len() as u32;
        self.bytes.extend_from_slice(bytes);
        (start, self.bytes.len() as u32)
    }

    fn get(&self, span: (u32, u32)) -> &[u8] {
        &self.bytes[span.0 as usize..span.1 as usize]
    }
}

/// A request head, as [`Event::Request`] announced it. Field names are lower case (an
/// upper-case name makes the request malformed, section 8.2.1); cookies are as the
/// client split them.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    head: &'a Head,
}

impl<'a> Request<'a> {
    pub fn method(&self) -> &'a [u8] {
        self.head.method.map_or(&[], |s| self.head.get(s))
    }

    pub fn scheme(&self) -> Option<&'a [u8]> {
        self.head.scheme.map(|s| self.head.get(s))
    }

    pub fn authority(&self) -> Option<&'a [u8]> {
        self.head.authority.map(|s| self.head.get(s))
    }

    /// `:path`; absent only for CONNECT.
    pub fn path(&self) -> Option<&'a [u8]> {
        self.head.path.map(|s| self.head.get(s))
    }

    /// The regular fields, in order.
    pub fn fields(&self) -> impl Iterator<Item = (&'a [u8], &'a [u8])> + 'a {
        let head = self.head;
        head.fields
            .iter()
            .map(move |f| (head.get(f.name), head.get(f.value)))
    }

    pub fn field_count(&self) -> usize {
        self.head.fields.len()
    }

    /// The decoded head was larger than `max_header_list_size`: its fields are cut
    /// short, and the server answers 431.
    pub fn oversize(&self) -> bool {
        self.head.oversize
    }

    /// A copy that outlives the next event (for a stream answered later).
    pub fn to_owned(&self) -> OwnedRequest {
        OwnedRequest {
            head: self.head.clone(),
        }
    }
}

/// A request head of its own (see [`Request::to_owned`]).
#[derive(Debug, Clone)]
pub struct OwnedRequest {
    head: Head,
}

impl OwnedRequest {
    pub fn view(&self) -> Request<'_> {
        Request { head: &self.head }
    }
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
    /// Scratch for lower-casing response field names.
    lower: Vec<u8>,
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
            lower: Vec::new(),
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

    /// A header block gathered over CONTINUATION frames may not grow past four times the
    /// head's budget (a head that large is refused anyway; beyond it is a flood).
    fn check_block(&mut self) -> Result<(), ConnError> {
        let bound = (self.config.max_header_list_size as usize).saturating_mul(4);
        if self.block.len() > bound.max(frame::DEFAULT_MAX_FRAME_SIZE as usize) {
            return Err(self.fail(Reason::ENHANCE_YOUR_CALM));
        }
        Ok(())
    }

    fn on_data(
        &mut self,
        stream: u32,
        end_stream: bool,
        len: usize,
        flow_len: u32,
    ) -> Result<Option<Event>, ConnError> {
        self.recv_window -= i64::from(flow_len);
        if self.recv_window < 0 {
            return Err(self.fail(Reason::FLOW_CONTROL_ERROR));
        }
        if self.is_idle(stream) {
            return Err(self.fail(Reason::PROTOCOL_ERROR));
        }
        // Padding is never the server's to read: given back at once.
        let padding = flow_len - len as u32;
        let allowance = self.allowance();
        let Some(s) = self.streams.get_mut(&stream).filter(|s| s.recv_open) else {
            // A closed or half-closed stream: the bytes still count against the
            // connection's window (section 6.9), so they are given back; DATA the
            // client sent before it saw the server's reset is ignored.
            self.release_connection(flow_len);
            if !self.streams.contains_key(&stream) && self.closed_how(stream) == Some(true) {
                return Ok(None);
            }
            return Ok(self.stream_error(stream, Reason::STREAM_CLOSED));
        };
        s.recv_window -= i64::from(flow_len);
        if s.recv_window < -allowance {
            self.release_connection(flow_len);
            return Ok(self.stream_error(stream, Reason::FLOW_CONTROL_ERROR));
        }
        s.received += len as u64;
        let too_long = s.length.is_some_and(|l| s.received > l);
        let too_short = end_stream && s.length.is_some_and(|l| s.received != l);
        if too_long || too_short {
            // Section 8.1.1: a content-length the DATA frames do not add up to.
            self.release_connection(flow_len);
            return Ok(self.stream_error(stream, Reason::PROTOCOL_ERROR));
        }
        if padding > 0 {
            // Given back to both windows, announced as read bytes are.
            self.release(stream, padding as usize);
        }
        if end_stream {
            if let Some(s) = self.streams.get_mut(&stream) {
                s.recv_open = false;
            }
            self.close_if_done(stream);
        }
        if len == 0 && !end_stream {
            return Ok(None);
        }
        Ok(Some(Event::Data {
            stream,
            data: Bytes::new(),
            end_stream,
        }))
    }

    /// How far a client may overrun a stream's window before it has seen the server's
    /// SETTINGS: it may assume 65,535 until then (section 6.9.2).
    fn allowance(&self) -> i64 {
        match self.acked {
            true => 0,
            false => (DEFAULT_WINDOW - i64::from(self.config.initial_stream_window)).max(0),
        }
    }

    fn on_headers(
        &mut self,
        stream: u32,
        end_stream: bool,
        block: &[u8],
    ) -> Result<Option<Event>, ConnError> {
        enum Kind {
            New,
            Trailers,
            /// Decoded for the HPACK table's sake, then refused with this reason.
            Refused(Reason),
            /// Decoded for the HPACK table's sake, and nothing more.
            Ignored,
        }
        let kind = match self.streams.get(&stream) {
            Some(s) if s.recv_open => Kind::Trailers,
            Some(_) => Kind::Refused(Reason::STREAM_CLOSED),
            None if stream <= self.last_stream => match self.closed_how(stream) {
                // Sent before the client saw the reset: decoded, and ignored.
                Some(true) => Kind::Ignored,
                // A stream both sides ended (section 5.1, "closed").
                Some(false) => return Err(self.fail(Reason::STREAM_CLOSED)),
                // Stream identifiers only grow (section 5.1.1).
                None => return Err(self.fail(Reason::PROTOCOL_ERROR)),
            },
            None => {
                self.last_stream = stream;
                if self.going_away.is_some()
                    || self.streams.len() >= self.config.max_concurrent_streams as usize
                {
                    Kind::Refused(Reason::REFUSED_STREAM)
                } else {
                    Kind::New
                }
            }
        };
        let trailers = matches!(kind, Kind::Trailers);
        let malformed = self.decode(block, trailers)?;
        match kind {
            Kind::Ignored => Ok(None),
            Kind::Refused(reason) => {
                if self.streams.contains_key(&stream) {
                    return Ok(self.stream_error(stream, reason));
                }
                frame::write_rst_stream(&mut self.out, stream, reason);
                self.closed(stream, true);
                Ok(None)
            }
            Kind::Trailers => {
                if !end_stream || malformed {
                    return Ok(self.stream_error(stream, Reason::PROTOCOL_ERROR));
                }
                let Some(s) = self.streams.get_mut(&stream) else {
                    unreachable!("a stream with trailers is open")
                };
                if s.length.is_some_and(|l| s.received != l) {
                    return Ok(self.stream_error(stream, Reason::PROTOCOL_ERROR));
                }
                s.recv_open = false;
                self.close_if_done(stream);
                Ok(Some(Event::Data {
                    stream,
                    data: Bytes::new(),
                    end_stream: true,
                }))
            }
            Kind::New => {
                let (length, bad_length) = match self.content_length() {
                    Ok(l) => (l, end_stream && l.is_some_and(|l| l != 0)),
                    Err(()) => (None, true),
                };
                // A head over the budget is answered 431 by the server, whatever the
                // fields it lost.
                let oversize = self.head.oversize;
                if !oversize && (malformed || bad_length || !self.pseudo_complete()) {
                    frame::write_rst_stream(&mut self.out, stream, Reason::PROTOCOL_ERROR);
                    self.closed(stream, true);
                    return Ok(None);
                }
                self.streams.insert(
                    stream,
                    Stream {
                        recv_open: !end_stream,
                        send_open: true,
                        headers_sent: false,
                        send_window: self.peer_window,
                        recv_window: i64::from(self.config.initial_stream_window),
                        unannounced: 0,
                        length,
                        received: 0,
                    },
                );
                Ok(Some(Event::Request { stream, end_stream }))
            }
        }
    }

    /// Decodes a header block into the head; returns whether the request it holds is
    /// malformed (section 8.1.1). The whole block is always decoded: the HPACK table is
    /// the connection's, whatever becomes of the stream.
    fn decode(&mut self, block: &[u8], trailers: bool) -> Result<bool, ConnError> {
        let head = &mut self.head;
        head.clear();
        let mut malformed = false;
        let mut regular = false;
        let decoded = self.decoder.decode(
            block,
            self.config.max_header_list_size as usize,
            |name: &[u8], value: &[u8]| {
                if value.iter().any(|&b| b == 0 || b == b'\r' || b == b'\n') {
                    malformed = true;
                }
                if let Some(pseudo) = name.strip_prefix(b":") {
                    if regular || trailers {
                        malformed = true;
                        return Ok::<(), std::convert::Infallible>(());
                    }
                    let slot = match pseudo {
                        b"method" => &mut head.method,
                        b"scheme" => &mut head.scheme,
                        b"authority" => &mut head.authority,
                        b"path" => &mut head.path,
                        _ => {
                            malformed = true;
                            return Ok(());
                        }
                    };
                    if slot.is_some() {
                        malformed = true;
                        return Ok(());
                    }
                    let span = {
                        let start = head.bytes.len() as u32;
                        head.bytes.extend_from_slice(value);
                        (start, head.bytes.len() as u32)
                    };
                    match pseudo {
                        b"method" => head.method = Some(span),
                        b"scheme" => head.scheme = Some(span),
                        b"authority" => head.authority = Some(span),
                        _ => head.path = Some(span),
                    }
                    return Ok(());
                }
                regular = true;
                if name.is_empty() || !name.iter().all(|&b| is_name_byte(b)) {
                    malformed = true;
                    return Ok(());
                }
                if is_connection_specific(name) || (name == b"te" && value != b"trailers") {
                    malformed = true;
                    return Ok(());
                }
                if !trailers {
                    let name = head.push(name);
                    let value = head.push(value);
                    head.fields.push(Span { name, value });
                }
                Ok(())
            },
        );
        match decoded {
            Ok(d) => {
                self.head.oversize = d.list_too_large;
                Ok(malformed)
            }
            Err(_) => Err(self.fail(Reason::COMPRESSION_ERROR)),
        }
    }

    /// The request's content-length: `Err` if it is not one decimal number (several
    /// equal values count as one).
    fn content_length(&self) -> Result<Option<u64>, ()> {
        let mut length = None;
        for (name, value) in self.request().fields() {
            if name != b"content-length" {
                continue;
            }
            if value.is_empty() || value.len() > 19 || !value.iter().all(u8::is_ascii_digit) {
                return Err(());
            }
            let n = value
                .iter()
                .fold(0u64, |n, &d| n * 10 + u64::from(d - b'0'));
            if length.is_some_and(|l| l != n) {
                return Err(());
            }
            length = Some(n);
        }
        Ok(length)
    }

    /// Whether the pseudo-header fields a request needs are there (section 8.3.1; a
    /// CONNECT has only :method and :authority, section 8.5).
    fn pseudo_complete(&self) -> bool {
        let r = self.request();
        let head = &self.head;
        if head.method.is_none() {
            return false;
        }
        if r.method() == b"CONNECT" {
            return head.authority.is_some() && head.scheme.is_none() && head.path.is_none();
        }
        head.scheme.is_some() && r.path().is_some_and(|p| !p.is_empty())
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

    fn release_connection(&mut self, n: u32) {
        self.unannounced += n;
        let threshold = self
            .config
            .initial_connection_window
            .max(DEFAULT_WINDOW as u32)
            / 2;
        if self.unannounced >= threshold {
            frame::write_window_update(&mut self.out, 0, self.unannounced);
            self.recv_window += i64::from(self.unannounced);
            self.unannounced = 0;
        }
    }

    /// The server has read `n` body bytes of `stream`: the client may send that many
    /// more (announced in batches of half a window).
    pub fn release(&mut self, stream: u32, n: usize) {
        let n = n as u32;
        self.release_connection(n);
        let threshold = (self.config.initial_stream_window / 2).max(1);
        if let Some(s) = self.streams.get_mut(&stream).filter(|s| s.recv_open) {
            s.unannounced += n;
            if s.unannounced >= threshold {
                frame::write_window_update(&mut self.out, stream, s.unannounced);
                s.recv_window += i64::from(s.unannounced);
                s.unannounced = 0;
            }
        }
    }

    /// Frames a response head: `:status` and `fields` (names in any case; they are sent
    /// in lower case). `end_stream`: no body follows.
    pub fn send_headers<'f>(
        &mut self,
        stream: u32,
        status: u16,
        fields: impl IntoIterator<Item = (&'f [u8], &'f [u8])>,
        end_stream: bool,
    ) -> Result<(), StreamGone> {
        match self.streams.get_mut(&stream) {
            Some(s) if s.send_open && !s.headers_sent => {
                s.headers_sent = true;
                s.send_open = !end_stream;
            }
            _ => return Err(StreamGone),
        }
        let at = frame::begin_headers(&mut self.out);
        let mut block = self.encoder.response(status, &mut self.out);
        for (name, value) in fields {
            if name.iter().any(u8::is_ascii_uppercase) {
                self.lower.clear();
                self.lower.extend(name.iter().map(u8::to_ascii_lowercase));
                block.field(&self.lower, value);
            } else {
                block.field(name, value);
            }
        }
        block.finish();
        frame::finish_headers(&mut self.out, at, stream, end_stream, self.peer_max_frame);
        if end_stream {
            self.sent_end(stream);
        }
        Ok(())
    }

    /// What `stream` may send now: the smaller of its window and the connection's.
    pub fn capacity(&self, stream: u32) -> usize {
        match self.streams.get(&stream) {
            Some(s) if s.send_open => s.send_window.min(self.send_window).max(0) as usize,
            _ => 0,
        }
    }

    /// Frames as much of `data` as the windows allow, in frames of at most the client's
    /// SETTINGS_MAX_FRAME_SIZE; `end_stream` ends the stream with the last byte (only if
    /// all of `data` went). Returns how many bytes went.
    pub fn send_data(
        &mut self,
        stream: u32,
        data: &[u8],
        end_stream: bool,
    ) -> Result<usize, StreamGone> {
        let room = match self.streams.get(&stream) {
            Some(s) if s.send_open && s.headers_sent => {
                s.send_window.min(self.send_window).max(0) as usize
            }
            _ => return Err(StreamGone),
        };
        let n = room.min(data.len());
        let ends = end_stream && n == data.len();
        if n == 0 && !ends {
            return Ok(0);
        }
        let max = self.peer_max_frame as usize;
        let mut sent = 0;
        loop {
            let len = (n - sent).min(max);
            let last = sent + len == n;
            frame::write_data(&mut self.out, stream, &data[sent..sent + len], ends && last);
            sent += len;
            if last {
                break;
            }
        }
        self.send_window -= n as i64;
        let Some(s) = self.streams.get_mut(&stream) else {
            unreachable!("checked above")
        };
        s.send_window -= n as i64;
        if ends {
            s.send_open = false;
            self.sent_end(stream);
        }
        Ok(n)
    }

    /// Starts a DATA frame on `stream` whose payload the caller appends to
    /// [`Conn::payload`] itself (a file read straight into the output, with no copy in
    /// between). Returns how many bytes it may append: at most `want`, within the
    /// windows and the client's frame size; when that is 0 no frame is started. End the
    /// frame with [`Conn::finish_data`] before anything else is framed.
    pub fn begin_data(&mut self, stream: u32, want: usize) -> Result<usize, StreamGone> {
        let room = match self.streams.get(&stream) {
            Some(s) if s.send_open && s.headers_sent => {
                s.send_window.min(self.send_window).max(0) as usize
            }
            _ => return Err(StreamGone),
        };
        let n = room.min(want).min(self.peer_max_frame as usize);
        if n > 0 {
            self.data_at = Some((stream, self.out.len(), n));
            self.out.extend_from_slice(&[0; frame::HEAD_LEN]);
        }
        Ok(n)
    }

    /// The output, for the payload of the DATA frame [`Conn::begin_data`] started.
    pub fn payload(&mut self) -> &mut Vec<u8> {
        &mut self.out
    }

    /// Ends the DATA frame [`Conn::begin_data`] started, with what was appended since
    /// (at most what it allowed); `end_stream` ends the stream with it.
    ///
    /// # Panics
    ///
    /// If more was appended than `begin_data` allowed.
    pub fn finish_data(&mut self, end_stream: bool) {
        let Some((stream, at, room)) = self.data_at.take() else {
            return;
        };
        let len = self.out.len() - at - frame::HEAD_LEN;
        assert!(
            len <= room,
            "{len} bytes appended where {room} were allowed"
        );
        let head = frame::Head {
            len: len as u32,
            kind: frame::kind::DATA,
            flags: if end_stream {
                frame::flag::END_STREAM
            } else {
                0
            },
            stream,
        };
        self.out[at..at + frame::HEAD_LEN].copy_from_slice(&head.to_bytes());
        self.send_window -= len as i64;
        if let Some(s) = self.streams.get_mut(&stream) {
            s.send_window -= len as i64;
            if end_stream {
                s.send_open = false;
                self.sent_end(stream);
            }
        }
    }

    /// Resets a stream the server can no longer answer (its body broke off, say).
    pub fn reset(&mut self, stream: u32, reason: Reason) {
        if self.streams.remove(&stream).is_some() {
            frame::write_rst_stream(&mut self.out, stream, reason);
            self.closed(stream, true);
        }
    }

    /// GOAWAY: streams the client has opened are answered, newer ones are refused. With
    /// a reason other than NO_ERROR the connection is over.
    pub fn go_away(&mut self, reason: Reason) {
        if reason != Reason::NO_ERROR {
            self.fail(reason);
            return;
        }
        if self.going_away.is_none() {
            frame::write_goaway(&mut self.out, self.last_stream, reason, b"");
            self.going_away = Some(self.last_stream);
        }
    }
}

/// A byte a field name may hold in HTTP/2: a token character that is not upper case
/// (RFC 9113 section 8.2.1, RFC 9110 section 5.6.2).
fn is_name_byte(b: u8) -> bool {
    matches!(b,
        b'a'..=b'z' | b'0'..=b'9' | b'!' | b'#' | b'$' | b'%' | b'&' | b'\'' | b'*'
        | b'+' | b'-' | b'.' | b'^' | b'_' | b'`' | b'|' | b'~')
}

/// Fields HTTP/2 forbids (RFC 9113 section 8.2.2).
fn is_connection_specific(name: &[u8]) -> bool {
    matches!(
        name,
        b"connection" | b"keep-alive" | b"proxy-connection" | b"transfer-encoding" | b"upgrade"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const DATA: u8 = 0x0;
    const HEADERS: u8 = 0x1;
    const PRIORITY: u8 = 0x2;
    const RST_STREAM: u8 = 0x3;
    const SETTINGS: u8 = 0x4;
    const PING: u8 = 0x6;
    const GOAWAY: u8 = 0x7;
    const WINDOW_UPDATE: u8 = 0x8;
    const CONTINUATION: u8 = 0x9;
    const END_STREAM: u8 = 0x1;
    const ACK: u8 = 0x1;
    const END_HEADERS: u8 = 0x4;

    fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
        let mut out = (payload.len() as u32).to_be_bytes()[1..].to_vec();
        out.push(kind);
        out.push(flags);
        out.extend_from_slice(&stream.to_be_bytes());
        out.extend_from_slice(payload);
        out
    }

    /// A header block of literal fields without indexing, no Huffman.
    fn block(fields: &[(&str, &str)]) -> Vec<u8> {
        let mut out = Vec::new();
        for (name, value) in fields {
            out.push(0);
            for s in [name, value] {
                assert!(s.len() < 127);
                out.push(s.len() as u8);
                out.extend_from_slice(s.as_bytes());
            }
        }
        out
    }

    fn get(path: &str) -> Vec<u8> {
        block(&[
            (":method", "GET"),
            (":scheme", "https"),
            (":path", path),
            (":authority", "example.com"),
        ])
    }

    /// The frames in `bytes`: (kind, flags, stream, payload).
    fn frames(mut bytes: &[u8]) -> Vec<(u8, u8, u32, Vec<u8>)> {
        let mut all = Vec::new();
        while bytes.len() >= 9 {
            let len = u32::from_be_bytes([0, bytes[0], bytes[1], bytes[2]]) as usize;
            let stream = u32::from_be_bytes(bytes[5..9].try_into().unwrap()) & 0x7fff_ffff;
            all.push((bytes[3], bytes[4], stream, bytes[9..9 + len].to_vec()));
            bytes = &bytes[9 + len..];
        }
        assert!(bytes.is_empty(), "a partial frame in the output");
        all
    }

    struct Client {
        conn: Conn,
        buf: BytesMut,
    }

    impl Client {
        /// A connection past its handshake, the server's preface read and dropped.
        fn new(config: Config) -> Client {
            let mut c = Client {
                conn: Conn::new(config),
                buf: BytesMut::new(),
            };
            c.buf.extend_from_slice(PREFACE);
            c.buf.extend_from_slice(&frame(SETTINGS, 0, 0, &[]));
            c.buf.extend_from_slice(&frame(SETTINGS, ACK, 0, &[]));
            assert_eq!(c.events(), Ok(vec![]));
            assert!(c.conn.started());
            c.output();
            c
        }

        /// A GET of `/` on stream `id`, with no body, read by the server.
        fn request(&mut self, id: u32) {
            let events = self
                .send(&frame(HEADERS, END_HEADERS | END_STREAM, id, &get("/")))
                .unwrap();
            assert_eq!(
                events,
                vec![Event::Request {
                    stream: id,
                    end_stream: true
                }]
            );
        }

        fn send(&mut self, bytes: &[u8]) -> Result<Vec<Event>, ConnError> {
            self.buf.extend_from_slice(bytes);
            self.events()
        }

        fn events(&mut self) -> Result<Vec<Event>, ConnError> {
            let mut events = Vec::new();
            while let Some(e) = self.conn.next(&mut self.buf)? {
                events.push(e);
            }
            Ok(events)
        }

        fn output(&mut self) -> Vec<(u8, u8, u32, Vec<u8>)> {
            let all = frames(self.conn.output());
            let n = self.conn.output().len();
            self.conn.written(n);
            all
        }

        /// The connection error the output ends with.
        fn goaway(&mut self) -> Option<u32> {
            self.output()
                .into_iter()
                .find(|f| f.0 == GOAWAY)
                .map(|f| u32::from_be_bytes(f.3[4..8].try_into().unwrap()))
        }

        /// The RST_STREAM codes in the output, by stream.
        fn resets(&mut self) -> Vec<(u32, u32)> {
            self.output()
                .into_iter()
                .filter(|f| f.0 == RST_STREAM)
                .map(|f| (f.2, u32::from_be_bytes(f.3[..4].try_into().unwrap())))
                .collect()
        }
    }

    fn client() -> Client {
        Client::new(Config::default())
    }

    /// What `Client::send` returns after a connection error.
    fn fails(reason: Reason) -> Result<Vec<Event>, ConnError> {
        Err(ConnError { reason })
    }

    #[test]
    fn the_server_preface_is_its_settings_and_the_connection_window() {
        let conn = Conn::new(Config::default());
        let out = frames(conn.output());
        assert_eq!(out[0].0, SETTINGS);
        let params: Vec<(u16, u32)> = out[0]
            .3
            .chunks(6)
            .map(|c| {
                (
                    u16::from_be_bytes([c[0], c[1]]),
                    u32::from_be_bytes(c[2..].try_into().unwrap()),
                )
            })
            .collect();
        assert!(params.contains(&(0x3, 128)), "{params:?}");
        assert!(params.contains(&(0x6, 16_384)), "{params:?}");
        assert_eq!(out[1].0, WINDOW_UPDATE);
        assert_eq!(
            u32::from_be_bytes(out[1].3[..4].try_into().unwrap()),
            (1 << 20) - 65_535
        );
    }

    #[test]
    fn a_wrong_preface_or_a_first_frame_other_than_settings_ends_the_connection() {
        let mut c = Client {
            conn: Conn::new(Config::default()),
            buf: BytesMut::from(&b"GET / HTTP/1.1\r\n\r\n"[..]),
        };
        assert_eq!(c.events(), fails(Reason::PROTOCOL_ERROR));
        let mut c = Client {
            conn: Conn::new(Config::default()),
            buf: BytesMut::from(PREFACE),
        };
        assert_eq!(
            c.send(&frame(PING, 0, 0, &[0; 8])),
            fails(Reason::PROTOCOL_ERROR)
        );
        assert_eq!(c.goaway(), Some(0x1));
    }

    #[test]
    fn a_request_is_read_and_answered() {
        let mut c = client();
        let events = c
            .send(&frame(HEADERS, END_HEADERS | END_STREAM, 1, &get("/a?b")))
            .unwrap();
        assert_eq!(
            events,
            vec![Event::Request {
                stream: 1,
                end_stream: true
            }]
        );
        let r = c.conn.request();
        assert_eq!(r.method(), b"GET");
        assert_eq!(r.path(), Some(&b"/a?b"[..]));
        assert_eq!(r.authority(), Some(&b"example.com"[..]));
        assert_eq!(r.scheme(), Some(&b"https"[..]));
        assert_eq!(r.field_count(), 0);
        let fields: [(&[u8], &[u8]); 2] =
            [(b"Content-Type", b"text/plain"), (b"content-length", b"5")];
        c.conn.send_headers(1, 200, fields, false).unwrap();
        assert_eq!(c.conn.send_data(1, b"hello", true), Ok(5));
        let out = c.output();
        assert_eq!(out.len(), 2);
        assert_eq!((out[0].0, out[0].1, out[0].2), (HEADERS, END_HEADERS, 1));
        let mut decoded = Vec::new();
        hpack::Decoder::new(4096)
            .decode(&out[0].3, 1 << 20, |n: &[u8], v: &[u8]| {
                decoded.push((n.to_vec(), v.to_vec()));
                Ok::<(), std::convert::Infallible>(())
            })
            .unwrap();
        assert_eq!(
            decoded,
            vec![
                (b":status".to_vec(), b"200".to_vec()),
                (b"content-type".to_vec(), b"text/plain".to_vec()),
                (b"content-length".to_vec(), b"5".to_vec()),
            ]
        );
        assert_eq!(
            (out[1].0, out[1].1, out[1].2, &out[1].3[..]),
            (DATA, END_STREAM, 1, &b"hello"[..])
        );
        assert_eq!(c.conn.active(), 0);
        assert_eq!(c.conn.send_data(1, b"more", true), Err(StreamGone));
    }

    #[test]
    fn a_request_body_arrives_in_order_and_its_window_is_given_back() {
        let mut c = Client::new(Config {
            initial_connection_window: 65_535,
            ..Config::default()
        });
        let head = block(&[
            (":method", "POST"),
            (":scheme", "https"),
            (":path", "/up"),
            ("content-length", "40000"),
        ]);
        let mut bytes = frame(HEADERS, END_HEADERS, 1, &head);
        bytes.extend(frame(DATA, 0, 1, &[b'a'; 16_000]));
        bytes.extend(frame(DATA, 0, 1, &[b'b'; 16_000]));
        // Padded: 8,000 bytes of data, 99 of padding and its length byte.
        let mut padded = vec![99];
        padded.extend([b'c'; 8000]);
        padded.extend([0; 99]);
        bytes.extend(frame(DATA, END_STREAM | 0x8, 1, &padded));
        let events = c.send(&bytes).unwrap();
        assert_eq!(
            events[0],
            Event::Request {
                stream: 1,
                end_stream: false
            }
        );
        let body: Vec<u8> = events[1..]
            .iter()
            .flat_map(|e| match e {
                Event::Data { data, .. } => data.to_vec(),
                e => panic!("{e:?}"),
            })
            .collect();
        assert_eq!(body.len(), 40_000);
        assert!(matches!(
            events.last(),
            Some(Event::Data {
                end_stream: true,
                ..
            })
        ));
        c.output();
        c.conn.release(1, 40_000);
        // The stream has ended on the client's side: only the connection's window is
        // given back (its half is used), with the padding given back on arrival.
        let updates = |c: &mut Client| -> Vec<(u32, u32)> {
            c.output()
                .into_iter()
                .filter(|f| f.0 == WINDOW_UPDATE)
                .map(|f| (f.2, u32::from_be_bytes(f.3[..4].try_into().unwrap())))
                .collect()
        };
        assert_eq!(updates(&mut c), vec![(0, 40_100)]);
        // A stream still sending gets its own window back, in batches of half of it.
        let mut bytes = frame(HEADERS, END_HEADERS, 3, &head);
        bytes.extend(frame(DATA, 0, 3, &[b'd'; 16_000]));
        c.send(&bytes).unwrap();
        c.conn.release(3, 16_000);
        assert_eq!(updates(&mut c), vec![]);
        let mut bytes = frame(DATA, 0, 3, &[b'e'; 8_400]);
        bytes.extend(frame(DATA, 0, 3, &[b'f'; 8_400]));
        c.send(&bytes).unwrap();
        c.conn.release(3, 16_800);
        assert_eq!(updates(&mut c), vec![(0, 32_800), (3, 32_800)]);
    }

    #[test]
    fn a_body_longer_or_shorter_than_its_content_length_is_malformed() {
        let mut c = client();
        let head = block(&[
            (":method", "POST"),
            (":scheme", "https"),
            (":path", "/"),
            ("content-length", "3"),
        ]);
        let mut bytes = frame(HEADERS, END_HEADERS, 1, &head);
        bytes.extend(frame(DATA, END_STREAM, 1, b"four"));
        let events = c.send(&bytes).unwrap();
        assert_eq!(
            events[1],
            Event::Reset {
                stream: 1,
                reason: Reason::PROTOCOL_ERROR
            }
        );
        assert_eq!(c.resets(), vec![(1, 0x1)]);
        let mut bytes = frame(HEADERS, END_HEADERS, 3, &head);
        bytes.extend(frame(DATA, END_STREAM, 3, b"tw"));
        let events = c.send(&bytes).unwrap();
        assert_eq!(
            events[1],
            Event::Reset {
                stream: 3,
                reason: Reason::PROTOCOL_ERROR
            }
        );
    }

    #[test]
    fn malformed_requests_are_reset_and_never_reach_the_server() {
        let cases: Vec<(&str, Vec<u8>)> = vec![
            ("upper-case name", {
                let mut b = get("/");
                b.extend(block(&[("X-Up", "1")]));
                b
            }),
            (
                "pseudo after regular",
                block(&[
                    (":method", "GET"),
                    ("x", "1"),
                    (":scheme", "https"),
                    (":path", "/"),
                ]),
            ),
            (
                "no :path",
                block(&[(":method", "GET"), (":scheme", "https")]),
            ),
            (
                "empty :path",
                block(&[(":method", "GET"), (":scheme", "https"), (":path", "")]),
            ),
            (
                "two :method",
                block(&[
                    (":method", "GET"),
                    (":method", "GET"),
                    (":scheme", "https"),
                    (":path", "/"),
                ]),
            ),
            (
                "unknown pseudo",
                block(&[
                    (":method", "GET"),
                    (":scheme", "https"),
                    (":path", "/"),
                    (":foo", "x"),
                ]),
            ),
            (
                "response pseudo",
                block(&[
                    (":method", "GET"),
                    (":scheme", "https"),
                    (":path", "/"),
                    (":status", "200"),
                ]),
            ),
            ("connection field", {
                let mut b = get("/");
                b.extend(block(&[("connection", "close")]));
                b
            }),
            ("te: gzip", {
                let mut b = get("/");
                b.extend(block(&[("te", "gzip")]));
                b
            }),
            ("LF in a value", {
                let mut b = get("/");
                b.extend(block(&[("x", "a\nb")]));
                b
            }),
        ];
        for (name, head) in cases {
            let mut c = client();
            let events = c
                .send(&frame(HEADERS, END_HEADERS | END_STREAM, 1, &head))
                .unwrap();
            assert_eq!(events, vec![], "{name}");
            assert_eq!(c.resets(), vec![(1, 0x1)], "{name}");
            // The connection goes on.
            let events = c
                .send(&frame(HEADERS, END_HEADERS | END_STREAM, 3, &get("/")))
                .unwrap();
            assert_eq!(
                events,
                vec![Event::Request {
                    stream: 3,
                    end_stream: true
                }],
                "{name}"
            );
        }
    }

    #[test]
    fn te_trailers_and_a_connect_with_authority_alone_are_well_formed() {
        let mut c = client();
        let mut head = get("/");
        head.extend(block(&[("te", "trailers")]));
        let events = c
            .send(&frame(HEADERS, END_HEADERS | END_STREAM, 1, &head))
            .unwrap();
        assert_eq!(
            events,
            vec![Event::Request {
                stream: 1,
                end_stream: true
            }]
        );
        let connect = block(&[(":method", "CONNECT"), (":authority", "example.com:443")]);
        let events = c.send(&frame(HEADERS, END_HEADERS, 3, &connect)).unwrap();
        assert_eq!(
            events,
            vec![Event::Request {
                stream: 3,
                end_stream: false
            }]
        );
    }

    #[test]
    fn stream_identifiers_must_be_odd_and_grow() {
        let mut c = client();
        assert_eq!(
            c.send(&frame(HEADERS, END_HEADERS | END_STREAM, 2, &get("/"))),
            fails(Reason::PROTOCOL_ERROR)
        );
        let mut c = client();
        c.request(5);
        assert_eq!(
            c.send(&frame(HEADERS, END_HEADERS | END_STREAM, 3, &get("/"))),
            fails(Reason::PROTOCOL_ERROR)
        );
        assert_eq!(c.goaway(), Some(0x1));
    }

    #[test]
    fn frames_on_idle_half_closed_and_closed_streams() {
        // DATA, WINDOW_UPDATE and RST_STREAM on a stream never opened: connection errors.
        for bytes in [
            frame(DATA, 0, 1, b"x"),
            frame(WINDOW_UPDATE, 0, 1, &1u32.to_be_bytes()),
            frame(RST_STREAM, 0, 1, &8u32.to_be_bytes()),
        ] {
            let mut c = client();
            assert_eq!(c.send(&bytes), fails(Reason::PROTOCOL_ERROR));
        }
        // DATA after the client's END_STREAM: STREAM_CLOSED.
        let mut c = client();
        c.request(1);
        let events = c.send(&frame(DATA, 0, 1, b"x")).unwrap();
        assert_eq!(
            events,
            vec![Event::Reset {
                stream: 1,
                reason: Reason::STREAM_CLOSED
            }]
        );
        assert_eq!(c.resets(), vec![(1, 0x5)]);
        // A stream closed both ways: late WINDOW_UPDATE and RST_STREAM are ignored, DATA
        // and HEADERS get STREAM_CLOSED.
        let mut c = client();
        c.request(1);
        c.conn.send_headers(1, 204, [], true).unwrap();
        c.output();
        let late = [
            frame(WINDOW_UPDATE, 0, 1, &1u32.to_be_bytes()),
            frame(RST_STREAM, 0, 1, &8u32.to_be_bytes()),
            frame(PRIORITY, 0, 1, &[0, 0, 0, 0, 16]),
        ]
        .concat();
        assert_eq!(c.send(&late), Ok(vec![]));
        assert_eq!(c.output(), vec![]);
        assert_eq!(c.send(&frame(DATA, 0, 1, b"x")), Ok(vec![]));
        assert_eq!(c.resets(), vec![(1, 0x5)]);
        // The server has reset it now: what the client sent before it knew is ignored.
        assert_eq!(c.send(&frame(DATA, 0, 1, b"y")), Ok(vec![]));
        assert_eq!(
            c.send(&frame(HEADERS, END_HEADERS | END_STREAM, 1, &get("/"))),
            Ok(vec![])
        );
        assert_eq!(c.output(), vec![]);
        // HEADERS on a stream both sides ended: a connection error.
        c.request(3);
        c.conn.send_headers(3, 204, [], true).unwrap();
        assert_eq!(
            c.send(&frame(HEADERS, END_HEADERS | END_STREAM, 3, &get("/"))),
            fails(Reason::STREAM_CLOSED)
        );
    }

    #[test]
    fn streams_beyond_the_limit_are_refused() {
        let mut c = Client::new(Config {
            max_concurrent_streams: 2,
            ..Config::default()
        });
        let mut bytes = Vec::new();
        for id in [1, 3, 5] {
            bytes.extend(frame(HEADERS, END_HEADERS, id, &get("/")));
        }
        let events = c.send(&bytes).unwrap();
        assert_eq!(events.len(), 2);
        assert_eq!(c.resets(), vec![(5, 0x7)]);
        // Once one ends, another may open.
        c.conn.reset(1, Reason::CANCEL);
        let events = c.send(&frame(HEADERS, END_HEADERS, 7, &get("/"))).unwrap();
        assert_eq!(
            events,
            vec![Event::Request {
                stream: 7,
                end_stream: false
            }]
        );
    }

    #[test]
    fn a_header_block_continues_in_continuation_frames_and_nothing_may_come_between() {
        let head = get("/split");
        let mut c = client();
        let mut bytes = frame(HEADERS, END_STREAM, 1, &head[..5]);
        bytes.extend(frame(CONTINUATION, 0, 1, &head[5..20]));
        bytes.extend(frame(CONTINUATION, END_HEADERS, 1, &head[20..]));
        let events = c.send(&bytes).unwrap();
        assert_eq!(
            events,
            vec![Event::Request {
                stream: 1,
                end_stream: true
            }]
        );
        assert_eq!(c.conn.request().path(), Some(&b"/split"[..]));
        for between in [
            frame(PING, 0, 0, &[0; 8]),
            frame(CONTINUATION, END_HEADERS, 5, &head[5..]),
            frame(0xfa, 0, 0, b"x"),
        ] {
            let mut c = client();
            let mut bytes = frame(HEADERS, END_STREAM, 3, &head[..5]);
            bytes.extend(between);
            assert_eq!(c.send(&bytes), fails(Reason::PROTOCOL_ERROR));
        }
        let mut c = client();
        assert_eq!(
            c.send(&frame(CONTINUATION, END_HEADERS, 1, &head)),
            fails(Reason::PROTOCOL_ERROR)
        );
    }

    #[test]
    fn an_endless_continuation_ends_the_connection_at_four_times_the_head_budget() {
        let mut c = Client::new(Config {
            max_header_list_size: 8192,
            ..Config::default()
        });
        let mut bytes = frame(HEADERS, 0, 1, &get("/"));
        let filler = block(&[("x", &"y".repeat(100))]);
        let mut result = Ok(vec![]);
        for _ in 0..1000 {
            bytes.extend(frame(CONTINUATION, 0, 1, &filler));
            result = c.send(&bytes);
            bytes.clear();
            if result.is_err() {
                break;
            }
        }
        assert_eq!(result, fails(Reason::ENHANCE_YOUR_CALM));
        assert!(c.conn.block.len() <= 4 * 8192 + filler.len() + 9);
    }

    #[test]
    fn a_head_over_the_budget_is_still_decoded_and_marked() {
        let mut c = Client::new(Config {
            max_header_list_size: 200,
            ..Config::default()
        });
        let mut head = get("/");
        head.extend(block(&[("x-big", &"z".repeat(120))]));
        let events = c
            .send(&frame(HEADERS, END_HEADERS | END_STREAM, 1, &head))
            .unwrap();
        assert_eq!(
            events,
            vec![Event::Request {
                stream: 1,
                end_stream: true
            }]
        );
        assert!(c.conn.request().oversize());
    }

    #[test]
    fn send_windows_hold_data_back_until_the_client_opens_them() {
        let mut c = client();
        c.request(1);
        c.conn.send_headers(1, 200, [], false).unwrap();
        let body = vec![7u8; 100_000];
        assert_eq!(c.conn.send_data(1, &body, true), Ok(65_535));
        assert_eq!(c.conn.capacity(1), 0);
        let out = c.output();
        let sizes: Vec<usize> = out
            .iter()
            .filter(|f| f.0 == DATA)
            .map(|f| f.3.len())
            .collect();
        assert_eq!(sizes, vec![16_384, 16_384, 16_384, 16_383]);
        // The stream's window alone is not enough: the connection's is spent too.
        let events = c
            .send(&frame(WINDOW_UPDATE, 0, 1, &50_000u32.to_be_bytes()))
            .unwrap();
        assert_eq!(events, vec![Event::Window]);
        assert_eq!(c.conn.capacity(1), 0);
        c.send(&frame(WINDOW_UPDATE, 0, 0, &50_000u32.to_be_bytes()))
            .unwrap();
        assert_eq!(c.conn.capacity(1), 50_000);
        assert_eq!(c.conn.send_data(1, &body[65_535..], true), Ok(34_465));
        let out = c.output();
        assert_eq!(out.last().map(|f| f.1), Some(END_STREAM));
        assert_eq!(c.conn.active(), 0);
    }

    #[test]
    fn a_payload_appended_in_place_is_framed_within_the_windows() {
        let mut c = client();
        c.request(1);
        c.conn.send_headers(1, 200, [], false).unwrap();
        c.output();
        let mut sent = 0;
        while sent < 70_000 {
            let n = c.conn.begin_data(1, 70_000 - sent).unwrap();
            if n == 0 {
                break;
            }
            assert!(n <= 16_384);
            c.conn.payload().extend(std::iter::repeat_n(9u8, n));
            sent += n;
            c.conn.finish_data(sent == 70_000);
        }
        // The windows (65,535) stop it short of 70,000.
        assert_eq!(sent, 65_535);
        let out = c.output();
        assert!(out.iter().all(|f| f.0 == DATA && f.1 == 0 && f.2 == 1));
        assert_eq!(out.iter().map(|f| f.3.len()).sum::<usize>(), 65_535);
        c.send(&frame(WINDOW_UPDATE, 0, 0, &10_000u32.to_be_bytes()))
            .unwrap();
        c.send(&frame(WINDOW_UPDATE, 0, 1, &10_000u32.to_be_bytes()))
            .unwrap();
        let n = c.conn.begin_data(1, 4_465).unwrap();
        assert_eq!(n, 4_465);
        c.conn.payload().extend(std::iter::repeat_n(9u8, 4_000));
        c.conn.finish_data(false);
        let n = c.conn.begin_data(1, 465).unwrap();
        c.conn.payload().extend(std::iter::repeat_n(9u8, n));
        c.conn.finish_data(true);
        let out = c.output();
        assert_eq!(
            out.iter().map(|f| (f.1, f.3.len())).collect::<Vec<_>>(),
            vec![(0, 4_000), (END_STREAM, 465)]
        );
        assert_eq!(c.conn.active(), 0);
        assert_eq!(c.conn.begin_data(1, 1), Err(StreamGone));
    }

    #[test]
    fn settings_move_open_windows_and_frame_sizes() {
        let mut c = client();
        c.request(1);
        c.conn.send_headers(1, 200, [], false).unwrap();
        assert_eq!(c.conn.send_data(1, &[1; 1000], false), Ok(1000));
        // INITIAL_WINDOW_SIZE 100: the open stream's window is now 100 - 1000 < 0.
        let mut params = vec![0, 4, 0, 0, 0, 100];
        params.extend([0, 5, 0, 0, 0x80, 0]); // MAX_FRAME_SIZE 32768
        c.send(&frame(SETTINGS, 0, 0, &params)).unwrap();
        let out = c.output();
        assert!(out.iter().any(|f| f.0 == SETTINGS && f.1 == ACK));
        assert_eq!(c.conn.capacity(1), 0);
        c.send(&frame(WINDOW_UPDATE, 0, 1, &100_000u32.to_be_bytes()))
            .unwrap();
        assert_eq!(c.conn.capacity(1), 64_535);
        assert_eq!(c.conn.send_data(1, &vec![2; 40_000], false), Ok(40_000));
        let sizes: Vec<usize> = c.output().iter().map(|f| f.3.len()).collect();
        assert_eq!(sizes, vec![32_768, 7_232]);
    }

    #[test]
    fn windows_may_not_pass_two_to_the_thirty_one() {
        let mut c = client();
        assert_eq!(
            c.send(&frame(WINDOW_UPDATE, 0, 0, &0x7fff_ffffu32.to_be_bytes())),
            fails(Reason::FLOW_CONTROL_ERROR)
        );
        let mut c = client();
        c.request(1);
        let events = c
            .send(&frame(WINDOW_UPDATE, 0, 1, &0x7fff_ffffu32.to_be_bytes()))
            .unwrap();
        assert_eq!(
            events,
            vec![Event::Reset {
                stream: 1,
                reason: Reason::FLOW_CONTROL_ERROR
            }]
        );
        let mut c = client();
        c.request(1);
        c.send(&frame(WINDOW_UPDATE, 0, 1, &0x7fff_0000u32.to_be_bytes()))
            .unwrap();
        assert_eq!(
            c.send(&frame(SETTINGS, 0, 0, &[0, 4, 0, 1, 0, 0])),
            fails(Reason::FLOW_CONTROL_ERROR)
        );
    }

    #[test]
    fn a_client_that_overruns_its_window_is_stopped() {
        let mut c = Client::new(Config {
            initial_stream_window: 16_384,
            ..Config::default()
        });
        let head = block(&[(":method", "POST"), (":scheme", "https"), (":path", "/")]);
        let mut bytes = frame(HEADERS, END_HEADERS, 1, &head);
        bytes.extend(frame(DATA, 0, 1, &[0; 16_384]));
        bytes.extend(frame(DATA, 0, 1, &[0; 1]));
        let events = c.send(&bytes).unwrap();
        assert_eq!(
            events.last(),
            Some(&Event::Reset {
                stream: 1,
                reason: Reason::FLOW_CONTROL_ERROR
            })
        );
    }

    #[test]
    fn pings_are_answered_and_an_unread_output_stops_the_reading() {
        let mut c = client();
        let pings: Vec<u8> = frame(PING, 0, 0, b"12345678").repeat(10_000);
        c.buf.extend_from_slice(&pings);
        assert_eq!(c.events(), Ok(vec![]));
        // Stopped with the output just past its bound, the rest of the pings unread.
        assert!(c.conn.output().len() <= OUTPUT_HIGH + 17);
        assert!(c.buf.len() > 100_000);
        let out = c.output();
        assert!(out
            .iter()
            .all(|f| f.0 == PING && f.1 == ACK && f.3 == b"12345678"));
        assert_eq!(c.events(), Ok(vec![]));
        assert!(!c.conn.output().is_empty());
    }

    #[test]
    fn a_client_reset_reaches_the_server_and_goaway_refuses_new_streams() {
        let mut c = client();
        c.request(1);
        let events = c
            .send(&frame(RST_STREAM, 0, 1, &8u32.to_be_bytes()))
            .unwrap();
        assert_eq!(
            events,
            vec![Event::Reset {
                stream: 1,
                reason: Reason::CANCEL
            }]
        );
        assert_eq!(c.conn.send_headers(1, 200, [], true), Err(StreamGone));
        c.request(3);
        c.conn.go_away(Reason::NO_ERROR);
        assert_eq!(c.goaway(), Some(0));
        assert!(c.conn.is_going_away());
        let events = c
            .send(&frame(HEADERS, END_HEADERS | END_STREAM, 5, &get("/")))
            .unwrap();
        assert_eq!(events, vec![]);
        assert_eq!(c.resets(), vec![(5, 0x7)]);
        // The stream it let in is still answered.
        assert_eq!(c.conn.send_headers(3, 204, [], true), Ok(()));
    }

    #[test]
    fn output_written_a_little_at_a_time_comes_out_whole_and_in_order() {
        let mut c = client();
        let mut expected = Vec::new();
        let mut got = Vec::new();
        for i in 0..200u8 {
            c.send(&frame(PING, 0, 0, &[i; 8])).unwrap();
            expected.extend(frame(PING, ACK, 0, &[i; 8]));
            // Writes of 1 to 23 bytes, never all of the output at once.
            let n = (usize::from(i) % 23 + 1).min(c.conn.output().len());
            got.extend_from_slice(&c.conn.output()[..n]);
            c.conn.written(n);
        }
        got.extend_from_slice(c.conn.output());
        assert_eq!(got, expected);
    }

    #[test]
    fn a_complete_response_to_a_request_still_sending_tells_it_to_stop() {
        let mut c = client();
        let head = block(&[(":method", "POST"), (":scheme", "https"), (":path", "/")]);
        c.send(&frame(HEADERS, END_HEADERS, 1, &head)).unwrap();
        c.output();
        c.conn.send_headers(1, 413, [], true).unwrap();
        assert_eq!(c.resets(), vec![(1, 0x0)]);
        assert_eq!(c.conn.active(), 0);
        // What the client sent before it knew is ignored.
        assert_eq!(c.send(&frame(DATA, END_STREAM, 1, b"late")), Ok(vec![]));
        assert_eq!(c.output(), vec![]);
    }

    #[test]
    fn padding_goes_back_to_the_stream_window_and_is_announced() {
        let mut c = Client::new(Config {
            initial_stream_window: 16_384,
            ..Config::default()
        });
        let head = block(&[(":method", "POST"), (":scheme", "https"), (":path", "/")]);
        let mut padded = vec![200];
        padded.extend([b'x'; 100]);
        padded.extend([0; 200]);
        let mut bytes = frame(HEADERS, END_HEADERS, 1, &head);
        for _ in 0..30 {
            bytes.extend(frame(DATA, 0x8, 1, &padded));
        }
        // 30 frames of 301 bytes: 9,030 against a window of 16,384; 6,030 of it padding.
        c.send(&bytes).unwrap();
        let updates: Vec<(u32, u32)> = c
            .output()
            .into_iter()
            .filter(|f| f.0 == WINDOW_UPDATE)
            .map(|f| (f.2, u32::from_be_bytes(f.3[..4].try_into().unwrap())))
            .collect();
        assert_eq!(updates, vec![]);
        let mut more = Vec::new();
        for _ in 0..30 {
            more.extend(frame(DATA, 0x8, 1, &padded));
        }
        // Without the padding given back this would overrun the window.
        let events = c.send(&more).unwrap();
        assert!(
            events.iter().all(|e| matches!(e, Event::Data { .. })),
            "{events:?}"
        );
        let updates: Vec<(u32, u32)> = c
            .output()
            .into_iter()
            .filter(|f| f.0 == WINDOW_UPDATE && f.2 == 1)
            .map(|f| (f.2, u32::from_be_bytes(f.3[..4].try_into().unwrap())))
            .collect();
        assert_eq!(updates, vec![(1, 8_241)]);
    }

    #[test]
    fn push_promise_from_a_client_is_a_connection_error() {
        let mut c = client();
        let mut payload = 2u32.to_be_bytes().to_vec();
        payload.extend(get("/"));
        assert_eq!(
            c.send(&frame(0x5, END_HEADERS, 1, &payload)),
            fails(Reason::PROTOCOL_ERROR)
        );
    }
}
