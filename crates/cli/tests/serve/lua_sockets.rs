//! `tessera.socket.tcp()` (cosockets) through the real binary: a script at `/s` runs one
//! case per path against servers the test starts on loopback (plain TCP, TLS with a
//! certificate made here) and answers what it got.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::Duration;

use crate::harness::{eventually, read_response, stderr_has, Server, Site};

const CASES: &str = r#"
local cases = {}

local function open(r)
  local sock = tessera.socket.tcp()
  sock:settimeouts(2000, 2000, 2000)
  local ok, err = sock:connect(r:arg("host") or "127.0.0.1", tonumber(r:arg("port")))
  if not ok then r:exit(502, "connect: " .. tostring(err)) end
  return sock
end

-- The server answers "hello\r\nwor\rld\n12345" then the rest after a line is sent.
cases.receive = function(r)
  local sock = open(r)
  local out = {}
  out[#out + 1] = sock:send({ "pi", { "ng" }, 1, "\n" })
  out[#out + 1] = sock:receive("*l")
  out[#out + 1] = sock:receive()
  out[#out + 1] = sock:receive(5)
  out[#out + 1] = sock:receive("*a")
  local data, err, partial = sock:receive(1)
  out[#out + 1] = tostring(data) .. "/" .. tostring(err) .. "/" .. tostring(partial)
  return table.concat(out, "|")
end

-- Like `receive`, reading up to a pattern and what is there.
cases.until_ = function(r)
  local sock = open(r)
  sock:send("ping\n")
  local reader = sock:receiveuntil("\n1")
  local a = reader()
  local b = sock:receiveany(3)
  local rest, err, partial = sock:receive(100)
  return a .. "|" .. b .. "|" .. tostring(rest) .. "/" .. err .. "/" .. partial
end

-- The server sends 9 MiB without a newline.
cases.too_much = function(r)
  local sock = open(r)
  local data, err, partial = sock:receive("*l")
  return tostring(data) .. "|" .. err .. "|" .. tostring(partial) .. "|" .. tostring(select(2, sock:send("x")))
end

-- 4 MiB: more than the socket takes at once, so the send waits; the server answers the
-- count it got.
cases.big_send = function(r)
  local sock = open(r)
  local sent, err = sock:send({ string.rep("x", 4 * 1024 * 1024), "\n" })
  return tostring(sent or err) .. "|" .. tostring(sock:receive())
end

cases.refused = function(r)
  local sock = tessera.socket.tcp()
  local ok, err = sock:connect("127.0.0.1", tonumber(r:arg("port")))
  return tostring(ok) .. "|" .. tostring(err) .. "|" .. tostring(sock:send("x"))
end

cases.connect_timeout = function(r)
  local sock = tessera.socket.tcp()
  sock:settimeouts(150, 1000, 1000)
  local ok, err = sock:connect("127.0.0.1", tonumber(r:arg("port")))
  return tostring(ok) .. "|" .. tostring(err)
end

-- The server says nothing: the read times out, and the socket stays usable.
cases.read_timeout = function(r)
  local sock = open(r)
  sock:settimeout(150)
  local data, err, partial = sock:receive("*l")
  local again = sock:send("still open\n")
  return tostring(data) .. "|" .. err .. "|[" .. partial .. "]|" .. tostring(again) .. "|" ..
    tostring(sock:close()) .. "|" .. tostring(select(2, sock:close()))
end

-- An echo server: what it sent back, and how often the pooled connection was reused.
cases.keepalive = function(r)
  local sock = open(r)
  local reused = sock:getreusedtimes()
  sock:send("echo " .. r:arg("n") .. "\n")
  local line = sock:receive()
  local ok, err = sock:setkeepalive(10000, 2)
  return line .. "|" .. reused .. "|" .. tostring(ok) .. tostring(err and "|" .. err or "")
end

-- The same through the methods of ops.rs alone: a socket whose number (the fast C
-- functions' way to it) the script changed to one that names no socket, or to a string.
cases.renumbered = function(r)
  local sock = open(r)
  sock[2] = r:arg("as") == "string" and "x" or 1e9
  local reused = sock:getreusedtimes()
  sock:send("echo " .. r:arg("n") .. "\n")
  local line = sock:receive()
  local ok, err = sock:setkeepalive(10000, 2)
  return line .. "|" .. reused .. "|" .. tostring(ok) .. tostring(err and "|" .. err or "")
end

-- Connects and returns without closing: the request's end closes the socket.
cases.left_open = function(r)
  local sock = open(r)
  sock:send("echo left\n")
  return sock:receive()
end

cases.tls = function(r)
  local sock = open(r)
  local form = r:arg("form")
  local ok, err
  if form == "ngx" then
    ok, err = sock:sslhandshake(false, "tls.test", r:arg("verify") == "1")
  else
    ok, err = sock:sslhandshake("tls.test", r:arg("verify") == "1")
  end
  if not ok then return "handshake: " .. tostring(err) end
  sock:send("echo over tls\n")
  local line, rerr = sock:receive()
  sock:close()
  return tostring(ok) .. "|" .. tostring(line or rerr)
end

-- In a timer: the answer goes to a shared dictionary.
cases.timer = function(r)
  local port = tonumber(r:arg("port"))
  tessera.timer.at(0, function()
    local sock = tessera.socket.tcp()
    local ok, err = sock:connect("127.0.0.1", port)
    if not ok then shared.got:set("timer", err) return end
    sock:send("echo from a timer\n")
    shared.got:set("timer", sock:receive())
  end)
  return "set"
end

cases.timer_read = function() return tostring(shared.got:get("timer")) end

-- TLS kept in the pool: the second request's handshake is the first's.
cases.tls_pooled = function(r)
  local sock = tessera.socket.tcp()
  local ok, err = sock:connect("127.0.0.1", tonumber(r:arg("port")), { pool = "tls" })
  if not ok then return "connect: " .. err end
  local reused = sock:getreusedtimes()
  local shaken, herr = sock:sslhandshake(nil, r:arg("name") or "tls.test", r:arg("verify") == "1")
  if not shaken then return "handshake: " .. herr end
  sock:send("echo pooled\n")
  local line = sock:receive()
  return reused .. "|" .. tostring(line) .. "|" .. tostring(sock:setkeepalive())
end

-- Timeouts past what the clock can add are refused, never a panic.
cases.huge_timeout = function()
  local sock = tessera.socket.tcp()
  local ok, err = pcall(sock.settimeouts, sock, 1e22, 1000, 1000)
  local kept, kerr = pcall(sock.setkeepalive, sock, 1e22)
  return tostring(ok) .. " " .. tostring(err) .. "|" .. tostring(kept) .. " " .. tostring(kerr)
end

-- A receive of `size` bytes (or a line, without `size`) from a server that sends a few
-- bytes at a time, with a read timeout of `timeout` ms; through the methods of ops.rs
-- with `via=ops`.
cases.trickle = function(r)
  local sock = open(r)
  if r:arg("via") == "ops" then sock[2] = 1e9 end
  sock:settimeouts(nil, nil, tonumber(r:arg("timeout")))
  local data, err, partial = sock:receive(tonumber(r:arg("size")))
  return tostring(data) .. "|" .. tostring(err) .. "|" .. tostring(partial)
end

-- Waits 200 ms: in a sleep, or for a server that answers `late` after that long
-- (timeouts of 5 s), on a new connection or on one the pool kept from an earlier
-- request (its connect does not wait: the receive is the first wait).
cases.sleep = function()
  tessera.sleep(0.2)
  return "slept"
end

cases.late_answer = function(r)
  local sock = tessera.socket.tcp()
  sock:settimeouts(5000, 5000, 5000)
  assert(sock:connect("127.0.0.1", tonumber(r:arg("port"))))
  local reused = sock:getreusedtimes()
  sock:send("echo late\n")
  local line, err = sock:receive()
  sock:setkeepalive()
  return tostring(line or err) .. "|" .. reused
end

cases.sleep_in_access = function() return "slept in access" end

-- A socket's handle kept as a weak key outlives its collection (LuaJIT keeps a
-- finalized userdata's key until the next cycle): put with the methods again, it must
-- not reach the socket that took its freed number.
local function forget(weak)
  local sock = tessera.socket.tcp()
  weak[sock[1]] = true
  return getmetatable(sock), sock[2]
end

cases.resurrected = function(r)
  local weak = setmetatable({}, { __mode = "k" })
  local methods, number = forget(weak)
  collectgarbage()
  local handle = next(weak)
  local sock = open(r)
  local ghost = setmetatable({ handle, 1e9 }, methods)
  local ok, err = pcall(ghost.close, ghost)
  sock:send("echo still open\n")
  return tostring(handle ~= nil) .. "|" .. tostring(sock[2] == number) .. "|" ..
    tostring(ok) .. "|" .. tostring(tostring(err):find("not a socket", 1, true) ~= nil) ..
    "|" .. tostring(sock:receive())
end

local M = {}

function M.access(r)
  if r:path() == "/s/in_access" then
    local sock = open(r)
    sock:send("echo from access\n")
    r:exit(200, sock:receive())
  elseif r:path() == "/s/sleep_in_access" then
    tessera.sleep(0.2)
  end
end

function M.content(r)
  local case = cases[r:path():match("^/s/(.*)$")]
  if not case then r:exit(404) end
  return case(r)
end

function M.header_filter(r)
  if r:path() == "/s/in_filter" then tessera.socket.tcp() end
end

return M
"#;

/// A server on loopback whose connections `serve` handles, each on its own thread;
/// the count of connections accepted.
fn server(serve: impl Fn(TcpStream) + Send + Sync + 'static) -> (SocketAddr, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let accepted = Arc::new(AtomicUsize::new(0));
    let count = accepted.clone();
    let serve = Arc::new(serve);
    thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { return };
            count.fetch_add(1, Ordering::SeqCst);
            let serve = serve.clone();
            thread::spawn(move || serve(stream));
        }
    });
    (addr, accepted)
}

/// Answers each line `echo X` with `X`, until the client closes; then says so on `closed`.
fn echo(stream: TcpStream, closed: Option<mpsc::Sender<()>>) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut out = stream;
    let mut line = String::new();
    while reader.read_line(&mut line).is_ok_and(|n| n > 0) {
        let reply = line
            .trim_end()
            .strip_prefix("echo ")
            .unwrap_or("?")
            .to_string();
        if out.write_all(format!("{reply}\r\n").as_bytes()).is_err() {
            break;
        }
        line.clear();
    }
    if let Some(closed) = closed {
        let _ = closed.send(());
    }
}

fn serve_cases() -> (Site, Server) {
    let site = Site::new();
    let script = site.dir.path().join("cases.lua");
    std::fs::write(&script, CASES).unwrap();
    let server = site.serve_with(&format!(
        "admin_listen = \"127.0.0.1:0\"\n[[script]]\nprefix = \"/s\"\npath = \"{}\"\n\
         [[shared_dict]]\nname = \"got\"\n",
        script.display()
    ));
    (site, server)
}

/// The server's `/metrics` samples, `name{labels}` -> value.
fn metrics(server: &Server) -> std::collections::HashMap<String, f64> {
    let admin = crate::metrics::admin_addr(server);
    crate::metrics::samples(&crate::metrics::admin_get(admin, "/metrics", "").1)
}

fn body(server: &Server, path: &str) -> (u16, String) {
    let r = server.get(path);
    (r.status, String::from_utf8_lossy(&r.body).into_owned())
}

#[test]
fn receive_takes_a_size_a_line_or_everything_and_send_takes_tables() {
    let (addr, _) = server(|mut s| {
        let mut line = String::new();
        BufReader::new(s.try_clone().unwrap())
            .read_line(&mut line)
            .unwrap();
        // What the script sent is checked by the answer: another line gets another
        // answer, which the assertion below on the script's output reports.
        let answer = match line.as_str() {
            "ping1\n" => "hello\r\nwor\rld\n12345the rest\nof it".to_string(),
            other => format!("the script sent {other:?}"),
        };
        s.write_all(answer.as_bytes()).unwrap();
    });
    let (_site, server) = serve_cases();
    let (status, got) = body(&server, &format!("/s/receive?port={}", addr.port()));
    assert_eq!(
        (status, got.as_str()),
        (200, "6|hello|world|12345|the rest\nof it|nil/closed/nil")
    );
}

#[test]
fn receiveuntil_reads_up_to_its_pattern() {
    let (addr, _) = server(|mut s| {
        let mut line = String::new();
        BufReader::new(s.try_clone().unwrap())
            .read_line(&mut line)
            .unwrap();
        s.write_all(b"before\n12345").unwrap();
    });
    let (_site, server) = serve_cases();
    let (_, got) = body(&server, &format!("/s/until_?port={}", addr.port()));
    assert_eq!(got, "before|234|nil/closed/5");
}

#[test]
fn a_receive_of_more_than_8_mib_is_refused() {
    let (addr, _) = server(|mut s| {
        let _ = s.write_all(&vec![b'x'; 9 << 20]);
    });
    let (_site, server) = serve_cases();
    let (_, got) = body(&server, &format!("/s/too_much?port={}", addr.port()));
    assert_eq!(
        got,
        "nil|receive of more than 8 MiB refused (connection closed)|nil|closed"
    );
}

#[test]
fn a_send_larger_than_the_socket_takes_waits_and_sends_it_all() {
    let (addr, _) = server(|s| {
        // Slow to start reading, so that the socket's buffers fill.
        thread::sleep(Duration::from_millis(200));
        let mut line = Vec::new();
        let mut reader = BufReader::new(s.try_clone().unwrap());
        reader.read_until(b'\n', &mut line).unwrap();
        let mut out = s;
        out.write_all(format!("{}\n", line.len()).as_bytes())
            .unwrap();
    });
    let (_site, server) = serve_cases();
    let (_, got) = body(&server, &format!("/s/big_send?port={}", addr.port()));
    assert_eq!(got, "4194305|4194305");
}

#[test]
fn a_closed_port_is_connection_refused() {
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let (_site, server) = serve_cases();
    let (status, got) = body(&server, &format!("/s/refused?port={port}"));
    assert_eq!((status, got.as_str()), (200, "nil|connection refused|nil"));
    let m = metrics(&server);
    assert_eq!(
        m["tessera_lua_socket_connects_total{result=\"failed\"}"],
        1.0
    );
    assert_eq!(m["tessera_lua_socket_errors_total{error=\"refused\"}"], 1.0);
}

#[test]
fn a_connect_that_gets_no_answer_times_out() {
    // A listener whose queue is full: the kernel drops further SYNs, so a connect
    // waits for an answer that does not come.
    let listener =
        socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    listener
        .bind(&"127.0.0.1:0".parse::<SocketAddr>().unwrap().into())
        .unwrap();
    listener.listen(0).unwrap();
    let addr = listener.local_addr().unwrap().as_socket().unwrap();
    let mut fillers = Vec::new();
    for _ in 0..4 {
        let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
        s.set_nonblocking(true).unwrap();
        let _ = s.connect(&addr.into());
        fillers.push(s);
    }
    thread::sleep(Duration::from_millis(100));
    let (_site, server) = serve_cases();
    let (_, got) = body(&server, &format!("/s/connect_timeout?port={}", addr.port()));
    assert_eq!(got, "nil|timeout");
    drop(fillers);
}

#[test]
fn a_read_timeout_leaves_the_socket_open() {
    let (tx, rx) = mpsc::channel();
    let tx = std::sync::Mutex::new(tx);
    let (addr, _) = server(move |s| {
        let mut line = String::new();
        BufReader::new(s).read_line(&mut line).unwrap();
        let _ = tx.lock().unwrap().send(line);
    });
    let (_site, server) = serve_cases();
    let (_, got) = body(&server, &format!("/s/read_timeout?port={}", addr.port()));
    assert_eq!(got, "nil|timeout|[]|11|1|closed");
    assert_eq!(
        rx.recv_timeout(Duration::from_secs(5)).unwrap(),
        "still open\n"
    );
}

#[test]
fn localhost_is_resolved() {
    let (addr, _) = server(|s| echo(s, None));
    let (_site, server) = serve_cases();
    let (status, got) = body(
        &server,
        &format!("/s/left_open?host=localhost&port={}", addr.port()),
    );
    assert_eq!((status, got.as_str()), (200, "left"));
}

#[test]
fn cosockets_work_in_access_and_in_timers() {
    let (addr, _) = server(|s| echo(s, None));
    let (_site, server) = serve_cases();
    let (status, got) = body(&server, &format!("/s/in_access?port={}", addr.port()));
    assert_eq!((status, got.as_str()), (200, "from access"));
    assert_eq!(
        body(&server, &format!("/s/timer?port={}", addr.port())).1,
        "set"
    );
    eventually("the timer's answer", || {
        body(&server, "/s/timer_read").1 == "from a timer"
    });
}

#[test]
fn a_socket_left_open_is_closed_when_its_request_ends() {
    let (tx, rx) = mpsc::channel();
    let tx = std::sync::Mutex::new(tx);
    let (addr, _) = server(move |s| echo(s, Some(tx.lock().unwrap().clone())));
    let (_site, server) = serve_cases();
    let (_, got) = body(&server, &format!("/s/left_open?port={}", addr.port()));
    assert_eq!(got, "left");
    rx.recv_timeout(Duration::from_secs(5))
        .expect("the server saw the connection closed");
}

#[test]
fn setkeepalive_reuses_connections_from_the_pool() {
    let (addr, accepted) = server(|s| echo(s, None));
    let (_site, server) = serve_cases();
    for n in 0..20 {
        let (_, got) = body(&server, &format!("/s/keepalive?port={}&n={n}", addr.port()));
        // One worker, one request at a time: the first connects, the others reuse it.
        assert_eq!(got, format!("{n}|{n}|1"));
    }
    assert_eq!(accepted.load(Ordering::SeqCst), 1);
    let m = metrics(&server);
    assert_eq!(m["tessera_lua_socket_connects_total{result=\"new\"}"], 1.0);
    assert_eq!(
        m["tessera_lua_socket_connects_total{result=\"pooled\"}"],
        19.0
    );
    assert_eq!(m["tessera_lua_socket_pool_idle"], 1.0);
}

#[test]
fn a_socket_renumbered_by_its_script_still_works_through_the_slow_path() {
    let (addr, accepted) = server(|s| echo(s, None));
    let (_site, server) = serve_cases();
    for (n, case) in ["keepalive", "renumbered", "renumbered", "keepalive"]
        .iter()
        .enumerate()
    {
        let as_ = if n == 2 { "string" } else { "number" };
        let (_, got) = body(
            &server,
            &format!("/s/{case}?port={}&n={n}&as={as_}", addr.port()),
        );
        // Both paths share the pool: one connection, reused by each request after the
        // first.
        assert_eq!(got, format!("{n}|{n}|1"), "{case}");
    }
    assert_eq!(accepted.load(Ordering::SeqCst), 1);
}

#[test]
fn cosockets_are_refused_in_header_filter_with_a_clear_error() {
    let (_site, server) = serve_cases();
    let (status, _) = body(&server, "/s/in_filter");
    assert_eq!(status, 500);
    eventually("the error logged", || {
        stderr_has(
            &server,
            "tessera.socket: not available in header_filter (cosockets work in access, content and timers)",
        )
    });
}

/// A TLS server with a self-signed certificate for `tls.test`, answering `echo X` lines.
fn tls_server() -> SocketAddr {
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec!["tls.test".to_string()])
        .unwrap()
        .self_signed(&key)
        .unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![cert.der().clone()],
            rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
        )
        .unwrap();
    let config = Arc::new(config);
    let (addr, _) = server(move |tcp| {
        let conn = rustls::ServerConnection::new(config.clone()).unwrap();
        let mut tls = rustls::StreamOwned::new(conn, tcp);
        let mut line = Vec::new();
        let mut byte = [0u8; 1];
        loop {
            match tls.read(&mut byte) {
                Ok(1) if byte[0] == b'\n' => {
                    let text = String::from_utf8_lossy(&line).into_owned();
                    let reply = text.strip_prefix("echo ").unwrap_or("?");
                    if tls.write_all(format!("{reply}\n").as_bytes()).is_err() {
                        return;
                    }
                    line.clear();
                }
                Ok(1) => line.push(byte[0]),
                _ => return,
            }
        }
    });
    addr
}

#[test]
fn sslhandshake_without_verify_talks_tls_to_a_self_signed_server() {
    let addr = tls_server();
    let (_site, server) = serve_cases();
    for form in ["tessera", "ngx"] {
        let (status, got) = body(
            &server,
            &format!("/s/tls?port={}&form={form}&verify=0", addr.port()),
        );
        assert_eq!((status, got.as_str()), (200, "true|over tls"), "{form}");
    }
}

#[test]
fn sslhandshake_with_verify_refuses_a_self_signed_certificate() {
    let addr = tls_server();
    let (_site, server) = serve_cases();
    for form in ["tessera", "ngx"] {
        let (_, got) = body(
            &server,
            &format!("/s/tls?port={}&form={form}&verify=1", addr.port()),
        );
        assert_eq!(
            got, "handshake: handshake failed: invalid peer certificate: UnknownIssuer",
            "{form}"
        );
    }
}

#[test]
fn a_tls_connection_is_pooled_with_its_handshake() {
    let addr = tls_server();
    let (_site, server) = serve_cases();
    for n in 0..3 {
        let (_, got) = body(&server, &format!("/s/tls_pooled?port={}", addr.port()));
        assert_eq!(got, format!("{n}|pooled|1"));
    }
    // Not given to a handshake that asks for verification, or for another name: the
    // pooled connection was made without either.
    for ask in ["verify=1", "name=other.test"] {
        // One in the pool (the refusal below closes the one it was offered).
        let (_, got) = body(&server, &format!("/s/tls_pooled?port={}", addr.port()));
        assert!(got.ends_with("|pooled|1"), "{got}");
        let (_, got) = body(
            &server,
            &format!("/s/tls_pooled?port={}&{ask}", addr.port()),
        );
        assert!(
            got.contains(
                "pooled connection was made for another server name or without verification"
            ),
            "{ask}: {got}"
        );
    }
}

#[test]
fn a_timeout_too_large_for_the_clock_is_refused() {
    let (_site, server) = serve_cases();
    let (_, got) = body(&server, "/s/huge_timeout");
    assert!(
        got.starts_with("false ")
            && got.contains("bad connect timeout: 1")
            && got.contains("(0 to 2147483647 ms)"),
        "{got}"
    );
    assert!(
        got.contains("|false ") && got.contains("bad keepalive timeout"),
        "{got}"
    );
}

/// A server that sends `chunks` with `gap` between them, then keeps the connection
/// open, silent, for `silence`.
fn trickle(chunks: &'static [&'static str], gap: Duration, silence: Duration) -> SocketAddr {
    server(move |mut s| {
        for (n, chunk) in chunks.iter().enumerate() {
            if n > 0 {
                thread::sleep(gap);
            }
            if s.write_all(chunk.as_bytes()).is_err() {
                return;
            }
        }
        thread::sleep(silence);
    })
    .0
}

/// The trickle script's answer, through fast.rs and ops.rs, by size and by line, from a
/// peer sending `chunks` `gap` apart and then silent for `silence`, with a read timeout
/// of 300 ms: `want` every time.
fn assert_trickled(
    chunks: &'static [&'static str],
    (gap, silence): (Duration, Duration),
    want: &str,
) {
    let addr = trickle(chunks, gap, silence);
    let (_site, server) = serve_cases();
    for via in ["fast", "ops"] {
        for size in ["&size=16", ""] {
            let (_, got) = body(
                &server,
                &format!(
                    "/s/trickle?port={}&timeout=300&via={via}{size}",
                    addr.port()
                ),
            );
            assert_eq!(got, want, "{via} {size}");
        }
    }
}

#[test]
fn a_read_timeout_bounds_the_silence_between_reads_not_the_whole_receive() {
    // Eight pieces 80 ms apart: 560 ms from the first to the last, nearly twice the
    // 300 ms read timeout, and no gap longer than a third of it.
    const PIECES: &[&str] = &["01", "23", "45", "67", "89", "ab", "cd", "ef\n"];
    let times = (Duration::from_millis(80), Duration::ZERO);
    assert_trickled(PIECES, times, "0123456789abcdef|nil|nil");
}

#[test]
fn a_read_timeout_after_some_bytes_gives_them_back_with_the_error() {
    // Two pieces 100 ms apart, then silence longer than the 300 ms read timeout.
    let times = (Duration::from_millis(100), Duration::from_secs(2));
    assert_trickled(&["ab", "c"], times, "nil|timeout|abc");
}

/// Sends `GET /big.bin` (8 MiB) and then `script` pipelined on a connection with a small
/// receive window, and reads nothing for 600 ms. The server runs the script's first poll
/// as it answers the requests (the script then waits 200 ms), then awaits the flush of
/// the large response to this client before it polls the script again, and the script's
/// wake comes while that flush waits. Returns the script's response and how long it took
/// from the requests.
fn behind_a_slow_flush(server: &Server, script: &str) -> (crate::harness::Response, Duration) {
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    socket.set_recv_buffer_size(16 * 1024).unwrap();
    socket
        .connect_timeout(&server.addr.into(), Duration::from_secs(5))
        .unwrap();
    let mut client: TcpStream = socket.into();
    // Well before the cosocket's 5 s timeouts: a lost wake fails here.
    client
        .set_read_timeout(Some(Duration::from_secs(3)))
        .unwrap();
    let asked = std::time::Instant::now();
    write!(client, "GET /big.bin HTTP/1.1\r\nHost: t\r\n\r\n{script}").unwrap();
    thread::sleep(Duration::from_millis(600));
    let big = read_response(&mut client, false);
    assert_eq!((big.status, big.body.len()), (200, BIG));
    let answer = read_response(&mut client, false);
    (answer, asked.elapsed())
}

const BIG: usize = 8 << 20;

#[test]
fn a_script_waiting_while_its_connection_flushes_to_a_slow_client_is_resumed() {
    // Answers each line after 200 ms.
    let (addr, _) = server(|s| {
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut reader = BufReader::new(s.try_clone().unwrap());
        let mut out = s;
        let mut line = String::new();
        while reader.read_line(&mut line).is_ok_and(|n| n > 0) {
            thread::sleep(Duration::from_millis(200));
            if out.write_all(b"late\r\n").is_err() {
                return;
            }
            line.clear();
        }
    });
    let (site, server) = serve_cases();
    site.write("big.bin", &vec![b'x'; BIG]);
    let late = format!("/s/late_answer?port={}", addr.port());
    // A connection for the pool, so that below the script's first wait is its receive.
    assert_eq!(body(&server, &late), (200, "late|0".to_string()));
    // `content` of a request with `Connection: close` (which does not join the batch:
    // the connection flushes the responses before it first), and `access` (whose wait
    // follows that flush, keep-alive or not).
    for (path, close, want) in [
        ("/s/sleep", true, "slept"),
        (late.as_str(), true, "late|1"),
        ("/s/sleep_in_access", false, "slept in access"),
        ("/s/sleep_in_access", true, "slept in access"),
    ] {
        let connection = if close { "Connection: close\r\n" } else { "" };
        let script = format!("GET {path} HTTP/1.1\r\nHost: t\r\n{connection}\r\n");
        let (answer, took) = behind_a_slow_flush(&server, &script);
        assert_eq!(
            (
                answer.status,
                String::from_utf8_lossy(&answer.body).as_ref()
            ),
            (200, want),
            "{path}"
        );
        assert!(took < Duration::from_millis(2500), "{path}: {took:?}");
    }
}

#[test]
fn a_socket_handle_used_after_its_collection_reaches_no_socket() {
    let (addr, _) = server(|s| echo(s, None));
    let (_site, server) = serve_cases();
    let (status, got) = body(&server, &format!("/s/resurrected?port={}", addr.port()));
    // The handle came back, the new socket has its number, the handle's `close` is
    // refused, and the new socket still works.
    assert_eq!(
        (status, got.as_str()),
        (200, "true|true|false|true|still open")
    );
}
