//! One HTTP/2 stream: its request (`request.rs`) answered by `dispatch` exactly as an
//! HTTP/1 request is, and the response handed to the framing (`send.rs`).
//!
//! A response ready at once (a static file, a refusal, a cached object) becomes a
//! [`Ready`], framed on the connection's own task as the stream is read; one that waits
//! (a handler's, or one behind a request body to read) is finished here on a task of its
//! own, which meets the connection in the stream's slot (`slot.rs`).

use std::future::poll_fn;
use std::rc::Rc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use h2codec::conn::{OwnedRequest, Request};
use h2codec::frame::Reason;
use handler::{Body, Response};
use wire::Version;

use super::request::view;
use super::send::{status_of, Ready};
use super::slot::{Cancelled, Link};
use super::Streams;
use crate::dispatch::{self, Dispatched, Exchange, Work};
use crate::output::Piece;
use crate::served;
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
    Pieces { head: Bytes, pieces: Vec<Piece> },
    /// A handler's answer to come.
    Exchange {
        exchange: handler::Pooled<Exchange>,
        read_at: Option<Instant>,
    },
}

/// Answers a stream as far as it can without waiting. `read_at`: when the read that
/// brought it in was taken (the worker's clock was refreshed then).
pub(super) fn start(
    streams: &Streams,
    request: Request<'_>,
    id: u32,
    end_stream: bool,
    read_at: Option<Instant>,
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
            let head = Bytes::copy_from_slice(head);
            let pieces = out.take_pieces(head.len());
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
            let Some((_, content)) = status_of(&head, head_only) else {
                return Rest::Ended;
            };
            return Rest::Ready(Ready {
                id,
                head,
                body: if content { pieces } else { Vec::new() },
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
    if end_stream && matches!(&exchange.work, Work::Ready(r) if small(&r.body)) {
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
        return Rest::Ready(Ready {
            id,
            head: Bytes::from(head),
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
pub(super) async fn finish(streams: Rc<Streams>, id: u32, pending: Box<Pending>) {
    let Pending {
        request,
        end_stream,
        work,
    } = *pending;
    // Counted as ended once, whatever happens, a panic of the handler included.
    let mut end = Finished {
        streams: &streams,
        cancelled: false,
    };
    let link = Link {
        streams: &streams,
        id,
    };
    let result = match work {
        Waits::Pieces { head, pieces } => {
            if !end_stream {
                skip_body(&streams.worker, &link).await;
            }
            match status_of(&head, request.view().method() == b"HEAD") {
                None => {
                    link.reset(Reason::INTERNAL_ERROR);
                    Ok(())
                }
                Some((_, content)) => {
                    let empty = !content || pieces.iter().all(|p| p.len() == 0);
                    match link.head(head, empty) {
                        Ok(()) if empty => Ok(()),
                        Ok(()) => link.pieces(pieces),
                        Err(c) => Err(c),
                    }
                }
            }
        }
        Waits::Exchange { exchange, read_at } => {
            handled(&streams, &request, end_stream, &link, exchange, read_at).await
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
    let _ = tokio::time::timeout(wait, skip).await;
    link.stop_reading();
}

/// A handler's response: awaited, framed, logged.
async fn handled(
    streams: &Streams,
    request: &OwnedRequest,
    end_stream: bool,
    link: &Link<'_>,
    exchange: handler::Pooled<Exchange>,
    read_at: Option<Instant>,
) -> Result<(), Cancelled> {
    let worker: &Worker = &streams.worker;
    let head_only = exchange.head_only;
    // The handler's work stops as soon as the client cancels the stream (its upstream
    // request or script is dropped), so cancelled streams never pile up behind the
    // concurrency limit.
    let answered = tokio::select! {
        biased;
        _ = poll_fn(|cx| link.poll_cancelled(cx)) => return Err(Cancelled),
        answered = later(streams, exchange.into_inner(), link, end_stream, head_only) => answered,
    };
    let (head, body, (answered, status)) = answered?;
    let head = Bytes::from(head);
    let mut sent = 0u64;
    let result = match status_of(&head, head_only) {
        None => {
            link.reset(Reason::INTERNAL_ERROR);
            Ok(())
        }
        Some((_, content)) => {
            let empty = !content || matches!(body, Body::Empty);
            match link.head(head.clone(), empty) {
                Ok(()) if empty => Ok(()),
                Ok(()) => send_body(link, body, &mut sent).await,
                Err(c) => Err(c),
            }
        }
    };
    worker.clock.refresh();
    worker.tls.set(streams.tls);
    served::count(worker, answered, (status, &head, sent), read_at);
    if worker.log.borrow().is_some() {
        let mut cookie = Vec::new();
        let request = request.view();
        let mut fields = Vec::with_capacity(request.field_count() + 1);
        let (req, _) = view(
            request,
            true,
            &mut cookie,
            &mut fields,
            &worker.shared.limits,
        );
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
    link: &Link<'_>,
    end_stream: bool,
    head_only: bool,
) -> Result<(Vec<u8>, Body, (crate::metrics::Answered, u16)), Cancelled> {
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
            if !end_stream {
                skip_body(worker, link).await;
            }
            response
        }
        Work::Deferred(deferred) => {
            let received = match read_body(worker, link, end_stream).await? {
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
        // A switch of protocols has no place in HTTP/2 (RFC 9113 section 8.6), so an
        // upstream's 101 is a bad answer.
        response = Response::status_page(502);
    }
    if response.head.assembled() {
        answered.kind = worker.shared.kinds.assembled(answered.kind);
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
    let read = tokio::time::timeout(Duration::from_secs_f64(timeout), read).await;
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
            link.data(Bytes::new(), true).await
        }
    }
}
