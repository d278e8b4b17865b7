//! The system calls the server makes itself, each behind a safe function: the only
//! place outside the reactor and the task table where the server writes `unsafe`.

use std::ffi::{CStr, CString};
use std::fs::File;
use std::io;
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
    // SAFETY: shutdown(2) takes any descriptor and changes no memory of ours; a
    // descriptor that is not a socket only makes it fail.
    unsafe { libc::shutdown(fd, how) };
}
