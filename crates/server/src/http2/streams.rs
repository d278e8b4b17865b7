//! What an HTTP/2 connection's streams tell it, and what it tells them: the counts that
//! settle the connection's slot state, Rapid Reset accounting, and the wake-up of the
//! connection's task.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::task::Waker;

use h2codec::conn::IdMap;
use pool::SlotId;

use super::slot;
use crate::conn_state::ConnState;
use crate::facts::ConnFacts;
use crate::worker::Worker;

/// What a connection's streams tell it, and what it tells them.
pub(crate) struct Streams {
    pub(super) worker: Rc<Worker>,
    pub(super) slot: SlotId,
    /// The client's address and the TLS facts, for every stream's exchange.
    pub(super) facts: ConnFacts,
    /// Streams being answered.
    pub(super) active: Cell<u32>,
    /// Of those, streams waiting for the client's window.
    pub(super) blocked: Cell<u32>,
    /// The socket did not take the last write: the connection waits for the client to
    /// read (whether or not a stream is still counted: a response queued whole ends its
    /// stream before its bytes leave).
    pub(super) write_blocked: Cell<bool>,
    /// The handshake is done: the slot's state follows the streams from then on.
    pub(super) started: Cell<bool>,
    /// `[http2] max_concurrent_streams`: a stream the client cancelled leaves the
    /// protocol's count at once, but its handler until it notices, so the streams still
    /// being answered are bounded here too.
    pub(super) max_streams: u32,
    /// Streams the client cancelled before their response finished, and streams whose
    /// response finished (Rapid Reset accounting).
    pub(super) cancelled: Cell<u64>,
    pub(super) finished: Cell<u64>,
    /// `[http2] max_reset_streams` of the configuration the connection started with.
    pub(super) max_resets: u64,
    /// `[http2] max_send_buffer`: response bytes a stream's task queues ahead of the
    /// window and the socket.
    pub(super) max_queued: usize,
    /// The client has cancelled too many streams: the connection sends GOAWAY.
    pub(super) abusive: Cell<bool>,
    /// The connection has ended (its slot is free, maybe another connection's already):
    /// streams still finishing must not touch the slot.
    pub(super) ended: Cell<bool>,
    /// Streams answered on tasks of their own, and responses waiting for window.
    pub(super) slots: RefCell<IdMap<slot::Slot>>,
    /// A slot has something for the connection.
    pub(super) poked: Cell<bool>,
    /// A slot has more to frame once the output is written.
    pub(super) more: Cell<bool>,
    /// Slots with a head or body still to frame (the connection is busy, not idle).
    pub(super) sending: Cell<u32>,
    /// Request body bytes of streams gone, to give back to the connection's window.
    pub(super) give_back: Cell<usize>,
    /// The connection's task, while it waits.
    pub(super) waker: RefCell<Option<Waker>>,
}

impl Streams {
    /// Moves the connection's slot to the state its streams put it in. Returns false if
    /// a timeout or eviction closed it.
    pub(super) fn settle(&self) -> bool {
        if self.ended.get() {
            return false;
        }
        if !self.started.get() {
            return true;
        }
        let state = if self.blocked.get() > 0 || self.write_blocked.get() {
            ConnState::Writing
        } else if self.active.get() > 0 || self.sending.get() > 0 {
            ConnState::Handling
        } else {
            ConnState::Idle
        };
        self.worker.enter(self.slot, state)
    }

    /// The socket took a write (`false`) or refused one (`true`).
    pub(super) fn write_waits(&self, blocked: bool) {
        if self.write_blocked.get() != blocked {
            self.write_blocked.set(blocked);
            self.settle();
        }
    }

    /// A stream ended: `cancelled` when the client reset it before its response was
    /// complete.
    pub(super) fn ended(&self, cancelled: bool) {
        self.active.set(self.active.get() - 1);
        if let Some(metrics) = self.worker.metrics() {
            metrics.http2_stream(cancelled);
        }
        if cancelled {
            self.cancelled.set(self.cancelled.get() + 1);
            if self.cancelled.get() > self.finished.get() + self.max_resets {
                self.abusive.set(true);
            }
        } else {
            self.finished.set(self.finished.get() + 1);
        }
        // With streams still active the state stays what it was (Handling, or Writing
        // while blocked, which `pump` settles): only the last one changes it.
        if self.active.get() == 0 {
            self.settle();
        }
        self.poke();
    }

    /// Wakes the connection's task: a slot has something for it.
    pub(super) fn poke(&self) {
        self.poked.set(true);
        if let Some(waker) = self.waker.borrow_mut().take() {
            waker.wake();
        }
    }
}
