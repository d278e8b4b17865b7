//! The retry budget of an upstream, one per process: every worker's requests pay into it
//! and every worker's retries spend from it, so `retry_budget` bounds the retries of the
//! whole process, however many workers share the load.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

/// Retries allowed: every request adds `ratio` of a retry, and 10 more accrue each second;
/// a retry spends one. So retries stay under `ratio` of requests plus 10 a second, and a
/// brownout is not made worse by them. (Finagle's retry budget, simplified.)
///
/// Two atomics, no lock. A request's deposit is one load when the budget is full (the
/// usual case: the line stays shared between the workers' caches, nothing is written)
/// and one `fetch_add` otherwise; the clamp to [`MOST`] is left to the withdrawal, which
/// only a failure pays for.
pub(crate) struct RetryBudget {
    /// Thousandths of a retry each request adds.
    ratio: i64,
    /// Thousandths of a retry available (above [`MOST`] between a deposit and the next
    /// withdrawal, which clamps it).
    balance: AtomicI64,
    /// When the per-second allowance was last added (ms of the peer set's clock).
    last: AtomicU64,
}

/// 10 retries a second, in thousandths per millisecond.
const PER_MS: i64 = 10;
/// Most retries saved up: 100, so a long quiet time does not buy a long burst.
const MOST: i64 = 100_000;
/// One retry, in thousandths.
const ONE: i64 = 1000;

impl RetryBudget {
    pub(crate) fn new(ratio: f64) -> RetryBudget {
        RetryBudget {
            ratio: (ratio * 1000.0) as i64,
            balance: AtomicI64::new(10 * ONE),
            last: AtomicU64::new(0),
        }
    }

    /// A request pays its share.
    pub(crate) fn deposit(&self) {
        if self.ratio > 0 && self.balance.load(Ordering::Relaxed) < MOST {
            self.balance.fetch_add(self.ratio, Ordering::Relaxed);
        }
    }

    /// Whether a retry may go now (it is then paid for).
    pub(crate) fn withdraw(&self, now_ms: u64) -> bool {
        // `swap` hands each stretch of time to exactly one caller.
        let last = self.last.swap(now_ms, Ordering::Relaxed);
        let accrued = (now_ms.saturating_sub(last) as i64).saturating_mul(PER_MS);
        let mut paid = false;
        let _ = self
            .balance
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |b| {
                let b = b.saturating_add(accrued).min(MOST);
                paid = b >= ONE;
                Some(if paid { b - ONE } else { b })
            });
        paid
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn retry_budget_is_a_share_of_requests_plus_ten_a_second() {
        let budget = RetryBudget::new(0.2);
        budget.balance.store(0, Ordering::Relaxed);
        for _ in 0..100 {
            budget.deposit();
        }
        let allowed = (0..100).filter(|_| budget.withdraw(0)).count();
        assert_eq!(allowed, 20, "20% of 100 requests");
        assert!(budget.withdraw(100), "10 a second: one after 100 ms");
        assert!(!budget.withdraw(100));
    }

    #[test]
    fn a_long_quiet_time_saves_at_most_a_hundred_retries() {
        let budget = RetryBudget::new(0.2);
        for _ in 0..1_000_000 {
            budget.deposit();
        }
        let allowed = (0..1000).filter(|_| budget.withdraw(3_600_000)).count();
        assert_eq!(allowed, 100);
    }

    /// Two workers' threads share one budget: together they get the budget's retries,
    /// not each its own.
    #[test]
    fn workers_share_one_budget() {
        let budget = Arc::new(RetryBudget::new(0.2));
        budget.balance.store(0, Ordering::Relaxed);
        let workers: Vec<_> = (0..2)
            .map(|_| {
                let budget = budget.clone();
                std::thread::spawn(move || {
                    let mut retries = 0;
                    for _ in 0..10_000 {
                        budget.deposit();
                        // Every request fails and asks for a retry, at one instant.
                        retries += budget.withdraw(0) as u32;
                    }
                    retries
                })
            })
            .collect();
        let total: u32 = workers.into_iter().map(|w| w.join().unwrap()).sum();
        assert_eq!(total, 4000, "20% of the 20,000 requests of both workers");
    }
}
