//! Directory listings (`autoindex = true`): an HTML page linking a directory's entries.
//! Rare and uncached, so it may allocate freely; what matters is that no file name can
//! inject markup (names are HTML-escaped, links percent-encoded).

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;

/// The listing of `dir` (an open directory) whose URL path is `path` (decoded, ending in
/// `/`). Names starting with `.` are left out, as nginx's autoindex does; directories
/// come first, each group sorted by name.
pub(crate) fn render(dir: &File, path: &[u8]) -> io::Result<Vec<u8>> {
    // Reading through the descriptor resolves nothing again: it is the directory that
    // was opened beneath the root.
    let entries = std::fs::read_dir(format!("/proc/self/fd/{}", dir.as_raw_fd()))?;
    let mut names: Vec<(bool, Vec<u8>)> = Vec::new();
    for entry in entries {
        let entry = entry?;
        let name = entry.file_name().as_bytes().to_vec();
        if name.starts_with(b".") {
            continue;
        }
        let is_dir = entry.file_type().is_ok_and(|t| t.is_dir());
        names.push((!is_dir, name));
    }
    names.sort();
    let title = escape_html(&String::from_utf8_lossy(path));
    let mut html = format!(
        "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>Index of {title}</title></head>\n\
         <body><h1>Index of {title}</h1><hr><pre>\n"
    );
    if path != b"/" {
        html.push_str("<a href=\"../\">../</a>\n");
    }
    for (is_file, name) in &names {
        let slash = if *is_file { "" } else { "/" };
        html.push_str(&format!(
            "<a href=\"{}{slash}\">{}{slash}</a>\n",
            percent_encode(name),
            escape_html(&String::from_utf8_lossy(name))
        ));
    }
    html.push_str("</pre><hr></body></html>\n");
    Ok(html.into_bytes())
}

fn escape_html(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// Everything but RFC 3986 unreserved characters is escaped, so a name is one path
/// segment whatever it contains (`?`, `#`, `:`, quotes, spaces, non-UTF-8 bytes).
fn percent_encode(name: &[u8]) -> String {
    let mut out = String::with_capacity(name.len());
    for &b in name {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_cannot_inject_markup() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("<script>&\"x\".txt"), b"").unwrap();
        std::fs::write(dir.path().join(".hidden"), b"").unwrap();
        std::fs::create_dir(dir.path().join("sub dir")).unwrap();
        let html = render(&File::open(dir.path()).unwrap(), b"/a<b>/").unwrap();
        let html = String::from_utf8(html).unwrap();
        assert!(
            html.contains("<title>Index of /a&lt;b&gt;/</title>"),
            "{html}"
        );
        assert!(html.contains(
            "<a href=\"%3Cscript%3E%26%22x%22.txt\">&lt;script&gt;&amp;&quot;x&quot;.txt</a>"
        ));
        assert!(html.contains("<a href=\"sub%20dir/\">sub dir/</a>"));
        assert!(!html.contains("hidden"));
        assert!(html.find("sub dir").unwrap() < html.find("script").unwrap());
    }
}
