//! Virtual hosts: the sites a server serves and how a request's host picks one.
//!
//! Each site has its own document root (opened once), index, listing and Cache-Control
//! rules, and its own open-file cache (a path means a different file in each root). The
//! top-level configuration is site 0; each `[[host]]` adds one. A request's host is the
//! authority of an absolute-form target (RFC 9112 section 3.2.2: it wins over Host) or
//! else its Host field, compared without port or final dot and ignoring case; an exact
//! name beats a `*.` wildcard, which matches exactly one more label; a host matching no
//! name goes to the site marked `default`, else to site 0. Choosing allocates nothing:
//! the name is lowered into a stack buffer and looked up in two hash maps.

use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::path::PathBuf;

use crate::cache::FileCache;
use crate::config::{CacheControlRule, Config};

/// Longest host name looked up (DNS names are at most 253 bytes).
const MAX_NAME: usize = 255;

pub(crate) struct Site {
    /// The document root, opened once (`O_PATH`); every file is opened beneath it with
    /// `openat2(RESOLVE_BENEATH)`, so no path or symlink can leave it.
    pub root: OwnedFd,
    pub index: String,
    pub autoindex: bool,
    pub cache_control: Vec<CacheControlRule>,
    /// The open-file cache every worker reads and fills for this site.
    pub files: FileCache,
}

pub(crate) struct Sites {
    sites: Vec<Site>,
    exact: HashMap<Box<[u8]>, usize>,
    /// By the suffix a wildcard stands for, dot included (`.example.com`).
    wildcard: HashMap<Box<[u8]>, usize>,
    default: usize,
}

/// What a site is opened from.
struct SiteSpec {
    pub root: PathBuf,
    pub index: String,
    pub autoindex: bool,
    pub cache_control: Vec<CacheControlRule>,
}

impl Sites {
    /// The sites of a validated configuration: the top-level one first, then one per
    /// `[[host]]`, each opened with `open_root`.
    pub fn open<E>(
        config: &Config,
        mut open_root: impl FnMut(&std::path::Path) -> Result<OwnedFd, E>,
    ) -> Result<Sites, E> {
        let mut specs = vec![SiteSpec {
            root: config.root.clone(),
            index: config.index.clone(),
            autoindex: config.autoindex,
            cache_control: config.cache_control.clone(),
        }];
        for h in &config.host {
            specs.push(SiteSpec {
                root: h.root.clone().unwrap_or_else(|| config.root.clone()),
                index: h.index.clone().unwrap_or_else(|| config.index.clone()),
                autoindex: h.autoindex.unwrap_or(config.autoindex),
                cache_control: h
                    .cache_control
                    .clone()
                    .unwrap_or_else(|| config.cache_control.clone()),
            });
        }
        let mut sites = Vec::with_capacity(specs.len());
        for spec in specs {
            sites.push(Site {
                root: open_root(&spec.root)?,
                index: spec.index,
                autoindex: spec.autoindex,
                cache_control: spec.cache_control,
                files: FileCache::new(config.file_cache_entries),
            });
        }
        let mut exact = HashMap::new();
        let mut wildcard = HashMap::new();
        for (i, h) in config.host.iter().enumerate() {
            for name in &h.names {
                let name = name.to_ascii_lowercase();
                match name.strip_prefix('*') {
                    Some(suffix) => wildcard.insert(suffix.as_bytes().into(), i + 1),
                    None => exact.insert(name.trim_end_matches('.').as_bytes().into(), i + 1),
                };
            }
        }
        let default = config
            .host
            .iter()
            .position(|h| h.default)
            .map_or(0, |i| i + 1);
        Ok(Sites {
            sites,
            exact,
            wildcard,
            default,
        })
    }

    /// Every site, the top-level one first.
    pub fn all(&self) -> &[Site] {
        &self.sites
    }

    /// The site for a request.
    pub fn select(&self, req: &wire::Request<'_, '_>) -> &Site {
        if self.sites.len() == 1 {
            return &self.sites[0];
        }
        let host = absolute_form_authority(req.target).or_else(|| req.header("host"));
        &self.sites[host.and_then(|h| self.find(h)).unwrap_or(self.default)]
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
pub(crate) fn is_valid_name(name: &str) -> bool {
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
