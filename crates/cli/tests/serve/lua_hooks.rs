//! Lua hooks outside a request's phases, through the real binary: an upstream's
//! `balancer_script` (`balance(r, peers)`), against origins on loopback, and `[tls]
//! certificate_script` (`certificate(sni)`), with curl and `openssl s_client`.

use std::collections::HashMap;

use crate::harness::{check_config_output, eventually, stderr_has, Server, Site};
use crate::upstreams::{get, origins, quoted, Origin};

/// Pins the `user` cookie's value to a peer (alice to the second, bob to the third);
/// `/by-address` takes the peer whose address the `X-Want` header names, when it is up;
/// `/range`, `/string` and `/error` answer badly; anything else is left to `balance`.
const BALANCER: &str = r#"
local pinned = { alice = 2, bob = 3 }
return {
  balance = function(r, peers)
    local path = r:path()
    if path == "/pin" then
      local user = r:cookie("user")
      return user and pinned[user]
    elseif path == "/by-address" then
      for i, peer in ipairs(peers) do
        if peer.address == r:header("x-want") and peer.state == "up"
          and peer.weight == 1 and not peer.tried then
          return i
        end
      end
    elseif path == "/range" then
      return #peers + 1
    elseif path == "/string" then
      return "two"
    elseif path == "/error" then
      error("the balancer broke")
    end
    return nil
  end,
}
"#;

fn balanced(o: &[Origin]) -> (Site, Server) {
    let site = Site::new();
    let script = site.dir.path().join("balancer.lua");
    std::fs::write(&script, BALANCER).unwrap();
    let server = site.serve_with(&format!(
        "[[upstream]]\naddresses = [{}]\nbalancer_script = \"{}\"\n\
         [[route]]\nprefix = \"/\"\nupstream = \"origin\"\n",
        quoted(o),
        script.display()
    ));
    (site, server)
}

/// The answering origin's name for each of `n` requests to `path` with these fields.
fn spread(server: &Server, path: &str, fields: &str, n: usize) -> HashMap<String, usize> {
    let mut counts = HashMap::new();
    for _ in 0..n {
        let mut s = server.connect();
        std::io::Write::write_all(
            &mut s,
            format!("GET {path} HTTP/1.1\r\nHost: test\r\n{fields}Connection: close\r\n\r\n")
                .as_bytes(),
        )
        .unwrap();
        let r = crate::harness::read_response(&mut s, false);
        assert_eq!(r.status, 200, "{path}");
        *counts
            .entry(String::from_utf8(r.body).unwrap())
            .or_insert(0) += 1;
    }
    counts
}

fn only(name: &str, n: usize) -> HashMap<String, usize> {
    HashMap::from([(name.to_string(), n)])
}

#[test]
fn a_balancer_script_pins_a_cookie_to_a_peer() {
    let o = origins(&["a", "b", "c"]);
    let (_site, server) = balanced(&o);
    assert_eq!(
        spread(&server, "/pin", "Cookie: user=alice\r\n", 9),
        only("b", 9)
    );
    let cookies = "Cookie: theme=dark; user=bob\r\n";
    assert_eq!(spread(&server, "/pin", cookies, 9), only("c", 9));
    // The peers' table: address, state, weight, tried.
    let want = format!("X-Want: {}\r\n", o[0].addr);
    assert_eq!(spread(&server, "/by-address", &want, 6), only("a", 6));
}

#[test]
fn a_reload_loads_the_balancer_script_anew() {
    let o = origins(&["a", "b", "c"]);
    let (site, server) = balanced(&o);
    let alice = "Cookie: user=alice\r\n";
    assert_eq!(spread(&server, "/pin", alice, 3), only("b", 3));
    let script = site.dir.path().join("balancer.lua");
    let moved = BALANCER.replace("alice = 2", "alice = 1");
    std::fs::write(&script, moved).unwrap();
    server.signal(libc::SIGHUP);
    eventually("the reload", || {
        stderr_has(&server, "configuration reloaded") && stderr_has(&server, "generation=2")
    });
    assert_eq!(spread(&server, "/pin", alice, 3), only("a", 3));
}

#[test]
fn a_balancer_script_returning_nil_leaves_the_choice_to_balance() {
    let o = origins(&["a", "b", "c"]);
    let (_site, server) = balanced(&o);
    // No cookie: nil, and round robin spreads the requests evenly.
    let counts = spread(&server, "/pin", "", 9);
    assert_eq!(
        counts,
        HashMap::from([("a".into(), 3), ("b".into(), 3), ("c".into(), 3)])
    );
    let mut conn = None;
    assert_eq!(get(&server, &mut conn, "/other").0, 200);
}

#[test]
fn a_bad_answer_from_a_balancer_script_is_logged_and_falls_back() {
    let o = origins(&["a", "b", "c"]);
    let (_site, server) = balanced(&o);
    // An index past the peers, and a string: logged, and round robin chooses.
    let counts = spread(&server, "/range", "", 6);
    assert_eq!(
        counts,
        HashMap::from([("a".into(), 2), ("b".into(), 2), ("c".into(), 2)])
    );
    eventually("the bad index is logged", || {
        stderr_has(&server, "balance returned neither a peer's index")
            && stderr_has(&server, "returned=4")
    });
    assert_eq!(spread(&server, "/string", "", 3).values().sum::<usize>(), 3);
    eventually("the string is logged", || {
        stderr_has(&server, "returned=\"two\"")
    });
}

#[test]
fn a_balancer_script_that_fails_is_logged_and_falls_back() {
    let o = origins(&["a", "b", "c"]);
    let (_site, server) = balanced(&o);
    let counts = spread(&server, "/error", "", 6);
    assert_eq!(
        counts,
        HashMap::from([("a".into(), 2), ("b".into(), 2), ("c".into(), 2)])
    );
    eventually("the failure is logged", || {
        stderr_has(&server, "balance failed; the configured choice is made")
            && stderr_has(&server, "the balancer broke")
    });
    // The worker goes on, and the hook with it.
    assert_eq!(
        spread(&server, "/pin", "Cookie: user=alice\r\n", 3),
        only("b", 3)
    );
}

#[test]
fn check_config_names_a_balancer_script_that_is_missing_or_broken() {
    let site = Site::new();
    let dir = site.dir.path();
    let config = dir.join("tessera.toml");
    std::fs::write(
        dir.join("no_balance.lua"),
        "return { pick = function() end }\n",
    )
    .unwrap();
    std::fs::write(dir.join("syntax.lua"), "return {\n").unwrap();
    // A module that never returns is stopped by the time limit, as a call is.
    std::fs::write(dir.join("loop.lua"), "while true do end\n").unwrap();
    for (script, want) in [
        ("missing.lua", "cannot read script"),
        ("no_balance.lua", "has no `balance` function"),
        ("syntax.lua", "cannot load script"),
        ("loop.lua", "script ran longer than its time limit"),
    ] {
        let toml = format!(
            "[[upstream]]\naddresses = [\"127.0.0.1:9\"]\nbalancer_script = \"{}\"\n",
            dir.join(script).display()
        );
        std::fs::write(&config, toml).unwrap();
        let (code, stderr) = check_config_output(&config);
        assert_eq!(code, Some(1), "{stderr}");
        let key = "tessera.toml:3: invalid configuration: `upstream[0].balancer_script`: ";
        assert!(stderr.contains(key), "{stderr}");
        assert!(stderr.contains(want), "{stderr} lacks {want}");
    }
}

/// `[tls] certificate_script`: a name no certificate covers gets one loaded from PEM (a
/// leaf signed by a CA made here); another is answered with a host's certificate by name;
/// `nil`, an error and a PEM that does not parse leave the choice to the server.
const CERTIFICATES: &str = r#"
local chain = [==[CHAIN]==]
local key = [==[KEY]==]
local calls = 0
return {
  certificate = function(sni)
    calls = calls + 1
    if sni == "dynamic.test" then
      return chain, key
    elseif sni == "alias.test" then
      return "Named.test"
    elseif sni == "broken.test" then
      error("the certificate hook broke")
    elseif sni == "badpem.test" then
      return "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n", key
    end
    return nil
  end,
}
"#;

#[test]
fn a_certificate_script_serves_a_certificate_from_pem_for_an_unknown_name() {
    use crate::tls::{curl, https_addr, make_cert, s_client};
    let site = Site::new();
    let dir = site.dir.path();
    let ca = crate::upstream_tls::Ca::new(dir, "test-ca");
    let (chain, key) = ca.sign(dir, "dynamic", &["dynamic.test"]);
    let script = CERTIFICATES
        .replace("CHAIN", &std::fs::read_to_string(chain).unwrap())
        .replace("KEY", &std::fs::read_to_string(key).unwrap());
    std::fs::write(dir.join("certificates.lua"), script).unwrap();
    let default = make_cert(dir, "localhost", &["localhost"]);
    let named = make_cert(dir, "named", &["named.test"]);
    let server = site.serve_with(&format!(
        "tls_listen = [\"127.0.0.1:0\"]\n[tls]\ncertificate = {:?}\nkey = {:?}\n\
         certificate_script = {:?}\n\
         [[host]]\nnames = [\"named.test\"]\n[host.tls]\ncertificate = {:?}\nkey = {:?}\n",
        default.cert,
        default.key,
        dir.join("certificates.lua"),
        named.cert,
        named.key,
    ));
    let https = https_addr(&server);
    // Verified against the CA, for the name asked: twice (the second from the cache).
    for _ in 0..2 {
        let out = curl(https, &ca.pem, "dynamic.test", "/hello.txt", &[]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(out.stdout, b"hello world\n");
    }
    let subject = |name: &str| {
        let (out, err) = s_client(https, &["-servername", name], b"");
        let text = String::from_utf8_lossy(&out).into_owned();
        let line = text.lines().find_map(|l| l.strip_prefix("subject="));
        line.unwrap_or_else(|| panic!("no subject in {text}{err}"))
            .to_string()
    };
    assert!(subject("dynamic.test").contains("dynamic.test"));
    // By name: the certificate loaded for the host `named.test` (a name is matched as
    // SNI is, whatever its case).
    assert!(subject("alias.test").contains("named.test"));
    // nil, an error, a PEM that does not parse: the default certificate, and the
    // handshake goes on.
    for name in ["unknown.test", "broken.test", "badpem.test"] {
        assert!(subject(name).contains("localhost"), "{name}");
    }
    eventually("the failures are logged", || {
        stderr_has(&server, "certificate failed; the configured choice is made")
            && stderr_has(&server, "the certificate hook broke")
            && stderr_has(
                &server,
                "certificate_script answered a certificate that cannot be used",
            )
    });
}

#[test]
fn check_config_names_a_certificate_script_that_is_broken_or_misplaced() {
    let site = Site::new();
    let dir = site.dir.path();
    let config = dir.join("tessera.toml");
    std::fs::write(dir.join("none.lua"), "return {}\n").unwrap();
    let script = dir.join("none.lua");
    for (toml, want) in [
        (
            format!("[tls]\ncertificate_script = {script:?}\n"),
            "tessera.toml:2: invalid configuration: `tls.certificate_script`: cannot load \
             script",
        ),
        (
            format!(
                "[tls]\ncertificate_script = {:?}\n",
                dir.join("missing.lua")
            ),
            "tessera.toml:2: invalid configuration: `tls.certificate_script`: cannot read \
             script",
        ),
        (
            format!(
                "[[host]]\nnames = [\"a.test\"]\n[host.tls]\ncertificate_script = {script:?}\n"
            ),
            "tessera.toml:4: host[0].tls.certificate_script: only `[tls]` has it",
        ),
    ] {
        std::fs::write(&config, toml).unwrap();
        let (code, stderr) = check_config_output(&config);
        assert_eq!(code, Some(1), "{stderr}");
        assert!(stderr.contains(want), "{stderr} lacks {want}");
    }
}
