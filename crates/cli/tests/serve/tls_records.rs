//! TLS records that do not arrive whole, and what an idle TLS connection holds
//! (docs/tls.md, "Memory"): the connection keeps a record's first part until the rest
//! comes, request bodies of many records pass byte-exact whatever the TLS or HTTP
//! version, and an idle connection keeps rustls' state and no buffer.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::Duration;

use crate::harness::stderr_has;
use crate::tls::{curl, read_head, TlsSite};

/// An origin that answers each request (one per connection) with its body.
fn body_echo_origin() -> SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for mut stream in listener.incoming().flatten() {
            let head = String::from_utf8_lossy(&read_head(&mut stream)).to_ascii_lowercase();
            let length: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .map_or(0, |v| v.trim().parse().unwrap());
            let mut body = vec![0; length];
            if stream.read_exact(&mut body).is_err() {
                continue;
            }
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\nContent-Length: {length}\r\nConnection: close\r\n\r\n"
            );
            let _ = stream.write_all(&body);
        }
    });
    addr
}

#[test]
fn request_bodies_of_many_records_arrive_byte_exact_over_tls13_tls12_and_http2() {
    let origin = body_echo_origin();
    let routes = format!(
        "[[upstream]]\nname = \"o\"\naddresses = [\"{origin}\"]\n[[route]]\nprefix = \"/echo\"\nupstream = \"o\"\n"
    );
    let tls = TlsSite::start("", &routes);
    // 900,000 bytes that do not repeat with any record-sized period.
    let body: Vec<u8> = (0..900_000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    let file = tls.site.dir.path().join("body.bin");
    std::fs::write(&file, &body).unwrap();
    let data = format!("@{}", file.display());
    for args in [
        ["--tlsv1.3", "--http1.1"],
        ["--tls-max", "1.2"],
        ["--tlsv1.3", "--http2"],
    ] {
        let mut all = vec![
            "--data-binary",
            &data,
            "-H",
            "Content-Type: application/octet-stream",
        ];
        all.extend(args);
        let out = curl(tls.https, &tls.cert.cert, "localhost", "/echo", &all);
        assert!(
            out.stdout == body,
            "{args:?}: {} bytes back, {}",
            out.stdout.len(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// A rustls client of `version` that trusts the site's certificate; `fragment` caps its
/// records' size (so that its handshake messages span records).
fn client(
    tls: &TlsSite,
    version: &'static rustls::SupportedProtocolVersion,
    fragment: Option<usize>,
) -> rustls::ClientConnection {
    let pem = std::fs::read(&tls.cert.cert).unwrap();
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls::pki_types::pem::PemObject::pem_slice_iter(&pem) {
        roots.add(cert.unwrap()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[version])
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.max_fragment_size = fragment;
    rustls::ClientConnection::new(Arc::new(config), "localhost".try_into().unwrap()).unwrap()
}

/// A client that sends every byte of its handshake and request in a write of its own,
/// in records of 64 bytes (the server reads records in pieces, and handshake messages
/// that span records).
#[test]
fn a_client_that_sends_a_byte_at_a_time_is_served() {
    let tls = TlsSite::start("", "");
    tls.site.write("big.txt", &vec![b'x'; 100_000]);
    for version in [&rustls::version::TLS13, &rustls::version::TLS12] {
        let mut client = client(&tls, version, Some(64));
        client
            .writer()
            .write_all(b"GET /big.txt HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
            .unwrap();
        let mut tcp = TcpStream::connect(tls.https).unwrap();
        tcp.set_nodelay(true).unwrap();
        tcp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut received = Vec::new();
        loop {
            // Everything the client has to say, one byte per write.
            let mut wire = Vec::new();
            while client.wants_write() {
                client.write_tls(&mut wire).unwrap();
            }
            for byte in &wire {
                tcp.write_all(std::slice::from_ref(byte)).unwrap();
            }
            let mut chunk = [0u8; 16 * 1024];
            let n = tcp.read(&mut chunk).unwrap();
            if n == 0 {
                break;
            }
            let mut rest = &chunk[..n];
            let mut closed = false;
            while !rest.is_empty() {
                client.read_tls(&mut rest).unwrap();
                let state = client.process_new_packets().unwrap();
                let mut plain = vec![0; state.plaintext_bytes_to_read()];
                client.reader().read_exact(&mut plain).unwrap();
                received.extend_from_slice(&plain);
                closed |= state.peer_has_closed();
            }
            if closed {
                break;
            }
        }
        let text = String::from_utf8_lossy(&received);
        assert!(
            text.starts_with("HTTP/1.1 200 OK\r\n"),
            "{version:?}: {text:.200}"
        );
        assert!(
            received.ends_with(&vec![b'x'; 100_000]),
            "{version:?}: {} bytes",
            received.len()
        );
    }
}

/// 1,000 idle keep-alive TLS connections, each answered once: what each adds to the
/// server's RSS is rustls' state (its keys, about 4 KiB with the task and socket), not
/// a record buffer or a task with room for an HTTP/2 connection (that was 14 KiB).
#[test]
fn idle_tls_connections_hold_rustls_state_and_no_buffer() {
    let tls = TlsSite::start("", "");
    let base = tls.server.rss_kib();
    let mut held = Vec::new();
    for _ in 0..1000 {
        let mut client = client(&tls, &rustls::version::TLS13, None);
        let mut tcp = TcpStream::connect(tls.https).unwrap();
        tcp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut stream = rustls::Stream::new(&mut client, &mut tcp);
        stream
            .write_all(b"GET /hello.txt HTTP/1.1\r\nHost: localhost\r\n\r\n")
            .unwrap();
        let mut got = Vec::new();
        let mut chunk = [0u8; 1024];
        while !got.ends_with(b"hello world\n") {
            let n = stream.read(&mut chunk).unwrap();
            assert!(n > 0, "closed: {}", String::from_utf8_lossy(&got));
            got.extend_from_slice(&chunk[..n]);
        }
        held.push((client, tcp));
    }
    let grew = tls.server.rss_kib().saturating_sub(base);
    let each = grew * 1024 / held.len() as u64;
    eprintln!(
        "{} idle TLS connections: RSS +{grew} KiB ({each} bytes each)",
        held.len()
    );
    assert!(each <= 8 * 1024, "{each} bytes per idle TLS connection");
}

/// The first part of a handshake message, then an alert record in its middle: rustls
/// refuses the interleaving, and the connection sends its alert and closes. It must not
/// panic (rustls holds the message's first part in bytes the connection keeps: asked
/// again with an empty buffer, it indexed out of bounds), which would leave the
/// connection's slot taken: more of them than slots, and a good client waited for the
/// head timeout.
#[test]
fn a_record_inside_a_split_handshake_message_is_refused_without_a_panic() {
    let tls = TlsSite::start("max_connections = 8", "");
    for _ in 0..12 {
        let mut tcp = TcpStream::connect(tls.https).unwrap();
        tcp.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        tcp.write_all(&[0x16, 3, 1, 0, 2, 1, 0]).unwrap();
        std::thread::sleep(Duration::from_millis(20));
        tcp.write_all(&[0x15, 3, 1, 0, 2, 1, 0]).unwrap();
        let mut answer = Vec::new();
        let _ = tcp.read_to_end(&mut answer);
    }
    let started = std::time::Instant::now();
    let out = tls.curl("/hello.txt", &["--max-time", "5"]);
    assert_eq!(
        out.stdout,
        b"hello world\n",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    assert!(!stderr_has(&tls.server, "panicked"), "the server panicked");
}
