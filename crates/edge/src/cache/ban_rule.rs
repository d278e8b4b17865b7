//! What a ban by regular expression matches (`BAN /` with `X-Ban-Url` and `X-Ban-Host`,
//! docs/cache.md, "Purging"): the URL and host of a cache key. The memory tier applies
//! it in `memory/bans.rs`.

use regex::Regex;

/// One ban: what a key's URL and host must match.
pub(crate) struct BanRule {
    url: Option<Regex>,
    host: Option<Regex>,
}

/// The most compiled program a ban's expression may make (regex's own default is
/// 10 MiB; a ban is a short pattern, and each one is kept in the ban list).
const REGEX_SIZE_LIMIT: usize = 1 << 20;

impl BanRule {
    /// From the `X-Ban-Url` and `X-Ban-Host` values (at least one); the error names the
    /// field whose expression does not compile.
    pub(crate) fn new(url: Option<&str>, host: Option<&str>) -> Result<BanRule, String> {
        let compile = |field: &str, pattern: Option<&str>| {
            pattern
                .map(|p| {
                    regex::RegexBuilder::new(p)
                        .size_limit(REGEX_SIZE_LIMIT)
                        .build()
                        .map_err(|e| format!("{field}: {e}"))
                })
                .transpose()
        };
        Ok(BanRule {
            url: compile("X-Ban-Url", url)?,
            host: compile("X-Ban-Host", host)?,
        })
    }

    /// Whether the object (or marker) under cache key `key` is banned: its host (the
    /// key up to the path) and URL (from the path to the end of the URL part: a key
    /// rule's digest and a variant's fields are not part of it) match.
    pub(crate) fn matches(&self, key: &str) -> bool {
        let path_at = key.find('/').unwrap_or(key.len());
        let (host, rest) = key.split_at(path_at);
        let url = rest.split([' ', '\0']).next().unwrap_or_default();
        self.url.as_ref().map_or(true, |r| r.is_match(url))
            && self.host.as_ref().map_or(true, |r| r.is_match(host))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ban_matches_the_url_and_host_of_a_key() {
        let rule = BanRule::new(Some(r"^/news/.*\.html$"), None).unwrap();
        assert!(rule.matches("a.example/news/x.html"));
        assert!(rule.matches("b.example/news/x.html\0accept-language=fr\0"));
        assert!(!rule.matches("a.example/news/x.htm"));
        assert!(!rule.matches("a.example/old/news/x.html"));
        // A key rule's digest is not part of the URL.
        let query = BanRule::new(Some(r"\?id=1$"), None).unwrap();
        assert!(query.matches("a.example/p?id=1 3f2a"));
        let host = BanRule::new(Some("^/news/"), Some(r"^a\.")).unwrap();
        assert!(host.matches("a.example/news/1"));
        assert!(!host.matches("b.example/news/1"));
        let whole_host = BanRule::new(None, Some("^b.example$")).unwrap();
        assert!(whole_host.matches("b.example/anything"));
        let e = BanRule::new(Some("(unclosed"), None).err().unwrap();
        assert!(e.starts_with("X-Ban-Url: "), "{e}");
    }
}
