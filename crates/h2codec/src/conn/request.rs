//! A request head decoded from its header block and checked (RFC 9113 section
//! 8.1-8.3); `head.rs` keeps it for the server to read.

use super::head::Span;
use super::*;

impl Conn {
    /// Decodes a header block into the head; returns whether the request it holds is
    /// malformed (section 8.1.1). The whole block is always decoded: the HPACK table is
    /// the connection's, whatever becomes of the stream.
    pub(super) fn decode(&mut self, block: &[u8], trailers: bool) -> Result<bool, ConnError> {
        let head = &mut self.head;
        head.clear();
        let mut malformed = false;
        let mut regular = false;
        let decoded = self.decoder.decode(
            block,
            self.config.max_header_list_size as usize,
            |name: &[u8], value: &[u8]| {
                if has_forbidden_byte(value) {
                    malformed = true;
                }
                if let Some(pseudo) = name.strip_prefix(b":") {
                    if regular || trailers {
                        malformed = true;
                        return Ok::<(), std::convert::Infallible>(());
                    }
                    let slot = match pseudo {
                        b"method" => &mut head.method,
                        b"scheme" => &mut head.scheme,
                        b"authority" => &mut head.authority,
                        b"path" => &mut head.path,
                        _ => {
                            malformed = true;
                            return Ok(());
                        }
                    };
                    if slot.is_some() {
                        malformed = true;
                        return Ok(());
                    }
                    let span = {
                        let start = head.bytes.len() as u32;
                        head.bytes.extend_from_slice(value);
                        (start, head.bytes.len() as u32)
                    };
                    match pseudo {
                        b"method" => head.method = Some(span),
                        b"scheme" => head.scheme = Some(span),
                        b"authority" => head.authority = Some(span),
                        _ => head.path = Some(span),
                    }
                    return Ok(());
                }
                regular = true;
                if name.is_empty() || !name.iter().all(|&b| NAME_BYTES[usize::from(b)]) {
                    malformed = true;
                    return Ok(());
                }
                if is_connection_specific(name) || (name == b"te" && value != b"trailers") {
                    malformed = true;
                    return Ok(());
                }
                if !trailers {
                    let name = head.push(name);
                    let value = head.push(value);
                    head.fields.push(Span { name, value });
                }
                Ok(())
            },
        );
        match decoded {
            Ok(d) => {
                self.head.oversize = d.list_too_large;
                Ok(malformed)
            }
            Err(_) => Err(self.fail(Reason::COMPRESSION_ERROR)),
        }
    }

    /// The request's content-length: `Err` if it is not one decimal number (several
    /// equal values count as one).
    pub(super) fn content_length(&self) -> Result<Option<u64>, ()> {
        let mut length = None;
        for (name, value) in self.request().fields() {
            if name != b"content-length" {
                continue;
            }
            if value.is_empty() || value.len() > 19 || !value.iter().all(u8::is_ascii_digit) {
                return Err(());
            }
            let n = value
                .iter()
                .fold(0u64, |n, &d| n * 10 + u64::from(d - b'0'));
            if length.is_some_and(|l| l != n) {
                return Err(());
            }
            length = Some(n);
        }
        Ok(length)
    }

    /// Whether the pseudo-header fields a request needs are there (section 8.3.1; a
    /// CONNECT has only :method and :authority, section 8.5).
    pub(super) fn pseudo_complete(&self) -> bool {
        let r = self.request();
        let head = &self.head;
        if head.method.is_none() {
            return false;
        }
        if r.method() == b"CONNECT" {
            return head.authority.is_some() && head.scheme.is_none() && head.path.is_none();
        }
        head.scheme.is_some() && r.path().is_some_and(|p| !p.is_empty())
    }
}

/// A byte a field name may hold in HTTP/2: a token character that is not upper case
/// (RFC 9113 section 8.2.1, RFC 9110 section 5.6.2).
const fn is_name_byte(b: u8) -> bool {
    matches!(b,
        b'a'..=b'z' | b'0'..=b'9' | b'!' | b'#' | b'$' | b'%' | b'&' | b'\'' | b'*'
        | b'+' | b'-' | b'.' | b'^' | b'_' | b'`' | b'|' | b'~')
}

/// [`is_name_byte`] for every byte: one load per byte of every name of every request.
static NAME_BYTES: [bool; 256] = {
    let mut table = [false; 256];
    let mut b = 0;
    while b < 256 {
        table[b] = is_name_byte(b as u8);
        b += 1;
    }
    table
};

/// Whether a value holds NUL, CR or LF (RFC 9113 section 8.2.1): eight bytes at a time,
/// as every value of every request is checked.
fn has_forbidden_byte(value: &[u8]) -> bool {
    // A word has a zero byte iff (w - 0x01..) & !w & 0x80.. is not zero.
    const ONES: u64 = u64::from_ne_bytes([0x01; 8]);
    const HIGHS: u64 = u64::from_ne_bytes([0x80; 8]);
    const CR: u64 = u64::from_ne_bytes([b'\r'; 8]);
    const LF: u64 = u64::from_ne_bytes([b'\n'; 8]);
    let zero = |w: u64| w.wrapping_sub(ONES) & !w & HIGHS != 0;
    let mut words = value.chunks_exact(8);
    for word in &mut words {
        let w = u64::from_ne_bytes(word.try_into().expect("8 bytes"));
        if zero(w) || zero(w ^ CR) || zero(w ^ LF) {
            return true;
        }
    }
    words
        .remainder()
        .iter()
        .any(|&b| b == 0 || b == b'\r' || b == b'\n')
}

/// Fields HTTP/2 forbids (RFC 9113 section 8.2.2).
fn is_connection_specific(name: &[u8]) -> bool {
    matches!(
        name,
        b"connection" | b"keep-alive" | b"proxy-connection" | b"transfer-encoding" | b"upgrade"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        #[test]
        fn the_word_at_a_time_check_is_the_byte_check(
            value in proptest::collection::vec(
                proptest::prop_oneof![proptest::num::u8::ANY, proptest::strategy::Just(0u8),
                    proptest::strategy::Just(b'\r'), proptest::strategy::Just(b'\n'),
                    proptest::strategy::Just(b'a')],
                0..40,
            ),
            clean in proptest::collection::vec(0x20u8..0x7f, 0..40),
        ) {
            let byte_wise = |v: &[u8]| v.iter().any(|&b| b == 0 || b == b'\r' || b == b'\n');
            proptest::prop_assert_eq!(has_forbidden_byte(&value), byte_wise(&value));
            proptest::prop_assert!(!has_forbidden_byte(&clean));
        }
    }

    #[test]
    fn the_name_table_is_the_name_rule() {
        for b in 0..=255u8 {
            assert_eq!(NAME_BYTES[usize::from(b)], is_name_byte(b), "{b}");
        }
        assert!(NAME_BYTES[usize::from(b'a')] && !NAME_BYTES[usize::from(b'A')]);
        assert!(!NAME_BYTES[usize::from(b':')] && !NAME_BYTES[0x80]);
    }
}
