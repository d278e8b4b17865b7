//! What the request streams of one QUIC connection share.

use std::cell::Cell;
use std::rc::Rc;
use std::time::Instant;

use crate::facts::ConnFacts;
use crate::worker::Worker;

/// What the requests of one connection share.
pub(crate) struct Conn {
    pub(crate) worker: Rc<Worker>,
    pub(crate) facts: ConnFacts,
    /// The handshake is done (always, unless the connection began with 0-RTT data).
    pub(crate) confirmed: Cell<bool>,
    /// The connection was lost before its handshake was done (a replayed 0-RTT flight
    /// ends so): what waited for the handshake is never answered.
    pub(crate) lost: Cell<bool>,
    pub(crate) handshake: tokio::sync::Notify,
    /// Requests accepted and not yet answered, and what wakes the connection when the
    /// last is (`Answered`).
    pub(crate) requests: Cell<usize>,
    pub(crate) answered: tokio::sync::Notify,
}

/// Counts a request answered when dropped, however its task ends.
pub(crate) struct Answered<'c>(pub(crate) &'c Conn);

impl Drop for Answered<'_> {
    fn drop(&mut self) {
        let left = self.0.requests.get().saturating_sub(1);
        self.0.requests.set(left);
        if left == 0 {
            self.0.answered.notify_waiters();
        }
    }
}

impl Conn {
    /// Waits until no accepted request is left unanswered.
    pub(crate) async fn all_answered(&self) {
        while self.requests.get() > 0 {
            self.answered.notified().await;
        }
    }

    /// Waits until the handshake is done (a request that must not be replayed, sent in
    /// 0-RTT data): `true`, or `false` when the connection was lost before it was.
    pub(crate) async fn confirmed(&self) -> bool {
        while !self.confirmed.get() && !self.lost.get() {
            self.handshake.notified().await;
        }
        self.confirmed.get()
    }
}

/// When a request began, for the access log's `%D` and the latency histograms: the
/// loop turn's clock, as HTTP/1's and HTTP/2's (`evloop::time`).
pub(crate) fn now() -> Option<Instant> {
    Some(evloop::time::now().into_std())
}
