//! `[acme]` names that a reload adds or removes (docs/tls.md "Automatic certificates"):
//! a new host's name is served from the storage or ordered, without a restart.

use std::net::SocketAddr;

use crate::acme::{free_port, serve, verified, Pebble};
use crate::harness::{eventually, stderr_has};
use crate::tls::curl;

#[test]
fn a_name_a_reload_adds_gets_its_certificate_without_a_restart() {
    let ports = (free_port(), free_port());
    let pebble = Pebble::start(ports.0, ports.1);
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("acme");
    let server = serve(&pebble, ports, &state, &["one.test"], "[\"http-01\"]");
    let root = pebble.issuing_root();
    verified(&server, ports.1, &root, "one.test");
    assert_eq!(pebble.orders(), 1);
    // A host added to the file, then SIGHUP.
    let site = dir.path().join("two.test");
    std::fs::create_dir_all(&site).unwrap();
    std::fs::write(site.join("index.html"), "site two.test\n").unwrap();
    let config = dir.path().join("tessera.toml");
    let before = std::fs::read_to_string(&config).unwrap();
    let mut toml = before.clone();
    toml.push_str(&format!(
        "\n[[host]]\nnames = [\"two.test\"]\nroot = \"{}\"\n",
        site.display()
    ));
    std::fs::write(&config, &toml).unwrap();
    server.signal(libc::SIGHUP);
    eventually("the reload", || {
        stderr_has(&server, "[acme] names changed by the reload")
    });
    verified(&server, ports.1, &root, "two.test");
    verified(&server, ports.1, &root, "one.test");
    assert_eq!(pebble.orders(), 2);
    assert!(!stderr_has(&server, "`acme` changed"));
    // A reload that removes it: its certificate is no longer served (nor renewed).
    std::fs::write(&config, &before).unwrap();
    server.signal(libc::SIGHUP);
    eventually("the second reload", || {
        stderr_has(&server, "no longer a name of [acme]")
    });
    let https: SocketAddr = format!("127.0.0.1:{}", ports.1).parse().unwrap();
    assert!(!curl(https, &root, "two.test", "/", &[]).status.success());
    verified(&server, ports.1, &root, "one.test");
    assert_eq!(pebble.orders(), 2);
}
