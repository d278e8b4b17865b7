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

use pool::SlotId;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::net::TcpStream;
use wire::{BodyFraming, Chunk, ChunkedDecoder, Framing, HeaderStorage, Version};

use crate::access_log::Entry;
use crate::files;
use crate::output::{Mark, Output, Progress};
use crate::scripted::{self, Handled, ScriptJob};
use crate::worker::{Buffers, ConnState, Worker};

/// A body being skipped so that the next request on the connection starts at the right
/// byte. Static files take no bodies, but clients may still send them.
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
    /// Flush, then proxy this request (it waits on an upstream).
    Proxy(Box<ProxyJob>),
    /// Flush, then finish this scripted request (it waits on its body or an upstream).
    Script(Box<ScriptJob>),
}

/// A request for the proxy, taken out of the read buffer so that it can outlive it.
struct ProxyJob {
    request: edge::ProxyRequest,
    framing: BodyFraming,
    expect_continue: bool,
    keep_alive: bool,
    head_only: bool,
    version: Version,
    /// The request head as received, for the access log.
    raw_head: Vec<u8>,
    /// The script call of a request under a mount (for `header_filter` and `log`).
    script: Option<scripted::Kept>,
}

enum Ending {
    /// The peer closed, a timeout or eviction closed us, or we are shutting down after
    /// finishing the responses.
    Closed,
    /// We decided to close after a response: half-close and drain before closing.
    Linger,
}

pub(crate) struct Conn {
    worker: Rc<Worker>,
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

impl Conn {
    pub(crate) fn new(
        stream: TcpStream,
        peer: SocketAddr,
        worker: Rc<Worker>,
        slot: SlotId,
    ) -> Conn {
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
        if let Ok(Ending::Linger) = conn.run().await {
            // Boxed: its timer is large, and every connection's future (idle ones
            // included) would otherwise carry room for it. One allocation per closing
            // connection.
            Box::pin(conn.linger()).await;
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
                Some(Ok(n)) => self.end += n,
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
                let next = self.answer_buffered();
                let read_more = matches!(next, Next::Read);
                self.flush().await?;
                match next {
                    Next::Close => return Ok(Ending::Linger),
                    Next::Proxy(job) => {
                        // Boxed: the proxy's future is large, and every connection's
                        // future (static and idle ones included) would otherwise carry
                        // room for it.
                        if !Box::pin(self.proxy(job)).await? {
                            return Ok(Ending::Linger);
                        }
                    }
                    Next::Script(job) => {
                        // Boxed like the proxy's future, for the same reason.
                        if !Box::pin(self.script(job)).await? {
                            return Ok(Ending::Linger);
                        }
                    }
                    Next::More | Next::Read => {}
                }
                if worker.is_shutting_down() {
                    return Ok(Ending::Closed);
                }
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

    /// Parses and answers every complete request in the buffer, into the output batch,
    /// up to the first one for the proxy.
    fn answer_buffered(&mut self) -> Next {
        let worker_rc = Rc::clone(&self.worker);
        let worker: &Worker = &worker_rc;
        let limits = &worker.shared.limits;
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
                    let (mount, proxied) = route(worker, &req);
                    // Under a script mount: its phases come before any other handler.
                    let mut script_call = None;
                    if let Some(engine) = worker.script.as_deref() {
                        if let Some(m) = mount {
                            let mark = out.mark();
                            let pending = &read[self.start..];
                            match scripted::answer(
                                worker, engine, m, &req, self.peer, keep_alive, out, pending,
                            ) {
                                Handled::Later(job) => {
                                    self.start += req.head_len;
                                    return Next::Script(job);
                                }
                                Handled::Pass(call) => script_call = Some(call),
                                Handled::Done => {
                                    log(
                                        worker,
                                        self.peer,
                                        self.read_at,
                                        Some(&req),
                                        b"",
                                        out,
                                        mark,
                                    );
                                    self.start += req.head_len;
                                    self.discard = discard_for(req.body, limits.max_head_size);
                                    if !keep_alive {
                                        return Next::Close;
                                    }
                                    continue;
                                }
                            }
                        }
                    }
                    if proxied {
                        if let Some(mut job) =
                            proxy_job(&req, self.peer, keep_alive, &read[self.start..])
                        {
                            self.start += req.head_len;
                            if let (Some(engine), Some(call)) = (&worker.script, script_call) {
                                job.script = Some(scripted::Kept::new(engine.clone(), call));
                            }
                            return Next::Proxy(job);
                        }
                    }
                    if req.expect_continue && self.end - self.start == req.head_len {
                        // The client waits for this before sending the body we will read.
                        out.buf().extend_from_slice(wire::CONTINUE);
                    }
                    let mark = out.mark();
                    files::respond(&req, worker, out, keep_alive);
                    if let (Some(engine), Some(call)) = (&worker.script, script_call) {
                        scripted::filter_written(engine, &call, out, mark);
                        engine.finish(call);
                    }
                    log(worker, self.peer, self.read_at, Some(&req), b"", out, mark);
                    self.start += req.head_len;
                    self.discard = discard_for(req.body, limits.max_head_size);
                    if !keep_alive {
                        return Next::Close;
                    }
                }
                Ok(None) => return Next::Read,
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
                    return Next::Close;
                }
            }
        }
    }

    /// Proxies one request: reads its body, awaits the upstream (or the assembled ESI
    /// page), and streams the response. Returns whether the connection may go on.
    async fn proxy(&mut self, job: Box<ProxyJob>) -> io::Result<bool> {
        let worker_rc = Rc::clone(&self.worker);
        let worker: &Worker = &worker_rc;
        let Some(edge) = worker.edge.as_ref() else {
            return Ok(false);
        };
        let ProxyJob {
            mut request,
            framing,
            expect_continue,
            keep_alive,
            head_only,
            version,
            raw_head,
            script,
        } = *job;
        let Some(body) = self.read_body(framing, expect_continue).await? else {
            return Ok(false);
        };
        request.body = body;
        if !worker.enter(self.slot, ConnState::Handling) {
            return Ok(false);
        }
        let mut head = Vec::with_capacity(512);
        let response = edge.proxy(request).await;
        worker.clock.refresh();
        let mut response = match response {
            Ok(response) => response,
            Err(e) => {
                tracing::debug!(error = %e, "proxy error before the response head");
                files::write_simple(
                    worker,
                    &mut head,
                    e.status(),
                    b"",
                    head_only,
                    version,
                    keep_alive,
                );
                self.send(&head).await?;
                let (status, _, body_bytes) = crate::output::split_response(&head);
                log_proxied(
                    worker,
                    self.peer,
                    self.read_at,
                    &raw_head,
                    status,
                    &head,
                    body_bytes,
                );
                return Ok(keep_alive);
            }
        };
        if let Some(script) = &script {
            script.filter(&mut response.status, &mut response.headers);
        }
        let status = response.status.as_u16();
        let no_body = head_only || status == 204 || status == 304 || status < 200;
        let mut length = response.body.content_length();
        let mut buffered = None;
        if !no_body && length.is_none() && version == Version::Http10 {
            // HTTP/1.0 has no chunked coding: buffer the page to send its length.
            let mut page = Vec::new();
            let mut failed = None;
            while let Some(chunk) = response.body.next_chunk().await {
                match chunk {
                    Ok(bytes) => page.extend_from_slice(&bytes),
                    Err(e) => {
                        failed = Some(e);
                        break;
                    }
                }
            }
            match failed {
                None => {
                    length = Some(page.len() as u64);
                    buffered = Some(page);
                }
                Some(e) => {
                    tracing::debug!(error = %e, "page failed while buffering for HTTP/1.0");
                    files::write_simple(worker, &mut head, 502, b"", head_only, version, false);
                    self.send(&head).await?;
                    log_proxied(worker, self.peer, self.read_at, &raw_head, 502, &head, 0);
                    return Ok(false);
                }
            }
        }
        let chunked = !no_body && length.is_none();
        wire::write_status_line(&mut head, status);
        for (name, value) in &response.headers {
            if !wire::is_framing_field(name.as_str().as_bytes()) {
                wire::write_field(&mut head, name.as_str().as_bytes(), value.as_bytes());
            }
        }
        if !response.headers.contains_key(http::header::DATE) {
            worker.clock.write_date(&mut head);
        }
        let framing = if no_body {
            // No content follows; a HEAD (or 304) answer keeps the upstream's length.
            response
                .headers
                .get(http::header::CONTENT_LENGTH)
                .and_then(|v| v.to_str().ok()?.parse().ok())
                .map_or(Framing::None, Framing::Length)
        } else if let Some(length) = length {
            Framing::Length(length)
        } else {
            Framing::Chunked
        };
        wire::write_framing(&mut head, framing, version, keep_alive);
        let mut sent: u64 = 0;
        let mut complete = true;
        // A cached response is whole already: head and body in one vectored write.
        let ready = response
            .body
            .ready_chunks()
            .filter(|_| !no_body && !chunked);
        if let Some(chunks) = ready {
            self.send_vectored(&head, chunks).await?;
            sent = chunks.iter().map(|c| c.len() as u64).sum();
        } else {
            self.send(&head).await?;
        }
        if no_body || ready.is_some() {
        } else if let Some(bytes) = buffered {
            self.send(&bytes).await?;
            sent = bytes.len() as u64;
        } else {
            loop {
                let _ = worker.enter(self.slot, ConnState::Handling);
                match response.body.next_chunk().await {
                    None => break,
                    Some(Ok(bytes)) if bytes.is_empty() => {}
                    Some(Ok(bytes)) => {
                        if chunked {
                            let mut size = [0u8; 20];
                            let n = wire::chunk_size_line(bytes.len(), &mut size);
                            self.send(&size[..n]).await?;
                            self.send(&bytes).await?;
                            self.send(b"\r\n").await?;
                        } else {
                            self.send(&bytes).await?;
                        }
                        sent += bytes.len() as u64;
                    }
                    Some(Err(e)) => {
                        // The page broke off after its head went out: closing without a
                        // final chunk tells the client (and any cache) it is truncated.
                        tracing::debug!(error = %e, "page failed while streaming");
                        complete = false;
                        break;
                    }
                }
            }
            if complete && chunked {
                self.send(wire::LAST_CHUNK).await?;
            }
            if length.is_some_and(|l| l != sent) {
                complete = false;
            }
        }
        worker.clock.refresh();
        log_proxied(
            worker,
            self.peer,
            self.read_at,
            &raw_head,
            status,
            &head,
            sent,
        );
        Ok(complete && keep_alive)
    }

    /// Finishes a scripted request: reads its body, runs or awaits `content`, writes the
    /// response. Returns whether the connection may go on.
    async fn script(&mut self, job: Box<ScriptJob>) -> io::Result<bool> {
        let worker_rc = Rc::clone(&self.worker);
        let worker: &Worker = &worker_rc;
        let Some(engine) = worker.script.as_deref() else {
            return Ok(false);
        };
        let ScriptJob {
            call,
            content,
            finished,
            framing,
            expect_continue,
            keep_alive,
            head_only,
            version,
            raw_head,
        } = *job;
        let content = match (content, finished) {
            (_, Some(outcome)) => {
                let mut head = Vec::new();
                scripted::write_response(
                    worker, engine, &call, outcome, head_only, version, keep_alive, &mut head,
                );
                return self
                    .send_scripted(engine, call, head, &raw_head, keep_alive)
                    .await;
            }
            (Some(running), None) => Some(running),
            (None, None) => {
                let Some(body) = self.read_body(framing, expect_continue).await? else {
                    engine.finish(call);
                    return Ok(false);
                };
                engine.context(&call, |c| c.set_body(body));
                match engine.content(&call) {
                    script::Content::Done(outcome) => {
                        let mut head = Vec::new();
                        scripted::write_response(
                            worker, engine, &call, outcome, head_only, version, keep_alive,
                            &mut head,
                        );
                        return self
                            .send_scripted(engine, call, head, &raw_head, keep_alive)
                            .await;
                    }
                    script::Content::Pending(running) => Some(running),
                }
            }
        };
        if !worker.enter(self.slot, ConnState::Handling) {
            engine.finish(call);
            return Ok(false);
        }
        let outcome = match content {
            Some(running) => running.await,
            None => script::Outcome::Failed,
        };
        worker.clock.refresh();
        let mut head = Vec::new();
        scripted::write_response(
            worker, engine, &call, outcome, head_only, version, keep_alive, &mut head,
        );
        self.send_scripted(engine, call, head, &raw_head, keep_alive)
            .await
    }

    async fn send_scripted(
        &mut self,
        engine: &script::Engine,
        call: script::Call,
        response: Vec<u8>,
        raw_head: &[u8],
        keep_alive: bool,
    ) -> io::Result<bool> {
        engine.finish(call);
        let sent = self.send(&response).await;
        let (status, head, body_bytes) = crate::output::split_response(&response);
        log_proxied(
            &self.worker,
            self.peer,
            self.read_at,
            raw_head,
            status,
            head,
            body_bytes,
        );
        sent?;
        Ok(keep_alive)
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
        let written = tokio::io::AsyncWriteExt::write_vectored(&mut self.stream, &slices).await?;
        if written == total {
            return Ok(());
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
            tokio::io::AsyncWriteExt::write_all(&mut self.stream, &buf[skip..]).await?;
            skip = 0;
        }
        Ok(())
    }

    /// Writes `bytes` whole, counting as writing (for the write-stall timeout) meanwhile.
    async fn send(&mut self, bytes: &[u8]) -> io::Result<()> {
        if !self.worker.enter(self.slot, ConnState::Writing) {
            return Err(io::ErrorKind::TimedOut.into());
        }
        tokio::io::AsyncWriteExt::write_all(&mut self.stream, bytes).await
    }

    /// Reads a request body for the proxy (bounded by `max_body_size`). `None` when the
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
                    std::future::poll_fn(|cx| self.stream.poll_write_ready(cx)).await?;
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
        let worker_rc = Rc::clone(&self.worker);
        let worker: &Worker = &worker_rc;
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

/// How to skip the body of a request answered without reading it.
fn discard_for(body: BodyFraming, max_head_size: usize) -> Discard {
    match body {
        BodyFraming::None => Discard::None,
        BodyFraming::Length(n) => Discard::Length(n),
        BodyFraming::Chunked => Discard::Chunked(Box::new((ChunkedDecoder::new(max_head_size), 0))),
    }
}

/// The request as the proxy takes it, if its path routes to an upstream. `pending` is the
/// buffer from the request's first byte (its head is copied for the access log).
/// Where a request goes besides the static files: its script mount, and whether a
/// proxy route takes it. Both are matched on the normalised path (`/%61pi`, `//api`
/// and `/x/../api` are `/api`), the form files are found by, so no spelling of a path
/// reaches a file or an upstream past the script that guards its prefix. A path that
/// does not normalise goes nowhere but the static handler, which answers 400.
fn route(worker: &Worker, req: &wire::Request<'_, '_>) -> (Option<script::MountId>, bool) {
    if worker.script.is_none() && worker.edge.is_none() {
        return (None, false);
    }
    let raw = match memchr::memchr(b'?', req.path) {
        Some(q) => &req.path[..q],
        None => req.path,
    };
    let mut path = worker.route_path.borrow_mut();
    if wire::normalize_path(raw, &mut path).is_err() {
        return (None, false);
    }
    let mount = worker.script.as_deref().and_then(|e| e.mount(&path));
    let proxied = worker
        .edge
        .as_ref()
        .is_some_and(|edge| matches!(edge.route_normalised(&path), Some(edge::Route::Upstream(_))));
    (mount, proxied)
}

/// The proxy job of a request a proxy route takes.
fn proxy_job(
    req: &wire::Request<'_, '_>,
    client: SocketAddr,
    keep_alive: bool,
    pending: &[u8],
) -> Option<Box<ProxyJob>> {
    let path = std::str::from_utf8(req.path).ok()?;
    let mut headers = http::HeaderMap::with_capacity(req.headers.len());
    for h in req.headers {
        if let (Ok(name), Ok(value)) = (
            http::HeaderName::from_bytes(h.name.as_bytes()),
            http::HeaderValue::from_bytes(h.value),
        ) {
            headers.append(name, value);
        }
    }
    let target = if path.starts_with('?') {
        format!("/{path}")
    } else {
        path.to_string()
    };
    let version = req.version;
    Some(Box::new(ProxyJob {
        request: edge::ProxyRequest {
            method: http::Method::from_bytes(req.method_token.as_bytes()).ok()?,
            target,
            headers,
            body: bytes::Bytes::new(),
            client: edge::ClientInfo {
                addr: client.ip(),
                scheme: "http",
                version: match version {
                    Version::Http10 => http::Version::HTTP_10,
                    Version::Http11 => http::Version::HTTP_11,
                },
            },
        },
        framing: req.body,
        expect_continue: req.expect_continue,
        keep_alive,
        head_only: req.method == wire::Method::Head,
        version,
        raw_head: pending[..req.head_len].to_vec(),
        script: None,
    }))
}

/// The access log line of a proxied request, from its head as received.
fn log_proxied(
    worker: &Worker,
    client: SocketAddr,
    read_at: Option<Instant>,
    raw_head: &[u8],
    status: u16,
    head: &[u8],
    body_bytes: u64,
) {
    if worker.log.borrow().is_none() {
        return;
    }
    let mut storage = HeaderStorage::new();
    let request = wire::parse_request(raw_head, &mut storage, &worker.shared.limits)
        .ok()
        .flatten();
    record(
        worker,
        client,
        read_at,
        request.as_ref(),
        b"",
        (status, head, body_bytes),
    );
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
    if worker.log.borrow().is_some() {
        record(worker, client, read_at, request, raw_line, out.since(mark));
    }
}

/// One access log line: `response` is (status, head, body bytes).
fn record(
    worker: &Worker,
    client: SocketAddr,
    read_at: Option<Instant>,
    request: Option<&wire::Request<'_, '_>>,
    raw_line: &[u8],
    (status, head, body_bytes): (u16, &[u8], u64),
) {
    let mut log = worker.log.borrow_mut();
    let Some(log) = log.as_mut() else {
        return;
    };
    let entry = Entry {
        client,
        request,
        raw_line,
        status,
        head,
        body_bytes,
        micros: read_at.map_or(0, |t| t.elapsed().as_micros() as u64),
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
