//! Fuzzes the PROXY protocol parser (`wire::parse_proxy`) the way the server drives it,
//! on the first bytes of a connection on a `proxy_protocol` listener. Besides "never
//! panics", it checks:
//!
//! - a header accepted lies within the input, parses the same when nothing follows it,
//!   and every strict prefix of it is "wait for more" (the server peeks again), so the
//!   bytes after it are the connection's own;
//! - its TLVs fill the rest of the header exactly;
//! - its addresses, written again in its version, parse back to the same addresses.
//!
//! The same bytes go to the `X-Forwarded-For` and `Forwarded` readers as field values.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let peer = "192.0.2.1:1".parse().unwrap();
    let trusted = |ip: std::net::IpAddr| ip.is_loopback();
    let c = wire::client_from_x_forwarded_for(data.split(|&b| b == b'\n'), peer, trusted);
    assert!(c.addr == peer || !trusted(c.addr.ip()) || c.before < data.len());
    let _ = wire::client_from_forwarded(data.split(|&b| b == b'\n'), peer, trusted);

    let Ok(Some((header, len))) = wire::parse_proxy(data) else {
        return;
    };
    assert!(len <= data.len() && len <= wire::MAX_PROXY_HEADER);
    assert_eq!(wire::parse_proxy(&data[..len]), Ok(Some((header, len))));
    for n in 0..len {
        assert_eq!(wire::parse_proxy(&data[..n]), Ok(None), "prefix {n}");
    }
    let mut tlvs = wire::Tlvs(header.tlvs);
    while tlvs.next().is_some() {}
    assert!(tlvs.0.is_empty());
    if let Some(addresses) = header.addresses {
        let mut out = Vec::new();
        match header.version {
            1 => wire::write_v1(&mut out, Some(addresses)),
            _ => wire::write_v2(&mut out, Some(addresses)),
        }
        let (again, again_len) = wire::parse_proxy(&out).unwrap().unwrap();
        assert_eq!((again.addresses, again_len), (Some(addresses), out.len()));
    }
});
