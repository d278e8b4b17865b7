//! HTTP/3 over QUIC (docs/http3.md): the real binary on a loopback UDP port, spoken to by
//! aioquic (`h3client.py` beside this file; scripts/test.sh installs aioquic).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{json, Value};

use crate::harness::{eventually, Server, Site};
use crate::tls::{curl, make_cert, Cert};

/// A site over TLS and QUIC with one certificate for `localhost`: `top` goes before the
/// `[tls]` table; `extra` are more command-line arguments.
struct QuicSite {
    site: Site,
    cert: Cert,
    server: Server,
    https: SocketAddr,
    quic: SocketAddr,
}

impl QuicSite {
    fn start(top: &str, extra: &[&str]) -> QuicSite {
        let site = Site::new();
        let cert = make_cert(site.dir.path(), "localhost", &["localhost"]);
        let config = site.dir.path().join("tessera.toml");
        std::fs::write(
            &config,
            format!(
                "tls_listen = [\"127.0.0.1:0\"]\nquic_listen = [\"127.0.0.1:0\"]\n{top}\n\
                 [tls]\ncertificate = {:?}\nkey = {:?}\n",
                cert.cert, cert.key
            ),
        )
        .unwrap();
        let mut args = vec!["--config", config.to_str().unwrap()];
        args.extend_from_slice(extra);
        let server = Server::start(&site.root(), &args);
        let quic = served_at(&server, "HTTP/3 over QUIC");
        let https = served_at(&server, "worker");
        QuicSite {
            site,
            cert,
            server,
            https,
            quic,
        }
    }

    /// Every request of `requests` sent at once on one connection: the responses.
    fn get_all(&self, requests: Value) -> Vec<Value> {
        let report = h3(
            self.site.dir.path(),
            json!({"port": self.quic.port(), "requests": requests}),
        );
        let conn = &report["connections"][0];
        assert!(conn["error"].is_null(), "{conn}");
        conn["responses"].as_array().unwrap().clone()
    }

    /// One request: its response.
    fn get(&self, request: Value) -> Value {
        self.get_all(json!([request]))[0].clone()
    }
}

/// The `https://` address of the first start-up line that has `marker` (the line may
/// name a proxy's `http://` origin before it).
fn served_at(server: &Server, marker: &str) -> SocketAddr {
    let mut found = None;
    eventually("the start-up line", || {
        let lines = server.stderr.lock().unwrap();
        found = lines.iter().filter(|l| l.contains(marker)).find_map(|l| {
            l.split_once(" on https://")?
                .1
                .split('/')
                .next()?
                .parse()
                .ok()
        });
        found.is_some()
    });
    found.unwrap()
}

/// `h3client.py` with `spec`: its report.
fn h3(dir: &Path, spec: Value) -> Value {
    let path = dir.join(format!("h3-{}.json", fastrand_name()));
    std::fs::write(&path, spec.to_string()).unwrap();
    let out = Command::new("python3")
        .arg(client())
        .arg(&path)
        .output()
        .expect("run python3 (scripts/test.sh installs aioquic)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn client() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/serve/h3client.py")
}

/// A name for a spec file no other call in this test uses.
fn fastrand_name() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

fn header<'a>(response: &'a Value, name: &str) -> Option<&'a str> {
    response["headers"]
        .as_array()?
        .iter()
        .find(|h| h[0] == name)
        .and_then(|h| h[1].as_str())
}

fn sha256_hex(bytes: &[u8]) -> String {
    let out = Command::new("sha256sum")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut child| {
            use std::io::Write;
            child.stdin.take().unwrap().write_all(bytes)?;
            child.wait_with_output()
        })
        .unwrap();
    String::from_utf8(out.stdout).unwrap()[..64].to_string()
}

#[test]
fn files_are_byte_exact_over_http3_small_large_ranged_head_and_conditional() {
    let quic = QuicSite::start("", &[]);
    quic.site.write("twelve.txt", b"twelve bytes");
    // 64 MiB, not all one byte: a chunk out of place would show.
    let large: Vec<u8> = (0..64u32 << 20).map(|i| (i % 251) as u8).collect();
    quic.site.write("large.bin", &large);
    let got = quic.get_all(json!([
        {"path": "/twelve.txt"},
        {"path": "/large.bin"},
        {"path": "/large.bin", "headers": [["range", "bytes=1000000-1000099"]]},
        {"method": "HEAD", "path": "/twelve.txt"},
    ]));
    assert_eq!(got[0]["status"], 200);
    assert_eq!(got[0]["body"], "twelve bytes");
    assert_eq!(got[1]["status"], 200);
    assert_eq!(got[1]["length"], 64 << 20);
    assert_eq!(got[1]["sha256"], sha256_hex(&large));
    assert_eq!(got[2]["status"], 206);
    let part: String = large[1_000_000..1_000_100]
        .iter()
        .map(|&b| b as char)
        .collect();
    assert_eq!(got[2]["body"], part);
    assert_eq!(got[3]["status"], 200);
    assert_eq!(got[3]["length"], 0);
    assert_eq!(header(&got[3], "content-length"), Some("12"));
    // Conditional: the ETag given back gets 304.
    let etag = header(&got[0], "etag").unwrap().to_string();
    let again = quic.get(json!({"path": "/twelve.txt", "headers": [["if-none-match", etag]]}));
    assert_eq!(again["status"], 304);
    assert_eq!(again["length"], 0);
}

#[test]
fn a_hundred_concurrent_streams_on_one_connection() {
    let quic = QuicSite::start("", &[]);
    let requests: Vec<Value> = (0..100).map(|_| json!({"path": "/hello.txt"})).collect();
    let got = quic.get_all(Value::Array(requests));
    assert_eq!(got.len(), 100);
    for response in got {
        assert_eq!(response["status"], 200);
        assert_eq!(response["body"], "hello world\n");
    }
}

#[test]
fn tls_responses_carry_alt_svc_naming_the_quic_port_and_cleartext_ones_do_not() {
    let quic = QuicSite::start("", &[]);
    let out = curl(
        quic.https,
        &quic.cert.cert,
        "localhost",
        "/hello.txt",
        &["-D-", "-o/dev/null"],
    );
    let head = String::from_utf8_lossy(&out.stdout).to_ascii_lowercase();
    let want = format!("alt-svc: h3=\":{}\"; ma=86400", quic.quic.port());
    assert!(head.contains(&want), "{head}");
    let out = curl(
        quic.https,
        &quic.cert.cert,
        "localhost",
        "/hello.txt",
        &["--http1.1", "-D-", "-o/dev/null"],
    );
    assert!(String::from_utf8_lossy(&out.stdout)
        .to_ascii_lowercase()
        .contains(&want));
    let plain = quic.server.get("/hello.txt");
    assert!(
        plain.header("alt-svc").is_none(),
        "cleartext HTTP/1.1 has no Alt-Svc"
    );
    // Nor does HTTP/3 itself.
    let h3 = quic.get(json!({"path": "/hello.txt"}));
    assert!(header(&h3, "alt-svc").is_none(), "{h3}");
}

#[test]
fn the_access_log_says_http_3_0_and_metrics_count_http3_connections() {
    let logs = tempfile::tempdir().unwrap();
    let log = logs.path().join("access.log");
    let quic = QuicSite::start(
        &format!("access_log = {log:?}\nadmin_listen = \"127.0.0.1:0\""),
        &[],
    );
    let got = quic.get(json!({"path": "/hello.txt?x=1"}));
    assert_eq!(got["status"], 200);
    eventually("the log line", || {
        std::fs::read_to_string(&log)
            .is_ok_and(|l| l.contains("\"GET /hello.txt?x=1 HTTP/3.0\" 200 12"))
    });
    let admin = crate::metrics::admin_addr(&quic.server);
    let (_, metrics) = crate::metrics::admin_get(admin, "/metrics", "");
    assert!(
        metrics.contains("tessera_http3_connections_total 1"),
        "{metrics}"
    );
}

/// A response body as bytes (the client reports it as latin-1 text).
fn body(response: &Value) -> Vec<u8> {
    let text = response["body"]
        .as_str()
        .unwrap_or_else(|| panic!("{response}"));
    text.chars().map(|c| c as u8).collect()
}

#[test]
fn esi_pages_proxied_bodies_lua_cached_and_compressed_responses_over_http3() {
    // An ESI page assembled from fragments, as HTTP/1.1 gets it; a request body through
    // the proxy.
    let origin = crate::proxy::origin();
    let hello = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/lua/hello.lua");
    let script = format!("/hello={}", hello.display());
    let proxy = format!("http://{origin}");
    let quic = QuicSite::start("", &["--proxy", &proxy, "--script", &script]);
    let got = quic.get_all(json!([
        {"path": "/page"},
        {"method": "POST", "path": "/echo", "body": "a body over h3"},
        {"path": "/hello"},
    ]));
    assert_eq!(got[0]["status"], 200);
    assert_eq!(body(&got[0]), quic.server.get("/page").body);
    assert_eq!(body(&got[0]), b"<html>[0][1][2]</html>");
    assert_eq!(got[1]["status"], 200);
    let echo = String::from_utf8_lossy(&body(&got[1])).to_ascii_lowercase();
    assert!(echo.ends_with("\n\na body over h3"), "{echo}");
    assert!(echo.contains("content-length: 14"), "{echo}");
    assert_eq!(got[2]["status"], 200);
    assert_eq!(body(&got[2]), b"Hello World\n");
    drop(quic);

    // A cached response: the second request never reaches the origin.
    let origin = crate::cache::Origin::start();
    let quic = QuicSite::start(
        &format!(
            "[[upstream]]\nname = \"o\"\naddresses = [\"{}\"]\n[[route]]\nprefix = \"/\"\nupstream = \"o\"\n",
            origin.addr
        ),
        &[],
    );
    for _ in 0..2 {
        let got = quic.get(json!({"path": "/frag/x"}));
        assert_eq!(got["status"], 200);
        assert_eq!(body(&got), b"[x]");
    }
    assert_eq!(origin.hits("/frag/x"), 1);
    drop(quic);

    // Compressed as over HTTP/1.1 and HTTP/2.
    let origin = crate::compression::origin();
    let quic = QuicSite::start(
        &format!(
            "[[upstream]]\nname = \"o\"\naddresses = [\"{origin}\"]\n[[route]]\nprefix = \"/\"\nupstream = \"o\"\n"
        ),
        &[],
    );
    for coding in ["gzip", "br", "zstd"] {
        let got = quic.get(json!({"path": "/page", "headers": [["accept-encoding", coding]]}));
        assert_eq!(got["status"], 200);
        assert_eq!(header(&got, "content-encoding"), Some(coding), "{got}");
        let page = crate::compression::page_text();
        assert!(body(&got).len() < page.len() / 2, "{coding} not smaller");
        assert_eq!(crate::compression::decode(coding, &body(&got)), page);
    }
}

#[test]
fn the_sni_and_the_authority_choose_the_virtual_host() {
    let site_dirs = tempfile::tempdir().unwrap();
    let a = site_dirs.path().join("a");
    std::fs::create_dir_all(&a).unwrap();
    std::fs::write(a.join("who.txt"), b"a\n").unwrap();
    let cert_a = make_cert(site_dirs.path(), "a", &["a.test"]);
    let quic = QuicSite::start(
        &format!(
            "[[host]]\nnames = [\"a.test\"]\nroot = {:?}\n[host.tls]\ncertificate = {:?}\nkey = {:?}\n",
            a.display().to_string(),
            cert_a.cert,
            cert_a.key
        ),
        &[],
    );
    quic.site.write("who.txt", b"top\n");
    let ask = |sni: &str, authority: &str| {
        let spec = json!({
            "port": quic.quic.port(),
            "server_name": sni,
            "requests": [{"path": "/who.txt", "authority": authority}],
        });
        let report = h3(quic.site.dir.path(), spec);
        let conn = &report["connections"][0];
        assert!(conn["error"].is_null(), "{conn}");
        conn["responses"][0].clone()
    };
    // The SNI picks the site (and its certificate), the :authority agrees.
    assert_eq!(body(&ask("a.test", "a.test")), b"a\n");
    assert_eq!(body(&ask("localhost", "localhost")), b"top\n");
    // As over TLS and TCP, an :authority that names another site than the SNI's is
    // refused (421), never served from the other site.
    let other = ask("localhost", "a.test");
    assert_eq!(other["status"], 421, "{other}");
}
