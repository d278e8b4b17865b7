//! The one field of a certificate the server reads itself: when it expires (a warning
//! at load for a configured one, the expiry metric of an ACME one). rustls parses the
//! rest at handshake.

/// The end of a certificate's validity, in Unix seconds, read from its DER: Certificate
/// is SEQUENCE { tbsCertificate SEQUENCE { [0] version OPTIONAL, serialNumber,
/// signature, issuer, validity SEQUENCE { notBefore, notAfter }, ... } ... }. `None` for
/// what does not parse (rustls refuses such a certificate itself at handshake).
pub(crate) fn not_after(cert: &[u8]) -> Option<i64> {
    let (_, certificate, _) = der(cert)?;
    let (_, mut tbs, _) = der(certificate)?;
    let (tag, _, rest) = der(tbs)?;
    if tag == 0xa0 {
        tbs = rest;
    }
    for _ in 0..3 {
        tbs = der(tbs)?.2; // serial, signature, issuer
    }
    let (_, validity, _) = der(tbs)?;
    let (_, _, rest) = der(validity)?;
    let (tag, time, _) = der(rest)?;
    let digits = std::str::from_utf8(time).ok()?;
    let full = match tag {
        // UTCTime: YYMMDDHHMMSSZ, years 1950 to 2049 (RFC 5280 section 4.1.2.5.1).
        0x17 if digits.len() == 13 => {
            let century = if &digits[..2] < "50" { "20" } else { "19" };
            format!("{century}{digits}")
        }
        0x18 if digits.len() == 15 => digits.to_string(),
        _ => return None,
    };
    let n = |r: std::ops::Range<usize>| full.get(r)?.parse::<i64>().ok();
    let days = days_from_civil(n(0..4)?, n(4..6)?, n(6..8)?);
    Some(days * 86_400 + n(8..10)? * 3600 + n(10..12)? * 60 + n(12..14)?)
}

/// One DER element: (tag, contents, what follows).
fn der(input: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = input.split_first()?;
    let (&first, mut rest) = rest.split_first()?;
    let len = if first < 0x80 {
        first as usize
    } else {
        let count = (first & 0x7f) as usize;
        if count == 0 || count > 4 || rest.len() < count {
            return None;
        }
        let len = rest[..count]
            .iter()
            .fold(0usize, |n, &b| (n << 8) | b as usize);
        rest = &rest[count..];
        len
    };
    (rest.len() >= len).then(|| (tag, &rest[..len], &rest[len..]))
}

/// Days from 1970-01-01 to a civil date (Howard Hinnant's algorithm).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn days_from_civil_matches_known_dates() {
        assert_eq!(days_from_civil(1970, 1, 1), 0);
        assert_eq!(days_from_civil(2000, 3, 1), 11_017);
        assert_eq!(days_from_civil(2024, 2, 29), 19_782);
    }

    #[test]
    fn der_reads_short_and_long_lengths() {
        assert_eq!(
            der(&[0x30, 2, 1, 2, 9]),
            Some((0x30, &[1u8, 2][..], &[9u8][..]))
        );
        let mut long = vec![0x04, 0x81, 200];
        long.extend(std::iter::repeat_n(7u8, 200));
        assert_eq!(
            der(&long).map(|(t, c, r)| (t, c.len(), r.len())),
            Some((4, 200, 0))
        );
        assert_eq!(der(&[0x30, 5, 1]), None);
    }
}
