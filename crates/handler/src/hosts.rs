//! Virtual hosts: which site a request's host names. The server picks a site's files and
//! routes with it, the proxy routes a page's own includes with it, so both agree.
//!
//! A request's host is the authority of an absolute-form target (RFC 9112 section 3.2.2:
//! it wins over Host) or else its Host field, compared without port or final dot and
//! ignoring case; an exact name beats a `*.` wildcard, which matches exactly one more
//! label; a host matching no name goes to the default site. Choosing allocates nothing:
//! the name is lowered into a stack buffer and looked up in two hash maps.

use std::collections::HashMap;

/// Longest host name looked up (DNS names are at most 253 bytes).
const MAX_NAME: usize = 255;

/// Host names to site numbers. Site 0 is the top-level configuration; `[[host]]` number
/// `i` is site `i + 1`.
#[derive(Debug, Clone, Default)]
pub struct Hosts {
    exact: HashMap<Box<[u8]>, usize>,
    /// By the suffix a wildcard stands for, dot included (`.example.com`).
    wildcard: HashMap<Box<[u8]>, usize>,
    default: usize,
}

impl Hosts {
    /// The table for `hosts`, each a list of names (validated with [`is_valid_name`]) for
    /// site `i + 1`; `default` is the site for a host that matches no name.
    pub fn new<'a>(hosts: impl IntoIterator<Item = &'a [String]>, default: usize) -> Hosts {
        let mut table = Hosts {
            default,
            ..Hosts::default()
        };
        for (i, names) in hosts.into_iter().enumerate() {
            for name in names {
                let name = name.to_ascii_lowercase();
                match name.strip_prefix('*') {
                    Some(suffix) => table.wildcard.insert(suffix.as_bytes().into(), i + 1),
                    None => table
                        .exact
                        .insert(name.trim_end_matches('.').as_bytes().into(), i + 1),
                };
            }
        }
        table
    }

    /// Whether no host has a name (one site, the default).
    pub fn is_empty(&self) -> bool {
        self.exact.is_empty() && self.wildcard.is_empty()
    }

    /// The site of a request that names no host.
    pub fn default_site(&self) -> usize {
        self.default
    }

    /// The site of a request.
    pub fn select(&self, req: &wire::Request<'_, '_>) -> usize {
        if self.is_empty() {
            return self.default;
        }
        let host = absolute_form_authority(req.target).or_else(|| req.header("host"));
        host.map_or(self.default, |h| self.site(h))
    }

    /// The site the request's host names, if it names one ([`Hosts::select`] without
    /// the default).
    pub fn select_named(&self, req: &wire::Request<'_, '_>) -> Option<usize> {
        let host = absolute_form_authority(req.target).or_else(|| req.header("host"))?;
        self.find(host)
    }

    /// The site of an authority (`host[:port]`).
    pub fn site(&self, authority: &[u8]) -> usize {
        self.find(authority).unwrap_or(self.default)
    }

    /// The site one of whose names `authority`'s host is, if any: [`Hosts::site`]
    /// without the default (TLS picks a certificate, and refuses a misdirected request,
    /// with it).
    pub fn named(&self, authority: &[u8]) -> Option<usize> {
        self.find(authority)
    }

    fn find(&self, authority: &[u8]) -> Option<usize> {
        let host = host_of(authority);
        if host.is_empty() || host.len() > MAX_NAME {
            return None;
        }
        let mut lower = [0u8; MAX_NAME];
        let lower = &mut lower[..host.len()];
        lower.copy_from_slice(host);
        lower.make_ascii_lowercase();
        if let Some(&i) = self.exact.get(&lower[..]) {
            return Some(i);
        }
        let dot = lower.iter().position(|&b| b == b'.').filter(|&d| d > 0)?;
        self.wildcard.get(&lower[dot..]).copied()
    }
}

/// The host of an authority: without userinfo (refused earlier anyway), port and final
/// dot; an IPv6 literal keeps its brackets.
fn host_of(authority: &[u8]) -> &[u8] {
    let host = match authority.iter().rposition(|&b| b == b'@') {
        Some(at) => &authority[at + 1..],
        None => authority,
    };
    let host = if host.first() == Some(&b'[') {
        match host.iter().position(|&b| b == b']') {
            Some(end) => &host[..=end],
            None => host,
        }
    } else {
        match host.iter().position(|&b| b == b':') {
            Some(colon) => &host[..colon],
            None => host,
        }
    };
    host.strip_suffix(b".").unwrap_or(host)
}

/// The authority of an absolute-form target (`http://host:port/path`), if it is one.
fn absolute_form_authority(target: &[u8]) -> Option<&[u8]> {
    let scheme_end = target.windows(3).position(|w| w == b"://")?;
    let scheme = &target[..scheme_end];
    if !(scheme.eq_ignore_ascii_case(b"http") || scheme.eq_ignore_ascii_case(b"https")) {
        return None;
    }
    let rest = &target[scheme_end + 3..];
    let end = rest
        .iter()
        .position(|&b| matches!(b, b'/' | b'?' | b'#'))
        .unwrap_or(rest.len());
    Some(&rest[..end])
}

/// Whether `name` (lower case) is a host name, or `*.` and a host name.
pub fn is_valid_name(name: &str) -> bool {
    let host = name.strip_prefix("*.").unwrap_or(name);
    let host = host.strip_suffix('.').unwrap_or(host);
    !host.is_empty()
        && host.len() <= 253
        && host.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_are_compared_without_port_case_or_final_dot() {
        assert_eq!(host_of(b"Example.COM:8080"), b"Example.COM");
        assert_eq!(host_of(b"example.com."), b"example.com");
        assert_eq!(host_of(b"[::1]:80"), b"[::1]");
        assert_eq!(host_of(b"127.0.0.1"), b"127.0.0.1");
    }

    #[test]
    fn absolute_form_targets_name_their_authority() {
        assert_eq!(
            absolute_form_authority(b"http://a.test:81/x?y"),
            Some(&b"a.test:81"[..])
        );
        assert_eq!(
            absolute_form_authority(b"HTTPS://a.test"),
            Some(&b"a.test"[..])
        );
        assert_eq!(absolute_form_authority(b"/x"), None);
        assert_eq!(absolute_form_authority(b"/x?u=http://b"), None);
    }

    #[test]
    fn names_are_host_names_or_one_label_wildcards() {
        assert!(is_valid_name("www.example.com"));
        assert!(is_valid_name("*.example.com"));
        assert!(is_valid_name("localhost"));
        assert!(is_valid_name("*.localhost"));
        assert!(!is_valid_name("*"));
        assert!(!is_valid_name("a.*.com"));
        assert!(!is_valid_name("**.example.com"));
        assert!(!is_valid_name("exa mple.com"));
        assert!(!is_valid_name(""));
        assert!(!is_valid_name("a..b"));
    }
}
