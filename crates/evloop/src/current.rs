//! The task the loop is polling now: its waker, for code that starts work on a thread
//! where no `Context` reaches it (a Lua phase polled once inside a connection's poll, to
//! answer at once when it waits for nothing). A future polled first that way registers
//! the waker of the task that will poll it again, so that poll need not repeat the
//! first one's work (see `script`'s `PendingContent`). None outside a poll of the loop's
//! (tests, tokio's runtimes).

use std::cell::Cell;
use std::task::Waker;

thread_local! {
    static POLLING: Cell<Option<Waker>> = const { Cell::new(None) };
    /// The number of the poll in progress (0: none), and the last one given.
    static POLL: Cell<u64> = const { Cell::new(0) };
    static POLLS: Cell<u64> = const { Cell::new(0) };
}

/// Marks the task whose waker is `waker` as polled until dropped (restoring the one
/// before). The loops enter it around each poll of a task.
pub struct Entered(Option<Waker>, u64);

pub fn enter(waker: &Waker) -> Entered {
    let number = POLLS.with(|n| n.get() + 1);
    POLLS.with(|n| n.set(number));
    let before = POLL.with(|p| p.replace(number));
    Entered(POLLING.with(|p| p.replace(Some(waker.clone()))), before)
}

impl Drop for Entered {
    fn drop(&mut self) {
        let previous = self.0.take();
        let _ = POLL.try_with(|p| p.set(self.1));
        // The waker is dropped outside the cell (a waker's drop may run any code).
        let _ = POLLING.try_with(|p| p.replace(previous));
    }
}

/// The number of the task poll in progress, different for every poll of the thread's
/// loops (0 outside one): a future polled twice within one number was not left between
/// the two (a wake it registered in the first cannot have been spent by another poll).
pub fn poll() -> u64 {
    POLL.with(Cell::get)
}

/// The waker of the task being polled now, if the loop is polling one.
pub fn waker() -> Option<Waker> {
    POLLING.with(|p| {
        let w = p.take();
        let copy = w.clone();
        p.set(w);
        copy
    })
}
