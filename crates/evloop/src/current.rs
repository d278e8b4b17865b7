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
}

/// Marks the task whose waker is `waker` as polled until dropped (restoring the one
/// before). The loops enter it around each poll of a task.
pub struct Entered(Option<Waker>);

pub fn enter(waker: &Waker) -> Entered {
    Entered(POLLING.with(|p| p.replace(Some(waker.clone()))))
}

impl Drop for Entered {
    fn drop(&mut self) {
        let previous = self.0.take();
        // The waker is dropped outside the cell (a waker's drop may run any code).
        let _ = POLLING.try_with(|p| p.replace(previous));
    }
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
