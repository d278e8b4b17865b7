//! TLS termination (docs/tls.md): the real binary with certificates made here (rcgen),
//! spoken to by curl and `openssl s_client`, the clients users have.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::harness::{Server, Site};

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
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let lines = server.stderr.lock().unwrap().clone();
        if let Some(addr) = lines.iter().find_map(|l| {
            let rest = l.split_once("https://")?.1;
            rest.split('/').next()?.parse().ok()
        }) {
            return addr;
        }
        assert!(Instant::now() < deadline, "no https:// line in {lines:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A site served over TLS with one certificate for `localhost` (and `extra` config).
pub struct TlsSite {
    pub site: Site,
    pub cert: Cert,
    pub server: Server,
    pub https: SocketAddr,
}

impl TlsSite {
    pub fn start(extra: &str) -> TlsSite {
        let site = Site::new();
        let cert = make_cert(site.dir.path(), "localhost", &["localhost"]);
        let toml = format!(
            "tls_listen = [\"127.0.0.1:0\"]\n{extra}\n[tls]\ncertificate = {:?}\nkey = {:?}\n",
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

fn wait_with_deadline(mut child: std::process::Child, limit: Duration) -> Output {
    let deadline = Instant::now() + limit;
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
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
    let tls = TlsSite::start("");
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
    let tls = TlsSite::start("");
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
    let tls = TlsSite::start("");
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
    let tls = TlsSite::start("");
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
    let tls = TlsSite::start("[timeouts]\nhead = 1.0\n");
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
