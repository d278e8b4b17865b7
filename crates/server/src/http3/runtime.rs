//! quinn on the worker's own loop: a `quinn::Runtime` whose tasks are `evloop` tasks and
//! whose timers are `evloop` timers, so that a QUIC endpoint, its connections and the
//! requests they carry all run on the worker's thread, beside its TCP connections, with
//! the same `Rc` state and the same seam (issue 47's way (a); way (b), quinn-proto driven
//! by hand with HTTP/3 framing and QPACK written here, would duplicate what quinn's
//! connection driver and h3 already do, and gains nothing the worker needs).
//!
//! quinn asks for `Send` futures and `Send` timers because its other runtimes move tasks
//! between threads; this one never does: [`OnLoop::spawn`] runs the future on this
//! thread's loop, and a timer is made, polled, reset and dropped by the task that owns
//! it, on the same thread. The one `unsafe` below ([`OnThread`]) states that, and checks
//! it at every use, so that a misuse panics instead of racing.
//!
//! The UDP socket is quinn's tokio socket (quinn-udp underneath: GSO and GRO where the
//! kernel has them, ECN, the packet's local address), registered with the tokio runtime
//! that every worker runs for its upstream sockets, whose epoll is itself watched by the
//! worker's epoll (`net/event_loop.rs`): a datagram's arrival costs that second
//! `epoll_wait`, as an upstream socket's event does.

use std::fmt;
use std::future::Future;
use std::io;
use std::mem::ManuallyDrop;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::thread::ThreadId;
use std::time::Instant;

use quinn::{AsyncTimer, AsyncUdpSocket, Runtime};

/// The runtime of the worker whose thread creates the endpoint.
#[derive(Debug)]
pub(super) struct OnLoop;

impl Runtime for OnLoop {
    fn new_timer(&self, at: Instant) -> Pin<Box<dyn AsyncTimer>> {
        let sleep = evloop::time::sleep_until(tokio::time::Instant::from_std(at));
        Box::pin(Timer(OnThread::new(Box::pin(sleep))))
    }

    fn spawn(&self, future: Pin<Box<dyn Future<Output = ()> + Send>>) {
        // quinn spawns from its endpoint's and connections' tasks, which run on this
        // loop; off it (which never happens) `spawn_local` panics, as it must.
        drop(evloop::spawn_local(future));
    }

    fn wrap_udp_socket(&self, socket: std::net::UdpSocket) -> io::Result<Arc<dyn AsyncUdpSocket>> {
        quinn::TokioRuntime.wrap_udp_socket(socket)
    }
}

/// A value used on the thread that made it only: every use checks the thread (and
/// panics elsewhere); dropped on another thread, it is leaked rather than dropped there.
struct OnThread<T> {
    value: ManuallyDrop<T>,
    thread: ThreadId,
}

// SAFETY: `T` is only ever reached (`get`) and dropped on the thread that made it:
// `get` panics on any other, and `drop` leaks it there. Moving the wrapper to another
// thread moves no access to `T` with it.
unsafe impl<T> Send for OnThread<T> {}

impl<T> OnThread<T> {
    fn new(value: T) -> OnThread<T> {
        OnThread {
            value: ManuallyDrop::new(value),
            thread: std::thread::current().id(),
        }
    }

    fn get(&mut self) -> &mut T {
        assert_eq!(
            std::thread::current().id(),
            self.thread,
            "a QUIC timer used off its worker's thread"
        );
        &mut self.value
    }
}

impl<T> Drop for OnThread<T> {
    fn drop(&mut self) {
        if std::thread::current().id() == self.thread {
            // SAFETY: dropped once, here, and never used after.
            unsafe { ManuallyDrop::drop(&mut self.value) }
        }
    }
}

/// An `evloop` timer as quinn's.
struct Timer(OnThread<Pin<Box<evloop::time::Sleep>>>);

impl fmt::Debug for Timer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Timer")
    }
}

impl AsyncTimer for Timer {
    fn reset(mut self: Pin<&mut Self>, at: Instant) {
        let at = tokio::time::Instant::from_std(at);
        self.0.get().as_mut().reset(at);
    }

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context) -> Poll<()> {
        self.0.get().as_mut().poll(cx)
    }
}
