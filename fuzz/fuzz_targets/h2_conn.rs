//! Fuzzes the server's side of an HTTP/2 connection (`h2codec::conn::Conn`): a client
//! that has sent a valid preface and SETTINGS then sends whatever frames the input says,
//! in pieces, and a server that answers the requests it gets, sends bodies, gives back
//! window, resets streams and writes the output when the input says so. The frames are
//! built with the crate's own writers and HPACK encoder (or from raw bytes when the input
//! asks), so most inputs get past the preface and into stream states and flow control.
//!
//! Besides "never panics", it checks:
//!
//! - `Conn::next` never loops: every event it returns consumed bytes of the buffer;
//! - the output stays bounded while the server writes nothing: `next` stops reading at
//!   `OUTPUT_HIGH`, so the output never holds more than that plus what one frame or one
//!   (small) server action adds;
//! - once it has failed, the connection stays failed.
//!
//! Input: one byte that picks the server's configuration, then operations, each one byte
//! (which operation) followed by the bytes it reads.

#![no_main]

use bytes::BytesMut;
use h2codec::conn::{Config, Conn, Event, OUTPUT_HIGH, PREFACE};
use h2codec::frame::{self, flag, kind, setting, Head, Reason};
use h2codec::hpack::Encoder;
use libfuzzer_sys::fuzz_target;

/// What one frame or one server action may add to the output past `OUTPUT_HIGH`: a
/// response head of a few fields, a DATA frame of at most `MAX_BODY_PIECE` bytes, or the
/// few small frames (acknowledgements, RST_STREAM, WINDOW_UPDATE, GOAWAY) one client
/// frame can make the connection owe.
const SLACK: usize = 1024;

/// The most body bytes the server sends in one action.
const MAX_BODY_PIECE: usize = 256;

/// Names the client's requests carry besides the pseudo-header fields, each with a value
/// from the input: ones that change how a request is read or refused.
const FIELD_NAMES: [&[u8]; 8] = [
    b"content-length",
    b"te",
    b"connection",
    b"cookie",
    b"host",
    b"accept",
    b"x-fuzz",
    b":status",
];

const METHODS: [&[u8]; 4] = [b"GET", b"POST", b"CONNECT", b"HEAD"];

fuzz_target!(|data: &[u8]| {
    let Some((&config, ops)) = data.split_first() else {
        return;
    };
    let config = match config % 3 {
        0 => Config::default(),
        // Small windows, few streams and a small header budget, so that flow control,
        // REFUSED_STREAM and oversize heads are a few frames away.
        1 => Config {
            max_concurrent_streams: 2,
            initial_stream_window: 100,
            initial_connection_window: 65_535,
            max_frame_size: 16_384,
            header_table_size: 64,
            max_header_list_size: 200,
        },
        _ => Config {
            header_table_size: 0,
            max_frame_size: 65_535,
            ..Config::default()
        },
    };
    let mut client = Client::new(&config);
    let mut server = Server::new(config);
    let mut input = Input(ops);
    while let Some(op) = input.byte() {
        if !server.alive {
            return;
        }
        match op % 20 {
            0 => client.headers(&mut input),
            1 => client.continuation(&mut input),
            2 => client.data(&mut input),
            3 => client.settings(&mut input),
            4 => frame::write_settings_ack(&mut client.out),
            5 => client.ping(&mut input),
            6 => client.window_update(&mut input),
            7 => client.rst_stream(&mut input),
            8 => client.raw_frame(kind::PRIORITY, &mut input),
            9 => client.goaway(&mut input),
            10 => client.raw_frame(kind::PUSH_PROMISE, &mut input),
            11 => {
                let kind = input.byte().unwrap_or(0);
                client.raw_frame(kind, &mut input)
            }
            12 => {
                let n = usize::from(input.byte().unwrap_or(0));
                client.out.extend_from_slice(input.take(n));
            }
            13 => {
                let n = usize::from(input.byte().unwrap_or(0)) * 16;
                server.write_output(n)
            }
            14 => server.respond(&mut input),
            15 => server.send_body(&mut input),
            16 => server.release(&mut input),
            17 => server.reset(&mut input),
            18 => server.go_away(&mut input),
            // Deliver what the client wrote so far: a split point.
            _ => server.receive(&mut client.out),
        }
        server.check_output();
    }
    server.receive(&mut client.out);
    // The server writes everything it has and reads on until nothing more happens.
    while server.alive {
        let before = server.buf.len();
        server.write_output(usize::MAX);
        server.pump();
        if server.buf.len() == before && server.conn.output().is_empty() {
            break;
        }
    }
});

/// The fuzz input, read front to back; past its end every read is empty or zero.
struct Input<'a>(&'a [u8]);

impl<'a> Input<'a> {
    fn byte(&mut self) -> Option<u8> {
        let (&b, rest) = self.0.split_first()?;
        self.0 = rest;
        Some(b)
    }

    fn take(&mut self, n: usize) -> &'a [u8] {
        let (taken, rest) = self.0.split_at(n.min(self.0.len()));
        self.0 = rest;
        taken
    }

    fn u32(&mut self) -> u32 {
        let mut word = [0; 4];
        let taken = self.take(4);
        word[..taken.len()].copy_from_slice(taken);
        u32::from_be_bytes(word)
    }

    /// A regular field: a name from `FIELD_NAMES` and a value of up to 31 bytes.
    fn field(&mut self) -> (&'static [u8], &'a [u8]) {
        let name = FIELD_NAMES[usize::from(self.byte().unwrap_or(0)) % FIELD_NAMES.len()];
        let len = usize::from(self.byte().unwrap_or(0) % 32);
        (name, self.take(len))
    }

    /// A client stream id: small odd numbers mostly, so streams are reused and closed
    /// ones come back; 0 or an even id now and then.
    fn stream(&mut self) -> u32 {
        match self.byte().unwrap_or(0) {
            0 => 0,
            255 => self.u32() & 0x7fff_ffff,
            b if b >= 248 => u32::from(b - 247) * 2,
            b => u32::from(b % 16) * 2 + 1,
        }
    }
}

/// The client: frames it has written and not yet delivered, its HPACK encoder, and the
/// rest of a header block whose HEADERS frame went without END_HEADERS.
struct Client {
    out: Vec<u8>,
    encoder: Encoder,
    pending_block: Vec<u8>,
    pending_stream: u32,
}

impl Client {
    fn new(config: &Config) -> Client {
        let mut out = PREFACE.to_vec();
        frame::write_settings(&mut out, &[(setting::ENABLE_PUSH, 0)]);
        Client {
            out,
            // In step with the server's decoder, which starts at the announced size.
            encoder: Encoder::with_limit(config.header_table_size as usize),
            pending_block: Vec::new(),
            pending_stream: 0,
        }
    }

    /// A request's HEADERS frame, its block from the client's encoder: the pseudo-header
    /// fields (one left out or a field put first now and then) and up to three fields.
    fn headers(&mut self, input: &mut Input<'_>) {
        let stream = input.stream();
        let flags = input.byte().unwrap_or(0);
        let shape = input.byte().unwrap_or(0);
        let mut block = Vec::new();
        let mut fields = self.encoder.block(&mut block);
        if shape & 0x80 != 0 {
            let (name, value) = input.field();
            fields.field(name, value);
        }
        let method = METHODS[usize::from(shape) % METHODS.len()];
        if shape & 0x04 == 0 {
            fields.field(b":method", method);
        }
        if shape & 0x08 == 0 {
            fields.field(b":scheme", b"https");
        }
        if shape & 0x10 == 0 {
            let len = usize::from(input.byte().unwrap_or(0) % 32);
            let mut path = b"/".to_vec();
            path.extend_from_slice(input.take(len));
            fields.field(b":path", &path);
        }
        if shape & 0x20 == 0 {
            fields.field(b":authority", b"example.com");
        }
        for _ in 0..(shape >> 6) & 3 {
            let (name, value) = input.field();
            fields.field(name, value);
        }
        fields.finish();
        let end_stream = flags & 1 != 0;
        let end_headers = flags & 2 == 0;
        // The writers take no stream 0 (a server never writes one); a client may.
        if end_headers && stream != 0 {
            frame::write_headers(&mut self.out, stream, &block, end_stream, 16_384);
            return;
        }
        // Without END_HEADERS: part of the block now, the rest with a CONTINUATION op.
        let split = match end_headers {
            true => block.len(),
            false => usize::from(flags >> 2) % (block.len() + 1),
        };
        let mut flags = if end_stream { flag::END_STREAM } else { 0 };
        if end_headers {
            flags |= flag::END_HEADERS;
        }
        self.raw(kind::HEADERS, flags, stream, &block[..split]);
        self.pending_block = block[split..].to_vec();
        self.pending_stream = stream;
    }

    /// A CONTINUATION with the rest of the pending block (or garbage if there is none),
    /// on its stream unless the input picks another.
    fn continuation(&mut self, input: &mut Input<'_>) {
        let how = input.byte().unwrap_or(0);
        let stream = match how & 1 {
            0 => self.pending_stream,
            _ => input.stream(),
        };
        let block = std::mem::take(&mut self.pending_block);
        let flags = if how & 2 == 0 { flag::END_HEADERS } else { 0 };
        match block.is_empty() {
            true => {
                let n = usize::from(input.byte().unwrap_or(0) % 64);
                let garbage = input.take(n).to_vec();
                self.raw(kind::CONTINUATION, flags, stream, &garbage);
            }
            false => self.raw(kind::CONTINUATION, flags, stream, &block),
        }
    }

    /// DATA: a length of 0 to 255 times 1, 16 or 256 bytes, sometimes padded.
    fn data(&mut self, input: &mut Input<'_>) {
        let stream = input.stream();
        let flags = input.byte().unwrap_or(0);
        let len = usize::from(input.byte().unwrap_or(0)) << (4 * (flags >> 6).min(2));
        let body = vec![b'x'; len];
        if flags & 2 == 0 && stream != 0 {
            frame::write_data(&mut self.out, stream, &body, flags & 1 != 0);
            return;
        }
        let pad = input.byte().unwrap_or(0);
        let mut payload = vec![pad];
        payload.extend_from_slice(&body);
        payload.resize(payload.len() + usize::from(pad), 0);
        let flags = (flags & flag::END_STREAM) | flag::PADDED;
        self.raw(kind::DATA, flags, stream, &payload);
    }

    fn settings(&mut self, input: &mut Input<'_>) {
        let n = input.byte().unwrap_or(0) % 5;
        let params: Vec<(u16, u32)> = (0..n)
            .map(|_| {
                let id = u16::from(input.byte().unwrap_or(0) % 10);
                let value = match input.byte().unwrap_or(0) {
                    0 => 0,
                    1 => 1,
                    2 => 16_384,
                    3 => 0x7fff_ffff,
                    4 => 0x8000_0000,
                    b if b < 128 => u32::from(b) * 1000,
                    _ => input.u32(),
                };
                (id, value)
            })
            .collect();
        frame::write_settings(&mut self.out, &params);
    }

    fn ping(&mut self, input: &mut Input<'_>) {
        let ack = input.byte().unwrap_or(0) & 1 != 0;
        let mut payload = [0; 8];
        let taken = input.take(8);
        payload[..taken.len()].copy_from_slice(taken);
        match ack {
            true => frame::write_ping_ack(&mut self.out, payload),
            false => frame::write_ping(&mut self.out, payload),
        }
    }

    /// WINDOW_UPDATE, written raw: the writer refuses the increments of 0 and past
    /// 2^31-1 that a client may send.
    fn window_update(&mut self, input: &mut Input<'_>) {
        let stream = input.stream();
        let increment = match input.byte().unwrap_or(0) {
            0 => 0,
            1 => 0x7fff_ffff,
            b if b < 128 => u32::from(b) * 1000,
            _ => input.u32(),
        };
        self.raw(kind::WINDOW_UPDATE, 0, stream, &increment.to_be_bytes());
    }

    fn rst_stream(&mut self, input: &mut Input<'_>) {
        let stream = input.stream();
        let code = input.byte().unwrap_or(0) % 16;
        self.raw(kind::RST_STREAM, 0, stream, &u32::from(code).to_be_bytes());
    }

    fn goaway(&mut self, input: &mut Input<'_>) {
        let last_stream = input.stream();
        let code = input.byte().unwrap_or(0) % 16;
        frame::write_goaway(&mut self.out, last_stream, Reason(code.into()), b"fuzz");
    }

    /// A frame of `kind` with flags, stream and payload (up to 63 bytes) from the input.
    fn raw_frame(&mut self, kind: u8, input: &mut Input<'_>) {
        let flags = input.byte().unwrap_or(0);
        let stream = input.stream();
        let len = usize::from(input.byte().unwrap_or(0) % 64);
        let payload = input.take(len).to_vec();
        self.raw(kind, flags, stream, &payload);
    }

    fn raw(&mut self, kind: u8, flags: u8, stream: u32, payload: &[u8]) {
        Head {
            len: payload.len() as u32,
            kind,
            flags,
            stream,
        }
        .write(&mut self.out);
        self.out.extend_from_slice(payload);
    }
}

/// The server: the connection, its read buffer, and what it knows of the streams.
struct Server {
    conn: Conn,
    buf: BytesMut,
    alive: bool,
    /// Streams with a request the server may answer.
    requests: Vec<u32>,
    /// Streams whose response head went, so body bytes may follow.
    responding: Vec<u32>,
    /// Body bytes received and not yet given back, by stream.
    received: Vec<(u32, usize)>,
}

impl Server {
    fn new(config: Config) -> Server {
        Server {
            conn: Conn::new(config),
            buf: BytesMut::new(),
            alive: true,
            requests: Vec::new(),
            responding: Vec::new(),
            received: Vec::new(),
        }
    }

    /// The client's bytes arrive; the server reads events until there are none.
    fn receive(&mut self, bytes: &mut Vec<u8>) {
        self.buf.extend_from_slice(bytes);
        bytes.clear();
        self.pump();
    }

    fn pump(&mut self) {
        while self.alive {
            let before = self.buf.len();
            let event = self.conn.next(&mut self.buf);
            self.check_output();
            match event {
                Ok(None) => return,
                Ok(Some(event)) => {
                    assert!(self.buf.len() < before, "{event:?} consumed nothing");
                    self.on_event(event);
                }
                Err(_) => {
                    self.alive = false;
                    assert!(
                        self.conn.next(&mut self.buf).is_err(),
                        "a failed connection recovered"
                    );
                }
            }
        }
    }

    fn on_event(&mut self, event: Event) {
        match event {
            Event::Request { stream, .. } => {
                let request = self.conn.request();
                // Read every part, as the server does.
                let _ = (
                    request.method(),
                    request.scheme(),
                    request.authority(),
                    request.path(),
                );
                let fields = request.fields().count();
                assert_eq!(fields, request.field_count());
                let owned = request.to_owned();
                assert_eq!(owned.view().fields().count(), fields);
                self.requests.push(stream);
            }
            Event::Data { stream, data, .. } => {
                match self.received.iter_mut().find(|(s, _)| *s == stream) {
                    Some((_, n)) => *n += data.len(),
                    None => self.received.push((stream, data.len())),
                }
            }
            Event::Reset { stream, .. } => {
                self.requests.retain(|&s| s != stream);
                self.responding.retain(|&s| s != stream);
            }
            Event::Window | Event::GoAway { .. } => {}
        }
    }

    /// While the server writes nothing, `next` reads nothing past `OUTPUT_HIGH`.
    fn check_output(&self) {
        let len = self.conn.output().len();
        assert!(len <= OUTPUT_HIGH + SLACK, "{len} bytes of output");
    }

    /// The first `n` bytes of the output went to the socket.
    fn write_output(&mut self, n: usize) {
        let n = n.min(self.conn.output().len());
        self.conn.written(n);
    }

    /// A server that waits for the socket before it frames more.
    fn can_send(&self) -> bool {
        self.conn.output().len() <= OUTPUT_HIGH
    }

    fn respond(&mut self, input: &mut Input<'_>) {
        let how = input.byte().unwrap_or(0);
        if self.requests.is_empty() || !self.can_send() {
            return;
        }
        let stream = self.requests.remove(usize::from(how) % self.requests.len());
        let status = [200, 404, 301, 103][usize::from(how >> 4) % 4];
        let fields: [(&[u8], &[u8]); 2] = [(b"Content-Type", b"text/plain"), (b"x-fuzz", b"1")];
        let end_stream = how & 8 != 0;
        if self
            .conn
            .send_headers(stream, status, fields, end_stream)
            .is_ok()
            && !end_stream
        {
            self.responding.push(stream);
        }
    }

    fn send_body(&mut self, input: &mut Input<'_>) {
        let how = input.byte().unwrap_or(0);
        let len = usize::from(input.byte().unwrap_or(0)).min(MAX_BODY_PIECE);
        if self.responding.is_empty() || !self.can_send() {
            return;
        }
        let i = usize::from(how) % self.responding.len();
        let stream = self.responding[i];
        let end_stream = how & 0x80 != 0;
        let capacity = self.conn.capacity(stream);
        let sent = match how & 0x40 {
            0 => self.conn.send_data(stream, &vec![b'y'; len], end_stream),
            // The in-place way: begin, append, finish.
            _ => self.conn.begin_data(stream, len).inspect(|&room| {
                let payload = self.conn.payload();
                payload.resize(payload.len() + room, b'z');
                self.conn.finish_data(end_stream && room == len);
            }),
        };
        match sent {
            Ok(n) => {
                assert!(
                    n <= len && n <= capacity,
                    "sent {n} of {len} with capacity {capacity}"
                );
                if end_stream && n == len {
                    self.responding.remove(i);
                }
            }
            Err(_) => {
                self.responding.remove(i);
            }
        }
    }

    /// The server read body bytes: some of what arrived on a stream is given back.
    fn release(&mut self, input: &mut Input<'_>) {
        let how = input.byte().unwrap_or(0);
        if self.received.is_empty() {
            return;
        }
        let i = usize::from(how) % self.received.len();
        let (stream, n) = self.received[i];
        let give = match how & 0x80 {
            0 => n,
            _ => n / 2,
        };
        self.conn.release(stream, give);
        self.received[i].1 -= give;
    }

    fn reset(&mut self, input: &mut Input<'_>) {
        let how = input.byte().unwrap_or(0);
        let stream = match self.responding.len() {
            0 => return,
            n => self.responding.remove(usize::from(how) % n),
        };
        self.conn.reset(stream, Reason::INTERNAL_ERROR);
    }

    fn go_away(&mut self, input: &mut Input<'_>) {
        let reason = match input.byte().unwrap_or(0) % 4 {
            0 => Reason::PROTOCOL_ERROR,
            _ => Reason::NO_ERROR,
        };
        self.conn.go_away(reason);
        if reason != Reason::NO_ERROR {
            assert!(
                self.conn.next(&mut self.buf).is_err(),
                "GOAWAY with an error did not end it"
            );
            self.alive = false;
        }
    }
}
