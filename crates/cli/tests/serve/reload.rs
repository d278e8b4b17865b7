//! SIGHUP: the whole configuration reloaded while traffic flows.

use std::io::{BufReader, Write};
use std::net::{SocketAddr, TcpStream};

use crate::harness::*;

/// Sends one keep-alive GET for `path` with `host` on `stream`.
fn get_on(stream: &mut TcpStream, path: &str, host: &str) -> Response {
    write!(stream, "GET {path} HTTP/1.1\r\nHost: {host}\r\n\r\n").unwrap();
    read_response(stream, false)
}

fn text(r: &Response) -> String {
    String::from_utf8_lossy(&r.body).into_owned()
}

/// The address in a `listeners added [ADDR]` log line.
pub(crate) fn added_listener(server: &Server) -> SocketAddr {
    let lines = server.stderr.lock().unwrap();
    let line = lines
        .iter()
        .find(|l| l.contains("listeners added ["))
        .expect("a listeners added line");
    let rest = &line[line.find("listeners added [").unwrap() + 17..];
    rest[..rest.find(']').unwrap()].parse().unwrap()
}

#[test]
fn sighup_applies_a_new_configuration_while_traffic_flows() {
    let site = Site::new();
    site.write("who.txt", b"top\n");
    let dir = site.dir.path();
    for (name, who) in [("a", "a\n"), ("a2", "a2\n"), ("b", "b\n")] {
        std::fs::create_dir_all(dir.join(name)).unwrap();
        std::fs::write(dir.join(name).join("who.txt"), who).unwrap();
    }
    std::fs::write(
        dir.join("v.lua"),
        "return { content = function(r) return 'v' end }",
    )
    .unwrap();
    std::fs::write(
        dir.join("gone.lua"),
        "return { content = function(r) return 'still here' end }",
    )
    .unwrap();
    let first = format!(
        "listen = [\"127.0.0.1:0\"]\nworkers = 2\nroot = \"{root}\"\n\n\
         [[host]]\nnames = [\"a.test\"]\nroot = \"{d}/a\"\n\n\
         [[script]]\nprefix = \"/gone\"\npath = \"{d}/gone.lua\"\n\n\
         [[script]]\nprefix = \"/v\"\npath = \"{d}/v.lua\"\n",
        root = site.root().display(),
        d = dir.display()
    );
    // A host added, a root changed, a route removed, a listener added.
    let second = format!(
        "listen = [\"127.0.0.1:0\", \"127.0.0.2:0\"]\nworkers = 2\nroot = \"{root}\"\n\n\
         [[host]]\nnames = [\"a.test\"]\nroot = \"{d}/a2\"\n\n\
         [[host]]\nnames = [\"b.test\"]\nroot = \"{d}/b\"\n\n\
         [[script]]\nprefix = \"/v\"\npath = \"{d}/v.lua\"\n",
        root = site.root().display(),
        d = dir.display()
    );
    let config = dir.join("tessera.toml");
    std::fs::write(&config, &first).unwrap();
    let server = Server::start_args(&[
        "serve".into(),
        "--config".into(),
        config.display().to_string(),
    ]);
    let mut held = server.connect();
    assert_eq!(text(&get_on(&mut held, "/who.txt", "a.test")), "a\n");
    assert_eq!(text(&get_on(&mut held, "/gone", "x")), "still here");
    let load = Load::start(server.addr, "/who.txt", b"top\n");
    std::thread::sleep(std::time::Duration::from_millis(300));

    std::fs::write(&config, &second).unwrap();
    server.signal(libc::SIGHUP);
    eventually("the reload", || {
        stderr_has(&server, "configuration reloaded") && stderr_has(&server, "generation=2")
    });
    assert!(
        stderr_has(
            &server,
            "hosts added [b.test], changed [a.test]; listeners added ["
        ) && stderr_has(&server, "]; scripts removed [/gone] generation=2"),
        "{:?}",
        server.stderr.lock().unwrap()
    );
    // The connection opened before the reload is served with the new configuration.
    assert_eq!(text(&get_on(&mut held, "/who.txt", "a.test")), "a2\n");
    assert_eq!(text(&get_on(&mut held, "/who.txt", "b.test")), "b\n");
    assert_eq!(get_on(&mut held, "/gone", "x").status, 404);
    assert_eq!(text(&get_on(&mut held, "/v", "x")), "v");
    assert_eq!(text(&get_on(&mut held, "/who.txt", "c.test")), "top\n");
    let added = added_listener(&server);
    assert_eq!(added.ip().to_string(), "127.0.0.2");
    let mut other = TcpStream::connect(added).unwrap();
    assert_eq!(text(&get_on(&mut other, "/who.txt", "b.test")), "b\n");

    // A broken file changes nothing and says what is wrong, by key.
    std::fs::write(&config, format!("{second}rooot = \"/x\"\n")).unwrap();
    server.signal(libc::SIGHUP);
    eventually("the reload failure", || {
        stderr_has(&server, "reload failed")
    });
    assert!(stderr_has(&server, "rooot"));
    assert_eq!(text(&get_on(&mut held, "/who.txt", "b.test")), "b\n");
    assert_eq!(text(&get_on(&mut other, "/who.txt", "a.test")), "a2\n");

    // Back to the first: the added listener is closed, b.test goes to the default.
    std::fs::write(&config, &first).unwrap();
    server.signal(libc::SIGHUP);
    eventually("the third generation", || {
        stderr_has(&server, "generation=3")
    });
    assert!(stderr_has(&server, "listeners removed ["));
    assert!(stderr_has(&server, "; scripts added [/gone] generation=3"));
    eventually("the removed listener to close", || {
        TcpStream::connect(added).is_err()
    });
    assert_eq!(text(&get_on(&mut held, "/who.txt", "b.test")), "top\n");
    assert_eq!(text(&get_on(&mut held, "/gone", "x")), "still here");
    // The connection to the removed listener was accepted before: it is still served.
    assert_eq!(text(&get_on(&mut other, "/who.txt", "a.test")), "a\n");

    let count = load.stop();
    assert_eq!(count.failed, 0, "failed requests: {:?}", count.errors);
    assert!(count.ok > 20, "only {} requests answered", count.ok);
    let _ = BufReader::new(held);
}

#[test]
fn a_reload_keeps_the_cache_and_shared_dictionaries_whose_settings_did_not_change() {
    let site = Site::new();
    let dir = site.dir.path();
    std::fs::write(
        dir.join("origin.lua"),
        "return { content = function(r)\n\
           local n = shared.hits:incr(\"n\", 1)\n\
           r:set_header(\"Cache-Control\", \"max-age=300\")\n\
           return \"hit \" .. n\n\
         end }",
    )
    .unwrap();
    let config = |extra: &str| {
        format!(
            "[[upstream]]\nname = \"o\"\naddresses = [\"self\"]\npath_prefix = \"/origin\"\n\n\
             [[route]]\nprefix = \"/p\"\nupstream = \"o\"\n\n\
             [[script]]\nprefix = \"/origin\"\npath = \"{}/origin.lua\"\n\n\
             [[shared_dict]]\nname = \"hits\"\nmax_entries = 100\n\n{extra}",
            dir.display()
        )
    };
    let server = site.serve_with(&config(""));
    let path = dir.join("tessera.toml");
    assert_eq!(text(&server.get("/p/x")), "hit 1");
    assert_eq!(text(&server.get("/p/x")), "hit 1");
    // A change elsewhere: the cached page and the counter stay.
    std::fs::write(&path, config("[[host]]\nnames = [\"c.test\"]\n")).unwrap();
    server.signal(libc::SIGHUP);
    eventually("the reload", || stderr_has(&server, "generation=2"));
    assert_eq!(text(&server.get("/p/x")), "hit 1");
    assert_eq!(text(&server.get("/origin/y")), "hit 2");
    // The cache's settings changed: it starts empty.
    std::fs::write(&path, config("[cache]\nmax_size = 1000000\n")).unwrap();
    server.signal(libc::SIGHUP);
    eventually("the second reload", || stderr_has(&server, "generation=3"));
    assert!(stderr_has(&server, "[cache] (emptied) changed"));
    assert_eq!(text(&server.get("/p/x")), "hit 3");
}

/// A script whose file changed is loaded anew by a reload, and the reload's line says so
/// by mount (`scripts changed [/api]`), though no key of the configuration changed; a
/// host's mount is named with the host's first name.
#[test]
fn a_reload_names_the_scripts_whose_source_changed() {
    let site = Site::new();
    let dir = site.dir.path();
    let script = |name: &str, body: &str| {
        std::fs::write(
            dir.join(name),
            format!("return {{ content = function(r) return '{body}' end }}"),
        )
        .unwrap()
    };
    script("api.lua", "one");
    script("b.lua", "b one");
    script("same.lua", "same");
    let server = site.serve_with(&format!(
        "[[script]]\nprefix = \"/api\"\npath = \"{d}/api.lua\"\n\n\
         [[script]]\nprefix = \"/same\"\npath = \"{d}/same.lua\"\n\n\
         [[host]]\nnames = [\"b.test\", \"www.b.test\"]\n\
         [[host.script]]\nprefix = \"/api\"\npath = \"{d}/b.lua\"\n",
        d = dir.display()
    ));
    assert_eq!(text(&server.get("/api")), "one");

    script("api.lua", "two");
    server.signal(libc::SIGHUP);
    eventually("the reload", || stderr_has(&server, "generation=2"));
    assert!(
        stderr_has(
            &server,
            "configuration reloaded: scripts changed [/api] generation=2"
        ),
        "{:?}",
        server.stderr.lock().unwrap()
    );
    assert_eq!(text(&server.get("/api")), "two");

    script("b.lua", "b two");
    script("api.lua", "three");
    server.signal(libc::SIGHUP);
    eventually("the second reload", || stderr_has(&server, "generation=3"));
    assert!(
        stderr_has(
            &server,
            "configuration reloaded: scripts changed [/api, b.test/api] generation=3"
        ),
        "{:?}",
        server.stderr.lock().unwrap()
    );

    // Nothing changed: nothing is named.
    server.signal(libc::SIGHUP);
    eventually("the third reload", || stderr_has(&server, "generation=4"));
    assert!(stderr_has(
        &server,
        "configuration reloaded: no change generation=4"
    ));
}
