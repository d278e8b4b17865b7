use std::io::{Read, Write};
use std::time::{Duration, Instant};

use crate::harness::{check_config_output, read_response, Server, Site};

/// Waits until `path` has at least `lines` lines (the writer flushes within a second).
fn wait_for_lines(path: &std::path::Path, lines: usize) -> Vec<String> {
    let started = Instant::now();
    loop {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        let found: Vec<String> = text.lines().map(str::to_string).collect();
        if found.len() >= lines || started.elapsed() > Duration::from_secs(10) {
            return found;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn combined_format_with_apache_escaping() {
    let site = Site::new();
    let log = site.dir.path().join("access.log");
    let server = Server::start(&site.root(), &["--access-log", log.to_str().unwrap()]);
    let mut stream = server.connect();
    stream
        .write_all(b"GET /hello.txt?a=1 HTTP/1.1\r\nHost: t\r\nReferer: http://example.com/\r\nUser-Agent: Agent \"quoted\" \\ \xc3\xa9\r\n\r\n")
        .unwrap();
    assert_eq!(read_response(&mut stream, false).status, 200);
    stream.write_all(b"HEAD /missing HTTP/1.0\r\n\r\n").unwrap();
    assert_eq!(read_response(&mut stream, true).status, 404);
    let bad = server.exchange(b"GET / HTTP/1.1\r\n\r\n");
    assert!(bad.starts_with(b"HTTP/1.1 400 "));
    let lines = wait_for_lines(&log, 3);
    assert_eq!(lines.len(), 3, "{lines:?}");
    let time = r"\[\d\d/[A-Z][a-z][a-z]/\d{4}:\d\d:\d\d:\d\d \+0000\]";
    let expected = [
        format!(
            r#"^127\.0\.0\.1 - - {time} "GET /hello\.txt\?a=1 HTTP/1\.1" 200 12 "http://example\.com/" "Agent \\"quoted\\" \\\\ \\xc3\\xa9"$"#
        ),
        format!(r#"^127\.0\.0\.1 - - {time} "HEAD /missing HTTP/1\.0" 404 - "-" "-"$"#),
        format!(r#"^127\.0\.0\.1 - - {time} "GET / HTTP/1\.1" 400 \d+ "-" "-"$"#),
    ];
    for (line, pattern) in lines.iter().zip(expected) {
        assert!(
            regex_lite::Regex::new(&pattern).unwrap().is_match(line),
            "{line}\n  !~ {pattern}"
        );
    }
}

#[test]
fn custom_format_with_duration_and_response_headers() {
    let site = Site::new();
    let log = site.dir.path().join("access.log");
    let server = site.serve_with(&format!(
        "access_log = {:?}\naccess_log_format = \"%m %U%q %s %B %D %{{Content-Type}}o %%\"\n",
        log.display().to_string()
    ));
    assert_eq!(server.get("/style.css?v=2").status, 200);
    let lines = wait_for_lines(&log, 1);
    let re = regex_lite::Regex::new(r"^GET /style\.css\?v=2 200 7 \d+ text/css; charset=utf-8 %$")
        .unwrap();
    assert!(re.is_match(&lines[0]), "{}", lines[0]);
}

#[test]
fn sigusr1_reopens_the_log_for_logrotate() {
    let site = Site::new();
    let log = site.dir.path().join("access.log");
    let rotated = site.dir.path().join("access.log.1");
    let server = Server::start(&site.root(), &["--access-log", log.to_str().unwrap()]);
    assert_eq!(server.get("/hello.txt").status, 200);
    assert_eq!(wait_for_lines(&log, 1).len(), 1);
    std::fs::rename(&log, &rotated).unwrap();
    server.signal(libc::SIGUSR1);
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(server.get("/style.css").status, 200);
    let new_lines = wait_for_lines(&log, 1);
    assert_eq!(new_lines.len(), 1);
    assert!(new_lines[0].contains("/style.css"));
    assert_eq!(wait_for_lines(&rotated, 1).len(), 1);
}

#[test]
fn bad_format_is_a_clear_error() {
    let site = Site::new();
    let config = site.dir.path().join("bad.toml");
    std::fs::write(
        &config,
        "access_log = \"/tmp/x.log\"\naccess_log_format = \"%h %Q\"\n",
    )
    .unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tessera"))
        .args(["serve", "--listen", "127.0.0.1:0", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("%Q"), "{stderr}");
}

#[test]
fn a_full_disk_drops_lines_counts_them_and_never_blocks_requests() {
    let site = Site::new();
    // Every write to /dev/full fails with ENOSPC.
    let mut server = Server::start(&site.root(), &["--access-log", "/dev/full"]);
    for _ in 0..20 {
        assert_eq!(server.get("/hello.txt").status, 200);
    }
    std::thread::sleep(Duration::from_millis(600));
    server.signal(libc::SIGTERM);
    assert_eq!(server.child.wait().unwrap().code(), Some(0));
    std::thread::sleep(Duration::from_millis(100));
    let stderr = server.stderr.lock().unwrap().join("\n");
    assert!(stderr.contains("access log write failed"), "{stderr}");
    assert!(
        stderr.contains("20 access log lines were dropped"),
        "{stderr}"
    );
}

#[test]
fn a_stalled_log_writer_never_delays_requests() {
    let site = Site::new();
    let fifo = site.dir.path().join("log.fifo");
    let path = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: mkfifo with a valid path.
    assert_eq!(unsafe { libc::mkfifo(path.as_ptr(), 0o600) }, 0);
    // Hold the read end open and never read: once the pipe's buffer is full, the
    // writer thread blocks in write(2), like a disk that stopped answering.
    let reader = std::thread::spawn({
        let fifo = fifo.clone();
        move || std::fs::File::open(fifo).unwrap()
    });
    let config = site.dir.path().join("short.toml");
    std::fs::write(&config, "shutdown_timeout = 1\n").unwrap();
    let mut server = Server::start(
        &site.root(),
        &[
            "--access-log",
            fifo.to_str().unwrap(),
            "--config",
            config.to_str().unwrap(),
        ],
    );
    let _read_end = reader.join().unwrap();
    let mut stream = server.connect();
    let mut worst = Duration::ZERO;
    // Enough lines to fill the pipe many times over.
    for _ in 0..5000 {
        let asked = Instant::now();
        stream
            .write_all(b"GET /hello.txt HTTP/1.1\r\nHost: t\r\nUser-Agent: a-rather-long-user-agent-string-to-fill-the-log-faster-0123456789\r\n\r\n")
            .unwrap();
        assert_eq!(read_response(&mut stream, false).status, 200);
        worst = worst.max(asked.elapsed());
    }
    assert!(
        worst < Duration::from_millis(500),
        "a request waited {worst:?} on the log"
    );
    // And the stalled writer does not keep the server from exiting.
    drop(stream);
    let asked = Instant::now();
    server.signal(libc::SIGTERM);
    assert_eq!(server.child.wait().unwrap().code(), Some(0));
    assert!(asked.elapsed() < Duration::from_secs(5));
}

#[test]
fn tessera_logs_reads_the_servers_own_access_log() {
    let site = Site::new();
    let log = site.dir.path().join("access.log");
    let server = Server::start(&site.root(), &["--access-log", log.to_str().unwrap()]);
    let mut stream = server.connect();
    // Escaped quotes and a non-ASCII byte in the User-Agent must parse back.
    for path in ["/hello.txt", "/style.css", "/hello.txt", "/missing"] {
        write!(
            stream,
            "GET {path} HTTP/1.1\r\nHost: t\r\nUser-Agent: Agent \"q\" \\ \u{e9}\r\n\r\n"
        )
        .unwrap();
        read_response(&mut stream, false);
    }
    assert_eq!(wait_for_lines(&log, 4).len(), 4);
    let report = crate::harness::logs_report_json(&log);
    assert_eq!(report["hits"], 4);
    assert_eq!(report["malformed"], 0);
    assert_eq!(report["top_urls_by_hits"][0]["url"], "/hello.txt");
    assert_eq!(report["top_urls_by_hits"][0]["hits"], 2);
}

/// `access_log_format = "json"`: one object per line that Python's json module parses,
/// whatever the request holds (quotes, control characters, invalid UTF-8), with the
/// host and the routing rule that chose the request.
#[test]
fn json_lines_parse_whatever_the_request_holds() {
    let site = Site::new();
    let log = site.dir.path().join("access.log");
    let server = site.serve_with(&format!(
        "access_log = {:?}\naccess_log_format = \"json\"\n\n[[route]]\npath = \"/healthz\"\nrespond = {{ body = \"ok\" }}\n",
        log.display().to_string()
    ));
    let mut stream = server.connect();
    stream
        .write_all(b"GET /hello.txt?q=%22%0a HTTP/1.1\r\nHost: Example.test:8080\r\nUser-Agent: a \"b\" \\ \t \xff\xc3 \xc3\xa9\r\n\r\n")
        .unwrap();
    assert_eq!(read_response(&mut stream, false).status, 200);
    stream
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n")
        .unwrap();
    assert_eq!(read_response(&mut stream, false).status, 200);
    stream
        .write_all(b"GET /missing%ff%22 HTTP/1.1\r\nHost: t\r\n\r\n")
        .unwrap();
    assert_eq!(read_response(&mut stream, false).status, 404);
    let lines = wait_for_lines(&log, 3);
    assert_eq!(lines.len(), 3, "{lines:?}");
    let script = r#"
import json, sys
for line in open(sys.argv[1], encoding="utf-8"):
    o = json.loads(line)
    print(o["uri"], o["host"], o["route"], o["status"], o["user_agent"], type(o["duration"]).__name__, o["time"][-1], len(o["request_id"]), sep="|")
"#;
    let printed = crate::harness::python_on(script, &log);
    let text = printed;
    let got: Vec<&str> = text.lines().collect();
    assert_eq!(
        got,
        [
            "/hello.txt?q=%22%0a|Example.test|None|200|a \"b\" \\ \t \u{fffd}\u{fffd} é|float|Z|32",
            "/healthz|t|route[0]|200|None|float|Z|32",
            "/missing%ff%22|t|None|404|None|float|Z|32",
        ]
    );
}

/// `%v`, `%{route}x`, `%{protocol}x` and `%O` in a format string; an unknown JSON field
/// is refused by `check-config` with its line.
#[test]
fn host_and_route_directives_and_unknown_json_fields() {
    let site = Site::new();
    let log = site.dir.path().join("access.log");
    let server = site.serve_with(&format!(
        "access_log = {:?}\naccess_log_format = \"%v %{{route}}x %s %{{protocol}}x %O\"\n\n[[route]]\npath = \"/health\"\nrespond = {{ body = \"ok\" }}\n",
        log.display().to_string()
    ));
    assert_eq!(server.get("/health").status, 200);
    // The bytes sent, head and body, as the client received them.
    let mut stream = server.connect();
    stream
        .write_all(b"GET /hello.txt HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).unwrap();
    assert!(raw.starts_with(b"HTTP/1.1 200 "));
    let lines = wait_for_lines(&log, 2);
    let sent: u64 = lines[0]
        .strip_prefix("test route[0] 200 HTTP/1.1 ")
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{}", lines[0]));
    assert!(sent > 2, "{}", lines[0]);
    assert_eq!(lines[1], format!("test - 200 HTTP/1.1 {}", raw.len()));
    let config = site.dir.path().join("bad.toml");
    std::fs::write(
        &config,
        "listen = [\"127.0.0.1:0\"]\naccess_log_format = \"json\"\njson_fields = [\"status\", \"traceparnt\"]\n",
    )
    .unwrap();
    let (code, stderr) = check_config_output(&config);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains(":3: json_fields: unknown field `traceparnt`"),
        "{stderr}"
    );
}

/// `tessera logs report` on a JSON log (its format found by itself) says what it says on
/// the same traffic logged in the combined format.
#[test]
fn tessera_logs_reports_a_json_log_as_its_combined_twin() {
    let site = Site::new();
    let report = |format: &str| {
        let log = site.dir.path().join(format!("{format}.log"));
        let server = site.serve_with(&format!(
            "access_log = {:?}\naccess_log_format = {format:?}\n",
            log.display().to_string()
        ));
        let mut stream = server.connect();
        let requests = [
            ("/hello.txt", "http://example.com/"),
            ("/style.css?v=2", "-"),
            ("/hello.txt", "http://example.com/a?b=\"c\""),
            ("/missing", "-"),
            ("/missing", "-"),
        ];
        for (path, referer) in requests {
            let referer = match referer {
                "-" => String::new(),
                r => format!("Referer: {r}\r\n"),
            };
            write!(
                stream,
                "GET {path} HTTP/1.1\r\nHost: t\r\n{referer}User-Agent: Agent \"q\" \\ x\r\n\r\n"
            )
            .unwrap();
            read_response(&mut stream, false);
        }
        assert_eq!(wait_for_lines(&log, requests.len()).len(), requests.len());
        let mut report = crate::harness::logs_report_json(&log);
        let report = report.as_object_mut().unwrap();
        // The format's name is each log's own.
        assert_eq!(
            report.remove("format").unwrap(),
            match format {
                "json" => "json",
                _ => r#"%h %l %u %t "%r" %>s %b "%{Referer}i" "%{User-Agent}i""#,
            }
        );
        report.clone()
    };
    let mut json = report("json");
    let combined = report("combined");
    assert_eq!(json["hits"], 5);
    assert_eq!(json["malformed"], 0);
    // What the combined format lacks, the JSON line has: the host and the time taken.
    let hosts = json.insert("hosts".into(), serde_json::json!([])).unwrap();
    assert_eq!(hosts[0]["host"], "t");
    assert_eq!(hosts[0]["hits"], 5);
    let routes = json
        .insert("slowest_routes".into(), serde_json::json!([]))
        .unwrap();
    let timed: u64 = routes
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["hits"].as_u64().unwrap())
        .sum();
    assert_eq!(timed, 5);
    assert_eq!(json, combined);
}

/// `%I`: the bytes of the request head as received and of its body.
#[test]
fn bytes_received_count_the_head_and_the_body() {
    let site = Site::new();
    let log = site.dir.path().join("access.log");
    let server = site.serve_with(&format!(
        "access_log = {:?}\naccess_log_format = \"%I %m %U\"\n",
        log.display().to_string()
    ));
    let get = &b"GET /hello.txt HTTP/1.1\r\nHost: test\r\nUser-Agent: t\r\n\r\n"[..];
    let post_head = &b"POST /hello.txt HTTP/1.1\r\nHost: test\r\nContent-Length: 5\r\nConnection: close\r\n\r\n"[..];
    let mut stream = server.connect();
    stream
        .write_all(&[get, post_head, b"hello"].concat())
        .unwrap();
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).unwrap();
    let lines = wait_for_lines(&log, 2);
    assert_eq!(
        lines,
        [
            format!("{} GET /hello.txt", get.len()),
            format!("{} POST /hello.txt", post_head.len() + 5)
        ]
    );
}
