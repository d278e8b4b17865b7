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
//! read; only one that waits (a handler's, a file read in chunks, a body larger than
//! [`SEND_AT_ONCE`]) gets a task of its own. That task and the connection meet in the
//! stream's [`Slot`]: the task queues the head and the body (at most
//! `[http2] max_send_buffer` bytes ahead), the connection frames them as the windows
//! allow and hands the task the request body and the client's cancel.

use std::collections::VecDeque;
use std::future::poll_fn;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use bytes::{Buf, Bytes, BytesMut};
use h2codec::conn::{Conn, OwnedRequest, Request, OUTPUT_HIGH};
use h2codec::frame::Reason;
use handler::{Body, Response};
use wire::{BodyFraming, Version};

use super::Streams;
use crate::dispatch::{self, Dispatched, Exchange, Work};
use crate::output::Piece;
use crate::served;
use crate::worker::Worker;

/// Largest DATA payload read from a file at a time.
const FILE_CHUNK: usize = 16 * 1024;

/// Handlers' bodies up to this size, in memory, are framed with their head on the
/// connection's task, with no task of their own.
const SEND_AT_ONCE: usize = 16 * 1024;

/// Where a stream's task and the connection meet.
pub(super) struct Slot {
    /// The response head (HTTP/1 lines) to frame, and whether no body follows.
    head: Option<(Bytes, bool)>,
    /// The body to frame, in order: bytes, and ranges of files read straight into the
    /// output as the windows and the socket take them; `end` once the last is among
    /// them.
    data: VecDeque<Piece>,
    /// Bytes of `data` in memory (a task queues at most `[http2] max_send_buffer`).
    queued: usize,
    end: bool,
    /// The task wants the stream reset (its body broke off).
    reset: Option<Reason>,
    /// A task answers the stream (else the slot only holds what the window did not
    /// take yet, and goes once that is framed).
    tasked: bool,
    /// The stream is gone: the client reset it, the connection ended, or the server
    /// reset it (`reset_by_us`).
    cancelled: bool,
    reset_by_us: bool,
    /// The task waits for room in the queue or for the queue to drain: woken when there
    /// is (and on a cancel), not on every pass.
    want: bool,
    /// The task still reads the request body; once it stops, what arrives is given
    /// back to the client's window at once.
    reading: bool,
    /// Request body bytes received and not yet read by the task; `body_end` once the
    /// client has ended its side.
    body: VecDeque<Bytes>,
    body_end: bool,
    /// Body bytes the task has read, for the connection to give back to the client.
    released: usize,
    /// The task, waiting for room, the request body or the cancel.
    waker: Option<Waker>,
}

impl Slot {
    pub(super) fn new(tasked: bool) -> Slot {
        Slot {
            head: None,
            data: VecDeque::new(),
            queued: 0,
            end: false,
            reset: None,
            tasked,
            cancelled: false,
            reset_by_us: false,
            want: false,
            reading: tasked,
            body: VecDeque::new(),
            body_end: false,
            released: 0,
            waker: None,
        }
    }

    fn wake(&mut self) {
        if let Some(waker) = self.waker.take() {
            waker.wake();
        }
    }

    /// Request body bytes the client may send again: those read and those never to be.
    fn unread(&mut self) -> usize {
        let n = self.released + self.body.iter().map(Bytes::len).sum::<usize>();
        self.released = 0;
        self.body.clear();
        n
    }
}

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
            let Some((status, content)) = status_of(&head, head_only) else {
                return Rest::Ended;
            };
            return Rest::Ready(Ready {
                id,
                status,
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
        let head = Bytes::from(head);
        let Some((status, _)) = status_of(&head, head_only) else {
            return Rest::Ended;
        };
        return Rest::Ready(Ready {
            id,
            status,
            head,
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

/// A response ready now: a file's, a refusal, a cached object. Its head and what of
/// its body the windows take are framed on the connection's task; the rest waits in a
/// slot of its own, read from the file as it is sent.
pub(super) struct Ready {
    id: u32,
    status: u16,
    /// The head as the HTTP/1 encoder wrote it.
    head: Bytes,
    body: Vec<Piece>,
}

impl Ready {
    pub(super) fn id(&self) -> u32 {
        self.id
    }

    /// Frames it; returns whether the client had cancelled the stream.
    pub(super) fn send(self, streams: &Streams, conn: &mut Conn) -> bool {
        let empty = self.body.iter().all(|p| p.len() == 0);
        if send_head(conn, self.id, self.status, &self.head, empty).is_err() {
            return true;
        }
        if empty {
            return false;
        }
        let mut slot = Slot::new(false);
        slot.queued = self
            .body
            .iter()
            .map(|p| match p {
                Piece::Bytes(b) => b.len(),
                Piece::File { .. } => 0,
            })
            .sum();
        slot.data = self.body.into();
        slot.end = true;
        // Framed now as far as the windows and the output allow; the rest by `pump`.
        if frame_pieces(conn, self.id, &mut slot).is_err() {
            return true;
        }
        if !slot.data.is_empty() {
            streams.slots.borrow_mut().insert(self.id, slot);
        }
        false
    }
}

/// What stopped [`frame_pieces`] before the slot's body was all framed.
enum Stop {
    /// The output is full: more once it is written.
    Output,
    /// The client's window.
    Window,
}

/// Frames what it can of a slot's body. `Err` when the stream is gone (reset, or its
/// file broke under it).
fn frame_pieces(conn: &mut Conn, id: u32, slot: &mut Slot) -> Result<Option<Stop>, ()> {
    loop {
        if conn.output().len() >= OUTPUT_HIGH {
            return Ok(Some(Stop::Output));
        }
        let last = slot.end && slot.data.len() == 1;
        let Some(front) = slot.data.front_mut() else {
            return Ok(None);
        };
        match front {
            Piece::Bytes(bytes) => {
                // At most what the output has room for (a frame at least), so that a
                // client with a huge window cannot make it hold a whole large body.
                let room = OUTPUT_HIGH
                    .saturating_sub(conn.output().len())
                    .max(FILE_CHUNK);
                let take = bytes.len().min(room);
                let n = conn
                    .send_data(id, &bytes[..take], last && take == bytes.len())
                    .map_err(|_| ())?;
                slot.queued -= n;
                if n < bytes.len() {
                    bytes.advance(n);
                    if n < take {
                        return Ok(Some(Stop::Window));
                    }
                    continue;
                }
            }
            Piece::File { entry, offset, len } => {
                let want = (*len).min(FILE_CHUNK as u64) as usize;
                let n = conn.begin_data(id, want).map_err(|_| ())?;
                if n == 0 {
                    return Ok(Some(Stop::Window));
                }
                if read_into(conn.payload(), &entry.file, *offset, n).is_err() {
                    // The file shrank or broke under us: its length is promised, so
                    // the stream is cut off, not completed.
                    conn.finish_data(false);
                    conn.reset(id, Reason::INTERNAL_ERROR);
                    return Err(());
                }
                *offset += n as u64;
                *len -= n as u64;
                conn.finish_data(last && *len == 0);
                if *len > 0 {
                    continue;
                }
            }
        }
        slot.data.pop_front();
    }
}

/// Reads exactly `n` bytes of `file` at `offset` onto the end of `out`: pread(2) into
/// its spare room, so the bytes are neither zeroed first nor copied after.
fn read_into(
    out: &mut Vec<u8>,
    file: &std::fs::File,
    offset: u64,
    n: usize,
) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    out.reserve(n);
    let mut got = 0;
    while got < n {
        let spare = &mut out.spare_capacity_mut()[..n - got];
        // SAFETY: pread writes at most `spare.len()` bytes into `spare`, room `out`
        // owns; only the bytes it reports written become part of `out`.
        let r = unsafe {
            libc::pread(
                file.as_raw_fd(),
                spare.as_mut_ptr().cast(),
                spare.len(),
                (offset + got as u64) as libc::off_t,
            )
        };
        match r {
            0 => return Err(std::io::ErrorKind::UnexpectedEof.into()),
            r if r < 0 => {
                let e = std::io::Error::last_os_error();
                if e.kind() != std::io::ErrorKind::Interrupted {
                    return Err(e);
                }
            }
            r => {
                // SAFETY: the `r` bytes after the old length were just written.
                unsafe { out.set_len(out.len() + r as usize) };
                got += r as usize;
            }
        }
    }
    Ok(())
}

/// Frames a head the HTTP/1 encoder wrote: its status and fields, the
/// connection-specific ones left out.
fn send_head(
    conn: &mut Conn,
    id: u32,
    status: u16,
    head: &[u8],
    end_stream: bool,
) -> Result<(), h2codec::conn::StreamGone> {
    let Some((_, fields)) = dispatch::parse_head(head) else {
        conn.reset(id, Reason::INTERNAL_ERROR);
        return Err(h2codec::conn::StreamGone);
    };
    let fields = fields.filter(|(name, _)| !is_connection_specific(name));
    conn.send_headers(id, status, fields, end_stream)
}

/// The status of a head the HTTP/1 encoder wrote, and whether content follows it.
/// `None` if the head does not parse (never, for heads written here).
fn status_of(head: &[u8], head_only: bool) -> Option<(u16, bool)> {
    let (status, _) = dispatch::parse_head(head)?;
    Some((status, !wire::no_body(head_only, status)))
}

/// Hands request body bytes to the stream's task, or, when nothing reads them (the
/// stream is answered already), gives them straight back to the client's window.
pub(super) fn body(streams: &Streams, conn: &mut Conn, id: u32, data: Bytes, end: bool) {
    let mut slots = streams.slots.borrow_mut();
    match slots
        .get_mut(&id)
        .filter(|s| s.tasked && s.reading && !s.cancelled)
    {
        Some(slot) => {
            if !data.is_empty() {
                slot.body.push_back(data);
            }
            slot.body_end |= end;
            slot.wake();
        }
        None => conn.release(id, data.len()),
    }
}

/// The client reset the stream: its task stops; the body bytes it had not read go back
/// to the connection's window.
pub(super) fn cancel(streams: &Streams, conn: &mut Conn, id: u32) {
    let mut slots = streams.slots.borrow_mut();
    if let Some(slot) = slots.get_mut(&id) {
        slot.cancelled = true;
        slot.data.clear();
        slot.queued = 0;
        conn.release(id, slot.unread());
        slot.wake();
        if !slot.tasked {
            slots.remove(&id);
        }
    }
}

/// The connection has ended: every task stops.
pub(super) fn abandon(streams: &Streams) {
    let mut slots = streams.slots.borrow_mut();
    for slot in slots.values_mut() {
        slot.cancelled = true;
        slot.wake();
    }
    slots.retain(|_, s| s.tasked);
}

/// Frames what the slots hold, as far as the windows allow: heads, body bytes, the
/// body bytes read (given back to the client), resets. Wakes the tasks that may queue
/// more.
pub(super) fn pump(streams: &Streams, conn: &mut Conn) {
    let given = streams.give_back.replace(0);
    if given > 0 {
        conn.release(0, given);
    }
    let mut slots = streams.slots.borrow_mut();
    streams.more.set(false);
    if slots.is_empty() {
        let was = (streams.blocked.replace(0), streams.sending.replace(0));
        if was != (0, 0) {
            streams.settle();
        }
        return;
    }
    let max_queued = streams.max_queued;
    let before = conn.output().len();
    let mut blocked = 0;
    let mut sending = 0;
    let mut more = false;
    slots.retain(|&id, slot| {
        if slot.cancelled {
            conn.release(id, slot.unread());
            return slot.tasked;
        }
        if slot.released > 0 {
            conn.release(id, slot.released);
            slot.released = 0;
        }
        if let Some((head, end)) = slot.head.take() {
            let status = dispatch::parse_head(&head).map_or(500, |(s, _)| s);
            if send_head(conn, id, status, &head, end).is_err() {
                slot.cancelled = true;
            }
        }
        if !slot.cancelled {
            match frame_pieces(conn, id, slot) {
                Ok(None) => {}
                Ok(Some(Stop::Window)) => blocked += 1,
                Ok(Some(Stop::Output)) => more = true,
                Err(()) => {
                    // Its file broke: the stream was reset.
                    slot.cancelled = true;
                    slot.reset_by_us = true;
                }
            }
        }
        if let Some(reason) = slot.reset.take() {
            conn.reset(id, reason);
            slot.cancelled = true;
            slot.reset_by_us = true;
        }
        if slot.cancelled {
            slot.data.clear();
            slot.queued = 0;
            conn.release(id, slot.unread());
        }
        let drained = slot.head.is_none() && slot.data.is_empty();
        if slot.cancelled || (slot.want && (slot.queued < max_queued || drained)) {
            slot.want = false;
            slot.wake();
        }
        if !drained {
            sending += 1;
        }
        slot.tasked || !slot.data.is_empty()
    });
    drop(slots);
    if conn.output().len() > before {
        // Progress for a stream that waits on the window: the write timeout starts over.
        streams.worker.touch(streams.slot);
    }
    streams.more.set(more);
    let was = (
        streams.blocked.replace(blocked),
        streams.sending.replace(sending),
    );
    if was != (blocked, sending) {
        streams.settle();
    }
}

/// The task's end of a stream's slot.
struct Link<'a> {
    streams: &'a Streams,
    id: u32,
}

/// The stream was reset by the client, or the connection ended.
#[derive(Debug)]
struct Cancelled;

impl Link<'_> {
    fn with<R>(&self, f: impl FnOnce(&mut Slot) -> R) -> Option<R> {
        self.streams.slots.borrow_mut().get_mut(&self.id).map(f)
    }

    /// Ready when the stream is cancelled.
    fn poll_cancelled(&self, cx: &mut Context<'_>) -> Poll<()> {
        let cancelled = self.with(|s| {
            if !s.cancelled {
                s.waker = Some(cx.waker().clone());
            }
            s.cancelled
        });
        match cancelled {
            Some(false) => Poll::Pending,
            _ => Poll::Ready(()),
        }
    }

    /// Queues the response head (HTTP/1 lines); `end`: no body follows.
    fn head(&self, head: Bytes, end: bool) -> Result<(), Cancelled> {
        let queued = self.with(|s| {
            if s.cancelled {
                return false;
            }
            s.head = Some((head, end));
            s.end |= end;
            true
        });
        self.streams.poke();
        match queued {
            Some(true) => Ok(()),
            _ => Err(Cancelled),
        }
    }

    /// Queues body bytes, once the stream's queue has room; `end` with the last.
    async fn data(&self, chunk: Bytes, end: bool) -> Result<(), Cancelled> {
        let max = self.streams.max_queued;
        poll_fn(|cx| {
            let room = self.with(|s| {
                if s.cancelled {
                    return Err(Cancelled);
                }
                if s.queued >= max {
                    s.waker = Some(cx.waker().clone());
                    s.want = true;
                    return Ok(false);
                }
                Ok(true)
            });
            match room {
                None => Poll::Ready(Err(Cancelled)),
                Some(Err(c)) => Poll::Ready(Err(c)),
                Some(Ok(false)) => Poll::Pending,
                Some(Ok(true)) => Poll::Ready(Ok(())),
            }
        })
        .await?;
        self.with(|s| {
            s.queued += chunk.len();
            if !chunk.is_empty() || end {
                s.data.push_back(Piece::Bytes(chunk));
            }
            s.end |= end;
        });
        self.streams.poke();
        Ok(())
    }

    /// Hands over a static file's body whole: the connection reads its file ranges as
    /// it sends them.
    fn pieces(&self, pieces: Vec<Piece>) -> Result<(), Cancelled> {
        let queued = self.with(|s| {
            if s.cancelled {
                return false;
            }
            s.queued += pieces
                .iter()
                .map(|p| match p {
                    Piece::Bytes(b) => b.len(),
                    Piece::File { .. } => 0,
                })
                .sum::<usize>();
            s.data.extend(pieces);
            s.end = true;
            true
        });
        self.streams.poke();
        match queued {
            Some(true) => Ok(()),
            _ => Err(Cancelled),
        }
    }

    /// Waits until what was queued has been framed (the window and the socket took it),
    /// so the stream's end is counted when its bytes are out of the task's hands.
    async fn drained(&self) -> Result<(), Cancelled> {
        poll_fn(|cx| {
            let left = self.with(|s| {
                if s.cancelled {
                    // Reset by the server (its body broke off): not the client's doing.
                    return if s.reset_by_us { Some(false) } else { None };
                }
                if s.head.is_some() || !s.data.is_empty() || s.reset.is_some() {
                    s.waker = Some(cx.waker().clone());
                    s.want = true;
                    return Some(true);
                }
                Some(false)
            });
            match left.flatten() {
                None => Poll::Ready(Err(Cancelled)),
                Some(true) => Poll::Pending,
                Some(false) => Poll::Ready(Ok(())),
            }
        })
        .await
    }

    /// Resets the stream (its body broke off after the head went out).
    fn reset(&self, reason: Reason) {
        self.with(|s| s.reset = Some(reason));
        self.streams.poke();
    }

    /// The task reads no more of the request body: what it left, and what is still to
    /// come, goes back to the client's window.
    fn stop_reading(&self) {
        self.with(|s| {
            s.reading = false;
            s.released += s.body.iter().map(Bytes::len).sum::<usize>();
            s.body.clear();
        });
        self.streams.poke();
    }

    /// The next piece of the request body; `None` at its end.
    async fn body_chunk(&self) -> Result<Option<Bytes>, Cancelled> {
        poll_fn(|cx| {
            let next = self.with(|s| {
                if s.cancelled {
                    return Err(Cancelled);
                }
                if let Some(chunk) = s.body.pop_front() {
                    s.released += chunk.len();
                    return Ok(Some(Some(chunk)));
                }
                if s.body_end {
                    return Ok(Some(None));
                }
                s.waker = Some(cx.waker().clone());
                Ok(None)
            });
            match next {
                None => Poll::Ready(Err(Cancelled)),
                Some(Err(c)) => Poll::Ready(Err(c)),
                Some(Ok(None)) => Poll::Pending,
                Some(Ok(Some(chunk))) => {
                    if chunk.is_some() {
                        // The connection gives the bytes back to the client's window.
                        self.streams.poke();
                    }
                    Poll::Ready(Ok(chunk))
                }
            }
        })
        .await
    }
}

impl Drop for Link<'_> {
    /// The task is done: its slot goes once what it queued is framed.
    fn drop(&mut self) {
        let mut slots = self.streams.slots.borrow_mut();
        if let Some(slot) = slots.get_mut(&self.id) {
            slot.tasked = false;
            slot.reading = false;
            slot.waker = None;
            let given = self.streams.give_back.get() + slot.unread();
            self.streams.give_back.set(given);
            let done = slot.data.is_empty() && slot.head.is_none() && slot.reset.is_none();
            if slot.cancelled || done {
                slots.remove(&self.id);
            }
        }
        drop(slots);
        self.streams.poke();
    }
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

/// The request as the handlers see it, and why it is refused, if it is. The Host
/// field is the :authority (a client that sends both must send the same host, RFC 9113
/// section 8.3.1); cookies split over several fields are joined as one (section 8.2.3).
fn view<'a>(
    request: Request<'a>,
    end_stream: bool,
    cookie: &'a mut Vec<u8>,
    fields: &'a mut Vec<wire::Header<'a>>,
    limits: &wire::Limits,
) -> (wire::Request<'a, 'a>, Option<wire::Error>) {
    let authority = request.authority();
    let method = std::str::from_utf8(request.method()).unwrap_or("");
    let mut refusal = None;
    if method.is_empty() || !method.bytes().all(is_token_byte) {
        refusal = Some(wire::Error::BadMethod);
    }
    let target: &[u8] = match (method, request.path()) {
        ("CONNECT", _) => authority.unwrap_or(b""),
        (_, Some(path)) => path,
        (_, None) => b"/",
    };
    if !target.iter().all(|&b| (0x21..0x7f).contains(&b)) {
        refusal = Some(wire::Error::BadTarget);
    }
    if let Some(authority) = authority {
        fields.push(wire::Header {
            name: "host",
            value: authority,
        });
    }
    let mut length = None;
    for (name, value) in request.fields() {
        // Names are lower-case tokens (checked by the codec), so ASCII.
        let name = std::str::from_utf8(name).unwrap_or("");
        match name {
            "host" => {
                if authority.is_some_and(|a| !a.eq_ignore_ascii_case(value)) {
                    refusal = Some(wire::Error::BadHost);
                }
                if authority.is_none() {
                    fields.push(wire::Header {
                        name: "host",
                        value,
                    });
                }
            }
            "cookie" => {
                if !cookie.is_empty() {
                    cookie.extend_from_slice(b"; ");
                }
                cookie.extend_from_slice(value);
            }
            _ => {
                if name == "content-length" {
                    length = Some(value);
                }
                fields.push(wire::Header { name, value });
            }
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
        match length {
            Some(length) => match std::str::from_utf8(length)
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
    if request.oversize() {
        refusal = Some(wire::Error::HeadTooLarge);
    } else if target.len() > limits.max_uri_length {
        refusal = Some(wire::Error::UriTooLong);
    } else if fields.len() > limits.max_headers {
        refusal = Some(wire::Error::TooManyHeaders);
    } else if matches!(framing, BodyFraming::Length(n) if n > limits.max_body_size) {
        refusal = Some(wire::Error::BodyTooLarge);
    }
    let fields: &'a [wire::Header<'a>] = fields;
    let req = wire::Request {
        method: wire::Method::from_token(method),
        method_token: method,
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

/// A token character (RFC 9110 section 5.6.2), for the method.
fn is_token_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
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

#[cfg(test)]
mod tests {
    #[test]
    fn connection_specific_fields_are_told_apart_in_any_case() {
        assert!(super::is_connection_specific(b"Transfer-Encoding"));
        assert!(super::is_connection_specific(b"connection"));
        assert!(!super::is_connection_specific(b"content-length"));
    }
}
