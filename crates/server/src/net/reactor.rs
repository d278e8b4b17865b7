//! The worker's epoll: one instance per worker, where the worker's loop
//! (`event_loop.rs`) parks. It holds a readiness entry per connection slot, the
//! worker's listening sockets, the loop's wake-up eventfd and tokio's own epoll
//! instance (for the upstream sockets still on tokio); [`Socket`] is the client socket
//! the connections read and write.
//!
//! Written by hand rather than using tokio's `TcpStream` because tokio's reactor costs
//! every connection two allocations (its `ScheduledIo` registration, and a place in the
//! list of registrations to release) and an `EPOLL_CTL_DEL` before the close, where
//! close(2) removes the socket from epoll anyway (issue 27: a connection per request).
//! Here a socket's readiness lives in its slot's [`Entry`], allocated with the slots at
//! start, and a socket is added to epoll once and leaves it by being closed.
//!
//! The semantics are tokio's (edge-triggered; readiness cleared when an operation says
//! EAGAIN, and after a short read or write), so the connection code reads the same as
//! it did over tokio's sockets.

use std::cell::{Cell, RefCell};
use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, Interest, ReadBuf};

use evloop::net::{Readiness, READ, READ_CLOSED, WRITE};

use crate::sys;

/// Events collected per `epoll_wait`.
const EVENTS: usize = 256;

/// An event's index (its low 32 bits) at or above this is not a connection slot's:
/// a listener's (this bit and its index in the listener table), or one of the two
/// descriptors below. Below it, one with `evloop::net::TAG` is an upstream
/// connection's (`evloop::net`).
const LISTENER: u32 = 1 << 31;
/// The loop's wake-up eventfd (`evloop::Notifier`).
pub(crate) const NOTIFIED: u32 = u32::MAX;
/// tokio's epoll instance.
pub(crate) const TOKIO: u32 = u32::MAX - 1;

/// One slot's readiness and the wakers waiting on it.
#[derive(Default)]
struct Entry {
    io: Readiness,
    /// Whether epoll watches the socket's writability (see [`Reactor::register`]).
    watching_writes: Cell<bool>,
    /// Counts the sockets registered in this slot; an event carries its socket's, so
    /// one for an earlier socket (still in epoll while a forked child held a copy of
    /// its descriptor until exec) is not taken for the current one's.
    generation: Cell<u32>,
}

impl std::ops::Deref for Entry {
    type Target = Readiness;

    fn deref(&self) -> &Readiness {
        &self.io
    }
}

/// What a wait found besides the sockets' events (those have woken their tasks).
#[derive(Default, Clone, Copy)]
pub(crate) struct Found {
    /// The loop's eventfd was written.
    pub(crate) notified: bool,
    /// tokio's epoll has events.
    pub(crate) tokio: bool,
}

pub(crate) struct Reactor {
    epoll: OwnedFd,
    entries: Box<[Entry]>,
    /// The listening sockets' entries, by the index in their events.
    listeners: RefCell<Vec<Option<Rc<Entry>>>>,
}

impl Reactor {
    /// An epoll instance with an entry for each of `slots` connection slots.
    pub(crate) fn new(slots: usize) -> io::Result<Reactor> {
        Ok(Reactor {
            epoll: sys::epoll_create()?,
            entries: (0..slots).map(|_| Entry::default()).collect(),
            listeners: RefCell::new(Vec::new()),
        })
    }

    /// The epoll instance, for `evloop::net`'s connections.
    pub(crate) fn epoll_fd(&self) -> RawFd {
        self.epoll.as_raw_fd()
    }

    /// Watches `fd` for reads, level-triggered, its events marked `index` (`NOTIFIED`
    /// or `TOKIO`).
    pub(crate) fn watch(&self, fd: RawFd, index: u32) -> io::Result<()> {
        let event = libc::epoll_event {
            events: libc::EPOLLIN as u32,
            u64: index as u64,
        };
        sys::epoll_ctl(self.epoll.as_raw_fd(), libc::EPOLL_CTL_ADD, fd, event)
    }

    /// Adds a connected socket, in slot `slot`, to the worker's epoll. The socket must
    /// be non-blocking; it leaves epoll when the returned `Socket` closes it.
    ///
    /// Epoll watches reads only, and the socket counts as writable (a new one is):
    /// watching writes from the start would queue an event for every new connection
    /// before its request arrives (a wake-up of the worker for nothing), and nginx and
    /// h2o add it the same way. Writes are watched from the first time one finds the
    /// socket full ([`Socket::poll_write_ready`]) until the socket closes: one
    /// `EPOLL_CTL_MOD` in the life of a connection that ever waits to write.
    pub(crate) fn register(self: &Rc<Self>, fd: OwnedFd, slot: usize) -> io::Result<Socket> {
        let entry = &self.entries[slot];
        entry.ready.set(WRITE);
        entry.reader.take();
        entry.writer.take();
        entry.watching_writes.set(false);
        entry.generation.set(entry.generation.get().wrapping_add(1));
        self.control(libc::EPOLL_CTL_ADD, fd.as_raw_fd(), slot, libc::EPOLLIN)?;
        Ok(Socket {
            fd,
            slot: slot as u32,
            reactor: self.clone(),
        })
    }

    /// epoll_ctl of `fd` (slot `slot`) with `interest` besides EPOLLRDHUP, edge-triggered.
    fn control(
        &self,
        op: libc::c_int,
        fd: RawFd,
        slot: usize,
        interest: libc::c_int,
    ) -> io::Result<()> {
        let generation = self.entries[slot].generation.get();
        let event = libc::epoll_event {
            events: (interest | libc::EPOLLRDHUP | libc::EPOLLET) as u32,
            u64: slot as u64 | (generation as u64) << 32,
        };
        sys::epoll_ctl(self.epoll.as_raw_fd(), op, fd, event)
    }

    /// Adds a listening socket (non-blocking), edge-triggered; it leaves epoll when
    /// the returned [`Listening`] is dropped.
    pub(crate) fn listen(
        self: &Rc<Self>,
        listener: std::net::TcpListener,
    ) -> io::Result<Listening> {
        let entry = Rc::new(Entry::default());
        // Connections may be queued already: the first accept looks.
        entry.ready.set(READ);
        let index = {
            let mut listeners = self.listeners.borrow_mut();
            match listeners.iter().position(Option::is_none) {
                Some(i) => {
                    listeners[i] = Some(entry.clone());
                    i
                }
                None => {
                    listeners.push(Some(entry.clone()));
                    listeners.len() - 1
                }
            }
        };
        let event = libc::epoll_event {
            events: (libc::EPOLLIN | libc::EPOLLET) as u32,
            u64: (LISTENER | index as u32) as u64,
        };
        if let Err(e) = sys::epoll_ctl(
            self.epoll.as_raw_fd(),
            libc::EPOLL_CTL_ADD,
            listener.as_raw_fd(),
            event,
        ) {
            self.listeners.borrow_mut()[index] = None;
            return Err(e);
        }
        Ok(Listening {
            listener,
            index,
            entry,
            reactor: self.clone(),
        })
    }

    /// Waits up to `timeout_ms` (-1: for as long as it takes) for events, calls `woke`
    /// (before any task is woken: the loop is no longer parked, so those wakes need not
    /// write its eventfd), and wakes the tasks waiting on the sockets the events
    /// concern: the loop's one wait per turn.
    pub(crate) fn wait(&self, timeout_ms: libc::c_int, woke: impl FnOnce()) -> Found {
        let mut events = [libc::epoll_event { events: 0, u64: 0 }; EVENTS];
        let mut found = Found::default();
        let waited = sys::epoll_wait(self.epoll.as_raw_fd(), &mut events, timeout_ms);
        woke();
        let n = match waited {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => return found,
            Err(e) => {
                // Cannot happen with a valid epoll descriptor and buffer; do not spin on
                // it either.
                tracing::error!(error = %e, "worker epoll_wait failed");
                std::thread::sleep(std::time::Duration::from_millis(10));
                return found;
            }
        };
        for event in &events[..n] {
            let (index, generation) = (event.u64 as u32, (event.u64 >> 32) as u32);
            match index {
                NOTIFIED => found.notified = true,
                TOKIO => found.tokio = true,
                i if i & LISTENER == 0 && i & evloop::net::TAG != 0 => {
                    evloop::net::dispatch(event.u64, event.events);
                }
                i if i & LISTENER != 0 => {
                    let listeners = self.listeners.borrow();
                    if let Some(Some(entry)) = listeners.get((i & !LISTENER) as usize) {
                        entry.record(event.events);
                    }
                }
                slot => {
                    let Some(entry) = self.entries.get(slot as usize) else {
                        continue;
                    };
                    if entry.generation.get() == generation {
                        entry.record(event.events);
                    }
                }
            }
        }
        found
    }
}

/// A listening socket on the worker's epoll (see [`Reactor::listen`]).
pub(crate) struct Listening {
    listener: std::net::TcpListener,
    index: usize,
    entry: Rc<Entry>,
    reactor: Rc<Reactor>,
}

impl Listening {
    /// The next connection: accept4(2), waiting for readiness when the queue is empty.
    pub(crate) async fn accept(&self) -> io::Result<(OwnedFd, SocketAddr)> {
        std::future::poll_fn(|cx| loop {
            std::task::ready!(evloop::budget::poll_proceed(cx));
            if self.entry.ready.get() & READ == 0 {
                self.entry.reader.set(Some(cx.waker().clone()));
                return Poll::Pending;
            }
            match sys::accept(self.listener.as_raw_fd()) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.entry.ready.set(0);
                }
                other => return Poll::Ready(other),
            }
        })
        .await
    }
}

impl Drop for Listening {
    fn drop(&mut self) {
        // The descriptor is one of several for the same socket (each worker has its
        // own copy): closing it would not take it out of this epoll.
        let _ = sys::epoll_ctl(
            self.reactor.epoll.as_raw_fd(),
            libc::EPOLL_CTL_DEL,
            self.listener.as_raw_fd(),
            libc::epoll_event { events: 0, u64: 0 },
        );
        self.reactor.listeners.borrow_mut()[self.index] = None;
    }
}

/// A connected client socket on the worker's epoll (see the module's doc). Closing it
/// (dropping it) removes it from epoll.
pub(crate) struct Socket {
    fd: OwnedFd,
    slot: u32,
    reactor: Rc<Reactor>,
}

impl Socket {
    fn entry(&self) -> &Entry {
        &self.reactor.entries[self.slot as usize]
    }

    fn poll_ready(&self, cx: &mut Context<'_>, bit: u8) -> Poll<io::Result<()>> {
        // Each ready answer spends the task's budget (`evloop::budget`), as tokio's
        // sockets do: a client that never stops sending cannot keep the worker to
        // itself.
        let entry = self.entry();
        // READ << 2 is READ_CLOSED, WRITE << 2 WRITE_CLOSED.
        if entry.ready.get() & (bit | bit << 2) != 0 {
            std::task::ready!(evloop::budget::poll_proceed(cx));
            return Poll::Ready(Ok(()));
        }
        if bit == WRITE && !entry.watching_writes.get() {
            // The first wait to write: from now on epoll watches writability too. An
            // edge-triggered MOD reports the socket at once if it is writable already
            // (room freed since the write that found it full).
            let both = libc::EPOLLIN | libc::EPOLLOUT;
            let slot = self.slot as usize;
            if let Err(e) =
                self.reactor
                    .control(libc::EPOLL_CTL_MOD, self.fd.as_raw_fd(), slot, both)
            {
                return Poll::Ready(Err(e));
            }
            entry.watching_writes.set(true);
        }
        let waiting = if bit == READ {
            &entry.reader
        } else {
            &entry.writer
        };
        let waker = match waiting.take() {
            Some(w) if w.will_wake(cx.waker()) => w,
            _ => cx.waker().clone(),
        };
        waiting.set(Some(waker));
        Poll::Pending
    }

    fn clear(&self, bit: u8) {
        let entry = self.entry();
        entry.ready.set(entry.ready.get() & !bit);
    }

    /// Whether a read would find bytes, the end of the stream or an error, as far as
    /// the events seen so far tell; spends none of the task's cooperative budget (a
    /// closing connection must not take "budget spent" for "nothing to read").
    pub fn read_ready_now(&self) -> bool {
        self.entry().ready.get() & (READ | READ_CLOSED) != 0
    }

    /// Ready when a read would find bytes, the end of the stream, or an error.
    pub fn poll_read_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.poll_ready(cx, READ)
    }

    /// Ready when a write would take bytes (or fail).
    pub fn poll_write_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.poll_ready(cx, WRITE)
    }

    /// Waits until the socket is readable.
    pub async fn readable(&self) -> io::Result<()> {
        std::future::poll_fn(|cx| self.poll_read_ready(cx)).await
    }

    /// Runs `f`, an operation on the socket; when it says EAGAIN, the readiness of
    /// `interest` is cleared, so the next wait goes to epoll.
    pub fn try_io<R>(
        &self,
        interest: Interest,
        f: impl FnOnce() -> io::Result<R>,
    ) -> io::Result<R> {
        let bit = if interest.is_readable() { READ } else { WRITE };
        let result = f();
        if let Err(e) = &result {
            if e.kind() == io::ErrorKind::WouldBlock {
                // A closed side never says EAGAIN: a closed bit seen with it was stale,
                // and must not make every later wait return at once.
                self.clear(bit | bit << 2);
            }
        }
        result
    }

    /// One recv(2); a short one clears the readiness (tokio does the same): the socket
    /// is drained, and the next read waits for epoll instead of making a recv that can
    /// only say EAGAIN.
    pub fn try_read(&self, buf: &mut [u8]) -> io::Result<usize> {
        let fd = self.fd.as_raw_fd();
        let n = self.try_io(Interest::READABLE, || sys::recv(fd, buf, 0))?;
        if n > 0 && n < buf.len() {
            self.clear(READ);
        }
        Ok(n)
    }

    /// Reads without taking: whether the peer has closed (0) or sent bytes.
    pub async fn peek(&self, buf: &mut [u8]) -> io::Result<usize> {
        let fd = self.fd.as_raw_fd();
        std::future::poll_fn(|cx| {
            poll_io(self, cx, READ, || {
                self.try_io(Interest::READABLE, || sys::recv(fd, buf, libc::MSG_PEEK))
            })
        })
        .await
    }

    /// Peeks without waiting: `WouldBlock` when nothing is there (the readiness is then
    /// cleared, as by any read that finds nothing).
    pub fn try_peek(&self, buf: &mut [u8]) -> io::Result<usize> {
        let fd = self.fd.as_raw_fd();
        self.try_io(Interest::READABLE, || sys::recv(fd, buf, libc::MSG_PEEK))
    }

    /// Forgets that the socket is readable, so that the next wait is for bytes (or an
    /// end) that come after now: what was peeked at was not enough.
    pub fn wait_for_more(&self) {
        self.clear(READ);
    }

    /// One send(2); a short one clears the writability.
    pub fn try_write(&self, buf: &[u8]) -> io::Result<usize> {
        let fd = self.fd.as_raw_fd();
        let n = self.try_io(Interest::WRITABLE, || {
            sys::send(fd, buf, libc::MSG_NOSIGNAL)
        })?;
        if n > 0 && n < buf.len() {
            self.clear(WRITE);
        }
        Ok(n)
    }

    /// One writev(2) of `bufs`; a short one clears the writability.
    pub fn try_write_vectored(&self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
        let fd = self.fd.as_raw_fd();
        let bufs = &bufs[..bufs.len().min(libc::UIO_MAXIOV as usize)];
        let n = self.try_io(Interest::WRITABLE, || sys::writev(fd, bufs))?;
        let len: usize = bufs.iter().map(|b| b.len()).sum();
        if n > 0 && n < len {
            self.clear(WRITE);
        }
        Ok(n)
    }

    /// Shuts the sending side: the peer reads the end after what was sent.
    pub fn shutdown_write(&self) -> io::Result<()> {
        sys::try_shutdown(self.fd.as_raw_fd(), libc::SHUT_WR)
    }
}

impl AsRawFd for Socket {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

/// Runs `op` (a non-blocking operation) until it is done or would block; on EAGAIN it
/// waits for readiness and tries again.
fn poll_io<R>(
    socket: &Socket,
    cx: &mut Context<'_>,
    bit: u8,
    mut op: impl FnMut() -> io::Result<R>,
) -> Poll<io::Result<R>> {
    loop {
        std::task::ready!(socket.poll_ready(cx, bit))?;
        match op() {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            other => return Poll::Ready(other),
        }
    }
}

impl AsyncRead for Socket {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &*self;
        // Into the unfilled part as it is, initialised or not (as tokio's sockets do):
        // recv(2) only writes, and zeroing a reader's spare room first (h2 hands a
        // buffer of uninitialised capacity) would cost a memset per read.
        // SAFETY: nothing de-initialises the unfilled part: recv(2) only writes it.
        let unfilled = unsafe { buf.unfilled_mut() };
        let n = std::task::ready!(poll_io(this, cx, READ, || {
            // SAFETY: the slice is only written by recv, never read; n bytes of it are
            // initialised after it returns n.
            let room = unsafe {
                std::slice::from_raw_parts_mut(unfilled.as_mut_ptr().cast::<u8>(), unfilled.len())
            };
            this.try_read(room)
        }))?;
        // SAFETY: recv wrote the first n bytes of the unfilled part.
        unsafe { buf.assume_init(n) };
        buf.advance(n);
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for Socket {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = &*self;
        poll_io(this, cx, WRITE, || this.try_write(buf))
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = &*self;
        poll_io(this, cx, WRITE, || this.try_write_vectored(bufs))
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(self.shutdown_write())
    }
}

#[cfg(test)]
mod tests {
    //! Not run under miri: the loop's epoll watches tokio's, and miri's epoll cannot
    //! watch an epoll descriptor ("epoll does not support this file description"). The
    //! system calls it makes are run under miri by `sys`'s tests.

    use super::*;
    use std::future::Future;
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// Runs `test` on a worker loop of `slots` slots, with its reactor.
    fn with_reactor<F: Future<Output = ()> + 'static>(
        slots: usize,
        test: impl FnOnce(Rc<Reactor>) -> F,
    ) {
        crate::net::event_loop::block_on(slots, |parts| {
            let test = test(parts.reactor.clone());
            async move {
                evloop::time::timeout(std::time::Duration::from_secs(10), test)
                    .await
                    .expect("the test timed out");
            }
        });
    }

    /// A client, and its connection registered in `slot`.
    fn connect(reactor: &Rc<Reactor>, listener: &TcpListener, slot: usize) -> (TcpStream, Socket) {
        let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (fd, _) = sys::accept(listener.as_raw_fd()).unwrap();
        (client, reactor.register(fd, slot).unwrap())
    }

    #[test]
    #[cfg_attr(miri, ignore)]
    fn an_event_wakes_the_reader_of_its_own_slot_only() {
        with_reactor(4, |reactor| async move {
            let listener = TcpListener::bind("127.0.0.1:0").unwrap();
            let (_quiet_client, quiet) = connect(&reactor, &listener, 1);
            let (mut client, socket) = connect(&reactor, &listener, 3);
            let quiet_reader = evloop::spawn_local(async move { quiet.readable().await });
            client.write_all(b"hello").unwrap();
            socket.readable().await.unwrap();
            evloop::yield_now().await;
            assert!(!quiet_reader.is_finished());
            let mut buf = [0u8; 16];
            assert_eq!(socket.try_read(&mut buf).unwrap(), 5);
            assert_eq!(&buf[..5], b"hello");
            // A short read took everything: the next wait goes to epoll.
            assert!(!socket.read_ready_now());
            quiet_reader.abort();
        });
    }

    #[test]
    #[cfg_attr(miri, ignore)]
    fn reads_into_uninitialised_room_and_then_sees_the_end() {
        with_reactor(2, |reactor| async move {
            let listener = TcpListener::bind("127.0.0.1:0").unwrap();
            let (mut client, mut socket) = connect(&reactor, &listener, 0);
            client.write_all(b"abc").unwrap();
            client.shutdown(std::net::Shutdown::Write).unwrap();
            let mut peeked = [0u8; 8];
            assert_eq!(socket.peek(&mut peeked).await.unwrap(), 3);
            // `read_buf` hands the socket a buffer's spare capacity, uninitialised.
            let mut buf = Vec::with_capacity(64);
            assert_eq!(socket.read_buf(&mut buf).await.unwrap(), 3);
            assert_eq!(buf, b"abc");
            assert_eq!(socket.read_buf(&mut buf).await.unwrap(), 0);
            assert!(socket.read_ready_now());
        });
    }

    #[test]
    #[cfg_attr(miri, ignore)]
    fn a_full_socket_waits_for_writability_and_then_resumes() {
        with_reactor(1, |reactor| async move {
            let listener = TcpListener::bind("127.0.0.1:0").unwrap();
            let (mut client, mut socket) = connect(&reactor, &listener, 0);
            let chunk = [b'x'; 64 * 1024];
            let mut sent = 0;
            loop {
                match socket.try_write(&chunk) {
                    Ok(n) => sent += n,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) => panic!("{e}"),
                }
            }
            let reader = std::thread::spawn(move || {
                let mut got = Vec::new();
                client.read_to_end(&mut got).unwrap();
                got
            });
            // Waits for epoll to say the socket is writable again (EPOLL_CTL_MOD).
            let tail = [io::IoSlice::new(b"after "), io::IoSlice::new(b"the wait")];
            let n = socket.write_vectored(&tail).await.unwrap();
            socket.write_all(&b"after the wait"[n..]).await.unwrap();
            socket.shutdown().await.unwrap();
            let got = tokio::task::spawn_blocking(move || reader.join().unwrap())
                .await
                .unwrap();
            assert_eq!(got.len(), sent + 14);
            assert!(got.ends_with(b"after the wait"));
        });
    }
}
