//! DNS-01 through `[acme] dns_hook` against Pebble, with pebble-challtestsrv as the DNS
//! server Pebble asks: the hook is a shell script that publishes the TXT record through
//! challtestsrv's management API (`/set-txt`, `/clear-txt`), as a real hook would
//! through a DNS provider's. A wildcard host gets its certificate this way.

use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt;

use crate::acme::{free_port, start, Pebble};
use crate::harness::stderr_has;
use crate::tls::curl;

#[test]
fn a_wildcard_host_gets_its_certificate_by_dns_01_through_the_hook() {
    let ports = (free_port(), free_port());
    let pebble = Pebble::start(ports.0, ports.1);
    let dir = tempfile::tempdir().unwrap();
    let calls = dir.path().join("calls.log");
    // HOOK set|clear _acme-challenge.NAME VALUE
    let hook = dir.path().join("dns-hook.sh");
    std::fs::write(
        &hook,
        format!(
            "#!/bin/sh\nset -e\necho \"$1 $2\" >> {calls}\n\
             case \"$1\" in\n\
             set) curl -sS --fail -d \"{{\\\"host\\\":\\\"$2.\\\",\\\"value\\\":\\\"$3\\\"}}\" http://{dns}/set-txt ;;\n\
             clear) curl -sS --fail -d \"{{\\\"host\\\":\\\"$2.\\\"}}\" http://{dns}/clear-txt ;;\n\
             esac\n",
            calls = calls.display(),
            dns = pebble.dns_management,
        ),
    )
    .unwrap();
    std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755)).unwrap();
    let root = dir.path().join("wild");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::write(root.join("index.html"), "wildcard\n").unwrap();
    let toml = format!(
        "listen = [\"127.0.0.1:{}\"]\ntls_listen = [\"127.0.0.1:{}\"]\nworkers = 1\n\n\
         [acme]\ndirectory = \"{}\"\nca_root = \"{}\"\nstate_dir = \"{}\"\n\
         challenges = [\"http-01\", \"dns-01\"]\ndns_hook = \"{}\"\n\n\
         [[host]]\nnames = [\"*.wild.test\"]\nroot = \"{}\"\n",
        ports.0,
        ports.1,
        pebble.directory,
        pebble.ca().display(),
        dir.path().join("acme").display(),
        hook.display(),
        root.display(),
    );
    let server = start(dir.path(), &toml);
    let issuing = pebble.issuing_root();
    let https: SocketAddr = format!("127.0.0.1:{}", ports.1).parse().unwrap();
    // One certificate for *.wild.test serves every name under it.
    crate::harness::eventually("the wildcard certificate", || {
        curl(https, &issuing, "a.wild.test", "/", &[])
            .status
            .success()
    });
    for name in ["a.wild.test", "b.wild.test"] {
        let out = curl(https, &issuing, name, "/", &[]);
        assert!(
            out.status.success(),
            "{name}: {}\n{:?}",
            String::from_utf8_lossy(&out.stderr),
            server.stderr.lock().unwrap()
        );
        assert_eq!(out.stdout, b"wildcard\n");
    }
    assert_eq!(pebble.orders(), 1);
    assert!(stderr_has(&server, "challenge=\"dns-01\""));
    // The hook published the record, then withdrew it.
    crate::harness::eventually("the hook's clear", || {
        std::fs::read_to_string(&calls).is_ok_and(|c| c.contains("clear"))
    });
    assert_eq!(
        std::fs::read_to_string(&calls).unwrap(),
        "set _acme-challenge.wild.test\nclear _acme-challenge.wild.test\n"
    );
}

#[test]
fn dns_01_needs_its_hook_and_a_wildcard_needs_dns_01() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("check.toml");
    let wildcard = "\n[[host]]\nnames = [\"*.a.test\"]\n";
    std::fs::write(
        &config,
        format!("[acme]\nstate_dir = \"/tmp/s\"\n{wildcard}"),
    )
    .unwrap();
    let (code, stderr) = crate::harness::check_config_output(&config);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("acme: no `[[host]]` name to get a certificate for"),
        "{stderr}"
    );
    std::fs::write(
        &config,
        format!("[acme]\nstate_dir = \"/tmp/s\"\nchallenges = [\"dns-01\"]\ndns_hook = \"/bin/true\"\n{wildcard}"),
    )
    .unwrap();
    let (code, stderr) = crate::harness::check_config_output(&config);
    assert_eq!(code, Some(0), "{stderr}");
    std::fs::write(
        &config,
        format!("[acme]\nstate_dir = \"/tmp/s\"\ndns_hook = \"/bin/true\"\n{wildcard}"),
    )
    .unwrap();
    let (code, stderr) = crate::harness::check_config_output(&config);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("acme.dns_hook: goes with \"dns-01\" in `challenges`"),
        "{stderr}"
    );
}
