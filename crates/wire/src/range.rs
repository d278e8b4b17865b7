//! Byte ranges (RFC 9110 section 14): parsing a `Range: bytes=...` header against a
//! representation's length into the slices to send, and the framing of a
//! multipart/byteranges body (its length, each part's head, the closing line). Shared by
//! the server's static files and the proxy's cache.

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, Ordering};

/// Most ranges served from one request. More is ignored (the whole representation is
/// sent), as RFC 9110 section 14.2 allows: a long list of small ranges costs the server
/// far more than it saves the client. The output batch has room for this many parts.
pub const MAX_RANGES: usize = 16;

/// The ranges of one request, each `first..=last`, in a fixed array (no allocation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RangeSet {
    ranges: [(u64, u64); MAX_RANGES],
    count: usize,
}

impl RangeSet {
    pub fn as_slice(&self) -> &[(u64, u64)] {
        &self.ranges[..self.count]
    }
}

// Lives on the stack for one request; boxing the set would allocate.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ranges {
    /// Not a byte range request tessera serves (another unit, too many ranges, an empty
    /// representation): send the whole representation with 200.
    Ignore,
    /// No range overlaps the representation, or the byte ranges are malformed (RFC 9110
    /// section 14.2: "invalid or unsatisfiable"): 416 with `Content-Range: bytes */len`.
    Unsatisfiable,
    /// 206 with these ranges (one: a plain body; several: multipart/byteranges).
    Satisfiable(RangeSet),
}

/// Parses `value` for a representation of `len` bytes. Ranges that start beyond the end
/// are dropped and ends beyond it are cut to it (section 14.1.1). An empty
/// representation has no byte to point at, and section 14.1.1 still calls a suffix range
/// of it satisfiable, which no Content-Range can express: its ranges are ignored (200
/// with the empty body, as nginx answers). When ranges overlap
/// they are sorted and merged, so no byte is sent twice (section 14.2 lets a server
/// coalesce them); ranges that do not overlap are served in the order asked.
pub fn parse(value: &[u8], len: u64) -> Ranges {
    let value = crate::trim_ows(value);
    let Some(eq) = value.iter().position(|&b| b == b'=') else {
        return Ranges::Ignore;
    };
    if !crate::trim_ows(&value[..eq]).eq_ignore_ascii_case(b"bytes") || len == 0 {
        return Ranges::Ignore;
    }
    let mut set = RangeSet {
        ranges: [(0, 0); MAX_RANGES],
        count: 0,
    };
    let mut specs = 0;
    for spec in value[eq + 1..].split(|&b| b == b',') {
        let spec = crate::trim_ows(spec);
        if spec.is_empty() {
            // Empty list elements are allowed (RFC 9110 section 5.6.1).
            continue;
        }
        specs += 1;
        if specs > MAX_RANGES {
            return Ranges::Ignore;
        }
        let Some(dash) = spec.iter().position(|&b| b == b'-') else {
            return Ranges::Unsatisfiable;
        };
        let (first, last) = (&spec[..dash], &spec[dash + 1..]);
        let range = if first.is_empty() {
            // A suffix: the last N bytes.
            let Some(suffix) = number(last) else {
                return Ranges::Unsatisfiable;
            };
            if suffix == 0 {
                None
            } else {
                Some((len - suffix.min(len), len - 1))
            }
        } else {
            let Some(first) = number(first) else {
                return Ranges::Unsatisfiable;
            };
            let last = if last.is_empty() {
                u64::MAX
            } else {
                match number(last) {
                    Some(last) if last >= first => last,
                    _ => return Ranges::Unsatisfiable,
                }
            };
            (first < len).then(|| (first, last.min(len - 1)))
        };
        if let Some(range) = range {
            set.ranges[set.count] = range;
            set.count += 1;
        }
    }
    if set.count == 0 {
        return Ranges::Unsatisfiable;
    }
    coalesce_if_overlapping(&mut set);
    Ranges::Satisfiable(set)
}

fn coalesce_if_overlapping(set: &mut RangeSet) {
    let mut sorted = set.ranges;
    let sorted = &mut sorted[..set.count];
    sorted.sort_unstable();
    if sorted.windows(2).all(|w| w[0].1 < w[1].0) {
        return;
    }
    let mut count = 0;
    for &(first, last) in sorted.iter() {
        if count > 0 && first <= set.ranges[count - 1].1.saturating_add(1) {
            let merged = &mut set.ranges[count - 1].1;
            *merged = (*merged).max(last);
        } else {
            set.ranges[count] = (first, last);
            count += 1;
        }
    }
    set.count = count;
}

/// The longest Content-Range value: `bytes ` and three numbers of up to 20 digits.
pub const CONTENT_RANGE_MAX: usize = 6 + 3 * 20 + 2;

/// The Content-Range value `bytes FIRST-LAST/LEN`, written into `room`.
pub fn content_range(room: &mut [u8; CONTENT_RANGE_MAX], first: u64, last: u64, len: u64) -> &[u8] {
    let mut numbers = itoa::Buffer::new();
    room[..6].copy_from_slice(b"bytes ");
    let mut at = 6;
    let digits = numbers.format(first).as_bytes();
    room[at..at + digits.len()].copy_from_slice(digits);
    at += digits.len();
    for (sep, n) in [(b'-', last), (b'/', len)] {
        room[at] = sep;
        at += 1;
        let digits = numbers.format(n).as_bytes();
        room[at..at + digits.len()].copy_from_slice(digits);
        at += digits.len();
    }
    &room[..at]
}

/// A multipart boundary that no body is likely to contain: 16 hex digits from a keyed
/// hash of a counter, so it is neither predictable nor repeated within a process.
pub fn boundary() -> [u8; 16] {
    static PARTS: AtomicU64 = AtomicU64::new(0);
    let n = RandomState::new().hash_one(PARTS.fetch_add(1, Ordering::Relaxed));
    let mut out = [0u8; 16];
    for (i, digit) in out.iter_mut().enumerate() {
        *digit = b"0123456789abcdef"[(n >> (60 - 4 * i)) as usize & 0xf];
    }
    out
}

/// The `Content-Type` value of a multipart/byteranges body with `boundary`, written into
/// `room`.
pub fn multipart_type<'r>(room: &'r mut [u8; 64], boundary: &[u8; 16]) -> &'r [u8] {
    let prefix = b"multipart/byteranges; boundary=";
    room[..prefix.len()].copy_from_slice(prefix);
    room[prefix.len()..prefix.len() + boundary.len()].copy_from_slice(boundary);
    &room[..prefix.len() + boundary.len()]
}

/// The length of a multipart/byteranges body (RFC 9110 section 14.6) of `ranges` of a
/// representation of `len` bytes and type `content_type`, as [`part_head`] and
/// [`closing`] write it.
pub fn multipart_length(
    ranges: &[(u64, u64)],
    boundary: &[u8],
    content_type: &[u8],
    len: u64,
) -> u64 {
    let mut numbers = itoa::Buffer::new();
    let total_len = numbers.format(len).len() as u64;
    // Each part: CRLF "--" boundary CRLF, Content-Type, Content-Range, CRLF, data.
    let part_overhead = (2 + 2 + boundary.len() + 2) as u64
        + ("Content-Type: ".len() + content_type.len() + 2) as u64
        + ("Content-Range: bytes ".len() as u64 + 1 + 1 + total_len + 2)
        + 2;
    let mut length = (2 + 2 + boundary.len() + 2 + 2) as u64;
    for &(first, last) in ranges {
        length += part_overhead
            + numbers.format(first).len() as u64
            + numbers.format(last).len() as u64
            + (last - first + 1);
    }
    length
}

/// The head of one part, written to `out`: the delimiter, its Content-Type and
/// Content-Range, the blank line; the part's bytes follow.
pub fn part_head(
    out: &mut impl Extend<u8>,
    boundary: &[u8],
    content_type: &[u8],
    (first, last): (u64, u64),
    len: u64,
) {
    let mut range = [0u8; CONTENT_RANGE_MAX];
    for piece in [
        &b"\r\n--"[..],
        boundary,
        b"\r\nContent-Type: ",
        content_type,
        b"\r\nContent-Range: ",
        content_range(&mut range, first, last, len),
        b"\r\n\r\n",
    ] {
        out.extend(piece.iter().copied());
    }
}

/// The closing delimiter, written to `out` after the last part.
pub fn closing(out: &mut impl Extend<u8>, boundary: &[u8]) {
    for piece in [&b"\r\n--"[..], boundary, b"--\r\n"] {
        out.extend(piece.iter().copied());
    }
}

/// Decimal digits as a number; values too large for u64 saturate (they are beyond any
/// file anyway).
fn number(digits: &[u8]) -> Option<u64> {
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(digits.iter().fold(0u64, |n, &d| {
        n.saturating_mul(10).saturating_add((d - b'0') as u64)
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq)]
    enum Not {
        Ignore,
        Unsatisfiable,
    }

    fn ranges(value: &str, len: u64) -> Result<Vec<(u64, u64)>, Not> {
        match parse(value.as_bytes(), len) {
            Ranges::Satisfiable(set) => Ok(set.as_slice().to_vec()),
            Ranges::Ignore => Err(Not::Ignore),
            Ranges::Unsatisfiable => Err(Not::Unsatisfiable),
        }
    }

    #[test]
    fn single_ranges() {
        assert_eq!(ranges("bytes=0-4", 12), Ok(vec![(0, 4)]));
        assert_eq!(ranges("bytes=6-", 12), Ok(vec![(6, 11)]));
        assert_eq!(ranges("bytes=-3", 12), Ok(vec![(9, 11)]));
        assert_eq!(ranges("bytes=-100", 12), Ok(vec![(0, 11)]));
        assert_eq!(ranges("bytes=5-1000", 12), Ok(vec![(5, 11)]));
        assert_eq!(ranges("Bytes = 1-1", 12), Ok(vec![(1, 1)]));
        assert_eq!(
            ranges("bytes=0-99999999999999999999999", 12),
            Ok(vec![(0, 11)])
        );
    }

    #[test]
    fn several_ranges_keep_order_unless_they_overlap() {
        assert_eq!(ranges("bytes=6-7,0-1", 12), Ok(vec![(6, 7), (0, 1)]));
        assert_eq!(ranges("bytes=0-1, ,2-3", 12), Ok(vec![(0, 1), (2, 3)]));
        assert_eq!(ranges("bytes=4-8,0-5", 12), Ok(vec![(0, 8)]));
        assert_eq!(ranges("bytes=0-,0-,0-", 12), Ok(vec![(0, 11)]));
        assert_eq!(ranges("bytes=0-1,20-30", 12), Ok(vec![(0, 1)]));
    }

    #[test]
    fn unsatisfiable_and_ignored() {
        assert_eq!(ranges("bytes=12-", 12), Err(Not::Unsatisfiable));
        assert_eq!(ranges("bytes=-0", 12), Err(Not::Unsatisfiable));
        assert_eq!(ranges("bytes=5-1", 12), Err(Not::Unsatisfiable));
        assert_eq!(ranges("bytes=a-b", 12), Err(Not::Unsatisfiable));
        assert_eq!(ranges("bytes=", 12), Err(Not::Unsatisfiable));
        assert_eq!(ranges("bytes=1", 12), Err(Not::Unsatisfiable));
        assert_eq!(ranges("bytes=0-1,x", 12), Err(Not::Unsatisfiable));
        assert_eq!(ranges("items=0-1", 12), Err(Not::Ignore));
        assert_eq!(ranges("bytes=0-0", 0), Err(Not::Ignore));
        assert_eq!(ranges("bytes=-1", 0), Err(Not::Ignore));
        let many = (0..=MAX_RANGES)
            .map(|i| format!("{i}-{i}"))
            .collect::<Vec<_>>();
        assert_eq!(
            ranges(&format!("bytes={}", many.join(",")), 100),
            Err(Not::Ignore)
        );
    }
}
