//! Where a stream's task and the connection meet: the task queues the response's head
//! and body (at most `[http2] max_send_buffer` bytes ahead) and reads the request body;
//! the connection hands it the body and the client's cancel, and frames what it queued
//! (`send.rs`).

use std::collections::VecDeque;
use std::task::Waker;

use bytes::Bytes;
use h2codec::frame::Reason;

use super::head::Head;
use crate::net::output::Piece;

/// Where a stream's task and the connection meet.
pub(super) struct Slot {
    /// The response head to frame, and whether no body follows.
    pub(super) head: Option<(Head, bool)>,
    /// The body to frame, in order: bytes, ranges of files the file cache holds in
    /// memory, and ranges of files read straight into the output as the windows and the
    /// socket take them; `end` once the last is among them.
    pub(super) data: VecDeque<Piece>,
    /// Bytes `data` holds of its own, not the file cache's (a task queues at most
    /// `[http2] max_send_buffer`).
    pub(super) queued: usize,
    pub(super) end: bool,
    /// Trailers to frame after `data` (they end the stream: `end` is set with them).
    pub(super) trailers: Option<handler::FieldList>,
    /// The task wants the stream reset (its body broke off).
    pub(super) reset: Option<Reason>,
    /// A task answers the stream (else the slot only holds what the window did not
    /// take yet, and goes once that is framed).
    pub(super) tasked: bool,
    /// The stream is gone: the client reset it, the connection ended, or the server
    /// reset it (`reset_by_us`).
    pub(super) cancelled: bool,
    pub(super) reset_by_us: bool,
    /// The task waits for room in the queue or for the queue to drain: woken when there
    /// is (and on a cancel), not on every pass.
    pub(super) want: bool,
    /// The task still reads the request body; once it stops, what arrives is given
    /// back to the client's window at once.
    pub(super) reading: bool,
    /// Request body bytes received and not yet read by the task; `body_end` once the
    /// client has ended its side.
    pub(super) body: VecDeque<Bytes>,
    pub(super) body_end: bool,
    /// Body bytes the task has read, for the connection to give back to the client.
    pub(super) released: usize,
    /// The task, waiting for room, the request body or the cancel.
    pub(super) waker: Option<Waker>,
}

impl Slot {
    pub(super) fn new(tasked: bool) -> Slot {
        Slot {
            head: None,
            data: VecDeque::new(),
            queued: 0,
            end: false,
            trailers: None,
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

    /// Whether nothing is left to frame: head, body and trailers.
    pub(super) fn drained(&self) -> bool {
        self.head.is_none() && self.data.is_empty() && self.trailers.is_none()
    }

    pub(super) fn wake(&mut self) {
        if let Some(waker) = self.waker.take() {
            waker.wake();
        }
    }

    /// Request body bytes the client may send again: those read and those never to be.
    pub(super) fn unread(&mut self) -> usize {
        let n = self.released + self.body.iter().map(Bytes::len).sum::<usize>();
        self.released = 0;
        self.body.clear();
        n
    }
}
