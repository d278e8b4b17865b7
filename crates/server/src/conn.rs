//! One connection: wait for bytes, parse every complete request in the buffer, answer
//! them in order into one batch, flush the batch, repeat. The hot path is this loop.
//!
//! A connection borrows a buffer set (read buffer and output) from its worker only while
//! it has bytes in hand; an idle keep-alive connection holds none, which is what keeps
//! 10,000 idle connections cheap.

use std::io;
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::{Duration, Instant};

use handler::{Body, Response};
use pool::SlotId;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use wire::{BodyFraming, Chunk, ChunkedDecoder, Framing, HeaderStorage, Version};

use crate::dispatch::{self, Dispatched, Exchange, Work};
use crate::metrics::Answered;
use crate::output::Progress;
use crate::reply;
use crate::served::{log, log_proxied};
use crate::transport::Stream;
use crate::worker::{Buffers, ConnState, Worker};

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
    Later(Box<Exchange>),
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
    peer: SocketAddr,
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
}

impl Conn {
    pub(crate) fn new(stream: Stream, peer: SocketAddr, worker: Rc<Worker>, slot: SlotId) -> Conn {
        // Prior knowledge is for cleartext only: over TLS, HTTP/2 is what ALPN chose
        // (RFC 9113 section 3.3), and a connection here negotiated HTTP/1.1.
        let fresh = matches!(stream, Stream::Plain(_));
        Conn {
            worker,
            stream,
            peer,
            read_at: None,
            slot,
            buffers: None,
            start: 0,
            end: 0,
            discard: Discard::None,
            refused: false,
            fresh,
        }
    }
}

/// Serves one connection to its end and frees its slot. This future is the connection's
/// whole task. A plain `fn` returning an `async move` block, not an `async fn`: the block
/// uses the captured connection in place, where an `async fn` would keep room for its
/// parameter and for the local it is moved into (about 150 bytes per connection more).
#[allow(clippy::manual_async_fn)]
pub(crate) fn serve(mut conn: Conn) -> impl std::future::Future<Output = ()> {
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
                peer,
                worker,
                slot,
                ..
            } = conn;
            // Boxed: only HTTP/2 connections pay for the HTTP/2 connection's state.
            Box::pin(crate::http2::serve(
                stream, prefix, peer, worker, slot, None,
            ))
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
                let next = self.answer_buffered();
                let read_more = matches!(next, Next::Read);
                if let (Next::Close, Some(buffers)) = (&next, self.buffers.as_mut()) {
                    buffers.out.close_after();
                }
                self.flush().await?;
                match next {
                    Next::Close => return Ok(Ending::AfterResponse),
                    Next::Later(exchange) => {
                        // Boxed: the handler's future is large, and every connection's
                        // future (static and idle ones included) would otherwise carry
                        // room for it.
                        if !Box::pin(self.finish(exchange)).await? {
                            return Ok(Ending::AfterResponse);
                        }
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
        let preface = crate::http2::PREFACE;
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
        worker.tls.set(self.stream.tls_facts());
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
                    worker.refused(self.peer, e);
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
                    let answered =
                        match dispatch::answer(worker, &req, self.peer, keep_alive, out, pending) {
                            Dispatched::Later(exchange) => {
                                self.start += req.head_len;
                                return Next::Later(exchange);
                            }
                            Dispatched::Done(answered) => answered,
                        };
                    let request = Some((&req, answered));
                    log(worker, self.peer, self.read_at, request, b"", out, mark);
                    self.start += req.head_len;
                    self.discard = discard_for(req.body, limits.max_head_size);
                    if !keep_alive {
                        return Next::Close;
                    }
                }
                Ok(None) => return Next::Read,
                Err(e) => {
                    worker.refused(self.peer, e);
                    self.refused = true;
                    let mark = out.mark();
                    let pending = &read[self.start..self.end];
                    // A response to HEAD has no content (RFC 9110 section 9.3.2), a
                    // refusal included: the request did not parse, so its method is
                    // read from the line's first word (after the one empty line allowed
                    // before it).
                    let line = pending.strip_prefix(b"\r\n").unwrap_or(pending);
                    reply::write_simple(
                        worker,
                        out.buf(),
                        e.status(),
                        b"",
                        line.starts_with(b"HEAD "),
                        Version::Http11,
                        false,
                    );
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
                    return Next::Close;
                }
            }
        }
    }

    /// Finishes a request answered later: reads its body and awaits its handler (or
    /// takes the response that was ready), runs the route's filter on the head, and
    /// writes the response, streaming a body that arrives over time. Returns whether the
    /// connection may go on.
    async fn finish(&mut self, exchange: Box<Exchange>) -> io::Result<bool> {
        let worker_rc = Rc::clone(&self.worker);
        let worker: &Worker = &worker_rc;
        let Exchange {
            work,
            mut filter,
            framing,
            expect_continue,
            keep_alive,
            head_only,
            version,
            raw_head,
            mut answered,
            site,
            accepted,
        } = *exchange;
        let mut response = match work {
            Work::Ready(response) => {
                self.discard = discard_for(framing, worker.shared.limits.max_head_size);
                response
            }
            Work::Deferred(deferred) => {
                let Some(body) = self.read_body(framing, expect_continue).await? else {
                    return Ok(false);
                };
                if !worker.enter(self.slot, ConnState::Handling) {
                    return Ok(false);
                }
                let response = deferred.respond(body).await;
                worker.clock.refresh();
                worker.tls.set(self.stream.tls_facts());
                match response {
                    Ok(mut response) => {
                        if let Some(filter) = filter.as_deref_mut() {
                            dispatch::filter_response(filter, &mut response);
                        }
                        dispatch::compress(worker, site, accepted, head_only, &mut response);
                        response
                    }
                    Err(status) => Response::status_page(status),
                }
            }
        };
        let status = response.head.status();
        if response.head.assembled() {
            answered.kind = crate::metrics::ESI;
        }
        if status == 101 {
            return self.upgrade(response, &raw_head, answered).await;
        }
        if version == Version::Http10
            && response.body.length().is_none()
            && !wire::no_body(head_only, status)
        {
            // HTTP/1.0 has no chunked coding: buffer the body to send its length.
            match std::mem::replace(&mut response.body, Body::Empty)
                .collect()
                .await
            {
                Ok(bytes) => response.body = Body::Full(bytes),
                Err(e) => {
                    tracing::debug!(error = %e, "page failed while buffering for HTTP/1.0");
                    let page = Response::status_page(502);
                    let mut head = Vec::new();
                    worker.tls.set(self.stream.tls_facts());
                    dispatch::write_head(worker, &mut head, &page, head_only, version, false);
                    if let (Body::Full(b), false) = (&page.body, head_only) {
                        head.extend_from_slice(b);
                    }
                    self.send(&head).await?;
                    let response = (502, &head[..], 0);
                    log_proxied(
                        worker,
                        self.peer,
                        self.read_at,
                        &raw_head,
                        answered,
                        response,
                    );
                    return Ok(false);
                }
            }
        }
        let mut head = crate::reply::HeadBuf::take();
        worker.tls.set(self.stream.tls_facts());
        let framing =
            dispatch::write_head(worker, &mut head, &response, head_only, version, keep_alive);
        let mut sent: u64 = 0;
        let mut complete = true;
        match (framing, response.body) {
            (None, _) | (Some(_), Body::Empty) => self.send(&head).await?,
            (Some(_), Body::Full(bytes)) => {
                self.send_parts(&[&head, &bytes]).await?;
                sent = bytes.len() as u64;
            }
            // A cached response is whole already: head and body in one vectored write.
            (Some(_), Body::Ready(chunks)) => {
                self.send_vectored(&head, &chunks).await?;
                sent = chunks.iter().map(|c| c.len() as u64).sum();
            }
            (Some(framing), mut body @ Body::Stream { .. }) => {
                let length = body.length();
                let chunked = framing == Framing::Chunked;
                // The head goes out with the first chunk (one write; a proxied body's
                // first bytes come with the upstream's head), and each chunk with its
                // chunked framing in one write.
                let mut head_sent = false;
                let mut gone = false;
                loop {
                    let _ = worker.enter(self.slot, ConnState::Handling);
                    // A client that goes away while the body waits (a late fragment)
                    // ends it now, not at the next write: what the body holds (its
                    // compressor's reservation, its fetches) is given back at once.
                    let chunk = tokio::select! {
                        biased;
                        chunk = body.next_chunk() => chunk,
                        () = client_gone(self.stream.tcp()) => {
                            (complete, gone) = (false, true);
                            break;
                        }
                    };
                    match chunk {
                        None => break,
                        Some(Ok(bytes)) if bytes.is_empty() => {}
                        Some(Ok(bytes)) => {
                            let head_part: &[u8] = if head_sent { b"" } else { &head };
                            head_sent = true;
                            if chunked {
                                let mut size = [0u8; 20];
                                let n = wire::chunk_size_line(bytes.len(), &mut size);
                                self.send_parts(&[head_part, &size[..n], &bytes, b"\r\n"])
                                    .await?;
                            } else {
                                self.send_parts(&[head_part, &bytes]).await?;
                            }
                            sent += bytes.len() as u64;
                        }
                        Some(Err(e)) => {
                            // The body broke off after its head went out: closing without
                            // a final chunk tells the client (and any cache) it is
                            // truncated.
                            tracing::debug!(error = %e, "body failed while streaming");
                            complete = false;
                            break;
                        }
                    }
                }
                let last: &[u8] = if complete && chunked {
                    wire::LAST_CHUNK
                } else {
                    b""
                };
                if gone {
                    tracing::debug!("client went away while the body was streaming");
                } else if !head_sent {
                    self.send_parts(&[&head, last]).await?;
                } else if !last.is_empty() {
                    self.send(last).await?;
                }
                if length.is_some_and(|l| l != sent) {
                    complete = false;
                }
            }
        }
        worker.clock.refresh();
        worker.tls.set(self.stream.tls_facts());
        let response = (status, &head[..], sent);
        log_proxied(
            worker,
            self.peer,
            self.read_at,
            &raw_head,
            answered,
            response,
        );
        // Ends the exchange for the filter (it may have work of its own to finish).
        drop(filter);
        Ok(complete && keep_alive)
    }
    /// Writes `head` and then `chunks` whole, with as few vectored writes as the socket
    /// takes, counting as writing meanwhile.
    /// Answers `101 Switching Protocols` and splices the connection with the upstream
    /// one the handler handed over (`crate::tunnel`); a 101 without one is a 502. The
    /// connection ends with the tunnel.
    async fn upgrade(
        &mut self,
        response: Response,
        raw_head: &[u8],
        answered: Answered,
    ) -> io::Result<bool> {
        let worker_rc = Rc::clone(&self.worker);
        let (head, tunnel) = crate::tunnel::answer(&worker_rc, response);
        self.send(&head).await?;
        let status = if tunnel.is_some() { 101 } else { 502 };
        let logged = (status, &head[..], 0);
        log_proxied(
            &worker_rc,
            self.peer,
            self.read_at,
            raw_head,
            answered,
            logged,
        );
        if let Some(tunnel) = tunnel {
            // What the client sent after its request head is the tunnel's first bytes.
            let early = match self.buffers.as_ref() {
                Some(b) => b.read[self.start..self.end].to_vec(),
                None => Vec::new(),
            };
            self.start = self.end;
            if let Err(e) = crate::tunnel::splice(&mut self.stream, &early, tunnel).await {
                tracing::debug!(error = %e, "tunnel ended with an error");
            }
        }
        Ok(false)
    }

    async fn send_vectored(&mut self, head: &[u8], chunks: &[bytes::Bytes]) -> io::Result<()> {
        if !self.worker.enter(self.slot, ConnState::Writing) {
            return Err(io::ErrorKind::TimedOut.into());
        }
        let mut slices: Vec<io::IoSlice<'_>> = Vec::with_capacity(chunks.len() + 1);
        slices.push(io::IoSlice::new(head));
        slices.extend(chunks.iter().map(|c| io::IoSlice::new(c)));
        let total: usize = slices.iter().map(|s| s.len()).sum();
        // The kernel takes at most IOV_MAX (1024) buffers per writev; std passes no more.
        let written = self.stream.write_vectored(&slices).await?;
        if written == total {
            return self.stream.flush().await;
        }
        if written == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        // The socket took part of it (a client slower than its buffer, or more than
        // IOV_MAX buffers): the rest goes out buffer by buffer, from where it stopped.
        let mut skip = written;
        for buf in std::iter::once(head).chain(chunks.iter().map(|c| &c[..])) {
            if skip >= buf.len() {
                skip -= buf.len();
                continue;
            }
            self.stream.write_all(&buf[skip..]).await?;
            skip = 0;
        }
        self.stream.flush().await
    }

    /// Writes up to four pieces whole with as few vectored writes as the socket takes
    /// (no allocation: the slices live on the stack), counting as writing meanwhile.
    async fn send_parts(&mut self, parts: &[&[u8]]) -> io::Result<()> {
        if !self.worker.enter(self.slot, ConnState::Writing) {
            return Err(io::ErrorKind::TimedOut.into());
        }
        debug_assert!(parts.len() <= 4);
        let total: usize = parts.iter().map(|p| p.len()).sum();
        let mut done = 0;
        while done < total {
            let mut slices = [io::IoSlice::new(&[]); 4];
            let (mut skip, mut k) = (done, 0);
            for part in parts {
                if skip >= part.len() {
                    skip -= part.len();
                    continue;
                }
                slices[k] = io::IoSlice::new(&part[skip..]);
                skip = 0;
                k += 1;
            }
            let n = self.stream.write_vectored(&slices[..k]).await?;
            if n == 0 {
                return Err(io::ErrorKind::WriteZero.into());
            }
            done += n;
        }
        self.stream.flush().await
    }

    /// Writes `bytes` whole, counting as writing (for the write-stall timeout) meanwhile.
    async fn send(&mut self, bytes: &[u8]) -> io::Result<()> {
        if !self.worker.enter(self.slot, ConnState::Writing) {
            return Err(io::ErrorKind::TimedOut.into());
        }
        self.stream.write_all(bytes).await?;
        self.stream.flush().await
    }

    /// Reads a request body for a deferred handler (bounded by `max_body_size`). `None` when the
    /// body is malformed or too large: the request was refused and the connection closes.
    async fn read_body(
        &mut self,
        framing: BodyFraming,
        expect_continue: bool,
    ) -> io::Result<Option<bytes::Bytes>> {
        let worker_rc = Rc::clone(&self.worker);
        let worker: &Worker = &worker_rc;
        let limits = &worker.shared.limits;
        let mut left = match framing {
            BodyFraming::None => return Ok(Some(bytes::Bytes::new())),
            BodyFraming::Length(n) => n,
            BodyFraming::Chunked => u64::MAX,
        };
        let mut decoder = ChunkedDecoder::new(limits.max_head_size);
        if expect_continue && self.start == self.end {
            self.send(wire::CONTINUE).await?;
        }
        let mut body = Vec::new();
        loop {
            let Some(buffers) = self.buffers.as_mut() else {
                return Ok(None);
            };
            let available = &buffers.read[self.start..self.end];
            if framing == BodyFraming::Chunked {
                let mut used_total = 0;
                loop {
                    match decoder.decode(&available[used_total..]) {
                        Ok((used, Chunk::Data(data))) => {
                            body.extend_from_slice(data);
                            used_total += used;
                            if body.len() as u64 > limits.max_body_size {
                                worker.refused(self.peer, wire::Error::BodyTooLarge);
                                self.refused = true;
                                return Ok(None);
                            }
                        }
                        Ok((used, Chunk::Done)) => {
                            self.start += used_total + used;
                            return Ok(Some(body.into()));
                        }
                        Ok((used, Chunk::NeedMore)) => {
                            used_total += used;
                            break;
                        }
                        Err(e) => {
                            worker.refused(self.peer, e);
                            self.refused = true;
                            return Ok(None);
                        }
                    }
                }
                self.start += used_total;
            } else {
                let take = left.min(available.len() as u64) as usize;
                body.extend_from_slice(&available[..take]);
                self.start += take;
                left -= take as u64;
                if left == 0 {
                    return Ok(Some(body.into()));
                }
            }
            // Need more bytes: everything buffered was consumed.
            self.start = 0;
            self.end = 0;
            if !worker.enter(self.slot, ConnState::ReadingBody) {
                return Ok(None);
            }
            std::future::poll_fn(|cx| self.stream.poll_read_ready(cx)).await?;
            let Some(buffers) = self.buffers.as_mut() else {
                return Ok(None);
            };
            let n = self.stream.read(&mut buffers.read[..]).await?;
            if n == 0 {
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
            if let Some(metrics) = worker.metrics() {
                metrics.received(n);
            }
            self.end = n;
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
        // SAFETY: the socket is open; shutdown(2) only affects its write side.
        unsafe { libc::shutdown(std::os::fd::AsRawFd::as_raw_fd(&self.stream), libc::SHUT_WR) };
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
        let _ = tokio::time::timeout(Duration::from_secs(2), drain).await;
    }
}

/// Ready when the client has closed the connection (a read would find its end, or it
/// was reset); bytes it sent meanwhile (a pipelined request) are not a close, and then
/// this is never ready.
async fn client_gone(tcp: &crate::reactor::Socket) {
    let mut byte = [0u8; 1];
    match tcp.peek(&mut byte).await {
        Ok(0) | Err(_) => {}
        Ok(_) => std::future::pending().await,
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
