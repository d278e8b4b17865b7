//! `[acme]` against a Pebble that fails at random (docs/tls.md "Automatic
//! certificates", Renewal): tessera tries again and ends with valid certificates.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use crate::acme::{free_port, metrics, serve_with, verified, Pebble};
use crate::harness::pump;

#[test]
fn with_half_the_nonces_rejected_every_name_ends_with_a_valid_certificate() {
    let ports = (free_port(), free_port());
    // Pebble refuses half of the nonces it is sent (a `badNonce` problem), the random
    // failure a CA behind a balancer shows.
    let pebble = Pebble::start_env(ports.0, ports.1, &[("PEBBLE_WFE_NONCEREJECT", "50")]);
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("acme");
    let names = ["r1.test", "r2.test", "r3.test"];
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
    assert_eq!(orders, ["tessera_acme_orders_total{result=\"issued\"} 3"]);
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
