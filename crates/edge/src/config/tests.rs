use super::*;

#[test]
fn proxy_url_becomes_one_upstream_for_every_path() {
    let c = EdgeConfig::proxy_to_url("http://127.0.0.1:9000").unwrap();
    assert_eq!(c.upstream[0].addresses, ["127.0.0.1:9000"]);
    assert_eq!(c.route[0].prefix, "/");
    assert_eq!(c.route[0].upstream.as_deref(), Some("origin"));
    c.validate().unwrap();
    let c = EdgeConfig::proxy_to_url("http://origin.internal/").unwrap();
    assert_eq!(c.upstream[0].addresses, ["origin.internal:80"]);
    let c = EdgeConfig::proxy_to_url("http://[::1]:8000").unwrap();
    assert_eq!(c.upstream[0].addresses, ["[::1]:8000"]);
    let c = EdgeConfig::proxy_to_url("https://origin.test").unwrap();
    assert_eq!(c.upstream[0].addresses, ["origin.test:443"]);
    assert!(c.upstream[0].tls);
    let c = EdgeConfig::proxy_to_url("unix:/run/app.sock").unwrap();
    assert_eq!(c.upstream[0].addresses, ["unix:/run/app.sock"]);
    for bad in [
        "ftp://x",
        "unix:",
        "127.0.0.1:9000",
        "http://x/app",
        "http://u@x",
        "http://",
    ] {
        assert!(EdgeConfig::proxy_to_url(bad).is_err(), "{bad}");
    }
}
