//! `[acme]` against a Pebble that fails at random (docs/tls.md "Automatic
//! certificates", Renewal): tessera tries again and ends with valid certificates.

use crate::acme::{free_port, metrics, serve_with, verified, Pebble};

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
