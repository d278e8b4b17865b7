use std::cell::{Cell, RefCell};
use std::time::{SystemTime, UNIX_EPOCH};

/// The `Date:` header line, formatted at most once per second per worker.
pub(crate) struct DateCache {
    second: Cell<u64>,
    line: RefCell<[u8; DATE_LINE_LEN]>,
}

/// `Date: Sun, 06 Nov 1994 08:49:37 GMT\r\n`
const DATE_LINE_LEN: usize = 37;

impl DateCache {
    pub fn new() -> Self {
        let cache = DateCache {
            second: Cell::new(u64::MAX),
            line: RefCell::new([0; DATE_LINE_LEN]),
        };
        cache.refresh();
        cache
    }

    /// Reformats the line if the second changed. Called once per batch of requests; the
    /// clock read is a vDSO call, the formatting happens once a second.
    pub fn refresh(&self) {
        let now = SystemTime::now();
        let second = now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
        if second != self.second.get() {
            self.second.set(second);
            let text = httpdate::fmt_http_date(now);
            let mut line = self.line.borrow_mut();
            line[..6].copy_from_slice(b"Date: ");
            line[6..35].copy_from_slice(&text.as_bytes()[..29]);
            line[35..].copy_from_slice(b"\r\n");
        }
    }

    pub fn second(&self) -> u64 {
        self.second.get()
    }

    pub fn write(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.line.borrow()[..]);
    }
}
