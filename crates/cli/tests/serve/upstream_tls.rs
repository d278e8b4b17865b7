//! Upstreams over TLS (docs/upstreams.md, "HTTPS upstreams"): the real binary in front of
//! a Python `ssl` HTTP server started here, with a test CA and certificates made here
//! (rcgen). The origin answers each request with what it saw of the connection: the SNI
//! name, whether the session was resumed, the client certificate's name, the TLS version,
//! the ALPN protocol, whether the connection's ClientHello offered TLS 1.3 and the cipher
//! suite.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use crate::harness::{eventually, stderr_has, Server, Site};
use crate::metrics::{admin_addr, admin_get, samples};

/// The origin: an HTTP/1.1 keep-alive server over TLS. `/health` answers 503 while the
/// file `down` (beside the script) exists; `/page` is an ESI page including
/// `https://frag.test/frag`.
const ORIGIN: &str = r#"
import http.server, os, socket, ssl, sys

cert, key, client_ca, here, max_version = sys.argv[1:6]
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(cert, key)
if max_version == "1.2":
    ctx.maximum_version = ssl.TLSVersion.TLSv1_2
if max_version == "1.3-only":
    ctx.minimum_version = ssl.TLSVersion.TLSv1_3
ctx.set_alpn_protocols(["http/1.1"])
# The client's order of cipher suites, as nginx's default (`ssl_prefer_server_ciphers off`).
ctx.options &= ~ssl.OP_CIPHER_SERVER_PREFERENCE
if client_ca != "-":
    ctx.verify_mode = ssl.CERT_REQUIRED
    ctx.load_verify_locations(client_ca)

def offers_13(sock):
    """Whether the ClientHello waiting on `sock` (peeked, not taken) lists TLS 1.3 in its
    supported_versions extension."""
    while True:
        data = sock.recv(16384, socket.MSG_PEEK)
        if not data:
            return None
        if len(data) >= 5 and len(data) >= 5 + int.from_bytes(data[3:5], "big"):
            break
    hello = data[5:]
    i = 4 + 2 + 32
    i += 1 + hello[i]
    i += 2 + int.from_bytes(hello[i:i + 2], "big")
    i += 1 + hello[i]
    end = i + 2 + int.from_bytes(hello[i:i + 2], "big")
    i += 2
    while i < end:
        kind = int.from_bytes(hello[i:i + 2], "big")
        size = int.from_bytes(hello[i + 2:i + 4], "big")
        if kind == 43:
            versions = hello[i + 5:i + 4 + size]
            return any(versions[j:j + 2] == b"\x03\x04" for j in range(0, len(versions), 2))
        i += 4 + size
    return False

def sni(sock, name, _ctx):
    sock.sni_name = name
ctx.sni_callback = sni

class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self):
        c = self.connection
        peer = c.getpeercert()
        client = "-"
        if peer:
            client = dict(x[0] for x in peer["subject"]).get("commonName", "?")
        status, extra = 200, []
        if self.path.startswith("/health") and os.path.exists(os.path.join(here, "down")):
            status = 503
        if self.path.startswith("/page"):
            body = b'<p><esi:include src="https://frag.test/frag"/></p>'
            extra.append(("Surrogate-Control", 'content="ESI/1.0"'))
            extra.append(("Content-Type", "text/html"))
        else:
            body = ("path=%s sni=%s reused=%s client=%s version=%s alpn=%s offered13=%s cipher=%s\n" % (
                self.path, getattr(c, "sni_name", None), c.session_reused, client,
                c.version(), c.selected_alpn_protocol(), c.offered13, c.cipher()[0])).encode()
        self.send_response(status)
        for name, value in extra:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass

class Server(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def get_request(self):
        sock, addr = self.socket.accept()
        sock.settimeout(5)
        try:
            offered13 = offers_13(sock)
        except (OSError, IndexError):
            offered13 = None
        sock.settimeout(None)
        if os.path.exists(os.path.join(here, "only13")):
            # From now on TLS 1.3 only (an origin upgraded in place).
            ctx.maximum_version = ssl.TLSVersion.TLSv1_3
            ctx.minimum_version = ssl.TLSVersion.TLSv1_3
        tls = ctx.wrap_socket(sock, server_side=True)
        tls.offered13 = offered13
        return tls, addr

server = Server(("127.0.0.1", 0), Handler)
print(server.server_address[1], flush=True)
server.serve_forever()
"#;

/// A certificate authority made for the test, and what it signed.
pub(crate) struct Ca {
    issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
    pub(crate) pem: PathBuf,
}

impl Ca {
    pub(crate) fn new(dir: &Path, name: &str) -> Ca {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        let cert = params.self_signed(&key).unwrap();
        let pem = dir.join(format!("{name}.pem"));
        std::fs::write(&pem, cert.pem()).unwrap();
        Ca {
            issuer: rcgen::Issuer::new(params, key),
            pem,
        }
    }

    /// A certificate for `names` (DNS names or IP addresses; the subject's CN is the
    /// first), as `FILE.pem` and `FILE.key` in `dir`.
    pub(crate) fn sign(&self, dir: &Path, file: &str, names: &[&str]) -> (PathBuf, PathBuf) {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params =
            rcgen::CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
                .unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, names[0]);
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        let (c, k) = (
            dir.join(format!("{file}.pem")),
            dir.join(format!("{file}.key")),
        );
        std::fs::write(&c, cert.pem()).unwrap();
        std::fs::write(&k, key.serialize_pem()).unwrap();
        (c, k)
    }
}

/// The Python origin, killed on drop.
struct Origin {
    child: Child,
    port: u16,
    dir: PathBuf,
}

impl Origin {
    /// Serves with `cert` and `key`; with `client_ca`, requires a client certificate
    /// that it signed; `max_version` "1.2", "1.3" or "1.3-only".
    fn start(
        dir: &Path,
        cert: &Path,
        key: &Path,
        client_ca: Option<&Path>,
        max_version: &str,
    ) -> Origin {
        let script = dir.join("origin.py");
        std::fs::write(&script, ORIGIN).unwrap();
        let mut child = Command::new("python3")
            .arg(&script)
            .arg(cert)
            .arg(key)
            .arg(client_ca.map_or("-".into(), |p| p.display().to_string()))
            .arg(dir)
            .arg(max_version)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("python3");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let port = line.trim().parse().expect("the origin's port");
        Origin {
            child,
            port,
            dir: dir.to_path_buf(),
        }
    }

    fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// `/health` answers 503 (`true`) or 200.
    fn set_down(&self, down: bool) {
        let flag = self.dir.join("down");
        if down {
            std::fs::write(flag, b"").unwrap();
        } else {
            let _ = std::fs::remove_file(flag);
        }
    }
}

impl Drop for Origin {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A test CA, the origin's certificate from it (for `origin.test` and 127.0.0.1), and
/// the origin serving it.
struct Setup {
    site: Site,
    ca: Ca,
    origin: Origin,
}

impl Setup {
    fn new(require_client: bool) -> Setup {
        Setup::with(require_client, "1.3")
    }

    fn with(require_client: bool, max_version: &str) -> Setup {
        let site = Site::new();
        let dir = site.dir.path();
        let ca = Ca::new(dir, "test-ca");
        let (cert, key) = ca.sign(dir, "origin", &["origin.test", "127.0.0.1"]);
        let client_ca = require_client.then_some(ca.pem.as_path());
        let origin = Origin::start(dir, &cert, &key, client_ca, max_version);
        Setup { site, ca, origin }
    }

    /// Serves with one `[[upstream]]` "secure" at the origin (its other keys `keys`), a
    /// route to it, and an admin listener; `top` goes first.
    fn serve(&self, top: &str, keys: &str) -> Server {
        self.site.serve_with(&format!(
            "admin_listen = \"127.0.0.1:0\"\n{top}\n\
             [[upstream]]\nname = \"secure\"\naddresses = [\"{}\"]\n{keys}\n\n\
             [[route]]\nupstream = \"secure\"\n",
            self.origin.addr()
        ))
    }

    /// Serves the origin over TLS, verified with the test CA, keeping no idle connection:
    /// each request opens one (and so makes a handshake).
    fn serve_unpooled(&self) -> Server {
        self.serve("", &format!("tls = true\n{}\nmax_idle = 0", self.ca()))
    }

    fn ca(&self) -> String {
        format!("ca = {:?}", self.ca.pem)
    }
}

fn body(server: &Server, path: &str) -> (u16, String) {
    let r = server.get(path);
    (r.status, String::from_utf8_lossy(&r.body).into_owned())
}

fn handshakes(server: &Server, result: &str) -> f64 {
    let (_, text) = admin_get(admin_addr(server), "/metrics", "");
    samples(&text)
        .get(&format!(
            "tessera_upstream_tls_handshakes_total{{upstream=\"secure\",result=\"{result}\"}}"
        ))
        .copied()
        .unwrap_or(-1.0)
}

#[test]
fn an_https_origin_is_served_when_ca_names_its_authority() {
    let s = Setup::new(false);
    let server = s.serve(
        "",
        &format!("tls = true\n{}\nsni = \"origin.test\"", s.ca()),
    );
    let (status, text) = body(&server, "/a");
    assert_eq!(status, 200, "{text}");
    assert!(text.starts_with("path=/a sni=origin.test "), "{text}");
    assert!(text.contains(" alpn=http/1.1"), "{text}");
    assert!(text.contains(" version=TLSv1.3"), "{text}");
    // The pooled connection carries the next request.
    let (status, text) = body(&server, "/b");
    assert_eq!(status, 200, "{text}");
    assert_eq!(handshakes(&server, "full"), 1.0);
    assert_eq!(handshakes(&server, "failed"), 0.0);
}

#[test]
fn an_https_address_needs_no_tls_key_and_an_ip_sends_no_sni() {
    let s = Setup::new(false);
    let server = s.site.serve_with(&format!(
        "[[upstream]]\nname = \"secure\"\naddresses = [\"https://{}\"]\n{}\n\n\
         [[route]]\nupstream = \"secure\"\n",
        s.origin.addr(),
        s.ca()
    ));
    let (status, text) = body(&server, "/ip");
    // Verified against the certificate's IP address; no SNI for an IP (RFC 6066).
    assert_eq!(status, 200, "{text}");
    assert!(text.starts_with("path=/ip sni=None "), "{text}");
}

#[test]
fn a_peer_of_its_own_may_speak_tls() {
    let s = Setup::new(false);
    let server = s.site.serve_with(&format!(
        "[[upstream]]\nname = \"secure\"\n{}\n\n         [[upstream.peer]]\naddress = \"{}\"\ntls = true\nweight = 2\n\n         [[route]]\nupstream = \"secure\"\n",
        s.ca(),
        s.origin.addr()
    ));
    let (status, text) = body(&server, "/peer");
    assert_eq!(status, 200, "{text}");
    assert!(text.starts_with("path=/peer sni=None "), "{text}");
}

#[test]
fn a_certificate_from_another_authority_is_a_502_with_the_reason_logged() {
    let s = Setup::new(false);
    let other = Ca::new(s.site.dir.path(), "other-ca");
    let server = s.serve(
        "",
        &format!("tls = true\nca = {:?}\nsni = \"origin.test\"", other.pem),
    );
    let (status, text) = body(&server, "/x");
    assert_eq!(status, 502, "{text}");
    let logged = || {
        server.stderr.lock().unwrap().iter().any(|l| {
            l.contains("TLS handshake with the peer failed")
                && l.contains(&s.origin.addr())
                && l.contains("UnknownIssuer")
        })
    };
    eventually("the handshake failure logged", logged);
    assert_eq!(handshakes(&server, "failed"), 1.0);
}

#[test]
fn a_name_the_certificate_does_not_hold_is_a_502() {
    let s = Setup::new(false);
    let server = s.serve(
        "",
        &format!("tls = true\n{}\nsni = \"elsewhere.test\"", s.ca()),
    );
    assert_eq!(body(&server, "/x").0, 502);
    eventually("the name mismatch logged", || {
        stderr_has(&server, "certificate not valid for name \"elsewhere.test\"")
    });
}

#[test]
fn proxy_https_verifies_against_the_system_roots() {
    let s = Setup::new(false);
    let url = format!("https://{}", s.origin.addr());
    let server = Server::start(&s.site.root(), &["--proxy", &url]);
    // The test CA is not among the system's roots.
    assert_eq!(body(&server, "/p").0, 502);
    eventually("the handshake failure logged", || {
        stderr_has(&server, "UnknownIssuer")
    });
}

#[test]
fn a_reload_reads_the_ca_file_again() {
    let s = Setup::new(false);
    let dir = s.site.dir.path();
    let other = Ca::new(dir, "other-ca");
    let ca = dir.join("origin-ca.pem");
    std::fs::copy(&other.pem, &ca).unwrap();
    let server = s.serve("", &format!("tls = true\nca = {ca:?}"));
    assert_eq!(body(&server, "/before").0, 502);
    // The file replaced in place, the configuration unchanged.
    std::fs::copy(&s.ca.pem, &ca).unwrap();
    server.signal(libc::SIGHUP);
    eventually("the reload", || stderr_has(&server, "generation=2"));
    let (status, text) = body(&server, "/after");
    assert_eq!(status, 200, "{text}");
}

#[test]
fn verify_false_connects_to_any_certificate_and_warns_at_start() {
    let s = Setup::new(false);
    let server = s.serve("", "tls = true\nverify = false");
    eventually("the warning", || stderr_has(&server, "verify = false"));
    let (status, text) = body(&server, "/v");
    assert_eq!(status, 200, "{text}");
    assert!(text.starts_with("path=/v sni=None "), "{text}");
}

#[test]
fn an_origin_that_requires_a_client_certificate_gets_the_configured_one() {
    let s = Setup::new(true);
    let dir = s.site.dir.path();
    let (cert, key) = s.ca.sign(dir, "client", &["tessera-client"]);
    let without = s.serve("", &format!("tls = true\n{}", s.ca()));
    assert_eq!(body(&without, "/c").0, 502, "no client certificate");
    drop(without);
    let server = s.serve(
        "",
        &format!(
            "tls = true\n{}\nclient_certificate = {cert:?}\nclient_key = {key:?}",
            s.ca()
        ),
    );
    let (status, text) = body(&server, "/c");
    assert_eq!(status, 200, "{text}");
    assert!(text.contains(" client=tessera-client "), "{text}");
}

#[test]
fn a_second_connection_resumes_the_session_of_the_first() {
    let s = Setup::new(false);
    // No idle connection kept: each request opens one.
    let server = s.serve_unpooled();
    let (_, first) = body(&server, "/1");
    assert!(first.contains(" reused=False "), "{first}");
    let (status, second) = body(&server, "/2");
    assert_eq!(status, 200, "{second}");
    assert!(second.contains(" reused=True "), "{second}");
    assert_eq!(handshakes(&server, "full"), 1.0);
    assert_eq!(handshakes(&server, "resumed"), 1.0);
}

#[test]
fn tls_1_2_is_spoken_and_resumed_with_an_origin_that_stops_there() {
    let s = Setup::with(false, "1.2");
    let server = s.serve_unpooled();
    let (status, first) = body(&server, "/1");
    assert_eq!(status, 200, "{first}");
    assert!(first.contains(" reused=False "), "{first}");
    assert!(first.contains(" version=TLSv1.2 "), "{first}");
    let (_, second) = body(&server, "/2");
    assert!(second.contains(" reused=True "), "{second}");
    assert_eq!(handshakes(&server, "resumed"), 1.0);
}

/// A peer whose handshake ended at TLS 1.2 is offered TLS 1.2 only after that (a
/// ClientHello without TLS 1.3, so without a key share made for nothing), and resumes;
/// a peer that speaks TLS 1.3 is offered it on every connection.
#[test]
fn a_peer_that_stops_at_tls_1_2_is_offered_tls_1_2_only_after_its_first_handshake() {
    let s = Setup::with(false, "1.2");
    let server = s.serve_unpooled();
    let (_, first) = body(&server, "/1");
    assert!(first.contains(" offered13=True"), "{first}");
    // AES-128-GCM is offered first, and the origin (which takes the client's order, as
    // nginx does by default) takes it.
    assert!(
        first.contains(" cipher=ECDHE-ECDSA-AES128-GCM-SHA256"),
        "{first}"
    );
    for path in ["/2", "/3"] {
        let (status, next) = body(&server, path);
        assert_eq!(status, 200, "{next}");
        assert!(next.contains(" version=TLSv1.2 "), "{next}");
        assert!(next.contains(" reused=True "), "{next}");
        assert!(next.contains(" offered13=False"), "{next}");
    }
    let s = Setup::new(false);
    let server = s.serve_unpooled();
    for path in ["/1", "/2"] {
        let (_, page) = body(&server, path);
        assert!(page.contains(" version=TLSv1.3 "), "{page}");
        assert!(page.contains(" offered13=True"), "{page}");
        assert!(page.contains(" cipher=TLS_AES_128_GCM_SHA256"), "{page}");
    }
}

/// A peer found to stop at TLS 1.2 that refuses the TLS 1.2 offer later (upgraded to
/// TLS 1.3 only meanwhile) is offered TLS 1.3 at once on a new connection: the request
/// is served, the refused handshake counted `failed`, and the next connection offers
/// TLS 1.3 too.
#[test]
fn a_peer_that_refuses_the_tls_1_2_offer_is_offered_tls_1_3_at_once() {
    let s = Setup::with(false, "1.2");
    let server = s.serve_unpooled();
    let (_, first) = body(&server, "/1");
    assert!(first.contains(" version=TLSv1.2 "), "{first}");
    std::fs::write(s.site.dir.path().join("only13"), b"").unwrap();
    let (status, second) = body(&server, "/2");
    assert_eq!(status, 200, "{second}");
    assert!(second.contains(" version=TLSv1.3 "), "{second}");
    assert_eq!(handshakes(&server, "failed"), 1.0);
    let (_, third) = body(&server, "/3");
    assert!(third.contains(" offered13=True"), "{third}");
    assert!(third.contains(" version=TLSv1.3 "), "{third}");
}

/// What is learned of TLS 1.2 is a peer's, not its name's: behind one `sni`, a peer that
/// stops at TLS 1.2 and one that speaks only TLS 1.3 are both served, in turns, and no
/// handshake fails.
#[test]
fn peers_behind_one_name_that_speak_different_tls_versions_are_each_served() {
    let s = Setup::with(false, "1.2");
    let dir = s.site.dir.path();
    std::fs::create_dir_all(dir.join("13")).unwrap();
    let only_13 = Origin::start(
        &dir.join("13"),
        &dir.join("origin.pem"),
        &dir.join("origin.key"),
        None,
        "1.3-only",
    );
    let server = s.site.serve_with(&format!(
        "admin_listen = \"127.0.0.1:0\"\n\
         [[upstream]]\nname = \"secure\"\naddresses = [\"{}\", \"{}\"]\n\
         tls = true\nsni = \"origin.test\"\n{}\nmax_idle = 0\n\n\
         [[route]]\nupstream = \"secure\"\n",
        s.origin.addr(),
        only_13.addr(),
        s.ca()
    ));
    let mut versions = Vec::new();
    for i in 0..6 {
        let (status, page) = body(&server, &format!("/{i}"));
        assert_eq!(status, 200, "{page}");
        versions.push(if page.contains(" version=TLSv1.3 ") {
            13
        } else {
            12
        });
    }
    assert_eq!(
        versions.iter().filter(|v| **v == 13).count(),
        3,
        "{versions:?}"
    );
    assert_eq!(handshakes(&server, "failed"), 0.0);
}

#[test]
fn a_worker_resumes_the_session_that_another_worker_began() {
    let s = Setup::new(false);
    let config = s.site.dir.path().join("workers.toml");
    std::fs::write(
        &config,
        format!(
            "listen = [\"127.0.0.1:0\"]\nworkers = 2\nadmin_listen = \"127.0.0.1:0\"\n\n\
             [[upstream]]\nname = \"secure\"\naddresses = [\"{}\"]\ntls = true\n{}\n\n\
             [[route]]\nupstream = \"secure\"\n",
            s.origin.addr(),
            s.ca()
        ),
    )
    .unwrap();
    let server = Server::start_args(&[
        "serve".into(),
        "--config".into(),
        config.display().to_string(),
    ]);
    // Each worker keeps its own pool, so one after the other, a worker opens a second
    // connection only when it is not the worker that opened the first: requests on new
    // client connections (the kernel spreads them over both workers' listeners) until
    // the second worker has opened its own.
    let opened = || {
        let (_, text) = admin_get(admin_addr(&server), "/metrics", "");
        samples(&text)
            .get("tessera_upstream_connections_opened_total{upstream=\"secure\"}")
            .copied()
            .unwrap_or(0.0)
    };
    let mut n = 0;
    let mut last = String::new();
    while opened() < 2.0 {
        assert!(n < 200, "every request went to one worker");
        let (status, text) = body(&server, &format!("/w{n}"));
        assert_eq!(status, 200, "{text}");
        last = text;
        n += 1;
    }
    // The request that made the second worker connect: the origin saw a resumed session.
    assert!(last.contains(" reused=True "), "{last}");
    assert_eq!(handshakes(&server, "full"), 1.0, "after {n} requests");
    assert_eq!(handshakes(&server, "resumed"), 1.0);
}

#[test]
fn health_checks_over_tls_take_the_peer_out_and_bring_it_back() {
    let s = Setup::new(false);
    let server = s.serve(
        "",
        &format!(
            "tls = true\n{}\n[upstream.health]\npath = \"/health\"\ninterval = 0.2\n\
             unhealthy_after = 1\n",
            s.ca()
        ),
    );
    s.origin.set_down(true);
    eventually("the peer taken out", || {
        stderr_has(&server, "peer unhealthy (active checks)")
    });
    assert_eq!(body(&server, "/x").0, 502, "every peer is out");
    s.origin.set_down(false);
    eventually("the peer back", || {
        stderr_has(&server, "peer up: health checks pass")
    });
    assert_eq!(body(&server, "/x").0, 200);
    assert!(handshakes(&server, "full") + handshakes(&server, "resumed") >= 3.0);
}

#[test]
fn an_esi_page_includes_a_fragment_from_an_https_host() {
    let s = Setup::new(false);
    let server = s.serve(
        "",
        &format!(
            "tls = true\n{}\nsni = \"origin.test\"\n\n\
             [[esi.fragment_host]]\nhost = \"frag.test\"\nupstream = \"secure\"",
            s.ca()
        ),
    );
    let (status, text) = body(&server, "/page");
    assert_eq!(status, 200, "{text}");
    assert!(text.starts_with("<p>path=/frag sni=origin.test "), "{text}");
}

#[test]
fn check_config_names_the_tls_keys_it_refuses() {
    let site = Site::new();
    let path = site.dir.path().join("bad.toml");
    for (keys, says) in [
        (
            "protocol = \"h2\"",
            "upstream `secure`: protocol = \"h2\" is HTTP/2 over TLS",
        ),
        ("ca = \"/x.pem\"", "`ca` applies to TLS"),
        (
            "tls = true\nclient_key = \"/k\"",
            "client_certificate and client_key go together",
        ),
        (
            "tls = true\nca = \"/nonexistent/ca.pem\"",
            "cannot read /nonexistent/ca.pem",
        ),
        (
            "tls = true\nsni = \"a b\"",
            "sni \"a b\" is not a host name",
        ),
    ] {
        std::fs::write(
            &path,
            format!(
                "[[upstream]]\nname = \"secure\"\naddresses = [\"127.0.0.1:1\"]\n{keys}\n\n\
                 [[route]]\nupstream = \"secure\"\n"
            ),
        )
        .unwrap();
        let (code, stderr) = crate::harness::check_config_output(&path);
        assert_eq!(code, Some(1), "{keys}: {stderr}");
        assert!(stderr.contains(says), "{keys}: {stderr}");
    }
}
