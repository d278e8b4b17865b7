//! Access policy per host and route (docs/security.md, "Access rules"): ordered
//! `allow`/`deny` lists on the client a trusted proxy names, `deny_status`, the refusals
//! counted in `tessera_access_denied_total`.
//!
//! The test talks to tessera from 127.0.0.1, which the configuration trusts as a proxy,
//! so each request names its own client in `X-Forwarded-For`, IPv4 or IPv6.

use std::io::Write;

use crate::harness::{check_config_output, read_response, Response, Server, Site};
use crate::metrics::{admin_addr, admin_get, samples};

/// A GET of `path` for `host`, from the client `client` (through the trusted proxy).
fn get_as(server: &Server, host: &str, path: &str, client: &str) -> Response {
    let mut stream = server.connect();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {host}\r\nX-Forwarded-For: {client}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    read_response(&mut stream, false)
}

fn body(r: &Response) -> String {
    String::from_utf8_lossy(&r.body).into_owned()
}

const ACCESS: &str = r#"
admin_listen = "127.0.0.1:0"
trusted_proxies = ["127.0.0.1"]
access = [{ deny = "192.0.2.66" }, { allow = "all" }]

[[route]]
prefix = "/staff"
respond = { body = "staff only" }
access = [
  { deny = "192.168.1.1" },
  { allow = "192.168.0.0/16" },
  { allow = "2001:db8::/32" },
  { allow = "127.0.0.1" },
  { deny = "all" },
]
deny_status = 404

[[host]]
names = ["closed.test"]
access = [{ allow = "10.1.2.3" }, { deny = "0.0.0.0/0" }, { deny = "::/0" }]
"#;

#[test]
fn access_lists_refuse_in_order_with_their_status() {
    let site = Site::new();
    let server = site.serve_with(ACCESS);
    let cases = [
        // The route's list: the first entry that matches decides.
        ("t", "/staff", "192.168.1.1", 404),
        ("t", "/staff", "192.168.1.2", 200),
        ("t", "/staff", "2001:db8::7", 200),
        ("t", "/staff", "2001:db9::7", 404),
        ("t", "/staff", "10.0.0.1", 404),
        // The right-most address that is not a trusted proxy's is the client.
        ("t", "/staff", "10.0.0.1, 192.168.3.4", 200),
        // Its own list replaces the host's: 192.0.2.66 falls to `deny = "all"` here.
        ("t", "/staff", "192.0.2.66", 404),
        // Elsewhere the top-level list holds, with the default 403.
        ("t", "/hello.txt", "192.0.2.66", 403),
        ("t", "/hello.txt", "192.0.2.67", 200),
        ("t", "/hello.txt", "2001:db9::7", 200),
        // A host's own list, on every path of the host.
        ("closed.test", "/hello.txt", "10.1.2.3", 200),
        ("closed.test", "/hello.txt", "10.1.2.4", 403),
        ("closed.test", "/hello.txt", "2001:db8::1", 403),
        // The top-level routes are not the host's: its list refuses.
        ("closed.test", "/staff", "10.1.2.4", 403),
    ];
    for (host, path, client, status) in cases {
        let r = get_as(&server, host, path, client);
        assert_eq!(r.status, status, "{host} {path} from {client}");
        if status == 200 && path == "/staff" {
            assert_eq!(body(&r), "staff only");
        }
    }
    let (_, text) = admin_get(admin_addr(&server), "/metrics", "");
    let metrics = samples(&text);
    let denied = |host: &str| {
        metrics
            .get(&format!(
                "tessera_access_denied_total{{host=\"{host}\",reason=\"acl\"}}"
            ))
            .copied()
    };
    assert_eq!(denied("default"), Some(5.0), "{text}");
    assert_eq!(denied("closed.test"), Some(3.0), "{text}");
}

#[test]
fn check_config_names_the_access_entry_that_is_wrong() {
    let site = Site::new();
    let path = site.dir.path().join("tessera.toml");
    for (toml, want) in [
        (
            "[[route]]\nprefix = \"/a\"\nrespond = { body = \"a\" }\naccess = [{ allow = \"10.0.0.0/8\" }, { allow = \"10.0.0.1\", deny = \"all\" }]\n",
            ":4: route[0].access: entry 1: give one of `allow` and `deny`",
        ),
        (
            "access = [{ deny = \"10.0.0.0/33\" }]\n",
            ":1: access: entry 0: `10.0.0.0/33`: the prefix length is not 0-32",
        ),
        (
            "[[host]]\nnames = [\"a.test\"]\naccess = [{ deny = \"all\" }]\ndeny_status = 200\n",
            ":4: host[0].deny_status: `200` is not a status 400-599",
        ),
    ] {
        std::fs::write(&path, toml).unwrap();
        let (code, stderr) = check_config_output(&path);
        assert_eq!(code, Some(1), "{stderr}");
        assert!(stderr.contains(want), "{stderr} lacks {want}");
    }
}
