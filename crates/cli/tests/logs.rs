//! `tessera logs` end to end, through the real binary.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

fn tessera(args: &[&str], stdin: Option<&[u8]>) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_tessera"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut pipe = child.stdin.take().unwrap();
    let input = stdin.unwrap_or_default().to_vec();
    let writer = std::thread::spawn(move || {
        let _ = pipe.write_all(&input);
    });
    let output = child.wait_with_output().unwrap();
    writer.join().unwrap();
    output
}

fn ok(output: Output) -> String {
    assert!(
        output.status.success(),
        "exit {:?}, stderr:\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../logs/tests/data")
        .join(name)
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    encoder.write_all(bytes).unwrap();
    encoder.finish().unwrap()
}

const WIDE_FINDER: &str = r"GET /ongoing/When/\d\d\dx/(\d\d\d\d/\d\d/\d\d/[^ .]+) ";

const ONGOING: &str = r#"1.2.3.4 - - [21/Nov/2026:10:00:00 +0000] "GET /ongoing/When/200x/2007/06/15/Wide-Finder HTTP/1.1" 200 9000 "-" "a"
1.2.3.5 - - [21/Nov/2026:10:00:01 +0000] "GET /ongoing/When/200x/2007/06/15/Wide-Finder HTTP/1.1" 304 - "-" "a"
1.2.3.6 - - [21/Nov/2026:10:00:02 +0000] "GET /ongoing/When/200x/2007/06/15/Wide-Finder.png HTTP/1.1" 200 7 "-" "a"
1.2.3.7 - - [21/Nov/2026:10:00:03 +0000] "GET /ongoing/When/201x/2012/01/02/Erlang HTTP/1.1" 200 9000 "-" "a"
1.2.3.8 - - [21/Nov/2026:10:00:04 +0000] "GET /ongoing/When/201x/2012/01/01/Atom HTTP/1.1" 200 9000 "-" "a"
1.2.3.9 - - [21/Nov/2026:10:00:05 +0000] "GET /ongoing/ongoing.atom HTTP/1.1" 200 9000 "-" "a"
"#;

#[test]
fn top_prints_count_colon_key_highest_first_ties_by_key() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("access.log");
    std::fs::write(&path, ONGOING).unwrap();
    let out = ok(tessera(
        &[
            "logs",
            "top",
            path.to_str().unwrap(),
            "--pattern",
            WIDE_FINDER,
        ],
        None,
    ));
    assert_eq!(
        out,
        "2: 2007/06/15/Wide-Finder\n1: 2012/01/01/Atom\n1: 2012/01/02/Erlang\n"
    );
    let out = ok(tessera(
        &[
            "logs",
            "top",
            "-n",
            "1",
            path.to_str().unwrap(),
            "--pattern",
            WIDE_FINDER,
        ],
        None,
    ));
    assert_eq!(out, "2: 2007/06/15/Wide-Finder\n");
}

#[test]
fn top_reads_stdin_plain_and_gzip_and_several_files() {
    let expected = "2: 2007/06/15/Wide-Finder\n1: 2012/01/01/Atom\n1: 2012/01/02/Erlang\n";
    let out = ok(tessera(
        &["logs", "top", "-", "--pattern", WIDE_FINDER],
        Some(ONGOING.as_bytes()),
    ));
    assert_eq!(out, expected);
    let out = ok(tessera(
        &["logs", "top", "-", "--pattern", WIDE_FINDER],
        Some(&gzip(ONGOING.as_bytes())),
    ));
    assert_eq!(out, expected);

    let dir = tempfile::tempdir().unwrap();
    let plain = dir.path().join("access.log");
    let rotated = dir.path().join("access.log.1.gz");
    std::fs::write(&plain, ONGOING).unwrap();
    std::fs::write(&rotated, gzip(ONGOING.as_bytes())).unwrap();
    let out = ok(tessera(
        &[
            "logs",
            "top",
            plain.to_str().unwrap(),
            rotated.to_str().unwrap(),
            "-p",
            WIDE_FINDER,
        ],
        None,
    ));
    assert_eq!(
        out,
        "4: 2007/06/15/Wide-Finder\n2: 2012/01/01/Atom\n2: 2012/01/02/Erlang\n"
    );
}

#[test]
fn report_text_of_the_tricky_log() {
    let path = data("tricky.log");
    let out = ok(tessera(
        &[
            "logs",
            "report",
            path.to_str().unwrap(),
            "--site",
            "www.example.com",
        ],
        None,
    ));
    assert_eq!(
        out,
        std::fs::read_to_string(data("tricky.report.txt")).unwrap()
    );
}

#[test]
fn report_json_and_html() {
    let dir = tempfile::tempdir().unwrap();
    let html = dir.path().join("out.html");
    let path = data("tricky.log");
    let out = ok(tessera(
        &[
            "logs",
            "report",
            path.to_str().unwrap(),
            "--site",
            "www.example.com",
            "--json",
            "--html",
            html.to_str().unwrap(),
        ],
        None,
    ));
    let json: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(json["hits"], 8);
    assert_eq!(json["malformed"], 2);
    assert_eq!(json["bytes"], 3740);
    assert_eq!(json["visitors"], 7);
    assert_eq!(json["top_urls_by_hits"][0]["url"], "/index.html");
    assert_eq!(json["top_urls_by_hits"][0]["hits"], 2);
    assert_eq!(
        json["top_not_found"][0],
        serde_json::json!({"key": "/missing", "hits": 2})
    );
    assert_eq!(
        json["statuses"][3],
        serde_json::json!({"status": 408, "hits": 1})
    );
    assert_eq!(json["hours"].as_array().unwrap().len(), 15);
    assert_eq!(json["top_user_agents"][3]["key"], r#"bot \"quoted\" 1.0"#);
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(page.starts_with("<!doctype html>") && page.contains("<svg"));
}

#[test]
fn report_from_gzip_on_stdin_equals_report_from_file() {
    let path = data("tricky.log");
    let from_file = ok(tessera(&["logs", "report", path.to_str().unwrap()], None));
    let gz = gzip(&std::fs::read(&path).unwrap());
    let from_stdin = ok(tessera(&["logs", "report", "-"], Some(&gz)));
    assert_eq!(from_stdin, from_file);
}

#[test]
fn report_with_explicit_common_format() {
    let log = "h1 - - [21/Nov/2026:10:00:00 +0000] \"GET /x HTTP/1.1\" 200 10\n\
               h2 - - [21/Nov/2026:10:00:00 +0000] \"GET /x HTTP/1.1\" 404 -\n";
    let out = ok(tessera(
        &["logs", "report", "--format", "common", "--json", "-"],
        Some(log.as_bytes()),
    ));
    let json: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(json["format"], r#"%h %l %u %t "%r" %>s %b"#);
    assert_eq!(
        (json["hits"].as_u64(), json["bytes"].as_u64()),
        (Some(2), Some(10))
    );
    assert_eq!(json["top_not_found"][0]["key"], "/x");
}

#[test]
fn errors_name_the_problem_and_fail() {
    let out = tessera(&["logs", "top", "/nonexistent/access.log", "-p", "x"], None);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/access.log"));

    let out = tessera(&["logs", "top", "-", "-p", "GET (unclosed"], Some(b""));
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("invalid pattern"));

    let out = tessera(
        &["logs", "report", "-"],
        Some(b"this is not an access log\n"),
    );
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("could not detect the log format"));
}
