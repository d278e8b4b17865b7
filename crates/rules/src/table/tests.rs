//! The order of routes, narrowing matchers and refused routes.

use super::*;

fn table(toml_routes: &str) -> Table {
    #[derive(serde::Deserialize)]
    struct File {
        route: Vec<RouteRules>,
    }
    let file: File = toml::from_str(toml_routes).unwrap();
    let routes: Vec<_> = file
        .route
        .into_iter()
        .map(|r| {
            let module = r.respond.is_none()
                && r.redirect.is_none()
                && r.rewrite.is_none()
                && r.try_files.is_empty()
                && r.alias.is_none();
            (r, module)
        })
        .collect();
    Table::compile(&routes, "route", Host::default()).unwrap()
}

fn chosen(table: &Table, method: &str, target: &str, fields: &str) -> Option<usize> {
    let fields = format!("Host: a\r\n{fields}");
    let mut chosen = None;
    crate::template::with_ctx(method, target, &fields, false, |ctx| {
        chosen = table.find(ctx).map(|f| f.rule.index + 1);
    });
    chosen
}

/// nginx's documented example (ngx_http_core_module, `location`), with more paths:
/// `= /` is A, `/` is B, `/documents/` is C, `^~ /images/` is D, `~* \.(gif|jpg|jpeg)$`
/// is E; then routes that exercise the rest of the order.
#[test]
fn the_order_is_nginx_s() {
    let t = table(
        r#"
        [[route]]
        path = "/"
        [[route]]
        prefix = "/"
        [[route]]
        prefix = "/documents/"
        [[route]]
        prefix = "/images/"
        no_regex = true
        [[route]]
        regex = '\.(gif|jpg|jpeg)$'
        case_insensitive = true
        [[route]]
        regex = '^/documents/private/'
        [[route]]
        prefix = "/documents/private/old"
        [[route]]
        path = "/documents/"
        [[route]]
        prefix = "/api"
        [[route]]
        regex = '^/api/v[0-9]+/'
        "#,
    );
    let cases = [
        ("/", 1),
        ("/index.html", 2),
        ("/documents/document.html", 3),
        ("/images/1.gif", 4),
        ("/documents/1.jpg", 5),
        ("/documents/1.JPG", 5),
        ("/x/y/z.jpeg", 5),
        ("/images/deep/a/b.png", 4),
        ("/images", 2),
        ("/documents/private/a", 6),
        ("/documents/private/old/a.txt", 6),
        ("/documents/private/old/a.gif", 5),
        ("/documents/", 8),
        ("/documents", 2),
        ("/api", 9),
        ("/api/x", 9),
        ("/apix", 2),
        ("/api/v2/users", 10),
        ("/api/v2/u.gif", 5),
        ("/a/b/c", 2),
        ("/documentsx/a", 2),
    ];
    for (path, want) in cases {
        assert_eq!(chosen(&t, "GET", path, ""), Some(want), "{path}");
    }
}

#[test]
fn narrowing_matchers_pass_a_route_over() {
    let t = table(
        r#"
        [[route]]
        prefix = "/api/"
        header = { name = "X-Beta", equals = "1" }
        [[route]]
        prefix = "/api/"
        methods = ["GET", "HEAD"]
        [[route]]
        prefix = "/api/"
        query = { name = "debug" }
        [[route]]
        prefix = "/api/"
        cookie = { name = "sid", regex = "^[a-z]+$" }
        [[route]]
        prefix = "/api/"
        scheme = "https"
        [[route]]
        prefix = "/"
        "#,
    );
    assert_eq!(chosen(&t, "POST", "/api/x", "X-Beta: 1\r\n"), Some(1));
    assert_eq!(chosen(&t, "POST", "/api/x", "X-Beta: 2\r\n"), Some(6));
    assert_eq!(chosen(&t, "GET", "/api/x", "X-Beta: 2\r\n"), Some(2));
    assert_eq!(chosen(&t, "POST", "/api/x?a=1&debug", ""), Some(3));
    assert_eq!(
        chosen(&t, "POST", "/api/x", "Cookie: a=b; sid=abc\r\n"),
        Some(4)
    );
    assert_eq!(chosen(&t, "POST", "/api/x", "Cookie: sid=ABC\r\n"), Some(6));
    assert_eq!(chosen(&t, "DELETE", "/api/x", ""), Some(6));
}

#[test]
fn client_networks_hold_v4_v6_and_mapped_addresses() {
    let holds = |ip: &str, net: &str| {
        let (n, l) = network(net).unwrap();
        in_network(ip.parse().unwrap(), n, l)
    };
    assert!(holds("10.1.2.3", "10.0.0.0/8"));
    assert!(!holds("11.1.2.3", "10.0.0.0/8"));
    assert!(holds("192.0.2.7", "192.0.2.7"));
    assert!(!holds("192.0.2.8", "192.0.2.7"));
    assert!(holds("::ffff:10.9.9.9", "10.0.0.0/8"));
    assert!(holds("2001:db8::1", "2001:db8::/32"));
    assert!(!holds("2001:db9::1", "2001:db8::/32"));
    assert!(holds("8.8.8.8", "0.0.0.0/0"));
    assert!(!holds("10.0.0.1", "2001:db8::/32"));
    assert!(network("10.0.0.0/33").is_err());
    assert!(network("nope").is_err());
}

#[test]
fn bad_routes_are_refused_by_name() {
    let refused = |routes: &str, want: &str| {
        #[derive(serde::Deserialize)]
        struct File {
            route: Vec<RouteRules>,
        }
        let file: File = toml::from_str(routes).unwrap();
        let routes: Vec<_> = file.route.into_iter().map(|r| (r, false)).collect();
        let e = Table::compile(&routes, "route", Host::default())
            .unwrap_err()
            .to_string();
        assert!(e.contains(want), "{e} lacks {want}");
    };
    refused(
        "[[route]]\nregex = '(a'\nrespond = {}",
        "`route[0].regex`: invalid regex",
    );
    refused(
        "[[route]]\npath = '/a'\nredirect = { to = '/a' }",
        "points back at this route",
    );
    refused(
        "[[route]]\npath = '/a'\nrewrite = { to = '/a?x' }",
        "points back at this route",
    );
    refused(
        "[[route]]\npath = '/a'\nrespond = {}\nredirect = { to = '/b' }",
        "conflicting actions",
    );
    refused(
        "[[route]]\npath = '/a'\nredirect = { to = '/$nope' }",
        "unknown variable `$nope`",
    );
    refused("[[route]]\nprefix = '/a'\nrespond = {}\nresponse_headers = { set = { 'Content-Length' = '1' } }", "frames every message");
    refused("[[route]]\npath = '/a'", "does nothing");
    refused(
        "[[route]]\npath = '/a'\nrespond = { status = 700 }",
        "`route[0].respond`: `status`: 700 is not",
    );
    refused(
        "[[route]]\nprefix = '/a'\nrespond = {}\nstrip_prefix = '/a'",
        "needs `upstream`",
    );
    refused(
        "[[route]]\ntry_files = ['/index.html']",
        "at least one file",
    );
    refused(
        "[[route]]\nprefix = '/a'\nrespond = {}\n[[route]]\nprefix = '/a'\nrespond = {}",
        "`route[1]`: never chosen: `route[0]` before it has the same `prefix`",
    );
    refused(
        "[[route]]\nregex = 'x'\nrespond = {}\n[[route]]\nregex = 'x'\nmethods = ['GET']\nrespond = {}",
        "never chosen",
    );
    refused("[[route]]\ntry_files = ['$uri', '=99']", "`=99` is not");
    refused(
        "[[route]]\ntry_files = ['$uri', 'index.html']",
        "neither a URI",
    );
    refused(
        "[[route]]\ntry_files = ['$uri', '/i']\nrespond = {}",
        "conflicting actions",
    );
}
