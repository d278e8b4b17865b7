//! Access policy per host and route (docs/security.md, "Access rules"): ordered
//! `allow`/`deny` lists on the client a trusted proxy names, `deny_status`, the refusals
//! counted in `tessera_access_denied_total`.
//!
//! The test talks to tessera from 127.0.0.1, which the configuration trusts as a proxy,
//! so each request names its own client in `X-Forwarded-For`, IPv4 or IPv6.

use std::io::Write;

use crate::harness::{check_config_output, eventually, read_response, Response, Server, Site};
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

[[script]]
prefix = "/lua"
path = "{DIR}/hello.lua"
access = [{ deny = "10.9.9.9" }]
deny_status = 451

[[host]]
names = ["closed.test"]
access = [{ allow = "10.1.2.3" }, { deny = "0.0.0.0/0" }, { deny = "::/0" }]
"#;

#[test]
fn access_lists_refuse_in_order_with_their_status() {
    let site = Site::new();
    let dir = site.dir.path().display().to_string();
    std::fs::write(
        site.dir.path().join("hello.lua"),
        "return { content = function(r) return 'lua' end }\n",
    )
    .unwrap();
    let server = site.serve_with(&ACCESS.replace("{DIR}", &dir));
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
        // A script mount's own list.
        ("t", "/lua/x", "10.9.9.9", 451),
        ("t", "/lua/x", "10.9.9.8", 200),
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
    assert_eq!(denied("default"), Some(6.0), "{text}");
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

/// Runs `program args...` with `input`, which must succeed; its standard output.
fn run(program: &str, args: &[&str], input: &[u8]) -> String {
    let mut child = std::process::Command::new(program)
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{program}: {e} (scripts/test.sh installs it)"));
    child.stdin.take().unwrap().write_all(input).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{program} {args:?}: {out:?}");
    String::from_utf8(out.stdout).unwrap()
}

/// An htpasswd file with `ann` (bcrypt, by Apache's `htpasswd -B`) and `bob`
/// (SHA-512-crypt, by `openssl passwd -6`), then `extra` lines.
fn htpasswd(site: &Site, extra: &str) -> std::path::PathBuf {
    let path = site.dir.path().join("htpasswd");
    let ann = run("htpasswd", &["-nbB", "-C", "5", "ann", "ann-secret"], b"");
    let bob = run("openssl", &["passwd", "-6", "bob-secret"], b"");
    let text = format!("# staff\n{}\nbob:{}{extra}", ann.trim(), bob);
    std::fs::write(&path, text).unwrap();
    path
}

/// A GET of `path` with `Authorization: Basic` of `user:password` (none: no field).
fn get_with(server: &Server, path: &str, credentials: Option<&str>) -> Response {
    let field = credentials.map_or(String::new(), |c| {
        let encoded = run("base64", &["-w0"], c.as_bytes());
        format!("Authorization: Basic {encoded}\r\n")
    });
    let mut stream = server.connect();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: t\r\n{field}Connection: close\r\n\r\n"
    )
    .unwrap();
    read_response(&mut stream, false)
}

#[test]
fn basic_auth_takes_bcrypt_and_sha512_users_and_refuses_the_rest_with_the_realm() {
    let site = Site::new();
    let file = htpasswd(&site, "");
    let server = site.serve_with(&format!(
        "admin_listen = \"127.0.0.1:0\"\n\
         [[route]]\n\
         prefix = \"/staff\"\n\
         respond = {{ body = \"staff only\" }}\n\
         basic_auth = {{ realm = \"staff\", htpasswd = \"{}\" }}\n",
        file.display()
    ));
    let cases = [
        (None, 401),
        (Some("ann:ann-secret"), 200),
        // Remembered: the same answer without a verification.
        (Some("ann:ann-secret"), 200),
        (Some("ann:wrong"), 401),
        (Some("bob:bob-secret"), 200),
        (Some("bob:ann-secret"), 401),
        (Some("carol:ann-secret"), 401),
        (Some("ann"), 401),
    ];
    for (credentials, status) in cases {
        let r = get_with(&server, "/staff", credentials);
        assert_eq!(r.status, status, "{credentials:?}");
        match status {
            200 => assert_eq!(body(&r), "staff only"),
            _ => assert_eq!(
                r.header("www-authenticate"),
                Some("Basic realm=\"staff\""),
                "{credentials:?}"
            ),
        }
    }
    // Other paths ask for nothing.
    assert_eq!(get_with(&server, "/hello.txt", None).status, 200);
    // A bearer token is not basic credentials.
    let mut stream = server.connect();
    write!(
        stream,
        "GET /staff HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer YW5uOmFubi1zZWNyZXQ=\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    assert_eq!(read_response(&mut stream, false).status, 401);
    // Pipelined: a request that waits for its verification is answered in its turn.
    let mut stream = server.connect();
    write!(
        stream,
        "GET /staff HTTP/1.1\r\nHost: t\r\nAuthorization: Basic Ym9iOmJvYi1zZWNyZXQ=\r\n\r\n\
         GET /hello.txt HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let first = read_response(&mut stream, false);
    assert_eq!((first.status, body(&first).as_str()), (200, "staff only"));
    let second = read_response(&mut stream, false);
    assert_eq!(
        (second.status, body(&second).as_str()),
        (200, "hello world\n")
    );
    // Over HTTP/2 (cleartext, prior knowledge) the same.
    let url = format!("http://{}/staff", server.addr);
    for (user, want) in [("bob:bob-secret", "200"), ("bob:nope", "401")] {
        let code = run(
            "curl",
            &[
                "-s",
                "-o",
                "/dev/null",
                "-w",
                "%{http_code}",
                "--http2-prior-knowledge",
                "-u",
                user,
                &url,
            ],
            b"",
        );
        assert_eq!(code, want, "{user} over h2");
    }
    let (_, text) = admin_get(admin_addr(&server), "/metrics", "");
    let refused = samples(&text)
        .get("tessera_access_denied_total{host=\"default\",reason=\"auth\"}")
        .copied();
    assert_eq!(refused, Some(7.0), "{text}");
    // A reload reads the file again: ann's new password, and the old one forgotten.
    let ann = run("htpasswd", &["-nbB", "-C", "5", "ann", "new-secret"], b"");
    std::fs::write(&file, ann).unwrap();
    server.signal(libc::SIGHUP);
    eventually("the new htpasswd", || {
        get_with(&server, "/staff", Some("ann:new-secret")).status == 200
    });
    assert_eq!(
        get_with(&server, "/staff", Some("ann:ann-secret")).status,
        401
    );
    assert_eq!(
        get_with(&server, "/staff", Some("bob:bob-secret")).status,
        401
    );
}

#[test]
fn a_weak_htpasswd_scheme_is_refused_at_load_naming_the_file_and_line() {
    let site = Site::new();
    let md5 = run("htpasswd", &["-nbm", "eve", "eve-secret"], b"");
    let file = htpasswd(&site, &md5);
    let path = site.dir.path().join("tessera.toml");
    std::fs::write(
        &path,
        format!(
            "[[route]]\nprefix = \"/staff\"\nrespond = {{ body = \"x\" }}\n\
             basic_auth = {{ realm = \"staff\", htpasswd = \"{}\" }}\n",
            file.display()
        ),
    )
    .unwrap();
    let (code, stderr) = check_config_output(&path);
    assert_eq!(code, Some(1), "{stderr}");
    let want = format!(
        ":4: route[0].basic_auth: {}:4: user `eve`: Apache MD5 (`$apr1$`) is too weak",
        file.display()
    );
    assert!(stderr.contains(&want), "{stderr} lacks {want}");
}

/// An auth server on an ephemeral port: `Bearer good` is let through (200, `X-User:
/// ann`), `Bearer bad` refused (403 with a body and `X-Reason`), anything else asked to
/// authenticate (401 with `WWW-Authenticate: Bearer`). Each request's head lines go
/// into the list it returns, one request's lines joined by newlines.
fn auth_server() -> (
    std::net::SocketAddr,
    std::sync::Arc<std::sync::Mutex<Vec<String>>>,
) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let heads = seen.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut reader = std::io::BufReader::new(stream.try_clone().unwrap());
            let Some((target, fields)) = crate::harness::read_request_head(&mut reader) else {
                continue;
            };
            let has = |want: &str| fields.iter().any(|f| f.eq_ignore_ascii_case(want));
            let answer = if has("authorization: Bearer good") {
                "HTTP/1.1 200 OK\r\nX-User: ann\r\nX-Other: not copied\r\nContent-Length: 0\r\n"
                    .to_string()
            } else if has("authorization: Bearer bad") {
                "HTTP/1.1 403 Forbidden\r\nX-Reason: bad token\r\nContent-Length: 8\r\n\r\nno entry"
                    .to_string()
            } else {
                "HTTP/1.1 401 Unauthorized\r\nWWW-Authenticate: Bearer\r\nContent-Length: 11\r\n\r\nwho are you"
                    .to_string()
            };
            let answer = match answer.ends_with("\r\n") {
                true => format!("{answer}Connection: close\r\n\r\n"),
                false => answer.replacen("\r\n\r\n", "\r\nConnection: close\r\n\r\n", 1),
            };
            heads
                .lock()
                .unwrap()
                .push(format!("{target}\n{}", fields.join("\n")));
            let _ = stream.write_all(answer.as_bytes());
        }
    });
    (addr, seen)
}

/// A GET of `path` with `fields` (lines ending in CRLF).
fn get_fields(server: &Server, path: &str, fields: &str) -> Response {
    let mut stream = server.connect();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: t\r\n{fields}Connection: close\r\n\r\n"
    )
    .unwrap();
    read_response(&mut stream, false)
}

#[test]
fn forward_auth_lets_through_refuses_and_fails_as_its_upstream_says() {
    let origin = crate::harness::echo_origin();
    let (auth, seen) = auth_server();
    // A port nothing listens on.
    let down = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let site = Site::new();
    let server = site.serve_with(&format!(
        r#"
admin_listen = "127.0.0.1:0"

[[upstream]]
name = "app"
addresses = ["{origin}"]

[[upstream]]
name = "auth"
addresses = ["{auth}"]

[[upstream]]
name = "down"
addresses = ["{down}"]

[[route]]
prefix = "/app"
upstream = "app"
forward_auth = {{ upstream = "auth", path = "/check?site=t", copy_headers = ["X-User"] }}

[[route]]
prefix = "/cached"
upstream = "app"
forward_auth = {{ upstream = "auth", path = "/check", copy_headers = ["X-User"], cache = "10s" }}

[[route]]
prefix = "/down"
upstream = "app"
forward_auth = {{ upstream = "down", path = "/check" }}

[[route]]
prefix = "/open"
upstream = "app"
forward_auth = {{ upstream = "down", path = "/check", auth_failure = "allow" }}
"#
    ));
    let hits = || seen.lock().unwrap().len();
    // Allowed: the answer's X-User replaces the one the client sent; X-Other stays out.
    let r = get_fields(
        &server,
        "/app/page?q=1",
        "Authorization: Bearer good\r\nX-User: mallory\r\n",
    );
    assert_eq!(r.status, 200, "{}", body(&r));
    let echoed = body(&r).to_ascii_lowercase();
    assert!(echoed.starts_with("/app/page?q=1\n"), "{echoed}");
    assert!(echoed.contains("x-user: ann"), "{echoed}");
    assert!(
        !echoed.contains("mallory") && !echoed.contains("x-other"),
        "{echoed}"
    );
    let asked = seen.lock().unwrap().last().unwrap().to_ascii_lowercase();
    for want in [
        "/check?site=t\n",
        "x-forwarded-method: get",
        "x-forwarded-uri: /app/page?q=1",
        "x-forwarded-host: t",
        "x-forwarded-proto: http",
        "x-forwarded-for: 127.0.0.1",
        "authorization: bearer good",
    ] {
        assert!(asked.contains(want), "{asked} lacks {want}");
    }
    // Refused: the auth server's status, fields and body go to the client.
    let r = get_fields(&server, "/app/page", "Authorization: Bearer bad\r\n");
    assert_eq!((r.status, body(&r).as_str()), (403, "no entry"));
    assert_eq!(r.header("x-reason"), Some("bad token"));
    let r = get_fields(&server, "/app/page", "");
    assert_eq!((r.status, body(&r).as_str()), (401, "who are you"));
    assert_eq!(r.header("www-authenticate"), Some("Bearer"));
    // The auth server down: 500, or through with auth_failure = "allow".
    assert_eq!(get_fields(&server, "/down/x", "").status, 500);
    let r = get_fields(&server, "/open/x", "");
    assert_eq!(r.status, 200);
    assert!(body(&r).starts_with("/open/x\n"), "{}", body(&r));
    // Cached: the second request with the same credentials does not ask again; other
    // credentials do.
    let before = hits();
    for _ in 0..3 {
        let r = get_fields(&server, "/cached/x", "Authorization: Bearer good\r\n");
        assert_eq!(r.status, 200);
        assert!(body(&r).to_ascii_lowercase().contains("x-user: ann"));
    }
    assert_eq!(hits(), before + 1);
    assert_eq!(
        get_fields(&server, "/cached/x", "Authorization: Bearer bad\r\n").status,
        403
    );
    assert_eq!(hits(), before + 2);
    let (_, text) = admin_get(admin_addr(&server), "/metrics", "");
    let refused = samples(&text)
        .get("tessera_access_denied_total{host=\"default\",reason=\"forward_auth\"}")
        .copied();
    assert_eq!(refused, Some(4.0), "{text}");
}

#[test]
fn check_config_names_a_forward_auth_without_its_upstream() {
    let site = Site::new();
    let path = site.dir.path().join("tessera.toml");
    for (toml, want) in [
        (
            "[[upstream]]\nname = \"app\"\naddresses = [\"127.0.0.1:9\"]\n[[route]]\nprefix = \"/a\"\nupstream = \"app\"\nforward_auth = { upstream = \"auth\" }\n",
            ":7: invalid configuration: `route[0].forward_auth`: no upstream named `auth`",
        ),
        (
            "[[upstream]]\nname = \"app\"\naddresses = [\"127.0.0.1:9\"]\n[[route]]\nprefix = \"/a\"\nupstream = \"app\"\nforward_auth = { upstream = \"app\", cache = \"ten\" }\n",
            "route[0].forward_auth: `cache`: \"ten\" is not a duration",
        ),
    ] {
        std::fs::write(&path, toml).unwrap();
        let (code, stderr) = check_config_output(&path);
        assert_eq!(code, Some(1), "{stderr}");
        assert!(stderr.contains(want), "{stderr} lacks {want}");
    }
}

/// A Lua `access` that asks an upstream (the echo origin, which answers with the fields
/// it got) whether the request's token is good, and refuses it or lets it through with a
/// field added: with the script's own `content`, and in front of a proxied route.
const GATE: &str = r#"
local M = {}

function M.access(r)
  local res, err = tessera.http.request{
    upstream = "echo",
    path = "/verdict",
    headers = { ["X-Token"] = r:header("x-token") or "none" },
  }
  if not res then r:exit(502, err) end
  if not res.body:lower():find("x-token: good", 1, true) then
    r:exit(403, "refused after asking /verdict: " .. res.status .. "\n")
  end
  r:set_req_header("X-Checked", "by lua")
end

function M.header_filter(r)
  r:set_header("X-Gate", "seen")
end

return M
"#;

#[test]
fn a_lua_access_phase_awaits_an_upstream_and_refuses_or_lets_through() {
    let origin = crate::harness::echo_origin();
    let site = Site::new();
    let dir = site.dir.path().display().to_string();
    std::fs::write(site.dir.path().join("gate.lua"), GATE).unwrap();
    let with_content = GATE.replace(
        "return M\n",
        "function M.content(r)\n  return 'content sees ' .. r:header('x-checked')\nend\n\nreturn M\n",
    );
    std::fs::write(site.dir.path().join("gate_content.lua"), with_content).unwrap();
    let server = site.serve_with(&format!(
        r#"
[[upstream]]
name = "echo"
addresses = ["{origin}"]

[[script]]
prefix = "/lua"
path = "{dir}/gate_content.lua"

[[script]]
prefix = "/app"
path = "{dir}/gate.lua"

[[route]]
prefix = "/app"
upstream = "echo"
"#
    ));
    // With the script's own content.
    let r = get_fields(&server, "/lua/x", "X-Token: good\r\n");
    assert_eq!((r.status, body(&r).as_str()), (200, "content sees by lua"));
    assert_eq!(r.header("x-gate"), Some("seen"));
    let r = get_fields(&server, "/lua/x", "X-Token: bad\r\n");
    assert_eq!(r.status, 403);
    assert_eq!(body(&r), "refused after asking /verdict: 200\n");
    assert_eq!(r.header("x-gate"), Some("seen"));
    // In front of the proxy: the origin gets the field the script added.
    let r = get_fields(&server, "/app/page", "X-Token: good\r\n");
    assert_eq!(r.status, 200);
    let echoed = body(&r).to_ascii_lowercase();
    assert!(echoed.starts_with("/app/page\n"), "{echoed}");
    assert!(echoed.contains("x-checked: by lua"), "{echoed}");
    assert_eq!(r.header("x-gate"), Some("seen"));
    assert_eq!(get_fields(&server, "/app/page", "").status, 403);
    // Pipelined behind a request that waits, a static file is answered in its turn;
    // and over HTTP/2 the same.
    let mut stream = server.connect();
    write!(
        stream,
        "GET /lua/x HTTP/1.1\r\nHost: t\r\nX-Token: good\r\n\r\n\
         GET /hello.txt HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let first = read_response(&mut stream, false);
    assert_eq!(body(&first), "content sees by lua");
    let second = read_response(&mut stream, false);
    assert_eq!(body(&second), "hello world\n");
    let url = format!("http://{}/lua/x", server.addr);
    let out = run(
        "curl",
        &["-s", "--http2-prior-knowledge", "-H", "X-Token: good", &url],
        b"",
    );
    assert_eq!(out, "content sees by lua");
}

#[test]
fn a_request_moved_by_lua_access_is_checked_again_by_the_route_it_lands_on() {
    let site = Site::new();
    let dir = site.dir.path();
    // Staff: ann and bob; the route the script moves requests to: bob only.
    let staff = htpasswd(&site, "");
    let bob = run("openssl", &["passwd", "-6", "bob-secret"], b"");
    let bob_only = dir.join("htpasswd-b");
    std::fs::write(&bob_only, format!("bob:{bob}")).unwrap();
    std::fs::write(
        dir.join("move.lua"),
        "return { access = function(r) r:set_path('/b' .. r:path()) end }\n",
    )
    .unwrap();
    let server = site.serve_with(&format!(
        r#"
[[script]]
prefix = "/a"
path = "{dir}/move.lua"
basic_auth = {{ realm = "staff", htpasswd = "{staff}" }}

[[route]]
prefix = "/b"
respond = {{ body = "b" }}
basic_auth = {{ realm = "b", htpasswd = "{bob_only}" }}
"#,
        dir = dir.display(),
        staff = staff.display(),
        bob_only = bob_only.display(),
    ));
    // ann passes /a's check, not /b's: what /a found does not let her into /b.
    let r = get_with(&server, "/a/x", Some("ann:ann-secret"));
    assert_eq!(r.status, 401);
    assert_eq!(r.header("www-authenticate"), Some("Basic realm=\"b\""));
    // bob passes both, each verified against its own file.
    let r = get_with(&server, "/a/x", Some("bob:bob-secret"));
    assert_eq!((r.status, body(&r).as_str()), (200, "b"));
}
