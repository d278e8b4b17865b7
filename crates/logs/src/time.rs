//! Times of log lines: the hour a line falls in (for the report's hours, cached across
//! lines that share it), seconds in UTC (for the Parquet export), and civil dates.

pub(crate) fn digits(value: &[u8]) -> Option<u32> {
    let mut n = 0u32;
    for &b in value {
        if !b.is_ascii_digit() {
            return None;
        }
        n = n * 10 + (b - b'0') as u32;
    }
    Some(n)
}

/// The hour of the last time field parsed, by the bytes the time parser reads to find and
/// check it in a field at least 20 bytes long (the first 15 and the 18th, in both
/// syntaxes): the same bytes give the same answer, so they need not be parsed again.
#[derive(Debug, Default, Clone)]
pub struct HourCache {
    last: Option<(u128, i64)>,
}

impl HourCache {
    #[inline]
    pub(crate) fn hour(&mut self, value: &[u8]) -> Option<i64> {
        let inner = match value {
            [b'[', inner @ .., b']'] => inner,
            _ => value,
        };
        if inner.len() < 20 {
            return parse_hour(value);
        }
        let mut key = [0; 16];
        key[..15].copy_from_slice(&inner[..15]);
        key[15] = inner[17];
        let key = u128::from_ne_bytes(key);
        match self.last {
            Some((last, hour)) if last == key => Some(hour),
            _ => {
                let hour = parse_hour(value)?;
                self.last = Some((key, hour));
                Some(hour)
            }
        }
    }
}

/// `10/Oct/2000:13:55:36 -0700` (Apache, nginx `$time_local`) or `2000-10-10T13:55:36-07:00`
/// (nginx `$time_iso8601`) → hours since 1970 on the log's own clock.
#[inline]
pub(crate) fn parse_hour(value: &[u8]) -> Option<i64> {
    let value = match value {
        [b'[', inner @ .., b']'] => inner,
        _ => value,
    };
    let (year, month, day, hour) = if value.len() >= 20 && value[2] == b'/' && value[6] == b'/' {
        let month = match &value[3..6] {
            b"Jan" => 1,
            b"Feb" => 2,
            b"Mar" => 3,
            b"Apr" => 4,
            b"May" => 5,
            b"Jun" => 6,
            b"Jul" => 7,
            b"Aug" => 8,
            b"Sep" => 9,
            b"Oct" => 10,
            b"Nov" => 11,
            b"Dec" => 12,
            _ => return None,
        };
        if value[11] != b':' || value[14] != b':' || value[17] != b':' {
            return None;
        }
        (
            digits(&value[7..11])?,
            month,
            digits(&value[..2])?,
            digits(&value[12..14])?,
        )
    } else if value.len() >= 19 && value[4] == b'-' && value[7] == b'-' && value[10] == b'T' {
        let month = digits(&value[5..7])?;
        (
            digits(&value[..4])?,
            month,
            digits(&value[8..10])?,
            digits(&value[11..13])?,
        )
    } else {
        return None;
    };
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) || hour > 23 {
        return None;
    }
    Some(days_from_civil(year as i64, month, day) * 24 + hour as i64)
}

/// A time field as seconds since 1970 in UTC, its offset applied: `[10/Oct/2000:13:55:36
/// -0700]` (Apache, nginx `$time_local`), `2000-10-10T13:55:36-07:00` (nginx
/// `$time_iso8601`) or `2000-10-10T20:55:36Z` (tessera's JSON `time`). `None` for
/// anything else (an hour past 23, a minute past 59, an offset that is not `±HHMM`,
/// `±HH:MM` or `Z`).
pub fn utc_seconds(value: &[u8]) -> Option<i64> {
    let value = match value {
        [b'[', inner @ .., b']'] => inner,
        _ => value,
    };
    let hour = parse_hour(value)?;
    let (minute, second, offset) = match value {
        // `10/Oct/2000:13:55:36 -0700`
        [_, _, b'/', _, _, _, b'/', _, _, _, _, b':', _, _, b':', m1, m2, b':', s1, s2, rest @ ..] =>
        {
            let offset = match rest {
                [] => 0,
                [b' ', zone @ ..] => zone_seconds(zone)?,
                _ => return None,
            };
            (digits(&[*m1, *m2])?, digits(&[*s1, *s2])?, offset)
        }
        // `2000-10-10T13:55:36-07:00`, `...Z`, fractions of a second dropped.
        [_, _, _, _, b'-', _, _, b'-', _, _, b'T', _, _, b':', m1, m2, b':', s1, s2, rest @ ..] => {
            let mut rest = rest;
            if let [b'.', fraction @ ..] = rest {
                let digits = fraction.iter().take_while(|b| b.is_ascii_digit()).count();
                rest = &fraction[digits..];
            }
            (
                digits(&[*m1, *m2])?,
                digits(&[*s1, *s2])?,
                zone_seconds(rest)?,
            )
        }
        _ => return None,
    };
    if minute > 59 || second > 60 {
        return None;
    }
    Some(hour * 3600 + i64::from(minute) * 60 + i64::from(second) - offset)
}

/// `-0700`, `+05:30`, `Z` (or nothing, read as UTC) → seconds east of UTC.
fn zone_seconds(zone: &[u8]) -> Option<i64> {
    let (sign, h, m) = match zone {
        [] | [b'Z'] => return Some(0),
        [sign @ (b'+' | b'-'), h1, h2, m1, m2] | [sign @ (b'+' | b'-'), h1, h2, b':', m1, m2] => {
            (*sign, digits(&[*h1, *h2])?, digits(&[*m1, *m2])?)
        }
        _ => return None,
    };
    let seconds = i64::from(h) * 3600 + i64::from(m) * 60;
    Some(if sign == b'-' { -seconds } else { seconds })
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
pub(crate) fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let m = month as i64;
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + day as i64 - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146097 + doe - 719468
}

/// The inverse of [`days_from_civil`]: (year, month, day).
pub(crate) fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719468;
    let era = z.div_euclid(146097);
    let doe = z - era * 146097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// `2026-11-21 13:00` for an hour index from [`Record::hour`].
pub fn format_hour(hour: i64) -> String {
    let (y, m, d) = civil_from_days(hour.div_euclid(24));
    format!("{y:04}-{m:02}-{d:02} {:02}:00", hour.rem_euclid(24))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn civil_round_trip() {
        for days in [-800_000, -1, 0, 1, 11_000, 20_414, 2_000_000] {
            let (y, m, d) = civil_from_days(days);
            assert_eq!(days_from_civil(y, m, d), days);
        }
        assert_eq!(days_from_civil(1970, 1, 1), 0);
        assert_eq!(days_from_civil(2000, 3, 1), 11_017);
    }

    #[test]
    fn utc_seconds_apply_the_offset_in_every_syntax() {
        let utc = 1_795_294_536; // 2026-11-21T20:55:36Z
        assert_eq!(utc_seconds(b"[21/Nov/2026:13:55:36 -0700]"), Some(utc));
        assert_eq!(utc_seconds(b"21/Nov/2026:20:55:36 +0000"), Some(utc));
        assert_eq!(utc_seconds(b"2026-11-21T13:55:36-07:00"), Some(utc));
        assert_eq!(utc_seconds(b"2026-11-22T02:25:36+05:30"), Some(utc));
        assert_eq!(utc_seconds(b"2026-11-21T20:55:36Z"), Some(utc));
        assert_eq!(utc_seconds(b"2026-11-21T20:55:36.250Z"), Some(utc));
        assert_eq!(utc_seconds(b"21/Nov/2026:20:61:36 +0000"), None);
        assert_eq!(utc_seconds(b"21/Nov/2026:20:55:36 +07"), None);
        assert_eq!(utc_seconds(b""), None);
    }

    #[test]
    fn both_time_syntaxes_give_the_same_hour() {
        let apache = parse_hour(b"10/Oct/2000:13:55:36 -0700").unwrap();
        let iso = parse_hour(b"2000-10-10T13:55:36-07:00").unwrap();
        assert_eq!(apache, iso);
        assert_eq!(format_hour(apache), "2000-10-10 13:00");
        assert_eq!(parse_hour(b"10/Foo/2000:13:55:36 -0700"), None);
        assert_eq!(parse_hour(b"10/Oct/2000:25:55:36 -0700"), None);
    }

    #[test]
    fn hour_cache_answers_as_parse_hour() {
        let mut cache = HourCache::default();
        let values: [&[u8]; 11] = [
            b"[21/Nov/2026:13:55:36 +0000]",
            b"[21/Nov/2026:13:59:59 +0000]",
            b"[21/Nov/2026:14:00:00 +0000]",
            b"[21/Nov/2026:14:00:00 +0000]",
            b"[21/Nov/2026:14x00:00 +0000]", // malformed after the hour: still refused
            b"[21/Nov/2026:14:00x00 +0000]",
            b"[21/Nov/2026:14:07:00 +0000]", // another minute of the same hour
            b"[21/Nov/2026:14:00:00 +0000]",
            b"2026-11-21T14:00:00+00:00",
            b"2026-11-21T14:00:00Z", // 20 bytes
            b"2026-11-21T14:00:00",  // 19: not cached, still parsed
        ];
        for value in values {
            assert_eq!(
                cache.hour(value),
                parse_hour(value),
                "{}",
                String::from_utf8_lossy(value)
            );
        }
        assert_eq!(
            cache.hour(b"[21/Nov/2026:14:00:00 +0000]"),
            cache.hour(b"2026-11-21T14:00:00Z")
        );
    }
}
