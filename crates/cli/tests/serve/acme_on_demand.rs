//! On-demand certificates (`[acme] on_demand` with `ask`, docs/tls.md "Automatic
//! certificates") against Pebble: a name first seen in SNI gets a certificate on its
//! first handshake when the ask endpoint answers 200, and never causes an order when it
//! does not.

use std::io::{BufReader, Write};
use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::sync::{Arc, Mutex};

use crate::acme::{free_port, start, Pebble};
use crate::harness::{stderr_has, Server};
use crate::tls::curl;

/// An ask endpoint: `GET /allowed?domain=NAME` answers 200 for `allowed` names, 403
/// for the others; every name asked about is kept, in order.
fn ask_endpoint(allowed: &'static [&'static str]) -> (SocketAddr, Arc<Mutex<Vec<String>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let asked = Arc::new(Mutex::new(Vec::new()));
    let seen = asked.clone();
    crate::harness::thread_per_connection(listener, move |mut stream| {
        let reader = &mut BufReader::new(stream.try_clone().unwrap());
        let Some((target, _)) = crate::harness::read_request_head(reader) else {
            return;
        };
        let name = target
            .split_once("/allowed?domain=")
            .map(|(_, name)| name.to_string())
            .unwrap_or_default();
        let status = match allowed.contains(&name.as_str()) {
            true => "200 OK",
            false => "403 Forbidden",
        };
        seen.lock().unwrap().push(name);
        let _ = write!(
            stream,
            "HTTP/1.1 {status}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        );
    });
    (addr, asked)
}

/// A tessera with `on_demand` and `ask`, whose only hosts are wildcards: `*.test`
/// (which on-demand names fall under) and `*.internal.test`, which opts out with
/// `[host.tls] acme = false`.
fn serve(pebble: &Pebble, (http, https): (u16, u16), site: &Path, ask: SocketAddr) -> Server {
    let root = site.join("root");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::write(root.join("index.html"), "on demand\n").unwrap();
    let toml = format!(
        "listen = [\"127.0.0.1:{http}\"]\ntls_listen = [\"127.0.0.1:{https}\"]\nworkers = 1\n\n\
         [timeouts]\nhead = 30\n\n\
         [acme]\ndirectory = \"{}\"\nca_root = \"{}\"\nstate_dir = \"{}\"\n\
         challenges = [\"http-01\"]\non_demand = true\nask = \"http://{ask}/allowed\"\n\n\
         [[host]]\nnames = [\"*.test\"]\nroot = \"{}\"\n\n\
         [[host]]\nnames = [\"*.internal.test\"]\nroot = \"{}\"\n[host.tls]\nacme = false\n",
        pebble.directory,
        pebble.ca().display(),
        site.join("acme").display(),
        root.display(),
        root.display(),
    );
    start(site, &toml)
}

#[test]
fn a_name_the_ask_endpoint_allows_gets_a_certificate_on_its_first_handshake_and_a_refused_one_no_order(
) {
    let ports = (free_port(), free_port());
    let pebble = Pebble::start(ports.0, ports.1);
    let (ask, asked) = ask_endpoint(&["allowed.test", "long.test"]);
    let dir = tempfile::tempdir().unwrap();
    let server = serve(&pebble, ports, dir.path(), ask);
    crate::harness::eventually("the on-demand line", || {
        stderr_has(
            &server,
            "certificates on demand for names first seen in SNI",
        )
    });
    let root = pebble.issuing_root();
    let https: SocketAddr = format!("127.0.0.1:{}", ports.1).parse().unwrap();
    // The first handshake waits for the order, and is served with the new certificate.
    let out = curl(https, &root, "allowed.test", "/", &[]);
    assert!(
        out.status.success(),
        "{}\n{:?}",
        String::from_utf8_lossy(&out.stderr),
        server.stderr.lock().unwrap()
    );
    assert_eq!(out.stdout, b"on demand\n");
    assert_eq!(pebble.orders(), 1);
    assert_eq!(*asked.lock().unwrap(), ["allowed.test"]);
    // A name the endpoint refuses: no certificate (no default one either), no order.
    let out = curl(https, &root, "refused.test", "/", &[]);
    assert!(!out.status.success());
    crate::harness::eventually("the refusal in the log", || {
        stderr_has(&server, "the ask endpoint refuses it")
    });
    assert_eq!(*asked.lock().unwrap(), ["allowed.test", "refused.test"]);
    // Refused again: the refusal is remembered, the endpoint is not asked again.
    assert!(!curl(https, &root, "refused.test", "/", &[])
        .status
        .success());
    // A name under a host with `acme = false`: the endpoint is not even asked.
    assert!(!curl(https, &root, "x.internal.test", "/", &[])
        .status
        .success());
    // The allowed name again: its certificate, no new order, no new question.
    let out = curl(https, &root, "allowed.test", "/", &[]);
    assert!(out.status.success());
    assert_eq!(*asked.lock().unwrap(), ["allowed.test", "refused.test"]);
    assert_eq!(pebble.orders(), 1);
    drop(server);
    // Restarted with the same state_dir: the stored certificate is served (after the
    // endpoint allows the name again), without an order.
    let server = serve(&pebble, ports, dir.path(), ask);
    let out = curl(https, &root, "allowed.test", "/", &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stderr_has(&server, "its stored certificate served"));
    assert_eq!(pebble.orders(), 1);
    // A ClientHello longer than the server's first look at it (2560 bytes; here about
    // 3 KB, from a long ALPN list): the name is still read, and the handshake waits
    // for its order.
    let alpn: Vec<String> = (0..12)
        .map(|i| format!("{i}{}", "x".repeat(240)))
        .chain(["http/1.1".to_string()])
        .collect();
    let out = std::process::Command::new("openssl")
        .args([
            "s_client",
            "-connect",
            &https.to_string(),
            "-servername",
            "long.test",
        ])
        .args(["-alpn", &alpn.join(","), "-verify_hostname", "long.test"])
        .args(["-verify_return_error", "-CAfile"])
        .arg(&root)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("Verify return code: 0 (ok)"),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(pebble.orders(), 2);
}

#[test]
fn on_demand_without_an_ask_endpoint_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("check.toml");
    std::fs::write(
        &config,
        "[acme]\nstate_dir = \"/tmp/s\"\non_demand = true\n\n[[host]]\nnames = [\"*.a.test\"]\n",
    )
    .unwrap();
    let (code, stderr) = crate::harness::check_config_output(&config);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("check.toml:3: acme.on_demand: needs `ask`"),
        "{stderr}"
    );
    // With it, wildcard hosts alone are enough: their names come on demand.
    std::fs::write(
        &config,
        "[acme]\nstate_dir = \"/tmp/s\"\non_demand = true\nask = \"http://127.0.0.1:9/allowed\"\n\n\
         [[host]]\nnames = [\"*.a.test\"]\n",
    )
    .unwrap();
    let (code, stderr) = crate::harness::check_config_output(&config);
    assert_eq!(code, Some(0), "{stderr}");
    std::fs::write(
        &config,
        "[acme]\nstate_dir = \"/tmp/s\"\non_demand = true\nask = \"ftp://x/\"\n\n\
         [[host]]\nnames = [\"*.a.test\"]\n",
    )
    .unwrap();
    let (code, stderr) = crate::harness::check_config_output(&config);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("acme.ask: must be an http:// or https:// URL, not ftp://x/"),
        "{stderr}"
    );
}
