//! Longest-prefix routing on whole path segments.

/// Maps path prefixes to values; [`Router::find`] returns the value of the longest prefix
/// that matches a path on whole segments: `/api` takes `/api`, `/api/x` and `/api?x`
/// (a `?` that was percent-encoded in the request and decoded by normalisation) but not
/// `/apis`; a prefix that ends with `/` (`/api/`) takes everything under it.
///
/// The table is built once and read on every request: a linear scan of the prefixes,
/// longest first, which for the handful of routes a site has beats any tree and
/// allocates nothing.
#[derive(Debug, Clone)]
pub struct Router<T> {
    /// Longest prefix first; among equal prefixes, the first given.
    entries: Vec<(Box<[u8]>, T)>,
}

impl<T> Router<T> {
    /// A router over `(prefix, value)` pairs, in any order.
    pub fn new(entries: impl IntoIterator<Item = (impl AsRef<[u8]>, T)>) -> Router<T> {
        let mut entries: Vec<(Box<[u8]>, T)> = entries
            .into_iter()
            .map(|(prefix, value)| (Box::from(prefix.as_ref()), value))
            .collect();
        // Stable: equal prefixes keep the order they were given in.
        entries.sort_by_key(|(prefix, _)| std::cmp::Reverse(prefix.len()));
        Router { entries }
    }

    /// The value of the longest prefix of `path` (decoded and normalised, no query) that
    /// ends at a segment boundary, if any.
    pub fn find(&self, path: &[u8]) -> Option<&T> {
        self.entries
            .iter()
            .find(|(prefix, _)| matches(prefix, path))
            .map(|(_, value)| value)
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The prefixes and values, longest prefix first.
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], &T)> {
        self.entries.iter().map(|(p, v)| (&p[..], v))
    }
}

fn matches(prefix: &[u8], path: &[u8]) -> bool {
    path.starts_with(prefix)
        && (prefix.ends_with(b"/")
            || path.len() == prefix.len()
            || matches!(path[prefix.len()], b'/' | b'?'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn longest_whole_segment_prefix_wins() {
        let router = Router::new([("/", 0), ("/api", 1), ("/api/v2/", 2), ("/static/", 3)]);
        let find = |p: &str| router.find(p.as_bytes()).copied();
        assert_eq!(find("/api"), Some(1));
        assert_eq!(find("/api/x"), Some(1));
        assert_eq!(find("/api?x"), Some(1));
        assert_eq!(find("/apis"), Some(0));
        assert_eq!(find("/api/v2/x"), Some(2));
        assert_eq!(find("/api/v2"), Some(1));
        assert_eq!(find("/static"), Some(0));
        assert_eq!(find("/static/a.css"), Some(3));
        assert_eq!(Router::new([("/a", 1)]).find(b"/b"), None);
    }

    #[test]
    fn equal_prefixes_keep_their_order() {
        let router = Router::new([("/x", "first"), ("/x", "second")]);
        assert_eq!(router.find(b"/x/y"), Some(&"first"));
    }
}
