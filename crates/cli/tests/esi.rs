//! `tessera esi` end to end, through the real binary.

use std::path::PathBuf;
use std::process::{Command, Output};

/// A fresh directory under the system temp dir, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!("tessera-esi-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create temp dir");
        TempDir(dir)
    }

    fn write(&self, name: &str, body: &str) -> PathBuf {
        let path = self.0.join(name);
        std::fs::write(&path, body).expect("write file");
        path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn tessera(dir: &TempDir, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tessera"))
        .current_dir(&dir.0)
        .env_remove("RUST_BACKTRACE")
        .env_remove("RUST_LIB_BACKTRACE")
        .args(args)
        .output()
        .expect("run tessera")
}

fn stdout(o: &Output) -> String {
    String::from_utf8(o.stdout.clone()).expect("utf-8 stdout")
}

fn stderr(o: &Output) -> String {
    String::from_utf8(o.stderr.clone()).expect("utf-8 stderr")
}

const PAGE: &str = r#"<html><esi:include src="/header.html" ttl="60" timeout="500" onerror="continue"/>
<esi:vars>Hi $(HTTP_COOKIE{name}|'guest') in $(QUERY_STRING{city})</esi:vars>
<esi:choose><esi:when test="$(HTTP_USER_AGENT{os}) == 'MAC'">mac</esi:when><esi:otherwise>other</esi:otherwise></esi:choose>
<esi:try><esi:attempt><esi:include src="ads/top.html"/></esi:attempt><esi:except>no ad</esi:except></esi:try>
</html>
"#;

#[test]
fn check_lists_includes_and_variables_and_exits_zero_when_clean() {
    let dir = TempDir::new("check-clean");
    dir.write("page.html", PAGE);
    let out = tessera(&dir, &["esi", "check", "page.html"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        stdout(&out),
        "includes:\n\
         \x20 page.html:1:7 src=\"/header.html\" onerror=continue ttl=60s timeout=500ms\n\
         \x20 page.html:4:23 src=\"ads/top.html\"\n\
         variables:\n\
         \x20 HTTP_COOKIE{name}\n\
         \x20 QUERY_STRING{city}\n\
         \x20 HTTP_USER_AGENT{os}\n\
         warnings:\n"
    );
}

#[test]
fn check_reports_warnings_with_line_and_column_and_fails() {
    let dir = TempDir::new("check-warn");
    dir.write(
        "bad.html",
        "ok\n  <esi:frobnicate/>\n<esi:include/>\n</esi:try>",
    );
    let out = tessera(&dir, &["esi", "check", "bad.html"]);
    assert_eq!(out.status.code(), Some(1));
    let text = stdout(&out);
    assert!(
        text.contains("bad.html:2:3 unknown element esi:frobnicate"),
        "{text}"
    );
    assert!(
        text.contains("bad.html:3:1 esi:include without src"),
        "{text}"
    );
    assert!(
        text.contains("bad.html:4:1 unexpected </esi:try>"),
        "{text}"
    );
    assert!(
        stderr(&out).contains("bad.html: 3 warnings"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn render_uses_cookies_query_headers_and_fragment_files() {
    let dir = TempDir::new("render");
    dir.write("page.html", PAGE);
    dir.write("header.html", "<h1>HEAD</h1>");
    dir.write("top.html", "[ad <esi:vars>$(HTTP_HOST)</esi:vars>]");
    let out = tessera(
        &dir,
        &[
            "esi",
            "render",
            "page.html",
            "--url",
            "http://shop.example/p/index.html",
            "--cookie",
            "name=<Ann>",
            "--query",
            "city=Oslo",
            "-H",
            "User-Agent: Mozilla/5.0 (Macintosh; Intel Mac OS X 14_0)",
            "--fragment",
            "/header.html=header.html",
            "--fragment",
            "http://shop.example/p/ads/top.html=top.html",
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        stdout(&out),
        "<html><h1>HEAD</h1>\nHi &lt;Ann&gt; in Oslo\nmac\n[ad shop.example]\n</html>\n"
    );
}

#[test]
fn render_falls_back_to_except_and_continue() {
    let dir = TempDir::new("render-fallback");
    dir.write("page.html", PAGE);
    let out = tessera(&dir, &["esi", "render", "page.html"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        stdout(&out),
        "<html>\nHi guest in \nother\nno ad\n</html>\n"
    );
}

#[test]
fn render_fails_when_an_include_fails_unprotected() {
    let dir = TempDir::new("render-fail");
    dir.write("page.html", r#"a<esi:include src="/missing.html"/>b"#);
    let out = tessera(&dir, &["esi", "render", "page.html"]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(stdout(&out), "");
    assert!(
        stderr(&out).contains("http://localhost/missing.html"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn render_serves_inline_fragments() {
    let dir = TempDir::new("render-inline");
    dir.write(
        "page.html",
        r#"<esi:inline name="/promo" fetchable="no">P</esi:inline>|<esi:include src="/promo"/>"#,
    );
    let out = tessera(&dir, &["esi", "render", "page.html"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out), "P|P");
}

#[test]
fn missing_file_is_an_error_not_a_panic() {
    let dir = TempDir::new("missing");
    let out = tessera(&dir, &["esi", "check", "nope.html"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("reading nope.html"),
        "{}",
        stderr(&out)
    );
}

/// `<esi:include src/>`, `src=/>`, `src= />` name nothing: read as `src=""` they would
/// include the page itself until the depth limit. They are dropped with a warning.
#[test]
fn include_without_a_src_value_is_dropped_with_a_warning() {
    let dir = TempDir::new("valueless-src");
    dir.write(
        "page.html",
        r#"a<esi:include src/>b<esi:include src=/>c<esi:include src= />d"#,
    );
    let out = tessera(&dir, &["esi", "check", "page.html"]);
    assert_eq!(out.status.code(), Some(1));
    let warnings = stdout(&out);
    assert_eq!(
        warnings.matches("esi:include without src").count(),
        3,
        "{warnings}"
    );
    assert!(!warnings.contains("src=\"\""), "{warnings}");
    let out = tessera(&dir, &["esi", "render", "page.html"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out), "abcd");
}

/// An include of the page that contains it, at any depth, is a failed include (its alt
/// and onerror apply), never a loop to the depth limit.
#[test]
fn render_refuses_an_include_of_its_own_page() {
    let dir = TempDir::new("self-include");
    dir.write(
        "page.html",
        r#"[<esi:include src="/page.html" alt="/alt.html"/>]<esi:include src="/mid.html"/>"#,
    );
    dir.write("alt.html", "alt");
    dir.write(
        "mid.html",
        r#"(mid<esi:include src="/page.html" onerror="continue"/>)"#,
    );
    let out = tessera(
        &dir,
        &[
            "esi",
            "render",
            "page.html",
            "--url",
            "http://localhost/page.html",
            "--fragment",
            "/page.html=page.html",
            "--fragment",
            "/alt.html=alt.html",
            "--fragment",
            "/mid.html=mid.html",
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out), "[alt](mid)");
}

/// Character and entity references in attribute values are decoded once (the same
/// parser serves the proxy), then the URL is checked: `&amp;` joins query parameters,
/// while a `<` decoded from `&lt;` cannot be in a URL, so that include fails.
#[test]
fn render_decodes_references_in_include_urls_then_checks_the_url() {
    let dir = TempDir::new("references");
    dir.write(
        "page.html",
        r#"<esi:include src="/q?a=1&amp;b=2"/>|<esi:include src="/q?a=&#60;x" alt="/alt.html"/>"#,
    );
    dir.write("q.html", "q");
    dir.write("alt.html", "alt");
    let out = tessera(
        &dir,
        &[
            "esi",
            "render",
            "page.html",
            "--fragment",
            "/q?a=1&b=2=q.html",
            "--fragment",
            "/q?a=<x=q.html",
            "--fragment",
            "/alt.html=alt.html",
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out), "q|alt");
}
