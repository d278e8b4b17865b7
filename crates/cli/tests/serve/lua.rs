//! `tessera serve --script` and `[[script]]`: Lua handlers through the real binary.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::harness::{eventually, read_response, stderr_has, Response, Server, Site};

/// Sends one keep-alive GET on `stream` and reads its response.
fn get_on(stream: &mut TcpStream, path: &str) -> Response {
    write!(stream, "GET {path} HTTP/1.1\r\nHost: test\r\n\r\n").unwrap();
    read_response(stream, false)
}

const API: &str = r#"
local M = {}

function M.access(r)
  if r:path() == "/api/deny" then r:exit(403, "denied\n") end
  if r:path() == "/api/old" then r:redirect("/api/new", 301) end
end

function M.content(r)
  local p = r:path()
  if p == "/api/echo" then
    local ip = r:client()
    r:set_status(201)
    r:set_header("Content-Type", "text/x-echo")
    r:add_header("X-Many", "1")
    r:add_header("X-Many", "2")
    r:write(r:method(), "|", p, "|", r:query(), "|", r:arg("q") or "-", "|",
            r:header("x-test") or "-", "|", ip, "|", r:body())
    return
  end
  if p == "/api/chunks" then
    r:write("a")
    r:write({"b", "c"})
    return "d"
  end
  if p == "/api/big" then return string.rep("x", 100000) end
  if p == "/api/log" then
    tessera.log.warn("lua says hi")
    return "logged"
  end
  if p == "/api/seen" then
    return tostring(shared.stats:get(r:arg("key")))
  end
  if p == "/api/timer" then
    tessera.timer.at(0.05, function(v) shared.stats:set("timer", v) end, "fired")
    return "scheduled"
  end
  if p == "/api/timer/read" then return tostring(shared.stats:get("timer")) end
  if p == "/api/ttl" then
    shared.stats:set("short", "here", 0.1)
    return tostring(shared.stats:get("short"))
  end
  if p == "/api/ttl/read" then return tostring(shared.stats:get("short")) end
  if p == "/api/error" then
    local t = nil
    return t.field
  end
  if p == "/api/spin" then
    local x = 0
    while true do x = x + 1 end
  end
  if p == "/api/early" then
    r:set_status(103)
    return "an interim status alone would leave the client waiting"
  end
  if p == "/api/exit" then os.exit(3) end
  if p == "/api/trap" then
    -- Catches the time-limit error and goes on: the limit must still end the call.
    while true do pcall(function() while true do end end) end
  end
  if p == "/api/hog" then
    -- 64 KiB a step: over the 8 MiB limit in a few hundred steps, long before the
    -- time limit even on a loaded machine.
    local t = {}
    for i = 1, 1e8 do t[i] = string.rep("x", 65536) .. i end
  end
  return "hello from lua"
end

function M.header_filter(r)
  r:set_header("X-Filtered", "api")
end

function M.log(r)
  shared.stats:set("logged " .. r:path(), r:status())
end

return M
"#;

/// A script with no content phase: it guards and filters static files.
const DOCS: &str = r#"
return {
  access = function(r)
    if r:arg("key") ~= "open" then r:exit(401) end
  end,
  header_filter = function(r)
    if r:arg("status") then r:set_status(tonumber(r:arg("status"))) end
    r:set_header("X-Filtered", "docs " .. r:status())
    r:set_header("Cache-Control", "no-store")
  end,
}
"#;

fn api_site() -> (Site, Server) {
    let site = Site::new();
    std::fs::write(site.dir.path().join("api.lua"), API).unwrap();
    std::fs::write(site.dir.path().join("docs.lua"), DOCS).unwrap();
    let d = site.dir.path().display();
    let server = site.serve_with(&format!(
        r#"
        [[script]]
        prefix = "/api"
        path = "{d}/api.lua"
        time_limit = 1.0
        memory_limit = 8388608

        [[script]]
        prefix = "/docs"
        path = "{d}/docs.lua"

        [[shared_dict]]
        name = "stats"
        "#
    ));
    (site, server)
}

#[test]
fn content_reads_the_request_and_writes_the_response() {
    let (_site, server) = api_site();
    let mut stream = server.connect();
    write!(
        stream,
        "POST /api/echo?q=a%20b&z=1 HTTP/1.1\r\nHost: test\r\nX-Test: yes\r\nContent-Length: 4\r\n\r\nbody"
    )
    .unwrap();
    let r = read_response(&mut stream, false);
    assert_eq!(r.status, 201);
    assert_eq!(r.header("content-type"), Some("text/x-echo"));
    assert_eq!(r.header("x-filtered"), Some("api"));
    let many: Vec<_> = r.headers.iter().filter(|(n, _)| n == "X-Many").collect();
    assert_eq!(many.len(), 2);
    assert_eq!(
        String::from_utf8_lossy(&r.body),
        "POST|/api/echo|q=a%20b&z=1|a b|yes|127.0.0.1|body"
    );
    // Chunks and a returned string make one body; keep-alive goes on.
    let r = get_on(&mut stream, "/api/chunks");
    assert_eq!((r.status, &r.body[..]), (200, &b"abcd"[..]));
    let r = get_on(&mut stream, "/api/");
    assert_eq!(r.body, b"hello from lua");
    assert_eq!(r.header("content-type"), Some("text/plain"));
    // A large body goes out on its own; pipelined requests around it keep their order.
    write!(
        stream,
        "GET /api/chunks HTTP/1.1\r\nHost: t\r\n\r\nGET /api/big HTTP/1.1\r\nHost: t\r\n\r\n\
         GET /api/ HTTP/1.1\r\nHost: t\r\n\r\n"
    )
    .unwrap();
    assert_eq!(read_response(&mut stream, false).body, b"abcd");
    let big = read_response(&mut stream, false);
    assert_eq!(
        (big.body.len(), big.body.iter().all(|&b| b == b'x')),
        (100_000, true)
    );
    assert_eq!(read_response(&mut stream, false).body, b"hello from lua");
}

#[test]
fn access_denies_and_redirects_before_any_handler() {
    let (_site, server) = api_site();
    let r = server.get("/api/deny");
    assert_eq!((r.status, &r.body[..]), (403, &b"denied\n"[..]));
    let r = server.get("/api/old");
    assert_eq!(r.status, 301);
    assert_eq!(r.header("location"), Some("/api/new"));
    // A mount without content: access guards the static files beneath it.
    assert_eq!(server.get("/docs/index.html").status, 401);
    let r = server.get("/docs/index.html?key=open");
    assert_eq!(r.status, 200);
    assert_eq!(r.body, b"<h1>docs</h1>\n");
    // header_filter rewrote the static response's head, the body is untouched.
    assert_eq!(r.header("x-filtered"), Some("docs 200"));
    assert_eq!(r.header("cache-control"), Some("no-store"));
    assert_eq!(r.header("content-length"), Some("14"));
    // The filter may change a static response's status, but not into one without a
    // body (204, 304) while the body is queued: the status stays, the framing holds,
    // and the same connection goes on.
    let mut stream = server.connect();
    let r = get_on(&mut stream, "/docs/index.html?key=open&status=203");
    assert_eq!((r.status, &r.body[..]), (203, &b"<h1>docs</h1>\n"[..]));
    for bodiless in ["204", "304"] {
        let r = get_on(
            &mut stream,
            &format!("/docs/index.html?key=open&status={bodiless}"),
        );
        assert_eq!((r.status, &r.body[..]), (200, &b"<h1>docs</h1>\n"[..]));
    }
    let r = get_on(&mut stream, "/docs/index.html?key=open");
    assert_eq!((r.status, &r.body[..]), (200, &b"<h1>docs</h1>\n"[..]));
    assert!(stderr_has(
        &server,
        "header_filter cannot change whether a response has a body"
    ));
    // Outside every mount nothing changes.
    let r = server.get("/hello.txt");
    assert_eq!(r.header("x-filtered"), None);
}

#[test]
fn log_phase_timers_ttl_and_tessera_log() {
    let (_site, server) = api_site();
    assert_eq!(server.get("/api/deny").status, 403);
    // The denied request's own log entry (reading it logs /api/seen, under its own key).
    eventually("the log phase of the denied request", || {
        server.get("/api/seen?key=logged%20/api/deny").body == b"403"
    });
    assert_eq!(server.get("/api/timer").body, b"scheduled");
    eventually("the timer", || {
        server.get("/api/timer/read").body == b"fired"
    });
    assert_eq!(server.get("/api/ttl").body, b"here");
    eventually("the ttl", || server.get("/api/ttl/read").body == b"nil");
    assert_eq!(server.get("/api/log").body, b"logged");
    eventually("the log line", || stderr_has(&server, "lua says hi"));
    assert!(
        stderr_has(&server, "api.lua:"),
        "log lines name the script and line"
    );
}

#[test]
fn errors_runaway_loops_and_memory_give_500_and_the_worker_goes_on() {
    let (_site, server) = api_site();
    let mut stream = server.connect();
    for (path, what) in [
        ("/api/error", "attempt to index"),
        ("/api/spin", "script ran longer than its time limit"),
        ("/api/trap", "script ran longer than its time limit"),
        ("/api/early", "invalid status 103"),
        // One line must not take every worker down with the process.
        ("/api/exit", "attempt to call field 'exit'"),
        ("/api/hog", "memory"),
    ] {
        let started = Instant::now();
        let r = get_on(&mut stream, path);
        assert_eq!(r.status, 500, "{path}");
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "{path} took too long"
        );
        // The same connection, the same (only) worker, answers the next request.
        let r = get_on(&mut stream, "/api/");
        assert_eq!((r.status, &r.body[..]), (200, &b"hello from lua"[..]));
        let deadline = Instant::now() + Duration::from_secs(30);
        while !stderr_has(&server, what) {
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {what:?} after {path}; stderr: {:?}",
                server.stderr.lock().unwrap()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    // Errors name the script and line, the watchdog's too.
    for (code, message) in [
        ("t.field", "attempt to index"),
        ("while true do", "script ran longer"),
    ] {
        let line = API.lines().position(|l| l.contains(code)).unwrap() + 1;
        let at = format!("api.lua:{line}: {message}");
        assert!(
            stderr_has(&server, &at),
            "{at} in {:?}",
            server.stderr.lock().unwrap()
        );
    }
}

#[test]
fn command_line_mount_serves_the_hello_example() {
    let site = Site::new();
    let hello = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/lua/hello.lua");
    let server = Server::start(&site.root(), &["--script", &format!("/hello={hello}")]);
    let r = server.get("/hello");
    assert_eq!((r.status, &r.body[..]), (200, &b"Hello World\n"[..]));
    assert_eq!(server.get("/hello.txt").body, b"hello world\n");
}

#[test]
fn shared_dictionaries_are_shared_by_workers() {
    let site = Site::new();
    std::fs::write(
        site.dir.path().join("count.lua"),
        r#"return { content = function(r)
             return tessera.worker_id .. " " .. shared.hits:incr("n", 1) end }"#,
    )
    .unwrap();
    let config = site.dir.path().join("tessera.toml");
    std::fs::write(
        &config,
        format!(
            "[[script]]\nprefix = \"/count\"\npath = \"{}/count.lua\"\n[[shared_dict]]\nname = \"hits\"\n",
            site.dir.path().display()
        ),
    )
    .unwrap();
    let server = Server::start_args(&[
        "serve".into(),
        "--root".into(),
        site.root().display().to_string(),
        "--listen".into(),
        "127.0.0.1:0".into(),
        "--workers".into(),
        "2".into(),
        "--config".into(),
        config.display().to_string(),
    ]);
    let mut workers = std::collections::HashSet::new();
    // New connections are spread over the workers by the kernel; stop once both have
    // answered (bounded: 2,000 connections).
    for expected in 1..=2000 {
        let body = String::from_utf8(server.get("/count").body).unwrap();
        let (worker, n) = body.split_once(' ').unwrap();
        assert_eq!(
            n.parse::<f64>().unwrap(),
            expected as f64,
            "one counter for all"
        );
        workers.insert(worker.to_string());
        if workers.len() == 2 {
            return;
        }
    }
    panic!("only worker(s) {workers:?} answered");
}

/// An origin that answers `/slow` only when told to (through the channel), and `/fast`
/// at once.
fn held_origin(release: mpsc::Receiver<()>) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let release = std::sync::Arc::new(std::sync::Mutex::new(release));
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let release = release.clone();
            std::thread::spawn(move || {
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut writer = stream;
                loop {
                    let mut line = String::new();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 {
                        return;
                    }
                    loop {
                        let mut field = String::new();
                        if reader.read_line(&mut field).unwrap_or(0) == 0 || field == "\r\n" {
                            break;
                        }
                    }
                    if line.contains("/slow") {
                        let _ = release
                            .lock()
                            .unwrap()
                            .recv_timeout(Duration::from_secs(60));
                    }
                    let body = if line.contains("/slow") {
                        "slow"
                    } else {
                        "fast"
                    };
                    let _ = write!(
                        writer,
                        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nX-Origin: yes\r\n\r\n{body}",
                        body.len()
                    );
                }
            });
        }
    });
    addr
}

#[test]
fn a_slow_upstream_call_does_not_hold_up_the_worker() {
    let (release, held) = mpsc::channel();
    let origin = held_origin(held);
    let site = Site::new();
    std::fs::write(
        site.dir.path().join("up.lua"),
        r#"return { content = function(r)
             if r:path() == "/up/local" then return "local" end
             local res, err = tessera.http.request{ upstream = "origin", path = r:path():sub(4) }
             if not res then r:exit(502, err) end
             return res.status .. " " .. res.headers["x-origin"] .. " " .. res.body
           end }"#,
    )
    .unwrap();
    let server = site.serve_with(&format!(
        "[[upstream]]\nname = \"origin\"\naddresses = [\"{origin}\"]\n\
         [[script]]\nprefix = \"/up\"\npath = \"{}/up.lua\"\n",
        site.dir.path().display()
    ));
    // The one worker starts the slow call...
    let mut slow = server.connect();
    write!(slow, "GET /up/slow HTTP/1.1\r\nHost: test\r\n\r\n").unwrap();
    // ...and still answers other requests, local and proxied, while it waits.
    let mut other = server.connect();
    let r = get_on(&mut other, "/up/local");
    assert_eq!(r.body, b"local");
    let r = get_on(&mut other, "/up/fast");
    assert_eq!(r.body, b"200 yes fast");
    assert_eq!(server.get("/hello.txt").body, b"hello world\n");
    // Only now does the origin answer the slow call.
    release.send(()).unwrap();
    let r = read_response(&mut slow, false);
    assert_eq!(r.body, b"200 yes slow");
    let _ = slow.read(&mut [0u8; 0]);
}

#[test]
fn sighup_reloads_scripts_and_a_broken_one_keeps_the_old_version() {
    let site = Site::new();
    let path = site.dir.path().join("v.lua");
    let version = |v: &str| format!("return {{ content = function(r) return \"{v}\" end }}");
    std::fs::write(&path, version("v1")).unwrap();
    let server = Server::start(
        &site.root(),
        &["--script", &format!("/v={}", path.display())],
    );
    let mut kept = server.connect();
    assert_eq!(get_on(&mut kept, "/v").body, b"v1");
    std::fs::write(&path, version("v2")).unwrap();
    server.signal(libc::SIGHUP);
    eventually("the new version", || server.get("/v").body == b"v2");
    // The connection opened before the reload is still served.
    assert_eq!(get_on(&mut kept, "/v").body, b"v2");
    std::fs::write(&path, "return { content = ").unwrap();
    server.signal(libc::SIGHUP);
    eventually("the reload failure", || {
        stderr_has(&server, "reload failed")
    });
    assert_eq!(server.get("/v").body, b"v2");
    assert_eq!(get_on(&mut kept, "/v").body, b"v2");
}

#[test]
fn header_filter_adjusts_proxied_responses_and_log_sees_them() {
    let (_release, held) = mpsc::channel();
    let origin = held_origin(held);
    let site = Site::new();
    std::fs::write(
        site.dir.path().join("filter.lua"),
        r#"return {
             header_filter = function(r)
               r:set_header("X-Origin", nil)
               r:set_header("X-Via-Lua", r:resp_header("content-length") or "framing hidden")
               r:set_status(203)
             end,
             log = function(r) shared.seen:set("last", r:path() .. " " .. r:status()) end,
           }"#,
    )
    .unwrap();
    std::fs::write(
        site.dir.path().join("seen.lua"),
        r#"return { content = function(r) return tostring(shared.seen:get("last")) end }"#,
    )
    .unwrap();
    let d = site.dir.path().display();
    let server = site.serve_with(&format!(
        "[[upstream]]\nname = \"origin\"\naddresses = [\"{origin}\"]\n\
         [[route]]\nprefix = \"/fast\"\nupstream = \"origin\"\n\
         [[script]]\nprefix = \"/fast\"\npath = \"{d}/filter.lua\"\n\
         [[script]]\nprefix = \"/seen\"\npath = \"{d}/seen.lua\"\n\
         [[shared_dict]]\nname = \"seen\"\n"
    ));
    let r = server.get("/fast");
    assert_eq!((r.status, &r.body[..]), (203, &b"fast"[..]));
    assert_eq!(r.header("x-origin"), None);
    assert_eq!(r.header("x-via-lua"), Some("framing hidden"));
    assert_eq!(r.header("content-length"), Some("4"));
    eventually("the log phase", || server.get("/seen").body == b"/fast 203");
}

#[test]
fn a_mount_with_content_answers_before_a_proxy_route_of_the_same_prefix_and_a_longer_route_takes_its_paths(
) {
    let (_release, held) = mpsc::channel();
    let origin = held_origin(held);
    let site = Site::new();
    std::fs::write(
        site.dir.path().join("api.lua"),
        r#"return {
             access = function(r) if r:path() == "/api/v1/deny" then r:exit(403, "no\n") end end,
             content = function(r) return "lua " .. r:path() end,
             header_filter = function(r) r:set_header("X-Mount", "api") end,
             log = function(r) tessera.log.warn("logged " .. r:path()) end,
           }"#,
    )
    .unwrap();
    let d = site.dir.path().display();
    let server = site.serve_with(&format!(
        "[[upstream]]\nname = \"origin\"\naddresses = [\"{origin}\"]\n\
         [[route]]\nprefix = \"/api\"\nupstream = \"origin\"\n\
         [[route]]\nprefix = \"/api/v1\"\nupstream = \"origin\"\n\
         [[script]]\nprefix = \"/api\"\npath = \"{d}/api.lua\"\n"
    ));
    // Same prefix: the script's content answers, not the proxy.
    let r = server.get("/api/x");
    assert_eq!((r.status, &r.body[..]), (200, &b"lua /api/x"[..]));
    assert_eq!(r.header("x-mount"), Some("api"));
    // A longer route under the mount: the proxy answers, the mount's filters still run.
    let r = server.get("/api/v1/x");
    assert_eq!((r.status, &r.body[..]), (200, &b"fast"[..]));
    assert_eq!(r.header("x-origin"), Some("yes"));
    assert_eq!(r.header("x-mount"), Some("api"));
    // Its log phase runs when that exchange ends, not when the next request comes.
    eventually("the log phase of /api/v1/x", || {
        stderr_has(&server, "logged /api/v1/x")
    });
    assert_eq!(server.get("/api/v1/deny").status, 403);
}

#[test]
fn head_of_a_scripted_response_declares_the_length_of_its_get() {
    let (_site, server) = api_site();
    let get = server.get("/api/hello");
    assert_eq!(get.status, 200);
    let mut stream = server.connect();
    write!(stream, "HEAD /api/hello HTTP/1.1\r\nHost: test\r\n\r\n").unwrap();
    let head = read_response(&mut stream, true);
    assert_eq!(head.status, 200);
    assert!(head.body.is_empty());
    assert_eq!(
        head.header("content-length"),
        Some(get.body.len().to_string().as_str())
    );
    // The connection stays in sync: the next response is read whole.
    assert_eq!(get_on(&mut stream, "/api/hello").body, get.body);
}
