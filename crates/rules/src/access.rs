//! Access rules (issue 43; docs/security.md, "Access rules"): an ordered list of
//! `allow`/`deny` entries on the client's address, the first that matches decides, as
//! nginx's `allow`/`deny`; a client no entry matches is let through. Compiled once into a
//! slice of networks that a request walks without allocating.

use std::net::IpAddr;

use serde::Deserialize;

use crate::error::Error;

/// One entry of `access = [{ allow = "10.0.0.0/8" }, { deny = "all" }]`: exactly one of
/// `allow` and `deny`, each an address (`/32` or `/128`), a network (CIDR) or `all`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct AccessRule {
    pub allow: Option<String>,
    pub deny: Option<String>,
}

/// The status a refused request gets when `deny_status` is not set (nginx's).
pub const DENY_STATUS: u16 = 403;

/// A compiled `access` list and the status it refuses with.
#[derive(Debug, Clone)]
pub struct Access {
    entries: Box<[Entry]>,
    pub deny_status: u16,
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    allow: bool,
    /// `None`: `all`.
    net: Option<(IpAddr, u8)>,
}

impl Access {
    /// Compiles `rules` with `deny_status` (`None`: 403). `Ok(None)` for an empty list
    /// with no `deny_status`; errors name the entry (`access[2]`) or `deny_status`.
    pub fn compile(
        rules: &[AccessRule],
        deny_status: Option<u16>,
    ) -> Result<Option<Access>, Error> {
        if let Some(status) = deny_status {
            if !(400..=599).contains(&status) {
                return Err(
                    Error::new(format!("`{status}` is not a status 400-599")).at("deny_status")
                );
            }
            if rules.is_empty() {
                return Err(Error::new("is set without `access`").at("deny_status"));
            }
        }
        if rules.is_empty() {
            return Ok(None);
        }
        let entries = rules
            .iter()
            .enumerate()
            .map(|(i, rule)| {
                // The key is `access`, whose line check-config finds; the entry is said.
                let at = |e: Error| Error::new(format!("entry {i}: {}", e.message())).at("access");
                let (allow, text) = match (&rule.allow, &rule.deny) {
                    (Some(a), None) => (true, a),
                    (None, Some(d)) => (false, d),
                    _ => return Err(at(Error::new("give one of `allow` and `deny`"))),
                };
                let net = match text.as_str() {
                    "all" => None,
                    text => Some(network(text).map_err(at)?),
                };
                Ok(Entry { allow, net })
            })
            .collect::<Result<_, _>>()?;
        Ok(Some(Access {
            entries,
            deny_status: deny_status.unwrap_or(DENY_STATUS),
        }))
    }

    /// Whether the first entry that matches `ip` allows it (no entry matches: allowed).
    pub fn allows(&self, ip: IpAddr) -> bool {
        self.entries
            .iter()
            .find(|e| e.net.is_none_or(|(net, len)| in_network(ip, net, len)))
            .is_none_or(|e| e.allow)
    }
}

/// `ADDR` or `ADDR/LEN` as (address, prefix length).
pub(crate) fn network(text: &str) -> Result<(IpAddr, u8), Error> {
    let (addr, len) = match text.split_once('/') {
        Some((a, l)) => (a, Some(l)),
        None => (text, None),
    };
    let addr: IpAddr = addr
        .parse()
        .map_err(|_| Error::new(format!("`{text}` is not an address or a network")))?;
    let max = if addr.is_ipv4() { 32 } else { 128 };
    let len = match len {
        None => max,
        Some(l) => match l.parse::<u8>() {
            Ok(l) if l <= max => l,
            _ => {
                return Err(Error::new(format!(
                    "`{text}`: the prefix length is not 0-{max}"
                )))
            }
        },
    };
    Ok((addr.to_canonical(), len))
}

/// Whether `ip` is in the network `net/len` (an IPv4 client seen as IPv4-mapped IPv6
/// counts as IPv4).
pub(crate) fn in_network(ip: IpAddr, net: IpAddr, len: u8) -> bool {
    match (ip.to_canonical(), net) {
        (IpAddr::V4(a), IpAddr::V4(n)) => {
            let mask = u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0);
            u32::from(a) & mask == u32::from(n) & mask
        }
        (IpAddr::V6(a), IpAddr::V6(n)) => {
            let mask = u128::MAX.checked_shl(128 - u32::from(len)).unwrap_or(0);
            u128::from(a) & mask == u128::from(n) & mask
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(allow: Option<&str>, deny: Option<&str>) -> AccessRule {
        AccessRule {
            allow: allow.map(Into::into),
            deny: deny.map(Into::into),
        }
    }

    #[test]
    fn the_first_entry_that_matches_decides() {
        let rules = [
            rule(None, Some("192.168.1.1")),
            rule(Some("192.168.0.0/16"), None),
            rule(Some("2001:db8::/32"), None),
            rule(None, Some("all")),
        ];
        let access = Access::compile(&rules, None).unwrap().unwrap();
        let allows = |ip: &str| access.allows(ip.parse().unwrap());
        assert!(!allows("192.168.1.1"));
        assert!(allows("192.168.1.2"));
        assert!(allows("::ffff:192.168.7.7"));
        assert!(allows("2001:db8::1"));
        assert!(!allows("2001:db9::1"));
        assert!(!allows("10.0.0.1"));
        assert_eq!(access.deny_status, 403);
        // No entry matches: let through.
        let open = Access::compile(&[rule(None, Some("10.0.0.0/8"))], Some(404))
            .unwrap()
            .unwrap();
        assert!(open.allows("127.0.0.1".parse().unwrap()));
        assert_eq!(open.deny_status, 404);
    }

    #[test]
    fn refuses_entries_that_are_not_one_network() {
        let error =
            |rules: &[AccessRule], status| Access::compile(rules, status).unwrap_err().to_string();
        assert_eq!(
            error(&[rule(Some("all"), None), rule(Some("a"), Some("b"))], None),
            "`access`: entry 1: give one of `allow` and `deny`"
        );
        assert_eq!(
            error(&[rule(Some("10.0.0.0/33"), None)], None),
            "`access`: entry 0: `10.0.0.0/33`: the prefix length is not 0-32"
        );
        assert_eq!(
            error(&[rule(None, Some("nope"))], None),
            "`access`: entry 0: `nope` is not an address or a network"
        );
        assert_eq!(
            error(&[rule(None, Some("all"))], Some(200)),
            "`deny_status`: `200` is not a status 400-599"
        );
        assert_eq!(
            error(&[], Some(403)),
            "`deny_status`: is set without `access`"
        );
        assert!(Access::compile(&[], None).unwrap().is_none());
    }
}
