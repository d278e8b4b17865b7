//! One connection: wait for bytes, parse every complete request in the buffer, answer
//! them in order into one batch, flush the batch, repeat. The hot path is this loop.
//!
//! A connection borrows a buffer set (read buffer and output) from its worker only while
//! it has bytes in hand; an idle keep-alive connection holds none, which is what keeps
//! 10,000 idle connections cheap.

use std::io;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use pool::SlotId;
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;
use wire::{BodyFraming, Chunk, ChunkedDecoder, HeaderStorage, Version};

use crate::access_log::Entry;
use crate::files;
use crate::output::{Mark, Output, Progress};
use crate::worker::{Buffers, ConnState, Worker};

/// A body being skipped so that the next request on the connection starts at the right
/// byte. Static files take no bodies, but clients may still send them.
enum Discard {
    None,
    Length(u64),
    Chunked { decoder: ChunkedDecoder, seen: u64 },
}

enum Ending {
    /// The peer closed, a timeout or eviction closed us, or we are shutting down after
    /// finishing the responses.
    Closed,
    /// We decided to close after a response: half-close and drain before closing.
    Linger,
}

struct Conn<'w> {
    worker: &'w Worker,
    stream: TcpStream,
    peer: SocketAddr,
    /// When the last read completed, for `%D` in access logs (only read when logging).
    read_at: Option<Instant>,
    slot: SlotId,
    buffers: Option<Box<Buffers>>,
    start: usize,
    end: usize,
    discard: Discard,
}

pub(crate) async fn serve(stream: TcpStream, peer: SocketAddr, worker: &Worker, slot: SlotId) {
    let mut conn = Conn {
        worker,
        stream,
        peer,
        read_at: None,
        slot,
        buffers: None,
        start: 0,
        end: 0,
        discard: Discard::None,
    };
    if let Ok(Ending::Linger) = conn.run().await {
        // Boxed: its timer is large, and every connection's future (idle ones included)
        // would otherwise carry room for it. One allocation per closing connection.
        Box::pin(conn.linger()).await;
    }
    if let Some(buffers) = conn.buffers.take() {
        worker.give_back(buffers);
    }
}

impl Conn<'_> {
    async fn run(&mut self) -> io::Result<Ending> {
        let worker = self.worker;
        loop {
            // Wait for bytes. Without a partial request in hand, wait with no buffer.
            self.stream.readable().await?;
            let buffers = self.buffers.get_or_insert_with(|| worker.take_buffers());
            // A plain read, not try_read: after a short read tokio clears the socket's
            // readiness, so the next wait goes straight to epoll instead of first making
            // a recv that can only say EAGAIN (one system call saved per request). The
            // socket was just reported readable, so this rarely waits with a buffer.
            match self.stream.read(&mut buffers.read[self.end..]).await {
                Ok(0) => return Ok(Ending::Closed),
                Ok(n) => self.end += n,
                Err(e) => return Err(e),
            }
            if self.read_at.is_some() || worker.log.borrow().is_some() {
                self.read_at = Some(Instant::now());
            }
            // Bytes arrived: from idle, a new request head starts its timer now.
            let state = if matches!(self.discard, Discard::None) {
                ConnState::ReadingHead
            } else {
                ConnState::ReadingBody
            };
            if !worker.enter(self.slot, state) {
                return Ok(Ending::Closed);
            }
            worker.clock.refresh();
            loop {
                let (close, more) = self.answer_buffered();
                self.flush().await?;
                if close {
                    return Ok(Ending::Linger);
                }
                if worker.is_shutting_down() {
                    return Ok(Ending::Closed);
                }
                if !more {
                    break;
                }
            }
            // Keep the unparsed tail at the front; give the buffers back when empty.
            if self.start == self.end {
                self.start = 0;
                self.end = 0;
                if matches!(self.discard, Discard::None) {
                    if let Some(buffers) = self.buffers.take() {
                        worker.give_back(buffers);
                    }
                    if !worker.enter(self.slot, ConnState::Idle) {
                        return Ok(Ending::Closed);
                    }
                }
            } else if self.start > 0 {
                if let Some(buffers) = self.buffers.as_mut() {
                    buffers.read.copy_within(self.start..self.end, 0);
                }
                self.end -= self.start;
                self.start = 0;
            }
        }
    }

    /// Parses and answers every complete request in the buffer, into the output batch.
    /// Returns (close after flushing, complete requests still buffered).
    fn answer_buffered(&mut self) -> (bool, bool) {
        let worker = self.worker;
        let limits = &worker.shared.limits;
        let Some(buffers) = self.buffers.as_mut() else {
            return (false, false);
        };
        let Buffers { read, out } = &mut **buffers;
        loop {
            match skip_body(
                &mut self.discard,
                read,
                &mut self.start,
                self.end,
                limits.max_body_size,
            ) {
                Ok(true) => {}
                Ok(false) => return (false, false),
                // A malformed or oversized chunked body: the responses already queued
                // still go out, then the connection closes (nothing after the bad
                // body can be trusted to start a request).
                Err(e) => {
                    worker.refused(self.peer, e);
                    return (true, false);
                }
            }
            if self.start == self.end {
                return (false, false);
            }
            if out.is_full() {
                return (false, true);
            }
            let mut storage = HeaderStorage::new();
            match wire::parse_request(&read[self.start..self.end], &mut storage, limits) {
                Ok(Some(req)) => {
                    let keep_alive = req.keep_alive && !worker.is_shutting_down();
                    if req.expect_continue && self.end - self.start == req.head_len {
                        // The client waits for this before sending the body we will read.
                        out.buf()
                            .extend_from_slice(b"HTTP/1.1 100 Continue\r\n\r\n");
                    }
                    let mark = out.mark();
                    files::respond(&req, worker, out, keep_alive);
                    log(worker, self.peer, self.read_at, Some(&req), b"", out, mark);
                    self.start += req.head_len;
                    self.discard = match req.body {
                        BodyFraming::None => Discard::None,
                        BodyFraming::Length(n) => Discard::Length(n),
                        BodyFraming::Chunked => Discard::Chunked {
                            decoder: ChunkedDecoder::new(limits.max_head_size),
                            seen: 0,
                        },
                    };
                    if !keep_alive {
                        return (true, false);
                    }
                }
                Ok(None) => return (false, false),
                Err(e) => {
                    worker.refused(self.peer, e);
                    let mark = out.mark();
                    files::write_simple(
                        worker,
                        out.buf(),
                        e.status(),
                        b"",
                        false,
                        Version::Http11,
                        false,
                    );
                    let pending = &read[self.start..self.end];
                    let line_end = memchr::memchr2(b'\r', b'\n', pending).unwrap_or(pending.len());
                    log(
                        worker,
                        self.peer,
                        self.read_at,
                        None,
                        &pending[..line_end],
                        out,
                        mark,
                    );
                    return (true, false);
                }
            }
        }
    }

    /// Writes the batch; waits for writability only when the socket is full, and only
    /// then counts as writing (for the write-stall timeout).
    async fn flush(&mut self) -> io::Result<()> {
        let Some(buffers) = self.buffers.as_mut() else {
            return Ok(());
        };
        if buffers.out.is_empty() {
            return Ok(());
        }
        let mut writing = false;
        loop {
            match buffers.out.try_write(&self.stream)? {
                Progress::Done => return Ok(()),
                Progress::Blocked { wrote } => {
                    if !writing {
                        writing = true;
                        if !self.worker.enter(self.slot, ConnState::Writing) {
                            return Err(io::ErrorKind::TimedOut.into());
                        }
                    } else if wrote {
                        self.worker.touch(self.slot);
                    }
                    self.stream.writable().await?;
                    self.worker.clock.refresh();
                }
            }
        }
    }

    /// Closing right after a response while the client may still be sending would make
    /// the kernel answer with RST, which can destroy the response before the client
    /// reads it. So: half-close, then read and drop what arrives for a bounded time and
    /// amount (nginx's lingering close).
    async fn linger(&mut self) {
        let worker = self.worker;
        // SAFETY: the socket is open; shutdown(2) only affects its write side.
        unsafe { libc::shutdown(std::os::fd::AsRawFd::as_raw_fd(&self.stream), libc::SHUT_WR) };
        let buffers = self.buffers.get_or_insert_with(|| worker.take_buffers());
        let stream = &self.stream;
        let drain = async {
            let mut total = 0usize;
            loop {
                if stream.readable().await.is_err() {
                    break;
                }
                match stream.try_read(&mut buffers.read) {
                    Ok(n) if n > 0 => {
                        total += n;
                        if total > 256 * 1024 {
                            break;
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    _ => break,
                }
            }
        };
        let _ = tokio::time::timeout(Duration::from_secs(2), drain).await;
    }
}

/// Writes the access log line for the response just added to `out`.
fn log(
    worker: &Worker,
    client: SocketAddr,
    read_at: Option<Instant>,
    request: Option<&wire::Request<'_, '_>>,
    raw_line: &[u8],
    out: &Output,
    mark: Mark,
) {
    let mut log = worker.log.borrow_mut();
    let Some(log) = log.as_mut() else {
        return;
    };
    let (status, head, body_bytes) = out.since(mark);
    let micros = read_at.map_or(0, |t| t.elapsed().as_micros() as u64);
    let entry = Entry {
        client,
        request,
        raw_line,
        status,
        head,
        body_bytes,
        micros,
    };
    log.record(&entry, &worker.clock.clf_time()[..]);
}

/// Consumes body bytes from `buf[*start..end]`. Returns whether the body is complete
/// (and the next request may be parsed). A malformed or oversized chunked body is an
/// error: the response has gone out already, so all we can do is close.
fn skip_body(
    discard: &mut Discard,
    buf: &[u8],
    start: &mut usize,
    end: usize,
    max_body_size: u64,
) -> Result<bool, wire::Error> {
    match discard {
        Discard::None => Ok(true),
        Discard::Length(left) => {
            let take = (*left).min((end - *start) as u64);
            *start += take as usize;
            *left -= take;
            if *left == 0 {
                *discard = Discard::None;
                return Ok(true);
            }
            Ok(false)
        }
        Discard::Chunked { decoder, seen } => loop {
            let (used, chunk) = decoder.decode(&buf[*start..end])?;
            *start += used;
            match chunk {
                Chunk::Data(data) => {
                    *seen += data.len() as u64;
                    if *seen > max_body_size {
                        return Err(wire::Error::BodyTooLarge);
                    }
                }
                Chunk::Done => {
                    *discard = Discard::None;
                    return Ok(true);
                }
                Chunk::NeedMore => return Ok(false),
            }
        },
    }
}
