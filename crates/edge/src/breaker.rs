//! A circuit breaker per upstream (per worker): after `threshold` consecutive failures
//! it opens and refuses calls at once for `cool_down`, so a failing fragment server
//! costs a page nothing instead of a timeout; then one probe is let through (half
//! open): success closes the breaker, failure opens it for another cool-down.

use std::cell::Cell;
use std::time::Duration;

use tokio::time::Instant;

/// The state of an upstream's circuit breaker (see `UpstreamStats`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BreakerState {
    /// Calls go through; failures are counted.
    Closed,
    /// Calls are refused until the cool-down ends.
    Open,
    /// One probe call is in flight; others are refused until it ends.
    HalfOpen,
}

#[derive(Debug)]
pub(crate) struct Breaker {
    /// The upstream's name, for the log line when it opens.
    name: String,
    threshold: u32,
    cool_down: Duration,
    failures: Cell<u32>,
    open_until: Cell<Option<Instant>>,
    probing: Cell<bool>,
}

/// Permission to make one call; report how it went with [`Breaker::record`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ticket {
    probe: bool,
}

impl Breaker {
    pub(crate) fn new(name: &str, threshold: u32, cool_down: Duration) -> Breaker {
        Breaker {
            name: name.to_string(),
            threshold,
            cool_down,
            failures: Cell::new(0),
            open_until: Cell::new(None),
            probing: Cell::new(false),
        }
    }

    pub(crate) fn state(&self) -> BreakerState {
        match self.open_until.get() {
            None => BreakerState::Closed,
            Some(_) if self.probing.get() => BreakerState::HalfOpen,
            Some(until) if Instant::now() < until => BreakerState::Open,
            // Cool-down over, no probe yet: the next call is the probe.
            Some(_) => BreakerState::HalfOpen,
        }
    }

    /// Whether a call may go now.
    pub(crate) fn try_call(&self) -> Option<Ticket> {
        let Some(until) = self.open_until.get() else {
            return Some(Ticket { probe: false });
        };
        if self.probing.get() || Instant::now() < until {
            return None;
        }
        self.probing.set(true);
        Some(Ticket { probe: true })
    }

    pub(crate) fn record(&self, ticket: Ticket, success: bool) {
        if ticket.probe {
            self.probing.set(false);
        }
        if success {
            self.failures.set(0);
            self.open_until.set(None);
            return;
        }
        let failures = self.failures.get().saturating_add(1);
        self.failures.set(failures);
        if self.threshold > 0 && (ticket.probe || failures >= self.threshold) {
            if self.open_until.get().is_none() || ticket.probe {
                tracing::warn!(upstream = %self.name, failures, "circuit breaker opens");
            }
            self.open_until.set(Some(Instant::now() + self.cool_down));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn opens_after_threshold_and_probes_after_cool_down() {
        let b = Breaker::new("app", 3, Duration::from_secs(10));
        for _ in 0..2 {
            let t = b.try_call().unwrap();
            b.record(t, false);
        }
        assert_eq!(b.state(), BreakerState::Closed);
        let t = b.try_call().unwrap();
        b.record(t, false);
        assert_eq!(b.state(), BreakerState::Open);
        assert!(b.try_call().is_none());
        tokio::time::advance(Duration::from_secs(11)).await;
        let probe = b.try_call().unwrap();
        assert!(b.try_call().is_none(), "only one probe at a time");
        b.record(probe, false);
        assert_eq!(b.state(), BreakerState::Open);
        tokio::time::advance(Duration::from_secs(11)).await;
        let probe = b.try_call().unwrap();
        b.record(probe, true);
        assert_eq!(b.state(), BreakerState::Closed);
    }
}
