//! The wake-up that reaches the loop parked in its `epoll_wait`, from any thread.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};

/// Wakes the loop from its wait, from any thread: an eventfd the loop's epoll
/// watches, written only while the loop is parked (so a busy loop is not sent a system
/// call per wake).
pub struct Notifier {
    parked: AtomicBool,
    fd: OwnedFd,
}

impl Notifier {
    pub fn new() -> io::Result<Notifier> {
        // SAFETY: eventfd takes no pointers; a non-negative result is a new descriptor.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Notifier {
            parked: AtomicBool::new(false),
            // SAFETY: fd is a descriptor just opened and owned by nothing else.
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
        })
    }

    /// Called after something was queued for the loop: ends its wait if it waits.
    pub fn wake(&self) {
        if self.parked.swap(false, Ordering::SeqCst) {
            let one = 1u64.to_ne_bytes();
            // SAFETY: writes 8 bytes from a live buffer to an eventfd we own. It can
            // fail only when the counter is full, when a wake is pending anyway.
            unsafe { libc::write(self.fd.as_raw_fd(), one.as_ptr().cast(), one.len()) };
        }
    }

    /// The loop is about to wait: from now on a wake writes the eventfd. The loop must
    /// look at its queues after this and before it waits (a wake queued before this
    /// call did not write).
    pub fn parking(&self) {
        self.parked.store(true, Ordering::SeqCst);
    }

    /// The loop is running again (it woke, or found work before it waited).
    pub fn running(&self) {
        self.parked.store(false, Ordering::SeqCst);
    }

    /// The descriptor the loop's epoll watches for reads.
    pub fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// Takes the pending wake-ups off the eventfd (after epoll said it was readable).
    pub fn clear(&self) {
        let mut count = [0u8; 8];
        // SAFETY: reads at most 8 bytes into a live buffer; EAGAIN (nothing pending)
        // is fine.
        unsafe { libc::read(self.fd.as_raw_fd(), count.as_mut_ptr().cast(), count.len()) };
    }
}
