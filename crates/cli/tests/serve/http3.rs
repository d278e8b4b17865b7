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

/// `h3client.py` against this site with `spec` (the port added): its connections.
fn connections(quic: &QuicSite, mut spec: Value) -> Vec<Value> {
    spec["port"] = json!(quic.quic.port());
    let report = h3(quic.site.dir.path(), spec);
    report["connections"].as_array().unwrap().clone()
}

/// A client that behaves, served.
fn assert_served(quic: &QuicSite) {
    let got = quic.get(json!({"path": "/hello.txt"}));
    assert_eq!(got["status"], 200, "{got}");
}

/// The `tessera_connections{state="handling"}` gauge: QUIC connections open.
fn handling(admin: SocketAddr) -> String {
    let (_, text) = crate::metrics::admin_get(admin, "/metrics", "");
    text.lines()
        .find(|l| l.starts_with("tessera_connections{state=\"handling\"}"))
        .unwrap_or_default()
        .to_string()
}

#[test]
fn a_client_that_opens_streams_beyond_max_streams_is_closed_and_others_are_served() {
    let quic = QuicSite::start("[http3]\nmax_streams = 10", &[]);
    let requests: Vec<Value> = (0..30).map(|_| json!({"path": "/hello.txt"})).collect();
    // Within the limit, more requests than streams at once wait for credit: all served.
    let polite = connections(&quic, json!({"requests": requests.clone()}));
    let served = polite[0]["responses"].as_array().unwrap();
    assert!(served.iter().all(|r| r["status"] == 200), "{polite:?}");
    assert_eq!(served.len(), 30);
    // Past it: STREAM_LIMIT_ERROR (0x4) closes the connection.
    let rude = connections(
        &quic,
        json!({"requests": requests, "overrun_streams": true, "timeout": 10}),
    );
    assert_eq!(rude[0]["terminated"]["code"], 4, "{rude:?}");
    assert_served(&quic);
}

#[test]
fn an_oversized_field_section_is_431_and_the_connection_goes_on() {
    let quic = QuicSite::start("[limits]\nmax_head_size = 12000", &[]);
    let fields: Vec<Value> = (0..20)
        .map(|i| json!([format!("x-field-{i}"), "v".repeat(1000)]))
        .collect();
    let got = quic.get_all(json!([
        {"path": "/hello.txt", "headers": fields},
        {"path": "/hello.txt"},
    ]));
    assert_eq!(got[0]["status"], 431, "{got:?}");
    assert_eq!(got[1]["status"], 200, "{got:?}");
    // Just under the budget: served.
    let fields: Vec<Value> = (0..8)
        .map(|i| json!([format!("x-field-{i}"), "v".repeat(1000)]))
        .collect();
    assert_eq!(
        quic.get(json!({"path": "/hello.txt", "headers": fields}))["status"],
        200
    );
}

#[test]
fn a_flood_of_new_connections_is_asked_to_retry_and_served() {
    let quic = QuicSite::start(
        "admin_listen = \"127.0.0.1:0\"\n[http3]\nretry_threshold = 1",
        &[],
    );
    let flood = connections(
        &quic,
        json!({"connections": 40, "requests": [{"path": "/hello.txt"}]}),
    );
    for conn in &flood {
        assert!(conn["error"].is_null(), "{conn}");
        assert_eq!(conn["responses"][0]["status"], 200, "{conn}");
    }
    let admin = crate::metrics::admin_addr(&quic.server);
    let (_, metrics) = crate::metrics::admin_get(admin, "/metrics", "");
    let samples = crate::metrics::samples(&metrics);
    let retried = samples["tessera_quic_retries_total"];
    // Each second's first one comes in without one (the flood takes a few seconds at
    // most, even on a busy machine).
    assert!(retried >= 20.0, "{retried} of 40 retried");
    assert_eq!(samples["tessera_http3_connections_total"], 40.0);
}

/// `connections` connections to `quic`, each held open `hold` seconds after its
/// response, on a thread: its report.
fn hold(quic: &QuicSite, connections: usize, hold: u64) -> std::thread::JoinHandle<Value> {
    let site = quic.site.dir.path().to_path_buf();
    let spec = json!({"port": quic.quic.port(), "connections": connections, "hold": hold,
                      "requests": [{"path": "/hello.txt"}]});
    std::thread::spawn(move || h3(&site, spec))
}

#[test]
fn quic_connections_take_slots_of_the_budget() {
    let quic = QuicSite::start("max_connections = 3\nadmin_listen = \"127.0.0.1:0\"", &[]);
    let admin = crate::metrics::admin_addr(&quic.server);
    // Three held open take every slot: a fourth is refused (CONNECTION_REFUSED) while
    // they last.
    let holders = hold(&quic, 3, 8);
    eventually("three QUIC connections counted", || {
        handling(admin).ends_with(" 3")
    });
    let fourth = connections(
        &quic,
        json!({"requests": [{"path": "/hello.txt"}], "timeout": 5}),
    );
    assert!(
        fourth[0]["responses"].as_array().unwrap().is_empty()
            || fourth[0]["responses"][0]["status"].is_null(),
        "{fourth:?}"
    );
    let held = holders.join().unwrap();
    for conn in held["connections"].as_array().unwrap() {
        assert_eq!(conn["responses"][0]["status"], 200, "{conn}");
    }
    // Closed by the clients: the slots are free again.
    eventually("the slots freed", || handling(admin).ends_with(" 0"));
    assert_served(&quic);
}

#[test]
fn quiet_quic_connections_are_closed_at_the_idle_timeout() {
    let quic = QuicSite::start(
        "admin_listen = \"127.0.0.1:0\"\n[http3]\nidle_timeout = \"1s\"",
        &[],
    );
    let admin = crate::metrics::admin_addr(&quic.server);
    // Held open 4 s by clients that say nothing: the server closes them after 1 s.
    let held = hold(&quic, 2, 4).join().unwrap();
    for conn in held["connections"].as_array().unwrap() {
        assert_eq!(conn["responses"][0]["status"], 200, "{conn}");
        assert!(
            !conn["terminated"].is_null(),
            "not closed while idle: {conn}"
        );
    }
    eventually("the slots freed", || handling(admin).ends_with(" 0"));
}

#[test]
fn zero_rtt_is_off_unless_asked_and_then_answers_safe_requests() {
    let spec = json!({"zero_rtt": true, "requests": [
        {"path": "/hello.txt"},
        {"method": "POST", "path": "/hello.txt", "body": "x"},
    ]});
    let off = QuicSite::start("", &[]);
    let conn = connections(&off, spec.clone()).remove(0);
    assert_eq!(conn["early_data_accepted"], false, "{conn}");
    assert_eq!(conn["responses"][0]["status"], 200, "{conn}");
    let on = QuicSite::start("[http3]\nzero_rtt = true", &[]);
    let conn = connections(&on, spec).remove(0);
    assert_eq!(conn["early_data_accepted"], true, "{conn}");
    assert_eq!(conn["responses"][0]["status"], 200, "{conn}");
    // The POST, held until the handshake finished, then answered (405: a file).
    assert_eq!(conn["responses"][1]["status"], 405, "{conn}");
}

/// An HTTP/3 load loop against `quic` for `seconds`, on a thread: its count.
fn load(quic: &QuicSite, seconds: f64) -> std::thread::JoinHandle<Value> {
    let dir = quic.site.dir.path().to_path_buf();
    let spec = json!({"port": quic.quic.port(), "load_seconds": seconds,
                      "path": "/hello.txt", "expect": "hello world\n"});
    std::thread::spawn(move || h3(&dir, spec))
}

fn assert_no_failure(count: &Value) {
    assert_eq!(count["failed"], 0, "{count}");
    assert!(count["ok"].as_u64().unwrap() > 50, "{count}");
}

#[test]
fn reloads_under_an_http3_load_loop_fail_no_request() {
    let quic = QuicSite::start("", &[]);
    let loop_ = load(&quic, 4.0);
    for _ in 0..5 {
        std::thread::sleep(std::time::Duration::from_millis(500));
        quic.server.signal(libc::SIGHUP);
    }
    assert_no_failure(&loop_.join().unwrap());
    assert!(crate::harness::stderr_has(&quic.server, "reloaded"));
}

#[test]
fn shutdown_sends_goaway_and_finishes_the_requests_in_flight() {
    let origin = crate::cache::Origin::start();
    let quic = QuicSite::start(
        &format!(
            "[[upstream]]\nname = \"o\"\naddresses = [\"{}\"]\n[[route]]\nprefix = \"/slow\"\nupstream = \"o\"\n",
            origin.addr
        ),
        &[],
    );
    let dir = quic.site.dir.path().to_path_buf();
    // /slow/X answers after 500 ms.
    let spec = json!({"port": quic.quic.port(), "requests": [{"path": "/slow/a"}]});
    let client = std::thread::spawn(move || h3(&dir, spec));
    eventually("the request at the origin", || origin.hits("/slow/a") == 1);
    quic.server.signal(libc::SIGTERM);
    let report = client.join().unwrap();
    let conn = &report["connections"][0];
    assert_eq!(conn["responses"][0]["status"], 200, "{conn}");
    assert_eq!(body(&conn["responses"][0]), b"slow a");
    let mut server = quic.server;
    let status = server.child.wait().unwrap();
    assert!(status.success(), "{status}");
}

#[test]
fn binary_upgrades_hand_the_udp_sockets_over_under_an_http3_load_loop() {
    use crate::upgrade::{alive, read_pid, upgrade, Successors};
    let logs = tempfile::tempdir().unwrap();
    let pid_file = logs.path().join("tessera.pid");
    let quic = QuicSite::start("", &["--pid-file", pid_file.to_str().unwrap()]);
    let first = quic.server.child.id() as i32;
    eventually("the pid file", || read_pid(&pid_file) == Some(first));
    let mut successors = Successors(Vec::new());
    let loop_ = load(&quic, 4.0);
    let mut pids = vec![first];
    for _ in 0..3 {
        std::thread::sleep(std::time::Duration::from_millis(700));
        pids.push(upgrade(&pid_file, &mut successors));
    }
    assert_no_failure(&loop_.join().unwrap());
    assert!(alive(*pids.last().unwrap()));
    // The very same UDP socket serves: the last process answers on the first's port.
    assert_served(&quic);
    for &pid in &pids[..3] {
        eventually("a replaced process to exit", || !alive(pid));
    }
}

#[test]
fn a_reload_applies_new_http3_limits_to_the_connections_after_it() {
    let quic = QuicSite::start("[http3]\nmax_streams = 10", &[]);
    let requests: Vec<Value> = (0..30).map(|_| json!({"path": "/hello.txt"})).collect();
    let spec = json!({"requests": requests, "overrun_streams": true, "timeout": 10});
    let before = connections(&quic, spec.clone());
    assert_eq!(before[0]["terminated"]["code"], 4, "{before:?}");
    let config = quic.site.dir.path().join("tessera.toml");
    let toml = std::fs::read_to_string(&config).unwrap();
    std::fs::write(
        &config,
        toml.replace("max_streams = 10", "max_streams = 40"),
    )
    .unwrap();
    quic.server.signal(libc::SIGHUP);
    eventually("the reload", || {
        crate::harness::stderr_has(&quic.server, "reloaded")
    });
    let after = connections(&quic, spec);
    assert!(after[0]["terminated"].is_null(), "{after:?}");
    let served = after[0]["responses"].as_array().unwrap();
    assert!(served.iter().all(|r| r["status"] == 200), "{after:?}");
}

#[test]
fn an_unproven_address_is_sent_about_three_times_what_it_sent_at_most() {
    let quic = QuicSite::start("", &[]);
    // A client's first flight from an address that then says nothing more (a spoofed
    // source): the server's answers and their retransmissions, for three seconds.
    let spec = json!({"port": quic.quic.port(), "amplification": true, "seconds": 3});
    let count = h3(quic.site.dir.path(), spec);
    let (sent, received) = (
        count["sent"].as_u64().unwrap(),
        count["received"].as_u64().unwrap(),
    );
    assert!(sent >= 1200, "{count}");
    assert!(received > 0, "the server answered nothing: {count}");
    // quinn sends a datagram while what it sent is under three times what it received,
    // so the last one may pass that by less than its own size (docs/http3.md).
    let last = count["sizes"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .as_u64()
        .unwrap();
    assert!(received - last < 3 * sent, "amplified past 3x: {count}");
    assert!(received < 4 * sent, "{count}");
    assert_served(&quic);
}

/// An origin that answers each request once its body (by its Content-Length) has come,
/// keeps the connection, and records every byte it receives.
fn recording_origin() -> (SocketAddr, std::sync::Arc<std::sync::Mutex<Vec<u8>>>) {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let all = seen.clone();
    std::thread::spawn(move || {
        for mut stream in listener.incoming().flatten() {
            let all = all.clone();
            std::thread::spawn(move || {
                stream
                    .set_read_timeout(Some(std::time::Duration::from_secs(5)))
                    .unwrap();
                let mut got = Vec::new();
                let mut buf = [0u8; 4096];
                while let Ok(n) = stream.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    got.extend_from_slice(&buf[..n]);
                    all.lock().unwrap().extend_from_slice(&buf[..n]);
                    let text = String::from_utf8_lossy(&got).to_ascii_lowercase();
                    let Some(end) = text.find("\r\n\r\n") else {
                        continue;
                    };
                    let length: usize = text[..end]
                        .lines()
                        .find_map(|l| l.strip_prefix("content-length:"))
                        .map_or(0, |v| v.trim().parse().unwrap());
                    if got.len() >= end + 4 + length {
                        got.drain(..end + 4 + length);
                        let _ = stream.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
                    }
                }
            });
        }
    });
    (addr, seen)
}

#[test]
fn a_body_longer_or_shorter_than_its_content_length_never_reaches_the_origin() {
    // RFC 9114 section 4.1.2: DATA past the content-length (or short of it) makes the
    // request malformed. Passed on, the rest would be read by an HTTP/1.1 origin as
    // another request that tessera never routed (request smuggling). A short body is
    // streamed as it comes, then cut off, as a client gone mid-body is: the origin's
    // connection closes, and the client is refused.
    let (origin, seen) = recording_origin();
    let proxy = format!("http://{origin}");
    let quic = QuicSite::start("", &["--proxy", &proxy]);
    let smuggled = "helloGET /admin HTTP/1.1\r\nHost: internal\r\n\r\n";
    let got = quic.get_all(json!([
        {"method": "POST", "path": "/upload", "body": smuggled, "content_length": "5"},
        {"method": "POST", "path": "/short", "body": "abc", "content_length": "10"},
        {"method": "POST", "path": "/fine", "body": "hello", "content_length": "5"},
    ]));
    for (i, response) in got.iter().take(2).enumerate() {
        assert!(
            response["status"] == 400 || response["reset"] == true,
            "request {i}: {response}"
        );
    }
    assert_eq!(got[2]["status"], 200, "{}", got[2]);
    assert_eq!(body(&got[2]), b"ok");
    std::thread::sleep(std::time::Duration::from_millis(300));
    let seen = String::from_utf8_lossy(&seen.lock().unwrap()).into_owned();
    assert!(
        !seen.contains("/admin"),
        "the origin read a smuggled request: {seen}"
    );
    assert!(seen.contains("POST /fine"), "{seen}");
}

#[test]
fn a_request_stream_whose_head_never_comes_is_closed_after_timeouts_head() {
    // Three streams whose HEADERS frame never comes whole would hold their tasks (and the
    // connection, its slot of the budget) for as long as the client likes; after
    // `timeouts.head` the server closes them, and serves the same connection's requests.
    let spec = json!({"partial_heads": 3, "hold": 3, "requests": [{"path": "/hello.txt"}]});
    let quick = QuicSite::start("[timeouts]\nhead = 1", &[]);
    let conn = connections(&quick, spec.clone()).remove(0);
    assert!(conn["error"].is_null(), "{conn}");
    assert_eq!(conn["responses"][0]["status"], 200, "{conn}");
    assert_eq!(conn["partial_closed"], 3, "{conn}");
    // With the default 10 s, the same 3 s leave them open: the closing above is the
    // timeout's.
    let patient = QuicSite::start("", &[]);
    let conn = connections(&patient, spec).remove(0);
    assert_eq!(conn["partial_closed"], 0, "{conn}");
}

#[test]
fn a_client_that_takes_nothing_more_has_its_stream_reset_after_timeouts_write() {
    // A client that stops reading (gives no more flow-control credit) would hold the
    // response's task, and the connection its slot, for good: after `timeouts.write`
    // without progress its stream is reset, and the connection serves on.
    let quick = QuicSite::start("[timeouts]\nwrite = 1", &[]);
    std::fs::write(quick.site.root().join("big.bin"), vec![b'x'; 1 << 20]).unwrap();
    let spec = json!({"stall": true, "timeout": 8, "requests": [{"path": "/big.bin"}]});
    let conn = connections(&quick, spec.clone()).remove(0);
    assert!(conn["error"].is_null(), "{conn}");
    assert_eq!(conn["responses"][0]["reset"], true, "{conn}");
    assert!(
        conn["responses"][0]["length"].as_u64().unwrap() < 1 << 20,
        "{conn}"
    );
    assert_served(&quick);
    // With the default 60 s, the same client is still waiting when it gives up.
    let patient = QuicSite::start("", &[]);
    std::fs::write(patient.site.root().join("big.bin"), vec![b'x'; 1 << 20]).unwrap();
    let mut spec = spec;
    spec["timeout"] = json!(3);
    let conn = connections(&patient, spec).remove(0);
    assert!(
        conn["error"]
            .as_str()
            .is_some_and(|e| e.contains("Timeout")),
        "{conn}"
    );
}
