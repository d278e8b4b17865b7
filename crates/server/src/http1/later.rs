//! A request answered later (`Next::Later`), finished by `exchange::finish` with the
//! connection as its sink: its body read for the handler, its response awaited (holding
//! the batch of pipelined responses at most [`HOLD`]) and written as it arrives, streamed
//! or all at once, or the connection handed to a tunnel after `101 Switching Protocols`.
//! The batch loop that answers requests in place is in `http1`.

use std::io;
use std::rc::Rc;

use std::time::Instant;

use handler::{Body, FileRegion, LocalFuture, Piece, Response, Tunnel};
use std::os::fd::AsRawFd;
use tokio::io::Interest;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use wire::{BodyFraming, Chunk, ChunkedDecoder, Framing, HeaderStorage, Version};

use super::{discard_for, Conn};
use crate::conn_state::ConnState;
use crate::exchange::finish::{self, BodyRead, Pumped, Sink};
use crate::exchange::served::Sent;
use crate::exchange::{self, tunnel, Exchange};
use crate::facts::ConnFacts;
use crate::net::transport::Stream;
use crate::reply::{HeadBuf, Terms};
use crate::worker::Worker;

/// How long a response that joins the output batch may keep the responses before it
/// waiting while its handler works (pipelined requests to a slow upstream).
const HOLD: std::time::Duration = std::time::Duration::from_millis(2);

impl Conn {
    /// Finishes a request answered later (`exchange::finish` with this connection as its
    /// [`Sink`]). Returns whether the connection may go on.
    ///
    /// With `join` (pipelined requests, [`Exchange::may_join_batch`]), the output batch
    /// may hold earlier responses not written yet: a whole response that fits is added
    /// to it (the connection flushes it with the next ones), anything else flushes the
    /// batch first. The batch is held at most [`HOLD`] while the handler works.
    pub(super) async fn finish(
        &mut self,
        exchange: handler::Pooled<Exchange>,
        join: bool,
    ) -> io::Result<bool> {
        let mut sink = Later { conn: self, join };
        match finish::finish(&mut sink, exchange).await {
            Ok(go_on) => Ok(go_on),
            Err(Gone::Closed) => Ok(false),
            Err(Gone::Failed(e)) => Err(e),
        }
    }
}

/// HTTP/1's side of a request answered later.
struct Later<'c> {
    conn: &'c mut Conn,
    join: bool,
}

/// Why HTTP/1 stopped an exchange short.
enum Gone {
    /// A timeout or an eviction closed the connection: it ends quietly.
    Closed,
    Failed(io::Error),
}

impl From<io::Error> for Gone {
    fn from(e: io::Error) -> Gone {
        Gone::Failed(e)
    }
}

impl Sink for Later<'_> {
    type Gone = Gone;
    type Head = HeadBuf;
    const SWITCHES: bool = true;

    fn worker(&self) -> &Rc<Worker> {
        &self.conn.worker
    }

    fn facts(&self) -> ConnFacts {
        self.conn.facts()
    }

    fn read_at(&self) -> Option<Instant> {
        self.conn.read_at
    }

    async fn read_body(
        &mut self,
        framing: BodyFraming,
        expect_continue: bool,
    ) -> Result<BodyRead, Gone> {
        Ok(match self.conn.read_body(framing, expect_continue).await? {
            Some(body) => BodyRead::Body(body),
            None => BodyRead::Close,
        })
    }

    async fn pump_body(
        &mut self,
        framing: BodyFraming,
        expect_continue: bool,
        writer: handler::BodyWriter,
    ) -> Result<Pumped, Gone> {
        Ok(self
            .conn
            .pump_body(framing, expect_continue, writer)
            .await?)
    }

    fn abandon_body(&mut self) {
        // The rest of the body may still be on its way: the close after the response
        // lingers.
        self.conn.refused = true;
    }

    async fn skip_body(&mut self, framing: BodyFraming) {
        let max_head_size = self.conn.worker.shared.limits.max_head_size;
        self.conn.discard = discard_for(framing, max_head_size);
    }

    async fn respond(
        &mut self,
        mut responding: LocalFuture<Result<Response, u16>>,
    ) -> Result<Result<Response, u16>, Gone> {
        let conn = &mut *self.conn;
        let worker = conn.worker.clone();
        if !worker.enter(conn.slot, ConnState::Handling) {
            return Err(Gone::Closed);
        }
        let held = self.join && conn.buffers.as_ref().is_some_and(|b| !b.out.is_empty());
        if !held {
            return Ok(responding.await);
        }
        match evloop::time::timeout(HOLD, &mut responding).await {
            Ok(response) => Ok(response),
            Err(_) => {
                // A slow handler does not keep the responses before it.
                conn.flush().await?;
                // A flush that waited for the client counted as writing.
                if !worker.enter(conn.slot, ConnState::Handling) {
                    return Err(Gone::Closed);
                }
                Ok(responding.await)
            }
        }
    }

    async fn send(&mut self, response: Response, terms: Terms) -> Result<Sent<HeadBuf>, Gone> {
        let join = self.join;
        Ok(self.conn.send_response(response, terms, join).await?)
    }

    async fn switch(
        &mut self,
        response: Response,
    ) -> Result<(Sent<HeadBuf>, Option<Tunnel>), Gone> {
        let conn = &mut *self.conn;
        if self.join {
            // Written on its own: what the batch holds goes first.
            conn.flush().await?;
        }
        let worker = conn.worker.clone();
        let (head, tunnel) = tunnel::answer(&worker, &conn.facts(), response);
        conn.send(&head).await?;
        let status = if tunnel.is_some() { 101 } else { 502 };
        let sent = Sent {
            status,
            head_len: head.len() as u64,
            head,
            body: 0,
            complete: true,
        };
        Ok((sent, tunnel))
    }

    async fn tunnel(&mut self, tunnel: Tunnel) {
        let conn = &mut *self.conn;
        // What the client sent after its request head is the tunnel's first bytes.
        let early = match conn.buffers.as_ref() {
            Some(b) => b.read[conn.start..conn.end].to_vec(),
            None => Vec::new(),
        };
        conn.start = conn.end;
        if let Err(e) = tunnel::splice(&mut conn.stream, &early, tunnel).await {
            tracing::debug!(error = %e, "tunnel ended with an error");
        }
    }

    fn with_request(
        &self,
        raw_head: &[u8],
        record: &mut dyn FnMut(Option<&wire::Request<'_, '_>>),
    ) {
        // The head was kept with where its parts are (only when a log is on); one
        // kept without is parsed again here.
        if crate::exchange::kept_head::read(raw_head, record) {
            return;
        }
        let mut storage = HeaderStorage::new();
        let limits = &self.conn.worker.shared.limits;
        let request = wire::parse_request(raw_head, &mut storage, limits)
            .ok()
            .flatten();
        record(request.as_ref());
    }
}

impl Conn {
    /// Writes a handler's response: into the output batch when it joins it (whole and
    /// small), else on its own, streaming a body that arrives over time.
    async fn send_response(
        &mut self,
        mut response: Response,
        terms: Terms,
        join: bool,
    ) -> io::Result<Sent<HeadBuf>> {
        let worker_rc = Rc::clone(&self.worker);
        let worker: &Worker = &worker_rc;
        let Terms {
            head_only,
            version,
            keep_alive,
        } = terms;
        let status = response.head.status();
        // A body in memory (a stream's length, even when known, is still to come).
        let whole_len = match &response.body {
            Body::Stream { .. } => None,
            body => body.length().map(|n| n as usize),
        };
        let mut joins = join
            && self.buffers.is_some()
            && whole_len.is_some_and(|n| n <= exchange::MAX_BATCHED_BODY);
        if join && !joins {
            // Written on its own: what the batch holds goes first.
            self.flush().await?;
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
                    let mut head = HeadBuf::take();
                    let facts = self.facts();
                    exchange::write_head(
                        worker, &facts, &mut head, &page, head_only, version, false,
                    );
                    if let (Body::Full(b), false) = (&page.body, head_only) {
                        head.extend_from_slice(b);
                    }
                    self.send(&head).await?;
                    return Ok(Sent {
                        status: 502,
                        head_len: head.len() as u64,
                        head,
                        body: 0,
                        complete: false,
                    });
                }
            }
        }
        let mut head = HeadBuf::take();
        let facts = self.facts();
        let framing = exchange::write_head(
            worker, &facts, &mut head, &response, head_only, version, keep_alive,
        );
        if joins {
            let need = head.len() + whole_len.unwrap_or(0);
            let room = |c: &Self| c.buffers.as_ref().is_some_and(|b| b.out.has_room(need));
            if !room(self) {
                // The batch is full: it goes out, and this response starts the next one
                // (or, larger than an empty batch takes, goes out on its own).
                self.flush().await?;
                joins = room(self);
            }
        }
        let mut sent: u64 = 0;
        let mut complete = true;
        match (framing, response.body) {
            (framing, body) if joins => {
                // Added to the batch, which the connection writes with the next
                // responses.
                if let Some(buffers) = self.buffers.as_mut() {
                    let out = buffers.out.buf();
                    out.extend_from_slice(&head);
                    if framing.is_some() {
                        match body {
                            Body::Full(bytes) => out.extend_from_slice(&bytes),
                            Body::Ready(chunks) => {
                                chunks.iter().for_each(|c| out.extend_from_slice(c))
                            }
                            _ => {}
                        }
                        sent = whole_len.unwrap_or(0) as u64;
                    }
                }
            }
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
            (Some(framing), body @ Body::Stream { .. }) => {
                (sent, complete) = self.send_stream(&head, framing, body).await?;
            }
        }
        Ok(Sent {
            status,
            head_len: head.len() as u64,
            head,
            body: sent,
            complete,
        })
    }

    /// Streams a body that arrives over time (a proxied or assembled one) after its
    /// head: returns the body bytes sent and whether all of it went out.
    async fn send_stream(
        &mut self,
        head: &[u8],
        framing: Framing,
        mut body: Body,
    ) -> io::Result<(u64, bool)> {
        let worker_rc = Rc::clone(&self.worker);
        let worker: &Worker = &worker_rc;
        let mut sent: u64 = 0;
        let mut complete = true;
        let length = body.length();
        let chunked = framing == Framing::Chunked;
        // The head goes out with the first chunk (one write; a proxied body's
        // first bytes come with the upstream's head), and each chunk with its
        // chunked framing in one write.
        let mut head_sent = false;
        let mut gone = false;
        // In cleartext a body kept in a file (the cache's disk tier) gives regions of it,
        // sent with sendfile(2) as static files are; through TLS it gives bytes.
        let plain = matches!(self.stream, Stream::Plain(_));
        loop {
            let _ = worker.enter(self.slot, ConnState::Handling);
            // A client that goes away while the body waits (a late fragment)
            // ends it now, not at the next write: what the body holds (its
            // compressor's reservation, its fetches) is given back at once.
            let piece = tokio::select! {
                biased;
                piece = next_piece(&mut body, plain) => piece,
                () = client_gone(self.stream.tcp()) => {
                    (complete, gone) = (false, true);
                    break;
                }
            };
            match piece {
                None => break,
                Some(Ok(Piece::File(region))) => {
                    let head_part: &[u8] = if head_sent { b"" } else { head };
                    head_sent = true;
                    self.send_region(head_part, &region, chunked).await?;
                    sent += region.len;
                }
                Some(Ok(Piece::Bytes(bytes))) if bytes.is_empty() => {}
                Some(Ok(Piece::Bytes(bytes))) => {
                    let head_part: &[u8] = if head_sent { b"" } else { head };
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
            self.send_parts(&[head, last]).await?;
        } else if !last.is_empty() {
            self.send(last).await?;
        }
        if length.is_some_and(|l| l != sent) {
            complete = false;
        }
        Ok((sent, complete))
    }

    /// Writes `before` (the head, with the first piece) and `region` of a file with
    /// sendfile(2) on the non-blocking socket (waiting for writability when it is full, as
    /// [`Conn::flush`] does for static files), in chunked framing when `chunked`.
    async fn send_region(
        &mut self,
        before: &[u8],
        region: &FileRegion,
        chunked: bool,
    ) -> io::Result<()> {
        let mut size = [0u8; 20];
        let n = if chunked {
            wire::chunk_size_line(region.len as usize, &mut size)
        } else {
            0
        };
        let Stream::Plain(tcp) = &self.stream else {
            return Err(io::ErrorKind::Unsupported.into());
        };
        // The head (or chunk size line) with MSG_MORE, so it leaves in the same packets
        // as the start of the region (as `Output` does before a static file's).
        let parts = [before, &size[..n]];
        let total = before.len() + n;
        let mut done = 0;
        while done < total {
            let mut slices = [io::IoSlice::new(&[]); 2];
            let k = wire::unsent(&parts, done, &mut slices);
            let flags = libc::MSG_MORE | libc::MSG_NOSIGNAL;
            let fd = tcp.as_raw_fd();
            match tcp.try_io(Interest::WRITABLE, || {
                crate::sys::sendmsg(fd, &slices[..k], flags)
            }) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(sent) => done += sent,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    if !self.worker.enter(self.slot, ConnState::Writing) {
                        return Err(io::ErrorKind::TimedOut.into());
                    }
                    std::future::poll_fn(|cx| tcp.poll_write_ready(cx)).await?;
                }
                Err(e) => return Err(e),
            }
        }
        let fd = region.file.as_raw_fd();
        let (mut at, end) = (region.offset, region.offset + region.len);
        while at < end {
            match crate::net::output::send_file(tcp, fd, at, end - at) {
                // The file shrank under us: its length is promised already.
                Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
                Ok(n) => {
                    at += n as u64;
                    self.worker.touch(self.slot);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    if !self.worker.enter(self.slot, ConnState::Writing) {
                        return Err(io::ErrorKind::TimedOut.into());
                    }
                    std::future::poll_fn(|cx| tcp.poll_write_ready(cx)).await?;
                    self.worker.clock.refresh();
                }
                Err(e) => return Err(e),
            }
        }
        if chunked {
            self.send(b"\r\n").await?;
        }
        Ok(())
    }

    /// Writes `head` and then `chunks` whole, with as few vectored writes as the socket
    /// takes, counting as writing meanwhile.
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
            let k = wire::unsent(parts, done, &mut slices);
            let n = self.stream.write_vectored(&slices[..k]).await?;
            if n == 0 {
                return Err(io::ErrorKind::WriteZero.into());
            }
            done += n;
        }
        self.stream.flush().await
    }

    /// Writes `bytes` whole, counting as writing (for the write-stall timeout) meanwhile.
    pub(super) async fn send(&mut self, bytes: &[u8]) -> io::Result<()> {
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
                                worker.refused(self.origin.peer(), wire::Error::BodyTooLarge);
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
                            worker.refused(self.origin.peer(), e);
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
}

/// Ready when the client has closed the connection (a read would find its end, or it
/// was reset); bytes it sent meanwhile (a pipelined request) are not a close, and then
/// this is never ready.
/// The body's next piece: regions of a file only when the connection can send them
/// (`plain`).
async fn next_piece(body: &mut Body, plain: bool) -> Option<Result<Piece, handler::BodyError>> {
    match plain {
        true => body.next_piece().await,
        false => body.next_chunk().await.map(|c| c.map(Piece::Bytes)),
    }
}

async fn client_gone(tcp: &crate::net::reactor::Socket) {
    let mut byte = [0u8; 1];
    match tcp.peek(&mut byte).await {
        Ok(0) | Err(_) => {}
        Ok(_) => std::future::pending().await,
    }
}
