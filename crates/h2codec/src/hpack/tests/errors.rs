//! Every refusal, each with a hand-made block, and the limits that are not errors:
//! the header list size, a refusing callback, the HPACK bomb.

use super::*;

fn refuses(block: &[u8], error: HpackError) {
    let mut decoder = Decoder::new(4096);
    assert_eq!(
        decode(&mut decoder, block),
        Err(error),
        "block {block:02x?}"
    );
}

#[test]
fn refuses_index_zero() {
    refuses(&[0x80], HpackError::IndexZero);
    // After a valid field too.
    refuses(&[0x82, 0x80], HpackError::IndexZero);
}

#[test]
fn refuses_indices_past_the_tables() {
    // 62, the first dynamic index, with an empty table.
    refuses(
        &[0xbe],
        HpackError::IndexOutOfRange {
            index: 62,
            dynamic: 0,
        },
    );
    // One entry: 62 is fine, 63 is not.
    let one = [0x40, 0x01, b'a', 0x01, b'b', 0xbe, 0xbf];
    refuses(
        &one,
        HpackError::IndexOutOfRange {
            index: 63,
            dynamic: 1,
        },
    );
    // As a literal's name (with indexing, 6-bit prefix; without, 4-bit prefix).
    refuses(
        &[0x7e, 0x01, b'x'],
        HpackError::IndexOutOfRange {
            index: 62,
            dynamic: 0,
        },
    );
    refuses(
        &[0x0f, 0x2f, 0x01, b'x'],
        HpackError::IndexOutOfRange {
            index: 62,
            dynamic: 0,
        },
    );
    // A large index, five continuation bytes.
    refuses(
        &[0xff, 0x80, 0x80, 0x80, 0x80, 0x01],
        HpackError::IndexOutOfRange {
            index: 127 + (1 << 28),
            dynamic: 0,
        },
    );
}

#[test]
fn refuses_integer_overflow_and_too_many_continuation_bytes() {
    // Six continuation bytes, even if the value would be small.
    refuses(
        &[0xff, 0x80, 0x80, 0x80, 0x80, 0x80, 0x00],
        HpackError::IntegerOverflow,
    );
    refuses(
        &[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f],
        HpackError::IntegerOverflow,
    );
    // Five bytes, but above u32::MAX: 127 + 0x7f * 2^28 + ... .
    refuses(
        &[0xff, 0xff, 0xff, 0xff, 0xff, 0x7f],
        HpackError::IntegerOverflow,
    );
    // A string length that overflows.
    refuses(
        &[0x40, 0x7f, 0xff, 0xff, 0xff, 0xff, 0x7f],
        HpackError::IntegerOverflow,
    );
    // A size update that overflows.
    refuses(
        &[0x3f, 0xff, 0xff, 0xff, 0xff, 0x7f],
        HpackError::IntegerOverflow,
    );
}

#[test]
fn refuses_strings_past_the_end_of_the_block() {
    refuses(
        &[0x40, 0x05, b'a', b'b'],
        HpackError::StringOverrun { len: 5, left: 2 },
    );
    refuses(
        &[0x41, 0x03, b'a'],
        HpackError::StringOverrun { len: 3, left: 1 },
    );
    refuses(
        &[0x00, 0x01, b'a', 0x85, 0xff],
        HpackError::StringOverrun { len: 5, left: 1 },
    );
    // A length far beyond any block.
    refuses(
        &[0x40, 0x7f, 0xff, 0xff, 0xff, 0x0f],
        HpackError::StringOverrun {
            len: 127 + (1 << 25) - 1,
            left: 0,
        },
    );
}

#[test]
fn refuses_truncated_blocks() {
    // Inside an index.
    refuses(&[0xff], HpackError::Truncated);
    refuses(&[0xff, 0x80], HpackError::Truncated);
    // A literal with a new name and nothing after.
    refuses(&[0x40], HpackError::Truncated);
    // A name and no value.
    refuses(&[0x40, 0x01, b'a'], HpackError::Truncated);
    refuses(&[0x41], HpackError::Truncated);
    refuses(&[0x10, 0x01, b'a'], HpackError::Truncated);
    // Inside a size update.
    refuses(&[0x3f], HpackError::Truncated);
}

#[test]
fn refuses_invalid_huffman() {
    // Value: EOS (30 ones) padded with two ones.
    refuses(
        &[0x40, 0x01, b'a', 0x84, 0xff, 0xff, 0xff, 0xff],
        HpackError::HuffmanEos,
    );
    // Value: "a" (00011) then 11 ones.
    refuses(
        &[0x40, 0x01, b'a', 0x82, 0x1f, 0xff],
        HpackError::HuffmanPaddingTooLong,
    );
    // Value: "a" then 110.
    refuses(
        &[0x40, 0x01, b'a', 0x81, 0x1e],
        HpackError::HuffmanPaddingNotOnes,
    );
    // In a name, in a literal never indexed.
    refuses(&[0x10, 0x81, 0x1e, 0x00], HpackError::HuffmanPaddingNotOnes);
    // In a literal without indexing's value: decoded (and checked) even though it is
    // not stored.
    refuses(&[0x04, 0x81, 0xff], HpackError::HuffmanPaddingTooLong);
}

#[test]
fn refuses_a_size_update_above_our_setting() {
    // 4097 with a 5-bit prefix: 31 + 4066 (e2 1f).
    refuses(
        &[0x3f, 0xe2, 0x1f],
        HpackError::SizeUpdateTooLarge {
            size: 4097,
            max: 4096,
        },
    );
    let mut decoder = Decoder::new(100);
    assert_eq!(
        decode(&mut decoder, &[0x3f, 0x46]),
        Err(HpackError::SizeUpdateTooLarge {
            size: 101,
            max: 100
        })
    );
}

#[test]
fn refuses_a_size_update_after_a_field() {
    refuses(&[0x82, 0x20], HpackError::SizeUpdateAfterField);
    refuses(&[0x20, 0x82, 0x3f, 0x01], HpackError::SizeUpdateAfterField);
}

#[test]
fn accepts_several_size_updates_at_the_start() {
    let mut decoder = Decoder::new(4096);
    decode(&mut decoder, &[0x40, 0x01, b'a', 0x01, b'b']).unwrap();
    // 0 (empties the table), then 4096 (3f e1 1f), then a field.
    assert_eq!(
        decode(&mut decoder, &[0x20, 0x3f, 0xe1, 0x1f, 0x82]).unwrap(),
        fields(&[(":method", "GET")])
    );
    assert_eq!((decoder.table_size(), decoder.table_max_size()), (0, 4096));
    // An update to a size smaller than the table evicts.
    decode(
        &mut decoder,
        &[0x40, 0x01, b'a', 0x01, b'b', 0x40, 0x01, b'c', 0x01, b'd'],
    )
    .unwrap();
    decode(&mut decoder, &[0x3f, 0x04]).unwrap(); // 35
    assert_eq!(decoder_table(&decoder), fields(&[("c", "d")]));
}

#[test]
fn requires_a_size_update_after_our_setting_went_below_the_table() {
    let mut decoder = Decoder::new(4096);
    decoder.set_max_table_size(100);
    assert!(decoder.size_update_required());
    assert_eq!(
        decode(&mut decoder, &[0x82]),
        Err(HpackError::SizeUpdateMissing { max: 100 })
    );
    // An empty block cannot carry it either.
    let mut decoder = Decoder::new(4096);
    decoder.set_max_table_size(100);
    assert_eq!(
        decode(&mut decoder, &[]),
        Err(HpackError::SizeUpdateMissing { max: 100 })
    );
    // With it, fine, and only once.
    let mut decoder = Decoder::new(4096);
    decoder.set_max_table_size(100);
    decode(&mut decoder, &[0x3f, 0x45, 0x82]).unwrap(); // 100
    assert!(!decoder.size_update_required());
    decode(&mut decoder, &[0x82]).unwrap();

    // Lowered to 10 then raised to 4096 before the next block: the block must show a
    // size of at most 10 first (section 4.2), then may go back up.
    let mut decoder = Decoder::new(4096);
    decoder.set_max_table_size(10);
    decoder.set_max_table_size(4096);
    assert!(decoder.size_update_required());
    assert_eq!(
        decode(&mut decoder, &[0x3f, 0xe1, 0x1f, 0x82]),
        Err(HpackError::SizeUpdateMissing { max: 10 })
    );
    let mut decoder = Decoder::new(4096);
    decoder.set_max_table_size(10);
    decoder.set_max_table_size(4096);
    decode(&mut decoder, &[0x2a, 0x3f, 0xe1, 0x1f, 0x82]).unwrap();

    // Raising our setting, or lowering it to no less than the table's size, requires
    // nothing.
    let mut decoder = Decoder::new(4096);
    decoder.set_max_table_size(8192);
    decoder.set_max_table_size(4096);
    assert!(!decoder.size_update_required());
    decode(&mut decoder, &[0x82]).unwrap();
}

#[test]
fn stops_calling_past_the_list_size_but_keeps_the_table_in_step() {
    let mut decoder = Decoder::new(4096);
    // Three fields of 32 + 1 + 1 = 34 each, all inserted.
    let block = [
        0x40, 0x01, b'a', 0x01, b'1', 0x40, 0x01, b'b', 0x01, b'2', 0x40, 0x01, b'c', 0x01, b'3',
    ];
    let mut seen = Vec::new();
    let decoded = decoder
        .decode(&block, 68, |name, _| {
            seen.push(name.to_vec());
            Ok::<(), ()>(())
        })
        .unwrap();
    assert_eq!(
        decoded,
        Decoded {
            list_size: 102,
            list_too_large: true
        }
    );
    assert_eq!(seen, vec![b"a".to_vec(), b"b".to_vec()]);
    assert_eq!(
        decoder_table(&decoder),
        fields(&[("c", "3"), ("b", "2"), ("a", "1")])
    );
    // Exactly at the limit is not too large.
    let decoded = decoder
        .decode(&[0xbe, 0xbf], 68, |_, _| Ok::<(), ()>(()))
        .unwrap();
    assert_eq!(
        decoded,
        Decoded {
            list_size: 68,
            list_too_large: false
        }
    );
}

#[test]
fn a_refused_field_stops_the_calls_but_not_the_decoding() {
    let mut decoder = Decoder::new(4096);
    let block = [
        0x82, 0x40, 0x01, b'x', 0x01, b'1', 0x40, 0x01, b'y', 0x01, b'2',
    ];
    let mut calls = 0;
    let result = decoder.decode(&block, usize::MAX, |name, _| {
        calls += 1;
        if name == b"x" {
            Err("no x")
        } else {
            Ok(())
        }
    });
    assert_eq!(result, Err(DecodeError::Refused("no x")));
    assert_eq!(calls, 2);
    // Both literals were still inserted: the next block may refer to them.
    assert_eq!(
        decode(&mut decoder, &[0xbe, 0xbf]).unwrap(),
        fields(&[("y", "2"), ("x", "1")])
    );
    // A compression error later in the block wins over the refusal.
    let result = decoder.decode(&[0x82, 0x80], usize::MAX, |_, _| Err("no"));
    assert_eq!(result, Err(DecodeError::Compression(HpackError::IndexZero)));
}

#[test]
fn an_hpack_bomb_costs_no_memory() {
    // One entry of 4000 bytes, then 20 000 one-byte references to it: 80 MB of header
    // list from a 24 KB block.
    for huffman in [false, true] {
        let mut decoder = Decoder::new(4096);
        let value = vec![b'a'; 4000];
        let mut block = vec![0x40, 0x01, b'x'];
        if huffman {
            let mut code = Vec::new();
            super::super::huffman::encode(&value, &mut code);
            super::super::primitive::encode_integer(&mut block, 0x80, 7, code.len());
            block.extend_from_slice(&code);
        } else {
            super::super::primitive::encode_integer(&mut block, 0, 7, value.len());
            block.extend_from_slice(&value);
        }
        block.extend(std::iter::repeat(0xbe).take(20_000));
        let mut calls = 0;
        let decoded = decoder
            .decode(&block, 64 * 1024, |_, v| {
                assert_eq!(v.len(), 4000);
                calls += 1;
                Ok::<(), ()>(())
            })
            .unwrap();
        assert_eq!(decoded.list_size, 20_001 * 4033);
        assert!(decoded.list_too_large);
        assert_eq!(calls, 64 * 1024 / 4033);
        let (table, scratch, peak) = decoder.parts();
        assert!(table.heap_bytes() <= 2 * 4096 + 4096 / 32 * 2 * 20);
        assert!(peak <= 4000 * 8 / 5 + 2, "scratch peaked at {peak}");
        assert!(scratch.capacity() <= super::super::decoder::SCRATCH_RETAINED);
    }
}

#[test]
fn errors_say_what_broke() {
    fn is_error<E: std::error::Error>(_: &E) {}
    let error = DecodeError::<std::fmt::Error>::from(HpackError::SizeUpdateTooLarge {
        size: 9000,
        max: 4096,
    });
    is_error(&error);
    assert_eq!(
        error.to_string(),
        "HPACK dynamic table size update to 9000 exceeds the allowed 4096"
    );
    let refused = DecodeError::Refused("connection-specific field");
    assert_eq!(
        refused.to_string(),
        "header field refused: connection-specific field"
    );
}
