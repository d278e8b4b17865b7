//! Fuzzes the HPACK decoder (`h2codec::hpack::Decoder`) the way a connection drives it:
//! several header blocks in turn on one decoder, so its dynamic table carries over from
//! block to block. Besides "never panics", it checks:
//!
//! - a block that decodes has a header list size of its fields' lengths plus 32 each, and
//!   leaves the table within the size the block chose, which is within our setting;
//! - the fields a block decodes to, encoded again with the crate's `Encoder` and decoded
//!   by a second decoder that follows that encoder, are the same fields in the same order.
//!
//! Input: two bytes of table size (big-endian: the SETTINGS_HEADER_TABLE_SIZE we
//! announce), one byte for the header list size limit (0: none, else that many times 64
//! bytes), then blocks, each a two-byte big-endian length, one byte that when not 0
//! lowers our setting to that many times 16 bytes before the block (so the block must
//! open with a size update), and the block (shorter if the input ends first).

#![no_main]

use h2codec::hpack::{DecodeError, Decoder, Encoder, HpackError};
use libfuzzer_sys::fuzz_target;

type Fields = Vec<(Vec<u8>, Vec<u8>)>;

/// RFC 9113 section 6.5.2: a field counts its name, its value and 32.
const FIELD_OVERHEAD: usize = 32;

fuzz_target!(|data: &[u8]| {
    let [t0, t1, list, rest @ ..] = data else {
        return;
    };
    let table_size = usize::from(u16::from_be_bytes([*t0, *t1]));
    let max_list_size = match *list {
        0 => usize::MAX,
        n => usize::from(n) * 64,
    };
    let mut decoder = Decoder::new(table_size);
    let mut encoder = Encoder::new();
    let mut follower = Decoder::new(4096);
    let mut input = rest;
    while let [l0, l1, lower, after @ ..] = input {
        let len = usize::from(u16::from_be_bytes([*l0, *l1])).min(after.len());
        let (block, next) = after.split_at(len);
        input = next;
        if *lower != 0 {
            decoder.set_max_table_size(usize::from(*lower) * 16);
        }
        let mut fields = Fields::new();
        let decoded = decoder.decode(block, max_list_size, |name: &[u8], value: &[u8]| {
            fields.push((name.to_vec(), value.to_vec()));
            Ok::<(), HpackError>(())
        });
        let decoded = match decoded {
            Ok(decoded) => decoded,
            // The table is out of step with the peer's: the connection ends here.
            Err(DecodeError::Compression(_)) => return,
            Err(DecodeError::Refused(_)) => unreachable!("the callback refuses nothing"),
        };
        assert!(decoder.table_size() <= decoder.table_max_size());
        assert!(decoder.table_max_size() <= decoder.max_table_size());
        if decoded.list_too_large {
            // The fields were cut short, so there is nothing whole to compare.
            assert!(decoded.list_size > max_list_size);
            continue;
        }
        let list_size: usize = fields
            .iter()
            .map(|(name, value)| name.len() + value.len() + FIELD_OVERHEAD)
            .sum();
        assert_eq!(decoded.list_size, list_size);
        assert_eq!(reencoded(&mut encoder, &mut follower, &fields), fields);
    }
});

/// `fields` encoded with `encoder` and decoded by `follower`, the decoder that has seen
/// every block `encoder` wrote.
fn reencoded(encoder: &mut Encoder, follower: &mut Decoder, fields: &Fields) -> Fields {
    let mut out = Vec::new();
    let mut block = encoder.block(&mut out);
    for (name, value) in fields {
        // `Block::field` takes lower-case names only (HTTP/2 allows no other); a peer's
        // block may hold any bytes, which a literal never indexed carries as they are.
        if name.iter().any(u8::is_ascii_uppercase) {
            block.field_never_indexed(name, value);
        } else {
            block.field(name, value);
        }
    }
    block.finish();
    let mut again = Fields::new();
    follower
        .decode(&out, usize::MAX, |name: &[u8], value: &[u8]| {
            again.push((name.to_vec(), value.to_vec()));
            Ok::<(), HpackError>(())
        })
        .expect("a block our encoder wrote does not decode");
    again
}
