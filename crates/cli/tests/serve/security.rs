use crate::harness::{Site, SECRET};

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
