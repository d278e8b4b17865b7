//! One HTTP/2 stream: its request (`request.rs`) answered by `dispatch` exactly as an
//! HTTP/1 request is, and the response handed to the framing (`send.rs`).
//!
//! A response ready at once (a static file, a refusal, a cached object) becomes a
//! [`Ready`], framed on the connection's own task as the stream is read; one that waits
//! (a handler's, or one behind a request body to read) is finished here on a task of its
//! own, which meets the connection in the stream's slot (`slot.rs`).

use std::future::{poll_fn, Future};
use std::rc::Rc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use h2codec::conn::{OwnedRequest, Request};
use h2codec::frame::Reason;
use handler::{Body, LocalFuture, Response, ResponseHead, Tunnel};
use wire::{BodyFraming, Version};

use super::head::{Head, Made};
use super::link::{Cancelled, Link};
use super::request::view;
use super::send::Ready;
use super::streams::Streams;
use crate::exchange::finish::{self, BodyRead, Pumped, Sink};
use crate::exchange::served;
use crate::exchange::served::Sent;
use crate::exchange::{self, Checked, Dispatched, Exchange, Work};
use crate::facts::ConnFacts;
use crate::net::output::{FieldsHead, Piece};
use crate::reply::Terms;
use crate::worker::Worker;

/// Handlers' bodies up to this size, in memory, are framed with their head on the
/// connection's task, with no task of their own.
const SEND_AT_ONCE: usize = 16 * 1024;

/// What is left of a stream after [`start`].
pub(super) enum Rest {
    /// Not answerable (a head the encoder wrote does not parse, which never happens):
    /// reset.
    Ended,
    /// Answered, to be framed with the others answered in the same pass.
    Ready(Ready),
    /// Its response waits (a handler, a file, a large body): finished by [`finish`] on a
    /// task of its own.
    Later(Box<Pending>),
}

pub(super) struct Pending {
    request: OwnedRequest,
    end_stream: bool,
    work: Waits,
}

// Always boxed (in `Pending`), so the size of the larger variant costs nothing.
#[allow(clippy::large_enum_variant)]
enum Waits {
    /// The static files' answer, logged already: its head and its body's pieces; the
    /// request body, if any, is skipped first.
    Pieces {
        head: FieldsHead,
        pieces: Vec<Piece>,
    },
    /// A handler's answer to come.
    Exchange {
        exchange: handler::Pooled<Exchange>,
        read_at: Option<Instant>,
    },
    /// A check of the request to await (`exchange::checks`), then the request answered
    /// again with what it found.
    Check {
        check: LocalFuture<Checked>,
        read_at: Option<Instant>,
    },
}

/// Answers a stream as far as it can without waiting. `read_at`: when the read that
/// brought it in was taken (the worker's clock was refreshed then). `checked`: what the
/// checks that waited found, when it is answered again after them.
pub(super) fn start(
    streams: &Streams,
    request: Request<'_>,
    (id, end_stream): (u32, bool),
    read_at: Option<Instant>,
    checked: Option<&Checked>,
) -> Rest {
    let worker: &Worker = &streams.worker;
    let mut cookie = Vec::new();
    let mut fields = Vec::with_capacity(request.field_count() + 1);
    let (req, refusal) = view(
        request,
        end_stream,
        &mut cookie,
        &mut fields,
        &worker.shared.limits,
    );
    let mut buffers = worker.take_buffers();
    let out = &mut buffers.out;
    // The server's own answers (files, refusals) write their heads as fields.
    out.want_fields(ResponseHead::with_capacity(0, 12, 320));
    let mark = out.mark();
    let dispatched = exchange::answer_stream(worker, &streams.facts, (&req, refusal), checked, out);
    let exchange = match dispatched {
        Dispatched::Done(answered) => {
            served::log(
                worker,
                &streams.facts,
                read_at,
                Some((&req, answered)),
                b"",
                out,
                mark,
            );
            let head = out
                .take_fields()
                .unwrap_or_else(|| FieldsHead::new(ResponseHead::default()));
            let pieces = out.take_pieces(0);
            worker.give_back(buffers);
            // A request body nobody reads (a static file's) is skipped to its end before
            // the response goes out, as HTTP/1 does: that waits, on a task. A refused
            // request is answered at once; its body is dropped as it comes.
            if refusal.is_none() && !end_stream {
                let work = Waits::Pieces { head, pieces };
                return Rest::Later(Box::new(Pending {
                    request: request.to_owned(),
                    end_stream,
                    work,
                }));
            }
            let head_only = req.method == wire::Method::Head;
            if head.status() == 0 {
                // Nothing wrote a head (never: every answer here writes one).
                return Rest::Ended;
            }
            let content = !wire::no_body(head_only, head.status());
            return Rest::Ready(Ready {
                id,
                head: Head::Fields(head),
                body: if content { pieces } else { Vec::new() },
            });
        }
        Dispatched::Later(exchange) => exchange,
        Dispatched::Wait(check) => {
            worker.give_back(buffers);
            return Rest::Later(Box::new(Pending {
                request: request.to_owned(),
                end_stream,
                work: Waits::Check { check, read_at },
            }));
        }
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
    if end_stream && matches!(&exchange.work, Work::Ready(r) if small(&r.body)) {
        let Exchange {
            work: Work::Ready(ready),
            filter,
            answered,
            head_only,
            notes,
            ..
        } = exchange.into_inner()
        else {
            unreachable!("matched above")
        };
        let mut ready = ready;
        let mut answered = answered;
        finish::settle(worker, &mut ready, &mut answered, false);
        let (head, lines, body) = frame(streams, ready, head_only);
        // The filter has seen the head: its exchange ends.
        drop(filter);
        let body = match body {
            Body::Full(bytes) => bytes,
            Body::Ready(chunks) if chunks.len() == 1 => chunks[0].clone(),
            Body::Ready(chunks) => chunks.concat().into(),
            _ => Bytes::new(),
        };
        let sent = Sent {
            status: head.status(),
            head_len: lines_len(streams, &head, &lines),
            head: lines,
            body: body.len() as u64,
            complete: true,
        };
        let noted = (answered, notes.as_ref());
        served::account(worker, &streams.facts, read_at, noted, &sent, |record| {
            record(Some(&req))
        });
        return Rest::Ready(Ready {
            id,
            head: Head::Made(head),
            body: match body.is_empty() {
                true => Vec::new(),
                false => vec![Piece::Bytes(body)],
            },
        });
    }
    let work = Waits::Exchange { exchange, read_at };
    Rest::Later(Box::new(Pending {
        request: request.to_owned(),
        end_stream,
        work,
    }))
}

/// Finishes a stream [`start`] could not, on a task of its own.
pub(super) async fn finish(streams: Rc<Streams>, id: u32, mut pending: Box<Pending>) {
    // Counted as ended once, whatever happens, a panic of the handler included.
    let mut end = Finished {
        streams: &streams,
        cancelled: false,
    };
    let link = Link {
        streams: &streams,
        id,
    };
    // A stream whose check waited is answered again, once the check is done, as far
    // as it can be at once.
    while let Waits::Check { .. } = &pending.work {
        let Pending {
            request,
            end_stream,
            work: Waits::Check { check, read_at },
        } = *pending
        else {
            unreachable!("matched above")
        };
        let checked = tokio::select! {
            biased;
            _ = poll_fn(|cx| link.poll_cancelled(cx)) => None,
            checked = check => Some(checked),
        };
        let Some(checked) = checked else {
            end.cancelled = true;
            return;
        };
        let ids = (id, end_stream);
        let result = match start(&streams, request.view(), ids, read_at, Some(&checked)) {
            Rest::Later(next) => {
                pending = next;
                continue;
            }
            Rest::Ended => {
                link.reset(Reason::INTERNAL_ERROR);
                Ok(())
            }
            Rest::Ready(ready) => {
                let empty = ready.body.iter().all(|p| p.len() == 0);
                match link.head(ready.head, empty) {
                    Ok(()) if empty => Ok(()),
                    Ok(()) => link.pieces(ready.body),
                    Err(c) => Err(c),
                }
            }
        };
        let result = match result {
            Ok(()) => link.drained().await,
            Err(c) => Err(c),
        };
        drop(link);
        end.cancelled = result.is_err();
        return;
    }
    let Pending {
        request,
        end_stream,
        work,
    } = *pending;
    let result = match work {
        // Answered above.
        Waits::Check { .. } => Ok(()),
        Waits::Pieces { head, pieces } => {
            if !end_stream {
                skip_body(&streams.worker, &link).await;
            }
            let head_only = request.view().method() == b"HEAD";
            match head.status() {
                0 => {
                    link.reset(Reason::INTERNAL_ERROR);
                    Ok(())
                }
                status => {
                    let content = !wire::no_body(head_only, status);
                    let empty = !content || pieces.iter().all(|p| p.len() == 0);
                    match link.head(Head::Fields(head), empty) {
                        Ok(()) if empty => Ok(()),
                        Ok(()) => link.pieces(pieces),
                        Err(c) => Err(c),
                    }
                }
            }
        }
        Waits::Exchange { exchange, read_at } => {
            let mut task = Task {
                streams: &streams,
                request: &request,
                end_stream,
                link: &link,
                read_at,
                cancelled: false,
            };
            match finish::finish(&mut task, exchange).await {
                Ok(_) if task.cancelled => Err(Cancelled),
                Ok(_) => Ok(()),
                Err(c) => Err(c),
            }
        }
    };
    let result = match result {
        Ok(()) => link.drained().await,
        Err(c) => Err(c),
    };
    drop(link);
    end.cancelled = result.is_err();
}

/// Counts a stream answered on its own task as ended when the task ends.
struct Finished<'a> {
    streams: &'a Streams,
    /// The client cancelled it.
    cancelled: bool,
}

impl Drop for Finished<'_> {
    fn drop(&mut self) {
        self.streams.ended(self.cancelled);
    }
}

/// Reads a request body nobody needs to its end, within `limits.max_body_size` and
/// `timeouts.body` (past either the response goes out, and the rest is dropped as it
/// comes).
async fn skip_body(worker: &Worker, link: &Link<'_>) {
    let max = worker.shared.limits.max_body_size;
    let wait = Duration::from_secs_f64(worker.current().gen.config.timeouts.body);
    let skip = async {
        let mut seen = 0u64;
        while let Ok(Some(chunk)) = link.body_chunk().await {
            seen += chunk.len() as u64;
            if seen > max {
                return;
            }
        }
    };
    let _ = evloop::time::timeout(wait, skip).await;
    link.stop_reading();
}

/// HTTP/2's side of a stream answered on a task of its own (`exchange::finish`). The
/// handler's work stops as soon as the client cancels the stream (its upstream request
/// or script is dropped), so cancelled streams never pile up behind the concurrency
/// limit.
struct Task<'a> {
    streams: &'a Streams,
    request: &'a OwnedRequest,
    end_stream: bool,
    link: &'a Link<'a>,
    read_at: Option<Instant>,
    /// The client cancelled the stream while its response was sent (the response is
    /// still counted and logged).
    cancelled: bool,
}

impl Task<'_> {
    /// `work`, unless the client cancels the stream first.
    async fn unless_cancelled<T>(&self, work: impl Future<Output = T>) -> Result<T, Cancelled> {
        tokio::select! {
            biased;
            _ = poll_fn(|cx| self.link.poll_cancelled(cx)) => Err(Cancelled),
            done = work => Ok(done),
        }
    }
}

impl Sink for Task<'_> {
    type Gone = Cancelled;
    type Head = Bytes;
    const SWITCHES: bool = false;

    fn worker(&self) -> &Rc<Worker> {
        &self.streams.worker
    }

    fn facts(&self) -> ConnFacts {
        self.streams.facts.clone()
    }

    fn read_at(&self) -> Option<Instant> {
        self.read_at
    }

    async fn read_body(&mut self, _: BodyFraming, _: bool) -> Result<BodyRead, Cancelled> {
        let worker = &self.streams.worker;
        let read = read_body(worker, self.link, self.end_stream);
        Ok(match self.unless_cancelled(read).await?? {
            Ok(body) => BodyRead::Body(body),
            Err(status) => BodyRead::Refused(status),
        })
    }

    async fn pump_body(
        &mut self,
        _: BodyFraming,
        _: bool,
        writer: handler::BodyWriter,
    ) -> Result<Pumped, Cancelled> {
        super::upload::pump_body(&self.streams.worker, self.link, self.end_stream, writer).await
    }

    fn abandon_body(&mut self) {
        self.link.stop_reading();
    }

    async fn skip_body(&mut self, _: BodyFraming) {
        // Made without the request body: skipped first, as for a static file.
        if !self.end_stream {
            let _ = self
                .unless_cancelled(skip_body(&self.streams.worker, self.link))
                .await;
        }
    }

    async fn respond(
        &mut self,
        responding: LocalFuture<Result<Response, u16>>,
    ) -> Result<Result<Response, u16>, Cancelled> {
        self.unless_cancelled(responding).await
    }

    async fn send(&mut self, response: Response, terms: Terms) -> Result<Sent<Bytes>, Cancelled> {
        let (head, lines, body) = frame(self.streams, response, terms.head_only);
        let status = head.status();
        let head_len = lines_len(self.streams, &head, &lines);
        let link = self.link;
        let mut sent = 0u64;
        // No content: END_STREAM on the HEADERS, no empty DATA after (a gRPC client
        // reads such a head as the call's trailers).
        let empty = match &body {
            Body::Empty => true,
            Body::Full(bytes) => bytes.is_empty(),
            _ => false,
        };
        let result = match link.head(Head::Made(head), empty) {
            Ok(()) if empty => Ok(()),
            Ok(()) => send_body(link, body, &mut sent).await,
            Err(c) => Err(c),
        };
        self.cancelled = result.is_err();
        Ok(Sent {
            status,
            head: lines,
            head_len,
            body: sent,
            complete: result.is_ok(),
        })
    }

    const DUPLEX: bool = true;

    /// The response goes out while the request body is read on (gRPC streams both ways);
    /// once the response has ended, the rest of the body is not read.
    async fn send_duplex(
        &mut self,
        response: Response,
        terms: Terms,
        writer: handler::BodyWriter,
    ) -> Result<Sent<Bytes>, Cancelled> {
        let (streams, link, end_stream) = (self.streams, self.link, self.end_stream);
        let pump = super::upload::pump_body(&streams.worker, link, end_stream, writer);
        let mut pump = std::pin::pin!(pump);
        let mut pumping = true;
        let mut send = std::pin::pin!(self.send(response, terms));
        loop {
            tokio::select! {
                sent = &mut send => {
                    if pumping {
                        link.stop_reading();
                    }
                    return sent;
                }
                _ = &mut pump, if pumping => pumping = false,
            }
        }
    }

    async fn switch(&mut self, _: Response) -> Result<(Sent<Bytes>, Option<Tunnel>), Cancelled> {
        unreachable!("HTTP/2 does not switch protocols: finish answers a 101 with 502")
    }

    async fn tunnel(&mut self, _: Tunnel) {
        unreachable!("HTTP/2 does not switch protocols: finish answers a 101 with 502")
    }

    fn with_request(&self, _: &[u8], record: &mut dyn FnMut(Option<&wire::Request<'_, '_>>)) {
        let mut cookie = Vec::new();
        let request = self.request.view();
        let mut fields = Vec::with_capacity(request.field_count() + 1);
        let limits = &self.streams.worker.shared.limits;
        let (req, _) = view(request, true, &mut cookie, &mut fields, limits);
        record(Some(&req));
    }
}

/// A handler's response made ready to frame: its head as data, the same head as HTTP/1
/// lines when an access log is on (for its `%{X}o` fields; empty otherwise), and its body
/// (none when no content follows).
fn frame(streams: &Streams, mut response: Response, head_only: bool) -> (Made, Bytes, Body) {
    let worker: &Worker = &streams.worker;
    let lines = match worker.log.borrow().is_some() {
        true => {
            let mut lines = Vec::with_capacity(512);
            let (facts, version) = (&streams.facts, Version::Http2);
            exchange::write_head(
                worker, facts, &mut lines, &response, head_only, version, true,
            );
            Bytes::from(lines)
        }
        false => Bytes::new(),
    };
    let (head, content) = Made::take(&mut response, head_only);
    let body = if content { response.body } else { Body::Empty };
    (head, lines, body)
}

/// The size of a head as HTTP/1 lines, which the metrics count (`lines` when they were
/// written for the log).
fn lines_len(streams: &Streams, head: &Made, lines: &Bytes) -> u64 {
    match (lines.is_empty(), streams.worker.shared.metrics_on) {
        (false, _) => lines.len() as u64,
        (true, true) => head.lines_len(&streams.worker, &streams.facts),
        (true, false) => 0,
    }
}

/// The request body for a handler that reads it, within `limits.max_body_size` (413
/// past it) and `timeouts.body` (408).
async fn read_body(
    worker: &Worker,
    link: &Link<'_>,
    end_stream: bool,
) -> Result<Result<Bytes, u16>, Cancelled> {
    if end_stream {
        return Ok(Ok(Bytes::new()));
    }
    let max = worker.shared.limits.max_body_size;
    let timeout = worker.current().gen.config.timeouts.body;
    let mut all = BytesMut::new();
    let read = async {
        while let Some(chunk) = link.body_chunk().await? {
            if all.len() as u64 + chunk.len() as u64 > max {
                return Ok(Err(413));
            }
            all.extend_from_slice(&chunk);
        }
        Ok(Ok(()))
    };
    let read = evloop::time::timeout(Duration::from_secs_f64(timeout), read).await;
    link.stop_reading();
    match read {
        Ok(Ok(Ok(()))) => Ok(Ok(all.freeze())),
        Ok(Ok(Err(status))) => Ok(Err(status)),
        Ok(Err(c)) => Err(c),
        Err(_) => Ok(Err(408)),
    }
}

/// A handler's body, queued as it arrives (an ESI page as its fragments come).
async fn send_body(link: &Link<'_>, body: Body, sent: &mut u64) -> Result<(), Cancelled> {
    match body {
        Body::Empty => link.data(Bytes::new(), true).await,
        Body::Full(bytes) => {
            *sent += bytes.len() as u64;
            link.data(bytes, true).await
        }
        Body::Ready(chunks) => {
            let count = chunks.len();
            for (i, chunk) in chunks.iter().enumerate() {
                *sent += chunk.len() as u64;
                link.data(chunk.clone(), i + 1 == count).await?;
            }
            if count == 0 {
                link.data(Bytes::new(), true).await?;
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
                    _ = poll_fn(|cx| link.poll_cancelled(cx)) => return Err(Cancelled),
                    next = body.next_chunk() => next,
                };
                match next {
                    None => break,
                    Some(Ok(chunk)) if chunk.is_empty() => {}
                    Some(Ok(chunk)) => {
                        *sent += chunk.len() as u64;
                        link.data(chunk, false).await?;
                    }
                    Some(Err(e)) => {
                        // Broken off after the head went out: a reset tells the client
                        // (and any cache) the body is incomplete.
                        tracing::debug!(error = %e, "body failed while streaming");
                        link.reset(Reason::INTERNAL_ERROR);
                        return Ok(());
                    }
                }
            }
            if length.is_some_and(|l| l != *sent) {
                link.reset(Reason::INTERNAL_ERROR);
                return Ok(());
            }
            match body.take_trailers() {
                Some(trailers) => link.trailers(trailers),
                None => link.data(Bytes::new(), true).await,
            }
        }
    }
}
