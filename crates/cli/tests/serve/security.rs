use crate::harness::{Server, Site, SECRET};

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

#[test]
fn traversal_attempts_never_leave_the_root() {
    let site = Site::new();
    let server = site.serve();
    let attempts = [
        "/../secret.txt",
        "/../../../../etc/passwd",
        "/%2e%2e/secret.txt",
        "/%2E%2E/%2e%2e/etc/passwd",
        "/docs/../../secret.txt",
        "/docs/%2e%2e/%2e%2e/secret.txt",
        "/..%2fsecret.txt",
        "/%2e%2e%2fsecret.txt",
        "/hello.txt%00.html",
        "/%00",
        "/escape.txt",
        "/escape-relative.txt",
        "/./../secret.txt",
        "/.%2e/secret.txt",
        "/%252e%252e/secret.txt",
    ];
    for path in attempts {
        let raw = format!("GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
        let response = server.exchange(raw.as_bytes());
        let text = String::from_utf8_lossy(&response);
        assert!(
            !contains(&response, SECRET),
            "{path} leaked the secret: {text}"
        );
        assert!(
            !contains(&response, b"root:"),
            "{path} leaked /etc/passwd: {text}"
        );
        let status = &text[9..12];
        assert!(
            ["400", "403", "404"].contains(&status),
            "{path} answered {status}"
        );
    }
    // A symlink that stays inside the root is fine.
    assert_eq!(server.get("/inside.txt").body, b"hello world\n");
}

/// A script's `access` phase guards its prefix however the path is spelled: mounts are
/// matched on the same normalised path files are found by, so `/%61pi`, `//api`,
/// `/./api` and `/x/../api` cannot reach `/api/secret.txt` around it.
#[test]
fn script_mounts_cannot_be_stepped_around() {
    let site = Site::new();
    std::fs::create_dir_all(site.root().join("api")).unwrap();
    site.write("api/secret.txt", b"guarded by the script\n");
    let script = site.dir.path().join("guard.lua");
    std::fs::write(
        &script,
        "return { access = function(r) r:exit(403, \"denied\\n\") end }\n",
    )
    .unwrap();
    let server = Server::start(
        &site.root(),
        &["--script", &format!("/api={}", script.display())],
    );
    for path in [
        "/api/secret.txt",
        "/%61pi/secret.txt",
        "/%61%70%69/secret.txt",
        "//api/secret.txt",
        "/./api/secret.txt",
        "/x/../api/secret.txt",
        "/api//secret.txt",
        "/api/./secret.txt",
        "/api?x=1",
    ] {
        let r = server.get(path);
        assert_eq!(r.status, 403, "{path} got past the script");
        assert_eq!(r.body, b"denied\n", "{path}");
    }
    // Outside the mount the static files are served as before, and a path that does not
    // normalise is refused, not handed to anyone.
    assert_eq!(server.get("/hello.txt").status, 200);
    assert_eq!(server.get("/%zz/api/secret.txt").status, 400);
    assert_eq!(server.get("/../api/secret.txt").status, 400);
}
