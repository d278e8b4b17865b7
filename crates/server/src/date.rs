use std::cell::{Cell, RefCell};
use std::io::Write;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// The worker's clock: the `Date:` header line, formatted at most once per second, and
/// a monotonic millisecond count for connection timeouts. Both are read once per batch
/// of requests, not per request.
pub(crate) struct Clock {
    started: Instant,
    millis: Cell<u64>,
    second: Cell<u64>,
    line: RefCell<[u8; DATE_LINE_LEN]>,
    /// The same second as `[10/Oct/2000:13:55:36 +0000]`, for access logs.
    clf: RefCell<[u8; 28]>,
}

/// `Date: Sun, 06 Nov 1994 08:49:37 GMT\r\n`
const DATE_LINE_LEN: usize = 37;

impl Clock {
    /// `epoch` is shared by the workers of a process, so their millisecond counts agree.
    pub fn new(epoch: Instant) -> Self {
        let clock = Clock {
            started: epoch,
            millis: Cell::new(0),
            second: Cell::new(u64::MAX),
            line: RefCell::new([0; DATE_LINE_LEN]),
            clf: RefCell::new([0; 28]),
        };
        clock.refresh();
        clock
    }

    /// Reads the clocks (vDSO calls) and reformats the date if the second changed. Never
    /// allocates: the date is formatted straight into a fixed array.
    pub fn refresh(&self) {
        self.millis.set(self.started.elapsed().as_millis() as u64);
        let now = SystemTime::now();
        let second = now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
        if second != self.second.get() {
            self.second.set(second);
            let mut line = self.line.borrow_mut();
            let mut cursor = &mut line[..];
            // The date is always 29 bytes, so this cannot run out of room.
            let _ = write!(cursor, "Date: {}\r\n", httpdate::HttpDate::from(now));
            crate::access_log::clf_time(second, &mut self.clf.borrow_mut());
        }
    }

    /// The Unix second of the last refresh (the second the Date header says).
    pub fn second(&self) -> u64 {
        self.second.get()
    }

    pub fn clf_time(&self) -> std::cell::Ref<'_, [u8; 28]> {
        self.clf.borrow()
    }

    /// Milliseconds since the process's epoch, as of the last refresh.
    pub fn millis(&self) -> u64 {
        self.millis.get()
    }

    pub fn write_date(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.line.borrow()[..]);
    }
}
