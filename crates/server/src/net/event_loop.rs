//! The worker's loop: the one place its thread waits. Each turn it fires the timers
//! that are due, lets tokio run if tokio's epoll had events, polls every connection
//! and task that was woken, and then parks in one `epoll_wait` on the worker's epoll
//! (`reactor.rs`), which holds the client sockets, the listeners, the loop's wake-up
//! eventfd (another thread's wake: a Redis reply, a verified password, a reload) and
//! tokio's own epoll instance, with the next timer's deadline as its timeout.
//!
//! tokio stays for the upstream sockets (the proxy's client, tunnels, `tokio::fs`): its
//! runtime is built without timers (the loop's are `evloop::time`) and never parks the
//! thread; when its epoll has events, the loop lets it take a turn (its epoll read
//! without waiting, see `run`), so an upstream socket's event costs that second
//! `epoll_wait` and a client's costs none.
//! Before this loop the worker's epoll was itself a socket on tokio's reactor, and every
//! wake-up cost both (issue 49).

use std::future::Future;
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::rc::Rc;
use std::task::Poll;
use std::time::Instant;

use super::reactor::{Reactor, NOTIFIED, TOKIO};
use super::tasks::Tasks;

/// Rounds of polling what was woken before the loop looks at epoll again (without
/// waiting) when polling keeps waking more.
const ROUNDS: usize = 4;

/// What a worker's code needs of its loop while it starts.
pub(crate) struct Parts {
    pub(crate) reactor: Rc<Reactor>,
    pub(crate) rooms: Rc<Tasks>,
}

/// Runs a loop on this thread with room for `slots` connections: `start` is given its
/// parts and returns the worker's main future (and what to do when a connection's task
/// panics); the loop runs until that future ends, then drops every task left.
pub(crate) fn run<F, P>(slots: usize, start: impl FnOnce(&Parts) -> (F, P)) -> io::Result<()>
where
    F: Future<Output = ()> + 'static,
    P: Fn(usize),
{
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()?;
    let _context = runtime.enter();
    let evloop = evloop::Loop::install()?;
    let reactor = Rc::new(Reactor::new(slots)?);
    reactor.watch(evloop.notifier().fd(), NOTIFIED)?;
    reactor.watch(tokio_epoll()?, TOKIO)?;
    evloop.attach_epoll(reactor.epoll_fd());
    let rooms = Rc::new(Tasks::new(slots, evloop.notifier().clone()));
    let parts = Parts {
        reactor: reactor.clone(),
        rooms: rooms.clone(),
    };
    let (main, panicked) = start(&parts);
    let main = evloop::spawn_local(main);
    // The loop runs inside one `block_on`, without tokio's cooperative budget (the
    // loop's own applies to the client sockets): tokio's turn is taken by returning
    // Pending with a deferred wake, after which tokio reads its epoll without waiting
    // and polls the loop again. One `block_on` for the worker's life, not one per
    // turn: each `block_on` allocates the list its deferred wakes go on.
    runtime.block_on(tokio::task::coop::unconstrained(std::future::poll_fn(
        |cx| loop {
            evloop.fire_timers();
            for _ in 0..ROUNDS {
                let polled_rooms = rooms.run(&panicked);
                let polled_tasks = evloop.run_tasks();
                if !polled_rooms && !polled_tasks {
                    break;
                }
            }
            if main.is_finished() {
                return Poll::Ready(());
            }
            evloop.notifier().parking();
            let timeout = if rooms.woken() || evloop.tasks_woken() {
                0
            } else {
                evloop.next_deadline().map_or(-1, millis_until)
            };
            let found = reactor.wait(timeout, || evloop.notifier().running());
            evloop.next_turn();
            if found.notified {
                evloop.notifier().clear();
            }
            if found.tokio {
                // tokio's turn: its yield defers the wake until tokio has read its
                // epoll (without waiting) and woken what its sockets' events concern.
                let _ = std::pin::pin!(tokio::task::yield_now()).poll(cx);
                return Poll::Pending;
            }
        },
    )));
    rooms.end_all();
    drop(evloop);
    Ok(())
}

/// Milliseconds from now to `deadline`, rounded up (a wait that ends before the timer
/// is due would only wait again), 0 if it has passed.
fn millis_until(deadline: Instant) -> libc::c_int {
    let left = deadline.saturating_duration_since(Instant::now());
    let ms = left.as_nanos().div_ceil(1_000_000);
    ms.min(libc::c_int::MAX as u128) as libc::c_int
}

/// The descriptor of the current tokio runtime's epoll instance, which tokio does not
/// expose: the one epoll descriptor of the process whose `/proc/self/fdinfo` lists a
/// probe socket just registered with tokio's reactor.
fn tokio_epoll() -> io::Result<RawFd> {
    let (probe, _peer) = std::os::unix::net::UnixStream::pair()?;
    probe.set_nonblocking(true)?;
    let probe = tokio::net::UnixStream::from_std(probe)?;
    let wanted = probe.as_raw_fd().to_string();
    for entry in std::fs::read_dir("/proc/self/fd")? {
        let entry = entry?;
        let Ok(target) = std::fs::read_link(entry.path()) else {
            continue;
        };
        if target.as_os_str() != "anon_inode:[eventpoll]" {
            continue;
        }
        let name = entry.file_name();
        let Some(fd) = name.to_str().and_then(|n| n.parse::<RawFd>().ok()) else {
            continue;
        };
        let Ok(info) = std::fs::read_to_string(format!("/proc/self/fdinfo/{fd}")) else {
            continue;
        };
        let watches_probe = info.lines().any(|line| {
            let mut words = line.split_whitespace();
            words.next() == Some("tfd:") && words.next() == Some(wanted.as_str())
        });
        if watches_probe {
            return Ok(fd);
        }
    }
    Err(io::Error::other(
        "cannot find the tokio runtime's epoll descriptor in /proc/self/fdinfo",
    ))
}

/// Runs `future` on a loop of `slots` slots until it ends (tests).
#[cfg(test)]
pub(crate) fn block_on<F: Future<Output = ()> + 'static>(
    slots: usize,
    future: impl FnOnce(&Parts) -> F,
) {
    run(slots, |parts| (future(parts), |_| {})).unwrap();
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// The bound is 10 ms; on a shared machine a thread may wait longer than
    /// that for a core, so the median of 20 wakes is held to it, and every wake to a
    /// second (a lost wake would never arrive: the idle loop waits without a timeout).
    #[test]
    #[cfg_attr(miri, ignore)]
    fn a_wake_from_another_thread_reaches_an_idle_loop_within_10_ms() {
        let delays = Rc::new(std::cell::RefCell::new(Vec::new()));
        let seen = delays.clone();
        block_on(1, |_| async move {
            for _ in 0..20 {
                let (tx, rx) = tokio::sync::oneshot::channel::<Instant>();
                let sender = std::thread::spawn(move || {
                    std::thread::sleep(Duration::from_millis(20));
                    tx.send(Instant::now()).unwrap();
                });
                let sent = rx.await.unwrap();
                seen.borrow_mut().push(sent.elapsed());
                sender.join().unwrap();
            }
        });
        let mut delays = delays.take();
        delays.sort();
        assert!(delays[10] < Duration::from_millis(10), "{delays:?}");
        assert!(delays[19] < Duration::from_secs(1), "{delays:?}");
    }

    #[test]
    #[cfg_attr(miri, ignore)]
    fn timers_fire_in_order_and_tokio_sockets_work_on_the_loop() {
        let order = Rc::new(std::cell::RefCell::new(Vec::new()));
        let seen = order.clone();
        block_on(1, |_| async move {
            let mut handles = Vec::new();
            for ms in [30u64, 10, 20] {
                let order = seen.clone();
                handles.push(evloop::spawn_local(async move {
                    evloop::time::sleep(Duration::from_millis(ms)).await;
                    order.borrow_mut().push(ms);
                }));
            }
            // A socket on tokio's reactor, nested in the worker's epoll.
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = listener.local_addr().unwrap();
            let client = std::thread::spawn(move || {
                use std::io::Write;
                let mut s = std::net::TcpStream::connect(addr).unwrap();
                s.write_all(b"ping").unwrap();
            });
            let (mut conn, _) = listener.accept().await.unwrap();
            let mut got = Vec::new();
            tokio::io::AsyncReadExt::read_to_end(&mut conn, &mut got)
                .await
                .unwrap();
            assert_eq!(got, b"ping");
            client.join().unwrap();
            for h in handles {
                h.await.unwrap();
            }
        });
        assert_eq!(*order.borrow(), [10, 20, 30]);
    }

    #[test]
    #[cfg_attr(miri, ignore)]
    fn an_upstream_connection_waits_on_the_loops_epoll() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let origin = std::thread::spawn(move || {
            use std::io::{Read, Write};
            let (mut s, _) = listener.accept().unwrap();
            let mut got = [0u8; 4];
            s.read_exact(&mut got).unwrap();
            // Late, so that the read below waits for epoll.
            std::thread::sleep(Duration::from_millis(50));
            s.write_all(b"pong").unwrap();
            got
        });
        block_on(1, move |_| async move {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            let refused = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let closed = refused.local_addr().unwrap().to_string();
            drop(refused);
            let e = evloop::net::TcpStream::connect(&closed)
                .await
                .err()
                .unwrap();
            assert_eq!(e.kind(), io::ErrorKind::ConnectionRefused);
            let mut s = evloop::net::TcpStream::connect(&addr.to_string())
                .await
                .unwrap();
            s.write_all(b"ping").await.unwrap();
            let mut got = Vec::new();
            s.read_to_end(&mut got).await.unwrap();
            assert_eq!(got, b"pong");
        });
        assert_eq!(&origin.join().unwrap(), b"ping");
    }
}
