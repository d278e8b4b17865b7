//! One HTTP/2 stream: its request seen as the request model every handler takes (a
//! `wire::Request`, version `Http2`), answered by `dispatch` exactly as an HTTP/1 request
//! is, and the response framed as HEADERS and DATA within the flow-control windows.
//!
//! The response's fields come from the one encoder of response heads (`dispatch`,
//! `files`, `reply` write HTTP/1 field lines, the static files' cached heads among
//! them): they are read back here and sent as HPACK fields, the connection-specific
//! ones (RFC 9113 section 8.2.2) left out. So a field is written once for both
//! protocols and both send the same ones (HSTS, Vary, ETag, Cache-Control...).
//!
//! A response ready at once with a small body in memory (a static file from the cache,
//! a refusal, a cached page) is framed on the connection's own task as the stream is
//! accepted; only one that waits (a handler's, a file read in chunks, a body larger
//! than the window) gets a task of its own.

use std::rc::Rc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use h2::server::SendResponse;
use h2::{RecvStream, SendStream};
use handler::{Body, Response};
use http::{HeaderName, HeaderValue};
use wire::{BodyFraming, Version};

use super::Streams;
use crate::dispatch::{self, Dispatched, Exchange, Work};
use crate::output::Piece;
use crate::served;
use crate::worker::Worker;

/// Largest DATA payload read from a file at a time (the send buffer takes at most
/// `[http2] max_send_buffer` of it before the client's window opens).
const FILE_CHUNK: usize = 64 * 1024;

/// Bodies up to this size, in memory, are queued whole with their head: no task, no
/// wait. h2 lets them out as the client's window allows; a client that keeps its window
/// shut leaves the connection idle as far as the server can tell (its stream is done),
/// so `timeouts.idle`, or an eviction, ends it.
const SEND_AT_ONCE: usize = 16 * 1024;

/// What is left of a stream after [`start`].
pub(super) enum Rest {
    /// Ended: `true` if the client had cancelled it.
    Ended(bool),
    /// Answered, to be framed with the others answered in the same pass ([`Ready::send`]),
    /// so that their frames leave in one write.
    Ready(Ready),
    /// Its response waits (a handler, a file, a large body): finished by [`finish`] on a
    /// task of its own.
    Later(Box<Pending>),
}

pub(super) struct Pending {
    respond: SendResponse<Bytes>,
    work: Waits,
}

// Always boxed (in `Pending`), so the size of the larger variant costs nothing.
#[allow(clippy::large_enum_variant)]
enum Waits {
    /// The static files' answer, logged already: its head and its body's pieces.
    Pieces {
        head: Bytes,
        pieces: Vec<Piece>,
        /// The request body, to skip first.
        skip: Option<RecvStream>,
    },
    /// A handler's answer to come.
    Exchange {
        parts: http::request::Parts,
        body: RecvStream,
        exchange: handler::Pooled<Exchange>,
        read_at: Option<Instant>,
    },
}

/// Answers a stream as far as it can without waiting. `read_at`: when the read that
/// brought it in was taken (the worker's clock was refreshed then).
pub(super) fn start(
    streams: &Streams,
    request: http::Request<RecvStream>,
    mut respond: SendResponse<Bytes>,
    read_at: Option<Instant>,
) -> Rest {
    // A stream the client cancelled before we looked at it (a Rapid Reset) costs
    // nothing more than this check.
    if reset(&mut respond) {
        return Rest::Ended(true);
    }
    let worker: &Worker = &streams.worker;
    let (parts, body) = request.into_parts();
    let mut cookie = Vec::new();
    let mut fields = Vec::with_capacity(parts.headers.len() + 1);
    let (req, refusal) = view(
        &parts,
        body.is_end_stream(),
        &mut cookie,
        &mut fields,
        &worker.shared.limits,
    );
    worker.tls.set(streams.tls);
    let mut buffers = worker.take_buffers();
    let out = &mut buffers.out;
    let mark = out.mark();
    let dispatched = match refusal {
        Some(e) => {
            worker.refused(streams.peer, e);
            crate::reply::simple(worker, out, &req, true, e.status(), b"");
            let current = worker.current();
            let site = current.gen.sites.hosts.select(&req);
            Dispatched::Done(crate::metrics::Answered {
                host: current.gen.host_labels[site],
                kind: crate::metrics::kind_index("static"),
                method: crate::metrics::method_index(req.method),
            })
        }
        None => dispatch::answer(worker, &req, streams.peer, true, out, &[]),
    };
    let exchange = match dispatched {
        Dispatched::Done(answered) => {
            served::log(
                worker,
                streams.peer,
                read_at,
                Some((&req, answered)),
                b"",
                out,
                mark,
            );
            let (_, head, _) = out.since(mark);
            // One copy, which the HTTP/2 field values share.
            let head = Bytes::copy_from_slice(head);
            let pieces = out.take_pieces(head.len());
            worker.give_back(buffers);
            let small = pieces.iter().all(|p| matches!(p, Piece::Bytes(_)))
                && pieces.iter().map(Piece::len).sum::<u64>() <= SEND_AT_ONCE as u64;
            // A request body nobody reads (a static file's) is skipped to its end before
            // the response goes out, as HTTP/1 does: the stream stays open and checked
            // (its length, its trailers, its window) until the client ends it. A refused
            // request is answered at once; its stream is reset when the body is dropped.
            let skip = (refusal.is_none() && !body.is_end_stream()).then_some(body);
            if !small || skip.is_some() {
                let work = Waits::Pieces { head, pieces, skip };
                return Rest::Later(Box::new(Pending { respond, work }));
            }
            let head_only = req.method == wire::Method::Head;
            let Some((response, content)) = response(&head, head_only) else {
                respond.send_reset(h2::Reason::INTERNAL_ERROR);
                return Rest::Ended(false);
            };
            let body = match pieces.into_iter().next() {
                Some(Piece::Bytes(bytes)) if content => bytes,
                _ => Bytes::new(),
            };
            return Rest::Ready(Ready {
                respond,
                response,
                body,
            });
        }
        Dispatched::Later(exchange) => exchange,
    };
    worker.give_back(buffers);
    // A handler's response ready now with a small body in memory (a cached object, a
    // cached page) and no request body to wait for: framed in this pass, like a file.
    let small = |body: &Body| match body {
        Body::Empty => true,
        Body::Full(b) => b.len() <= SEND_AT_ONCE,
        Body::Ready(chunks) => chunks.iter().map(|c| c.len()).sum::<usize>() <= SEND_AT_ONCE,
        Body::Stream { .. } => false,
    };
    if body.is_end_stream() && matches!(&exchange.work, Work::Ready(r) if small(&r.body)) {
        let Exchange {
            work: Work::Ready(ready),
            filter,
            answered,
            head_only,
            ..
        } = exchange.into_inner()
        else {
            unreachable!("matched above")
        };
        let (head, body, (answered, status)) =
            frame_head(streams, ready, filter, answered, head_only);
        let body = match body {
            Body::Full(bytes) => bytes,
            Body::Ready(chunks) if chunks.len() == 1 => chunks[0].clone(),
            Body::Ready(chunks) => chunks.concat().into(),
            _ => Bytes::new(),
        };
        served::count(
            worker,
            answered,
            (status, &head, body.len() as u64),
            read_at,
        );
        if worker.log.borrow().is_some() {
            let sent = (status, &head[..], body.len() as u64);
            served::record(worker, streams.peer, read_at, Some(&req), b"", sent);
        }
        let Some((response, _)) = response(&Bytes::from(head), head_only) else {
            respond.send_reset(h2::Reason::INTERNAL_ERROR);
            return Rest::Ended(false);
        };
        return Rest::Ready(Ready {
            respond,
            response,
            body,
        });
    }
    let work = Waits::Exchange {
        parts,
        body,
        exchange,
        read_at,
    };
    Rest::Later(Box::new(Pending { respond, work }))
}

/// Finishes a stream [`start`] could not; returns whether the client cancelled it.
pub(super) async fn finish(streams: Rc<Streams>, pending: Box<Pending>) {
    let Pending { mut respond, work } = *pending;
    let result = match work {
        Waits::Pieces { head, pieces, skip } => {
            if let Some(mut body) = skip {
                skip_body(&streams.worker, &mut body).await;
            }
            let head_only = false;
            match response(&head, head_only) {
                None => Ok(()),
                Some((response, _)) => match respond.send_response(response, pieces.is_empty()) {
                    Ok(mut send) => send_pieces(&streams, &mut send, pieces, &mut 0).await,
                    Err(e) => Err(e),
                },
            }
        }
        Waits::Exchange {
            parts,
            mut body,
            exchange,
            read_at,
        } => handled(&streams, &parts, &mut body, exchange, read_at, &mut respond).await,
    };
    streams.ended(result.is_err() && reset(&mut respond));
}

/// Reads a request body nobody needs to its end, within `limits.max_body_size` and
/// `timeouts.body` (past either the response goes out, and dropping the body resets
/// the stream).
async fn skip_body(worker: &Worker, body: &mut RecvStream) {
    let max = worker.shared.limits.max_body_size;
    let wait = Duration::from_secs_f64(worker.current().gen.config.timeouts.body);
    let skip = async {
        let mut seen = 0u64;
        while let Some(Ok(chunk)) = body.data().await {
            seen += chunk.len() as u64;
            let _ = body.flow_control().release_capacity(chunk.len());
            if seen > max {
                return;
            }
        }
    };
    let _ = tokio::time::timeout(wait, skip).await;
}

/// Whether the client has reset the stream already (polled without waiting).
fn reset(respond: &mut SendResponse<Bytes>) -> bool {
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    matches!(respond.poll_reset(&mut cx), std::task::Poll::Ready(_))
}

/// The request as the handlers see it, and why it is refused, if it is. The Host
/// field is the :authority (a client that sends both must send the same host, RFC 9113
/// section 8.3.1); cookies split over several fields are joined as one (section 8.2.3).
fn view<'a>(
    parts: &'a http::request::Parts,
    end_stream: bool,
    cookie: &'a mut Vec<u8>,
    fields: &'a mut Vec<wire::Header<'a>>,
    limits: &wire::Limits,
) -> (wire::Request<'a, 'a>, Option<wire::Error>) {
    let authority = parts.uri.authority().map(|a| a.as_str().as_bytes());
    let target: &[u8] = match (&parts.method, parts.uri.path_and_query()) {
        (&http::Method::CONNECT, _) => authority.unwrap_or(b""),
        (_, Some(pq)) => pq.as_str().as_bytes(),
        (_, None) => b"/",
    };
    let mut refusal = None;
    if let Some(authority) = authority {
        fields.push(wire::Header {
            name: "host",
            value: authority,
        });
    }
    for (name, value) in &parts.headers {
        match *name {
            http::header::HOST => {
                if authority.is_some_and(|a| !a.eq_ignore_ascii_case(value.as_bytes())) {
                    refusal = Some(wire::Error::BadHost);
                }
                if authority.is_none() {
                    fields.push(wire::Header {
                        name: "host",
                        value: value.as_bytes(),
                    });
                }
            }
            http::header::COOKIE => {
                if !cookie.is_empty() {
                    cookie.extend_from_slice(b"; ");
                }
                cookie.extend_from_slice(value.as_bytes());
            }
            _ => fields.push(wire::Header {
                name: name.as_str(),
                value: value.as_bytes(),
            }),
        }
    }
    let cookie: &'a [u8] = cookie;
    if !cookie.is_empty() {
        fields.push(wire::Header {
            name: "cookie",
            value: cookie,
        });
    }
    let framing = if end_stream {
        BodyFraming::None
    } else {
        match parts.headers.get(http::header::CONTENT_LENGTH) {
            Some(length) => match std::str::from_utf8(length.as_bytes())
                .ok()
                .and_then(|l| l.parse().ok())
            {
                Some(n) => BodyFraming::Length(n),
                None => {
                    refusal = Some(wire::Error::BadContentLength);
                    BodyFraming::None
                }
            },
            None => BodyFraming::Chunked,
        }
    };
    if target.len() > limits.max_uri_length {
        refusal = Some(wire::Error::UriTooLong);
    } else if fields.len() > limits.max_headers {
        refusal = Some(wire::Error::TooManyHeaders);
    } else if matches!(framing, BodyFraming::Length(n) if n > limits.max_body_size) {
        refusal = Some(wire::Error::BodyTooLarge);
    }
    let fields: &'a [wire::Header<'a>] = fields;
    let req = wire::Request {
        method: wire::Method::from_token(parts.method.as_str()),
        method_token: parts.method.as_str(),
        target,
        path: target,
        version: Version::Http2,
        headers: fields,
        head_len: 0,
        body: framing,
        keep_alive: true,
        expect_continue: false,
    };
    (req, refusal)
}

/// The HTTP/2 response for a head the HTTP/1 encoder wrote, and whether content
/// follows it. `None` if the head does not parse (never, for heads written here).
/// The values share the head's buffer (a slice each, not a copy each).
fn response(head: &Bytes, head_only: bool) -> Option<(http::Response<()>, bool)> {
    let (status, fields) = dispatch::parse_head(head)?;
    let mut response = http::Response::new(());
    *response.status_mut() = http::StatusCode::from_u16(status).ok()?;
    let map = response.headers_mut();
    map.reserve(fields.size_hint().0);
    for (name, value) in fields {
        if is_connection_specific(name) {
            continue;
        }
        let value = HeaderValue::from_maybe_shared(head.slice_ref(value));
        if let (Ok(name), Ok(value)) = (HeaderName::from_bytes(name), value) {
            map.append(name, value);
        }
    }
    Some((response, !wire::no_body(head_only, status)))
}

/// A response whose body is small and in memory, framed without waiting.
pub(super) struct Ready {
    respond: SendResponse<Bytes>,
    response: http::Response<()>,
    body: Bytes,
}

impl Ready {
    /// Queues its frames; returns whether the client had cancelled the stream.
    pub(super) fn send(mut self) -> bool {
        let sent = self
            .respond
            .send_response(self.response, self.body.is_empty())
            .and_then(|mut send| match self.body.is_empty() {
                true => Ok(()),
                false => send.send_data(self.body, true),
            });
        // Once the client has reset a stream, h2 reports sends on it as a misuse, not as
        // the reset: the stream's own state says whether it was cancelled.
        sent.is_err() && reset(&mut self.respond)
    }
}

/// A handler's response: awaited, framed, logged.
async fn handled(
    streams: &Streams,
    parts: &http::request::Parts,
    body_in: &mut RecvStream,
    exchange: handler::Pooled<Exchange>,
    read_at: Option<Instant>,
    respond: &mut SendResponse<Bytes>,
) -> Result<(), h2::Error> {
    let worker: &Worker = &streams.worker;
    let head_only = exchange.head_only;
    // The handler's work stops as soon as the client cancels the stream (its upstream
    // request or script is dropped), so cancelled streams never pile up behind the
    // concurrency limit the client was told (h2 frees a stream's place at its reset).
    let answered = tokio::select! {
        biased;
        _ = std::future::poll_fn(|cx| respond.poll_reset(cx)) => {
            return Err(h2::Reason::CANCEL.into());
        }
        answered = later(streams, exchange.into_inner(), body_in, head_only) => answered,
    };
    let (head, body, (answered, status)) = answered?;
    let head = Bytes::from(head);
    let mut sent = 0u64;
    let result = match response(&head, head_only) {
        None => {
            respond.send_reset(h2::Reason::INTERNAL_ERROR);
            Ok(())
        }
        Some((response, content)) => {
            let empty = !content || matches!(body, Body::Empty);
            match respond.send_response(response, empty) {
                Ok(_) if empty => Ok(()),
                Ok(mut send) => send_body(streams, &mut send, body, &mut sent).await,
                Err(e) => Err(e),
            }
        }
    };
    worker.clock.refresh();
    worker.tls.set(streams.tls);
    served::count(worker, answered, (status, &head, sent), read_at);
    if worker.log.borrow().is_some() {
        let mut cookie = Vec::new();
        let mut fields = Vec::with_capacity(parts.headers.len() + 1);
        let (req, _) = view(parts, true, &mut cookie, &mut fields, &worker.shared.limits);
        served::record(
            worker,
            streams.peer,
            read_at,
            Some(&req),
            b"",
            (status, &head, sent),
        );
    }
    result
}

/// Finishes a response that comes later (as `Conn::finish` in `conn` does for HTTP/1): the
/// request body read within its limits, the handler awaited, the route's filter and
/// compression applied. Returns the head (HTTP/1 lines), the body, and what the access
/// log and metrics count.
async fn later(
    streams: &Streams,
    exchange: Exchange,
    body: &mut RecvStream,
    head_only: bool,
) -> Result<(Vec<u8>, Body, (crate::metrics::Answered, u16)), h2::Error> {
    let worker: &Worker = &streams.worker;
    let Exchange {
        work,
        mut filter,
        answered,
        site,
        accepted,
        ..
    } = exchange;
    let response = match work {
        Work::Ready(response) => {
            // Made without the request body: skipped first, as for a static file.
            if !body.is_end_stream() {
                skip_body(worker, body).await;
            }
            response
        }
        Work::Deferred(deferred) => {
            let received = match read_body(worker, body).await? {
                Ok(bytes) => deferred.respond(bytes).await,
                Err(status) => Err(status),
            };
            worker.clock.refresh();
            worker.tls.set(streams.tls);
            dispatch::handled(worker, received, &mut filter, site, accepted, head_only)
        }
    };
    Ok(frame_head(streams, response, filter, answered, head_only))
}

/// A handler's response made ready to frame: its head written by the HTTP/1 encoder, its
/// body (none when no content follows), and what metrics and the access log count. The
/// filter's exchange ends here (it has seen the head).
fn frame_head(
    streams: &Streams,
    mut response: Response,
    filter: Option<Box<dyn handler::Attached>>,
    mut answered: crate::metrics::Answered,
    head_only: bool,
) -> (Vec<u8>, Body, (crate::metrics::Answered, u16)) {
    let worker: &Worker = &streams.worker;
    if response.head.status() == 101 {
        // A switch of protocols has no place in HTTP/2 (RFC 9113 section 8.6; h2 refuses
        // the Upgrade field that would ask for one), so an upstream's 101 is a bad answer.
        response = Response::status_page(502);
    }
    if response.head.assembled() {
        answered.kind = crate::metrics::ESI;
    }
    let mut head = Vec::with_capacity(512);
    worker.tls.set(streams.tls);
    let framing = dispatch::write_head(
        worker,
        &mut head,
        &response,
        head_only,
        Version::Http2,
        true,
    );
    if framing.is_none() {
        response.body = Body::Empty;
    }
    drop(filter);
    (head, response.body, (answered, response.head.status()))
}

/// The request body for a handler that reads it, within `limits.max_body_size` (413
/// past it) and `timeouts.body` (408), the flow-control window released as it is read.
async fn read_body(
    worker: &Worker,
    body: &mut RecvStream,
) -> Result<Result<Bytes, u16>, h2::Error> {
    let max = worker.shared.limits.max_body_size;
    let timeout = worker.current().gen.config.timeouts.body;
    let mut all = BytesMut::new();
    let read = async {
        while let Some(chunk) = body.data().await {
            let chunk = chunk?;
            let _ = body.flow_control().release_capacity(chunk.len());
            if all.len() as u64 + chunk.len() as u64 > max {
                return Ok(Err(413));
            }
            all.extend_from_slice(&chunk);
        }
        Ok(Ok(()))
    };
    match tokio::time::timeout(Duration::from_secs_f64(timeout), read).await {
        Ok(Ok(Ok(()))) => Ok(Ok(all.freeze())),
        Ok(Ok(Err(status))) => Ok(Err(status)),
        Ok(Err(e)) => Err(e),
        Err(_) => Ok(Err(408)),
    }
}

/// The static files' body: memory as it is, file ranges read a chunk at a time, each
/// sent as the window allows (a 64 MiB file is never all in memory).
async fn send_pieces(
    streams: &Streams,
    send: &mut SendStream<Bytes>,
    pieces: Vec<Piece>,
    sent: &mut u64,
) -> Result<(), h2::Error> {
    use std::os::unix::fs::FileExt;
    let count = pieces.len();
    for (i, piece) in pieces.into_iter().enumerate() {
        let last = i + 1 == count;
        match piece {
            Piece::Bytes(bytes) => {
                *sent += bytes.len() as u64;
                send_data(streams, send, bytes, last).await?;
            }
            Piece::File { entry, offset, len } => {
                let mut done = 0u64;
                while done < len {
                    let want = (len - done).min(FILE_CHUNK as u64) as usize;
                    let mut chunk = file_chunk(&streams.worker, want);
                    let got = match entry.file.read_at(&mut chunk, offset + done) {
                        Ok(0) | Err(_) => {
                            // The file shrank or broke under us: its length is
                            // promised, so the stream is cut off, not completed.
                            send.send_reset(h2::Reason::INTERNAL_ERROR);
                            return Ok(());
                        }
                        Ok(n) => n,
                    };
                    chunk.truncate(got);
                    done += got as u64;
                    *sent += got as u64;
                    send_data(streams, send, chunk.freeze(), last && done == len).await?;
                }
            }
        }
    }
    Ok(())
}

/// `len` bytes to read a file chunk into, cut from the worker's chunk buffer: once the
/// chunks sent before have been written and dropped, `reserve` takes their room back, so
/// the steady state reuses the same memory (a fresh 64 KiB allocation per chunk cost
/// page faults: the allocator returns such blocks to the kernel and gets them back
/// zeroed).
fn file_chunk(worker: &Worker, len: usize) -> BytesMut {
    let mut buf = worker.file_chunks.borrow_mut();
    buf.reserve(len.max(4 * FILE_CHUNK));
    buf.resize(len, 0);
    buf.split()
}

/// A handler's body, streamed as it arrives (an ESI page as its fragments come).
async fn send_body(
    streams: &Streams,
    send: &mut SendStream<Bytes>,
    body: Body,
    sent: &mut u64,
) -> Result<(), h2::Error> {
    match body {
        Body::Empty => send_data(streams, send, Bytes::new(), true).await,
        Body::Full(bytes) => {
            *sent += bytes.len() as u64;
            send_data(streams, send, bytes, true).await
        }
        Body::Ready(chunks) => {
            let count = chunks.len();
            for (i, chunk) in chunks.iter().enumerate() {
                *sent += chunk.len() as u64;
                send_data(streams, send, chunk.clone(), i + 1 == count).await?;
            }
            if count == 0 {
                send_data(streams, send, Bytes::new(), true).await?;
            }
            Ok(())
        }
        mut body @ Body::Stream { .. } => {
            let length = body.length();
            loop {
                // A body that arrives slowly (fragments from upstreams) stops waiting
                // when the client cancels the stream.
                let next = tokio::select! {
                    biased;
                    _ = std::future::poll_fn(|cx| send.poll_reset(cx)) => {
                        return Err(h2::Reason::CANCEL.into());
                    }
                    next = body.next_chunk() => next,
                };
                match next {
                    None => break,
                    Some(Ok(chunk)) if chunk.is_empty() => {}
                    Some(Ok(chunk)) => {
                        *sent += chunk.len() as u64;
                        send_data(streams, send, chunk, false).await?;
                    }
                    Some(Err(e)) => {
                        // Broken off after the head went out: a reset tells the client
                        // (and any cache) the body is incomplete.
                        tracing::debug!(error = %e, "body failed while streaming");
                        send.send_reset(h2::Reason::INTERNAL_ERROR);
                        return Ok(());
                    }
                }
            }
            if length.is_some_and(|l| l != *sent) {
                send.send_reset(h2::Reason::INTERNAL_ERROR);
                return Ok(());
            }
            send_data(streams, send, Bytes::new(), true).await
        }
    }
}

/// Sends `data` as the stream's window and send buffer allow; `end` ends the stream with
/// its last frame. While it waits for capacity the connection counts as writing, so
/// `timeouts.write` closes a client that never opens its window.
async fn send_data(
    streams: &Streams,
    send: &mut SendStream<Bytes>,
    mut data: Bytes,
    end: bool,
) -> Result<(), h2::Error> {
    if data.is_empty() {
        if end {
            send.send_data(data, true)?;
        }
        return Ok(());
    }
    while !data.is_empty() {
        send.reserve_capacity(data.len());
        let mut capacity = send.capacity();
        if capacity == 0 {
            streams.blocked.set(streams.blocked.get() + 1);
            streams.settle();
            let granted = std::future::poll_fn(|cx| send.poll_capacity(cx)).await;
            streams.blocked.set(streams.blocked.get() - 1);
            streams.worker.clock.refresh();
            if !streams.settle() {
                return Err(h2::Reason::CANCEL.into());
            }
            streams.worker.touch(streams.slot);
            match granted {
                Some(Ok(n)) => capacity = n,
                Some(Err(e)) => return Err(e),
                None => return Err(h2::Reason::STREAM_CLOSED.into()),
            }
            if capacity == 0 {
                continue;
            }
        }
        let chunk = data.split_to(capacity.min(data.len()));
        send.send_data(chunk, end && data.is_empty())?;
    }
    Ok(())
}

/// Fields HTTP/2 forbids in a message (RFC 9113 section 8.2.2); the length stays (it is
/// allowed, and tells the client the size in advance).
fn is_connection_specific(name: &[u8]) -> bool {
    [
        &b"connection"[..],
        b"keep-alive",
        b"transfer-encoding",
        b"upgrade",
        b"proxy-connection",
        b"te",
    ]
    .iter()
    .any(|n| name.eq_ignore_ascii_case(n))
}
