//! gRPC through tessera (docs/upstreams.md, "gRPC"): a grpcio server (Python, written
//! here with generic handlers: the messages are raw bytes, no protobuf) behind an
//! `"h2c"` upstream, and grpcio clients in front: unary, server streaming, client
//! streaming and 10,000 messages both ways at once, an error status with its message,
//! a deadline, and an origin that is down.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

use crate::harness::{Server, Site};

const SCRIPT: &str = r#"
import sys, time, grpc
from concurrent import futures

def server():
    def unary(req, ctx):
        return b"echo:" + req
    def server_stream(req, ctx):
        for i in range(int(req)):
            yield b"m%d" % i
    def client_stream(it, ctx):
        n = total = 0
        for m in it:
            n += 1
            total += len(m)
        return b"%d %d" % (n, total)
    def bidi(it, ctx):
        for m in it:
            yield m + b"!"
    def fail(req, ctx):
        ctx.abort(grpc.StatusCode.INVALID_ARGUMENT, "bad request: " + req.decode())
    def slow(req, ctx):
        time.sleep(3)
        return b"late"
    h = grpc.method_handlers_generic_handler("t.T", {
        "Unary": grpc.unary_unary_rpc_method_handler(unary),
        "ServerStream": grpc.unary_stream_rpc_method_handler(server_stream),
        "ClientStream": grpc.stream_unary_rpc_method_handler(client_stream),
        "Bidi": grpc.stream_stream_rpc_method_handler(bidi),
        "Fail": grpc.unary_unary_rpc_method_handler(fail),
        "Slow": grpc.unary_unary_rpc_method_handler(slow),
    })
    s = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    s.add_generic_rpc_handlers((h,))
    port = s.add_insecure_port("127.0.0.1:0")
    s.start()
    print(port, flush=True)
    s.wait_for_termination()

def client(addr, case):
    ch = grpc.insecure_channel(addr)
    try:
        if case == "unary":
            print(ch.unary_unary("/t.T/Unary")(b"hello", timeout=10).decode())
        elif case == "server_stream":
            got = list(ch.unary_stream("/t.T/ServerStream")(b"1000", timeout=30))
            print(len(got), got[0].decode(), got[-1].decode())
        elif case == "client_stream":
            msgs = (b"x" * (i % 100) for i in range(10000))
            print(ch.stream_unary("/t.T/ClientStream")(msgs, timeout=60).decode())
        elif case == "bidi":
            # The server answers each message as it comes: the replies flow back
            # while the requests still go out.
            msgs = (b"b%d" % i for i in range(10000))
            got = list(ch.stream_stream("/t.T/Bidi")(msgs, timeout=60))
            print(len(got), all(g == b"b%d!" % i for i, g in enumerate(got)))
        elif case == "fail":
            ch.unary_unary("/t.T/Fail")(b"42", timeout=10)
            print("no error")
        elif case == "slow":
            ch.unary_unary("/t.T/Slow")(b"", timeout=0.5)
            print("no error")
    except grpc.RpcError as e:
        print("error", e.code().name, e.details())

if sys.argv[2] == "server":
    server()
else:
    client(sys.argv[3], sys.argv[4])
"#;

/// The grpcio server, killed on drop.
struct Origin {
    child: Child,
    port: u16,
}

impl Origin {
    fn start() -> Origin {
        let mut child = Command::new("python3")
            .args(["-c", SCRIPT, "-", "server"])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let port = line.trim().parse().unwrap_or_else(|_| {
            panic!("grpcio is missing (scripts/test.sh installs it): {line:?}")
        });
        Origin { child, port }
    }
}

impl Drop for Origin {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A grpcio client's call `case` through `server`: what it printed.
fn call(server: &Server, case: &str) -> String {
    let out = Command::new("python3")
        .args(["-c", SCRIPT, "-", "client", &server.addr.to_string(), case])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

fn serve(site: &Site, port: u16) -> Server {
    site.serve_with(&format!(
        "admin_listen = \"127.0.0.1:0\"\n\n\
         [[upstream]]\nname = \"grpc\"\naddresses = [\"127.0.0.1:{port}\"]\nprotocol = \"h2c\"\n\n\
         [[route]]\nupstream = \"grpc\"\n"
    ))
}

#[test]
fn grpc_calls_stream_both_ways_with_their_trailers() {
    let origin = Origin::start();
    let site = Site::new();
    let server = serve(&site, origin.port);
    assert_eq!(call(&server, "unary"), "echo:hello");
    assert_eq!(call(&server, "server_stream"), "1000 m0 m999");
    // 10,000 messages of 0 to 99 bytes: 495,000 bytes.
    assert_eq!(call(&server, "client_stream"), "10000 495000");
    assert_eq!(call(&server, "bidi"), "10000 True");
    // The origin's status and message, in its trailers-only answer.
    assert_eq!(
        call(&server, "fail"),
        "error INVALID_ARGUMENT bad request: 42"
    );
    // The client's own deadline, or tessera's answer at the grpc-timeout the client
    // sent, whichever comes first: the same status.
    let slow = call(&server, "slow");
    assert!(slow.starts_with("error DEADLINE_EXCEEDED "), "{slow}");
    let admin = crate::metrics::admin_addr(&server);
    let (_, text) = crate::metrics::admin_get(admin, "/metrics", "");
    let samples = crate::metrics::samples(&text);
    let answered = |s: &str| {
        let key = format!("tessera_grpc_responses_total{{status=\"{s}\"}}");
        samples.get(&key).copied().unwrap_or(0.0)
    };
    assert_eq!(answered("0"), 4.0, "{text}");
    assert_eq!(answered("3"), 1.0, "{text}");
}

#[test]
fn grpc_to_an_origin_that_is_down_is_unavailable_not_a_502() {
    let site = Site::new();
    let server = serve(&site, crate::acme::free_port());
    let answer = call(&server, "unary");
    assert!(answer.starts_with("error UNAVAILABLE "), "{answer}");
    assert!(answer.contains("Connection refused"), "{answer}");
}

#[test]
fn grpc_timeout_bounds_the_wait_for_the_origin() {
    let origin = Origin::start();
    let site = Site::new();
    let server = serve(&site, origin.port);
    // curl keeps no deadline of its own: tessera answers at the grpc-timeout.
    let frame = site.dir.path().join("frame");
    std::fs::write(&frame, [0u8, 0, 0, 0, 0]).unwrap();
    let out = Command::new("curl")
        .args([
            "-s",
            "-D",
            "-",
            "-o",
            "/dev/null",
            "--http2-prior-knowledge",
        ])
        .args(["-H", "content-type: application/grpc", "-H", "te: trailers"])
        .args(["-H", "grpc-timeout: 300m", "--data-binary"])
        .arg(format!("@{}", frame.display()))
        .arg(format!("http://{}/t.T/Slow", server.addr))
        .output()
        .unwrap();
    let head = String::from_utf8_lossy(&out.stdout).to_lowercase();
    assert!(head.starts_with("http/2 200"), "{head}");
    assert!(head.contains("grpc-status: 4\r\n"), "{head}");
    // Tessera's answer (the origin sleeps 3 s, then answers "late" with status 0).
    assert!(head.contains("grpc-message: grpc-timeout passed"), "{head}");
}
