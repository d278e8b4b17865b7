//! What every crate on the request path needs from the worker's event loop: timers
//! and the clocks read once per turn ([`time`]), tasks spawned beside the connections ([`spawn_local`]), TCP connections
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

use std::cell::RefCell;
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

/// Whether this thread has a loop installed: what [`spawn_local`] spawns then runs on
/// it (without one, [`spawn_local`] is tokio's, which needs a LocalSet).
pub fn has_loop() -> bool {
    tasks::installed()
}

/// The number of the turn this thread's loop is in: what a turn's events bring runs
/// under one number, so that work done once per turn (reading the clocks) can tell it
/// has been done. 0 on a thread without a loop.
pub fn turn() -> u64 {
    time::turn()
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
        time::next_turn();
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
        time::end_turns();
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use time::{now, system_now};

    #[test]
    fn the_clocks_are_read_once_a_turn_and_every_time_without_a_loop() {
        let pause = || std::thread::sleep(Duration::from_millis(2));
        let (mono, wall) = (now(), system_now());
        pause();
        assert!(now() > mono && system_now() > wall, "no loop: the clocks");
        let evloop = Loop::install().unwrap();
        evloop.next_turn();
        let (mono, wall) = (now(), system_now());
        pause();
        assert_eq!((now(), system_now()), (mono, wall), "one reading a turn");
        drop(evloop);
        assert!(now() > mono && system_now() > wall, "the loop gone");
        // Another loop counts its turns from 1 again: not the first loop's readings.
        let evloop = Loop::install().unwrap();
        evloop.next_turn();
        assert_eq!(turn(), 1);
        let (later, later_wall) = (now(), system_now());
        assert!(later > mono && later_wall > wall, "a new loop's turn 1");
        pause();
        assert_eq!((now(), system_now()), (later, later_wall));
        evloop.next_turn();
        assert!(
            now() > later && system_now() > later_wall,
            "the next turn's"
        );
    }
}
