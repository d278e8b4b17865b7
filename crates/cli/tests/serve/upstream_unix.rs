//! Upstreams on Unix domain sockets (`unix:PATH` addresses; docs/upstreams.md, "Unix
//! socket peers"): the real binary in front of a Python HTTP/1.1 server on a socket the
//! test makes, which numbers its connections so that pooling shows.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use crate::harness::{eventually, stderr_has, Server, Site};
use crate::metrics::{admin_addr, admin_get, samples};

/// A keep-alive HTTP/1.1 server on the Unix socket `argv[1]`: each answer names the
/// request's path and Host and the number of the connection it came on. `/health`
/// answers 503 while the file `argv[2]` exists.
const ORIGIN: &str = r#"
import http.server, itertools, os, socketserver, sys

path, down = sys.argv[1:3]
numbers = itertools.count(1)

class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def setup(self):
        super().setup()
        self.number = next(numbers)

    def do_GET(self):
        status = 503 if self.path == "/health" and os.path.exists(down) else 200
        body = ("path=%s host=%s connection=%d\n" % (
            self.path, self.headers.get("Host"), self.number)).encode()
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def address_string(self):
        return "unix"

    def log_message(self, *args):
        pass

class Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True

server = Server(path, Handler)
print("ready", flush=True)
server.serve_forever()
"#;

struct Origin {
    child: Child,
    socket: PathBuf,
    down: PathBuf,
}

impl Origin {
    fn start(dir: &Path) -> Origin {
        let script = dir.join("unix_origin.py");
        std::fs::write(&script, ORIGIN).unwrap();
        let socket = dir.join("app.sock");
        let down = dir.join("down");
        let mut child = Command::new("python3")
            .arg(&script)
            .arg(&socket)
            .arg(&down)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("python3");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert_eq!(line.trim(), "ready");
        Origin {
            child,
            socket,
            down,
        }
    }
}

impl Drop for Origin {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn a_unix_socket_origin_is_served_on_pooled_connections() {
    let site = Site::new();
    let origin = Origin::start(site.dir.path());
    let address = format!("unix:{}", origin.socket.display());
    let server = site.serve_with(&format!(
        "admin_listen = \"127.0.0.1:0\"\n\n\
         [[upstream]]\nname = \"app\"\naddresses = [{address:?}]\n\n\
         [upstream.health]\npath = \"/health\"\ninterval = 0.2\nunhealthy_after = 1\n\n\
         [[route]]\nupstream = \"app\"\n"
    ));
    for i in 0..3 {
        let r = server.get(&format!("/r{i}"));
        let text = String::from_utf8_lossy(&r.body).into_owned();
        assert_eq!(r.status, 200, "{text}");
        // One connection carries them all: the pool keeps it, as for a TCP peer.
        assert_eq!(text, format!("path=/r{i} host=test connection=1\n"));
    }
    let (_, text) = admin_get(admin_addr(&server), "/metrics", "");
    let metrics = samples(&text);
    assert_eq!(
        metrics.get("tessera_upstream_connections_opened_total{upstream=\"app\"}"),
        Some(&1.0)
    );
    let state =
        format!("tessera_upstream_peer_state{{upstream=\"app\",peer=\"{address}\",state=\"up\"}}");
    assert_eq!(metrics.get(&state), Some(&1.0), "{text}");
    // The health checks reach it on the socket too.
    std::fs::write(&origin.down, b"").unwrap();
    eventually("the peer taken out", || {
        stderr_has(&server, "peer unhealthy (active checks)")
    });
    assert_eq!(server.get("/x").status, 502);
    std::fs::remove_file(&origin.down).unwrap();
    eventually("the peer back", || {
        stderr_has(&server, "peer up: health checks pass")
    });
    assert_eq!(server.get("/x").status, 200);
}

#[test]
fn proxy_takes_a_unix_socket() {
    let site = Site::new();
    let origin = Origin::start(site.dir.path());
    let url = format!("unix:{}", origin.socket.display());
    let server = Server::start(&site.root(), &["--proxy", &url]);
    let r = server.get("/p");
    assert_eq!(
        String::from_utf8_lossy(&r.body),
        "path=/p host=test connection=1\n"
    );
}

#[test]
fn a_missing_socket_is_a_502_and_check_config_names_bad_unix_addresses() {
    let site = Site::new();
    let gone = site.dir.path().join("nothing.sock");
    let server = site.serve_with(&format!(
        "[[upstream]]\nname = \"app\"\naddresses = [\"unix:{}\"]\n\n\
         [[route]]\nupstream = \"app\"\n",
        gone.display()
    ));
    assert_eq!(server.get("/x").status, 502);
    let path = site.dir.path().join("bad.toml");
    for (keys, says) in [
        (
            "addresses = [\"unix:\"]",
            "upstream `app`: address \"unix:\": a Unix socket address is unix:PATH",
        ),
        (
            "addresses = [\"unix:/run/app.sock\"]\ntls = true",
            "TLS is spoken over TCP only",
        ),
        (
            "addresses = [\"unix:/run/app.sock\"]\nsend_proxy = \"v1\"",
            "send_proxy applies to TCP peers",
        ),
    ] {
        std::fs::write(
            &path,
            format!("[[upstream]]\nname = \"app\"\n{keys}\n\n[[route]]\nupstream = \"app\"\n"),
        )
        .unwrap();
        let (code, stderr) = crate::harness::check_config_output(&path);
        assert_eq!(code, Some(1), "{keys}: {stderr}");
        assert!(stderr.contains(says), "{keys}: {stderr}");
    }
}
