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
//! The UDP socket is on the worker's own epoll (`evloop::net::UdpSocket`), so that a
//! datagram's arrival wakes the loop from its one `epoll_wait` like a TCP client's
//! bytes; it is read and written with quinn-udp (GSO and GRO where the kernel has them,
//! ECN, the packet's local address). Its readiness lives on the worker's thread, as the
//! timers do ([`OnThread`]).

use std::fmt;
use std::future::Future;
use std::io;
use std::mem::ManuallyDrop;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::thread::ThreadId;
use std::time::Instant;

use quinn::udp::{RecvMeta, Transmit, UdpSocketState};
use quinn::{AsyncTimer, AsyncUdpSocket, Runtime, UdpPoller};

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
        let state = UdpSocketState::new((&socket).into())?;
        let io = evloop::net::UdpSocket::register(socket)?;
        Ok(Arc::new(Udp {
            io: OnThread::new(io),
            state,
            writers: Arc::default(),
        }))
    }
}

/// A value used on the thread that made it only: every use checks the thread (and
/// panics elsewhere); dropped on another thread, it is leaked rather than dropped there.
struct OnThread<T> {
    value: ManuallyDrop<T>,
    thread: ThreadId,
}

// SAFETY: `T` is only ever reached (`get`, `get_ref`) and dropped on the thread that
// made it: both panic on any other, and `drop` leaks it there. Moving the wrapper to
// another thread, or sharing a reference to it, gives no access to `T` there.
unsafe impl<T> Send for OnThread<T> {}
// SAFETY: as above: through `&OnThread<T>` only `get_ref` reaches `T`, on its thread.
unsafe impl<T> Sync for OnThread<T> {}

impl<T> OnThread<T> {
    fn new(value: T) -> OnThread<T> {
        OnThread {
            value: ManuallyDrop::new(value),
            thread: std::thread::current().id(),
        }
    }

    fn get(&mut self) -> &mut T {
        self.check();
        &mut self.value
    }

    fn get_ref(&self) -> &T {
        self.check();
        &self.value
    }

    fn check(&self) {
        assert_eq!(
            std::thread::current().id(),
            self.thread,
            "a QUIC timer or socket used off its worker's thread"
        );
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

/// The endpoint's UDP socket on the worker's epoll.
struct Udp {
    io: OnThread<evloop::net::UdpSocket>,
    state: UdpSocketState,
    /// Every connection waiting for the socket to take datagrams again: the socket's
    /// readiness keeps one waker, and quinn gives each connection a poller of its own
    /// that must be woken.
    writers: Arc<Writers>,
}

/// The wakers of the connections waiting to write, woken together by the one waker
/// the socket's readiness keeps.
#[derive(Default)]
struct Writers(std::sync::Mutex<Vec<std::task::Waker>>);

impl std::task::Wake for Writers {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        let waiting = std::mem::take(&mut *self.0.lock().unwrap_or_else(|e| e.into_inner()));
        for waker in waiting {
            waker.wake();
        }
    }
}

impl fmt::Debug for Udp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Udp")
    }
}

impl AsyncUdpSocket for Udp {
    fn create_io_poller(self: Arc<Self>) -> Pin<Box<dyn UdpPoller>> {
        Box::pin(Writable(self))
    }

    fn try_send(&self, transmit: &Transmit) -> io::Result<()> {
        let io = self.io.get_ref();
        io.try_io(evloop::net::WRITE, |socket| {
            self.state.send(socket.into(), transmit)
        })
    }

    fn poll_recv(
        &self,
        cx: &mut Context,
        bufs: &mut [io::IoSliceMut<'_>],
        meta: &mut [RecvMeta],
    ) -> Poll<io::Result<usize>> {
        let io = self.io.get_ref();
        loop {
            std::task::ready!(io.poll_readable(cx));
            match io.try_io(evloop::net::READ, |socket| {
                self.state.recv(socket.into(), bufs, meta)
            }) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                other => return Poll::Ready(other),
            }
        }
    }

    fn local_addr(&self) -> io::Result<std::net::SocketAddr> {
        self.io.get_ref().socket().local_addr()
    }

    fn may_fragment(&self) -> bool {
        self.state.may_fragment()
    }

    fn max_transmit_segments(&self) -> usize {
        self.state.max_gso_segments()
    }

    fn max_receive_segments(&self) -> usize {
        self.state.gro_segments()
    }
}

/// Waits for the socket to take more datagrams.
struct Writable(Arc<Udp>);

impl fmt::Debug for Writable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Writable")
    }
}

impl UdpPoller for Writable {
    fn poll_writable(self: Pin<&mut Self>, cx: &mut Context) -> Poll<io::Result<()>> {
        let udp = &self.0;
        {
            let mut waiting = udp.writers.0.lock().unwrap_or_else(|e| e.into_inner());
            if !waiting.iter().any(|w| w.will_wake(cx.waker())) {
                waiting.push(cx.waker().clone());
            }
        }
        let all = std::task::Waker::from(udp.writers.clone());
        let ready = udp
            .io
            .get_ref()
            .poll_writable(&mut Context::from_waker(&all));
        if ready.is_ready() {
            // Not waiting any more (a later wake of it would be spurious, not wrong).
            let mut waiting = udp.writers.0.lock().unwrap_or_else(|e| e.into_inner());
            waiting.retain(|w| !w.will_wake(cx.waker()));
        }
        ready.map(Ok)
    }
}
