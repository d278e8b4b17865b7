//! The share of the loop one poll of a task may take: each ready answer from a socket
//! spends one unit, and a socket that finds it spent says "not yet" and wakes its task
//! again, which goes behind everything else woken, as tokio's cooperative budget does.
//! Unlimited on a thread with no loop.

use std::cell::Cell;
use std::task::{Context, Poll};

/// Units for one poll: tokio's figure.
const PER_POLL: u32 = 128;

thread_local! {
    static LEFT: Cell<u32> = const { Cell::new(u32::MAX) };
}

/// Gives the task about to be polled its budget.
pub fn reset() {
    LEFT.with(|l| l.set(PER_POLL));
}

/// Spends one unit, or, when none is left, wakes the task to run later and says
/// it must wait.
pub fn poll_proceed(cx: &mut Context<'_>) -> Poll<()> {
    LEFT.with(|l| match l.get() {
        0 => {
            cx.waker().wake_by_ref();
            Poll::Pending
        }
        n => {
            l.set(n - 1);
            Poll::Ready(())
        }
    })
}
