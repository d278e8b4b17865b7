use std::net::SocketAddr;

use proptest::prelude::*;

use super::*;

fn addrs(s: &str, d: &str) -> Option<(SocketAddr, SocketAddr)> {
    Some((s.parse().unwrap(), d.parse().unwrap()))
}

fn v2(command: u8, family: u8, body: &[u8]) -> Vec<u8> {
    let mut out = SIGNATURE.to_vec();
    out.extend_from_slice(&[command, family]);
    out.extend_from_slice(&(body.len() as u16).to_be_bytes());
    out.extend_from_slice(body);
    out
}

#[test]
fn reads_a_v1_tcp4_line_and_leaves_what_follows() {
    let buf = b"PROXY TCP4 192.0.2.1 198.51.100.2 56324 443\r\nGET / HTTP/1.1\r\n";
    let (header, len) = parse_proxy(buf).unwrap().unwrap();
    assert_eq!(&buf[len..], b"GET / HTTP/1.1\r\n");
    assert_eq!(header.version, 1);
    assert_eq!(
        header.addresses,
        addrs("192.0.2.1:56324", "198.51.100.2:443")
    );
}

#[test]
fn reads_a_v1_tcp6_line_and_unknown() {
    let (header, _) = parse_proxy(b"PROXY TCP6 ::1 2001:db8::2 1 65535\r\n")
        .unwrap()
        .unwrap();
    assert_eq!(header.source(), Some("[::1]:1".parse().unwrap()));
    for line in [&b"PROXY UNKNOWN\r\n"[..], b"PROXY UNKNOWN ff ee 1 2\r\n"] {
        let (header, len) = parse_proxy(line).unwrap().unwrap();
        assert_eq!((header.addresses, len), (None, line.len()));
    }
}

#[test]
fn refuses_malformed_v1_lines() {
    let bad: &[&[u8]] = &[
        b"PROXY TCP4 192.0.2.1 198.51.100.2 56324 443\n",
        b"PROXY TCP4 192.0.2.1  198.51.100.2 56324 443\r\n",
        b"PROXY tcp4 192.0.2.1 198.51.100.2 56324 443\r\n",
        b"PROXY TCP4 192.0.2.1 198.51.100.2 056324 443\r\n",
        b"PROXY TCP4 192.0.2.1 198.51.100.2 65536 443\r\n",
        b"PROXY TCP4 192.0.2.1 198.51.100.2 +1 443\r\n",
        b"PROXY TCP4 192.0.2.01 198.51.100.2 1 443\r\n",
        b"PROXY TCP4 ::1 198.51.100.2 1 443\r\n",
        b"PROXY TCP6 192.0.2.1 ::1 1 443\r\n",
        b"PROXY TCP4 192.0.2.1 198.51.100.2 1 443 \r\n",
        b"PROXY TCP4 192.0.2.1 198.51.100.2 1\r\n",
        b"PROXY TCP4 192.0.2.1\r198.51.100.2 1 2\r\n",
        b"PROXY \r\n",
    ];
    for line in bad {
        assert_eq!(
            parse_proxy(line),
            Err(ProxyError::BadV1),
            "{}",
            String::from_utf8_lossy(line)
        );
    }
    let long = [&b"PROXY UNKNOWN "[..], &[b'x'; 100]].concat();
    assert_eq!(parse_proxy(&long), Err(ProxyError::V1TooLong));
}

#[test]
fn refuses_a_connection_without_a_header() {
    for buf in [
        &b"GET / HTTP/1.1\r\n"[..],
        b"\x16\x03\x01",
        b"PROXZ",
        b"\r\n\r\n\0\r\nQUIX",
    ] {
        assert_eq!(parse_proxy(buf), Err(ProxyError::Missing));
    }
}

#[test]
fn waits_for_the_rest_of_a_prefix() {
    let whole = b"PROXY TCP4 192.0.2.1 198.51.100.2 56324 443\r\n";
    for n in 0..whole.len() {
        assert_eq!(parse_proxy(&whole[..n]), Ok(None), "{n}");
    }
    let mut v2 = Vec::new();
    write_v2(&mut v2, addrs("192.0.2.1:1", "192.0.2.2:2"));
    for n in 0..v2.len() {
        assert_eq!(parse_proxy(&v2[..n]), Ok(None), "{n}");
    }
}

#[test]
fn reads_v2_addresses_and_tlvs() {
    let mut body = vec![192, 0, 2, 1, 198, 51, 100, 2, 0xdc, 0x04, 0x01, 0xbb];
    // AWS's VPC endpoint id (0xEA, subtype 0x01), then a NOOP.
    body.extend_from_slice(&[0xea, 0, 5, 0x01, b'v', b'p', b'c', b'e']);
    body.extend_from_slice(&[0x04, 0, 0]);
    let mut buf = v2(0x21, 0x11, &body);
    let total = buf.len();
    buf.extend_from_slice(b"GET /");
    let (header, len) = parse_proxy(&buf).unwrap().unwrap();
    assert_eq!(len, total);
    assert_eq!(
        header.addresses,
        addrs("192.0.2.1:56324", "198.51.100.2:443")
    );
    let tlvs: Vec<_> = Tlvs(header.tlvs).collect();
    assert_eq!(tlvs, vec![(0xea, &b"\x01vpce"[..]), (0x04, &b""[..])]);
}

#[test]
fn a_v2_local_or_unspec_or_unix_header_keeps_the_peer() {
    for (command, family, body) in [
        (0x20, 0x11, vec![1u8; 12]),
        (0x20, 0x00, vec![]),
        (0x21, 0x00, vec![]),
        (0x21, 0x31, vec![0; 216]),
    ] {
        let buf = v2(command, family, &body);
        let (header, len) = parse_proxy(&buf).unwrap().unwrap();
        assert_eq!((header.addresses, len), (None, buf.len()));
    }
}

#[test]
fn refuses_malformed_v2_headers() {
    let cases = [
        (v2(0x11, 0x11, &[0; 12]), ProxyError::BadVersion),
        (v2(0x22, 0x11, &[0; 12]), ProxyError::BadCommand),
        (v2(0x21, 0x12, &[0; 12]), ProxyError::BadFamily),
        (v2(0x21, 0x41, &[0; 12]), ProxyError::BadFamily),
        (v2(0x21, 0x11, &[0; 11]), ProxyError::ShortAddresses),
        (v2(0x21, 0x21, &[0; 35]), ProxyError::ShortAddresses),
        (
            v2(0x21, 0x11, &[[0; 12].as_slice(), &[0xea, 0, 4, 1]].concat()),
            ProxyError::BadTlv,
        ),
        (
            v2(0x21, 0x11, &[[0; 12].as_slice(), &[0xea, 0]].concat()),
            ProxyError::BadTlv,
        ),
        (v2(0x21, 0x11, &vec![0; MAX_HEADER]), ProxyError::TooLong),
    ];
    for (buf, error) in cases {
        assert_eq!(parse_proxy(&buf), Err(error), "{buf:?}");
    }
    // Known wrong from the version byte on, before the rest has come.
    assert_eq!(
        parse_proxy(&v2(0x31, 0x11, &[])[..13]),
        Err(ProxyError::BadVersion)
    );
}

#[test]
fn writes_local_and_unknown_without_addresses() {
    let mut out = Vec::new();
    write_v1(&mut out, None);
    assert_eq!(out, b"PROXY UNKNOWN\r\n");
    out.clear();
    write_v2(&mut out, None);
    let (header, len) = parse_proxy(&out).unwrap().unwrap();
    assert_eq!((header.addresses, len), (None, 16));
}

#[test]
fn a_mixed_family_is_written_as_ipv6() {
    let (s, d) = addrs("192.0.2.1:5", "[2001:db8::1]:443").unwrap();
    let mut out = Vec::new();
    write_v1(&mut out, Some((s, d)));
    assert_eq!(out, b"PROXY TCP6 ::ffff:192.0.2.1 2001:db8::1 5 443\r\n");
    let (header, _) = parse_proxy(&out).unwrap().unwrap();
    assert_eq!(
        header.source(),
        Some("[::ffff:192.0.2.1]:5".parse().unwrap())
    );
}

fn socket_addr() -> impl Strategy<Value = SocketAddr> {
    prop_oneof![
        (any::<[u8; 4]>(), any::<u16>()).prop_map(|(ip, port)| SocketAddr::from((ip, port))),
        (any::<[u8; 16]>(), any::<u16>()).prop_map(|(ip, port)| SocketAddr::from((ip, port))),
    ]
}

proptest! {
    /// What the writers write, the parser reads back: the same addresses (in the
    /// family written), the whole header and nothing after it.
    #[test]
    fn written_headers_parse_back(
        s in socket_addr(),
        d in socket_addr(),
        v1 in any::<bool>(),
        tail in proptest::collection::vec(any::<u8>(), 0..64),
    ) {
        let mut out = Vec::new();
        match v1 {
            true => write_v1(&mut out, Some((s, d))),
            false => write_v2(&mut out, Some((s, d))),
        }
        let len = out.len();
        out.extend_from_slice(&tail);
        let (header, parsed_len) = parse_proxy(&out).unwrap().unwrap();
        prop_assert_eq!(parsed_len, len);
        let same_family = s.is_ipv4() == d.is_ipv4();
        let (ps, pd) = header.addresses.unwrap();
        if same_family {
            prop_assert_eq!((ps, pd), (s, d));
        } else {
            prop_assert_eq!(ps.port(), s.port());
            prop_assert_eq!(ps.ip(), std::net::IpAddr::V6(v1::v6_of(s.ip())));
        }
    }

    /// Whatever the bytes, the parser answers without panicking; a header it accepts
    /// lies within the input, and every prefix of it is "wait for more".
    #[test]
    fn any_bytes_are_answered_and_prefixes_wait(
        input in proptest::collection::vec(any::<u8>(), 0..300),
        start in prop_oneof![Just(b"PROXY ".to_vec()), Just(SIGNATURE.to_vec()), Just(Vec::new())],
    ) {
        let buf = [start, input].concat();
        if let Ok(Some((_, len))) = parse_proxy(&buf) {
            prop_assert!(len <= buf.len());
            for n in 0..len {
                prop_assert_eq!(parse_proxy(&buf[..n]), Ok(None));
            }
        }
    }
}
