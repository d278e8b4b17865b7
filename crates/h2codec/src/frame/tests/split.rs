//! HEADERS split into CONTINUATION frames by both writers.

use super::*;

/// Splits written frames back into heads and payloads without the parser.
pub(super) fn split_frames(mut buf: &[u8]) -> Vec<(Head, &[u8])> {
    let mut frames = Vec::new();
    while !buf.is_empty() {
        let head = Head::parse(buf.first_chunk().unwrap());
        let end = HEAD_LEN + head.len as usize;
        frames.push((head, &buf[HEAD_LEN..end]));
        buf = &buf[end..];
    }
    frames
}

/// Checks that `out` (after `prefix` bytes) is `block` as HEADERS + CONTINUATION frames
/// of at most `max` bytes, with the flags in the right places.
fn check_split(out: &[u8], prefix: usize, block: &[u8], end_stream: bool, max: usize) {
    let frames = split_frames(&out[prefix..]);
    let expected_frames = block.len().div_ceil(max).max(1);
    assert_eq!(
        frames.len(),
        expected_frames,
        "block of {} at max {max}",
        block.len()
    );
    let mut joined = Vec::new();
    for (i, (head, payload)) in frames.iter().enumerate() {
        let last = i + 1 == frames.len();
        assert_eq!(
            head.kind,
            if i == 0 {
                kind::HEADERS
            } else {
                kind::CONTINUATION
            }
        );
        assert_eq!(head.stream, 7);
        assert!(payload.len() <= max);
        assert_eq!(head.has(flag::END_HEADERS), last);
        assert_eq!(head.has(flag::END_STREAM), i == 0 && end_stream);
        assert_eq!(head.flags & !(flag::END_HEADERS | flag::END_STREAM), 0);
        if !last {
            assert_eq!(payload.len(), max, "only the last frame is short");
        }
        joined.extend_from_slice(payload);
    }
    assert_eq!(joined, block);
}

/// Both ways of writing HEADERS, after a prefix, checked and compared.
pub(super) fn write_both_ways(block: &[u8], end_stream: bool, max_frame_size: u32, prefix: &[u8]) {
    let max = max_frame_size.clamp(DEFAULT_MAX_FRAME_SIZE, MAX_FRAME_SIZE_LIMIT) as usize;
    let mut direct = prefix.to_vec();
    write_headers(&mut direct, 7, block, end_stream, max_frame_size);
    check_split(&direct, prefix.len(), block, end_stream, max);

    let mut in_place = prefix.to_vec();
    let at = begin_headers(&mut in_place);
    assert_eq!(at, prefix.len());
    in_place.extend_from_slice(block);
    finish_headers(&mut in_place, at, 7, end_stream, max_frame_size);
    assert_eq!(
        in_place, direct,
        "finish_headers differs from write_headers"
    );
}

#[test]
fn continuation_split_at_multiples_of_max_frame_size_and_one_over() {
    let max = MAX as usize;
    let block: Vec<u8> = (0..3 * max + 1).map(|i| (i % 251) as u8).collect();
    for len in [
        0,
        1,
        max - 1,
        max,
        max + 1,
        2 * max - 1,
        2 * max,
        2 * max + 1,
        3 * max,
        3 * max + 1,
    ] {
        for end_stream in [false, true] {
            write_both_ways(&block[..len], end_stream, MAX, b"");
            write_both_ways(&block[..len], end_stream, MAX, b"earlier frame bytes");
        }
    }
}

#[test]
fn continuation_split_follows_a_larger_max_frame_size() {
    let block = vec![0xaa; 50_001];
    write_both_ways(&block, true, 25_000, b"x");
    let mut out = Vec::new();
    write_headers(&mut out, 7, &block, true, 25_000);
    assert_eq!(split_frames(&out).len(), 3);
    write_both_ways(&block, true, 50_001, b"");
}

#[test]
fn continuation_split_clamps_an_impossible_max_frame_size() {
    let block = vec![1; 20_000];
    // Below 16384 no peer may go, so 0 and 100 mean 16384.
    for max in [0, 100, 16_383] {
        let mut out = Vec::new();
        write_headers(&mut out, 7, &block, false, max);
        check_split(&out, 0, &block, false, 16_384);
        write_both_ways(&block, false, max, b"");
    }
}

#[test]
#[should_panic(expected = "finish_headers at 5 past the end")]
fn finish_headers_without_begin_panics() {
    let mut out = vec![0; 10];
    finish_headers(&mut out, 5, 1, false, MAX);
}
