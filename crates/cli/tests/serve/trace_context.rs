//! W3C trace context and the OTLP export of spans (`[tracing]`): the `traceparent` each
//! upstream request and ESI fragment fetch carries, and the spans a real OTLP/HTTP
//! receiver gets (a Python one in the test that decodes them with the official
//! `opentelemetry-proto` package, installed by scripts/test.sh).

use std::io::Write;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};

use crate::harness::{eventually, read_request_head, Server, Site};
use crate::metrics::{admin_addr, admin_get, samples};

const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CLIENT_SPAN: &str = "00f067aa0ba902b7";

/// The OTLP/HTTP receiver: takes each POST as an `ExportTraceServiceRequest`, answers
/// 200 and appends one JSON line per span to its output file.
const RECEIVER: &str = r#"
import json, sys
from http.server import BaseHTTPRequestHandler, HTTPServer
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest, ExportTraceServiceResponse)

port_file, out_file = sys.argv[1], sys.argv[2]

class Receiver(BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        with open(out_file, "a") as out:
            for rs in request.resource_spans:
                service = [a.value.string_value for a in rs.resource.attributes
                           if a.key == "service.name"]
                for ss in rs.scope_spans:
                    for s in ss.spans:
                        attrs = {a.key: (a.value.string_value or a.value.int_value)
                                 for a in s.attributes}
                        out.write(json.dumps({
                            "path": self.path, "service": service,
                            "content_type": self.headers["Content-Type"],
                            "trace_id": s.trace_id.hex(), "span_id": s.span_id.hex(),
                            "parent_id": s.parent_span_id.hex(), "name": s.name,
                            "kind": s.kind, "start": s.start_time_unix_nano,
                            "end": s.end_time_unix_nano, "error": s.status.code == 2,
                            "attributes": attrs}) + "\n")
        answer = ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *args):
        pass

server = HTTPServer(("127.0.0.1", 0), Receiver)
with open(port_file + ".tmp", "w") as f:
    f.write(str(server.server_address[1]))
import os
os.rename(port_file + ".tmp", port_file)
server.serve_forever()
"#;

/// A running receiver, stopped when dropped.
struct Receiver {
    child: Child,
    addr: SocketAddr,
    spans: PathBuf,
}

impl Receiver {
    fn start(dir: &Path) -> Receiver {
        let (port_file, spans) = (dir.join("receiver.port"), dir.join("spans.jsonl"));
        let child = Command::new("python3")
            .args(["-c", RECEIVER])
            .arg(&port_file)
            .arg(&spans)
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        eventually("the OTLP receiver's port", || port_file.exists());
        let port: u16 = std::fs::read_to_string(&port_file)
            .unwrap()
            .parse()
            .unwrap();
        Receiver {
            child,
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
            spans,
        }
    }

    /// The spans received so far.
    fn spans(&self) -> Vec<serde_json::Value> {
        let text = std::fs::read_to_string(&self.spans).unwrap_or_default();
        text.lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What the origin saw of one request: its target and its `traceparent` and
/// `tracestate` fields.
type Seen = Arc<Mutex<Vec<(String, Option<String>, Option<String>)>>>;

/// An origin of one ESI page, `/esi`, that includes `/a` and `/b`; anything else is a
/// plain answer. It notes what each request carried.
fn tracing_origin() -> (SocketAddr, Seen) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let seen: Seen = Arc::default();
    let noted = seen.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut reader = std::io::BufReader::new(stream.try_clone().unwrap());
            let Some((target, fields)) = read_request_head(&mut reader) else {
                continue;
            };
            let field = |name: &str| {
                fields.iter().find_map(|f| {
                    let (n, v) = f.split_once(':')?;
                    n.eq_ignore_ascii_case(name).then(|| v.trim().to_string())
                })
            };
            let parent = field("traceparent");
            noted
                .lock()
                .unwrap()
                .push((target.clone(), parent, field("tracestate")));
            let (extra, body) = match target.as_str() {
                "/esi" => (
                    "Surrogate-Control: content=\"ESI/1.0\"\r\n",
                    "<p><esi:include src=\"/a\"/>|<esi:include src=\"/b\"/></p>",
                ),
                "/a" => ("", "A"),
                "/b" => ("", "B"),
                _ => ("", "plain"),
            };
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\n{extra}Cache-Control: no-store\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    (addr, seen)
}

/// A site proxying everything to `origin`, with `[tracing]` sending to `endpoint`, an
/// admin listener and an access log of each request's path and `%{traceparent}x`.
fn serve(site: &Site, origin: SocketAddr, tracing: &str) -> (Server, PathBuf) {
    let log = site.dir.path().join("access.log");
    let server = site.serve_with(&format!(
        r#"
        admin_listen = "127.0.0.1:0"
        access_log = {log:?}
        access_log_format = "%U %{{traceparent}}x"

        [tracing]
        {tracing}

        [[upstream]]
        name = "origin"
        addresses = ["{origin}"]

        [[route]]
        prefix = "/"
        upstream = "origin"
        "#,
        log = log.display().to_string(),
    ));
    (server, log)
}

fn get(server: &Server, path: &str, fields: &str) -> (u16, Vec<u8>) {
    let mut stream = server.connect();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: test\r\n{fields}Connection: close\r\n\r\n"
    )
    .unwrap();
    let r = crate::harness::read_response(&mut stream, false);
    (r.status, r.body)
}

/// `00-TRACE-PARENT-FLAGS`: (trace, parent, flags).
fn parts(traceparent: &str) -> (String, String, String) {
    let p: Vec<&str> = traceparent.split('-').collect();
    assert_eq!(p.len(), 4, "{traceparent}");
    assert_eq!(
        (p[0], p[1].len(), p[2].len()),
        ("00", 32, 16),
        "{traceparent}"
    );
    (p[1].into(), p[2].into(), p[3].into())
}

/// A trusted client's `traceparent` goes on to the origin and to each fragment fetch of
/// the ESI page with the same trace id and a parent id of each one's own; the receiver
/// gets the server span (child of the client's) and one client span per request sent
/// on (children of the server span), whose ids are those parent ids.
#[test]
fn an_incoming_trace_reaches_the_origin_and_each_fragment_as_a_tree_of_spans() {
    let site = Site::new();
    let receiver = Receiver::start(site.dir.path());
    let (origin, seen) = tracing_origin();
    let tracing = format!(
        "otlp_endpoint = \"http://{}/v1/traces\"\nsampling = 0.0\ntrust_incoming = true",
        receiver.addr
    );
    let (server, log) = serve(&site, origin, &tracing);
    let incoming = format!("traceparent: 00-{TRACE}-{CLIENT_SPAN}-01\r\ntracestate: shop=7\r\n");
    let (status, body) = get(&server, "/esi", &incoming);
    assert_eq!((status, &body[..]), (200, &b"<p>A|B</p>"[..]));

    let seen = seen.lock().unwrap().clone();
    let mut targets: Vec<&str> = seen.iter().map(|(t, _, _)| t.as_str()).collect();
    targets.sort();
    assert_eq!(targets, ["/a", "/b", "/esi"]);
    let mut parents = Vec::new();
    for (target, traceparent, tracestate) in &seen {
        let traceparent = traceparent.as_deref().unwrap_or_else(|| panic!("{target}"));
        let (trace, parent, flags) = parts(traceparent);
        assert_eq!((trace.as_str(), flags.as_str()), (TRACE, "01"), "{target}");
        assert_ne!(parent, CLIENT_SPAN, "{target}");
        parents.push((target.clone(), parent));
        if target == "/esi" {
            // The client's tracestate goes on with its trace.
            assert_eq!(tracestate.as_deref(), Some("shop=7"));
        }
    }
    let mut ids: Vec<&String> = parents.iter().map(|(_, p)| p).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 3, "distinct parent ids: {parents:?}");

    eventually("four spans at the receiver", || receiver.spans().len() >= 4);
    let spans = receiver.spans();
    assert_eq!(spans.len(), 4, "{spans:#?}");
    for s in &spans {
        assert_eq!(s["trace_id"], TRACE, "{s}");
        assert_eq!(s["path"], "/v1/traces");
        assert_eq!(s["content_type"], "application/x-protobuf");
        assert_eq!(s["service"][0], "tessera");
        assert!(s["end"].as_u64() >= s["start"].as_u64(), "{s}");
    }
    // SPAN_KIND_SERVER is 2, SPAN_KIND_CLIENT 3.
    let servers: Vec<_> = spans.iter().filter(|s| s["kind"] == 2).collect();
    assert_eq!(servers.len(), 1, "{spans:#?}");
    let root = servers[0];
    assert_eq!(root["parent_id"], CLIENT_SPAN);
    assert_eq!(root["name"], "GET");
    assert_eq!(root["attributes"]["url.path"], "/esi");
    assert_eq!(root["attributes"]["http.response.status_code"], 200);
    for (target, parent) in &parents {
        let child = spans
            .iter()
            .find(|s| s["span_id"] == parent.as_str())
            .unwrap_or_else(|| panic!("no span {parent} for {target}: {spans:#?}"));
        assert_eq!(child["kind"], 3, "{child}");
        assert_eq!(child["parent_id"], root["span_id"], "{child}");
        assert_eq!(child["attributes"]["url.path"], target.as_str());
        assert_eq!(child["attributes"]["server.address"], origin.to_string());
        assert_eq!(child["attributes"]["http.response.status_code"], 200);
    }
    // The log's `%{traceparent}x` names the server span.
    let wanted = format!("/esi 00-{TRACE}-{}-01", root["span_id"].as_str().unwrap());
    eventually("the log line", || {
        std::fs::read_to_string(&log).is_ok_and(|l| l.lines().any(|l| l == wanted))
    });
    let admin = admin_addr(&server);
    let metrics = samples(&admin_get(admin, "/metrics", "").1);
    assert_eq!(metrics["tessera_trace_spans_exported_total"], 4.0);
    assert_eq!(metrics["tessera_trace_spans_dropped_total"], 0.0);
}

/// Without `trust_incoming` a client's trace fields are replaced: the origin gets a trace
/// begun here (sampled at `sampling = 1`), no client `tracestate`; with `sampling = 0`
/// a request still carries a `traceparent` (not sampled), and exports nothing.
#[test]
fn an_untrusted_trace_is_replaced_and_an_unsampled_one_exports_nothing() {
    let site = Site::new();
    let receiver = Receiver::start(site.dir.path());
    let (origin, seen) = tracing_origin();
    let endpoint = format!("otlp_endpoint = \"http://{}/v1/traces\"", receiver.addr);
    let (server, log) = serve(&site, origin, &format!("{endpoint}\nsampling = 1.0"));
    let incoming = format!("traceparent: 00-{TRACE}-{CLIENT_SPAN}-01\r\ntracestate: shop=7\r\n");
    assert_eq!(get(&server, "/plain", &incoming).0, 200);
    let (_, traceparent, tracestate) = seen.lock().unwrap()[0].clone();
    let (trace, _, flags) = parts(&traceparent.unwrap());
    assert_ne!(trace, TRACE);
    assert_eq!(flags, "01");
    assert_eq!(tracestate, None);
    eventually("two spans", || receiver.spans().len() >= 2);
    let spans = receiver.spans();
    let root = spans.iter().find(|s| s["kind"] == 2).unwrap();
    assert_eq!(root["trace_id"], trace.as_str());
    // A trace begun here has no parent.
    assert_eq!(root["parent_id"], "");
    drop(server);

    let site = Site::new();
    let quiet = Receiver::start(site.dir.path());
    let (origin, seen) = tracing_origin();
    let endpoint = format!("otlp_endpoint = \"http://{}/v1/traces\"", quiet.addr);
    let (server, log2) = serve(&site, origin, &format!("{endpoint}\nsampling = 0.0"));
    assert_eq!(get(&server, "/plain", "").0, 200);
    let (_, traceparent, _) = seen.lock().unwrap()[0].clone();
    let (_, _, flags) = parts(&traceparent.unwrap());
    assert_eq!(flags, "00");
    eventually("the log line", || {
        std::fs::read_to_string(&log2).is_ok_and(|l| l.starts_with("/plain 00-"))
    });
    let admin = admin_addr(&server);
    let metrics = samples(&admin_get(admin, "/metrics", "").1);
    assert_eq!(metrics["tessera_trace_spans_exported_total"], 0.0);
    assert!(quiet.spans().is_empty());
    assert!(std::fs::read_to_string(&log)
        .unwrap()
        .starts_with("/plain 00-"));
}

/// With the receiver stopped, requests are answered as ever and the spans that could
/// not be sent are counted as dropped.
#[test]
fn a_stopped_receiver_fails_no_request_and_its_spans_are_counted_dropped() {
    let site = Site::new();
    let receiver = Receiver::start(site.dir.path());
    let stopped = receiver.addr;
    drop(receiver);
    let (origin, _) = tracing_origin();
    let tracing = format!("otlp_endpoint = \"http://{stopped}/v1/traces\"\nsampling = 1.0");
    let (server, _) = serve(&site, origin, &tracing);
    for _ in 0..20 {
        let (status, body) = get(&server, "/esi", "");
        assert_eq!((status, &body[..]), (200, &b"<p>A|B</p>"[..]));
    }
    let admin = admin_addr(&server);
    // 20 pages, each a server span and three client spans.
    let dropped = || {
        let metrics = samples(&admin_get(admin, "/metrics", "").1);
        metrics["tessera_trace_spans_dropped_total"]
    };
    eventually("80 spans dropped", || dropped() >= 80.0);
    let metrics = samples(&admin_get(admin, "/metrics", "").1);
    assert_eq!(metrics["tessera_trace_spans_exported_total"], 0.0);
    assert_eq!(dropped(), 80.0);
}

/// check-config names the `[tracing]` key that is wrong and says why.
#[test]
fn check_config_names_a_bad_tracing_key() {
    let site = Site::new();
    let config = site.dir.path().join("check.toml");
    std::fs::write(
        &config,
        "[tracing]\notlp_endpoint = \"https://collector:4318/v1/traces\"\nsampling = 1.5\n",
    )
    .unwrap();
    let (code, stderr) = crate::harness::check_config_output(&config);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains(":2: tracing.otlp_endpoint: https is not supported"),
        "{stderr}"
    );
    assert!(
        stderr.contains(":3: tracing.sampling: must be between 0 and 1"),
        "{stderr}"
    );
}

/// The interface of issue 48 as written (the access log's JSON fields and `[tracing]`)
/// is a valid configuration.
#[test]
fn the_interface_as_written_is_valid() {
    let site = Site::new();
    let config = site.dir.path().join("interface.toml");
    let log = site.dir.path().join("access.log");
    std::fs::write(
        &config,
        format!(
            r#"access_log = {log:?}
access_log_format = "json"            # or a format string with the directives above
json_fields = ["time", "client", "host", "route", "method", "uri", "status", "bytes_sent", "duration",
               "upstream_addr", "upstream_status", "upstream_connect_time", "upstream_header_time",
               "upstream_response_time", "cache", "request_id", "traceparent"]

[tracing]
otlp_endpoint = "http://127.0.0.1:4318/v1/traces"
sampling = 0.01
trust_incoming = true                 # honour a client's traceparent
"#,
            log = log.display().to_string()
        ),
    )
    .unwrap();
    let (code, stderr) = crate::harness::check_config_output(&config);
    assert_eq!(code, Some(0), "{stderr}");
}
