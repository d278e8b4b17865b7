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

/// DuckDB's answer to `sql` over the Parquet file at `path` (as `PARQUET` in the query),
/// as JSON. DuckDB comes from PyPI (scripts/test.sh installs it).
fn duckdb(path: &Path, sql: &str) -> serde_json::Value {
    let script = r#"
import duckdb, json, sys
rows = duckdb.sql(sys.argv[2].replace("PARQUET", "read_parquet('" + sys.argv[1] + "')")).fetchall()
print(json.dumps([[v if isinstance(v, (int, str, type(None))) else str(v) for v in row] for row in rows]))
"#;
    let output = Command::new("python3")
        .args(["-c", script, path.to_str().unwrap(), sql])
        .output()
        .expect("python3 (scripts/test.sh installs it)");
    assert!(
        output.status.success(),
        "duckdb failed (scripts/test.sh installs it with pip):\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap()
}

#[test]
fn export_parquet_read_back_by_duckdb_equals_the_report() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("access.log");
    let mut bytes = Vec::new();
    logs::synth::generate(60_000, &logs::synth::SynthOptions::default(), &mut bytes).unwrap();
    // A line with an offset, one with a byte that is not UTF-8, one malformed.
    bytes.extend_from_slice(
        b"192.0.2.9 - - [21/Nov/2026:13:55:36 -0700] \"GET /offset HTTP/1.1\" 200 5 \"-\" \"a\"\n",
    );
    bytes.extend_from_slice(
        b"192.0.2.10 - - [21/Nov/2026:23:00:00 +0000] \"GET /caf\xe9 HTTP/1.1\" 404 - \"-\" \"b\"\n",
    );
    bytes.extend_from_slice(b"this is not a log line\n");
    std::fs::write(&log, &bytes).unwrap();
    let out = dir.path().join("access.parquet");
    let log_arg = log.to_str().unwrap();
    let output = tessera(
        &[
            "logs",
            "export",
            "--parquet",
            out.to_str().unwrap(),
            "--threads",
            "2",
            log_arg,
        ],
        None,
    );
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let said = String::from_utf8_lossy(&output.stderr);
    assert!(said.contains("60002 rows"), "{said}");
    assert!(said.contains("1 malformed"), "{said}");

    let report: serde_json::Value = serde_json::from_str(&ok(tessera(
        &["logs", "report", "--json", "-n", "10", log_arg],
        None,
    )))
    .unwrap();
    let counted = duckdb(&out, "select count(*), sum(bytes) from PARQUET");
    assert_eq!(counted[0][0], report["hits"]);
    assert_eq!(counted[0][1], report["bytes"]);
    let top = duckdb(
        &out,
        "select path, count(*) as n, sum(bytes) from PARQUET group by path \
         order by n desc, path limit 10",
    );
    let expected: Vec<serde_json::Value> = report["top_urls_by_hits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|row| serde_json::json!([row["url"], row["hits"], row["bytes"]]))
        .collect();
    assert_eq!(top.as_array().unwrap(), &expected);
    let statuses = duckdb(
        &out,
        "select status, count(*) from PARQUET group by status order by status",
    );
    let expected: Vec<serde_json::Value> = report["statuses"]
        .as_array()
        .unwrap()
        .iter()
        .map(|row| serde_json::json!([row["status"], row["hits"]]))
        .collect();
    assert_eq!(statuses.as_array().unwrap(), &expected);

    // The rows keep the log's order, across the row groups the two threads wrote.
    let first_client = String::from_utf8_lossy(bytes.split(|&b| b == b' ').next().unwrap());
    let ends = duckdb(
        &out,
        "select client from (select client, row_number() over () as i from PARQUET) \
         where i = 1 or i >= 60001 order by i",
    );
    assert_eq!(
        ends,
        serde_json::json!([[first_client], ["192.0.2.9"], ["192.0.2.10"]])
    );
    // Times are UTC, the log's offset applied; a byte that is not UTF-8 is U+FFFD.
    let typed = duckdb(
        &out,
        "select epoch(time)::bigint, path, bytes, referer from PARQUET \
         where client in ('192.0.2.9', '192.0.2.10') order by client",
    );
    assert_eq!(
        typed,
        serde_json::json!([
            [1_795_302_000i64, "/caf\u{fffd}", 0, "-"],
            [1_795_294_536i64, "/offset", 5, "-"]
        ])
    );
    let groups = duckdb(
        &out,
        "select count(distinct row_group_id) from parquet_metadata('OUT')"
            .replace("OUT", out.to_str().unwrap())
            .as_str(),
    );
    assert!(groups[0][0].as_i64().unwrap() >= 2, "{groups}");
}

#[test]
fn export_failure_leaves_no_file() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.parquet");
    std::fs::write(&out, b"the old export").unwrap();
    let output = tessera(
        &[
            "logs",
            "export",
            "--parquet",
            out.to_str().unwrap(),
            dir.path().join("missing.log").to_str().unwrap(),
        ],
        None,
    );
    assert!(!output.status.success());
    let said = String::from_utf8_lossy(&output.stderr);
    assert!(said.contains("missing.log"), "{said}");
    assert_eq!(std::fs::read(&out).unwrap(), b"the old export");
    let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert_eq!(left.len(), 1, "a partial file was left behind");
}
