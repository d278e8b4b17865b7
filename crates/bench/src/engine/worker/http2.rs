//! HTTP/2 on a worker's connections: the events of `h2::Conn` applied to the requests in
//! flight, which end out of order.

use std::time::Instant;

use super::{State, Worker};
use crate::h2;
use crate::stats::FailureKind;

impl Worker<'_> {
    /// HTTP/2: frames what was read; each stream ends out of order.
    pub(super) fn frame_h2(&mut self, slot: usize, now: Instant) {
        let c = &mut self.conns[slot];
        let Some(h2) = c.h2.as_mut() else {
            // Bytes before we sent a thing.
            return self.fail(slot, now, FailureKind::BadResponse);
        };
        let mut events = std::mem::take(&mut self.h2_events);
        let fed = h2.feed(
            &c.rbuf[c.rpos..c.rlen],
            &self.plan.wires,
            &mut c.wbuf,
            &mut |e| events.push(e),
        );
        match fed {
            Ok(n) => c.rpos += n,
            Err(h2::ProtocolError) => {
                events.clear();
                self.h2_events = events;
                return self.fail(slot, now, FailureKind::BadResponse);
            }
        }
        if c.rpos == c.rlen {
            c.rpos = 0;
            c.rlen = 0;
        }
        for e in events.drain(..) {
            match e {
                h2::Event::Complete { stream, status } => {
                    self.stream_ended(slot, now, stream, Some(status))
                }
                h2::Event::Reset { stream } => self.stream_ended(slot, now, stream, None),
                h2::Event::GoAway { last_stream } => self.go_away(slot, last_stream),
            }
        }
        self.h2_events = events;
        let c = &mut self.conns[slot];
        if c.state != State::Open {
            return;
        }
        if c.inflight.is_empty() && c.h2.as_ref().is_some_and(|h| h.going_away()) {
            self.close(slot);
            self.reopen.push_back((now, slot));
        } else if c.wpos < c.wbuf.len() {
            // Acknowledgements, window updates, bodies the windows now allow.
            self.flush(slot, now);
        }
    }

    /// HTTP/2: a stream ended, with a response (`Some(status)`) or reset.
    fn stream_ended(&mut self, slot: usize, now: Instant, stream: u32, status: Option<u16>) {
        let c = &mut self.conns[slot];
        if c.state != State::Open {
            return;
        }
        let Some(i) = c.inflight.iter().position(|f| f.stream == stream) else {
            return;
        };
        let f = c.inflight.remove(i).expect("found above");
        self.answered(slot, now, f, status, false);
    }

    /// HTTP/2: the server goes away; requests on streams above `last_stream` were not
    /// processed (RFC 9113 section 6.8) and go back to the budget, to be sent again.
    fn go_away(&mut self, slot: usize, last_stream: u32) {
        let c = &mut self.conns[slot];
        if let Some(h2) = &mut c.h2 {
            h2.drop_unprocessed(last_stream);
        }
        let before = c.inflight.len();
        c.inflight.retain(|f| f.stream <= last_stream);
        let unprocessed = before - c.inflight.len();
        self.inflight_total -= unprocessed;
        if let Some(b) = &mut self.budget {
            *b += unprocessed as u64;
        }
    }
}
