//! The few system calls the engine makes directly: a timer descriptor and CPU times.

use std::io;
use std::os::fd::{FromRawFd, OwnedFd};
use std::time::Duration;

use crate::Error;

pub(crate) fn timerfd() -> Result<OwnedFd, Error> {
    // SAFETY: plain syscall; the fd is owned below.
    let fd = unsafe {
        libc::timerfd_create(
            libc::CLOCK_MONOTONIC,
            libc::TFD_NONBLOCK | libc::TFD_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error().into());
    }
    // SAFETY: fd is a fresh, valid descriptor we own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn rusage(who: libc::c_int) -> Duration {
    // SAFETY: getrusage fills the zeroed struct.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    if unsafe { libc::getrusage(who, &mut u) } != 0 {
        return Duration::ZERO;
    }
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(u.ru_utime) + tv(u.ru_stime)
}

/// User + system CPU time of the whole process so far.
pub fn process_cpu() -> Duration {
    rusage(libc::RUSAGE_SELF)
}

pub(crate) fn thread_cpu() -> Duration {
    rusage(libc::RUSAGE_THREAD)
}
