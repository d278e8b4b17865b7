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
    pub(crate) handshake: tokio::sync::Notify,
}

impl Conn {
    /// Waits until the handshake is done (a request that must not be replayed, sent in
    /// 0-RTT data).
    pub(crate) async fn confirmed(&self) {
        while !self.confirmed.get() {
            self.handshake.notified().await;
        }
    }
}

/// When a request began, for the access log's `%D` and the latency histograms.
pub(crate) fn now() -> Option<Instant> {
    Some(Instant::now())
}
