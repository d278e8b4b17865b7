//! TLS termination (docs/tls.md): the real binary with certificates made here (rcgen),
//! spoken to by curl and `openssl s_client`, the clients users have.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::harness::{eventually, stderr_has, Server, Site};

/// A certificate and its key, as PEM files.
pub struct Cert {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// A self-signed ECDSA P-256 certificate for `names` (its subject CN is the first), as
/// `NAME.pem` and `NAME.key` in `dir`.
pub fn make_cert(dir: &Path, file: &str, names: &[&str]) -> Cert {
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params =
        rcgen::CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
            .unwrap();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, names[0]);
    let cert = params.self_signed(&key).unwrap();
    let paths = Cert {
        cert: dir.join(format!("{file}.pem")),
        key: dir.join(format!("{file}.key")),
    };
    std::fs::write(&paths.cert, cert.pem()).unwrap();
    std::fs::write(&paths.key, key.serialize_pem()).unwrap();
    paths
}

/// The `https://` address the server printed (after its cleartext one).
pub fn https_addr(server: &Server) -> SocketAddr {
    crate::harness::printed_addr(server, "https://")
}

/// A site served over TLS with one certificate for `localhost` (and `extra` config).
pub struct TlsSite {
    pub site: Site,
    pub cert: Cert,
    pub server: Server,
    pub https: SocketAddr,
}

impl TlsSite {
    /// `top` goes before the `[tls]` table, `tls` into it (and may open more tables).
    pub fn start(top: &str, tls: &str) -> TlsSite {
        let site = Site::new();
        let cert = make_cert(site.dir.path(), "localhost", &["localhost"]);
        let toml = format!(
            "tls_listen = [\"127.0.0.1:0\"]\n{top}\n[tls]\ncertificate = {:?}\nkey = {:?}\n{tls}\n",
            cert.cert, cert.key
        );
        let server = site.serve_with(&toml);
        let https = https_addr(&server);
        TlsSite {
            site,
            cert,
            server,
            https,
        }
    }

    /// curl ARGS against `https://localhost:PORT/PATH` (resolved to the server), trusting
    /// the site's certificate.
    pub fn curl(&self, path: &str, args: &[&str]) -> Output {
        curl(self.https, &self.cert.cert, "localhost", path, args)
    }
}

pub fn curl(https: SocketAddr, ca: &Path, name: &str, path: &str, args: &[&str]) -> Output {
    Command::new("curl")
        .args(["-sS", "--max-time", "60", "--cacert"])
        .arg(ca)
        .arg("--resolve")
        .arg(format!("{name}:{}:127.0.0.1", https.port()))
        .args(args)
        .arg(format!("https://{name}:{}{path}", https.port()))
        .output()
        .expect("run curl (scripts/test.sh installs it)")
}

/// `openssl s_client -connect ADDR ARGS` with `input` on its stdin: (stdout, stderr).
pub fn s_client(https: SocketAddr, args: &[&str], input: &[u8]) -> (Vec<u8>, String) {
    let mut child = Command::new("openssl")
        .arg("s_client")
        .arg("-connect")
        .arg(https.to_string())
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run openssl (scripts/test.sh installs it)");
    child.stdin.take().unwrap().write_all(input).unwrap();
    let out = wait_with_deadline(child, Duration::from_secs(30));
    (
        out.stdout,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The child's output once it exits, killed after `limit`. Its pipes are read while it
/// runs, so a child with more to print than a pipe holds is never stuck on a full one.
fn wait_with_deadline(child: std::process::Child, limit: Duration) -> Output {
    let pid = child.id() as i32;
    let (done, result) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = done.send(child.wait_with_output());
    });
    match result.recv_timeout(limit) {
        Ok(output) => output.unwrap(),
        Err(_) => {
            // SAFETY: plain kill(2) on our own child, which has not been reaped yet.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            result.recv().unwrap().unwrap()
        }
    }
}

fn sha256(path: &Path) -> String {
    let out = Command::new("sha256sum").arg(path).output().unwrap();
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .unwrap()
        .to_string()
}

/// `len` bytes no compressor or pattern shortcut could fake (xorshift).
fn noise(len: usize) -> Vec<u8> {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(&x.to_le_bytes());
    }
    out.truncate(len);
    out
}

const GET_CLOSE: &[u8] = b"GET /hello.txt HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n";

#[test]
fn curl_and_s_client_fetch_a_file_over_tls13_and_tls12() {
    let tls = TlsSite::start("", "");
    for (versions, want) in [
        (&["--tlsv1.3"][..], "TLSv1.3"),
        (&["--tlsv1.2", "--tls-max", "1.2"][..], "TLSv1.2"),
    ] {
        let out = tls.curl("/hello.txt", &[versions, &["-v"]].concat());
        let log = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{log}");
        assert_eq!(out.stdout, b"hello world\n");
        assert!(
            log.contains(&format!("SSL connection using {want}")),
            "{log}"
        );
        // curl offers h2 first, and gets it (docs/http2.md); with --http1.1, HTTP/1.1.
        assert!(log.contains("ALPN: server accepted h2"), "{log}");
        let out = tls.curl("/hello.txt", &[versions, &["-v", "--http1.1"]].concat());
        let log = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.stdout, b"hello world\n");
        assert!(log.contains("ALPN: server accepted http/1.1"), "{log}");
    }
    for (flag, want) in [("-tls1_3", "TLSv1.3"), ("-tls1_2", "TLSv1.2")] {
        let (out, err) = s_client(tls.https, &[flag, "-quiet"], GET_CLOSE);
        let text = String::from_utf8_lossy(&out);
        assert!(text.starts_with("HTTP/1.1 200 OK\r\n"), "{text}{err}");
        assert!(text.ends_with("\r\n\r\nhello world\n"), "{text}");
        let (_, err) = s_client(tls.https, &[flag, "-brief"], GET_CLOSE);
        assert!(err.contains(&format!("Protocol version: {want}")), "{err}");
    }
}

#[test]
fn a_64_mib_file_is_byte_exact_over_tls13_and_tls12() {
    let tls = TlsSite::start("", "");
    let body = noise(64 << 20);
    tls.site.write("big.bin", &body);
    drop(body);
    let want = sha256(&tls.site.root().join("big.bin"));
    for versions in [&["--tlsv1.3"][..], &["--tlsv1.2", "--tls-max", "1.2"][..]] {
        let to = tls.site.dir.path().join("fetched.bin");
        let to_arg = to.to_str().unwrap();
        let out = tls.curl("/big.bin", &[versions, &["-o", to_arg]].concat());
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(sha256(&to), want, "{versions:?}");
        std::fs::remove_file(&to).unwrap();
    }
    // A large file and then a small one on one keep-alive connection.
    let big = format!("https://localhost:{}/big.bin", tls.https.port());
    let out = tls.curl("/hello.txt", &["-v", "-o", "/dev/null", &big]);
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{log}");
    assert!(log.contains("Re-using existing connection"), "{log}");
    assert_eq!(out.stdout, b"hello world\n");
}

#[test]
fn tls11_and_suites_without_aead_or_forward_secrecy_are_refused() {
    let tls = TlsSite::start("", "");
    // The client allows everything (SECLEVEL=0), so a failure is the server's refusal:
    // its alert, not the client giving up.
    for args in [
        &["-tls1_1", "-cipher", "DEFAULT@SECLEVEL=0"][..],
        &["-tls1", "-cipher", "DEFAULT@SECLEVEL=0"][..],
        // CBC with ECDHE: forward secrecy but no AEAD.
        &[
            "-tls1_2",
            "-cipher",
            "ECDHE-ECDSA-AES128-SHA256:ECDHE-ECDSA-AES128-SHA@SECLEVEL=0",
        ][..],
        // RSA key exchange: AEAD but no forward secrecy.
        &["-tls1_2", "-cipher", "AES128-GCM-SHA256:AES256-GCM-SHA384"][..],
    ] {
        let (out, err) = s_client(tls.https, args, b"");
        assert!(out.is_empty() || !String::from_utf8_lossy(&out).contains("HTTP/1.1"));
        assert!(
            err.contains("alert handshake failure") || err.contains("alert protocol version"),
            "{args:?}: {err}"
        );
    }
    // Still serving.
    assert_eq!(tls.curl("/hello.txt", &[]).stdout, b"hello world\n");
}

#[test]
fn cleartext_http_sent_to_the_tls_port_is_closed_without_a_crash() {
    let tls = TlsSite::start("", "");
    let mut stream = TcpStream::connect(tls.https).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    stream
        .write_all(b"GET /hello.txt HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .unwrap();
    let mut got = Vec::new();
    let _ = stream.read_to_end(&mut got);
    // At most a TLS alert record (content type 21), never an HTTP answer.
    assert!(got.is_empty() || got[0] == 21, "{got:?}");
    assert_eq!(tls.curl("/hello.txt", &[]).stdout, b"hello world\n");
    assert_eq!(tls.server.get("/hello.txt").body, b"hello world\n");
}

#[test]
fn half_open_handshakes_time_out_at_the_head_timeout() {
    let tls = TlsSite::start("", "[timeouts]\nhead = 1.0\n");
    // One client sends nothing, one the first bytes of a ClientHello.
    let silent = TcpStream::connect(tls.https).unwrap();
    let mut partial = TcpStream::connect(tls.https).unwrap();
    partial.write_all(&[22, 3, 1, 0x02, 0x00, 1, 0, 1]).unwrap();
    let started = Instant::now();
    for mut stream in [silent, partial] {
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let mut buf = [0u8; 64];
        let n = stream.read(&mut buf).unwrap_or(0);
        assert_eq!(n, 0, "expected a close, got {:?}", &buf[..n]);
    }
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(900) && took < Duration::from_secs(5),
        "{took:?}"
    );
    assert_eq!(tls.curl("/hello.txt", &[]).stdout, b"hello world\n");
}

#[test]
fn a_bad_certificate_or_key_stops_the_start_with_the_file_named() {
    let site = Site::new();
    let dir = site.dir.path();
    let good = make_cert(dir, "good", &["localhost"]);
    let other = make_cert(dir, "other", &["localhost"]);
    let missing = dir.join("missing.pem");
    std::fs::write(dir.join("garbage.pem"), "not a certificate\n").unwrap();
    let garbage = dir.join("garbage.pem");
    for (cert, key, names) in [
        (&missing, &good.key, vec![&missing]),
        (&garbage, &good.key, vec![&garbage]),
        (&good.cert, &other.key, vec![&good.cert, &other.key]),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_tessera"))
            .args(["serve", "--workers", "1", "--listen", "127.0.0.1:0"])
            .args(["--tls-listen", "127.0.0.1:0", "--cert"])
            .arg(cert)
            .arg("--key")
            .arg(key)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{err}");
        for name in names {
            assert!(err.contains(name.to_str().unwrap()), "{err}");
        }
    }
}

/// The subject line `openssl s_client` prints for the certificate it was sent.
fn subject(https: SocketAddr, servername: Option<&str>) -> String {
    let name_args = match servername {
        Some(name) => vec!["-servername", name],
        None => vec!["-noservername"],
    };
    let (out, err) = s_client(https, &name_args, b"");
    let text = String::from_utf8_lossy(&out);
    text.lines()
        .find_map(|l| l.strip_prefix("subject="))
        .unwrap_or_else(|| panic!("no subject in {text}{err}"))
        .to_string()
}

/// Two hosts with certificates of their own (one of them a wildcard), one without, and
/// a default certificate.
fn hosts_site() -> (Site, Server, SocketAddr, Vec<Cert>) {
    let site = Site::new();
    let dir = site.dir.path();
    let certs = vec![
        make_cert(dir, "default", &["default.test"]),
        make_cert(dir, "a", &["a.test"]),
        make_cert(dir, "wild", &["*.wild.test"]),
    ];
    for (name, body) in [
        ("a", "site a\n"),
        ("wild", "site wild\n"),
        ("plain", "site plain\n"),
    ] {
        std::fs::create_dir_all(dir.join(name)).unwrap();
        std::fs::write(dir.join(name).join("who.txt"), body).unwrap();
    }
    let toml = format!(
        r#"tls_listen = ["127.0.0.1:0"]
[tls]
certificate = {:?}
key = {:?}
[[host]]
names = ["a.test"]
root = {:?}
[host.tls]
certificate = {:?}
key = {:?}
[[host]]
names = ["*.wild.test"]
root = {:?}
[host.tls]
certificate = {:?}
key = {:?}
[[host]]
names = ["plain.test"]
root = {:?}
"#,
        certs[0].cert,
        certs[0].key,
        dir.join("a"),
        certs[1].cert,
        certs[1].key,
        dir.join("wild"),
        certs[2].cert,
        certs[2].key,
        dir.join("plain"),
    );
    let server = site.serve_with(&toml);
    let https = https_addr(&server);
    (site, server, https, certs)
}

#[test]
fn sni_picks_each_hosts_certificate_exact_then_wildcard_then_the_default() {
    let (_site, _server, https, certs) = hosts_site();
    assert!(subject(https, Some("a.test")).contains("CN = a.test"));
    assert!(subject(https, Some("x.wild.test")).contains("CN = *.wild.test"));
    // A host without a certificate of its own, a name no host has, and no SNI at all.
    assert!(subject(https, Some("plain.test")).contains("CN = default.test"));
    assert!(subject(https, Some("nobody.test")).contains("CN = default.test"));
    assert!(subject(https, None).contains("CN = default.test"));
    // And each name is served its own site, verified against its own certificate.
    for (name, cert, body) in [
        ("a.test", &certs[1], "site a\n"),
        ("b.wild.test", &certs[2], "site wild\n"),
        ("plain.test", &certs[0], ""),
    ] {
        let out = curl(https, &cert.cert, name, "/who.txt", &["-k"]);
        if body.is_empty() {
            // plain.test has no certificate: curl sees default.test's (hence -k).
            assert_eq!(out.stdout, b"site plain\n");
        } else {
            let strict = curl(https, &cert.cert, name, "/who.txt", &[]);
            assert!(
                strict.status.success(),
                "{}",
                String::from_utf8_lossy(&strict.stderr)
            );
            assert_eq!(strict.stdout, body.as_bytes());
        }
    }
}

#[test]
fn a_host_other_than_the_snis_is_misdirected_421() {
    let (_site, _server, https, _certs) = hosts_site();
    let ask = |sni: &str, host: &str| {
        let request = format!("GET /who.txt HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
        let (out, err) = s_client(https, &["-servername", sni, "-quiet"], request.as_bytes());
        let text = String::from_utf8_lossy(&out).into_owned();
        assert!(text.starts_with("HTTP/1.1 "), "{text}{err}");
        text
    };
    assert!(ask("a.test", "a.test").ends_with("site a\n"));
    assert!(ask("a.test", "A.TEST:443").ends_with("site a\n"));
    assert!(ask("a.test", "x.wild.test").starts_with("HTTP/1.1 421 "));
    assert!(ask("x.wild.test", "plain.test").starts_with("HTTP/1.1 421 "));
    // A Host no [[host]] names is served by the site the SNI chose.
    assert!(ask("a.test", "elsewhere.test").ends_with("site a\n"));
    assert!(ask("x.wild.test", "elsewhere.test").ends_with("site wild\n"));
    // An SNI no host has chose the default: a configured Host is misdirected there too.
    assert!(ask("nobody.test", "a.test").starts_with("HTTP/1.1 421 "));
    // Without SNI the default site serves, whatever the Host says (a.test's root has no
    // hello.txt; the top-level one has).
    let request = b"GET /hello.txt HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n\r\n";
    let (out, err) = s_client(https, &["-noservername", "-quiet"], request);
    let text = String::from_utf8_lossy(&out);
    assert!(text.starts_with("HTTP/1.1 200 "), "{text}{err}");
    assert!(text.ends_with("hello world\n"), "{text}");
}

#[test]
fn hsts_on_tls_responses_and_redirect_https_on_cleartext() {
    let tls = TlsSite::start("", "hsts = \"max-age=63072000\"\nredirect_https = true");
    let out = tls.curl("/hello.txt", &["-i"]);
    // Over HTTP/2 (what curl negotiates) field names are lower case.
    let text = String::from_utf8_lossy(&out.stdout).to_ascii_lowercase();
    assert!(
        text.contains("strict-transport-security: max-age=63072000\r\n"),
        "{text}"
    );
    assert!(text.ends_with("\r\n\r\nhello world\n"), "{text}");
    // 404s (pages the server makes) carry it too.
    let out = tls.curl("/missing", &["-i"]);
    let text = String::from_utf8_lossy(&out.stdout).to_ascii_lowercase();
    assert!(text.contains("strict-transport-security: "), "{text}");

    let mut stream = tls.server.connect();
    stream
        .write_all(b"GET /a/b?c=d HTTP/1.1\r\nHost: example.test:8080\r\n\r\n")
        .unwrap();
    let r = crate::harness::read_response(&mut stream, false);
    assert_eq!(r.status, 308);
    assert_eq!(
        r.header("location"),
        Some(format!("https://example.test:{}/a/b?c=d", tls.https.port()).as_str())
    );
    assert_eq!(r.header("strict-transport-security"), None);
    // Kept alive, and a request without a Host cannot be sent anywhere.
    stream.write_all(b"GET / HTTP/1.0\r\n\r\n").unwrap();
    assert_eq!(
        crate::harness::read_response(&mut stream, false).status,
        400
    );
}

/// `GET target` with `fields` on the cleartext listener: (status, Location).
fn cleartext(server: &Server, target: &str, fields: &str) -> (u16, Option<String>) {
    let mut stream = server.connect();
    write!(
        stream,
        "GET {target} HTTP/1.1\r\n{fields}Connection: close\r\n\r\n"
    )
    .unwrap();
    let r = crate::harness::read_response(&mut stream, false);
    (r.status, r.header("location").map(String::from))
}

/// Behind a load balancer that ends TLS (no `tls_listen`, no certificate here),
/// `redirect_https` sends cleartext requests to `https://HOST` on port 443 (left out of
/// the URL) or `redirect_https_port`, and serves the requests the balancer says came over
/// TLS (`X-Forwarded-Proto: https`), which would otherwise loop.
#[test]
fn redirect_https_without_a_tls_listener_goes_to_the_balancers_port() {
    let site = Site::new();
    let server = site.serve_with("[tls]\nredirect_https = true\n");
    assert_eq!(
        cleartext(&server, "/a/b?c=d", "Host: example.test:8080\r\n"),
        (308, Some("https://example.test/a/b?c=d".into()))
    );
    assert_eq!(
        cleartext(
            &server,
            "/hello.txt",
            "Host: example.test\r\nX-Forwarded-Proto: http\r\n"
        ),
        (308, Some("https://example.test/hello.txt".into()))
    );
    for proto in ["https", "HTTPS", "https, http"] {
        let fields = format!("Host: example.test\r\nX-Forwarded-Proto: {proto}\r\n");
        assert_eq!(
            cleartext(&server, "/hello.txt", &fields),
            (200, None),
            "{proto}"
        );
    }
    // What a browser or curl is told.
    let out = Command::new("curl")
        .args([
            "-sS",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code} %{redirect_url}",
        ])
        .args(["-H", "Host: www.example.test"])
        .arg(format!("http://{}/shop/?q=1", server.addr))
        .output()
        .expect("run curl (scripts/test.sh installs it)");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "308 https://www.example.test/shop/?q=1"
    );

    let site = Site::new();
    let server = site.serve_with("[tls]\nredirect_https = true\nredirect_https_port = 8443\n");
    assert_eq!(
        cleartext(&server, "/", "Host: example.test\r\n"),
        (308, Some("https://example.test:8443/".into()))
    );
}

/// With a TLS listener of its own, this server ends TLS: a cleartext request is
/// redirected whatever its `X-Forwarded-Proto` says, to `redirect_https_port` when set
/// (a port a firewall forwards to the listener) and else to the listener's port.
#[test]
fn redirect_https_port_overrides_the_tls_listeners_port() {
    let tls = TlsSite::start("", "redirect_https = true\nredirect_https_port = 443");
    let fields = "Host: example.test\r\nX-Forwarded-Proto: https\r\n";
    assert_eq!(
        cleartext(&tls.server, "/x", fields),
        (308, Some("https://example.test/x".into()))
    );
    assert_ne!(tls.https.port(), 443);
}

#[test]
fn redirect_https_needs_no_tls_listener_but_a_port_above_zero() {
    let site = Site::new();
    let check = |toml: &str| {
        let config = site.dir.path().join("check.toml");
        std::fs::write(&config, toml).unwrap();
        let out = Command::new(env!("CARGO_BIN_EXE_tessera"))
            .args(["check-config", "--config"])
            .arg(&config)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
    };
    assert_eq!(
        check("[tls]\nredirect_https = true\n"),
        "configuration OK\n"
    );
    let refused = check("[tls]\nredirect_https = true\nredirect_https_port = 0\n");
    assert!(
        refused.ends_with("check.toml:3: tls.redirect_https_port: must be between 1 and 65535\n"),
        "{refused}"
    );
}

#[test]
fn the_access_log_names_the_tls_version_cipher_and_sni() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("access.log");
    let top = format!(
        "access_log = {log:?}\naccess_log_format = \"%{{tls_version}}x %{{tls_cipher}}x %{{tls_sni}}x %s %U\""
    );
    let tls = TlsSite::start(&top, "");
    for args in [
        &["--tlsv1.3", "--tls13-ciphers", "TLS_AES_128_GCM_SHA256"][..],
        &[
            "--tls-max",
            "1.2",
            "--ciphers",
            "ECDHE-ECDSA-CHACHA20-POLY1305",
        ][..],
    ] {
        let out = tls.curl("/hello.txt", args);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    tls.server.get("/hello.txt");
    let deadline = Instant::now() + Duration::from_secs(10);
    let lines = loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if text.lines().count() >= 3 || Instant::now() > deadline {
            break text;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(
        lines.contains("TLSv1.3 TLS13_AES_128_GCM_SHA256 localhost 200 /hello.txt\n"),
        "{lines}"
    );
    assert!(
        lines.contains(
            "TLSv1.2 TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256 localhost 200 /hello.txt\n"
        ),
        "{lines}"
    );
    assert!(lines.contains("- - - 200 /hello.txt\n"), "{lines}");
}

/// A request's head, read a byte at a time (nothing after it is taken).
pub fn read_head(stream: &mut TcpStream) -> Vec<u8> {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") && stream.read(&mut byte).unwrap_or(0) == 1 {
        head.push(byte[0]);
    }
    head
}

/// An origin that answers one request per connection with the request's head as its
/// body.
fn echo_origin() -> SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for mut stream in listener.incoming().flatten() {
            let head = read_head(&mut stream);
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                head.len()
            );
            let _ = stream.write_all(&head);
        }
    });
    addr
}

#[test]
fn the_proxy_forwards_x_forwarded_proto_https() {
    let origin = echo_origin();
    let top = format!(
        "[[upstream]]\nname = \"o\"\naddresses = [\"{origin}\"]\n[[route]]\nprefix = \"/echo\"\nupstream = \"o\"\n"
    );
    // The upstream and route tables must come after [tls]'s keys.
    let tls = TlsSite::start("", &top);
    let out = tls.curl("/echo", &[]);
    let text = String::from_utf8_lossy(&out.stdout).to_ascii_lowercase();
    assert!(text.contains("x-forwarded-proto: https\r\n"), "{text}");
    let r = tls.server.get("/echo");
    let text = String::from_utf8_lossy(&r.body).to_ascii_lowercase();
    assert!(text.contains("x-forwarded-proto: http\r\n"), "{text}");
}

/// `openssl s_client ARGS`'s session line: `New, ...` or `Reused, ...`.
fn session_line(https: SocketAddr, args: &[&str]) -> String {
    // -ign_eof keeps s_client reading until the server closes, so the TLS 1.3 tickets
    // that follow the handshake are saved.
    let (stdout, err) = s_client(https, &[args, &["-ign_eof"]].concat(), GET_CLOSE);
    String::from_utf8_lossy(&stdout)
        .lines()
        .find(|l| l.starts_with("New,") || l.starts_with("Reused,"))
        .map_or_else(|| format!("(no session line) {err}"), str::to_string)
}

#[test]
fn sessions_resume_on_any_worker_with_tls13_tickets_and_tls12_ids() {
    let site = Site::new();
    let cert = make_cert(site.dir.path(), "localhost", &["localhost"]);
    let config = site.dir.path().join("tessera.toml");
    std::fs::write(
        &config,
        format!(
            "tls_listen = [\"127.0.0.1:0\"]\n[tls]\ncertificate = {:?}\nkey = {:?}\n",
            cert.cert, cert.key
        ),
    )
    .unwrap();
    let args: Vec<String> = ["serve", "--listen", "127.0.0.1:0", "--workers", "2"]
        .iter()
        .map(|s| s.to_string())
        .chain(["--root".into(), site.root().display().to_string()])
        .chain(["--config".into(), config.display().to_string()])
        .collect();
    let server = Server::start_args(&args);
    let https = https_addr(&server);
    let session = site.dir.path().join("session.pem");
    let session = session.to_str().unwrap();
    // TLS 1.3 tickets; TLS 1.2 tickets; TLS 1.2 session IDs (the cache).
    for version in [
        &["-tls1_3"][..],
        &["-tls1_2"][..],
        &["-tls1_2", "-no_ticket"][..],
    ] {
        let first = session_line(https, &[version, &["-sess_out", session]].concat());
        assert!(first.starts_with("New,"), "{version:?}: {first}");
        // Two workers, each connection on either (SO_REUSEPORT): every one resumes.
        for _ in 0..6 {
            let again = session_line(https, &[version, &["-sess_in", session]].concat());
            assert!(again.starts_with("Reused,"), "{version:?}: {again}");
        }
    }
}

#[test]
fn sighup_reloads_certificates_without_closing_connections_and_keeps_them_on_a_bad_one() {
    let tls = TlsSite::start("", "");
    let dir = tls.site.dir.path();
    let subject_now = || subject(tls.https, Some("localhost"));
    assert!(subject_now().contains("CN = localhost"));
    // A keep-alive connection from before the reload.
    let mut old = Command::new("openssl")
        .args(["s_client", "-quiet", "-servername", "localhost", "-connect"])
        .arg(tls.https.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut old_in = old.stdin.take().unwrap();
    old_in
        .write_all(b"GET /hello.txt HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));

    let renewed = make_cert(dir, "renewed", &["localhost", "renewed.test"]);
    std::fs::copy(&renewed.cert, &tls.cert.cert).unwrap();
    std::fs::copy(&renewed.key, &tls.cert.key).unwrap();
    tls.server.signal(libc::SIGHUP);
    eventually("the reload", || {
        stderr_has(&tls.server, "configuration reloaded")
    });
    assert!(subject_now().contains("CN = localhost"));
    let (out, _) = s_client(tls.https, &["-servername", "localhost", "-showcerts"], b"");
    let renewed_pem = std::fs::read_to_string(&renewed.cert).unwrap();
    let body: String = renewed_pem
        .lines()
        .filter(|l| !l.starts_with("-----"))
        .collect();
    let shown: String = String::from_utf8_lossy(&out)
        .lines()
        .filter(|l| !l.starts_with("-----"))
        .collect();
    assert!(
        shown.contains(&body),
        "new connections must get the new certificate"
    );

    // A broken certificate: the reload fails, naming the file, and the last good one stays.
    std::fs::write(&tls.cert.cert, "garbage\n").unwrap();
    tls.server.signal(libc::SIGHUP);
    eventually("the failed reload", || {
        stderr_has(&tls.server, "reload failed")
    });
    let lines = tls.server.stderr.lock().unwrap().join("\n");
    assert!(lines.contains(tls.cert.cert.to_str().unwrap()), "{lines}");
    let (out, _) = s_client(tls.https, &["-servername", "localhost", "-showcerts"], b"");
    let shown: String = String::from_utf8_lossy(&out)
        .lines()
        .filter(|l| !l.starts_with("-----"))
        .collect();
    assert!(
        shown.contains(&body),
        "a failed reload must keep the last good certificate"
    );
    let out = curl(tls.https, &renewed.cert, "renewed.test", "/hello.txt", &[]);
    assert_eq!(out.stdout, b"hello world\n");

    // The connection from before both reloads still answers.
    old_in
        .write_all(b"GET /hello.txt HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .unwrap();
    let out = wait_with_deadline(old, Duration::from_secs(20));
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(text.matches("HTTP/1.1 200 OK\r\n").count(), 2, "{text}");
}

#[test]
fn a_flood_of_5000_half_open_handshakes_stays_in_budget_and_a_good_client_is_served() {
    // Room for the flood's sockets in this process (the server raises its own limit).
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit with a valid rlimit struct.
    unsafe {
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit);
        limit.rlim_cur = limit.rlim_max;
        libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
    }
    let tls = TlsSite::start("", "[timeouts]\nhead = 3.0\n");
    let base = tls.server.rss_kib();
    // Each sends the first bytes of a ClientHello and then nothing.
    let mut flood = Vec::new();
    for _ in 0..5000 {
        match TcpStream::connect(tls.https) {
            Ok(mut s) => {
                let _ = s.write_all(&[22, 3, 1, 0x02, 0x00, 1, 0, 1]);
                flood.push(s);
            }
            Err(_) => break,
        }
    }
    assert!(
        flood.len() >= 4000,
        "only {} connections opened",
        flood.len()
    );
    let opened = Instant::now();
    // A good client is served while the flood holds its slots.
    let out = tls.curl("/hello.txt", &[]);
    assert_eq!(
        out.stdout,
        b"hello world\n",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        opened.elapsed() < Duration::from_secs(2),
        "{:?}",
        opened.elapsed()
    );
    let flooded = tls.server.rss_kib();
    // Budget: a handshake holds its slot, its task and socket registration, rustls'
    // handshake state and the 8 bytes received; no record, read or output buffer (about
    // 2.6 KiB measured; 11.8 KiB with rustls' buffered connection).
    let per_handshake = 6;
    let grew = flooded.saturating_sub(base);
    assert!(
        grew <= flood.len() as u64 * per_handshake,
        "RSS grew by {grew} KiB for {} half-open handshakes",
        flood.len()
    );
    eprintln!(
        "{} half-open handshakes: RSS +{grew} KiB ({} bytes each)",
        flood.len(),
        grew * 1024 / flood.len() as u64
    );
    // The head timeout closes them all.
    std::thread::sleep(Duration::from_millis(3500));
    let mut closed = 0;
    for s in &mut flood {
        s.set_read_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        let mut byte = [0u8; 1];
        match s.read(&mut byte) {
            Ok(0) => closed += 1,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => closed += 1,
            _ => {}
        }
    }
    assert_eq!(closed, flood.len());
}

fn openssl(args: &[&str]) {
    let out = Command::new("openssl").args(args).output().unwrap();
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn an_rsa_key_with_its_chain_from_a_ca_is_served() {
    let site = Site::new();
    let dir = site.dir.path();
    let path = |name: &str| dir.join(name).to_str().unwrap().to_string();
    // A CA (ECDSA) and a leaf with an RSA key it signed; the file holds leaf then CA.
    openssl(&[
        "req",
        "-x509",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-nodes",
        "-days",
        "2",
        "-subj",
        "/CN=test CA",
        "-keyout",
        &path("ca.key"),
        "-out",
        &path("ca.pem"),
        "-addext",
        "basicConstraints=critical,CA:TRUE",
        "-addext",
        "keyUsage=critical,keyCertSign",
    ]);
    openssl(&[
        "req",
        "-new",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-subj",
        "/CN=localhost",
        "-keyout",
        &path("leaf.key"),
        "-out",
        &path("leaf.csr"),
    ]);
    std::fs::write(dir.join("leaf.ext"), "subjectAltName=DNS:localhost\n").unwrap();
    openssl(&[
        "x509",
        "-req",
        "-in",
        &path("leaf.csr"),
        "-CA",
        &path("ca.pem"),
        "-CAkey",
        &path("ca.key"),
        "-CAcreateserial",
        "-days",
        "2",
        "-extfile",
        &path("leaf.ext"),
        "-out",
        &path("leaf.pem"),
    ]);
    let chain = [
        std::fs::read_to_string(dir.join("leaf.pem")).unwrap(),
        std::fs::read_to_string(dir.join("ca.pem")).unwrap(),
    ]
    .concat();
    std::fs::write(dir.join("chain.pem"), chain).unwrap();
    let server = Server::start(
        &site.root(),
        &[
            "--tls-listen",
            "127.0.0.1:0",
            "--cert",
            &path("chain.pem"),
            "--key",
            &path("leaf.key"),
        ],
    );
    let https = https_addr(&server);
    // Only the CA is trusted: the chain and the RSA signature must both be right.
    let out = curl(
        https,
        Path::new(&path("ca.pem")),
        "localhost",
        "/hello.txt",
        &[],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.stdout, b"hello world\n");
    let (out, _) = s_client(https, &["-servername", "localhost", "-showcerts"], b"");
    let text = String::from_utf8_lossy(&out);
    assert!(text.contains(" 0 s:CN = localhost"), "{text}");
    assert!(text.contains(" 1 s:CN = test CA"), "{text}");
}

#[test]
fn an_expired_certificate_is_a_warning_that_names_it() {
    let site = Site::new();
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(vec!["localhost".to_string()]).unwrap();
    params.not_before = rcgen::date_time_ymd(2020, 1, 1);
    params.not_after = rcgen::date_time_ymd(2021, 1, 1);
    let cert = params.self_signed(&key).unwrap();
    let cert_path = site.dir.path().join("old.pem");
    let key_path = site.dir.path().join("old.key");
    std::fs::write(&cert_path, cert.pem()).unwrap();
    std::fs::write(&key_path, key.serialize_pem()).unwrap();
    // The warning comes before the addresses, so read the server's stderr here.
    let mut child = Command::new(env!("CARGO_BIN_EXE_tessera"))
        .args(["serve", "--workers", "1", "--listen", "127.0.0.1:0"])
        .args(["--tls-listen", "127.0.0.1:0", "--cert"])
        .arg(&cert_path)
        .arg("--key")
        .arg(&key_path)
        .arg("--root")
        .arg(site.root())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = std::io::BufReader::new(child.stderr.take().unwrap());
    let mut seen = Vec::new();
    for line in std::io::BufRead::lines(stderr) {
        let line = line.unwrap();
        let done = line.contains("https://");
        seen.push(line);
        if done {
            break;
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    let text = seen.join("\n");
    assert!(text.contains("https://"), "it must start anyway: {text}");
    let warning = seen.iter().find(|l| l.contains("expired")).expect(&text);
    assert!(warning.contains(cert_path.to_str().unwrap()), "{text}");
}

#[test]
fn check_config_reads_the_certificates() {
    let site = Site::new();
    let good = make_cert(site.dir.path(), "good", &["localhost"]);
    let missing = site.dir.path().join("missing.key");
    let config = site.dir.path().join("check.toml");
    for (key, ok) in [(&good.key, true), (&missing, false)] {
        std::fs::write(
            &config,
            format!(
                "tls_listen = [\"127.0.0.1:0\"]\n[tls]\ncertificate = {:?}\nkey = {:?}\n",
                good.cert, key
            ),
        )
        .unwrap();
        let out = Command::new(env!("CARGO_BIN_EXE_tessera"))
            .args(["check-config", "--config"])
            .arg(&config)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.success(), ok, "{text}");
        if !ok {
            assert!(text.contains(missing.to_str().unwrap()), "{text}");
        }
    }
}

#[test]
fn pipelined_requests_over_tls_are_all_answered_in_order() {
    let tls = TlsSite::start("", "");
    tls.site.write("big.bin", &noise(100_000));
    let requests = "GET /hello.txt HTTP/1.1\r\nHost: localhost\r\n\r\n\
                    GET /big.bin HTTP/1.1\r\nHost: localhost\r\n\r\n\
                    GET /missing HTTP/1.1\r\nHost: localhost\r\n\r\n\
                    GET /hello.txt HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n";
    let (out, err) = s_client(tls.https, &["-quiet"], requests.as_bytes());
    let statuses: Vec<&str> = out
        .windows(12)
        .filter(|w| w.starts_with(b"HTTP/1.1 "))
        .map(|w| std::str::from_utf8(&w[9..12]).unwrap())
        .collect();
    assert_eq!(statuses, ["200", "200", "404", "200"], "{err}");
    assert!(out.ends_with(b"\r\n\r\nhello world\n"));
    let big = noise(100_000);
    assert!(
        out.windows(big.len()).any(|w| w == big),
        "the 100 kB body is intact"
    );
}
