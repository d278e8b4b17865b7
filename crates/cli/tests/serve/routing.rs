//! Routing and rewriting in the configuration (issue 42): `[[route]]` matchers and
//! actions, and response edits, through the real binary on real sockets.

use std::io::Write;
use std::net::{TcpListener, TcpStream};

use crate::harness::*;

/// One request with `method`, `target` and extra `fields` on a new connection.
fn ask(server: &Server, method: &str, target: &str, fields: &str) -> Response {
    let mut stream = server.connect();
    write!(
        stream,
        "{method} {target} HTTP/1.1\r\nHost: test\r\n{fields}Connection: close\r\n\r\n"
    )
    .unwrap();
    read_response(&mut stream, method == "HEAD")
}

/// [`check_config_output`]'s standard error, the check having failed (exit code 1).
fn check_config(path: &std::path::Path) -> String {
    let (code, stderr) = check_config_output(path);
    assert_eq!(code, Some(1), "{stderr}");
    stderr
}

/// GETs each (target, status, body) of `cases`; the body is checked on a 200.
fn expect_all(server: &Server, cases: &[(&str, u16, &str)]) {
    for &(target, status, want) in cases {
        let r = ask(server, "GET", target, "");
        assert_eq!(r.status, status, "{target}");
        if status == 200 {
            assert_eq!(body(&r), want, "{target}");
        }
    }
}

fn body(r: &Response) -> String {
    String::from_utf8_lossy(&r.body).into_owned()
}

/// A config with `routes`, serving the site's root.
fn config(site: &Site, routes: &str) -> String {
    format!(
        "listen = [\"127.0.0.1:0\"]\nworkers = 1\nroot = \"{}\"\n{routes}",
        site.root().display()
    )
}

#[test]
fn respond_redirect_and_rewrite_answer_as_configured() {
    let site = Site::new();
    let server = site.serve_with(&config(
        &site,
        r#"
[[route]]
path = "/healthz"
respond = { status = 200, body = "ok\n", content_type = "text/plain" }

[[route]]
regex = "^/users/(?<id>[0-9]+)$"
methods = ["GET", "HEAD"]
redirect = { status = 301, to = "/u/$id?from=$arg_ref" }

[[route]]
prefix = "/moved"
redirect = { status = 308, to = "https://$host$request_uri" }

[[route]]
prefix = "/old/"
rewrite = { from = "^/old/(.*)$", to = "/$1" }

[[route]]
path = "/echo"
respond = { status = 202, body = "$request_uri $args $arg_a $http_x_who $cookie_sid $scheme $remote_addr" }

[[route]]
path = "/gone"
respond = { status = 410 }
"#,
    ));
    let r = ask(&server, "GET", "/healthz", "");
    assert_eq!((r.status, body(&r).as_str()), (200, "ok\n"));
    assert_eq!(r.header("content-type"), Some("text/plain"));

    let r = ask(&server, "GET", "/users/42?ref=mail", "");
    assert_eq!(r.status, 301);
    assert_eq!(r.header("location"), Some("/u/42?from=mail"));
    // The regex route takes GET and HEAD only: a POST goes to the files (no such file).
    assert_eq!(
        ask(&server, "POST", "/users/42", "Content-Length: 0\r\n").status,
        405
    );
    assert_eq!(ask(&server, "GET", "/users/x", "").status, 404);

    let r = ask(&server, "GET", "/moved/a?b=1", "");
    assert_eq!(r.status, 308);
    assert_eq!(r.header("location"), Some("https://test/moved/a?b=1"));

    // Rewritten, then routed again: to the file.
    let r = ask(&server, "GET", "/old/hello.txt", "");
    assert_eq!((r.status, body(&r).as_str()), (200, "hello world\n"));

    let r = ask(
        &server,
        "GET",
        "/echo?a=1&b=2",
        "X-Who: me\r\nCookie: x=1; sid=s3\r\n",
    );
    assert_eq!(r.status, 202);
    assert_eq!(body(&r), "/echo?a=1&b=2 a=1&b=2 1 me s3 http 127.0.0.1");

    let r = ask(&server, "GET", "/gone", "");
    assert_eq!((r.status, r.body.len()), (410, 0));
}

/// nginx's documented `location` example, and more paths: every route answers with its
/// own number, so the body says which one the request took.
#[test]
fn routes_are_chosen_in_nginx_s_order() {
    let site = Site::new();
    let routes = [
        r#"path = "/""#,
        r#"prefix = "/""#,
        r#"prefix = "/documents/""#,
        "prefix = \"/images/\"\nno_regex = true",
        "regex = '\\.(gif|jpg|jpeg)$'\ncase_insensitive = true",
        r#"regex = "^/documents/private/""#,
        r#"prefix = "/documents/private/old""#,
        r#"path = "/documents/""#,
        r#"prefix = "/api""#,
        r#"regex = "^/api/v[0-9]+/""#,
    ];
    let toml: String = routes
        .iter()
        .enumerate()
        .map(|(i, r)| format!("[[route]]\n{r}\nrespond = {{ body = \"{}\" }}\n\n", i + 1))
        .collect();
    let server = site.serve_with(&config(&site, &toml));
    let cases = [
        ("/", "1"),
        ("/index.html", "2"),
        ("/documents/document.html", "3"),
        ("/images/1.gif", "4"),
        ("/documents/1.jpg", "5"),
        ("/documents/1.JPG", "5"),
        ("/x/y/z.jpeg", "5"),
        ("/images/deep/a/b.png", "4"),
        ("/images", "2"),
        ("/documents/private/a", "6"),
        ("/documents/private/old/a.txt", "6"),
        ("/documents/private/old/a.gif", "5"),
        ("/documents/", "8"),
        ("/documents", "2"),
        ("/api", "9"),
        ("/api/x", "9"),
        ("/apix", "2"),
        ("/api/v2/users", "10"),
        ("/api/v2/u.gif", "5"),
        ("/a/b/c", "2"),
        ("/documentsx/a", "2"),
        // Routes match the normalised path.
        ("/%61pi/x", "9"),
        ("//images/../images/1.gif", "4"),
    ];
    for (path, want) in cases {
        assert_eq!(body(&ask(&server, "GET", path, "")), want, "{path}");
    }
}

#[test]
fn header_query_cookie_and_scheme_narrow_a_route() {
    let site = Site::new();
    let server = site.serve_with(&config(
        &site,
        r#"
[[route]]
prefix = "/api/"
header = { name = "X-Beta", equals = "1" }
respond = { body = "beta" }

[[route]]
prefix = "/api/"
query = { name = "debug" }
respond = { body = "debug" }

[[route]]
prefix = "/api/"
cookie = { name = "sid", regex = "^[a-z]+$" }
respond = { body = "session" }

[[route]]
prefix = "/api/"
scheme = "https"
respond = { body = "secure" }

[[route]]
prefix = "/api/"
client = ["10.0.0.0/8", "2001:db8::/32"]
respond = { body = "office" }

[[route]]
prefix = "/api/"
client = ["127.0.0.0/8"]
methods = ["POST"]
respond = { body = "loopback" }

[[route]]
prefix = "/api/"
respond = { body = "plain" }
"#,
    ));
    let cases = [
        ("/api/x", "X-Beta: 1\r\n", "beta"),
        ("/api/x", "X-Beta: 2\r\n", "plain"),
        ("/api/x?a&debug", "", "debug"),
        ("/api/x?debugx=1", "", "plain"),
        ("/api/x", "Cookie: a=b; sid=abc\r\n", "session"),
        ("/api/x", "Cookie: sid=ABC\r\n", "plain"),
        ("/api/x", "", "plain"),
    ];
    for (target, fields, want) in cases {
        assert_eq!(
            body(&ask(&server, "GET", target, fields)),
            want,
            "{target} {fields}"
        );
    }
    // The client is 127.0.0.1: not the office's network, but loopback (for a POST).
    let r = ask(&server, "POST", "/api/x", "Content-Length: 0\r\n");
    assert_eq!(body(&r), "loopback");
}

/// An origin that answers every request 200 with `origin` as its body, then closes.
fn origin() -> std::net::SocketAddr {
    named_origin("origin")
}

/// An origin that answers every request 200 with `name` and the target it got, then
/// closes.
fn named_origin(name: &'static str) -> std::net::SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut reader = std::io::BufReader::new(stream.try_clone().unwrap());
            if let Some((target, _)) = read_request_head(&mut reader) {
                let body = match name {
                    "origin" => name.to_string(),
                    _ => format!("{name} {target}"),
                };
                let _ = write!(
                    stream,
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
            }
        }
    });
    addr
}

/// An address nothing listens on.
fn dead() -> std::net::SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap()
}

#[test]
fn response_edits_with_always_reach_200_304_404_and_502() {
    let site = Site::new();
    let server = site.serve_with(&config(
        &site,
        &format!(
            r#"
response_headers = {{ set = {{ "X-Content-Type-Options" = "nosniff", "Strict-Transport-Security" = "max-age=63072000" }}, always = true }}

[[upstream]]
name = "up"
addresses = ["{up}"]

[[upstream]]
name = "down"
addresses = ["{down}"]

[[route]]
prefix = "/up/"
upstream = "up"
response_headers = {{ add = {{ "X-Route" = "up" }}, remove = ["X-Nothing"] }}

[[route]]
prefix = "/down/"
upstream = "down"

[[route]]
prefix = "/plain/"
respond = {{ status = 404, body = "no" }}
response_headers = {{ set = {{ "X-Only-Success" = "1" }} }}
"#,
            up = origin(),
            down = dead(),
        ),
    ));
    let ok = ask(&server, "GET", "/hello.txt", "");
    assert_eq!(ok.status, 200);
    let etag = ok.header("etag").unwrap().to_string();
    let not_modified = ask(
        &server,
        "GET",
        "/hello.txt",
        &format!("If-None-Match: {etag}\r\n"),
    );
    assert_eq!(not_modified.status, 304);
    let missing = ask(&server, "GET", "/nothing-here", "");
    assert_eq!(missing.status, 404);
    let proxied = ask(&server, "GET", "/up/x", "");
    assert_eq!((proxied.status, body(&proxied).as_str()), (200, "origin"));
    assert_eq!(proxied.header("x-route"), Some("up"));
    let bad_gateway = ask(&server, "GET", "/down/x", "");
    assert_eq!(bad_gateway.status, 502);
    for r in [&ok, &not_modified, &missing, &proxied, &bad_gateway] {
        assert_eq!(
            r.header("x-content-type-options"),
            Some("nosniff"),
            "{}",
            r.status
        );
        assert_eq!(
            r.header("strict-transport-security"),
            Some("max-age=63072000"),
            "{}",
            r.status
        );
    }
    // Without `always`, as nginx's add_header: not on a 404.
    let r = ask(&server, "GET", "/plain/x", "");
    assert_eq!((r.status, r.header("x-only-success")), (404, None));
    assert_eq!(r.header("x-content-type-options"), Some("nosniff"));
}

#[test]
fn a_rewrite_loop_is_stopped_with_500() {
    let site = Site::new();
    let server = site.serve_with(&config(
        &site,
        "[[route]]\nprefix = \"/loop\"\nrewrite = { to = \"/loop/x\" }\n",
    ));
    assert_eq!(ask(&server, "GET", "/loop", "").status, 500);
    eventually("the log line", || {
        stderr_has(&server, "more than 10 rewrites")
    });
    // The server goes on.
    assert_eq!(ask(&server, "GET", "/hello.txt", "").status, 200);
}

#[test]
fn check_config_names_each_bad_rule_with_its_line() {
    let site = Site::new();
    let toml = config(
        &site,
        r#"
[[route]]
regex = "(unclosed"
respond = {}

[[route]]
path = "/a"
redirect = { to = "/x/$nope" }

[[route]]
path = "/self"
redirect = { to = "/self" }

[[route]]
path = "/both"
respond = {}
redirect = { to = "/b" }
"#,
    );
    let path = site.dir.path().join("rules.toml");
    std::fs::write(&path, &toml).unwrap();
    let stderr = check_config(&path);
    let file = path.display();
    // The first problem of a site's rules stops its compilation: each is shown alone.
    assert!(
        stderr.contains(&format!(
            "{file}:6: route[0].regex: invalid regex `(unclosed`: unclosed group"
        )),
        "{stderr}"
    );
    for (fixed, by, want) in [
        (
            "\"(unclosed\"",
            "\"x\"",
            format!("{file}:11: route[1].redirect: `to`: unknown variable `$nope`"),
        ),
        (
            "/x/$nope",
            "/elsewhere",
            format!("{file}:15: route[2].redirect: `to`: `/self` points back at this route"),
        ),
        (
            "to = \"/self\"",
            "to = \"/elsewhere\"",
            format!("{file}:17: route[3]: conflicting actions: `respond`, `redirect`"),
        ),
    ] {
        let toml = std::fs::read_to_string(&path)
            .unwrap()
            .replacen(fixed, by, 1);
        std::fs::write(&path, &toml).unwrap();
        let stderr = check_config_output(&path).1;
        assert!(stderr.contains(&want), "{stderr} lacks {want}");
    }
}

#[test]
fn a_reload_applies_new_rules_to_a_kept_alive_connection() {
    let site = Site::new();
    let path = site.dir.path().join("tessera.toml");
    let first = config(
        &site,
        "[[route]]\npath = \"/r\"\nrespond = { body = \"one\" }\n",
    );
    std::fs::write(&path, &first).unwrap();
    let server = Server::start_args(&[
        "serve".into(),
        "--config".into(),
        path.display().to_string(),
    ]);
    let mut held: TcpStream = server.connect();
    let get = |stream: &mut TcpStream| {
        write!(stream, "GET /r HTTP/1.1\r\nHost: test\r\n\r\n").unwrap();
        read_response(stream, false)
    };
    assert_eq!(body(&get(&mut held)), "one");
    let second = config(
        &site,
        "[[route]]\npath = \"/r\"\nrespond = { body = \"two\" }\n",
    );
    std::fs::write(&path, &second).unwrap();
    server.signal(libc::SIGHUP);
    eventually("the new rule", || body(&get(&mut held)) == "two");
}

#[test]
fn routes_to_upstreams_are_chosen_by_regex_exact_path_and_header() {
    let site = Site::new();
    let server = site.serve_with(&config(
        &site,
        &format!(
            r#"
[[upstream]]
name = "a"
addresses = ["{a}"]

[[upstream]]
name = "b"
addresses = ["{b}"]

[[route]]
prefix = "/api/"
header = {{ name = "X-Beta", equals = "1" }}
upstream = "b"

[[route]]
prefix = "/api/"
upstream = "a"

[[route]]
regex = "^/v[0-9]+/"
upstream = "b"

[[route]]
path = "/exact"
methods = ["GET"]
upstream = "a"
"#,
            a = named_origin("a"),
            b = named_origin("b"),
        ),
    ));
    let cases = [
        ("GET", "/api/x?q=1", "X-Beta: 1\r\n", 200, "b /api/x?q=1"),
        ("GET", "/api/x", "X-Beta: 2\r\n", 200, "a /api/x"),
        ("GET", "/v2/users", "", 200, "b /v2/users"),
        ("GET", "/exact", "", 200, "a /exact"),
    ];
    for (method, target, fields, status, want) in cases {
        let r = ask(&server, method, target, fields);
        assert_eq!(
            (r.status, body(&r).as_str()),
            (status, want),
            "{target} {fields}"
        );
    }
    // Not the exact path, or not its method: the files (none there).
    assert_eq!(ask(&server, "GET", "/exact/more", "").status, 404);
    assert_eq!(ask(&server, "DELETE", "/exact", "").status, 405);
}

#[test]
fn host_request_id_and_prefixes_are_set_toward_the_origin() {
    let site = Site::new();
    let server = site.serve_with(&config(
        &site,
        &format!(
            r#"
[[upstream]]
name = "app"
addresses = ["{up}"]

[[route]]
prefix = "/api/"
strip_prefix = "/api"
add_prefix = "/v1"
upstream = "app"
request_headers = {{ set = {{ "Host" = "api.internal", "X-Request-Id" = "$request_id" }}, add = {{ "X-From" = "$remote_addr" }}, remove = ["Cookie"] }}

[[route]]
regex = "^/users/(?<id>[0-9]+)$"
upstream = "app"
request_headers = {{ set = {{ "X-User" = "$id" }} }}
"#,
            up = echo_origin(),
        ),
    ));
    let r = ask(&server, "GET", "/api/items?x=1", "Cookie: secret=1\r\n");
    assert_eq!(r.status, 200);
    let text = body(&r);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], "/v1/items?x=1", "{text}");
    let field = |name: &str| {
        lines
            .iter()
            .filter(|l| {
                l.to_ascii_lowercase()
                    .starts_with(&format!("{}:", name.to_ascii_lowercase()))
            })
            .map(|l| l.split_once(':').unwrap().1.trim().to_string())
            .collect::<Vec<_>>()
    };
    assert_eq!(field("host"), ["api.internal"], "{text}");
    assert_eq!(field("x-from"), ["127.0.0.1"], "{text}");
    assert!(field("cookie").is_empty(), "{text}");
    let id = &field("x-request-id")[0];
    assert_eq!(id.len(), 32, "{text}");
    assert!(id.bytes().all(|b| b.is_ascii_hexdigit()), "{text}");
    // A new id per request.
    let again = body(&ask(&server, "GET", "/api/items", ""));
    assert!(!again.contains(id.as_str()), "{again}");
    // A capture in a field's value.
    let r = ask(&server, "GET", "/users/42", "");
    assert!(
        body(&r).contains("x-user: 42") || body(&r).contains("X-User: 42"),
        "{}",
        body(&r)
    );
}

#[test]
fn try_files_serves_a_single_page_application_s_deep_links() {
    let site = Site::new();
    let server = site.serve_with(&config(
        &site,
        &format!(
            r#"
[[upstream]]
name = "api"
addresses = ["{up}"]

[[route]]
prefix = "/api/"
upstream = "api"

[[route]]
prefix = "/assets/"
try_files = ["$uri", "=404"]

[[route]]
prefix = "/"
try_files = ["$uri", "$uri/", "/index.html"]
"#,
            up = named_origin("api"),
        ),
    ));
    let cases = [
        ("/hello.txt", 200, "hello world\n"),
        ("/docs/", 200, "<h1>docs</h1>\n"),
        ("/docs", 200, "<h1>docs</h1>\n"),
        ("/app/deep/link?tab=2", 200, "<h1>home</h1>\n"),
        ("/users/42", 200, "<h1>home</h1>\n"),
        ("/api/items", 200, "api /api/items"),
        ("/assets/missing.js", 404, ""),
    ];
    expect_all(&server, &cases);
    // The file found is served as a file: validators and ranges hold.
    let r = ask(&server, "GET", "/app/x", "Range: bytes=0-3\r\n");
    assert_eq!((r.status, body(&r).as_str()), (206, "<h1>"));
}

#[test]
fn check_config_names_a_route_an_earlier_one_always_shadows() {
    let site = Site::new();
    let toml = config(
        &site,
        "\n[[route]]\nprefix = \"/a/\"\nrespond = {}\n\n[[route]]\nprefix = \"/a/\"\nredirect = { to = \"/b\" }\n",
    );
    let path = site.dir.path().join("shadow.toml");
    std::fs::write(&path, &toml).unwrap();
    let stderr = check_config(&path);
    let want = format!(
        "{}:9: route[1]: never chosen: `route[0]` before it has the same `prefix`",
        path.display()
    );
    assert!(stderr.contains(&want), "{stderr} lacks {want}");
}

/// A script sees the request as the rules made it (rewritten, its fields edited), and
/// its header_filter runs after the response edits, seeing them.
#[test]
fn a_script_sees_the_rewritten_request_and_the_edited_fields() {
    let site = Site::new();
    let script = site.dir.path().join("app.lua");
    std::fs::write(
        &script,
        r#"return {
  content = function(r)
    return r:path() .. " " .. r:uri() .. " " .. (r:header("x-tenant") or "none")
  end,
  header_filter = function(r)
    r:set_header("X-Seen", r:resp_header("x-content-type-options") or "none")
  end,
}"#,
    )
    .unwrap();
    let server = site.serve_with(&config(
        &site,
        &format!(
            r#"
response_headers = {{ set = {{ "X-Content-Type-Options" = "nosniff" }} }}

[[route]]
prefix = "/old/"
rewrite = {{ from = "^/old/(.*)$", to = "/app/$1" }}

[[script]]
prefix = "/app"
path = "{}"
"#,
            script.display()
        ),
    ));
    let r = ask(&server, "GET", "/old/page?x=1", "X-Tenant: t1\r\n");
    assert_eq!(r.status, 200);
    assert_eq!(body(&r), "/app/page /app/page?x=1 t1");
    assert_eq!(r.header("x-seen"), Some("nosniff"));
    assert_eq!(r.header("x-content-type-options"), Some("nosniff"));
}

/// `%{request_id}x` in the access log is the id `$request_id` sent to the origin.
#[test]
fn the_access_log_has_the_request_id_the_origin_got() {
    let site = Site::new();
    let log = site.dir.path().join("access.log");
    let server = site.serve_with(&config(
        &site,
        &format!(
            r#"
access_log = "{log}"
access_log_format = "%{{request_id}}x %U"

[[upstream]]
name = "app"
addresses = ["{up}"]

[[route]]
prefix = "/api/"
upstream = "app"
request_headers = {{ set = {{ "X-Request-Id" = "$request_id" }} }}
"#,
            log = log.display(),
            up = echo_origin(),
        ),
    ));
    let text = body(&ask(&server, "GET", "/api/x", ""));
    let sent = text
        .lines()
        .find_map(|l| {
            l.strip_prefix("X-Request-Id: ")
                .or_else(|| l.strip_prefix("x-request-id: "))
        })
        .unwrap_or_else(|| panic!("no id in {text}"))
        .to_string();
    assert_eq!(ask(&server, "GET", "/hello.txt", "").status, 200);
    let mut lines = Vec::new();
    eventually("two log lines", || {
        lines = std::fs::read_to_string(&log)
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect();
        lines.len() == 2
    });
    assert_eq!(lines[0], format!("{sent} /api/x"));
    // Every request of a site whose log asks for ids gets its own.
    let (id, path) = lines[1].split_once(' ').unwrap();
    assert_eq!((id.len(), path), (32, "/hello.txt"));
    assert_ne!(id, sent);
}

#[test]
fn error_pages_replace_the_files_rules_and_proxy_errors() {
    let site = Site::new();
    site.write("404.html", b"<h1>custom 404</h1>\n");
    site.write("50x.html", b"<h1>down</h1>\n");
    site.write("api-down.html", b"{\"error\":\"api down\"}\n");
    let server = site.serve_with(&config(
        &site,
        &format!(
            r#"
error_page = {{ "404" = "/404.html", "502" = "/50x.html" }}
response_headers = {{ set = {{ "X-Content-Type-Options" = "nosniff" }}, always = true }}

[[upstream]]
name = "down"
addresses = ["{down}"]

[[route]]
prefix = "/down/"
upstream = "down"

[[route]]
prefix = "/api/"
upstream = "down"
error_page = {{ "502" = "/api-down.html" }}

[[route]]
path = "/teapot"
respond = {{ status = 404, body = "plain" }}
"#,
            down = dead(),
        ),
    ));
    let cases = [
        (
            "/missing.html",
            404,
            "<h1>custom 404</h1>\n",
            "text/html; charset=utf-8",
        ),
        (
            "/teapot",
            404,
            "<h1>custom 404</h1>\n",
            "text/html; charset=utf-8",
        ),
        (
            "/down/x",
            502,
            "<h1>down</h1>\n",
            "text/html; charset=utf-8",
        ),
        (
            "/api/x",
            502,
            "{\"error\":\"api down\"}\n",
            "text/html; charset=utf-8",
        ),
    ];
    for (target, status, want, _) in cases {
        let r = ask(&server, "GET", target, "");
        assert_eq!((r.status, body(&r).as_str()), (status, want), "{target}");
        assert_eq!(
            r.header("x-content-type-options"),
            Some("nosniff"),
            "{target}"
        );
    }
    // A HEAD gets the page's head alone; a page's own file is served as usual.
    let r = ask(&server, "HEAD", "/missing.html", "");
    assert_eq!((r.status, r.body.len()), (404, 0));
    assert_eq!(ask(&server, "GET", "/404.html", "").status, 200);
}

/// `"502" = "@upstream:fallback"`: a request the proxy failed (later) or the files
/// refused (at once) is sent again to the fallback, whose answer goes out.
#[test]
fn an_error_page_from_a_named_upstream_answers_in_place() {
    let site = Site::new();
    let server = site.serve_with(&config(
        &site,
        &format!(
            r#"
error_page = {{ "502" = "@upstream:fallback", "404" = "@upstream:fallback" }}

[[upstream]]
name = "down"
addresses = ["{down}"]

[[upstream]]
name = "fallback"
addresses = ["{fallback}"]

[[route]]
prefix = "/down/"
upstream = "down"
"#,
            down = dead(),
            fallback = named_origin("fallback"),
        ),
    ));
    for target in ["/down/x?q=1", "/missing.html"] {
        let r = ask(&server, "GET", target, "");
        assert_eq!(
            (r.status, body(&r)),
            (200, format!("fallback {target}")),
            "{target}"
        );
    }
    assert_eq!(
        body(&ask(&server, "GET", "/hello.txt", "")),
        "hello world\n"
    );

    // A name no `[[upstream]]` has is refused.
    let path = site.dir.path().join("pages.toml");
    let toml = config(&site, "error_page = { \"502\" = \"@upstream:nope\" }\n");
    std::fs::write(&path, toml).unwrap();
    let stderr = check_config(&path);
    assert!(
        stderr.contains(
            ":4: invalid configuration: `error_page`: `@upstream:nope`: no upstream named `nope`"
        ),
        "{stderr}"
    );
}

#[test]
fn alias_serves_a_prefix_from_another_directory() {
    let site = Site::new();
    let assets = site.dir.path().join("assets");
    std::fs::create_dir_all(assets.join("css")).unwrap();
    std::fs::write(assets.join("css/a.css"), b"a{}\n").unwrap();
    std::fs::write(assets.join("index.html"), b"assets index\n").unwrap();
    let server = site.serve_with(&config(
        &site,
        &format!(
            "[[route]]\nprefix = \"/static/\"\nalias = \"{}\"\n",
            assets.display()
        ),
    ));
    let cases = [
        ("/static/css/a.css", 200, "a{}\n"),
        ("/static/", 200, "assets index\n"),
        ("/hello.txt", 200, "hello world\n"),
        // Only the alias directory: not the root's files, nothing above it.
        ("/static/hello.txt", 404, ""),
        ("/static/../secret.txt", 404, ""),
        ("/static/%2e%2e/secret.txt", 404, ""),
    ];
    expect_all(&server, &cases);
    // A directory without its slash is redirected with the path the client asked for.
    let r = ask(&server, "GET", "/static/css", "");
    assert_eq!(
        (r.status, r.header("location")),
        (301, Some("/static/css/"))
    );

    // A missing directory is named by check-config with its line.
    let path = site.dir.path().join("alias.toml");
    let toml = config(
        &site,
        "[[route]]\nprefix = \"/x/\"\nalias = \"/no/such/dir\"\n",
    );
    std::fs::write(&path, toml).unwrap();
    let stderr = check_config_output(&path).1;
    assert!(
        stderr.contains(":6: route[0].alias: /no/such/dir is not a directory"),
        "{stderr}"
    );
}

/// A file's head is edited line by line: `set` replaces the file's own field, `remove`
/// drops one, `default` leaves one that is there and adds one that is not, `add` adds.
#[test]
fn response_edits_replace_remove_and_default_a_file_s_own_fields() {
    let site = Site::new();
    let server = site.serve_with(&config(
        &site,
        r#"
response_headers = { set = { "Cache-Control" = "no-store" }, remove = ["Accept-Ranges"], default = { "ETag" = "\"mine\"", "X-Default" = "1" }, add = { "Link" = "</style.css>; rel=preload" } }

[[cache_control]]
prefix = "/"
value = "public, max-age=60"
"#,
    ));
    for fields in ["", "Range: bytes=0-1\r\n"] {
        let r = ask(&server, "GET", "/hello.txt", fields);
        let all = |name: &str| {
            r.headers
                .iter()
                .filter(|(n, _)| n.eq_ignore_ascii_case(name))
                .map(|(_, v)| v.as_str())
                .collect::<Vec<_>>()
        };
        assert_eq!(all("cache-control"), ["no-store"], "{fields}");
        assert!(all("accept-ranges").is_empty(), "{fields}");
        assert_eq!(all("etag").len(), 1, "{fields}");
        assert_ne!(all("etag"), ["\"mine\""], "{fields}");
        assert_eq!(all("x-default"), ["1"], "{fields}");
        assert_eq!(all("link"), ["</style.css>; rel=preload"], "{fields}");
        assert_eq!(all("content-length").len(), 1, "{fields}");
    }
    assert_eq!(
        body(&ask(&server, "GET", "/hello.txt", "")),
        "hello world\n"
    );
}

/// The same rules over HTTP/2 (prior knowledge on the plain port), where the server's
/// heads are fields: answers, rewrites, a file's edited fields, an error page.
#[test]
fn rules_hold_over_http2() {
    let site = Site::new();
    site.write("404.html", b"<h1>custom 404</h1>\n");
    let server = site.serve_with(&config(
        &site,
        r#"
error_page = { "404" = "/404.html" }
response_headers = { set = { "X-Content-Type-Options" = "nosniff" }, remove = ["Accept-Ranges"], always = true }

[[route]]
path = "/healthz"
respond = { body = "ok" }

[[route]]
prefix = "/old/"
rewrite = { from = "^/old/(.*)$", to = "/$1" }

[[route]]
regex = "^/u/([0-9]+)$"
redirect = { status = 308, to = "/users/$1" }
"#,
    ));
    let curl = |path: &str| {
        let out = std::process::Command::new("curl")
            .args(["-s", "-i", "--max-time", "20", "--http2-prior-knowledge"])
            .arg(format!("http://{}{path}", server.addr))
            .output()
            .expect("curl");
        String::from_utf8_lossy(&out.stdout).replace('\r', "")
    };
    let r = curl("/healthz");
    assert!(r.starts_with("HTTP/2 200"), "{r}");
    assert!(
        r.contains("x-content-type-options: nosniff") && r.ends_with("\n\nok"),
        "{r}"
    );
    let r = curl("/old/hello.txt");
    assert!(
        r.starts_with("HTTP/2 200") && r.ends_with("\n\nhello world\n"),
        "{r}"
    );
    assert!(r.contains("x-content-type-options: nosniff"), "{r}");
    assert!(!r.contains("accept-ranges"), "{r}");
    assert!(r.contains("etag: "), "{r}");
    let r = curl("/u/7");
    assert!(
        r.starts_with("HTTP/2 308") && r.contains("location: /users/7"),
        "{r}"
    );
    let r = curl("/nothing");
    assert!(
        r.starts_with("HTTP/2 404") && r.ends_with("\n\n<h1>custom 404</h1>\n"),
        "{r}"
    );
    assert!(r.contains("x-content-type-options: nosniff"), "{r}");
}

/// What review found: a rewrite's decoded capture is not decoded twice, `$request_uri`
/// stays the client's, a Host that is no name expands to nothing, `try_files` may use
/// `$request_id`, and a case-insensitive regex is not shadowed by the same one without.
#[test]
fn decoded_values_stay_decoded_and_hostile_hosts_expand_to_nothing() {
    let site = Site::new();
    let server = site.serve_with(&config(
        &site,
        r#"
[[route]]
regex = "^/x/(.*)$"
rewrite = { to = "/y/$1" }

[[route]]
prefix = "/y/"
respond = { body = "y $uri $args|$request_uri" }

[[route]]
path = "/admin"
respond = { body = "admin" }

[[route]]
path = "/go"
redirect = { to = "https://$host/landing" }

[[route]]
prefix = "/t/"
try_files = ["$uri", "/rid/$request_id"]

[[route]]
prefix = "/rid/"
respond = { body = "$uri" }

[[route]]
regex = "^/case$"
respond = { body = "exact case" }

[[route]]
regex = "^/case$"
case_insensitive = true
respond = { body = "any case" }
"#,
    ));
    // `%252e%252e` decodes once to `%2e%2e`: it stays that, never `..` above `/y/`.
    let r = ask(&server, "GET", "/x/%252e%252e/admin", "");
    assert_eq!(body(&r), "y /y/%2e%2e/admin |/x/%252e%252e/admin");
    // A decoded `?` stays in the path: no query appears.
    let r = ask(&server, "GET", "/x/a%3Fb?q=1", "");
    assert_eq!(body(&r), "y /y/a?b q=1|/x/a%3Fb?q=1");
    let r = ask(&server, "GET", "/go", "");
    assert_eq!(r.header("location"), Some("https://test/landing"));
    let mut stream = server.connect();
    write!(
        stream,
        "GET /go HTTP/1.1\r\nHost: a..b\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let r = read_response(&mut stream, false);
    assert_eq!(
        r.header("location"),
        Some("https:///landing"),
        "{}",
        r.status
    );
    let r = ask(&server, "GET", "/t/none", "");
    let id = body(&r)
        .strip_prefix("/rid/")
        .unwrap_or_default()
        .to_string();
    assert_eq!(id.len(), 32, "{}", body(&r));
    assert!(id.bytes().any(|b| b != b'0'), "{id}");
    assert_eq!(body(&ask(&server, "GET", "/case", "")), "exact case");
    assert_eq!(body(&ask(&server, "GET", "/CASE", "")), "any case");
}

/// `strip_prefix` on a path that matched only once decoded keeps its decoded `?` and
/// `#` in the path, and a fallback that fails too leaves the 502 (sent once).
#[test]
fn a_stripped_decoded_path_keeps_its_query_marks_escaped() {
    let site = Site::new();
    let server = site.serve_with(&config(
        &site,
        &format!(
            r#"
error_page = {{ "502" = "@upstream:also_down" }}

[[upstream]]
name = "app"
addresses = ["{up}"]

[[upstream]]
name = "down"
addresses = ["{down}"]

[[upstream]]
name = "also_down"
addresses = ["{down}"]

[[route]]
prefix = "/api/"
strip_prefix = "/api"
upstream = "app"

[[route]]
prefix = "/down/"
upstream = "down"
"#,
            up = echo_origin(),
            down = dead(),
        ),
    ));
    let r = ask(&server, "GET", "/%61pi/x%3Fy%23z", "");
    let first = body(&r).lines().next().unwrap_or_default().to_string();
    assert_eq!(first, "/x%3Fy%23z");
    assert_eq!(ask(&server, "GET", "/down/x", "").status, 502);
}

/// A route's `set` of a field the host's edits add too leaves one field, the route's,
/// on a file as on a handler's response.
#[test]
fn a_route_s_set_wins_over_the_host_s_add() {
    let site = Site::new();
    let server = site.serve_with(&config(
        &site,
        r#"
response_headers = { add = { "X-Layer" = "host" } }

[[route]]
prefix = "/"
root = "ROOT"
response_headers = { set = { "X-Layer" = "route" } }

[[route]]
path = "/r"
respond = { body = "r" }
response_headers = { set = { "X-Layer" = "route" } }
"#
        .replace("ROOT", &site.root().display().to_string())
        .as_str(),
    ));
    for target in ["/hello.txt", "/r"] {
        let r = ask(&server, "GET", target, "");
        let values: Vec<&str> = r
            .headers
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case("x-layer"))
            .map(|(_, v)| v.as_str())
            .collect();
        assert_eq!(values, ["route"], "{target}");
    }
}

/// `[[script]]` mounts with matchers: chosen by the rules before the routes of their site
/// (a script answers first at an equal prefix), and a script without `content` passes to
/// the module of the path's prefix.
#[test]
fn scripts_are_chosen_by_matchers_and_pass_to_the_prefix_s_module() {
    let site = Site::new();
    let lua = |name: &str, text: &str| {
        let path = site.dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path.display().to_string()
    };
    let guard = lua(
        "guard.lua",
        r#"return { access = function(r)
  if r:header("x-key") ~= "k" then r:exit(403) end
end }"#,
    );
    let hello = lua(
        "hello.lua",
        r#"return { content = function(r) return "hello " .. r:path() end }"#,
    );
    let beta = lua(
        "beta.lua",
        r#"return { content = function(r) return "beta " .. (r:header("x-stage") or "none") end }"#,
    );
    let server = site.serve_with(&config(
        &site,
        &format!(
            r#"
[[upstream]]
name = "app"
addresses = ["{up}"]

[[route]]
prefix = "/api"
upstream = "app"

[[script]]
prefix = "/api"
methods = ["POST", "DELETE"]
path = "{guard}"

[[script]]
regex = "^/hello/[a-z]+$"
path = "{hello}"

[[script]]
prefix = "/"
header = {{ name = "X-Beta", equals = "1" }}
request_headers = {{ set = {{ "X-Stage" = "beta" }} }}
response_headers = {{ set = {{ "X-Beta-Seen" = "yes" }} }}
path = "{beta}"
"#,
            up = echo_origin(),
        ),
    ));
    // GET under /api: the guard's methods do not hold; the proxy answers.
    let r = ask(&server, "GET", "/api/x", "");
    assert_eq!((r.status, body(&r).lines().next()), (200, Some("/api/x")));
    // DELETE without the key: the guard refuses; with it, the proxy answers.
    assert_eq!(ask(&server, "DELETE", "/api/x", "").status, 403);
    let r = ask(&server, "DELETE", "/api/x", "X-Key: k\r\n");
    assert_eq!((r.status, body(&r).lines().next()), (200, Some("/api/x")));
    // A regex mount, and a path it does not match (the files: 404).
    let r = ask(&server, "GET", "/hello/world", "");
    assert_eq!((r.status, body(&r).as_str()), (200, "hello /hello/world"));
    assert_eq!(ask(&server, "GET", "/hello/World1", "").status, 404);
    // A header narrows a mount; its request and response edits apply to it.
    let r = ask(&server, "GET", "/anything", "X-Beta: 1\r\n");
    assert_eq!((r.status, body(&r).as_str()), (200, "beta beta"));
    assert_eq!(r.header("x-beta-seen"), Some("yes"));
    let r = ask(&server, "GET", "/anything", "X-Beta: 2\r\n");
    assert_eq!((r.status, r.header("x-beta-seen")), (404, None));
}

#[test]
fn check_config_names_a_script_s_bad_matcher_with_its_line() {
    let site = Site::new();
    let path = site.dir.path().join("bad.toml");
    let lua = site.dir.path().join("ok.lua");
    std::fs::write(&lua, "return { content = function(r) return 'x' end }").unwrap();
    std::fs::write(
        &path,
        format!(
            "listen = [\"127.0.0.1:0\"]\n\n[[script]]\nprefix = \"/a\"\npath = \"{0}\"\n\n\
             [[script]]\nregex = \"^/(unclosed\"\npath = \"{0}\"\n",
            lua.display()
        ),
    )
    .unwrap();
    let stderr = check_config(&path);
    assert!(stderr.contains(":8: script[1].regex"), "{stderr}");
    // A key a script cannot have (an action that answers in its place) is refused by name.
    std::fs::write(
        &path,
        format!(
            "listen = [\"127.0.0.1:0\"]\n\n[[script]]\nprefix = \"/a\"\npath = \"{}\"\nredirect = {{ to = \"/b\" }}\n",
            lua.display()
        ),
    )
    .unwrap();
    let stderr = check_config(&path);
    assert!(stderr.contains("unknown field `redirect`"), "{stderr}");
}

/// An error page's URI is routed by the rules, as nginx's internal redirect: a route may
/// answer it (`respond`, its status replaced by the error's), rewrite it to a file, or
/// redirect (its own status kept); with no rule, it is a file of the root.
#[test]
fn an_error_page_at_an_internal_uri_is_routed_by_the_rules() {
    let site = Site::new();
    std::fs::create_dir(site.root().join("pages")).unwrap();
    site.write("pages/403.html", b"<h1>no entry</h1>\n");
    let server = site.serve_with(&config(
        &site,
        r#"
error_page = { "404" = "/errors/404", "403" = "/e/403", "405" = "/gone" }

[[route]]
path = "/errors/404"
respond = { status = 200, body = "not here: $uri\n", content_type = "text/plain" }

[[route]]
prefix = "/e/"
rewrite = { from = "^/e/(.*)$", to = "/pages/$1.html" }

[[route]]
path = "/gone"
redirect = { status = 302, to = "/elsewhere" }

[[route]]
path = "/secret"
respond = { status = 403 }

[[route]]
path = "/no-post"
respond = { status = 405 }
"#,
    ));
    let r = ask(&server, "GET", "/missing", "");
    assert_eq!(
        (r.status, body(&r).as_str(), r.header("content-type")),
        (404, "not here: /errors/404\n", Some("text/plain"))
    );
    let r = ask(&server, "GET", "/secret", "");
    assert_eq!((r.status, body(&r).as_str()), (403, "<h1>no entry</h1>\n"));
    let r = ask(&server, "GET", "/no-post", "");
    assert_eq!((r.status, r.header("location")), (302, Some("/elsewhere")));
}
