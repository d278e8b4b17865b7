//! Virtual hosts (`[[host]]`): each host's own files, chosen by the request's host.

use std::io::Write;

use crate::harness::*;

/// Three sites: the top-level root, `a.test` (and `www.a.test`) with its own root, and
/// `*.b.test` with another; each has an `who.txt` naming itself.
fn three_sites(extra: &str) -> (Site, Server) {
    let site = Site::new();
    site.write("who.txt", b"top-level\n");
    let a = site.dir.path().join("a");
    let b = site.dir.path().join("b");
    for (dir, who) in [(&a, "a\n"), (&b, "b\n")] {
        std::fs::create_dir_all(dir).unwrap();
        std::fs::write(dir.join("who.txt"), who).unwrap();
    }
    std::fs::write(b.join("index.html"), b"b home\n").unwrap();
    let server = site.serve_with(&format!(
        "[[host]]\nnames = [\"a.test\", \"www.a.test\"]\nroot = \"{}\"\n\n\
         [[host]]\nnames = [\"*.b.test\"]\nroot = \"{}\"\n{extra}\
         [[host.cache_control]]\nprefix = \"/\"\nvalue = \"max-age=60\"\n",
        a.display(),
        b.display()
    ));
    (site, server)
}

fn get_host(server: &Server, target: &str, host: &str) -> Response {
    let mut stream = server.connect();
    write!(
        stream,
        "GET {target} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    read_response(&mut stream, false)
}

fn who(server: &Server, target: &str, host: &str) -> String {
    let r = get_host(server, target, host);
    assert_eq!(r.status, 200, "{target} on {host}");
    String::from_utf8(r.body).unwrap().trim().to_string()
}

#[test]
fn each_host_gets_its_own_files() {
    let (_site, server) = three_sites("");
    assert_eq!(who(&server, "/who.txt", "a.test"), "a");
    assert_eq!(who(&server, "/who.txt", "www.a.test"), "a");
    assert_eq!(who(&server, "/who.txt", "x.b.test"), "b");
    assert_eq!(who(&server, "/who.txt", "other.test"), "top-level");
    // A host's own settings: b's Cache-Control, none elsewhere.
    let b = get_host(&server, "/who.txt", "x.b.test");
    assert_eq!(b.header("cache-control"), Some("max-age=60"));
    assert_eq!(
        get_host(&server, "/who.txt", "a.test").header("cache-control"),
        None
    );
    // A file only one root has is only there.
    assert_eq!(who(&server, "/", "y.b.test"), "b home");
    assert_eq!(get_host(&server, "/", "a.test").status, 403);
}

#[test]
fn wildcards_match_exactly_one_more_label() {
    let (_site, server) = three_sites("");
    assert_eq!(who(&server, "/who.txt", "b.test"), "top-level");
    assert_eq!(who(&server, "/who.txt", "a.x.b.test"), "top-level");
    assert_eq!(who(&server, "/who.txt", "a.test.evil"), "top-level");
}

#[test]
fn hosts_match_without_case_port_or_final_dot() {
    let (_site, server) = three_sites("");
    assert_eq!(who(&server, "/who.txt", "A.TEST"), "a");
    assert_eq!(who(&server, "/who.txt", "a.test:8080"), "a");
    assert_eq!(who(&server, "/who.txt", "a.test."), "a");
    assert_eq!(who(&server, "/who.txt", "X.B.Test:1"), "b");
}

#[test]
fn an_absolute_form_target_names_the_host() {
    let (_site, server) = three_sites("");
    // RFC 9112 section 3.2.2: the target's authority wins over a conflicting Host.
    assert_eq!(who(&server, "http://a.test/who.txt", "x.b.test"), "a");
    assert_eq!(who(&server, "http://z.b.test:80/who.txt", "a.test"), "b");
}

#[test]
fn an_unknown_host_goes_to_the_default_host() {
    let (_site, server) = three_sites("default = true\n");
    // The last [[host]] (*.b.test) is marked default.
    assert_eq!(who(&server, "/who.txt", "other.test"), "b");
    assert_eq!(who(&server, "/who.txt", "a.test"), "a");
    // HTTP/1.0 without Host: the default host too.
    let raw = server.exchange(b"GET /who.txt HTTP/1.0\r\n\r\n");
    assert!(
        raw.ends_with(b"\r\n\r\nb\n"),
        "{}",
        String::from_utf8_lossy(&raw)
    );
}

#[test]
fn bad_host_tables_are_refused_naming_the_key() {
    let site = Site::new();
    let refused = |toml: &str, expected: &str| {
        let config = site.dir.path().join("bad.toml");
        std::fs::write(&config, toml).unwrap();
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_tessera"))
            .args(["serve", "--listen", "127.0.0.1:0", "--root"])
            .arg(site.root())
            .arg("--config")
            .arg(&config)
            .output()
            .unwrap();
        assert!(!out.status.success(), "{toml} was accepted");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(expected), "{toml}: {stderr}");
    };
    refused(
        "[[host]]\nnames = [\"a.test\"]\n[[host]]\nnames = [\"A.test\"]\n",
        "host[1].names",
    );
    refused("[[host]]\nnames = []\n", "host[0].names");
    refused("[[host]]\nnames = [\"a.*.test\"]\n", "host[0].names");
    refused("[[host]]\nnames = [\"a b\"]\n", "host[0].names");
    refused(
        "[[host]]\nnames = [\"a.test\"]\ndefault = true\n[[host]]\nnames = [\"b.test\"]\ndefault = true\n",
        "host[1].default",
    );
    refused(
        "[[host]]\nnames = [\"a.test\"]\nroot = \"/nonexistent/tessera-root\"\n",
        "/nonexistent/tessera-root",
    );
    refused(
        "[[host]]\nnames = [\"a.test\"]\nindex = \"a/b\"\n",
        "host[0].index",
    );
}

/// An origin that answers every request with the Host it was sent, cacheable for a
/// minute; returns its address and a count of the requests it answered.
fn host_echo_origin() -> (
    std::net::SocketAddr,
    std::sync::Arc<std::sync::atomic::AtomicUsize>,
) {
    use std::io::BufReader;
    use std::sync::atomic::{AtomicUsize, Ordering};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let hits = std::sync::Arc::new(AtomicUsize::new(0));
    let counter = hits.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { return };
            let counter = counter.clone();
            std::thread::spawn(move || {
                let mut writer = stream.try_clone().unwrap();
                let mut reader = BufReader::new(stream);
                while let Some((_, fields)) = read_request_head(&mut reader) {
                    counter.fetch_add(1, Ordering::SeqCst);
                    let host = fields
                        .iter()
                        .find_map(|f| f.strip_prefix("host: ").or(f.strip_prefix("Host: ")))
                        .unwrap_or("none")
                        .to_string();
                    let reply = format!(
                        "HTTP/1.1 200 OK\r\nCache-Control: max-age=60\r\nContent-Length: {}\r\n\r\n{host}",
                        host.len()
                    );
                    if writer.write_all(reply.as_bytes()).is_err() {
                        return;
                    }
                }
            });
        }
    });
    (addr, hits)
}

#[test]
fn each_host_has_its_own_routes_and_scripts() {
    let (origin, _) = host_echo_origin();
    let site = Site::new();
    site.write("who.txt", b"top-level\n");
    let script = site.dir.path().join("b.lua");
    std::fs::write(
        &script,
        "local M = {}\nfunction M.content(r) r:say(\"script of b\") end\nreturn M\n",
    )
    .unwrap();
    let server = site.serve_with(&format!(
        "[[upstream]]\nname = \"origin\"\naddresses = [\"{origin}\"]\n\n\
         [[route]]\nprefix = \"/top\"\nupstream = \"origin\"\n\n\
         [[host]]\nnames = [\"a.test\"]\n\
         [[host.route]]\nprefix = \"/api\"\nupstream = \"origin\"\n\n\
         [[host]]\nnames = [\"b.test\"]\n\
         [[host.script]]\nprefix = \"/hello\"\npath = \"{}\"\n",
        script.display()
    ));
    // a.test's route proxies; the other hosts do not have it.
    assert_eq!(who(&server, "/api/x", "a.test"), "a.test");
    assert_eq!(get_host(&server, "/api/x", "b.test").status, 404);
    assert_eq!(get_host(&server, "/api/x", "other.test").status, 404);
    // b.test's script answers on b.test only.
    assert_eq!(who(&server, "/hello", "b.test"), "script of b");
    assert_eq!(get_host(&server, "/hello", "a.test").status, 404);
    // The top-level route belongs to the top-level (default) host.
    assert_eq!(who(&server, "/top/x", "other.test"), "other.test");
    assert_eq!(get_host(&server, "/top/x", "a.test").status, 404);
    // Static files still answer what no route takes.
    assert_eq!(who(&server, "/who.txt", "a.test"), "top-level");
}

#[test]
fn the_cache_does_not_mix_two_hosts_responses() {
    let (origin, hits) = host_echo_origin();
    let site = Site::new();
    let server = site.serve_with(&format!(
        "[[upstream]]\nname = \"origin\"\naddresses = [\"{origin}\"]\n\n\
         [[host]]\nnames = [\"a.test\", \"b.test\"]\n\
         [[host.route]]\nprefix = \"/\"\nupstream = \"origin\"\n"
    ));
    for _ in 0..3 {
        assert_eq!(who(&server, "/page", "a.test"), "a.test");
        assert_eq!(who(&server, "/page", "b.test"), "b.test");
    }
    // One fill per host, then hits.
    assert_eq!(hits.load(std::sync::atomic::Ordering::SeqCst), 2);
}

#[test]
fn a_host_writes_its_own_access_log() {
    let site = Site::new();
    let main_log = site.dir.path().join("main.log");
    let a_log = site.dir.path().join("a.log");
    let server = site.serve_with(&format!(
        "access_log = \"{}\"\naccess_log_format = \"%{{Host}}i %U %s\"\n\n\
         [[host]]\nnames = [\"a.test\"]\naccess_log = \"{}\"\n\n\
         [[host]]\nnames = [\"b.test\"]\n",
        main_log.display(),
        a_log.display()
    ));
    assert_eq!(get_host(&server, "/hello.txt", "a.test").status, 200);
    assert_eq!(get_host(&server, "/missing", "a.test").status, 404);
    assert_eq!(get_host(&server, "/hello.txt", "b.test").status, 200);
    assert_eq!(get_host(&server, "/hello.txt", "other.test").status, 200);
    // Lines reach the files within the writer's flush interval; a graceful stop flushes.
    server.signal(libc::SIGTERM);
    let mut server = server;
    assert_eq!(server.child.wait().unwrap().code(), Some(0));
    let read = |p: &std::path::Path| std::fs::read_to_string(p).unwrap();
    assert_eq!(read(&a_log), "a.test /hello.txt 200\na.test /missing 404\n");
    // b.test has no log of its own: the top-level one takes its lines.
    assert_eq!(
        read(&main_log),
        "b.test /hello.txt 200\nother.test /hello.txt 200\n"
    );
}

#[test]
fn sigusr1_reopens_every_hosts_log() {
    let site = Site::new();
    let main_log = site.dir.path().join("main.log");
    let a_log = site.dir.path().join("a.log");
    let server = site.serve_with(&format!(
        "access_log = \"{}\"\naccess_log_format = \"%{{Host}}i %U\"\n\n\
         [[host]]\nnames = [\"a.test\"]\naccess_log = \"{}\"\n",
        main_log.display(),
        a_log.display()
    ));
    let wait_for = |path: &std::path::Path, text: &str| {
        let started = std::time::Instant::now();
        while std::fs::read_to_string(path).unwrap_or_default() != text {
            assert!(
                started.elapsed() < std::time::Duration::from_secs(10),
                "{} never held {text:?}",
                path.display()
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    };
    get_host(&server, "/hello.txt", "a.test");
    get_host(&server, "/hello.txt", "b.test");
    wait_for(&a_log, "a.test /hello.txt\n");
    wait_for(&main_log, "b.test /hello.txt\n");
    // A rotator moves both files away, then signals once.
    std::fs::rename(&a_log, site.dir.path().join("a.log.1")).unwrap();
    std::fs::rename(&main_log, site.dir.path().join("main.log.1")).unwrap();
    server.signal(libc::SIGUSR1);
    std::thread::sleep(std::time::Duration::from_millis(700));
    get_host(&server, "/second", "a.test");
    get_host(&server, "/second", "b.test");
    wait_for(&a_log, "a.test /second\n");
    wait_for(&main_log, "b.test /second\n");
}
