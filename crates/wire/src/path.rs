//! Request paths as every routing decision sees them.

/// A request path that names nothing: bad percent-encoding, a NUL, or `..` above the
/// root.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InvalidPath;

/// Percent-decodes `path` (no query) and normalises it into `out` as `/a/b` or `/a/b/`:
/// empty and `.` segments vanish, `..` removes the segment before it. Decoding happens
/// first, so `%2e%2e` is a `..` like any other, and `..` above the root is refused.
///
/// Every decision made on a path (which file, which script mount, which proxy route)
/// is made on this form, so `/%61pi`, `//api` and `/x/../api` are all `/api`: a check
/// at one prefix cannot be stepped around by spelling the path another way.
pub fn normalize_path(path: &[u8], out: &mut Vec<u8>) -> Result<(), InvalidPath> {
    out.clear();
    out.push(b'/');
    let mut segment_start = 1;
    let mut i = 0;
    loop {
        let byte = match path.get(i) {
            None => None,
            Some(b'%') => {
                let hi = path.get(i + 1).and_then(|&b| hex(b));
                let lo = path.get(i + 2).and_then(|&b| hex(b));
                match (hi, lo) {
                    (Some(hi), Some(lo)) => {
                        i += 2;
                        Some(hi << 4 | lo)
                    }
                    _ => return Err(InvalidPath),
                }
            }
            Some(&b) => Some(b),
        };
        i += 1;
        match byte {
            None | Some(b'/') => {
                let segment = &out[segment_start..];
                if segment == b"." {
                    out.truncate(segment_start);
                } else if segment == b".." {
                    if segment_start == 1 {
                        return Err(InvalidPath);
                    }
                    out.truncate(segment_start - 1);
                    let parent = out.iter().rposition(|&b| b == b'/').unwrap_or(0);
                    out.truncate(parent + 1);
                } else if byte.is_some() && !segment.is_empty() {
                    out.push(b'/');
                }
                if byte.is_none() {
                    return Ok(());
                }
                segment_start = out.len();
            }
            Some(0) => return Err(InvalidPath),
            Some(b) => out.push(b),
        }
    }
}

fn hex(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn norm(path: &str) -> Result<String, InvalidPath> {
        let mut out = Vec::new();
        normalize_path(path.as_bytes(), &mut out).map(|()| String::from_utf8(out).unwrap())
    }

    #[test]
    fn normalizes_paths() {
        assert_eq!(norm("/").unwrap(), "/");
        assert_eq!(norm("/a/b").unwrap(), "/a/b");
        assert_eq!(norm("/a//b/").unwrap(), "/a/b/");
        assert_eq!(norm("/a/./b/../c").unwrap(), "/a/c");
        assert_eq!(norm("/a/b/..").unwrap(), "/a/");
        assert_eq!(norm("/a/.").unwrap(), "/a/");
        assert_eq!(norm("/%61%2Fb").unwrap(), "/a/b");
        assert_eq!(norm("/a/%2e%2e/b").unwrap(), "/b");
        assert_eq!(norm("/..%2fx").unwrap_err(), InvalidPath);
    }

    #[test]
    fn refuses_escapes_nul_and_bad_escapes() {
        for bad in [
            "/..",
            "/../etc/passwd",
            "/%2e%2e/",
            "/a/../../b",
            "/%00",
            "/a%0",
            "/%zz",
        ] {
            assert_eq!(norm(bad), Err(InvalidPath), "{bad}");
        }
    }
}
