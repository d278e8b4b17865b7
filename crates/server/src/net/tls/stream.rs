//! One TLS connection: rustls' *unbuffered* server connection over the worker's
//! non-blocking socket, driven by hand (no tokio-rustls) so that the connection's output
//! batch is encrypted straight from where it lies, a few records per write, so that
//! waiting is done on the socket's own readiness as on a cleartext connection, and so
//! that an idle connection holds no buffer.
//!
//! Why unbuffered: rustls' buffered `ServerConnection` keeps a read buffer of at least
//! 4 KiB for as long as the connection lives, the larger part of what an idle TLS
//! connection cost (measured: 7.3 KiB of rustls state per idle connection, 4 KiB of it
//! that buffer). Here the bytes read from the socket go into one per-worker buffer,
//! rustls decrypts them there, and the connection keeps bytes of its own only when it
//! must: the part of a record that has not all arrived, plaintext its reader had no room
//! for, records the socket would not take yet. Each of those is freed once used up, so
//! an idle connection holds rustls' keys and state and nothing more.
//!
//! Reads: the socket's bytes (after any partial record kept from before) go into the
//! worker's input buffer; every complete record is processed; application data is copied
//! into the reader's buffer. Writes: the batch (heads, small bodies, file pieces read
//! with pread(2) into one reused per-worker buffer) is encrypted as 16 KiB records, four
//! at most, into the worker's output buffer, which one write sends. kTLS would replace
//! the second half (the kernel encrypting, sendfile again) behind a start-up probe;
//! nothing above this file would change.

use std::cell::RefCell;
use std::future::poll_fn;
use std::io;
use std::rc::Rc;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use crate::net::reactor::Socket;
use rustls::server::UnbufferedServerConnection;
use rustls::unbuffered::{ConnectionState, EncodeError, EncryptError, InsufficientSizeError};
use rustls::ServerConfig;
use tokio::io::ReadBuf;

use crate::facts::TlsFacts;
use crate::net::output::{Output, Progress};

/// Plaintext per record: TLS's largest.
const RECORD: usize = 16 * 1024;
/// Records encrypted before one write sends them.
const RECORDS_PER_WRITE: usize = 4;
/// What a record adds to its plaintext at most: the header (5), TLS 1.2's explicit nonce
/// (8) or TLS 1.3's content type (1), and the AEAD tag (16).
const OVERHEAD: usize = 5 + 8 + 16;
/// The largest TLS record on the wire: header, 16 KiB, and the expansion TLS allows.
const MAX_WIRE_RECORD: usize = 5 + RECORD + 256;
/// The input buffer: room for a handshake message that spans records (rustls allows
/// 64 KiB) and a large read after it.
const INPUT: usize = 128 * 1024;

/// The worker's buffers (each worker is one thread; a connection never holds them across
/// a wait): bytes read from the socket, plaintext on its way into a record, records on
/// their way to the socket.
struct Scratch {
    input: Box<[u8]>,
    plain: Box<[u8]>,
    wire: Records,
}

/// Encrypted records on their way to the socket: `buf[at..len]`. `buf` only grows, and
/// its bytes past `len` stay initialized, so encrypting into it never fills it again.
#[derive(Default)]
struct Records {
    buf: Vec<u8>,
    at: usize,
    len: usize,
}

impl Records {
    fn pending(&self) -> &[u8] {
        &self.buf[self.at..self.len]
    }

    fn is_empty(&self) -> bool {
        self.at >= self.len
    }

    fn clear(&mut self) {
        self.at = 0;
        self.len = 0;
    }

    /// Room for at least `n` more bytes after what it holds; [`Records::filled`] says how
    /// much of it was used. Where the room is short and some bytes have gone out, the
    /// rest moves to the front instead of the buffer growing: a queue that a slow reader
    /// never lets empty stays the size of what it holds, not of all it ever held.
    fn room(&mut self, n: usize) -> &mut [u8] {
        if self.buf.len() < self.len + n && self.at > 0 {
            self.buf.copy_within(self.at..self.len, 0);
            self.len -= self.at;
            self.at = 0;
        }
        if self.buf.len() < self.len + n {
            self.buf.resize(self.len + n, 0);
        }
        &mut self.buf[self.len..]
    }

    fn filled(&mut self, n: usize) {
        self.len += n;
    }
}

thread_local! {
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch {
        input: vec![0; INPUT].into_boxed_slice(),
        plain: vec![0; RECORD].into_boxed_slice(),
        wire: Records {
            buf: vec![0; RECORDS_PER_WRITE * (RECORD + OVERHEAD)],
            at: 0,
            len: 0,
        },
    });

    /// The server name of the ClientHello just processed on this worker, set by the
    /// certificate resolver (`certs::Resolver`) while rustls runs inside
    /// [`TlsStream::receive`], and taken right after it: rustls' unbuffered connection
    /// has no accessor for the SNI it received (0.23), and the resolver sees every
    /// ClientHello, resumed or not. `Some(None)`: a ClientHello without SNI.
    static SNI: RefCell<Option<Option<Box<str>>>> = const { RefCell::new(None) };
}

/// Called by the certificate resolver with the ClientHello's server name.
pub(super) fn note_sni(name: Option<&str>) {
    SNI.with_borrow_mut(|sni| *sni = Some(name.map(Box::from)));
}

pub(crate) struct TlsStream {
    pub tcp: Socket,
    pub tls: UnbufferedServerConnection,
    /// Known once the handshake is done.
    pub facts: TlsFacts,
    /// Records (handshake messages, alerts, the tail of a write the socket refused) not
    /// yet taken by the socket; they go out before anything else.
    out: Records,
    /// Received bytes not processed yet: a record (or a handshake message spanning
    /// records) that has not all arrived.
    partial: Vec<u8>,
    /// Plaintext decrypted for which the reader had no room, from `plain_at` on.
    plain: Vec<u8>,
    plain_at: usize,
    /// The peer's close_notify arrived: reads end once `plain` is used up.
    peer_closed: bool,
    /// The server name the client sent, known once its ClientHello is processed.
    sni: Option<Box<str>>,
    /// Writes gather in `out` ([`TlsStream::hold_writes_until_flush`]).
    hold_writes: bool,
}

/// Where processing the received records stopped.
#[derive(PartialEq)]
enum Next {
    /// The handshake needs more bytes from the peer.
    Handshake,
    /// The handshake is done and every complete record is processed.
    Traffic,
}

fn tls_error(e: rustls::Error) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, e)
}

/// Encodes a handshake message or alert rustls has ready onto the end of `to`.
fn encode(
    state: &mut rustls::unbuffered::EncodeTlsData<'_, rustls::server::ServerConnectionData>,
    to: &mut Records,
) -> io::Result<()> {
    let n = match state.encode(to.room(1024)) {
        Ok(n) => n,
        Err(EncodeError::InsufficientSize(InsufficientSizeError { required_size })) => state
            .encode(to.room(required_size))
            .map_err(io::Error::other)?,
        Err(e) => return Err(io::Error::other(e)),
    };
    to.filled(n);
    Ok(())
}

impl TlsStream {
    /// The server's side of a handshake. It has no timer of its own: the connection's
    /// slot is in `ReadingHead` from accept, so the worker's periodic check closes a
    /// handshake that takes longer than `timeouts.head`, and the slot counts against
    /// the connection budget meanwhile.
    pub async fn accept(
        tcp: Socket,
        config: Arc<ServerConfig>,
        hosts: &handler::Hosts,
    ) -> io::Result<Box<TlsStream>> {
        let tls = UnbufferedServerConnection::new(config).map_err(io::Error::other)?;
        let facts = TlsFacts {
            site: hosts.default_site() as u32,
            sni: None,
            version: "-",
            cipher: "-",
            h2: false,
            quic: false,
        };
        // Boxed from the start: the connection's task holds a pointer across the
        // handshake's waits, not rustls' state.
        let mut stream = Box::new(TlsStream {
            tcp,
            tls,
            facts,
            out: Records::default(),
            partial: Vec::new(),
            plain: Vec::new(),
            plain_at: 0,
            peer_closed: false,
            sni: None,
            hold_writes: false,
        });
        while stream.tls.is_handshaking() {
            poll_fn(|cx| stream.tcp.poll_read_ready(cx)).await?;
            match stream.receive(&mut ReadBuf::new(&mut [])) {
                Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(e),
            }
            // The server's flight (and, once done, the TLS 1.3 session tickets).
            poll_fn(|cx| stream.poll_send(cx)).await?;
            if stream.peer_closed {
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
        }
        let tls = &stream.tls;
        if let Some(site) = stream
            .sni
            .as_deref()
            .and_then(|n| hosts.named(n.as_bytes()))
        {
            stream.facts.site = site as u32;
        }
        stream.facts.sni = stream.sni.take().map(Rc::new);
        stream.facts.version = match tls.protocol_version() {
            Some(rustls::ProtocolVersion::TLSv1_3) => "TLSv1.3",
            Some(rustls::ProtocolVersion::TLSv1_2) => "TLSv1.2",
            _ => "-",
        };
        stream.facts.h2 = tls.alpn_protocol() == Some(b"h2");
        stream.facts.cipher = tls
            .negotiated_cipher_suite()
            .and_then(|s| s.suite().as_str())
            .unwrap_or("-");
        Ok(stream)
    }

    /// Processes the received bytes `input` holds, from the front, until rustls needs
    /// more: handshake messages (its answers are queued in `out`), application data
    /// (copied into `into`; what does not fit is kept in `plain`), the peer's
    /// close_notify. Returns how many bytes of `input` are used up.
    fn process(&mut self, input: &mut [u8], into: &mut ReadBuf<'_>) -> io::Result<(usize, Next)> {
        let mut used = 0;
        loop {
            let status = self.tls.process_tls_records(&mut input[used..]);
            let mut discard = status.discard;
            let state = match status.state {
                Ok(state) => state,
                Err(e) => {
                    // rustls queued an alert saying why; it goes out with `send_now`.
                    // The bytes after those used up go back in: rustls may hold a
                    // handshake message's first part there (an empty buffer would be
                    // out of its bounds).
                    if let Ok(ConnectionState::EncodeTlsData(mut alert)) = self
                        .tls
                        .process_tls_records(&mut input[used + discard..])
                        .state
                    {
                        let _ = encode(&mut alert, &mut self.out);
                    }
                    return Err(tls_error(e));
                }
            };
            match state {
                ConnectionState::ReadTraffic(mut traffic) => {
                    while let Some(record) = traffic.next_record() {
                        let record = record.map_err(tls_error)?;
                        discard += record.discard;
                        let n = into.remaining().min(record.payload.len());
                        into.put_slice(&record.payload[..n]);
                        self.plain.extend_from_slice(&record.payload[n..]);
                    }
                }
                ConnectionState::EncodeTlsData(mut data) => encode(&mut data, &mut self.out)?,
                // The encoded records are in `out`, which goes out before anything
                // written later.
                ConnectionState::TransmitTlsData(data) => data.done(),
                ConnectionState::BlockedHandshake => return Ok((used + discard, Next::Handshake)),
                ConnectionState::WriteTraffic(_) => return Ok((used + discard, Next::Traffic)),
                ConnectionState::PeerClosed => self.peer_closed = true,
                ConnectionState::Closed => {
                    self.peer_closed = true;
                    return Ok((used + discard, Next::Traffic));
                }
                // 0-RTT is off (`max_early_data_size = 0`), so there is none to read.
                ConnectionState::ReadEarlyData(_) => {
                    return Err(io::Error::new(io::ErrorKind::InvalidData, "early data"))
                }
                _ => return Err(io::Error::other("unknown TLS connection state")),
            }
            used += discard;
        }
    }

    /// Reads what the socket has (after the partial record kept from before), processes
    /// it, and keeps what is left of a record that has not all arrived. Application data
    /// goes into `into`. `Ok(0)`: the end of the stream. A protocol
    /// error (a client speaking cleartext HTTP to a TLS port, a refused version or
    /// suite) sends rustls' alert, without waiting, and ends the connection.
    fn receive(&mut self, into: &mut ReadBuf<'_>) -> io::Result<usize> {
        SNI.with_borrow_mut(|sni| *sni = None);
        let result = SCRATCH.with_borrow_mut(|scratch| {
            let input = &mut scratch.input[..];
            let kept = self.partial.len();
            if kept >= INPUT - RECORD {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "TLS handshake message too large",
                ));
            }
            input[..kept].copy_from_slice(&self.partial);
            // No more than the reader has room for and one record: what does not fit
            // waits in `plain`, so that stays within a record.
            let room = into.remaining().max(1) + MAX_WIRE_RECORD;
            let end = INPUT.min(kept + room);
            let n = self.tcp.try_read(&mut input[kept..end])?;
            if n == 0 {
                // The end of the stream inside a record: cut short, not closed.
                return match kept {
                    0 => Ok(0),
                    _ => Err(io::ErrorKind::UnexpectedEof.into()),
                };
            }
            let len = kept + n;
            let (used, _) = self.process(&mut input[..len], into)?;
            // A copy of its own size: the connection keeps no larger buffer than it needs.
            self.partial = input[used..len].to_vec();
            Ok(n)
        });
        // Set by the certificate resolver if a ClientHello was processed just now.
        if let Some(sni) = SNI.with_borrow_mut(Option::take) {
            self.sni = sni;
        }
        // A handshake answer, a key update or an alert: best effort now, else before
        // the next write.
        self.send_now();
        result
    }

    /// Writes what `out` holds as far as the socket takes it without waiting. `Ok(true)`
    /// once it is all gone. Its memory stays while a response streams (the next refused
    /// write reuses it) and goes when the connection waits to read (`release`).
    fn try_send(&mut self) -> io::Result<bool> {
        while !self.out.is_empty() {
            match self.tcp.try_write(self.out.pending()) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => self.out.at += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) => return Err(e),
            }
        }
        self.out.clear();
        Ok(true)
    }

    /// Frees the output buffer once it is sent: the connection is about to wait for the
    /// peer, so an idle connection holds no buffer.
    fn release(&mut self) {
        if self.out.is_empty() && self.out.buf.capacity() > 0 {
            let mut out = std::mem::take(&mut self.out);
            // Back to the worker when its own went to a connection (the next queue of
            // held writes takes it again, without allocating and zeroing it).
            let _ = SCRATCH.try_with(|scratch| {
                if let Ok(mut scratch) = scratch.try_borrow_mut() {
                    if scratch.wire.buf.is_empty() {
                        out.clear();
                        scratch.wire = out;
                    }
                }
            });
        }
    }

    fn send_now(&mut self) {
        if !self.out.is_empty() {
            let _ = self.try_send();
        }
    }

    /// Sends every record queued, waiting for writability when the socket is full.
    fn poll_send(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while !self.try_send()? {
            ready!(self.tcp.poll_write_ready(cx))?;
        }
        Poll::Ready(Ok(()))
    }

    /// Encrypts `plain` as records onto the end of `wire`, with any handshake message
    /// rustls must send first (a key update) before them.
    fn encrypt(&mut self, plain: &[u8], wire: &mut Records) -> io::Result<()> {
        loop {
            // The part of a record kept from before, never an empty buffer: rustls may
            // hold a handshake message's first part there.
            let status = self.tls.process_tls_records(&mut self.partial);
            let discard = status.discard;
            match status.state.map_err(tls_error)? {
                ConnectionState::WriteTraffic(mut traffic) => {
                    let records = plain.len().div_ceil(RECORD).max(1);
                    let n =
                        match traffic.encrypt(plain, wire.room(plain.len() + records * OVERHEAD)) {
                            Ok(n) => n,
                            Err(EncryptError::InsufficientSize(InsufficientSizeError {
                                required_size,
                            })) => traffic
                                .encrypt(plain, wire.room(required_size))
                                .map_err(io::Error::other)?,
                            Err(e) => return Err(io::Error::other(e)),
                        };
                    wire.filled(n);
                    self.partial.drain(..discard);
                    return Ok(());
                }
                ConnectionState::EncodeTlsData(mut data) => encode(&mut data, wire)?,
                ConnectionState::TransmitTlsData(data) => data.done(),
                // Plaintext that arrived with a handshake message: kept for the reader.
                ConnectionState::ReadTraffic(mut traffic) => {
                    while let Some(record) = traffic.next_record() {
                        self.plain
                            .extend_from_slice(record.map_err(tls_error)?.payload);
                    }
                }
                ConnectionState::PeerClosed => self.peer_closed = true,
                _ => return Err(io::ErrorKind::BrokenPipe.into()),
            }
            self.partial.drain(..discard);
        }
    }

    /// Sends `wire` (records in order after `out`, which is empty) as far as the socket
    /// takes it now. What it does not take stays where it is: the worker's buffer becomes
    /// the connection's `out` (no copy), and `out`'s old allocation becomes the worker's,
    /// so a long response swaps two buffers and allocates nothing. Whether any byte went
    /// out.
    fn send_wire(&mut self, wire: &mut Records) -> io::Result<bool> {
        let n = match self.tcp.try_write(wire.pending()) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => 0,
            Err(e) => return Err(e),
        };
        wire.at += n;
        if !wire.is_empty() {
            self.out.clear();
            std::mem::swap(&mut self.out, wire);
        }
        Ok(n > 0)
    }

    /// Ready when a read would find bytes (or the end): plaintext already decrypted, the
    /// peer's close_notify, or the socket's readiness.
    /// Plaintext or the end in hand, or the socket readable (see `Stream::read_ready_now`).
    pub fn read_ready_now(&self) -> bool {
        self.plain_at < self.plain.len() || self.peer_closed || self.tcp.read_ready_now()
    }

    pub fn poll_read_ready(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.plain_at < self.plain.len() || self.peer_closed {
            return Poll::Ready(Ok(()));
        }
        self.release();
        self.tcp.poll_read_ready(cx)
    }

    /// Decrypted bytes into `buf` (written, never zeroed first: a reader such as h2's
    /// hands an uninitialised buffer of several KiB for every read); nothing added at
    /// the end of the stream.
    pub fn poll_read(
        &mut self,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if buf.remaining() == 0 {
            return Poll::Ready(Ok(()));
        }
        loop {
            if self.plain_at < self.plain.len() {
                let left = &self.plain[self.plain_at..];
                let n = left.len().min(buf.remaining());
                buf.put_slice(&left[..n]);
                self.plain_at += n;
                if self.plain_at == self.plain.len() {
                    self.plain = Vec::new();
                    self.plain_at = 0;
                }
                return Poll::Ready(Ok(()));
            }
            if self.peer_closed {
                return Poll::Ready(Ok(()));
            }
            // Only when the socket may have bytes: h2 polls its reader every time the
            // connection's task runs (once per response ready, ten times per read at
            // ten streams a connection), and a recv(2) each time, answered EAGAIN, was
            // 13 of every 14 the HTTP/2 worker made. A short read clears the readiness
            // (`Socket::try_read`), so after one the next poll waits for epoll instead.
            if !self.tcp.read_ready_now() {
                self.release();
                ready!(self.tcp.poll_read_ready(cx))?;
            }
            let before = buf.filled().len();
            match self.receive(buf) {
                Ok(0) => return Poll::Ready(Ok(())),
                Ok(_) if buf.filled().len() > before => return Poll::Ready(Ok(())),
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }

    /// From now on a write is encrypted onto the connection's queue, which goes out when
    /// it holds four records' worth, or at a flush. For HTTP/2, which writes the frames
    /// of a pass in as many calls as the queue takes and then flushes once: a large
    /// response goes out in 64 KiB writes, not one per call.
    pub fn hold_writes_until_flush(&mut self) {
        self.hold_writes = true;
    }

    /// Encrypts up to four records' worth of `bufs` (small pieces gathered into one
    /// record) once what was queued before has gone out, so that the connection never
    /// holds more than one write's worth; then sends what the socket takes without
    /// waiting, keeping the rest. With writes held, the records join the queue, which
    /// goes out when it holds four records' worth or at the flush.
    pub fn poll_write_vectored(
        &mut self,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        if !self.hold_writes || self.out.pending().len() >= RECORDS_PER_WRITE * RECORD {
            ready!(self.poll_send(cx))?;
        }
        if self.hold_writes {
            // Into the queue itself, after what it holds (taken out for the call:
            // `write_records` borrows the connection too).
            let mut queue = std::mem::take(&mut self.out);
            let taken = SCRATCH.with_borrow_mut(|scratch| {
                if queue.buf.is_empty() {
                    // The worker's buffer, allocated once, rather than a new one.
                    std::mem::swap(&mut queue, &mut scratch.wire);
                    queue.clear();
                }
                self.write_records(bufs, &mut scratch.plain, &mut queue)
            });
            self.out = queue;
            return Poll::Ready(taken);
        }
        let taken = SCRATCH.with_borrow_mut(|scratch| {
            let Scratch { plain, wire, .. } = scratch;
            wire.clear();
            let taken = self.write_records(bufs, plain, wire)?;
            if !wire.is_empty() {
                self.send_wire(wire)?;
            }
            io::Result::Ok(taken)
        })?;
        Poll::Ready(Ok(taken))
    }

    /// Encrypts up to four records' worth of `bufs` onto the end of `wire` (small pieces
    /// gathered into one record through `plain`); how many bytes of `bufs` it took.
    fn write_records(
        &mut self,
        bufs: &[io::IoSlice<'_>],
        plain: &mut [u8],
        wire: &mut Records,
    ) -> io::Result<usize> {
        let budget = RECORDS_PER_WRITE * RECORD;
        let (mut taken, mut gathered) = (0, 0);
        for buf in bufs {
            let mut buf = &buf[..buf.len().min(budget - taken - gathered)];
            if gathered == 0 && buf.len() >= RECORD {
                self.encrypt(buf, wire)?;
                taken += buf.len();
                continue;
            }
            while !buf.is_empty() {
                let n = buf.len().min(RECORD - gathered);
                plain[gathered..gathered + n].copy_from_slice(&buf[..n]);
                gathered += n;
                buf = &buf[n..];
                if gathered == RECORD {
                    self.encrypt(&plain[..gathered], wire)?;
                    taken += gathered;
                    gathered = 0;
                }
            }
            if taken + gathered == budget {
                break;
            }
        }
        if gathered > 0 {
            self.encrypt(&plain[..gathered], wire)?;
            taken += gathered;
        }
        Ok(taken)
    }

    pub fn poll_flush(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.poll_send(cx)
    }

    pub fn poll_shutdown(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.queue_close_notify();
        ready!(self.poll_send(cx))?;
        Poll::Ready(self.tcp.shutdown_write())
    }

    /// The output batch, encrypted and written without waiting: the plaintext is taken
    /// a record at a time (in the worker's buffer; file pieces read into it) and
    /// encrypted into the worker's output buffer, four records at most, which one write
    /// sends; what the socket does not take is kept until it is writable again.
    pub fn try_write_output(&mut self, out: &mut Output) -> io::Result<Progress> {
        let mut wrote = false;
        if !self.out.is_empty() {
            let before = self.out.at;
            let done = self.try_send().inspect_err(|_| out.clear())?;
            wrote = self.out.at > before || done;
            if !done {
                return Ok(Progress::Blocked { wrote });
            }
        }
        SCRATCH.with_borrow_mut(|scratch| {
            let Scratch { plain, wire, .. } = scratch;
            loop {
                wire.clear();
                for _ in 0..RECORDS_PER_WRITE {
                    if out.is_taken() {
                        break;
                    }
                    let result = out
                        .copy_out(plain)
                        .and_then(|n| self.encrypt(&plain[..n], wire).map(|()| n));
                    match result {
                        Ok(0) => break,
                        Ok(n) => out.advance(n as u64),
                        Err(e) => {
                            out.clear();
                            return Err(e);
                        }
                    }
                }
                if wire.is_empty() {
                    out.clear();
                    return Ok(Progress::Done);
                }
                match self.send_wire(wire) {
                    Ok(sent) => wrote |= sent,
                    Err(e) => {
                        out.clear();
                        return Err(e);
                    }
                }
                if !self.out.is_empty() {
                    return Ok(Progress::Blocked { wrote });
                }
            }
        })
    }

    /// Queues a close_notify alert after what is queued already.
    fn queue_close_notify(&mut self) {
        if let Ok(ConnectionState::WriteTraffic(mut traffic)) =
            self.tls.process_tls_records(&mut self.partial).state
        {
            if let Ok(n) = traffic.queue_close_notify(self.out.room(64)) {
                self.out.filled(n);
            }
        }
    }

    /// Best effort at closing cleanly: a close_notify alert, if the socket takes it now.
    pub fn close_notify(&mut self) {
        self.queue_close_notify();
        self.send_now();
    }
}

#[cfg(test)]
mod tests {
    use super::Records;

    /// A queue appended to while its reader takes only part of it each time: the front
    /// that went out is reused, so the buffer stays near what is pending.
    #[test]
    fn a_queue_never_emptied_stays_the_size_of_what_it_holds() {
        let mut queue = Records::default();
        let mut next = 0u8;
        let mut expected = Vec::new();
        let mut received = Vec::new();
        for _ in 0..1000 {
            let room = queue.room(16 * 1024);
            for b in &mut room[..16 * 1024] {
                *b = next;
                next = next.wrapping_add(1);
            }
            expected.extend_from_slice(&queue.buf[queue.len..queue.len + 16 * 1024]);
            queue.filled(16 * 1024);
            // The socket takes a little less than was added: the queue never empties.
            let took = queue.pending().len().min(16 * 1024 - 100);
            received.extend_from_slice(&queue.pending()[..took]);
            queue.at += took;
            assert!(!queue.is_empty());
            assert!(
                queue.buf.len() <= 2 * 16 * 1024 + 100 * 1000,
                "{}",
                queue.buf.len()
            );
        }
        received.extend_from_slice(queue.pending());
        assert!(received == expected, "bytes out of order");
        // 100 bytes more pending per round: 100 KB, not the 16 MB written.
        assert!(queue.buf.len() < 160 * 1024, "{}", queue.buf.len());
    }
}
