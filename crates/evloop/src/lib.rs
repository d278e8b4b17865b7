//! What every crate on the request path needs from the worker's event loop: timers
//! ([`time`]), tasks spawned beside the connections ([`spawn_local`]), TCP connections
//! and UDP sockets on the loop's epoll ([`net`]: the proxy's upstream connections, QUIC's
//! sockets), the wake-up that
//! reaches a loop parked in its `epoll_wait` from any thread ([`Notifier`]), and the
//! per-poll budget that keeps one busy connection from holding the loop ([`budget`]), and
//! the waker of the task being polled ([`current`]).
//!
//! The loop itself (its epoll, the connections' rooms, the order of a turn) is the
//! server's (`server/src/net/event_loop.rs`); it installs a [`Loop`] on the worker
//! thread and asks it, each turn, for the tasks woken, the timers due and how long it may
//! wait. These pieces live in a crate of their own, below `edge`, `script` and `server`,
//! so that all of them time and spawn on the same loop, parked in one place: tokio's
//! timers and `spawn_local` would need tokio's runtime to park the thread instead
//! (issue 49).
//!
//! On a thread with no loop installed (tests, and the helper threads that run tokio
//! runtimes of their own: Redis, health checks, ACME) each of these is tokio's: a
//! [`time::sleep`] there is tokio's sleep, [`spawn_local`] tokio's (inside a LocalSet),
//! a [`net::TcpStream`] tokio's.

use std::cell::{Cell, RefCell};
use std::io;
use std::rc::Rc;
use std::sync::Arc;

pub mod budget;
pub mod current;
pub mod net;
mod notify;
mod tasks;
pub mod time;

pub use notify::Notifier;
pub use tasks::{spawn_local, AbortHandle, JoinError, JoinHandle};

thread_local! {
    /// The number of this thread's loop's current turn (0: no loop, or none taken yet).
    static TURN: Cell<u64> = const { Cell::new(0) };
}

/// Whether this thread has a loop installed: what [`spawn_local`] spawns then runs on
/// it (without one, [`spawn_local`] is tokio's, which needs a LocalSet).
pub fn has_loop() -> bool {
    tasks::installed()
}

/// The number of the turn this thread's loop is in: what a turn's events bring runs
/// under one number, so that work done once per turn (reading the clocks) can tell it
/// has been done. 0 on a thread without a loop.
pub fn turn() -> u64 {
    TURN.with(Cell::get)
}

/// A worker loop's timers and spawned tasks, installed on its thread for as long as
/// this lives. The server's loop drives it; see the crate's doc.
pub struct Loop {
    timers: Rc<RefCell<time::Timers>>,
    tasks: Rc<tasks::Tasks>,
    notifier: Arc<Notifier>,
}

impl Loop {
    /// Installs a loop on this thread (one at a time: a second is refused).
    pub fn install() -> io::Result<Loop> {
        let notifier = Arc::new(Notifier::new()?);
        let tasks = Rc::new(tasks::Tasks::new(notifier.clone()));
        if !tasks::install(&tasks) {
            return Err(io::Error::other(
                "an event loop is installed on this thread already",
            ));
        }
        Ok(Loop {
            timers: time::install(),
            tasks,
            notifier,
        })
    }

    /// Puts [`net::TcpStream`]s made on this thread from now on on `epoll`, the loop's
    /// epoll instance; the loop hands their events (marked [`net::TAG`]) to
    /// [`net::dispatch`].
    pub fn attach_epoll(&self, epoll: std::os::fd::RawFd) {
        net::attach(epoll);
    }

    /// What wakes this loop from its wait, from any thread.
    pub fn notifier(&self) -> &Arc<Notifier> {
        &self.notifier
    }

    /// Polls each spawned task woken since the last call, once; whether any was.
    pub fn run_tasks(&self) -> bool {
        self.tasks.run()
    }

    /// Whether a spawned task is waiting to be polled.
    pub fn tasks_woken(&self) -> bool {
        self.tasks.woken()
    }

    /// Begins a turn: the loop's wait has returned ([`turn`]).
    pub fn next_turn(&self) {
        TURN.with(|t| t.set(t.get() + 1));
    }

    /// Wakes what waits on every timer due by now.
    pub fn fire_timers(&self) {
        time::fire(&self.timers);
    }

    /// When the next timer is due, if any is set.
    pub fn next_deadline(&self) -> Option<std::time::Instant> {
        self.timers.borrow_mut().next_deadline()
    }
}

impl Drop for Loop {
    fn drop(&mut self) {
        // The tasks' futures go first, while the loop is still installed: dropping
        // them drops their timers, which find it.
        self.tasks.drop_all();
        TURN.with(|t| t.set(0));
        tasks::uninstall();
        time::uninstall();
        net::detach();
    }
}

/// Lets everything else woken run before the task goes on (tokio's `yield_now`, which
/// must not be used on the loop: it hands its wake to tokio's scheduler, which runs it
/// only at tokio's next turn).
pub async fn yield_now() {
    let mut yielded = false;
    std::future::poll_fn(|cx| {
        if std::mem::replace(&mut yielded, true) {
            return std::task::Poll::Ready(());
        }
        cx.waker().wake_by_ref();
        std::task::Poll::Pending
    })
    .await
}
