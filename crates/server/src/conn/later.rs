//! A request answered later (`Next::Later`): its body read for the handler, its
//! response awaited and written as it arrives, streamed or all at once, or the
//! connection handed to a tunnel after `101 Switching Protocols`. The batch loop that
//! answers requests in place is in `conn`.

use std::io;
use std::rc::Rc;

use handler::{Body, Response};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use wire::{BodyFraming, Chunk, ChunkedDecoder, Framing, Version};

use super::{discard_for, Conn};
use crate::dispatch::{self, Exchange, Work};
use crate::metrics::Answered;
use crate::served::log_proxied;
use crate::worker::{ConnState, Worker};

/// How long a response that joins the output batch may keep the responses before it
/// waiting while its handler works (pipelined requests to a slow upstream).
const HOLD: std::time::Duration = std::time::Duration::from_millis(2);

impl Conn {
    /// Finishes a request answered later: reads its body and awaits its handler (or
    /// takes the response that was ready), runs the route's filter on the head, and
    /// writes the response, streaming a body that arrives over time. Returns whether the
    /// connection may go on.
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
        } = exchange.into_inner();
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
                let mut responding = deferred.respond(body);
                let held = join && self.buffers.as_ref().is_some_and(|b| !b.out.is_empty());
                let response = match held {
                    false => responding.await,
                    true => match tokio::time::timeout(HOLD, &mut responding).await {
                        Ok(response) => response,
                        Err(_) => {
                            // A slow handler does not keep the responses before it.
                            self.flush().await?;
                            // A flush that waited for the client counted as writing.
                            if !worker.enter(self.slot, ConnState::Handling) {
                                return Ok(false);
                            }
                            responding.await
                        }
                    },
                };
                worker.clock.refresh();
                worker.tls.set(self.stream.tls_facts());
                dispatch::handled(worker, response, &mut filter, site, accepted, head_only)
            }
        };
        let status = response.head.status();
        if response.head.assembled() {
            answered.kind = worker.shared.kinds.assembled(answered.kind);
        }
        // A body in memory (a stream's length, even when known, is still to come).
        let whole_len = match &response.body {
            Body::Stream { .. } => None,
            body => body.length().map(|n| n as usize),
        };
        let mut joins = join
            && self.buffers.is_some()
            && status != 101
            && whole_len.is_some_and(|n| n <= dispatch::MAX_BATCHED_BODY);
        if join && !joins {
            // Written on its own: what the batch holds goes first.
            self.flush().await?;
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
                    self.log_answer(&raw_head, answered, response);
                    return Ok(false);
                }
            }
        }
        let mut head = crate::reply::HeadBuf::take();
        worker.tls.set(self.stream.tls_facts());
        let framing =
            dispatch::write_head(worker, &mut head, &response, head_only, version, keep_alive);
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
        self.log_answer(&raw_head, answered, response);
        // Ends the exchange for the filter (it may have work of its own to finish).
        drop(filter);
        Ok(complete && keep_alive)
    }
    /// Counts and logs the response to a request answered later (`response`: its status,
    /// head and body bytes sent).
    fn log_answer(&self, raw_head: &[u8], answered: Answered, response: (u16, &[u8], u64)) {
        log_proxied(
            &self.worker,
            self.peer,
            self.read_at,
            raw_head,
            answered,
            response,
        );
    }

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
        self.log_answer(raw_head, answered, logged);
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
