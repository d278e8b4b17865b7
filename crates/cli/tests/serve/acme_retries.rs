//! `[acme]` against a Pebble that fails at random (docs/tls.md "Automatic
//! certificates", Renewal): tessera tries again and ends with valid certificates.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use crate::acme::{free_port, metrics, serve_with, verified, Kept, Pebble};
use crate::harness::pump;

#[test]
fn with_half_the_nonces_rejected_every_name_ends_with_a_valid_certificate() {
    let ports = (free_port(), free_port());
    // Pebble refuses half of the nonces it is sent (a `badNonce` problem), the random
    // failure a CA behind a balancer shows.
    let pebble = Pebble::start_env(ports.0, ports.1, &[("PEBBLE_WFE_NONCEREJECT", "50")]);
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("acme");
    // instant-acme sends a refused request again up to twice itself, so an order sees
    // a refusal for 1 request in 8; 6 names make about 50 requests, which leaves about
    // 1 run in 700 without a refusal that reaches tessera (with 3 names it was 1 in 25).
    let names = [
        "r1.test", "r2.test", "r3.test", "r4.test", "r5.test", "r6.test",
    ];
    let top = "admin_listen = \"127.0.0.1:0\"\n";
    let both = "[\"http-01\", \"tls-alpn-01\"]";
    let server = serve_with(&pebble, ports, &state, &names, both, top);
    let root = pebble.issuing_root();
    for name in names {
        verified(&server, ports.1, &root, name);
    }
    // Each refusal is in the log, and was tried again at once (RFC 8555 section 6.5),
    // not after the backoff of a failed order.
    let lines = server.stderr.lock().unwrap().clone();
    let refused: Vec<_> = lines.iter().filter(|l| l.contains("badNonce")).collect();
    assert!(!refused.is_empty(), "no nonce was rejected: {lines:?}");
    assert!(
        refused.iter().any(|l| l.contains("retry_in=100ms")),
        "{refused:?}"
    );
    let orders = metrics(&server, "tessera_acme_orders_total{result=\"issued\"}");
    assert_eq!(orders, ["tessera_acme_orders_total{result=\"issued\"} 6"]);
}

/// Pebble's validations fail now and then: its HTTP-01 and TLS-ALPN-01 connections
/// reach tessera through relays that close every seventh connection at once (the 2nd,
/// 9th, 16th...). Pebble validates each challenge over 3 connections at once, so about
/// a third of the validations fail, spread over the names by the order in which they
/// connect. Pebble has no switch of its own for this; a validation cut short is what a
/// CA sees of a lossy network or a node restarting behind a balancer. Every name still
/// ends with a valid certificate, and each failed order is in the log with its reason
/// and was tried again.
#[test]
fn with_validations_failing_now_and_then_every_name_ends_with_a_valid_certificate() {
    let ports = (free_port(), free_port());
    let to = |port: u16| SocketAddr::from(([127, 0, 0, 1], port));
    let dropped = Arc::new(AtomicUsize::new(0));
    let http = flaky_relay(to(ports.0), dropped.clone());
    let tls = flaky_relay(to(ports.1), dropped.clone());
    let pebble = Pebble::start(http, tls);
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("acme");
    let names = ["v1.test", "v2.test", "v3.test", "v4.test"];
    let top = "admin_listen = \"127.0.0.1:0\"\n";
    let both = "[\"http-01\", \"tls-alpn-01\"]";
    let server = serve_with(&pebble, ports, &state, &names, both, top);
    let root = pebble.issuing_root();
    for name in names {
        verified(&server, ports.1, &root, name);
    }
    assert!(
        dropped.load(Ordering::SeqCst) > 0,
        "the relay dropped no validation"
    );
    let lines = server.stderr.lock().unwrap().clone();
    let failed: Vec<_> = lines
        .iter()
        .filter(|l| l.contains("ACME order failed"))
        .collect();
    assert!(!failed.is_empty(), "no order failed: {lines:?}");
    assert!(
        failed
            .iter()
            .all(|l| l.contains("urn:ietf:params:acme:error") && l.contains("retry_in")),
        "{failed:?}"
    );
    let issued = metrics(&server, "tessera_acme_orders_total{result=\"issued\"}");
    assert_eq!(issued, ["tessera_acme_orders_total{result=\"issued\"} 4"]);
    let failures = metrics(&server, "tessera_acme_orders_total{result=\"failed\"}");
    assert_eq!(
        failures,
        [format!(
            "tessera_acme_orders_total{{result=\"failed\"}} {}",
            failed.len()
        )]
    );
}

/// A relay on a free loopback port to `to` that closes every seventh new connection at
/// once (the 2nd, 9th, 16th...), counting those in `dropped`.
fn flaky_relay(to: SocketAddr, dropped: Arc<AtomicUsize>) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for (n, client) in listener.incoming().flatten().enumerate() {
            if n % 7 == 1 {
                dropped.fetch_add(1, Ordering::SeqCst);
                drop(client);
                continue;
            }
            let Ok(server) = TcpStream::connect(to) else {
                continue;
            };
            pump(client.try_clone().unwrap(), server.try_clone().unwrap());
            pump(server, client);
        }
    });
    port
}

/// An HTTPS proxy in front of Pebble (with Pebble's own certificate, keeping each
/// request's Host, from which Pebble builds its URLs) that refuses the first
/// `refusals` new orders with a 429 rate-limit problem and `Retry-After: SECONDS`, as
/// Let's Encrypt does past a rate limit. Pebble has no rate limits of its own.
const RATE_LIMITER: &str = r#"
import http.client, http.server, ssl, sys
cert, key, ca, upstream, refusals, seconds = sys.argv[1:]
state = {"refused": 0}
class Proxy(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self): self.forward()
    def do_HEAD(self): self.forward()
    def do_POST(self): self.forward()
    def forward(self):
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n) if n else None
        if self.command == "POST" and self.path.startswith("/order-plz") and state["refused"] < int(refusals):
            state["refused"] += 1
            problem = b'{"type":"urn:ietf:params:acme:error:rateLimited","detail":"too many new orders (test)","status":429}'
            self.send_response(429)
            self.send_header("Content-Type", "application/problem+json")
            self.send_header("Retry-After", seconds)
            self.send_header("Content-Length", str(len(problem)))
            self.end_headers()
            self.wfile.write(problem)
            print("refused an order", flush=True)
            return
        conn = http.client.HTTPSConnection("127.0.0.1", int(upstream), context=ssl.create_default_context(cafile=ca))
        skip = ("connection", "keep-alive", "transfer-encoding", "content-length")
        headers = {k: v for k, v in self.headers.items() if k.lower() not in skip}
        conn.request(self.command, self.path, body=body, headers=headers)
        answer = conn.getresponse()
        data = answer.read()
        self.send_response(answer.status)
        for k, v in answer.getheaders():
            if k.lower() not in skip:
                self.send_header(k, v)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)
    def log_message(self, *args): pass
server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Proxy)
context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
context.load_cert_chain(cert, key)
server.socket = context.wrap_socket(server.socket, server_side=True)
print("port", server.server_address[1], flush=True)
server.serve_forever()
"#;

/// A CA past its rate limit refuses a new order with 429 and `Retry-After`: the order
/// is tried again no sooner than that (4 s here, where the first backoff is 1 to 2 s),
/// and the name then gets its certificate.
#[test]
fn a_rate_limited_order_is_tried_again_no_sooner_than_the_retry_after() {
    let ports = (free_port(), free_port());
    let mut pebble = Pebble::start(ports.0, ports.1);
    let upstream = pebble.directory.rsplit(':').next().unwrap();
    let upstream = upstream.trim_end_matches("/dir").to_string();
    let proxy = Kept::start(
        std::process::Command::new("python3")
            .args(["-c", RATE_LIMITER])
            .arg(pebble.dir.path().join("cert.pem"))
            .arg(pebble.dir.path().join("key.pem"))
            .arg(pebble.ca())
            .args([upstream.as_str(), "1", "4"]),
    );
    proxy.wait_for("port ");
    let port = {
        let lines = proxy.lines.lock().unwrap();
        let line = lines.iter().find(|l| l.starts_with("port ")).unwrap();
        line["port ".len()..].to_string()
    };
    pebble.directory = format!("https://127.0.0.1:{port}/dir");
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("acme");
    let top = "admin_listen = \"127.0.0.1:0\"\n";
    let server = serve_with(
        &pebble,
        ports,
        &state,
        &["limited.test"],
        "[\"http-01\"]",
        top,
    );
    verified(&server, ports.1, &pebble.issuing_root(), "limited.test");
    assert_eq!(proxy.count("refused an order"), 1);
    let lines = server.stderr.lock().unwrap().clone();
    let failed: Vec<_> = lines
        .iter()
        .filter(|l| l.contains("ACME order failed"))
        .collect();
    assert_eq!(failed.len(), 1, "{lines:?}");
    assert!(failed[0].contains("rateLimited"), "{failed:?}");
    // `retry_in=3.99...s` or `4.0...s`: the Retry-After, not the 1-2 s backoff.
    let wait: f64 = failed[0]
        .split("retry_in=")
        .nth(1)
        .and_then(|w| w.trim().strip_suffix('s'))
        .and_then(|w| w.parse().ok())
        .unwrap_or_else(|| panic!("no retry_in in {}", failed[0]));
    assert!((3.0..=4.0).contains(&wait), "{}", failed[0]);
}
