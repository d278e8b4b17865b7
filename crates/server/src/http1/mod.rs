//! One connection: wait for bytes, parse every complete request in the buffer, answer
//! them in order into one batch, flush the batch, repeat. The hot path is this loop.
//!
//! A connection borrows a buffer set (read buffer and output) from its worker only while
//! it has bytes in hand; an idle keep-alive connection holds none, which is what keeps
//! 10,000 idle connections cheap.

use std::io;
use std::rc::Rc;
use std::time::{Duration, Instant};

use pool::SlotId;
use tokio::io::AsyncRead;
use wire::{BodyFraming, Chunk, ChunkedDecoder, HeaderStorage, Version};

use crate::conn_state::ConnState;
use crate::exchange::served::log;
use crate::exchange::{self, Checked, Dispatched, Exchange};
use crate::facts::{ConnFacts, Origin};
use crate::net::output::Progress;
use crate::net::transport::Stream;
use crate::reply;
use crate::worker::{Buffers, Worker};

mod later;
mod upload;

/// A body being skipped so that the next request on the connection starts at the right
/// byte. A response made without reading the body (a file, a refusal) leaves it to skip.
enum Discard {
    None,
    Length(u64),
    /// Boxed: rare, and every connection's future would otherwise carry its room.
    Chunked(Box<(ChunkedDecoder, u64)>),
}

/// What to do after answering what is buffered.
enum Next {
    /// Read more bytes.
    Read,
    /// The batch is full and complete requests remain: flush, then answer more.
    More,
    /// Flush, then close.
    Close,
    /// Flush, then finish this request (its response waits on something, or is too
    /// large for the batch).
    Later(handler::Pooled<Exchange>),
    /// Flush, await this check of the request in hand, then answer it again.
    Wait(handler::LocalFuture<Checked>),
}

enum Ending {
    /// The peer closed, a timeout or eviction closed us, or we are shutting down after
    /// finishing the responses.
    Closed,
    /// We decided to close after a response: close at once when the client has nothing
    /// more in flight, else half-close and drain first (see [`Conn::may_have_unread`]).
    AfterResponse,
    /// The connection began with the HTTP/2 preface (prior knowledge): the bytes read so
    /// far go to the HTTP/2 connection, which takes over.
    Http2,
}

pub(crate) struct Conn {
    worker: Rc<Worker>,
    stream: Stream,
    origin: Origin,
    /// When the last read completed, for `%D` in access logs (only read when logging).
    read_at: Option<Instant>,
    slot: SlotId,
    buffers: Option<Box<Buffers>>,
    start: usize,
    end: usize,
    discard: Discard,
    /// A request was refused part-way (a malformed or oversized head or body): the rest
    /// of it may still be on its way, so closing must linger.
    refused: bool,
    /// Nothing has been parsed yet: the first bytes may be the HTTP/2 preface.
    fresh: bool,
    /// What the checks of the request in hand found, after it waited on them.
    checked: Option<Box<Checked>>,
}

impl Conn {
    pub(crate) fn new(stream: Stream, origin: Origin, worker: Rc<Worker>, slot: SlotId) -> Conn {
        // Prior knowledge is for cleartext only: over TLS, HTTP/2 is what ALPN chose
        // (RFC 9113 section 3.3), and a connection here negotiated HTTP/1.1.
        let fresh = matches!(stream, Stream::Plain(_));
        Conn {
            worker,
            stream,
            origin,
            read_at: None,
            slot,
            buffers: None,
            start: 0,
            end: 0,
            discard: Discard::None,
            refused: false,
            fresh,
            checked: None,
        }
    }
}

/// A cleartext connection whose first bytes were the HTTP/2 preface (prior knowledge):
/// what the HTTP/2 connection takes over, its slot still held.
pub(crate) struct Handoff {
    pub stream: Stream,
    /// The bytes read so far, the preface among them.
    pub prefix: bytes::Bytes,
    pub origin: Origin,
    pub worker: Rc<Worker>,
    pub slot: SlotId,
}

impl Conn {
    /// What every request on this connection is answered, counted and logged with. Made
    /// when needed rather than kept: it would add 48 bytes to every connection's future.
    fn facts(&self) -> ConnFacts {
        self.origin.facts(self.stream.tls_facts())
    }
}

/// Serves one connection to its end and frees its slot. A cleartext connection that
/// turns out to speak HTTP/2 (its first bytes are the preface) is handed, its slot still
/// held, to what `session` gives as `http2`. This future is the connection's whole task.
/// A plain `fn` returning an `async move` block, not an `async fn`: the block uses the
/// captured connection in place, where an `async fn` would keep room for its parameter
/// and for the local it is moved into (about 150 bytes per connection more).
#[allow(clippy::manual_async_fn)]
pub(crate) fn serve<F: std::future::Future<Output = ()>>(
    mut conn: Conn,
    http2: impl FnOnce(Handoff) -> std::pin::Pin<Box<F>>,
) -> impl std::future::Future<Output = ()> {
    async move {
        let ending = conn.run().await;
        if let Ok(Ending::Http2) = ending {
            let prefix = match conn.buffers.take() {
                Some(buffers) => {
                    let prefix = bytes::Bytes::copy_from_slice(&buffers.read[..conn.end]);
                    conn.worker.give_back(buffers);
                    prefix
                }
                None => bytes::Bytes::new(),
            };
            let Conn {
                stream,
                origin,
                worker,
                slot,
                ..
            } = conn;
            // Boxed by `session`: only HTTP/2 connections pay for its state.
            http2(Handoff {
                stream,
                prefix,
                origin,
                worker,
                slot,
            })
            .await;
            return;
        }
        conn.stream.close_notify();
        if let Ok(Ending::AfterResponse) = ending {
            if conn.may_have_unread() {
                // Boxed: its timer is large, and every connection's future (idle ones
                // included) would otherwise carry room for it. One allocation per
                // lingering close; the plain close allocates nothing.
                Box::pin(conn.linger()).await;
            }
        }
        if let Some(buffers) = conn.buffers.take() {
            conn.worker.give_back(buffers);
        }
        conn.worker.clone().free(conn.slot);
    }
}

impl Conn {
    async fn run(&mut self) -> io::Result<Ending> {
        let worker_rc = Rc::clone(&self.worker);
        let worker: &Worker = &worker_rc;
        loop {
            // Wait for bytes. Without a partial request in hand, wait with no buffer.
            // poll_read_ready rather than readable(): its waker lives in the socket's
            // registration, so the wait adds nothing to this future (readable() keeps a
            // 150-byte waiter node in it, in every idle connection).
            std::future::poll_fn(|cx| self.stream.poll_read_ready(cx)).await?;
            let buffers = self.buffers.get_or_insert_with(|| worker.take_buffers());
            // One poll of a plain read, not try_read: after a short read tokio clears the
            // socket's readiness, so the next wait goes straight to epoll instead of
            // first making a recv that can only say EAGAIN (one system call saved per
            // request). But never wait inside it: a read that is not ready (stale
            // readiness, or the task's cooperative budget spent) must not hold a buffer
            // set while it waits, or a flood of connections would each pin one.
            let read = std::future::poll_fn(|cx| {
                let mut read_buf = tokio::io::ReadBuf::new(&mut buffers.read[self.end..]);
                match std::pin::Pin::new(&mut self.stream).poll_read(cx, &mut read_buf) {
                    std::task::Poll::Ready(result) => {
                        std::task::Poll::Ready(Some(result.map(|()| read_buf.filled().len())))
                    }
                    std::task::Poll::Pending => std::task::Poll::Ready(None),
                }
            })
            .await;
            match read {
                Some(Ok(0)) => return Ok(Ending::Closed),
                Some(Ok(n)) => {
                    self.end += n;
                    if let Some(metrics) = worker.metrics() {
                        metrics.received(n);
                    }
                }
                Some(Err(e)) => return Err(e),
                None => {
                    if self.end == 0 && matches!(self.discard, Discard::None) {
                        if let Some(buffers) = self.buffers.take() {
                            worker.give_back(buffers);
                        }
                    }
                    continue;
                }
            }
            if self.fresh {
                match self.preface() {
                    Some(true) => return Ok(Ending::Http2),
                    // Part of the preface: read the rest before deciding.
                    None => continue,
                    Some(false) => self.fresh = false,
                }
            }
            if self.read_at.is_some() || worker.shared.metrics_on || worker.log.borrow().is_some() {
                // The turn's clock: the bytes came before the turn began, and the time
                // is logged to the microsecond but meant to the millisecond, as nginx's
                // `$request_time` (`evloop::time`).
                self.read_at = Some(evloop::time::now().into_std());
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
                let next = self.answer_buffered();
                let read_more = matches!(next, Next::Read);
                if let (Next::Close, Some(buffers)) = (&next, self.buffers.as_mut()) {
                    buffers.out.close_after();
                }
                // A response that comes later joins the batch when other requests are
                // buffered behind it or responses before it (pipelining): their
                // responses go out in one write, as on the static path.
                let batched = self.buffers.as_ref().is_some_and(|b| !b.out.is_empty());
                let join = matches!(&next, Next::Later(e) if e.may_join_batch())
                    && (self.start < self.end || batched);
                if !join {
                    self.flush().await?;
                }
                match next {
                    Next::Close => return Ok(Ending::AfterResponse),
                    Next::Later(exchange) => {
                        // On the heap (recycled: no allocation per request): the
                        // handler's future is large, and every connection's future
                        // (static and idle ones included) would otherwise carry room
                        // for it.
                        if !handler::pin(self.finish(exchange, join)).await? {
                            // What the batch holds goes out before the close.
                            if let Some(buffers) = self.buffers.as_mut() {
                                buffers.out.close_after();
                            }
                            self.flush().await?;
                            return Ok(Ending::AfterResponse);
                        }
                    }
                    Next::Wait(check) => {
                        if !worker.enter(self.slot, ConnState::Handling) {
                            return Ok(Ending::Closed);
                        }
                        self.checked = Some(Box::new(check.await));
                        worker.clock.refresh();
                    }
                    Next::More | Next::Read => {}
                }
                // Shutting down does not end the connection here: the responses just
                // sent promised keep-alive (the shutdown may have begun while they were
                // being written), so the client may be sending its next request. That
                // one is answered with `Connection: close` (draining after an upgrade);
                // a graceful stop has shut the socket's reading side, which ends it.
                if read_more {
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

    /// Whether the connection starts with the HTTP/2 preface (and HTTP/2 is on): `None`
    /// while the bytes read so far are only the start of it.
    fn preface(&self) -> Option<bool> {
        let read = match self.buffers.as_ref() {
            Some(buffers) => &buffers.read[..self.end],
            None => return Some(false),
        };
        let preface = h2codec::conn::PREFACE;
        let n = read.len().min(preface.len());
        if read.first() != Some(&b'P') || read[..n] != preface[..n] {
            return Some(false);
        }
        if !self.worker.current().gen.config.http2.enabled {
            return Some(false);
        }
        (n == preface.len()).then_some(true)
    }

    /// Parses and answers every complete request in the buffer, into the output batch,
    /// up to the first one answered later.
    fn answer_buffered(&mut self) -> Next {
        let worker_rc = Rc::clone(&self.worker);
        let worker: &Worker = &worker_rc;
        let limits = &worker.shared.limits;
        let facts = self.facts();
        let Some(buffers) = self.buffers.as_mut() else {
            return Next::Read;
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
                Ok(false) => return Next::Read,
                // A malformed or oversized chunked body: the responses already queued
                // still go out, then the connection closes (nothing after the bad
                // body can be trusted to start a request).
                Err(e) => {
                    worker.refused(self.origin.peer(), e);
                    self.refused = true;
                    return Next::Close;
                }
            }
            if self.start == self.end {
                return Next::Read;
            }
            if out.is_full() {
                return Next::More;
            }
            let mut storage = HeaderStorage::new();
            match wire::parse_request(&read[self.start..self.end], &mut storage, limits) {
                Ok(Some(req)) => {
                    let keep_alive = req.keep_alive && !worker.is_shutting_down();
                    let mark = out.mark();
                    let pending = &read[self.start..self.end];
                    let checked = self.checked.take();
                    let terms = (keep_alive, checked.as_deref());
                    let answered = match exchange::answer(worker, &facts, &req, terms, out, pending)
                    {
                        Dispatched::Later(exchange) => {
                            self.start += req.head_len;
                            return Next::Later(exchange);
                        }
                        // The request stays in the buffer, to be answered again.
                        Dispatched::Wait(check) => return Next::Wait(check),
                        Dispatched::Done(answered) => answered,
                    };
                    let request = Some((&req, answered));
                    log(worker, &facts, self.read_at, request, b"", out, mark);
                    self.start += req.head_len;
                    self.discard = discard_for(req.body, limits.max_head_size);
                    if !keep_alive {
                        return Next::Close;
                    }
                }
                Ok(None) => return Next::Read,
                Err(e) => {
                    worker.refused(self.origin.peer(), e);
                    self.refused = true;
                    let mark = out.mark();
                    let pending = &read[self.start..self.end];
                    // A response to HEAD has no content (RFC 9110 section 9.3.2), a
                    // refusal included: the request did not parse, so its method is
                    // read from the line's first word (after the one empty line allowed
                    // before it).
                    let line = pending.strip_prefix(b"\r\n").unwrap_or(pending);
                    let terms = reply::Terms {
                        head_only: line.starts_with(b"HEAD "),
                        version: Version::Http11,
                        keep_alive: false,
                    };
                    reply::write_simple(worker, &facts, out, e.status(), &[], terms);
                    let line_end = memchr::memchr2(b'\r', b'\n', pending).unwrap_or(pending.len());
                    log(
                        worker,
                        &facts,
                        self.read_at,
                        None,
                        &pending[..line_end],
                        out,
                        mark,
                    );
                    return Next::Close;
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
            match self.stream.try_write_output(&mut buffers.out)? {
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
                    std::future::poll_fn(|cx| self.stream.poll_write_ready(cx)).await?;
                    self.worker.clock.refresh();
                }
            }
        }
    }

    /// Whether the client may have sent bytes we have not read, so that closing at once
    /// could make the kernel answer them with RST and destroy the response in flight
    /// (nginx's `lingering_close on` asks the same): a refused request, a body not read,
    /// bytes buffered after the last request answered, or a socket still readable (the
    /// last read filled the buffer, or more arrived since). A request read completely
    /// with nothing after it closes at once: the kernel sends the response, then FIN.
    fn may_have_unread(&mut self) -> bool {
        // A body the response did not need may have arrived whole with its head.
        if let Some(buffers) = self.buffers.as_ref() {
            let max_body_size = self.worker.shared.limits.max_body_size;
            let _ = skip_body(
                &mut self.discard,
                &buffers.read,
                &mut self.start,
                self.end,
                max_body_size,
            );
        }
        if self.refused || self.start < self.end || !matches!(self.discard, Discard::None) {
            return true;
        }
        // Readiness is cleared after a short read; an event since (more bytes, or the
        // client's own FIN) sets it again. Read without the cooperative budget: a poll
        // that found it spent would say "nothing to read", and the close would then
        // reset the connection under the response (which MSG_MORE holds until the FIN).
        self.stream.read_ready_now()
    }

    /// Closing right after a response while the client may still be sending would make
    /// the kernel answer with RST, which can destroy the response before the client
    /// reads it. So: half-close, then read and drop what arrives for a bounded time and
    /// amount (nginx's lingering close).
    async fn linger(&mut self) {
        let worker_rc = Rc::clone(&self.worker);
        let worker: &Worker = &worker_rc;
        worker
            .shared
            .lingering_closes
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        crate::sys::shutdown(std::os::fd::AsRawFd::as_raw_fd(&self.stream), libc::SHUT_WR);
        let buffers = self.buffers.get_or_insert_with(|| worker.take_buffers());
        let stream = self.stream.tcp();
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
        let _ = evloop::time::timeout(Duration::from_secs(2), drain).await;
    }
}

/// How to skip the body of a request answered without reading it.
fn discard_for(body: BodyFraming, max_head_size: usize) -> Discard {
    match body {
        BodyFraming::None => Discard::None,
        BodyFraming::Length(n) => Discard::Length(n),
        BodyFraming::Chunked => Discard::Chunked(Box::new((ChunkedDecoder::new(max_head_size), 0))),
    }
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
        Discard::Chunked(chunked) => loop {
            let (decoder, seen) = &mut **chunked;
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
