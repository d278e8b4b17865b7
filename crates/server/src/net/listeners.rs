//! The listening sockets: bound at start, added and removed by a reload, taken over from
//! the process this one replaces (binary upgrade) and handed to the one that replaces it.
//!
//! Each configured address has one `SO_REUSEPORT` socket per worker, so the kernel
//! spreads connections across workers. The process keeps its own descriptor of every
//! socket here (the set a worker syncs its accept loops to, and what an upgrade hands
//! over); each worker accepts on a duplicate of its own. Closing a socket is the only
//! thing that drops the connections queued on it (`net.ipv4.tcp_migrate_req` is 0 on
//! many kernels), so an upgrade passes the very same sockets on instead of binding anew.

use std::cell::Cell;
use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use tokio::sync::Notify;

use socket2::{Domain, Protocol, Socket, Type};

use crate::config::Kind;
use crate::error::Error;
use crate::sys;

/// Binds one listener with SO_REUSEPORT, so every worker can have its own and the kernel
/// balances new connections across them.
pub(crate) fn bind(addr: SocketAddr, backlog: u32) -> io::Result<OwnedFd> {
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    if addr.is_ipv6() {
        // [::]:8080 and 0.0.0.0:8080 can then both be listed.
        socket.set_only_v6(true)?;
    }
    socket.set_reuse_address(true)?;
    socket.set_reuse_port(true)?;
    // Responses go out as whole batches; Nagle would only delay the last segment. Set
    // here, not per connection: Linux gives an accepted socket its listener's
    // TCP_NODELAY, which saves a setsockopt(2) for every connection.
    socket.set_tcp_nodelay(true)?;
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    socket.listen(backlog.min(i32::MAX as u32) as i32)?;
    Ok(socket.into())
}

/// The socket buffers a QUIC socket asks for: what quinn's documentation and other QUIC
/// servers suggest for `net.core.rmem_max`.
const UDP_BUFFER: usize = 7_500_000;

/// Binds one UDP socket for QUIC with SO_REUSEPORT, one per worker like the TCP
/// listeners: the kernel hashes each client's 4-tuple to one of them, so a connection's
/// packets keep reaching the worker that holds it.
pub(crate) fn bind_udp(addr: SocketAddr) -> io::Result<OwnedFd> {
    let socket = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
    if addr.is_ipv6() {
        socket.set_only_v6(true)?;
    }
    socket.set_reuse_address(true)?;
    socket.set_reuse_port(true)?;
    // Room for a burst of packets between two reads (docs/http3.md, "UDP buffers"); the
    // kernel gives at most `net.core.rmem_max` / `wmem_max`, whatever is asked.
    let _ = socket.set_recv_buffer_size(UDP_BUFFER);
    let _ = socket.set_send_buffer_size(UDP_BUFFER);
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    Ok(socket.into())
}

/// One listening socket, with a number no other socket of this process gets (a worker
/// knows by it which sockets it accepts on already).
pub(crate) struct Listener {
    pub id: u64,
    pub fd: OwnedFd,
}

/// The sockets of one configured address.
pub(crate) struct Listening {
    /// The address as configured (port 0 included): what a reload or an upgrade
    /// matches addresses by.
    pub requested: SocketAddr,
    /// The address bound (port 0 resolved).
    pub local: SocketAddr,
    /// What its connections speak.
    pub kind: Kind,
    /// At least one per worker; worker `w` accepts on those whose index is `w` modulo
    /// the worker count (more than one each when taken over from a process that had
    /// more workers).
    pub sockets: Vec<Listener>,
}

/// Every address the process listens on; workers sync to it (`runtime`).
pub(crate) struct Listeners {
    pub set: Mutex<Vec<Listening>>,
    /// Bumped at every change of `set`.
    pub version: AtomicU64,
    next_id: AtomicU64,
}

impl Listeners {
    pub fn new() -> Listeners {
        Listeners {
            set: Mutex::new(Vec::new()),
            version: AtomicU64::new(1),
            next_id: AtomicU64::new(0),
        }
    }

    /// The sockets for `requested`: the inherited ones when there are any (joined by
    /// new ones bound beside them up to one per worker), else `workers` new ones.
    pub fn open(
        &self,
        requested: SocketAddr,
        kind: Kind,
        backlog: u32,
        workers: usize,
        inherited: &mut Inherited,
    ) -> Result<Listening, Error> {
        let err = |addr, source| Error::Listen { addr, source };
        let mut fds = inherited.take(requested, kind == Kind::Quic);
        let mut local = match fds.first() {
            Some(fd) => local_addr(fd.as_raw_fd()).map_err(|e| err(requested, e))?,
            None => requested,
        };
        if !fds.is_empty() {
            tracing::info!(
                address = %local,
                sockets = fds.len(),
                "listening sockets taken over from the previous process"
            );
        }
        while fds.len() < workers {
            // With port 0 the first bind picks a port; the other workers join that one.
            let fd = match kind {
                Kind::Quic => bind_udp(local),
                _ => bind(local, backlog),
            };
            let fd = fd.map_err(|e| err(local, e))?;
            if local.port() == 0 {
                local = local_addr(fd.as_raw_fd()).map_err(|e| err(local, e))?;
            }
            fds.push(fd);
        }
        Ok(Listening {
            requested,
            local,
            kind,
            sockets: fds
                .into_iter()
                .map(|fd| Listener {
                    id: self.next_id.fetch_add(1, Ordering::Relaxed),
                    fd,
                })
                .collect(),
        })
    }

    /// Replaces the set (workers pick the change up within their next periodic check).
    pub fn replace(&self, set: Vec<Listening>) {
        *self.set.lock().unwrap_or_else(|e| e.into_inner()) = set;
        self.version.fetch_add(1, Ordering::Release);
    }

    /// The `listen` addresses bound (HTTP/1.1 in cleartext), in the configured order.
    pub fn local_addrs(&self) -> Vec<SocketAddr> {
        let set = self.set.lock().unwrap_or_else(|e| e.into_inner());
        set.iter()
            .filter(|l| l.kind == Kind::Plain)
            .map(|l| l.local)
            .collect()
    }
}

/// Listening sockets handed over by the process this one replaces, by the address each
/// was configured as. What no configured address takes is closed once the server is
/// bound.
#[derive(Default)]
pub struct Inherited {
    sockets: Vec<(SocketAddr, Vec<OwnedFd>)>,
}

impl Inherited {
    /// Reads the hand-over description `ADDR=FD,FD;ADDR=FD` (what
    /// [`crate::Running::hand_over`] gives). Each descriptor must be an open listening
    /// TCP socket or a UDP one (`quic_listen`); this process owns them from now on.
    pub fn parse(spec: &str) -> Result<Inherited, String> {
        let mut sockets = Vec::new();
        for part in spec.split(';').filter(|p| !p.is_empty()) {
            let (addr, fds) = part
                .split_once('=')
                .ok_or_else(|| format!("`{part}` is not ADDR=FD,..."))?;
            let addr: SocketAddr = addr
                .parse()
                .map_err(|_| format!("`{addr}` is not a socket address"))?;
            let mut owned = Vec::new();
            for fd in fds.split(',') {
                let fd: RawFd = fd
                    .parse()
                    .map_err(|_| format!("`{fd}` is not a file descriptor"))?;
                if !is_listening_tcp(fd) && !is_udp(fd) {
                    return Err(format!(
                        "descriptor {fd} is neither a listening TCP socket nor a UDP one"
                    ));
                }
                // SAFETY: the previous process left it open for this one, which is its
                // only owner (checked above to be an open socket).
                let fd = unsafe { OwnedFd::from_raw_fd(fd) };
                set_cloexec(&fd)?;
                owned.push(fd);
            }
            sockets.push((addr, owned));
        }
        Ok(Inherited { sockets })
    }

    fn take(&mut self, requested: SocketAddr, udp: bool) -> Vec<OwnedFd> {
        // `remove`, not `swap_remove`: the same address (port 0) may be configured more
        // than once, in lists of different kinds, and each takes the sockets handed over
        // in the order the previous process listed them, which is the configured order.
        // A `quic_listen` address takes UDP sockets only, a TCP one TCP sockets only (a
        // TLS port and its QUIC port share a number).
        let fits = |fds: &[OwnedFd]| fds.first().is_some_and(|f| is_udp(f.as_raw_fd()) == udp);
        match self
            .sockets
            .iter()
            .position(|(a, fds)| *a == requested && fits(fds))
        {
            Some(i) => self.sockets.remove(i).1,
            None => Vec::new(),
        }
    }

    /// The addresses handed over that no configured address took (closed on drop).
    pub fn unused(&self) -> impl Iterator<Item = SocketAddr> + '_ {
        self.sockets.iter().map(|(a, _)| *a)
    }
}

fn local_addr(fd: RawFd) -> io::Result<SocketAddr> {
    // SAFETY: borrowed for the call only; `ManuallyDrop` keeps it open.
    let socket = std::mem::ManuallyDrop::new(unsafe { Socket::from_raw_fd(fd) });
    socket
        .local_addr()?
        .as_socket()
        .ok_or_else(|| io::Error::other("not an IP socket"))
}

fn is_listening_tcp(fd: RawFd) -> bool {
    let option = |name| sys::socket_option(fd, name).ok();
    option(libc::SO_TYPE) == Some(libc::SOCK_STREAM) && option(libc::SO_ACCEPTCONN) == Some(1)
}

fn is_udp(fd: RawFd) -> bool {
    sys::socket_option(fd, libc::SO_TYPE).ok() == Some(libc::SOCK_DGRAM)
}

fn set_cloexec(fd: &OwnedFd) -> Result<(), String> {
    sys::set_cloexec(fd.as_raw_fd()).map_err(|e| format!("descriptor {}: {e}", fd.as_raw_fd()))
}

/// Tells an accept loop to stop taking connections (its listener is closed when it
/// ends); it stops at once unless it is handing a connection it took to its task.
#[derive(Default)]
pub(crate) struct Stop {
    pub(crate) stopped: Cell<bool>,
    wake: Notify,
}

impl Stop {
    pub(crate) fn stop(&self) {
        self.stopped.set(true);
        self.wake.notify_one();
    }

    pub(crate) async fn stopped(&self) {
        while !self.stopped.get() {
            self.wake.notified().await;
        }
    }
}
