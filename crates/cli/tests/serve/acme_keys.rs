//! `[acme] key_type` (docs/tls.md "Automatic certificates", Keys and files): RSA 2048
//! keys for the certificates when asked, against Pebble.

use std::process::Command;

use crate::acme::{free_port, serve, verified, Pebble};

#[test]
fn key_type_rsa2048_gets_a_certificate_with_an_rsa_key() {
    let ports = (free_port(), free_port());
    let pebble = Pebble::start(ports.0, ports.1);
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("acme");
    let challenges = "[\"http-01\"]\nkey_type = \"rsa2048\"";
    let server = serve(&pebble, ports, &state, &["rsa.test"], challenges);
    verified(&server, ports.1, &pebble.issuing_root(), "rsa.test");
    let ca = state.join(
        pebble
            .directory
            .trim_start_matches("https://")
            .replace([':', '/'], "_"),
    );
    let out = Command::new("openssl")
        .args(["x509", "-noout", "-text", "-in"])
        .arg(ca.join("rsa.test.crt"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("rsaEncryption"), "{text}");
    assert!(text.contains("Public-Key: (2048 bit)"), "{text}");
    assert_eq!(pebble.orders(), 1);
}

#[test]
fn an_unknown_key_type_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("check.toml");
    std::fs::write(
        &config,
        "[acme]\nstate_dir = \"/tmp/s\"\nkey_type = \"rsa4096\"\n\n[[host]]\nnames = [\"a.test\"]\n",
    )
    .unwrap();
    let (code, stderr) = crate::harness::check_config_output(&config);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains(
            "check.toml:3: acme.key_type: must be \"ecdsa-p256\" or \"rsa2048\", not \"rsa4096\""
        ),
        "{stderr}"
    );
}
