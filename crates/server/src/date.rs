use std::cell::{Cell, RefCell};
use std::io::Write;
use std::time::{Instant, UNIX_EPOCH};

/// The worker's clock: the `Date:` header line, formatted at most once per second, and
/// a monotonic millisecond count for connection timeouts. Both are read once per batch
/// of requests, not per request.
pub(crate) struct Clock {
    started: Instant,
    millis: Cell<u64>,
    /// Milliseconds of the wall clock (since the Unix epoch), as of the last refresh.
    unix_millis: Cell<u64>,
    second: Cell<u64>,
    line: RefCell<[u8; DATE_LINE_LEN]>,
    /// The same second as `[10/Oct/2000:13:55:36 +0000]`, for access logs.
    clf: RefCell<[u8; 28]>,
    /// And as `2000-10-10T13:55:36Z`, for JSON access logs.
    iso: Cell<[u8; 20]>,
    /// The loop's turn of the last refresh (`evloop::turn`).
    turn: Cell<u64>,
}

/// `Date: Sun, 06 Nov 1994 08:49:37 GMT\r\n`
const DATE_LINE_LEN: usize = 37;

/// `Sun, 06 Nov 1994 08:49:37 GMT`
pub(crate) const DATE_VALUE_LEN: usize = 29;

impl Clock {
    /// `epoch` is shared by the workers of a process, so their millisecond counts agree.
    pub fn new(epoch: Instant) -> Self {
        let clock = Clock {
            started: epoch,
            millis: Cell::new(0),
            unix_millis: Cell::new(0),
            second: Cell::new(u64::MAX),
            line: RefCell::new([0; DATE_LINE_LEN]),
            clf: RefCell::new([0; 28]),
            iso: Cell::new([0; 20]),
            turn: Cell::new(0),
        };
        clock.refresh();
        clock
    }

    /// Reads the clocks (vDSO calls) and reformats the date if the second changed. Never
    /// allocates: the date is formatted straight into a fixed array. Once per turn of the
    /// worker's loop: the requests a turn's events bring (about ten per turn with 100
    /// keep-alive clients) share one reading, as nginx's cached time does; the two vDSO
    /// calls per request were 0.8% of a static keep-alive request's CPU time. The
    /// readings are the loop's own (`evloop::time`), which the turn's timers, deadlines
    /// and logged times share.
    pub fn refresh(&self) {
        let turn = evloop::turn();
        if turn != 0 && turn == self.turn.replace(turn) {
            return;
        }
        let millis = evloop::time::now()
            .into_std()
            .saturating_duration_since(self.started);
        self.millis.set(millis.as_millis() as u64);
        let now = evloop::time::system_now();
        let since = now.duration_since(UNIX_EPOCH).unwrap_or_default();
        self.unix_millis.set(since.as_millis() as u64);
        let second = since.as_secs();
        if second != self.second.get() {
            self.second.set(second);
            let mut line = self.line.borrow_mut();
            let mut cursor = &mut line[..];
            // The date is always 29 bytes, so this cannot run out of room.
            let _ = write!(cursor, "Date: {}\r\n", httpdate::HttpDate::from(now));
            format_clf(second, &mut self.clf.borrow_mut());
            let mut iso = [0; 20];
            format_iso(second, &mut iso);
            self.iso.set(iso);
        }
    }

    /// The Unix second of the last refresh (the second the Date header says).
    pub fn second(&self) -> u64 {
        self.second.get()
    }

    /// The second of the last refresh in ISO 8601 (`2000-10-10T13:55:36Z`).
    pub fn iso_time(&self) -> [u8; 20] {
        self.iso.get()
    }

    pub fn clf_time(&self) -> std::cell::Ref<'_, [u8; 28]> {
        self.clf.borrow()
    }

    /// Milliseconds of the wall clock, as of the last refresh (the windows of a limit zone
    /// shared through Redis, which every node must agree on).
    pub fn unix_millis(&self) -> u64 {
        self.unix_millis.get()
    }

    /// Milliseconds since the process's epoch, as of the last refresh.
    pub fn millis(&self) -> u64 {
        self.millis.get()
    }

    pub fn write_date(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.line.borrow()[..]);
    }

    /// The Date field's value alone (`Sun, 06 Nov 1994 08:49:37 GMT`), for HTTP/2.
    pub fn date_value(&self) -> [u8; DATE_VALUE_LEN] {
        let line = self.line.borrow();
        let mut value = [0; DATE_VALUE_LEN];
        value.copy_from_slice(&line[b"Date: ".len()..b"Date: ".len() + DATE_VALUE_LEN]);
        value
    }
}

/// `[10/Oct/2000:13:55:36 +0000]` for a Unix second (UTC).
pub(crate) fn format_clf(unix: u64, out: &mut [u8; 28]) {
    const MONTHS: [&[u8; 3]; 12] = [
        b"Jan", b"Feb", b"Mar", b"Apr", b"May", b"Jun", b"Jul", b"Aug", b"Sep", b"Oct", b"Nov",
        b"Dec",
    ];
    let (year, month, day, secs) = civil(unix);
    let mut cursor = &mut out[..];
    let _ = write!(
        cursor,
        "[{:02}/{}/{:04}:{:02}:{:02}:{:02} +0000]",
        day,
        std::str::from_utf8(MONTHS[(month - 1) as usize]).unwrap_or("Jan"),
        year,
        secs / 3600,
        secs / 60 % 60,
        secs % 60
    );
}

/// `2000-10-10T13:55:36Z` for a Unix second (UTC): ISO 8601, as JSON log lines write it.
pub(crate) fn format_iso(unix: u64, out: &mut [u8; 20]) {
    let (year, month, day, secs) = civil(unix);
    let mut cursor = &mut out[..];
    let _ = write!(
        cursor,
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}Z",
        year,
        month,
        day,
        secs / 3600,
        secs / 60 % 60,
        secs % 60
    );
}

/// (year, month, day, second of the day) of a Unix second (UTC).
fn civil(unix: u64) -> (i64, i64, i64, u64) {
    let days = (unix / 86400) as i64;
    let secs = unix % 86400;
    // Civil from days (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day, secs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clf_time_formats_utc() {
        let mut out = [0u8; 28];
        format_clf(971_186_136, &mut out);
        assert_eq!(&out, b"[10/Oct/2000:13:55:36 +0000]");
        format_clf(0, &mut out);
        assert_eq!(&out, b"[01/Jan/1970:00:00:00 +0000]");
        let mut iso = [0u8; 20];
        format_iso(971_186_136, &mut iso);
        assert_eq!(&iso, b"2000-10-10T13:55:36Z");
        format_clf(1_709_210_096, &mut out); // leap day
        assert_eq!(&out, b"[29/Feb/2024:12:34:56 +0000]");
    }
}
