//! No server-side request forgery: includes reach only the page's origin and allowed
//! hosts, whatever the template or the request's cookies say.

use crate::origin::{frag, page, Origin};
use crate::{allow_host, config, fetch_error, read_all, request, run};
use edge::Edge;

#[test]
fn include_to_a_host_not_on_the_allow_list_is_refused() {
    let other = Origin::start(&[("/secret", frag("secret", 0))]);
    let origin = Origin::start(&[(
        "/",
        page(&format!(
            r#"<esi:include src="http://{}/secret" onerror="continue"/><esi:include src="http://169.254.169.254/latest/meta-data/" onerror="continue"/><esi:include src="https://{}/secret" onerror="continue"/>ok"#,
            other.addr, other.addr
        )),
    )]);
    run(async {
        let edge = Edge::new(config(&origin)).unwrap();
        let mut resp = edge.proxy(request("/", &[])).await.unwrap();
        assert_eq!(read_all(&mut resp).await.0, "ok");
        assert_eq!(other.hits("/secret"), 0);
        assert_eq!(edge.fragment_fetches(), 0);
        // Without onerror the refusal fails the page before any byte: 502.
        origin.set(
            "/strict",
            page(&format!(
                r#"<esi:include src="http://{}/secret"/>"#,
                other.addr
            )),
        );
        assert_eq!(fetch_error(&edge, "/strict").await.status(), 502);
        assert_eq!(other.hits("/secret"), 0);
    });
}

#[test]
fn cookie_variables_cannot_choose_the_host() {
    let other = Origin::start(&[("/x", frag("stolen", 0))]);
    let origin = Origin::start(&[
        (
            "/",
            page(concat!(
                "[<esi:include src=\"http://$(HTTP_COOKIE{h})/x\" onerror=\"continue\"/>]",
                "[<esi:include src=\"$(HTTP_COOKIE{u})\" onerror=\"continue\"/>]",
                "[<esi:include src=\"/p/$(HTTP_COOKIE{p})\" onerror=\"continue\"/>]",
            )),
        ),
        ("/p/x", frag("p", 0)),
    ]);
    run(async {
        let edge = Edge::new(config(&origin)).unwrap();
        let cookie = format!("h={addr}; u=http://{addr}/x; p=../x", addr = other.addr);
        // Also the plain host name, which percent-encoding leaves as it is.
        let mut resp = edge
            .proxy(request("/", &[("cookie", &cookie)]))
            .await
            .unwrap();
        assert_eq!(read_all(&mut resp).await.0, "[][][]");
        let mut resp = edge
            .proxy(request("/", &[("cookie", "h=evil.test; u=y; p=y")]))
            .await
            .unwrap();
        assert_eq!(read_all(&mut resp).await.0, "[][][]");
        assert_eq!(other.hits("/x"), 0);
        // What did reach the origin stayed on it, encoded: no dot segment climbed out
        // of /p/.
        for seen in origin.seen() {
            assert!(
                seen.path == "/"
                    || seen.path == "/y"
                    || seen.path.starts_with("/p/")
                    || seen.path.starts_with("/http"),
                "{seen:?}"
            );
            assert!(!seen.path.split('/').any(|s| s == ".."), "{seen:?}");
        }
        assert_eq!(origin.hits("/p/x"), 0);
    });
}

#[test]
fn credentials_only_go_to_the_own_origin_and_trusted_hosts() {
    let trusted = Origin::start(&[("/t", frag("t", 0))]);
    let untrusted = Origin::start(&[("/u", frag("u", 0))]);
    let origin = Origin::start(&[
        (
            "/",
            page(
                r#"<esi:include src="/own"/><esi:include src="http://trusted.test/t"/><esi:include src="http://cdn.test/u"/>"#,
            ),
        ),
        ("/own", frag("o", 0)),
    ]);
    run(async {
        let mut c = config(&origin);
        allow_host(
            &mut c,
            "trusted.test",
            "trusted",
            &trusted.addr.to_string(),
            true,
        );
        allow_host(
            &mut c,
            "cdn.test",
            "cdn",
            &untrusted.addr.to_string(),
            false,
        );
        let edge = Edge::new(c).unwrap();
        let creds = [("cookie", "sid=42"), ("authorization", "Bearer tok")];
        let mut resp = edge.proxy(request("/", &creds)).await.unwrap();
        assert_eq!(read_all(&mut resp).await.0, "otu");
        let own = origin
            .seen()
            .into_iter()
            .find(|s| s.path == "/own")
            .unwrap();
        assert_eq!(own.header("cookie"), Some("sid=42"));
        assert_eq!(own.header("authorization"), Some("Bearer tok"));
        assert_eq!(own.header("host"), Some("site.test"));
        let t = trusted.seen().pop().unwrap();
        assert_eq!(t.header("cookie"), Some("sid=42"));
        assert_eq!(t.header("host"), Some("trusted.test"));
        let u = untrusted.seen().pop().unwrap();
        assert_eq!(u.header("cookie"), None);
        assert_eq!(u.header("authorization"), None);
        assert_eq!(u.header("host"), Some("cdn.test"));
    });
}
