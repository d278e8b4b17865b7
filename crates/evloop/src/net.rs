//! TCP connections on the loop's epoll: the proxy's upstream connections, so that an
//! upstream socket's event wakes the loop from its one `epoll_wait` like a client
//! socket's, instead of going through tokio's epoll and a second wait (issue 49). UDP
//! sockets too ([`UdpSocket`]: QUIC's, whose packets the server's HTTP/3 reads).
//!
//! The server attaches its epoll to the loop ([`crate::Loop::attach_epoll`]) and hands
//! every event marked [`TAG`] to [`dispatch`]. A connection holds a row of a table of
//! readiness entries (a row per connection, reused; the table keeps its room), and is
//! registered once, edge-triggered for reads and writes; closing it removes it from
//! epoll. The semantics are tokio's, as the server's client sockets' are (readiness
//! cleared when an operation says EAGAIN, and after a short read or write).
//!
//! On a thread with no loop, or a loop with no epoll attached, a [`TcpStream`] is
//! tokio's.

use std::cell::{Cell, RefCell};
use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, RawFd};
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// The bit that marks an event's index (its low 32 bits) as one of these connections'.
pub const TAG: u32 = 1 << 30;

/// Readable.
pub const READ: u8 = 1;
/// Writable.
pub const WRITE: u8 = 2;
/// The peer closed its side, or the connection failed: a read says so, and keeps
/// saying so, so this is never cleared (a short read that takes the last bytes before
/// the end must not make the task wait for an event that will not come again).
pub const READ_CLOSED: u8 = 4;
/// The connection failed or hung up: a write says so; never cleared.
pub const WRITE_CLOSED: u8 = 8;

thread_local! {
    static IO: RefCell<Option<Rc<Io>>> = const { RefCell::new(None) };
}

/// The loop's epoll and the connections' readiness entries.
struct Io {
    epoll: RawFd,
    rows: RefCell<Vec<Row>>,
    free: RefCell<Vec<u32>>,
}

#[derive(Default)]
struct Row {
    generation: u32,
    entry: Option<Rc<Readiness>>,
}

/// A socket's readiness as epoll reported it (edge-triggered, tokio's semantics), and
/// the tasks waiting for it: these connections' and the server's client sockets'.
#[derive(Default)]
pub struct Readiness {
    /// [`READ`], [`WRITE`], [`READ_CLOSED`], [`WRITE_CLOSED`] seen and not cleared.
    pub ready: Cell<u8>,
    pub reader: Cell<Option<Waker>>,
    pub writer: Cell<Option<Waker>>,
}

impl Readiness {
    /// Records an epoll event's bits and wakes who waits for them.
    pub fn record(&self, events: u32) {
        let bits = events as i32;
        let mut ready = 0;
        if bits & libc::EPOLLIN != 0 {
            ready |= READ;
        }
        if bits & (libc::EPOLLRDHUP | libc::EPOLLHUP | libc::EPOLLERR) != 0 {
            ready |= READ_CLOSED;
        }
        if bits & libc::EPOLLOUT != 0 {
            ready |= WRITE;
        }
        if bits & (libc::EPOLLHUP | libc::EPOLLERR) != 0 {
            ready |= WRITE_CLOSED;
        }
        self.ready.set(self.ready.get() | ready);
        if ready & (READ | READ_CLOSED) != 0 {
            if let Some(w) = self.reader.take() {
                w.wake();
            }
        }
        if ready & (WRITE | WRITE_CLOSED) != 0 {
            if let Some(w) = self.writer.take() {
                w.wake();
            }
        }
    }
}

pub(crate) fn attach(epoll: RawFd) {
    IO.with(|io| {
        *io.borrow_mut() = Some(Rc::new(Io {
            epoll,
            rows: RefCell::new(Vec::with_capacity(64)),
            free: RefCell::new(Vec::with_capacity(64)),
        }))
    });
}

pub(crate) fn detach() {
    IO.with(|io| io.borrow_mut().take());
}

fn current() -> Option<Rc<Io>> {
    IO.with(|io| io.try_borrow().ok().and_then(|io| io.clone()))
}

/// Records an event (`data` as the server got it from epoll) and wakes who waits.
pub fn dispatch(data: u64, events: u32) {
    let (row, generation) = ((data as u32 & !TAG) as usize, (data >> 32) as u32);
    let entry = IO.with(|io| {
        let io = io.borrow();
        let rows = io.as_ref()?.rows.borrow();
        let r = rows.get(row)?;
        (r.generation == generation)
            .then(|| r.entry.clone())
            .flatten()
    });
    if let Some(entry) = entry {
        entry.record(events);
    }
}

/// A socket registered on the loop's epoll.
struct Registered<S: AsRawFd = std::net::TcpStream> {
    socket: S,
    entry: Rc<Readiness>,
    row: u32,
    io: Rc<Io>,
}

impl<S: AsRawFd> Registered<S> {
    fn new(io: Rc<Io>, socket: S) -> io::Result<Registered<S>> {
        let entry = Rc::new(Readiness::default());
        let (row, generation) = {
            let mut rows = io.rows.borrow_mut();
            let row = match io.free.borrow_mut().pop() {
                Some(row) => row,
                None => {
                    rows.push(Row::default());
                    (rows.len() - 1) as u32
                }
            };
            let r = &mut rows[row as usize];
            r.generation = r.generation.wrapping_add(1);
            r.entry = Some(entry.clone());
            (row, r.generation)
        };
        let mut event = libc::epoll_event {
            events: (libc::EPOLLIN | libc::EPOLLOUT | libc::EPOLLRDHUP | libc::EPOLLET) as u32,
            u64: (TAG | row) as u64 | (generation as u64) << 32,
        };
        // SAFETY: `event` is a live epoll_event, which the kernel only reads.
        let r = unsafe {
            libc::epoll_ctl(
                io.epoll,
                libc::EPOLL_CTL_ADD,
                socket.as_raw_fd(),
                &mut event,
            )
        };
        let registered = Registered {
            socket,
            entry,
            row,
            io,
        };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(registered)
    }

    fn poll_ready(&self, cx: &mut Context<'_>, bit: u8) -> Poll<()> {
        if self.entry.ready.get() & (bit | bit << 2) != 0 {
            return crate::budget::poll_proceed(cx);
        }
        let waiting = if bit == READ {
            &self.entry.reader
        } else {
            &self.entry.writer
        };
        let waker = match waiting.take() {
            Some(w) if w.will_wake(cx.waker()) => w,
            _ => cx.waker().clone(),
        };
        waiting.set(Some(waker));
        Poll::Pending
    }

    fn clear(&self, bits: u8) {
        self.entry.ready.set(self.entry.ready.get() & !bits);
    }

    /// Runs `op` until it is done or would block, waiting for `bit`'s readiness.
    fn poll_io<R>(
        &self,
        cx: &mut Context<'_>,
        bit: u8,
        mut op: impl FnMut(&S) -> io::Result<R>,
    ) -> Poll<io::Result<R>> {
        loop {
            std::task::ready!(self.poll_ready(cx, bit));
            match op(&self.socket) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => self.clear(bit | bit << 2),
                other => return Poll::Ready(other),
            }
        }
    }

    fn release(&self) {
        let mut rows = self.io.rows.borrow_mut();
        let r = &mut rows[self.row as usize];
        r.entry = None;
        r.generation = r.generation.wrapping_add(1);
        self.io.free.borrow_mut().push(self.row);
    }
}

impl<S: AsRawFd> Drop for Registered<S> {
    fn drop(&mut self) {
        // The descriptor closes after this, which takes it out of epoll.
        self.release();
    }
}

/// Whether this thread's loop has an epoll attached ([`UdpSocket::register`] needs one).
pub fn attached() -> bool {
    current().is_some()
}

/// A UDP socket on the loop's epoll, edge-triggered, with tokio's semantics: readiness
/// is cleared when an operation says `WouldBlock` ([`UdpSocket::try_io`]). Datagram
/// sockets have no end, so an error event is cleared like readiness (where a TCP
/// connection's is kept).
pub struct UdpSocket(Registered<std::net::UdpSocket>);

impl UdpSocket {
    /// Registers `socket` (non-blocking) on this thread's loop's epoll; an error on a
    /// thread without one ([`attached`]).
    pub fn register(socket: std::net::UdpSocket) -> io::Result<UdpSocket> {
        let io = current().ok_or_else(|| {
            io::Error::new(io::ErrorKind::Unsupported, "no event loop on this thread")
        })?;
        socket.set_nonblocking(true)?;
        Registered::new(io, socket).map(UdpSocket)
    }

    pub fn socket(&self) -> &std::net::UdpSocket {
        &self.0.socket
    }

    /// Ready when the socket may have a datagram to read.
    pub fn poll_readable(&self, cx: &mut Context<'_>) -> Poll<()> {
        self.0.poll_ready(cx, READ)
    }

    /// Ready when the socket may take a datagram to send.
    pub fn poll_writable(&self, cx: &mut Context<'_>) -> Poll<()> {
        self.0.poll_ready(cx, WRITE)
    }

    /// Runs `op` on the socket; a `WouldBlock` clears the readiness of `direction`
    /// ([`READ`] or [`WRITE`]), so the next poll waits for epoll.
    pub fn try_io<R>(
        &self,
        direction: u8,
        op: impl FnOnce(&std::net::UdpSocket) -> io::Result<R>,
    ) -> io::Result<R> {
        let result = op(&self.0.socket);
        if matches!(&result, Err(e) if e.kind() == io::ErrorKind::WouldBlock) {
            self.0.clear(direction | direction << 2);
        }
        result
    }
}

impl Drop for UdpSocket {
    fn drop(&mut self) {
        // Taken out of epoll here: the process may hold another descriptor of the same
        // socket (a listening socket's, kept for an upgrade), which would keep it
        // registered after this one closes.
        let mut event = libc::epoll_event { events: 0, u64: 0 };
        // SAFETY: as in `Registered::new`; the socket is registered there.
        unsafe {
            libc::epoll_ctl(
                self.0.io.epoll,
                libc::EPOLL_CTL_DEL,
                self.0.socket.as_raw_fd(),
                &mut event,
            )
        };
    }
}

enum Kind {
    Loop(Registered),
    Tokio(tokio::net::TcpStream),
}

/// A TCP connection (see the module's doc).
pub struct TcpStream(Kind);

impl TcpStream {
    /// Connects to `addr` ("host:port" or an address), trying each address the name
    /// resolves to in turn, as tokio's `connect` does.
    pub async fn connect(addr: &str) -> io::Result<TcpStream> {
        let Some(io) = current() else {
            return tokio::net::TcpStream::connect(addr)
                .await
                .map(|s| TcpStream(Kind::Tokio(s)));
        };
        let addrs: Vec<SocketAddr> = match addr.parse::<SocketAddr>() {
            Ok(a) => vec![a],
            Err(_) => tokio::net::lookup_host(addr).await?.collect(),
        };
        let mut last = None;
        for a in addrs {
            match connect_one(&io, a).await {
                Ok(s) => return Ok(s),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                "could not resolve to any address",
            )
        }))
    }

    pub fn set_nodelay(&self, on: bool) -> io::Result<()> {
        match &self.0 {
            Kind::Loop(r) => r.socket.set_nodelay(on),
            Kind::Tokio(s) => s.set_nodelay(on),
        }
    }

    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        match &self.0 {
            Kind::Loop(r) => r.socket.peer_addr(),
            Kind::Tokio(s) => s.peer_addr(),
        }
    }

    /// Reads what is there without waiting: `WouldBlock` when nothing has arrived
    /// since the last read that found nothing (no system call then, as tokio's).
    pub fn try_read(&self, buf: &mut [u8]) -> io::Result<usize> {
        match &self.0 {
            Kind::Loop(r) => {
                if r.entry.ready.get() & (READ | READ_CLOSED) == 0 {
                    return Err(io::ErrorKind::WouldBlock.into());
                }
                let result = io::Read::read(&mut &r.socket, buf);
                match &result {
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => r.clear(READ | READ_CLOSED),
                    Ok(n) if *n > 0 && *n < buf.len() => r.clear(READ),
                    _ => {}
                }
                result
            }
            Kind::Tokio(s) => s.try_read(buf),
        }
    }

    /// The connection as a standard socket (still non-blocking), out of the loop.
    pub fn into_std(self) -> io::Result<std::net::TcpStream> {
        match self.0 {
            Kind::Loop(r) => {
                let mut event = libc::epoll_event { events: 0, u64: 0 };
                // SAFETY: as in `Registered::new`; the socket is registered there.
                unsafe {
                    libc::epoll_ctl(
                        r.io.epoll,
                        libc::EPOLL_CTL_DEL,
                        r.socket.as_raw_fd(),
                        &mut event,
                    )
                };
                // A copy of the descriptor, then the registered one closed (its row
                // released): once a tunnel, each 101 costs this one dup.
                r.socket.try_clone()
            }
            Kind::Tokio(s) => s.into_std(),
        }
    }
}

async fn connect_one(io: &Rc<Io>, addr: SocketAddr) -> io::Result<TcpStream> {
    let socket = socket2::Socket::new(
        socket2::Domain::for_address(addr),
        socket2::Type::STREAM.nonblocking().cloexec(),
        Some(socket2::Protocol::TCP),
    )?;
    match socket.connect(&addr.into()) {
        Ok(()) => {}
        Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => {}
        Err(e) => return Err(e),
    }
    let registered: Registered = Registered::new(io.clone(), socket.into())?;
    std::future::poll_fn(|cx| registered.poll_ready(cx, WRITE)).await;
    if let Some(e) = registered.socket.take_error()? {
        return Err(e);
    }
    // Connected (getpeername fails if not: a refused connection can report writable
    // before SO_ERROR is set on some kernels).
    registered.socket.peer_addr()?;
    Ok(TcpStream(Kind::Loop(registered)))
}

impl AsRawFd for TcpStream {
    fn as_raw_fd(&self) -> RawFd {
        match &self.0 {
            Kind::Loop(r) => r.socket.as_raw_fd(),
            Kind::Tokio(s) => s.as_raw_fd(),
        }
    }
}

impl AsyncRead for TcpStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match &mut self.get_mut().0 {
            Kind::Loop(r) => {
                // SAFETY: recv(2) only writes the unfilled part; n bytes of it are
                // initialised after it returns n.
                let unfilled = unsafe { buf.unfilled_mut() };
                let room = unfilled.len();
                let n = std::task::ready!(r.poll_io(cx, READ, |s| {
                    // SAFETY: a live buffer of `room` bytes, only written.
                    let n =
                        unsafe { libc::recv(s.as_raw_fd(), unfilled.as_mut_ptr().cast(), room, 0) };
                    if n < 0 {
                        Err(io::Error::last_os_error())
                    } else {
                        Ok(n as usize)
                    }
                }))?;
                if n > 0 && n < room {
                    r.clear(READ);
                }
                // SAFETY: recv wrote the first n bytes of the unfilled part.
                unsafe { buf.assume_init(n) };
                buf.advance(n);
                Poll::Ready(Ok(()))
            }
            Kind::Tokio(s) => Pin::new(s).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for TcpStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match &mut self.get_mut().0 {
            Kind::Loop(r) => {
                let n =
                    std::task::ready!(r.poll_io(cx, WRITE, |s| io::Write::write(&mut &*s, buf)))?;
                if n > 0 && n < buf.len() {
                    r.clear(WRITE);
                }
                Poll::Ready(Ok(n))
            }
            Kind::Tokio(s) => Pin::new(s).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match &mut self.get_mut().0 {
            Kind::Loop(r) => {
                let n = std::task::ready!(
                    r.poll_io(cx, WRITE, |s| io::Write::write_vectored(&mut &*s, bufs))
                )?;
                let len: usize = bufs.iter().map(|b| b.len()).sum();
                if n > 0 && n < len {
                    r.clear(WRITE);
                }
                Poll::Ready(Ok(n))
            }
            Kind::Tokio(s) => Pin::new(s).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.get_mut().0 {
            Kind::Loop(r) => Poll::Ready(r.socket.shutdown(std::net::Shutdown::Write)),
            Kind::Tokio(s) => Pin::new(s).poll_shutdown(cx),
        }
    }
}
