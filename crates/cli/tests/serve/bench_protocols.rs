//! `tessera bench` over TLS and HTTP/2 (docs/bench.md): the load generator against the
//! real server (and h2o), its request counts checked against the servers' access logs.

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::harness::{eventually, printed_addr, Server, Site};
use crate::upstream_tls::Ca;

/// `tessera bench ARGS --json`: the report, or the failure's stderr in the panic.
fn bench(args: &[&str]) -> Value {
    let out = Command::new(env!("CARGO_BIN_EXE_tessera"))
        .args(["bench", "-t", "1", "--json"])
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The lines of an access log that contain `needle`.
fn lines_with(log: &Path, needle: &str) -> usize {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains(needle))
        .count()
}

/// A site over TLS (a certificate for 127.0.0.1 from a test CA), on h2c too, logging
/// every request: (site, server, https address, h2c address, CA file, log).
fn site() -> (Site, Server, SocketAddr, SocketAddr, std::path::PathBuf) {
    let site = Site::new();
    let dir = site.dir.path();
    let ca = Ca::new(dir, "bench-ca");
    let (cert, key) = ca.sign(dir, "server", &["127.0.0.1"]);
    let log = dir.join("access.log");
    let server = site.serve_with(&format!(
        "tls_listen = [\"127.0.0.1:0\"]\nh2c_listen = [\"127.0.0.1:0\"]\naccess_log = {log:?}\n\
         [tls]\ncertificate = {cert:?}\nkey = {key:?}\n"
    ));
    let https = printed_addr(&server, "https://");
    let h2c = printed_addr(&server, "prior knowledge only");
    (site, server, https, h2c, ca.pem)
}

#[test]
fn https_and_http2_runs_count_what_the_access_log_counts() {
    let (site, _server, https, h2c, ca) = site();
    let log = site.dir.path().join("access.log");
    let ca = ca.to_str().unwrap();
    let tls_url = format!("https://{https}/hello.txt");
    let runs: [(&[&str], String, u64, &str); 4] = [
        (
            &["-n", "300", "-c", "3", "--ca", ca],
            tls_url.clone(),
            300,
            "HTTP/1.1",
        ),
        (
            &[
                "-n",
                "1000",
                "-c",
                "2",
                "--http2",
                "--streams",
                "10",
                "--ca",
                ca,
            ],
            tls_url.clone(),
            1000,
            "HTTP/2",
        ),
        (
            &["-n", "500", "-c", "2", "--http2", "--streams", "8"],
            format!("http://{h2c}/hello.txt"),
            500,
            "HTTP/2",
        ),
        // A new connection, and a full handshake, for every request.
        (
            &["-n", "40", "-c", "2", "--no-keepalive", "--ca", ca],
            tls_url,
            40,
            "HTTP/1.1",
        ),
    ];
    let mut expected = [0u64; 2];
    for (args, url, n, protocol) in runs {
        let mut all = args.to_vec();
        all.push(&url);
        let v = bench(&all);
        assert_eq!(v["requests"], n, "{all:?}: {v}");
        assert_eq!(v["errors"]["total"], 0, "{all:?}: {v}");
        assert_eq!(v["status"]["200"], n, "{all:?}: {v}");
        assert_eq!(v["settings"]["protocol"], protocol);
        assert_eq!(v["settings"]["tls"], url.starts_with("https"));
        if args.contains(&"--no-keepalive") {
            assert_eq!(v["connects"]["count"], n, "{v}");
        }
        expected[(protocol == "HTTP/2") as usize] += n;
    }
    let counted = || {
        [
            lines_with(&log, "\"GET /hello.txt HTTP/1.1\" 200") as u64,
            lines_with(&log, "\"GET /hello.txt HTTP/2.0\" 200") as u64,
        ]
    };
    eventually("the access log to count every request", || {
        counted() == expected
    });
}

#[test]
fn http2_bodies_larger_than_the_window_reach_the_server() {
    let (_site, _server, https, _h2c, ca) = site();
    // POST to a static file is refused with 405 once the body is read: 200 KiB, three
    // windows' worth, must flow for every stream to end.
    let dir = tempfile::tempdir().unwrap();
    let body = dir.path().join("body.bin");
    std::fs::write(&body, vec![b'x'; 200 * 1024]).unwrap();
    let v = bench(&[
        "-n",
        "40",
        "-c",
        "2",
        "--http2",
        "--streams",
        "4",
        "-m",
        "POST",
        "--body-file",
        body.to_str().unwrap(),
        "--ca",
        ca.to_str().unwrap(),
        &format!("https://{https}/hello.txt"),
    ]);
    assert_eq!(v["requests"], 40, "{v}");
    assert_eq!(
        v["errors"]["total"].as_u64().unwrap(),
        v["errors"]["non_2xx"].as_u64().unwrap(),
        "only statuses, no failed request: {v}"
    );
}

#[test]
fn a_certificate_from_an_unknown_authority_is_a_tls_error_with_its_reason() {
    let (_site, _server, https, _h2c, _ca) = site();
    let url = format!("https://{https}/hello.txt");
    // The system's roots do not know the test CA.
    let v = bench(&["-n", "20", "-c", "2", &url]);
    assert_eq!(v["requests"], 0, "{v}");
    assert_eq!(v["errors"]["tls"], 20, "{v}");
    let first = v["errors"]["first"].as_str().unwrap();
    assert!(first.contains("certificate"), "{first}");
    // --insecure takes it.
    let v = bench(&["-n", "20", "-c", "2", "--insecure", "--http2", &url]);
    assert_eq!(
        (v["requests"].clone(), v["errors"]["total"].clone()),
        (20.into(), 0.into())
    );
}

#[test]
fn a_server_that_does_not_agree_to_h2_is_a_tls_error() {
    // `openssl s_server` selects no protocol by ALPN: the handshake ends, without h2.
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new(dir.path(), "bench-ca");
    let (cert, key) = ca.sign(dir.path(), "server", &["127.0.0.1"]);
    let port = free_port();
    let child = Command::new("openssl")
        .args(["s_server", "-quiet", "-www", "-accept"])
        .arg(port.to_string())
        .arg("-cert")
        .arg(&cert)
        .arg("-key")
        .arg(&key)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("openssl is missing: scripts/test.sh installs it");
    let _server = Killed(child);
    wait_for_port(port, "openssl s_server");
    let v = bench(&[
        "-n",
        "5",
        "-c",
        "1",
        "--http2",
        "--insecure",
        &format!("https://127.0.0.1:{port}/"),
    ]);
    assert_eq!(v["errors"]["tls"], 5, "{v}");
    assert!(
        v["errors"]["first"].as_str().unwrap().contains("ALPN h2"),
        "{v}"
    );
}

/// A child process, killed on drop.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn wait_for_port(port: u16, what: &str) {
    let started = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{what} did not start"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// h2o over TLS with an access log, killed on drop.
struct H2o {
    _child: Killed,
    port: u16,
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl H2o {
    fn start(dir: &Path, root: &Path, log: &Path) -> H2o {
        let ca = Ca::new(dir, "h2o-ca");
        let (cert, key) = ca.sign(dir, "h2o", &["127.0.0.1"]);
        let port = free_port();
        let conf = dir.join("h2o.conf");
        std::fs::write(
            &conf,
            format!(
                "user: root\nlisten:\n  host: 127.0.0.1\n  port: {port}\n  ssl:\n    \
                 certificate-file: {}\n    key-file: {}\n    ocsp-update-interval: 0\n\
                 hosts:\n  default:\n    paths:\n      /:\n        file.dir: {}\n\
                 access-log: {}\nerror-log: {}\n",
                cert.display(),
                key.display(),
                root.display(),
                log.display(),
                dir.join("h2o-error.log").display()
            ),
        )
        .unwrap();
        let child = Command::new("h2o")
            .arg("-c")
            .arg(&conf)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("h2o is missing: scripts/test.sh installs it");
        let child = Killed(child);
        wait_for_port(port, "h2o");
        H2o {
            _child: child,
            port,
        }
    }
}

#[test]
fn http2_against_h2o_counts_what_its_access_log_counts() {
    let site = Site::new();
    let log = site.dir.path().join("h2o-access.log");
    let h2o = H2o::start(site.dir.path(), &site.root(), &log);
    let v = bench(&[
        "-n",
        "2000",
        "-c",
        "4",
        "--http2",
        "--streams",
        "10",
        "--insecure",
        &format!("https://127.0.0.1:{}/hello.txt", h2o.port),
    ]);
    assert_eq!(
        (v["requests"].clone(), v["errors"]["total"].clone()),
        (2000.into(), 0.into()),
        "{v}"
    );
    eventually("h2o to log every request", || {
        lines_with(&log, "\"GET /hello.txt HTTP/2\" 200") == 2000
    });
}

/// Caddy (HTTP/3 on by default) over TLS for `localhost`, with an access log, killed on
/// drop. Caddy picks its certificate by SNI, so the URLs name `localhost`.
struct Caddy {
    _child: Killed,
    port: u16,
}

impl Caddy {
    fn start(dir: &Path, root: &Path, log: &Path) -> Caddy {
        let ca = Ca::new(dir, "caddy-ca");
        let (cert, key) = ca.sign(dir, "caddy", &["localhost"]);
        let port = free_port();
        let conf = dir.join("Caddyfile");
        std::fs::write(
            &conf,
            format!(
                "{{\n\tadmin off\n\tauto_https disable_redirects\n\tstorage file_system {}\n\
                 \tservers {{\n\t\tprotocols h1 h2 h3\n\t}}\n}}\n\
                 https://localhost:{port} {{\n\ttls {} {}\n\troot * {}\n\tfile_server\n\
                 \tlog {{\n\t\toutput file {}\n\t}}\n}}\n",
                dir.join("caddy-data").display(),
                cert.display(),
                key.display(),
                root.display(),
                log.display()
            ),
        )
        .unwrap();
        let child = Command::new("caddy")
            .args(["run", "--adapter", "caddyfile", "--config"])
            .arg(&conf)
            .env("HOME", dir)
            .env("XDG_CONFIG_HOME", dir.join("caddy-config"))
            .env("XDG_DATA_HOME", dir.join("caddy-data"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("caddy is missing: scripts/test.sh installs it");
        let child = Killed(child);
        wait_for_port(port, "caddy");
        Caddy {
            _child: child,
            port,
        }
    }
}

#[test]
fn http3_against_caddy_counts_what_its_access_log_counts() {
    let site = Site::new();
    let log = site.dir.path().join("caddy-access.log");
    let caddy = Caddy::start(site.dir.path(), &site.root(), &log);
    let url = format!("https://localhost:{}/hello.txt", caddy.port);
    // Caddy may open its UDP socket a little after its TCP one: the first run retries.
    let started = Instant::now();
    let v = loop {
        let v = bench(&["-n", "1", "-c", "1", "--http3", "--insecure", &url]);
        if v["requests"] == 1 || started.elapsed() > Duration::from_secs(10) {
            break v;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(v["requests"], 1, "{v}");
    let keepalive = bench(&[
        "-n",
        "2000",
        "-c",
        "4",
        "--http3",
        "--streams",
        "10",
        "--insecure",
        &url,
    ]);
    let fresh = bench(&[
        "-n",
        "30",
        "-c",
        "2",
        "--http3",
        "--no-keepalive",
        "--insecure",
        &url,
    ]);
    // The open model: 300 requests at 1,000 a second, with both latencies.
    let open = bench(&[
        "-n",
        "300",
        "-c",
        "2",
        "--streams",
        "4",
        "--rate",
        "1000",
        "--http3",
        "--insecure",
        &url,
    ]);
    assert_eq!(open["settings"]["model"], "open");
    assert_eq!(open["correction"], "intended-send-time");
    assert!(
        open["corrected_latency_ms"]["p50"].as_f64().unwrap() > 0.0,
        "{open}"
    );
    for (v, n) in [(&keepalive, 2000), (&fresh, 30), (&open, 300)] {
        assert_eq!(v["requests"], n, "{v}");
        assert_eq!(v["errors"]["total"], 0, "{v}");
        assert_eq!(v["settings"]["protocol"], "HTTP/3");
    }
    assert_eq!(fresh["connects"]["count"], 30, "{fresh}");
    // The first try that succeeded, and the three runs: a try that failed sent nothing.
    eventually("Caddy to log every HTTP/3 request", || {
        lines_with(&log, "\"proto\":\"HTTP/3.0\"") == 1 + 2000 + 30 + 300
    });
}

/// `--connect-to`: URLs of two host names, each with its own certificate, on one server:
/// each request carries its URL's Host and its connection that name in SNI (checked by
/// the certificate each name verifies against, and by the host each line of the access
/// log names), over HTTP/1.1 and HTTP/2. Kept connections would carry requests for
/// other names than the one they sent, so such a run is refused.
#[test]
fn connect_to_spreads_requests_over_host_names_each_with_its_own_certificate() {
    let site = Site::new();
    let dir = site.dir.path();
    let ca = Ca::new(dir, "bench-ca");
    let mut hosts = String::new();
    for name in ["a.test", "b.test"] {
        let (cert, key) = ca.sign(dir, name, &[name]);
        let root = dir.join(name);
        std::fs::create_dir_all(&root).unwrap();
        std::fs::write(root.join("x.txt"), name).unwrap();
        hosts.push_str(&format!(
            "\n[[host]]\nnames = [\"{name}\"]\nroot = {root:?}\n[host.tls]\n\
             certificate = {cert:?}\nkey = {key:?}\n"
        ));
    }
    let log = dir.join("access.log");
    let (cert, key) = ca.sign(dir, "default", &["127.0.0.1"]);
    let server = site.serve_with(&format!(
        "tls_listen = [\"127.0.0.1:0\"]\naccess_log = {log:?}\naccess_log_format = \"%v %s %b\"\n\
         [tls]\ncertificate = {cert:?}\nkey = {key:?}\n{hosts}"
    ));
    let https = printed_addr(&server, "https://");
    let port = https.port().to_string();
    let (a, b) = (
        format!("https://a.test:{port}/x.txt"),
        format!("https://b.test:{port}/x.txt"),
    );
    let to = https.to_string();
    let ca = ca.pem.to_str().unwrap();
    let base = ["--connect-to", to.as_str(), "--ca", ca];
    for extra in [
        &["-n", "40", "-c", "2", "--no-keepalive"][..],
        &["-n", "40", "-c", "4", "--no-keepalive"][..],
        &["-n", "40", "-c", "3", "--no-keepalive", "--http2"][..],
    ] {
        let mut args = base.to_vec();
        args.extend_from_slice(extra);
        args.extend_from_slice(&[&a, &b]);
        let v = bench(&args);
        assert_eq!(v["errors"]["total"], 0, "{args:?}: {v}");
        assert_eq!(v["status"]["200"], 40, "{args:?}: {v}");
    }
    // Each host answered its own file to requests for it: 6 bytes each, 20 of each name
    // per run.
    eventually("the access log to count every request", || {
        lines_with(&log, "a.test 200 6") == 60 && lines_with(&log, "b.test 200 6") == 60
    });
    // Without --connect-to, two hosts are refused, naming the option; with it, kept
    // connections over TLS are.
    for (args, want) in [
        (&["-n", "1", &a, &b][..], "--connect-to"),
        (
            &["-n", "1", "--connect-to", &to, &a, &b][..],
            "need --no-keepalive",
        ),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_tessera"))
            .arg("bench")
            .args(args)
            .output()
            .unwrap();
        assert!(!out.status.success());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(want), "{stderr}");
    }
}
