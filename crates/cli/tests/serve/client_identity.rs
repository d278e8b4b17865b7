//! The client behind proxies (docs/security.md, "Client identity"): HAProxy in front
//! sending PROXY v2 and v1 and adding X-Forwarded-For, over cleartext, TLS and IPv6; the
//! access log, the routing rules' `client` and `$remote_addr`, Lua's `r:client()` and an
//! origin behind `send_proxy` all see the original client; a spoofing client is seen as
//! itself; a connection without a valid header on a `proxy_protocol` listener is closed.
//!
//! Loopback has every 127.0.0.0/8 address, so each party has its own: the test's client
//! connects from 127.0.0.4, HAProxy connects to tessera from 127.0.0.3 (the one trusted
//! proxy), and tessera listens on 127.0.0.1 (plain) and 127.0.0.2 (PROXY protocol).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::harness::{
    eventually, printed_addr, read_response, read_to_close, Response, Server, Site,
};
use crate::metrics::{admin_addr, admin_get, samples};
use crate::tls::make_cert;

const CLIENT: &str = "127.0.0.4";
const PROXY: &str = "127.0.0.3";

/// A TCP connection from `source` (port chosen by the kernel) to `to`.
fn connect_from(source: &str, to: SocketAddr) -> TcpStream {
    let source: SocketAddr = SocketAddr::new(source.parse().unwrap(), 0);
    let socket = socket2::Socket::new(
        socket2::Domain::for_address(to),
        socket2::Type::STREAM,
        None,
    )
    .unwrap();
    socket.bind(&source.into()).unwrap();
    socket.connect(&to.into()).unwrap();
    let stream: TcpStream = socket.into();
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    stream
}

fn get(stream: &mut TcpStream, path: &str, fields: &str) -> Response {
    write!(stream, "GET {path} HTTP/1.1\r\nHost: t\r\n{fields}\r\n").unwrap();
    read_response(stream, false)
}

fn body(r: &Response) -> String {
    String::from_utf8_lossy(&r.body).into_owned()
}

/// One tessera with a plain listener on 127.0.0.1, PROXY protocol listeners on
/// 127.0.0.2 (cleartext and TLS) and [::1], 127.0.0.3 and ::1 trusted.
struct Edge {
    site: Site,
    server: Server,
    plain: SocketAddr,
    proxied: SocketAddr,
    proxied_tls: SocketAddr,
    proxied_v6: SocketAddr,
}

impl Edge {
    fn start(extra: &str) -> Edge {
        let site = Site::new();
        let dir = site.dir.path();
        std::fs::write(
            dir.join("who.lua"),
            "local M = {}\n\
             function M.content(r)\n\
               local tlv = r:proxy_tlv(0xEA)\n\
               return r:client() .. ' ' .. r:peer() .. ' ' .. (tlv and tlv:sub(2) or '-')\n\
             end\n\
             return M\n",
        )
        .unwrap();
        let cert = make_cert(dir, "localhost", &["localhost"]);
        let toml = format!(
            "tls_listen = [\"127.0.0.2:0\"]\n\
             proxy_protocol = [\"127.0.0.2:0\", \"[::1]:0\"]\n\
             trusted_proxies = [\"{PROXY}\", \"::1\"]\n\
             access_log = {log:?}\n\
             access_log_format = \"%a %{{peer}}x %{{proxy_tlv_0x05}}x %{{proxy_tlv_0xEA}}x %U\"\n\
             admin_listen = \"127.0.0.1:0\"\n\
             {extra}\n\
             [timeouts]\nproxy_protocol = 1\n\
             [tls]\ncertificate = {cert:?}\nkey = {key:?}\n\
             [[route]]\npath = \"/ip\"\nrespond = {{ status = 200, body = \"$remote_addr\" }}\n\
             [[route]]\npath = \"/inside\"\nclient = [\"{CLIENT}\", \"2001:db8::/32\"]\n\
             respond = {{ status = 200, body = \"inside\" }}\n\
             [[script]]\nprefix = \"/who\"\npath = {who:?}\n",
            log = dir.join("access.log"),
            cert = cert.cert,
            key = cert.key,
            who = dir.join("who.lua"),
        );
        let config = dir.join("tessera.toml");
        std::fs::write(&config, toml).unwrap();
        let server = Server::start(
            &site.root(),
            &[
                "--config",
                config.to_str().unwrap(),
                "--listen",
                "127.0.0.1:0",
                "--listen",
                "127.0.0.2:0",
                "--listen",
                "[::1]:0",
            ],
        );
        let plain = server.addr;
        let proxied = printed_addr(&server, "http://127.0.0.2");
        let proxied_tls = printed_addr(&server, "https://127.0.0.2");
        let proxied_v6 = printed_addr(&server, "http://[::1]");
        Edge {
            site,
            server,
            plain,
            proxied,
            proxied_tls,
            proxied_v6,
        }
    }

    /// The access log's lines once there are `n`.
    fn log_lines(&self, n: usize) -> Vec<String> {
        let path = self.site.dir.path().join("access.log");
        let started = Instant::now();
        loop {
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            let lines: Vec<String> = text.lines().map(str::to_string).collect();
            if lines.len() >= n || started.elapsed() > Duration::from_secs(10) {
                return lines;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn refused(&self) -> f64 {
        let (_, text) = admin_get(admin_addr(&self.server), "/metrics", "");
        samples(&text)
            .get("tessera_access_denied_total{host=\"\",reason=\"proxy_protocol\"}")
            .copied()
            .unwrap_or(0.0)
    }
}

/// HAProxy (from apt; scripts/test.sh installs it) with the config `config`, killed on
/// drop.
struct Haproxy {
    child: Child,
    _dir: tempfile::TempDir,
}

impl Haproxy {
    fn start(frontends: &str, ports: &[SocketAddr]) -> Haproxy {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("haproxy.cfg");
        std::fs::write(
            &config,
            format!(
                "defaults\n  mode http\n  timeout connect 5s\n  timeout client 20s\n  \
                 timeout server 20s\n{frontends}"
            ),
        )
        .unwrap();
        let child = Command::new("haproxy")
            .args(["-f", config.to_str().unwrap(), "-db"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("haproxy (scripts/test.sh installs it)");
        for &port in ports {
            eventually("haproxy to listen", || TcpStream::connect(port).is_ok());
        }
        Haproxy { child, _dir: dir }
    }
}

impl Drop for Haproxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port(ip: &str) -> SocketAddr {
    TcpListener::bind((ip, 0)).unwrap().local_addr().unwrap()
}

/// An HAProxy frontend on `bind` that adds X-Forwarded-For and passes each request to
/// `server` (`SERVER-LINE-OPTIONS`).
fn frontend(name: &str, bind: SocketAddr, to: SocketAddr, options: &str) -> String {
    let bind = match bind {
        SocketAddr::V6(v6) => format!("ipv6@{}:{}", v6.ip(), v6.port()),
        v4 => v4.to_string(),
    };
    format!(
        "frontend fe_{name}\n  bind {bind}\n  option forwardfor\n  unique-id-format uid-%ci\n  \
         default_backend be_{name}\nbackend be_{name}\n  server t {to} {options}\n"
    )
}

#[test]
fn haproxy_sending_proxy_v2_and_v1_names_the_original_client_everywhere() {
    let edge = Edge::start("");
    let (v2, v1, v6, tls) = (
        free_port("127.0.0.1"),
        free_port("127.0.0.1"),
        free_port("::1"),
        free_port("127.0.0.1"),
    );
    let from_proxy = format!("source {PROXY}");
    let config = [
        frontend(
            "v2",
            v2,
            edge.proxied,
            &format!("send-proxy-v2 proxy-v2-options unique-id {from_proxy}"),
        ),
        frontend("v1", v1, edge.proxied, &format!("send-proxy {from_proxy}")),
        frontend(
            "v6",
            v6,
            edge.proxied,
            &format!("send-proxy-v2 {from_proxy}"),
        ),
        frontend(
            "tls",
            tls,
            edge.proxied_tls,
            &format!("send-proxy-v2 ssl verify none sni str(localhost) {from_proxy}"),
        ),
    ]
    .concat();
    let _haproxy = Haproxy::start(&config, &[v2, v1, v6, tls]);
    for (front, source, client) in [
        (v2, CLIENT, CLIENT),
        (v1, CLIENT, CLIENT),
        (v6, "::1", "::1"),
        (tls, CLIENT, CLIENT),
    ] {
        let mut stream = connect_from(source, front);
        // A client's own X-Forwarded-For goes through HAProxy, which appends the
        // address it saw: the right-most untrusted address is still the client. (::1
        // is a trusted proxy here, so it sends none.)
        let spoof = match source {
            "::1" => "",
            _ => "X-Forwarded-For: 6.6.6.6\r\n",
        };
        let ip = get(&mut stream, "/ip", spoof);
        assert_eq!((ip.status, body(&ip)), (200, client.to_string()), "{front}");
        let who = get(&mut stream, "/who", spoof);
        assert_eq!(body(&who), format!("{client} {PROXY} -"), "{front}");
        let inside = get(&mut stream, "/inside", spoof);
        let expected = if client == CLIENT { 200 } else { 404 };
        assert_eq!(inside.status, expected, "{front}");
    }
    let lines = edge.log_lines(12);
    assert_eq!(lines.len(), 12, "{lines:?}");
    assert_eq!(lines[0], format!("{CLIENT} {PROXY} uid-{CLIENT} - /ip"));
    assert_eq!(lines[3], format!("{CLIENT} {PROXY} - - /ip"));
    assert_eq!(lines[6], format!("::1 {PROXY} - - /ip"));
    assert_eq!(lines[9], format!("{CLIENT} {PROXY} - - /ip"));
}

#[test]
fn a_client_spoofing_forwarded_for_through_an_untrusted_peer_is_seen_as_itself() {
    let edge = Edge::start("");
    let mut direct = connect_from("127.0.0.5", edge.plain);
    let spoof = "X-Forwarded-For: 192.0.2.66\r\n";
    assert_eq!(body(&get(&mut direct, "/ip", spoof)), "127.0.0.5");
    let inside = format!("X-Forwarded-For: {CLIENT}\r\n");
    assert_eq!(get(&mut direct, "/inside", &inside).status, 404);
    // The same field from the trusted proxy names the client.
    let mut trusted = connect_from(PROXY, edge.plain);
    let named = get(
        &mut trusted,
        "/ip",
        "X-Forwarded-For: 6.6.6.6, 192.0.2.66\r\n",
    );
    assert_eq!(body(&named), "192.0.2.66");
    let who = get(&mut trusted, "/who", "X-Forwarded-For: 2001:db8::9\r\n");
    assert_eq!(body(&who), format!("2001:db8::9 {PROXY} -"));
    let lines = edge.log_lines(4);
    assert_eq!(lines[0], "127.0.0.5 127.0.0.5 - - /ip");
    assert_eq!(lines[2], format!("192.0.2.66 {PROXY} - - /ip"));
}

/// A PROXY v2 header for a TCP4 connection from `source`, with TLVs.
fn v2_header(source: [u8; 4], port: u16, tlvs: &[u8]) -> Vec<u8> {
    let mut h = b"\r\n\r\n\0\r\nQUIT\n\x21\x11".to_vec();
    h.extend_from_slice(&((12 + tlvs.len()) as u16).to_be_bytes());
    h.extend_from_slice(&source);
    h.extend_from_slice(&[127, 0, 0, 2]);
    h.extend_from_slice(&port.to_be_bytes());
    h.extend_from_slice(&80u16.to_be_bytes());
    h.extend_from_slice(tlvs);
    h
}

#[test]
fn a_missing_or_malformed_header_closes_the_connection_and_a_good_one_is_served() {
    let edge = Edge::start("");
    let request = b"GET /ip HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n";
    let attempts: [&[u8]; 3] = [
        request,
        b"PROXY TCP4 192.0.2.1 127.0.0.2 01 80\r\nGET /ip HTTP/1.1\r\nHost: t\r\n\r\n",
        b"\r\n\r\n\0\r\nQUIT\n\x21\x17\0\0GET /ip HTTP/1.1\r\nHost: t\r\n\r\n",
    ];
    for attempt in attempts {
        let mut stream = connect_from(PROXY, edge.proxied);
        stream.write_all(attempt).unwrap();
        assert_eq!(read_to_close(&mut stream), b"", "{attempt:?}");
    }
    // A connection that sends nothing is closed after timeouts.proxy_protocol (1 s).
    let mut silent = connect_from(PROXY, edge.proxied);
    let started = Instant::now();
    assert_eq!(read_to_close(&mut silent), b"");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    // The AWS VPC endpoint id (type 0xEA, subtype 0x01), split over two writes.
    let tlv = [&[0xea, 0, 14, 0x01][..], b"vpce-0abc1234"].concat();
    let header = v2_header([198, 51, 100, 9], 40000, &tlv);
    let mut good = connect_from(PROXY, edge.proxied);
    good.write_all(&header[..20]).unwrap();
    std::thread::sleep(Duration::from_millis(100));
    good.write_all(&header[20..]).unwrap();
    let who = get(&mut good, "/who", "");
    assert_eq!(body(&who), format!("198.51.100.9 {PROXY} vpce-0abc1234"));
    // From an untrusted peer the header is read (the listener requires it) but its
    // source is not believed.
    let mut untrusted = connect_from(CLIENT, edge.proxied);
    untrusted
        .write_all(&v2_header([198, 51, 100, 9], 1, &[]))
        .unwrap();
    assert_eq!(body(&get(&mut untrusted, "/ip", "")), CLIENT);
    // v1 UNKNOWN and v2 LOCAL (a balancer's health check): the peer is the client.
    let mut local = connect_from(PROXY, edge.proxied);
    local
        .write_all(b"\r\n\r\n\0\r\nQUIT\n\x20\x00\x00\x00")
        .unwrap();
    assert_eq!(body(&get(&mut local, "/ip", "")), PROXY);
    let mut unknown = connect_from(PROXY, edge.proxied);
    unknown.write_all(b"PROXY UNKNOWN\r\n").unwrap();
    assert_eq!(body(&get(&mut unknown, "/ip", "")), PROXY);
    let lines = edge.log_lines(4);
    assert_eq!(
        lines[0],
        format!("198.51.100.9 {PROXY} - \\x01vpce-0abc1234 /who")
    );
    eventually("4 refusals counted", || edge.refused() == 4.0);
}

#[test]
fn ipv6_clients_in_proxy_headers_and_on_ipv6_listeners() {
    let edge = Edge::start("");
    let mut v1 = connect_from("::1", edge.proxied_v6);
    v1.write_all(b"PROXY TCP6 2001:db8::7 ::1 5000 80\r\n")
        .unwrap();
    assert_eq!(body(&get(&mut v1, "/ip", "")), "2001:db8::7");
    assert_eq!(get(&mut v1, "/inside", "").status, 200);
    let mut v2 = connect_from("::1", edge.proxied_v6);
    let mut header = b"\r\n\r\n\0\r\nQUIT\n\x21\x21\x00\x24".to_vec();
    header.extend_from_slice(
        &"2001:db8::8"
            .parse::<std::net::Ipv6Addr>()
            .unwrap()
            .octets(),
    );
    header.extend_from_slice(&std::net::Ipv6Addr::LOCALHOST.octets());
    header.extend_from_slice(&[0x13, 0x88, 0, 80]);
    v2.write_all(&header).unwrap();
    assert_eq!(body(&get(&mut v2, "/who", "")), "2001:db8::8 ::1 -");
}

/// An origin that expects a PROXY header on each connection: it answers every request
/// with the header's line (v1) or its source (v2), the X-Forwarded-For it was sent, and
/// how many connections it has seen.
fn origin() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for (n, stream) in listener.incoming().enumerate() {
            let Ok(stream) = stream else { return };
            std::thread::spawn(move || serve_origin(stream, n + 1));
        }
    });
    addr
}

fn serve_origin(stream: TcpStream, connection: usize) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut first = [0u8; 16];
    if reader.read_exact(&mut first[..5]).is_err() {
        return;
    }
    let header = if &first[..5] == b"PROXY" {
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
        format!("PROXY{}", line.trim_end())
    } else {
        reader.read_exact(&mut first[5..]).unwrap();
        let len = u16::from_be_bytes([first[14], first[15]]) as usize;
        let mut rest = vec![0u8; len];
        reader.read_exact(&mut rest).unwrap();
        match first[12] {
            0x21 => format!(
                "v2 {}.{}.{}.{}:{}",
                rest[0],
                rest[1],
                rest[2],
                rest[3],
                u16::from_be_bytes([rest[8], rest[9]])
            ),
            _ => "v2 LOCAL".into(),
        }
    };
    let mut stream = stream;
    loop {
        let mut xff = String::from("-");
        let mut line = String::new();
        loop {
            line.clear();
            if reader.read_line(&mut line).unwrap_or(0) == 0 {
                return;
            }
            if line == "\r\n" {
                break;
            }
            if let Some(v) = line.to_ascii_lowercase().strip_prefix("x-forwarded-for:") {
                xff = v.trim().to_string();
            }
        }
        let body = format!("{header}|{xff}|{connection}");
        let reply = format!(
            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        if stream.write_all(reply.as_bytes()).is_err() {
            return;
        }
    }
}

#[test]
fn send_proxy_names_the_client_to_an_origin_that_checks_the_header() {
    let (v1, v2) = (origin(), origin());
    let edge = Edge::start(&format!(
        "[[upstream]]\nname = \"v1\"\naddresses = [\"{v1}\"]\nsend_proxy = \"v1\"\n\
         [[upstream]]\nname = \"v2\"\naddresses = [\"{v2}\"]\nsend_proxy = \"v2\"\n\
         [[route]]\nprefix = \"/v1\"\nupstream = \"v1\"\n\
         [[route]]\nprefix = \"/v2\"\nupstream = \"v2\"\n\
         [cache]\npurge_allow = [\"192.0.2.66\"]\n"
    ));
    let mut client = connect_from(CLIENT, edge.plain);
    let port = client.local_addr().unwrap().port();
    let first = body(&get(&mut client, "/v1/a", ""));
    let plain = edge.plain;
    let expected = format!(
        "PROXY TCP4 {CLIENT} 127.0.0.1 {port} {}|{CLIENT}|1",
        v1.port()
    );
    assert_eq!(first, expected, "{plain}");
    // The same client's next request reuses the connection.
    assert_eq!(body(&get(&mut client, "/v1/b", "")), expected);
    let v2_first = body(&get(&mut client, "/v2/a", ""));
    assert_eq!(v2_first, format!("v2 {CLIENT}:{port}|{CLIENT}|1"));
    // Another client gets a connection of its own, whose header names it; a client the
    // trusted proxy names (by X-Forwarded-For) is the one named upstream, and the
    // trusted hops after it are not forwarded.
    let mut proxy = connect_from(PROXY, edge.plain);
    let xff = "X-Forwarded-For: 6.6.6.6, 192.0.2.66, 127.0.0.3\r\n";
    let named = body(&get(&mut proxy, "/v2/c", xff));
    assert_eq!(named, "v2 192.0.2.66:0|6.6.6.6, 192.0.2.66|2");
    // purge_allow judges the client too: the one the trusted proxy names may purge,
    // the proxy itself and a client claiming that address directly may not.
    let purge = |stream: &mut TcpStream, fields: &str| {
        write!(stream, "PURGE /v2/c HTTP/1.1\r\nHost: t\r\n{fields}\r\n").unwrap();
        read_response(stream, false).status
    };
    assert_ne!(purge(&mut proxy, "X-Forwarded-For: 192.0.2.66\r\n"), 403);
    assert_eq!(purge(&mut proxy, ""), 403);
    let mut spoofer = connect_from("127.0.0.5", edge.plain);
    assert_eq!(purge(&mut spoofer, "X-Forwarded-For: 192.0.2.66\r\n"), 403);
}

#[test]
fn admin_allow_and_a_hosts_forwarded_field_take_the_named_client() {
    let edge = Edge::start(
        "admin_allow = [\"192.0.2.66\"]\n\
         [[host]]\nnames = [\"fwd.test\"]\nreal_ip_from = \"forwarded\"\n\
         [[host.route]]\npath = \"/ip\"\nrespond = { status = 200, body = \"$remote_addr\" }\n",
    );
    let admin = admin_addr(&edge.server);
    let healthz = |source: &str, fields: &str| {
        let mut stream = connect_from(source, admin);
        write!(
            stream,
            "GET /healthz HTTP/1.1\r\nHost: admin\r\n{fields}\r\n"
        )
        .unwrap();
        read_response(&mut stream, false).status
    };
    assert_eq!(healthz(PROXY, "X-Forwarded-For: 192.0.2.66\r\n"), 200);
    assert_eq!(healthz(PROXY, ""), 403);
    assert_eq!(healthz(CLIENT, "X-Forwarded-For: 192.0.2.66\r\n"), 403);
    // The host reads RFC 7239 Forwarded (and not X-Forwarded-For); the top level
    // X-Forwarded-For.
    let mut proxy = connect_from(PROXY, edge.plain);
    let ask = |stream: &mut TcpStream, host: &str, fields: &str| {
        write!(stream, "GET /ip HTTP/1.1\r\nHost: {host}\r\n{fields}\r\n").unwrap();
        body(&read_response(stream, false))
    };
    let fields = "Forwarded: for=192.0.2.1;proto=https, for=\"[2001:db8::5]:4711\"\r\n\
                  X-Forwarded-For: 198.51.100.1\r\n";
    assert_eq!(ask(&mut proxy, "fwd.test", fields), "2001:db8::5");
    assert_eq!(ask(&mut proxy, "t", fields), "198.51.100.1");
    // A Forwarded field that does not parse is not read at all.
    assert_eq!(
        ask(&mut proxy, "fwd.test", "Forwarded: for=[2001:db8::5]\r\n"),
        PROXY
    );
}

#[test]
fn http2_with_prior_knowledge_follows_a_proxy_header() {
    let edge = Edge::start("");
    let mut stream = connect_from(PROXY, edge.proxied);
    let mut hello = v2_header([198, 51, 100, 9], 1, &[]);
    hello.extend_from_slice(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n");
    hello.extend_from_slice(&[0, 0, 0, 4, 0, 0, 0, 0, 0]);
    stream.write_all(&hello).unwrap();
    let mut frame = [0u8; 9];
    std::io::Read::read_exact(&mut stream, &mut frame).unwrap();
    assert_eq!(
        frame[3], 4,
        "the server's first frame is SETTINGS: {frame:?}"
    );
}
