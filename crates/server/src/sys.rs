//! The system calls the server makes itself, each behind a safe function with the reason
//! it is sound: the one place where the server calls the C library. What `unsafe` is left
//! elsewhere is about Rust's own rules (a future pinned in its room in `net::tasks`,
//! bytes a read initialised), or about who owns a descriptor (one inherited from the
//! previous process, one registered with tokio), never a raw system call.
//!
//! The wrappers on the hot path (reads, writes, epoll) are `#[inline]` and make exactly
//! the call they name: no copy, no allocation, no extra system call. A descriptor is
//! passed as a `RawFd`: a wrong one can only make the call fail or act on another of the
//! process's descriptors (which the callers rule out), never touch memory.

use std::ffi::{CStr, CString};
use std::fs::File;
use std::io::{self, IoSlice};
use std::mem::MaybeUninit;
use std::net::SocketAddr;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// Opens a directory as a path (`O_PATH`) for files to be opened beneath it
/// ([`open_beneath`]): a site's root.
pub(crate) fn open_dir_path(path: &Path) -> io::Result<OwnedFd> {
    let c_path = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: c_path is a valid NUL-terminated string; the result is checked.
    let fd = unsafe {
        libc::open(
            c_path.as_ptr(),
            libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd was just opened and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Fails at start on kernels without openat2(2), rather than on the first request.
pub(crate) fn probe_openat2(root: RawFd) -> io::Result<()> {
    open_beneath(root, c".", libc::O_PATH).map(drop)
}

/// Opens `path` (relative) beneath `root`: `RESOLVE_BENEATH` makes the kernel refuse any
/// `..` or symlink (absolute or relative) that would leave the root, with EXDEV, so no
/// request can read outside it whatever the path normalisation above missed.
pub(crate) fn open_beneath(root: RawFd, path: &CStr, flags: i32) -> io::Result<File> {
    // SAFETY: open_how is plain data; all-zero is its documented neutral value.
    let mut how: libc::open_how = unsafe { std::mem::zeroed() };
    // O_NONBLOCK: opening a FIFO must not block the worker. openat2 refuses flags that
    // mean nothing with O_PATH, so those get only O_CLOEXEC.
    let extra = if flags & libc::O_PATH != 0 {
        libc::O_CLOEXEC
    } else {
        libc::O_CLOEXEC | libc::O_NONBLOCK | libc::O_NOCTTY
    };
    how.flags = (flags | extra) as u64;
    how.resolve = libc::RESOLVE_BENEATH | libc::RESOLVE_NO_MAGICLINKS;
    // SAFETY: path is NUL-terminated, how is a valid open_how of the size passed.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            root,
            path.as_ptr(),
            &how as *const libc::open_how,
            std::mem::size_of::<libc::open_how>(),
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel returned a new descriptor that nothing else owns.
    Ok(unsafe { File::from_raw_fd(fd as RawFd) })
}

/// Shuts down one or both directions of a socket (`libc::SHUT_RD`, `SHUT_WR`,
/// `SHUT_RDWR`). Whatever waits on it wakes with end-of-file or an error; a failure (the
/// socket is closed already) changes nothing anyone waits for, so it is not reported.
pub(crate) fn shutdown(fd: RawFd, how: i32) {
    let _ = try_shutdown(fd, how);
}

/// [`shutdown`], saying whether it failed (for `AsyncWrite::poll_shutdown`).
pub(crate) fn try_shutdown(fd: RawFd, how: i32) -> io::Result<()> {
    // SAFETY: shutdown(2) takes any descriptor and changes no memory of ours; a
    // descriptor that is not a socket only makes it fail.
    checked(unsafe { libc::shutdown(fd, how) })
}

/// accept4(2) of one connection, non-blocking and close-on-exec from the start (no
/// further system call to make it so), with the peer's address.
#[inline]
pub(crate) fn accept(listener: RawFd) -> io::Result<(OwnedFd, SocketAddr)> {
    // SAFETY: try_init hands a zeroed sockaddr_storage and its length, which accept4
    // fills with the peer's address.
    let (fd, addr) = unsafe {
        socket2::SockAddr::try_init(|storage, len| {
            let fd = libc::accept4(
                listener,
                storage.cast(),
                len,
                libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            );
            if fd < 0 {
                Err(io::Error::last_os_error())
            } else {
                Ok(fd)
            }
        })?
    };
    // SAFETY: fd is a new descriptor that nothing else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let peer = addr
        .as_socket()
        .ok_or_else(|| io::Error::other("accepted a socket that is not TCP/IP"))?;
    Ok((fd, peer))
}

/// The value of an integer socket option at `SOL_SOCKET` level (`SO_TYPE`, ...), or the
/// error that getsockopt(2) gave (`fd` is not a socket, not open).
pub(crate) fn socket_option(fd: RawFd, name: libc::c_int) -> io::Result<libc::c_int> {
    let mut value: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: value and len are live locals, len giving value's size; getsockopt writes
    // no more than that.
    checked(unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            name,
            (&mut value as *mut libc::c_int).cast(),
            &mut len,
        )
    })?;
    Ok(value)
}

/// Sets close-on-exec on `fd` (fcntl(2) `F_SETFD`).
pub(crate) fn set_cloexec(fd: RawFd) -> io::Result<()> {
    // SAFETY: F_SETFD takes an integer, not a pointer; no memory is involved.
    checked(unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) })
}

/// A new epoll instance, close-on-exec.
pub(crate) fn epoll_create() -> io::Result<OwnedFd> {
    // SAFETY: epoll_create1 has no memory arguments; the result is checked.
    let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd is a new descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// epoll_ctl(2): `op` (`EPOLL_CTL_ADD`, `MOD`, `DEL`) of `fd` on `epoll`, with `event`.
#[inline]
pub(crate) fn epoll_ctl(
    epoll: RawFd,
    op: libc::c_int,
    fd: RawFd,
    mut event: libc::epoll_event,
) -> io::Result<()> {
    // SAFETY: `event` is a live epoll_event, which the kernel only reads.
    checked(unsafe { libc::epoll_ctl(epoll, op, fd, &mut event) })
}

/// The events ready on `epoll`, into `events`: epoll_wait(2), waiting at most
/// `timeout_ms` for one (-1: until one comes; 0: not at all). Returns how many it wrote.
#[inline]
pub(crate) fn epoll_wait(
    epoll: RawFd,
    events: &mut [libc::epoll_event],
    timeout_ms: libc::c_int,
) -> io::Result<usize> {
    let room = events.len().min(libc::c_int::MAX as usize) as libc::c_int;
    // SAFETY: `events` has room for `room` entries, the most the kernel writes.
    let n = unsafe { libc::epoll_wait(epoll, events.as_mut_ptr(), room, timeout_ms) };
    counted(n as isize)
}

/// One recv(2) into `buf`, with `flags` (`MSG_PEEK`...).
///
/// recv, send and writev are made with syscall(2), not glibc's wrappers: those are
/// thread cancellation points, and each call pays `__pthread_enable_asynccancel` and
/// `__pthread_disable_asynccancel` around the system call, which the server never
/// needs (it cancels no thread). perf put the pair at 0.84% of a worker's time on the
/// static keep-alive path (2026-11-28, issue 49), the wrappers' own frames at 1.6%.
#[inline]
pub(crate) fn recv(fd: RawFd, buf: &mut [u8], flags: libc::c_int) -> io::Result<usize> {
    #[cfg(not(miri))]
    // SAFETY: buf is a live, writable buffer of buf.len() bytes; no address is asked for.
    let n = unsafe {
        libc::syscall(
            libc::SYS_recvfrom,
            fd,
            buf.as_mut_ptr(),
            buf.len(),
            flags,
            std::ptr::null_mut::<libc::sockaddr>(),
            std::ptr::null_mut::<libc::socklen_t>(),
        )
    } as isize;
    #[cfg(miri)]
    // SAFETY: as above.
    let n = unsafe { libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), flags) };
    counted(n)
}

/// One send(2) of `buf`, with `flags` (`MSG_NOSIGNAL`...).
#[inline]
pub(crate) fn send(fd: RawFd, buf: &[u8], flags: libc::c_int) -> io::Result<usize> {
    #[cfg(not(miri))]
    // SAFETY: buf is a live buffer of buf.len() bytes, which the kernel only reads; no
    // address is given.
    let n = unsafe {
        libc::syscall(
            libc::SYS_sendto,
            fd,
            buf.as_ptr(),
            buf.len(),
            flags,
            std::ptr::null::<libc::sockaddr>(),
            0 as libc::socklen_t,
        )
    } as isize;
    #[cfg(miri)]
    // SAFETY: as above.
    let n = unsafe { libc::send(fd, buf.as_ptr().cast(), buf.len(), flags) };
    counted(n)
}

/// One writev(2) of `bufs` (more than `UIO_MAXIOV` of them is refused with EINVAL).
#[inline]
pub(crate) fn writev(fd: RawFd, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
    let count = bufs.len().min(libc::c_int::MAX as usize) as libc::c_int;
    #[cfg(not(miri))]
    // SAFETY: IoSlice is ABI-compatible with iovec (std guarantees it on Unix); `count`
    // of them are live, each pointing at live bytes, which the kernel only reads.
    let n = unsafe { libc::syscall(libc::SYS_writev, fd, bufs.as_ptr(), count) } as isize;
    #[cfg(miri)]
    // SAFETY: as above.
    let n = unsafe { libc::writev(fd, bufs.as_ptr().cast(), count) };
    counted(n)
}

/// One sendmsg(2) of `bufs`, with `flags` (`MSG_MORE`...), no address or control data.
#[inline]
pub(crate) fn sendmsg(fd: RawFd, bufs: &[IoSlice<'_>], flags: libc::c_int) -> io::Result<usize> {
    // SAFETY: msghdr is plain data, all-zero its empty value; it points at `bufs.len()`
    // live IoSlices (ABI-compatible with iovec), which the kernel only reads.
    counted(unsafe {
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = bufs.as_ptr() as *mut libc::iovec;
        msg.msg_iovlen = bufs.len() as _;
        libc::sendmsg(fd, &msg, flags)
    })
}

/// One sendfile(2) of up to `count` bytes of `file` from `*offset` to `socket`; the
/// kernel moves `*offset` past what it sent.
#[inline]
pub(crate) fn sendfile(
    socket: RawFd,
    file: RawFd,
    offset: &mut libc::off_t,
    count: usize,
) -> io::Result<usize> {
    // SAFETY: offset points to a live off_t; no other memory is involved.
    counted(unsafe { libc::sendfile(socket, file, offset, count) })
}

/// One pread(2) of up to `buf.len()` bytes at `offset`: after `Ok(n)`, the first `n`
/// bytes of `buf` are initialised. EINTR is returned, not retried.
#[inline]
pub(crate) fn pread(fd: RawFd, buf: &mut [MaybeUninit<u8>], offset: u64) -> io::Result<usize> {
    // SAFETY: buf is live room for buf.len() bytes, which pread only writes.
    counted(unsafe {
        libc::pread(
            fd,
            buf.as_mut_ptr().cast(),
            buf.len(),
            offset as libc::off_t,
        )
    })
}

/// The result of a system call that returns a byte count, or -1 with errno.
#[inline]
fn counted(n: isize) -> io::Result<usize> {
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

/// The result of a system call that returns 0, or -1 with errno.
#[inline]
fn checked(r: libc::c_int) -> io::Result<()> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    //! Each wrapper on a real loopback connection. Under miri these run with isolation
    //! disabled (scripts/miri.sh), so that its shims of the socket calls and of epoll check
    //! the pointers and lengths handed to the kernel.

    use super::*;
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};
    use std::os::fd::AsRawFd;

    /// A client and the server's side of its connection, accepted with [`accept`].
    fn connected() -> (TcpStream, OwnedFd, SocketAddr) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server, peer) = accept(listener.as_raw_fd()).unwrap();
        (client, server, peer)
    }

    fn no_event() -> libc::epoll_event {
        libc::epoll_event { events: 0, u64: 0 }
    }

    /// Asks `epoll` until it has an event (the connection is on loopback: soon).
    fn next_event(epoll: &OwnedFd) -> libc::epoll_event {
        let mut events = [no_event(); 4];
        for _ in 0..1000 {
            let n = epoll_wait(epoll.as_raw_fd(), &mut events, 0).unwrap();
            if n > 0 {
                assert_eq!(n, 1);
                return events[0];
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        panic!("no epoll event");
    }

    #[test]
    fn accept_gives_the_peer_and_a_nonblocking_socket() {
        let (client, server, peer) = connected();
        assert_eq!(peer, client.local_addr().unwrap());
        let mut buf = [0u8; 8];
        let nothing_yet = recv(server.as_raw_fd(), &mut buf, 0).unwrap_err();
        assert_eq!(nothing_yet.kind(), io::ErrorKind::WouldBlock);
    }

    #[test]
    fn epoll_reports_reads_and_the_peer_closing_with_the_slot_data() {
        let (mut client, server, _) = connected();
        let fd = server.as_raw_fd();
        let epoll = epoll_create().unwrap();
        let data = 7 | 3 << 32;
        let event = libc::epoll_event {
            events: (libc::EPOLLIN | libc::EPOLLRDHUP | libc::EPOLLET) as u32,
            u64: data,
        };
        epoll_ctl(epoll.as_raw_fd(), libc::EPOLL_CTL_ADD, fd, event).unwrap();
        let mut events = [no_event(); 4];
        assert_eq!(epoll_wait(epoll.as_raw_fd(), &mut events, 0).unwrap(), 0);

        client.write_all(b"hello").unwrap();
        let event = next_event(&epoll);
        assert_eq!({ event.u64 }, data);
        assert_ne!(event.events & libc::EPOLLIN as u32, 0);
        let mut buf = [0u8; 16];
        assert_eq!(recv(fd, &mut buf, libc::MSG_PEEK).unwrap(), 5);
        assert_eq!(recv(fd, &mut buf, 0).unwrap(), 5);
        assert_eq!(&buf[..5], b"hello");

        drop(client);
        let event = next_event(&epoll);
        assert_ne!(event.events & libc::EPOLLRDHUP as u32, 0);
        assert_eq!(recv(fd, &mut buf, 0).unwrap(), 0);
    }

    #[test]
    fn send_and_shutdown_reach_the_peer() {
        let (mut client, server, _) = connected();
        let fd = server.as_raw_fd();
        assert_eq!(send(fd, b"pong", libc::MSG_NOSIGNAL).unwrap(), 4);
        try_shutdown(fd, libc::SHUT_WR).unwrap();
        // Exactly the bytes sent, then the end: not `read_to_end`, whose short read
        // leaves miri (2026-05-19) waiting for a readiness event that already came.
        let mut got = [0u8; 4];
        client.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"pong");
        assert_eq!(client.read(&mut got).unwrap(), 0);
        let unconnected = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None);
        let unconnected = unconnected.unwrap();
        let not_connected = try_shutdown(unconnected.as_raw_fd(), libc::SHUT_WR).unwrap_err();
        assert_eq!(not_connected.raw_os_error(), Some(libc::ENOTCONN));
    }

    #[test]
    fn pread_reads_at_an_offset_and_says_where_the_file_ends() {
        // Not `tempfile`: a plain file of std's, which miri opens on the host.
        let path = std::env::temp_dir().join(format!("tessera-sys-pread-{}", std::process::id()));
        std::fs::write(&path, b"hello world").unwrap();
        let file = File::open(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        let mut buf = [MaybeUninit::<u8>::uninit(); 8];
        let n = pread(file.as_raw_fd(), &mut buf, 6).unwrap();
        // A read may be short (miri makes some so on purpose): a prefix of the rest.
        assert!((1..=5).contains(&n));
        // SAFETY: pread said it initialised the first n bytes.
        let read: Vec<u8> = buf[..n]
            .iter()
            .map(|b| unsafe { b.assume_init() })
            .collect();
        assert_eq!(read, b"world"[..n]);
        assert_eq!(pread(file.as_raw_fd(), &mut buf, 11).unwrap(), 0);
    }

    #[test]
    // Miri (nightly 2026-05-19) has no writev, sendmsg or sendfile shim.
    #[cfg_attr(miri, ignore)]
    fn vectored_writes_and_sendfile_reach_the_peer() {
        let (mut client, server, _) = connected();
        let fd = server.as_raw_fd();
        let written = writev(fd, &[IoSlice::new(b"ab"), IoSlice::new(b"cd")]).unwrap();
        assert_eq!(written, 4);
        let flags = libc::MSG_MORE | libc::MSG_NOSIGNAL;
        assert_eq!(sendmsg(fd, &[IoSlice::new(b"ef")], flags).unwrap(), 2);
        let mut file = tempfile::tempfile().unwrap();
        file.write_all(b"0123456789").unwrap();
        let mut offset = 2;
        assert_eq!(sendfile(fd, file.as_raw_fd(), &mut offset, 3).unwrap(), 3);
        assert_eq!(offset, 5);
        shutdown(fd, libc::SHUT_WR);
        let mut got = Vec::new();
        client.read_to_end(&mut got).unwrap();
        assert_eq!(got, b"abcdef234");
    }

    #[test]
    // Miri's getsockopt knows only SO_ERROR (and TTL), its fcntl no F_SETFD.
    #[cfg_attr(miri, ignore)]
    fn socket_options_and_close_on_exec() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let fd = listener.as_raw_fd();
        assert_eq!(socket_option(fd, libc::SO_ACCEPTCONN).unwrap(), 1);
        assert_eq!(socket_option(fd, libc::SO_TYPE).unwrap(), libc::SOCK_STREAM);
        let (_client, server, _) = connected();
        assert_eq!(
            socket_option(server.as_raw_fd(), libc::SO_ACCEPTCONN).unwrap(),
            0
        );
        let file = tempfile::tempfile().unwrap();
        let not_a_socket = socket_option(file.as_raw_fd(), libc::SO_TYPE).unwrap_err();
        assert_eq!(not_a_socket.raw_os_error(), Some(libc::ENOTSOCK));

        // SAFETY: dup(2) and fcntl(2) of a descriptor the test owns; no memory involved.
        let copy = unsafe { OwnedFd::from_raw_fd(libc::dup(fd)) };
        let cloexec = || unsafe { libc::fcntl(copy.as_raw_fd(), libc::F_GETFD) } & libc::FD_CLOEXEC;
        assert_eq!(cloexec(), 0);
        set_cloexec(copy.as_raw_fd()).unwrap();
        assert_eq!(cloexec(), libc::FD_CLOEXEC);
    }
}
