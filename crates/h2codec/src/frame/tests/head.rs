//! Constants, error codes and the 9-byte frame head.

use super::*;

#[test]
fn preface_is_the_rfc_bytes() {
    // RFC 9113 section 3.4 gives the preface in hex.
    let hex = "505249202a20485454502f322e300d0a0d0a534d0d0a0d0a";
    let bytes: Vec<u8> = (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
        .collect();
    assert_eq!(PREFACE.as_slice(), bytes);
}

#[test]
fn reason_codes_match_rfc_section_7() {
    let table = [
        (Reason::NO_ERROR, 0x0, "NO_ERROR"),
        (Reason::PROTOCOL_ERROR, 0x1, "PROTOCOL_ERROR"),
        (Reason::INTERNAL_ERROR, 0x2, "INTERNAL_ERROR"),
        (Reason::FLOW_CONTROL_ERROR, 0x3, "FLOW_CONTROL_ERROR"),
        (Reason::SETTINGS_TIMEOUT, 0x4, "SETTINGS_TIMEOUT"),
        (Reason::STREAM_CLOSED, 0x5, "STREAM_CLOSED"),
        (Reason::FRAME_SIZE_ERROR, 0x6, "FRAME_SIZE_ERROR"),
        (Reason::REFUSED_STREAM, 0x7, "REFUSED_STREAM"),
        (Reason::CANCEL, 0x8, "CANCEL"),
        (Reason::COMPRESSION_ERROR, 0x9, "COMPRESSION_ERROR"),
        (Reason::CONNECT_ERROR, 0xa, "CONNECT_ERROR"),
        (Reason::ENHANCE_YOUR_CALM, 0xb, "ENHANCE_YOUR_CALM"),
        (Reason::INADEQUATE_SECURITY, 0xc, "INADEQUATE_SECURITY"),
        (Reason::HTTP_1_1_REQUIRED, 0xd, "HTTP_1_1_REQUIRED"),
    ];
    for (reason, code, name) in table {
        assert_eq!(reason.0, code);
        assert_eq!(reason.to_string(), name);
        assert_eq!(format!("{reason:?}"), name);
    }
    assert_eq!(Reason(0xe).name(), None);
    assert_eq!(Reason(0xbeef).to_string(), "error code 0xbeef");
    assert_eq!(format!("{:?}", Reason(0xbeef)), "Reason(0xbeef)");
}

#[test]
fn head_round_trip() {
    let head = Head {
        len: 0xab_cdef,
        kind: 0x42,
        flags: 0xff,
        stream: 0x7fff_fffe,
    };
    let bytes = head.to_bytes();
    assert_eq!(
        bytes,
        [0xab, 0xcd, 0xef, 0x42, 0xff, 0x7f, 0xff, 0xff, 0xfe]
    );
    assert_eq!(Head::parse(&bytes), head);
    let mut out = vec![1];
    head.write(&mut out);
    assert_eq!(out[1..], bytes);
}

#[test]
fn head_parse_drops_reserved_bit() {
    // h2spec 4.1/3: "The endpoint MUST ignore the value of reserved field."
    let head = Head::parse(b"\x00\x00\x08\x06\x16\x80\x00\x00\x05");
    assert_eq!(head.stream, 5);
    assert_eq!(head.flags, 0x16);
}

#[test]
fn head_write_clears_reserved_bit() {
    let head = Head {
        len: 0,
        kind: kind::DATA,
        flags: 0,
        stream: 0x8000_0003,
    };
    assert_eq!(head.to_bytes()[5..], [0, 0, 0, 3]);
}
