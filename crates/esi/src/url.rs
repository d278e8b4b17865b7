//! RFC 3986 section 5.2 reference resolution, enough for include URLs: no I/O, no
//! normalisation beyond dot-segment removal.

struct Parts<'a> {
    scheme: Option<&'a str>,
    authority: Option<&'a str>,
    path: &'a str,
    query: Option<&'a str>,
    fragment: Option<&'a str>,
}

/// Splits a URI reference with the regular expression of RFC 3986 appendix B.
fn split(s: &str) -> Parts<'_> {
    let mut rest = s;
    let mut scheme = None;
    if let Some(colon) = rest.find(':') {
        let candidate = &rest[..colon];
        let valid = candidate
            .as_bytes()
            .first()
            .is_some_and(u8::is_ascii_alphabetic)
            && candidate
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.'));
        if valid {
            scheme = Some(candidate);
            rest = &rest[colon + 1..];
        }
    }
    let mut fragment = None;
    if let Some(i) = rest.find('#') {
        fragment = Some(&rest[i + 1..]);
        rest = &rest[..i];
    }
    let mut query = None;
    if let Some(i) = rest.find('?') {
        query = Some(&rest[i + 1..]);
        rest = &rest[..i];
    }
    let mut authority = None;
    if let Some(after) = rest.strip_prefix("//") {
        let end = after.find('/').unwrap_or(after.len());
        authority = Some(&after[..end]);
        rest = &after[end..];
    }
    Parts {
        scheme,
        authority,
        path: rest,
        query,
        fragment,
    }
}

fn remove_dot_segments(path: &str) -> String {
    let mut output: Vec<&str> = Vec::new();
    let absolute = path.starts_with('/');
    let segments: Vec<&str> = path.split('/').collect();
    let last = segments.len().saturating_sub(1);
    let mut trailing_slash = false;
    for (i, seg) in segments.iter().enumerate() {
        if i == 0 && absolute {
            continue;
        }
        match *seg {
            "." => trailing_slash = i == last,
            ".." => {
                output.pop();
                trailing_slash = i == last;
            }
            s => {
                output.push(s);
                trailing_slash = false;
            }
        }
    }
    let mut out = String::with_capacity(path.len());
    if absolute {
        out.push('/');
    }
    out.push_str(&output.join("/"));
    if trailing_slash && !out.ends_with('/') {
        out.push('/');
    }
    out
}

fn merge(base: &Parts<'_>, reference: &str) -> String {
    if base.authority.is_some() && base.path.is_empty() {
        return format!("/{reference}");
    }
    match base.path.rfind('/') {
        Some(i) => format!("{}{reference}", &base.path[..=i]),
        None => reference.to_string(),
    }
}

fn has_dot_segment(path: &str) -> bool {
    path.split('/').any(|seg| seg == "." || seg == "..")
}

/// The length of `base`'s `scheme://authority` prefix (0 for a path-only base).
pub(crate) fn origin_len(base: &str) -> usize {
    let b = split(base);
    let mut len = b.scheme.map_or(0, |s| s.len() + 1);
    if let Some(a) = b.authority {
        len += 2 + a.len();
    }
    len
}

/// Resolves `reference` against a base whose `scheme://authority` is `origin`, for the
/// common `/path?query` include: the origin plus the reference as written, which is what
/// the general algorithm yields when the path has no dot segments. `None` otherwise.
pub(crate) fn resolve_absolute_path(origin: &str, reference: &str) -> Option<String> {
    if !reference.starts_with('/') || reference.starts_with("//") {
        return None;
    }
    let path_end = reference.find(['?', '#']).unwrap_or(reference.len());
    if has_dot_segment(&reference[..path_end]) {
        return None;
    }
    let mut out = String::with_capacity(origin.len() + reference.len());
    out.push_str(origin);
    out.push_str(reference);
    Some(out)
}

/// Whether `url` (an include, resolved and with its entities decoded) is a URL that can
/// be requested: printable ASCII without the characters RFC 3986 leaves out of URIs
/// (space, `<`, `>`, `"`, `{`, `}`, `|`, `\\`, `^`, `` ` ``). Variables are
/// percent-encoded when substituted; a template's own text must be written so.
/// `tessera esi render` and the proxy both refuse (as a failed include) what fails this.
pub fn is_valid_url(url: &str) -> bool {
    !url.is_empty()
        && url
            .bytes()
            .all(|b| b.is_ascii_graphic() && !b"<>\"{}|\\^`".contains(&b))
}

/// Resolves `reference` against `base` (the page URL).
pub fn resolve(base: &str, reference: &str) -> String {
    if let Some(fast) = resolve_absolute_path(&base[..origin_len(base)], reference) {
        return fast;
    }
    let r = split(reference);
    let b = split(base);
    let (scheme, authority, path, query);
    if r.scheme.is_some() {
        scheme = r.scheme;
        authority = r.authority;
        path = remove_dot_segments(r.path);
        query = r.query;
    } else {
        scheme = b.scheme;
        if r.authority.is_some() {
            authority = r.authority;
            path = remove_dot_segments(r.path);
            query = r.query;
        } else {
            authority = b.authority;
            if r.path.is_empty() {
                path = b.path.to_string();
                query = r.query.or(b.query);
            } else {
                path = if r.path.starts_with('/') {
                    remove_dot_segments(r.path)
                } else {
                    remove_dot_segments(&merge(&b, r.path))
                };
                query = r.query;
            }
        }
    }
    let mut out = String::with_capacity(base.len() + reference.len());
    if let Some(s) = scheme {
        out.push_str(s);
        out.push(':');
    }
    if let Some(a) = authority {
        out.push_str("//");
        out.push_str(a);
    }
    out.push_str(&path);
    if let Some(q) = query {
        out.push('?');
        out.push_str(q);
    }
    if let Some(f) = r.fragment {
        out.push('#');
        out.push_str(f);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::resolve;

    #[test]
    fn rfc3986_normal_examples() {
        let base = "http://a/b/c/d;p?q";
        for (r, want) in [
            ("g:h", "g:h"),
            ("g", "http://a/b/c/g"),
            ("./g", "http://a/b/c/g"),
            ("g/", "http://a/b/c/g/"),
            ("/g", "http://a/g"),
            ("//g", "http://g"),
            ("?y", "http://a/b/c/d;p?y"),
            ("g?y", "http://a/b/c/g?y"),
            ("#s", "http://a/b/c/d;p?q#s"),
            ("g#s", "http://a/b/c/g#s"),
            (";x", "http://a/b/c/;x"),
            ("", "http://a/b/c/d;p?q"),
            (".", "http://a/b/c/"),
            ("./", "http://a/b/c/"),
            ("..", "http://a/b/"),
            ("../", "http://a/b/"),
            ("../g", "http://a/b/g"),
            ("../..", "http://a/"),
            ("../../g", "http://a/g"),
            ("../../../g", "http://a/g"),
            ("/./g", "http://a/g"),
            ("g.", "http://a/b/c/g."),
            ("..g", "http://a/b/c/..g"),
            ("./g/.", "http://a/b/c/g/"),
            ("g/../h", "http://a/b/c/h"),
        ] {
            assert_eq!(resolve(base, r), want, "resolving {r:?}");
        }
    }

    #[test]
    fn absolute_path_fast_path_matches_general_rules() {
        let base = "http://a/b/c/d;p?q";
        for (r, want) in [
            ("/g", "http://a/g"),
            ("/g?y#s", "http://a/g?y#s"),
            ("/a//b", "http://a/a//b"),
            ("/x/../g", "http://a/g"),
            ("/x/./g", "http://a/x/g"),
            ("/g?q=/../", "http://a/g?q=/../"),
        ] {
            assert_eq!(resolve(base, r), want, "resolving {r:?}");
        }
    }

    #[test]
    fn origin_is_scheme_and_authority() {
        assert_eq!(
            super::origin_len("http://a:8080/b?c"),
            "http://a:8080".len()
        );
        assert_eq!(super::origin_len("https://a"), "https://a".len());
        assert_eq!(super::origin_len("/path/only"), 0);
    }

    #[test]
    fn path_only_base() {
        assert_eq!(resolve("/shop/page.html", "frag.html"), "/shop/frag.html");
        assert_eq!(resolve("/shop/page.html", "/x"), "/x");
    }
}
