//! The two ends of a stream's slot: what the connection does to it (a request body
//! arrived, the client reset the stream, the connection ended) and the stream task's
//! end ([`Link`]), which queues the response and reads the request body.

use std::future::poll_fn;
use std::task::{Context, Poll};

use bytes::Bytes;
use h2codec::conn::Conn;
use h2codec::frame::Reason;

use super::head::Head;
use super::slot::Slot;
use super::streams::Streams;
use crate::net::output::Piece;

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

/// The task's end of a stream's slot.
pub(super) struct Link<'a> {
    pub(super) streams: &'a Streams,
    pub(super) id: u32,
}

/// The stream was reset by the client, or the connection ended.
#[derive(Debug)]
pub(super) struct Cancelled;

impl Link<'_> {
    pub(super) fn with<R>(&self, f: impl FnOnce(&mut Slot) -> R) -> Option<R> {
        self.streams.slots.borrow_mut().get_mut(&self.id).map(f)
    }

    /// Ready when the stream is cancelled.
    pub(super) fn poll_cancelled(&self, cx: &mut Context<'_>) -> Poll<()> {
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
    pub(super) fn head(&self, head: Head, end: bool) -> Result<(), Cancelled> {
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
    pub(super) async fn data(&self, chunk: Bytes, end: bool) -> Result<(), Cancelled> {
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

    /// Queues the trailers that end the body (after the bytes queued before).
    pub(super) fn trailers(&self, fields: handler::FieldList) -> Result<(), Cancelled> {
        let queued = self.with(|s| {
            if s.cancelled {
                return false;
            }
            s.trailers = Some(fields);
            s.end = true;
            true
        });
        self.streams.poke();
        match queued {
            Some(true) => Ok(()),
            _ => Err(Cancelled),
        }
    }

    /// Hands over a static file's body whole: the connection reads its file ranges as
    /// it sends them.
    pub(super) fn pieces(&self, pieces: Vec<Piece>) -> Result<(), Cancelled> {
        let queued = self.with(|s| {
            if s.cancelled {
                return false;
            }
            s.queued += pieces.iter().map(Piece::queued).sum::<usize>();
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
    pub(super) async fn drained(&self) -> Result<(), Cancelled> {
        poll_fn(|cx| {
            let left = self.with(|s| {
                if s.cancelled {
                    // Reset by the server (its body broke off): not the client's doing.
                    return if s.reset_by_us { Some(false) } else { None };
                }
                if !s.drained() || s.reset.is_some() {
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
    pub(super) fn reset(&self, reason: Reason) {
        self.with(|s| s.reset = Some(reason));
        self.streams.poke();
    }

    /// The task reads no more of the request body: what it left, and what is still to
    /// come, goes back to the client's window.
    pub(super) fn stop_reading(&self) {
        self.with(|s| {
            s.reading = false;
            s.released += s.body.iter().map(Bytes::len).sum::<usize>();
            s.body.clear();
        });
        self.streams.poke();
    }

    /// The next piece of the request body; `None` at its end.
    pub(super) async fn body_chunk(&self) -> Result<Option<Bytes>, Cancelled> {
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
            let done = slot.drained() && slot.reset.is_none();
            if slot.cancelled || done {
                slots.remove(&self.id);
            }
        }
        drop(slots);
        self.streams.poke();
    }
}
