//! The client's address from the fields proxies add: `X-Forwarded-For` (a list of
//! addresses, each proxy appending the one it received from) and RFC 7239 `Forwarded`
//! (elements of `for=`, `by=`, `proto=`, `host=` pairs), read right to left: the client
//! is the right-most address that is not a trusted proxy's.
//!
//! The caller decides whether the fields are to be believed at all (the socket's peer
//! must be a trusted proxy); here they are only read. No allocation: the field lines are
//! walked once, left to right, keeping what a right-to-left walk would stop at.

use std::net::{IpAddr, SocketAddr};

/// The client a list of forwarding fields names, and how many of its list items lie
/// before it (what a proxy forwards in its own `X-Forwarded-For` before appending the
/// client: the trusted hops after it are dropped, since the client is now known).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ForwardedClient {
    pub addr: SocketAddr,
    /// List items (across the field lines, in order) before the client's; all of them
    /// when the fields named no usable address.
    pub before: usize,
}

/// The walk, fed one list item at a time, left to right.
struct Walk<F> {
    trusted: F,
    /// Items so far.
    items: usize,
    /// The last item that ends a right-to-left walk: an untrusted address (the client
    /// unless something later ends the walk), or an item that is not an address.
    stop: Option<(Option<SocketAddr>, usize)>,
    /// The first trusted address after `stop` (the client when the walk stops at an item
    /// that is not an address, or when every item is trusted).
    after_stop: Option<(SocketAddr, usize)>,
}

impl<F: Fn(IpAddr) -> bool> Walk<F> {
    fn new(trusted: F) -> Self {
        Walk {
            trusted,
            items: 0,
            stop: None,
            after_stop: None,
        }
    }

    fn item(&mut self, addr: Option<SocketAddr>) {
        let at = self.items;
        self.items += 1;
        match addr {
            Some(a) if (self.trusted)(a.ip()) => {
                if self.after_stop.is_none() {
                    self.after_stop = Some((a, at));
                }
            }
            other => {
                self.stop = Some((other, at));
                self.after_stop = None;
            }
        }
    }

    fn end(self, peer: SocketAddr) -> ForwardedClient {
        let found = match self.stop {
            Some((Some(untrusted), at)) => Some((untrusted, at)),
            _ => self.after_stop,
        };
        match found {
            Some((addr, before)) => ForwardedClient { addr, before },
            None => ForwardedClient {
                addr: peer,
                before: self.items,
            },
        }
    }
}

/// The client named by `X-Forwarded-For` field values (in the order received): the
/// right-most address not `trusted`. Walking from the right, an item that is not an
/// address (`unknown`, garbage) ends the walk at the trusted address after it; when
/// every item is trusted, the left-most is the client; with no items, `peer`. Items are
/// IPv4 or IPv6 addresses, with a port (`192.0.2.1:5000`, `[2001:db8::1]:5000`) or
/// without (the port is then 0); empty list items are skipped.
pub fn client_from_x_forwarded_for<'a>(
    values: impl Iterator<Item = &'a [u8]>,
    peer: SocketAddr,
    trusted: impl Fn(IpAddr) -> bool,
) -> ForwardedClient {
    let mut walk = Walk::new(trusted);
    for value in values {
        for item in value.split(|&b| b == b',') {
            let item = crate::trim_ows(item);
            if !item.is_empty() {
                walk.item(node(item));
            }
        }
    }
    walk.end(peer)
}

/// The client named by RFC 7239 `Forwarded` field values: as
/// [`client_from_x_forwarded_for`], over each element's `for` (an element without one,
/// or whose node is `unknown` or obfuscated, is not an address). The fields are parsed
/// strictly: a syntax error anywhere (a pair without `=`, an unterminated quoted
/// string, a parameter twice in one element, a `for` value that is not a node) makes the
/// whole field unusable, and `peer` stands.
pub fn client_from_forwarded<'a>(
    values: impl Iterator<Item = &'a [u8]>,
    peer: SocketAddr,
    trusted: impl Fn(IpAddr) -> bool,
) -> ForwardedClient {
    let mut walk = Walk::new(trusted);
    for value in values {
        if elements(value, &mut |node| walk.item(node)).is_err() {
            return ForwardedClient {
                addr: peer,
                before: 0,
            };
        }
    }
    walk.end(peer)
}

/// Parses one `Forwarded` field value, calling `each` with every element's `for` node
/// (`None` when it has none or it is not an address).
fn elements(value: &[u8], each: &mut dyn FnMut(Option<SocketAddr>)) -> Result<(), ()> {
    let mut rest = value;
    loop {
        rest = crate::trim_ows(rest);
        // One element: pairs separated by ';'.
        let mut node: Option<Option<SocketAddr>> = None;
        let mut seen = [false; 4];
        loop {
            let eq = rest.iter().position(|&b| b == b'=').ok_or(())?;
            let name = &rest[..eq];
            if name.is_empty() || !name.iter().all(|&b| crate::is_tchar(b)) {
                return Err(());
            }
            let (raw, quoted, len) = pair_value(&rest[eq + 1..])?;
            let known = ["for", "by", "proto", "host"]
                .iter()
                .position(|k| name.eq_ignore_ascii_case(k.as_bytes()));
            if let Some(k) = known {
                if seen[k] {
                    return Err(());
                }
                seen[k] = true;
            }
            if known == Some(0) {
                node = Some(for_node(raw, quoted)?);
            }
            rest = &rest[eq + 1 + len..];
            match rest.first() {
                Some(b';') => rest = &rest[1..],
                _ => break,
            }
        }
        each(node.flatten());
        rest = crate::trim_ows(rest);
        match rest.first() {
            None => return Ok(()),
            Some(b',') => rest = &rest[1..],
            Some(_) => return Err(()),
        }
    }
}

/// A pair's value (a token or a quoted string) at the start of `rest`: its bytes (the
/// quoted string's inside, escapes left in), whether it was quoted, and its length.
fn pair_value(rest: &[u8]) -> Result<(&[u8], bool, usize), ()> {
    if rest.first() == Some(&b'"') {
        let mut i = 1;
        while i < rest.len() {
            match rest[i] {
                b'"' => return Ok((&rest[1..i], true, i + 1)),
                b'\\' if i + 1 < rest.len() => i += 2,
                b'\t' | b' '..=b'~' | 0x80..=0xff => i += 1,
                _ => return Err(()),
            }
        }
        return Err(());
    }
    let len = rest.iter().take_while(|&&b| crate::is_tchar(b)).count();
    if len == 0 {
        return Err(());
    }
    Ok((&rest[..len], false, len))
}

/// A `for` node (RFC 7239 section 6): an IPv4 address, a bracketed IPv6 address (which
/// must be quoted), either with a port, `unknown`, or an obfuscated name (`_hidden`).
/// `Ok(None)` for the last two; an error for anything else.
fn for_node(raw: &[u8], quoted: bool) -> Result<Option<SocketAddr>, ()> {
    if raw.eq_ignore_ascii_case(b"unknown") {
        return Ok(None);
    }
    let (name, port) = match raw.first() {
        Some(b'[') => {
            let close = raw.iter().position(|&b| b == b']').ok_or(())?;
            (&raw[..close + 1], &raw[close + 1..])
        }
        _ => match raw.iter().position(|&b| b == b':') {
            Some(c) => (&raw[..c], &raw[c..]),
            None => (raw, &raw[raw.len()..]),
        },
    };
    let port_ok = |p: &[u8]| {
        p.is_empty()
            || p.first() == Some(&b'_')
            || (p.len() <= 5 && p.iter().all(u8::is_ascii_digit))
    };
    let port_text = port.strip_prefix(b":");
    if !port.is_empty() && !port_text.is_some_and(|p| !p.is_empty() && port_ok(p)) {
        return Err(());
    }
    if name.first() == Some(&b'_') {
        let obfuscated = name[1..]
            .iter()
            .all(|&b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-');
        return if obfuscated { Ok(None) } else { Err(()) };
    }
    // ':' and '[' are not token characters: an IPv6 node is only valid quoted, and so
    // is any node with a port.
    if (name.first() == Some(&b'[') || !port.is_empty()) && !quoted {
        return Err(());
    }
    let port = match port_text {
        Some(p) if p.first() != Some(&b'_') => {
            let n: u32 = std::str::from_utf8(p)
                .map_err(|_| ())?
                .parse()
                .map_err(|_| ())?;
            u16::try_from(n).map_err(|_| ())?
        }
        _ => 0,
    };
    let ip = match name.strip_prefix(b"[").and_then(|n| n.strip_suffix(b"]")) {
        Some(v6) => IpAddr::V6(
            std::str::from_utf8(v6)
                .map_err(|_| ())?
                .parse()
                .map_err(|_| ())?,
        ),
        None => IpAddr::V4(
            std::str::from_utf8(name)
                .map_err(|_| ())?
                .parse()
                .map_err(|_| ())?,
        ),
    };
    Ok(Some(SocketAddr::new(ip, port)))
}

/// An `X-Forwarded-For` item: an address with or without a port.
fn node(item: &[u8]) -> Option<SocketAddr> {
    let text = std::str::from_utf8(item).ok()?;
    if let Ok(ip) = text.parse::<IpAddr>() {
        return Some(SocketAddr::new(ip, 0));
    }
    if let Some(v6) = text.strip_prefix('[').and_then(|t| t.strip_suffix(']')) {
        return Some(SocketAddr::new(v6.parse().ok()?, 0));
    }
    text.parse::<SocketAddr>().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trusted(ip: IpAddr) -> bool {
        match ip {
            IpAddr::V4(v4) => v4.octets()[0] == 10,
            IpAddr::V6(v6) => v6.segments()[0] == 0xfd00,
        }
    }

    const PEER: &str = "10.0.0.1:4000";

    fn xff(lines: &[&str]) -> (String, usize) {
        let c = client_from_x_forwarded_for(
            lines.iter().map(|l| l.as_bytes()),
            PEER.parse().unwrap(),
            trusted,
        );
        (c.addr.to_string(), c.before)
    }

    fn fwd(lines: &[&str]) -> String {
        client_from_forwarded(
            lines.iter().map(|l| l.as_bytes()),
            PEER.parse().unwrap(),
            trusted,
        )
        .addr
        .to_string()
    }

    #[test]
    fn the_right_most_untrusted_address_is_the_client() {
        assert_eq!(
            xff(&["203.0.113.9, 198.51.100.7, 10.0.0.5"]),
            ("198.51.100.7:0".into(), 1)
        );
        assert_eq!(
            xff(&["203.0.113.9", "198.51.100.7,10.0.0.5"]),
            ("198.51.100.7:0".into(), 1)
        );
        assert_eq!(xff(&["198.51.100.7:5000"]), ("198.51.100.7:5000".into(), 0));
        assert_eq!(
            xff(&["[2001:db8::1]:5000, 10.1.1.1"]),
            ("[2001:db8::1]:5000".into(), 0)
        );
        assert_eq!(xff(&["2001:db8::1"]), ("[2001:db8::1]:0".into(), 0));
    }

    #[test]
    fn every_item_trusted_gives_the_left_most_and_none_gives_the_peer() {
        assert_eq!(xff(&["10.0.0.9, 10.0.0.5"]), ("10.0.0.9:0".into(), 0));
        assert_eq!(xff(&[]), (PEER.into(), 0));
        assert_eq!(xff(&[" , "]), (PEER.into(), 0));
    }

    #[test]
    fn an_item_that_is_no_address_ends_the_walk() {
        assert_eq!(
            xff(&["198.51.100.7, unknown, 10.0.0.5"]),
            ("10.0.0.5:0".into(), 2)
        );
        assert_eq!(xff(&["198.51.100.7, garbage"]), (PEER.into(), 2));
        // A spoofed item left of the real client changes nothing.
        assert_eq!(
            xff(&["6.6.6.6, 198.51.100.7"]),
            ("198.51.100.7:0".into(), 1)
        );
    }

    #[test]
    fn forwarded_is_read_strictly() {
        assert_eq!(
            fwd(&["for=192.0.2.60;proto=http;by=203.0.113.43"]),
            "192.0.2.60:0"
        );
        assert_eq!(
            fwd(&["for=192.0.2.43, for=\"[2001:db8:cafe::17]:4711\""]),
            "[2001:db8:cafe::17]:4711"
        );
        assert_eq!(
            fwd(&["For=\"192.0.2.43:80\", for=10.0.0.3"]),
            "192.0.2.43:80"
        );
        assert_eq!(
            fwd(&["for=192.0.2.43, for=unknown, for=10.0.0.3"]),
            "10.0.0.3:0"
        );
        assert_eq!(fwd(&["for=192.0.2.43, for=_hidden"]), PEER);
        assert_eq!(fwd(&["for=192.0.2.43, proto=https"]), PEER);
        for bad in [
            "for=[2001:db8::1]",
            "for=192.0.2.1:80",
            "for=\"192.0.2.1",
            "for=192.0.2.1;for=192.0.2.2",
            "for",
            "for=192.0.2.1 x",
            "for=300.1.1.1",
            "for=\"[2001:db8::1]:x\"",
            "",
            ";",
        ] {
            assert_eq!(fwd(&["for=198.51.100.1", bad]), PEER, "{bad}");
        }
    }
}
