//! `[route.compression]`: a `[[route]]` with a compression table of its own, in place of
//! its site's; `compress = false` as its shorthand; a bad table refused naming the route.

use std::io::Write;

use crate::compression::{decode, origin, page_text, request, vary_names_accept_encoding};
use crate::harness::Site;

/// Runs `tessera check-config` on `toml`; (exit code, stderr).
fn check(site: &Site, toml: &str) -> (i32, String) {
    let config = site.dir.path().join("check.toml");
    std::fs::write(&config, toml).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tessera"))
        .arg("check-config")
        .arg("--root")
        .arg(site.root())
        .arg("--config")
        .arg(&config)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    (out.status.code().unwrap_or(-1), stderr)
}

/// The origin's upstream and a catch-all route (the site's policy), then `routes`.
fn routes(routes: &str) -> String {
    format!(
        "[[upstream]]\nname = \"origin\"\naddresses = [\"{}\"]\n\
         [[route]]\nprefix = \"/\"\nupstream = \"origin\"\n{routes}",
        origin()
    )
}

const EVERY: &str = "Accept-Encoding: zstd, br, gzip\r\n";

#[test]
fn routes_of_one_host_compress_each_with_their_own_table() {
    let site = Site::new();
    let server = site.serve_with(&routes(
        "[[route]]\nprefix = \"/page\"\nupstream = \"origin\"\n\
         [route.compression]\nalgorithms = [\"gzip\"]\nlevel.gzip = 9\n\
         [[route]]\nprefix = \"/small\"\nupstream = \"origin\"\n\
         [route.compression]\nalgorithms = [\"br\"]\nmin_length = 50\n\
         [[route]]\nprefix = \"/png\"\nupstream = \"origin\"\n\
         [route.compression]\ntypes = [\"image/png\"]\n\
         [[route]]\nprefix = \"/page/off\"\nupstream = \"origin\"\n\
         [route.compression]\nenabled = false\n",
    ));
    // The site's policy: zstd first, 1024 bytes at least, text types.
    let r = request(&server, "GET", "/esi", EVERY);
    assert_eq!(r.header("content-encoding"), Some("zstd"));
    // `/page`: gzip only, whatever the client prefers.
    let r = request(&server, "GET", "/page", EVERY);
    assert_eq!(r.header("content-encoding"), Some("gzip"));
    assert!(vary_names_accept_encoding(&r));
    assert_eq!(decode("gzip", &r.body), page_text());
    // `/small` (100 bytes): under the site's min_length, above the route's.
    let r = request(&server, "GET", "/small", EVERY);
    assert_eq!(r.header("content-encoding"), Some("br"));
    assert_eq!(decode("br", &r.body), vec![b'x'; 100]);
    // `/png`: a type the site leaves alone, listed on this route.
    let r = request(&server, "GET", "/png", EVERY);
    assert_eq!(r.header("content-encoding"), Some("zstd"));
    assert_eq!(decode("zstd", &r.body), vec![7; 5000]);
    // A client that accepts only what a route does not offer gets identity.
    let r = request(&server, "GET", "/page", "Accept-Encoding: zstd\r\n");
    assert_eq!(
        (r.header("content-encoding"), &r.body),
        (None, &page_text())
    );
    // `enabled = false` on a route inside `/page`'s (the longest prefix wins).
    let r = request(&server, "GET", "/page/off", EVERY);
    assert_eq!(
        (r.header("content-encoding"), &r.body),
        (None, &page_text())
    );
}

#[test]
fn compress_false_is_still_the_shorthand_for_a_route_without_compression() {
    let site = Site::new();
    let server = site.serve_with(&routes(
        "[[route]]\nprefix = \"/page\"\nupstream = \"origin\"\ncompress = false\n",
    ));
    let r = request(&server, "GET", "/page", "Accept-Encoding: gzip\r\n");
    assert_eq!(r.header("content-encoding"), None);
    assert_eq!(r.body, page_text());
    let r = request(&server, "GET", "/esi", "Accept-Encoding: gzip\r\n");
    assert_eq!(r.header("content-encoding"), Some("gzip"));
}

#[test]
fn a_host_route_has_its_own_table_too() {
    let site = Site::new();
    let server = site.serve_with(&format!(
        "[[upstream]]\nname = \"origin\"\naddresses = [\"{}\"]\n\
         [[host]]\nnames = [\"a.test\"]\n[host.compression]\nalgorithms = [\"br\"]\n\
         [[host.route]]\nprefix = \"/\"\nupstream = \"origin\"\n\
         [[host.route]]\nprefix = \"/page\"\nupstream = \"origin\"\n\
         [host.route.compression]\nalgorithms = [\"gzip\"]\n",
        origin()
    ));
    let get = |path: &str| {
        let mut stream = server.connect();
        write!(
            stream,
            "GET {path} HTTP/1.1\r\nHost: a.test\r\n{EVERY}Connection: close\r\n\r\n"
        )
        .unwrap();
        crate::harness::read_response(&mut stream, false)
    };
    assert_eq!(get("/esi").header("content-encoding"), Some("br"));
    let r = get("/page");
    assert_eq!(r.header("content-encoding"), Some("gzip"));
    assert_eq!(decode("gzip", &r.body), page_text());
}

#[test]
fn a_bad_route_compression_table_is_refused_naming_the_route() {
    let site = Site::new();
    let cases = [
        (
            "[route.compression]\nalgorithms = [\"deflate\"]\n",
            "route `/page`: compression: unknown algorithm \"deflate\"",
        ),
        (
            "[route.compression]\nlevel.gzip = 12\n",
            "route `/page`: compression: level.gzip = 12 is out of range (1-9)",
        ),
        (
            "compress = false\n[route.compression]\nalgorithms = [\"gzip\"]\n",
            "route `/page`: `compress` and `[route.compression]` together",
        ),
        (
            "[route.compression]\nlevels = 3\n",
            "unknown field `levels`",
        ),
        (
            "[route.compression]\nfile_cache_bytes = 1000\n",
            "route `/page`: `compression.file_cache_bytes` is a site's key",
        ),
    ];
    for (table, expected) in cases {
        let toml = routes(&format!(
            "[[route]]\nprefix = \"/page\"\nupstream = \"origin\"\n{table}"
        ));
        let (code, stderr) = check(&site, &toml);
        assert_eq!(code, 1, "{table}: {stderr}");
        assert!(stderr.contains(expected), "{table}: {stderr}");
    }
}

#[test]
fn a_root_route_with_a_compression_table_is_refused_naming_the_route() {
    let site = Site::new();
    for table in [
        "[route.compression]\nalgorithms = [\"gzip\"]\n",
        "compress = false\n",
    ] {
        let toml = routes(&format!(
            "[[route]]\nprefix = \"/static\"\nroot = \"{}\"\n{table}",
            site.root().display()
        ));
        let (code, stderr) = check(&site, &toml);
        assert_eq!(code, 1, "{table}: {stderr}");
        assert!(
            stderr.contains(
                "route `/static`: `compress` and `[route.compression]` do not apply to a \
                 `root` route"
            ),
            "{table}: {stderr}"
        );
    }
}

#[test]
fn a_reload_applies_a_route_table_and_refuses_a_bad_one() {
    let site = Site::new();
    let server = site.serve_with(&routes(
        "[[route]]\nprefix = \"/page\"\nupstream = \"origin\"\n\
         [route.compression]\nalgorithms = [\"gzip\"]\n",
    ));
    let config = site.dir.path().join("tessera.toml");
    let coding = || {
        request(&server, "GET", "/page", EVERY)
            .header("content-encoding")
            .map(str::to_string)
    };
    assert_eq!(coding().as_deref(), Some("gzip"));
    let reloaded = |toml: String| {
        std::fs::write(&config, toml).unwrap();
        server.signal(libc::SIGHUP);
    };
    reloaded(routes(
        "[[route]]\nprefix = \"/page\"\nupstream = \"origin\"\n\
         [route.compression]\nalgorithms = [\"br\"]\n",
    ));
    crate::harness::eventually("the route's new table", || {
        coding().as_deref() == Some("br")
    });
    reloaded(routes(
        "[[route]]\nprefix = \"/page\"\nupstream = \"origin\"\n\
         [route.compression]\nalgorithms = [\"lzma\"]\n",
    ));
    crate::harness::eventually("the refusal logged", || {
        crate::harness::stderr_has(&server, "route `/page`: compression: unknown algorithm")
    });
    assert_eq!(coding().as_deref(), Some("br"), "the old table stays");
}

#[test]
fn a_cached_page_is_served_from_the_cache_with_its_route_table() {
    let site = Site::new();
    let server = site.serve_with(&routes(
        "[[route]]\nprefix = \"/cached/plain\"\nupstream = \"origin\"\n\
         [route.compression]\nalgorithms = [\"br\"]\n",
    ));
    // The site's policy would choose zstd; the route's, Brotli, for the miss and the hit.
    let miss = request(&server, "GET", "/cached/plain", EVERY);
    assert_eq!(miss.header("content-encoding"), Some("br"));
    assert_eq!(decode("br", &miss.body), page_text());
    let hit = request(&server, "GET", "/cached/plain", EVERY);
    assert!(hit.header("age").is_some(), "not a hit: {hit:?}");
    assert_eq!(hit.header("content-encoding"), Some("br"));
    assert!(vary_names_accept_encoding(&hit));
    assert_eq!(decode("br", &hit.body), page_text());
}

#[test]
fn a_host_route_error_names_its_host_and_max_streams_says_what_replaced_it() {
    let site = Site::new();
    let toml = format!(
        "[[upstream]]\nname = \"origin\"\naddresses = [\"{}\"]\n\
         [[host]]\nnames = [\"a.test\", \"www.a.test\"]\n\
         [[host.route]]\nprefix = \"/page\"\nupstream = \"origin\"\n\
         [host.route.compression]\nlevel.gzip = 12\n",
        origin()
    );
    let (code, stderr) = check(&site, &toml);
    assert_eq!(code, 1, "{stderr}");
    assert!(
        stderr.contains(
            "route `/page` of host `a.test`: compression: level.gzip = 12 is out of range"
        ),
        "{stderr}"
    );
    let replaced = "`max_streams` was replaced by the top-level `compression_memory`";
    for toml in [
        "[compression]\nmax_streams = 64\n".to_string(),
        routes("[[route]]\nprefix = \"/page\"\nupstream = \"origin\"\n[route.compression]\nmax_streams = 8\n"),
    ] {
        let (code, stderr) = check(&site, &toml);
        assert_eq!(code, 1, "{toml}: {stderr}");
        assert!(stderr.contains(replaced), "{toml}: {stderr}");
        assert!(!stderr.contains("unknown field"), "{toml}: {stderr}");
    }
}
