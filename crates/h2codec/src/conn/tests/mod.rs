//! Tests of the connection's state machine, driven with raw frames.

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
        assert_eq!(events, opened(id, true));
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

/// The events of one request head read: stream `stream` opened.
fn opened(stream: u32, end_stream: bool) -> Vec<Event> {
    vec![Event::Request { stream, end_stream }]
}

fn client() -> Client {
    Client::new(Config::default())
}

/// What `Client::send` returns after a connection error.
fn fails(reason: Reason) -> Result<Vec<Event>, ConnError> {
    Err(ConnError { reason })
}

mod flow;
mod requests;
mod streams;
