//! `tessera bench` end to end: the real binary against the scripted test server.

use bench::testserver::TestServer;
use serde_json::Value;
use std::process::{Command, Output};

fn tessera(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tessera"))
        .arg("bench")
        .args(args)
        .output()
        .expect("tessera runs")
}

fn json(args: &[&str]) -> Value {
    let out = tessera(args);
    assert!(
        out.status.success(),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("stdout is JSON")
}

#[test]
fn json_output_counts_and_records_the_invocation() {
    let s = TestServer::start().unwrap();
    let url = s.url("/");
    let v = json(&["-n", "300", "-c", "3", "-t", "1", "--json", &url]);
    assert_eq!(v["requests"], 300);
    assert_eq!(v["errors"]["total"], 0);
    assert!(v["requests_per_second"].as_f64().unwrap() > 0.0);
    assert!(v["latency_ms"]["p99"].as_f64().unwrap() > 0.0);
    assert_eq!(v["tessera_version"], env!("CARGO_PKG_VERSION"));
    let args: Vec<&str> = v["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert!(args.ends_with(&["bench", "-n", "300", "-c", "3", "-t", "1", "--json", &url]));
    assert!(v["system"]["nofile_soft"].as_u64().unwrap() > 0);
    assert_eq!(s.requests(), 300);
}

#[test]
fn text_output_and_html_report() {
    let s = TestServer::start().unwrap();
    let dir = std::env::temp_dir().join(format!("tessera-cli-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let html = dir.join("report.html");
    let out = tessera(&[
        "-n",
        "100",
        "-c",
        "2",
        "-t",
        "1",
        "--html",
        html.to_str().unwrap(),
        &s.url("/"),
    ]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("requests    100 in"), "{text}");
    assert!(
        text.contains("uncorrected") && text.contains("generator"),
        "{text}"
    );
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(page.contains("<svg") && page.contains("tessera bench"));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn pipelining_and_one_connection_per_request() {
    let s = TestServer::start().unwrap();
    let v = json(&[
        "-n",
        "320",
        "-c",
        "2",
        "-t",
        "1",
        "--pipeline",
        "16",
        "--json",
        &s.url("/"),
    ]);
    assert_eq!(
        (v["requests"].as_u64(), v["connects"]["count"].as_u64()),
        (Some(320), Some(2))
    );
    assert_eq!(s.max_pipelined(), 16);
    let s = TestServer::start().unwrap();
    let v = json(&[
        "-n",
        "60",
        "-c",
        "3",
        "-t",
        "1",
        "--no-keepalive",
        "--json",
        &s.url("/"),
    ]);
    assert_eq!(
        (v["requests"].as_u64(), v["connects"]["count"].as_u64()),
        (Some(60), Some(60))
    );
    assert_eq!(s.connections(), 60);
}

#[test]
fn methods_headers_bodies_and_request_files() {
    let s = TestServer::start().unwrap();
    let v = json(&[
        "-n",
        "20",
        "-c",
        "1",
        "-m",
        "post",
        "--body",
        "hello",
        "-H",
        "X-Test: 1",
        "--json",
        &s.url("/p"),
    ]);
    assert_eq!(v["status"]["200"], 20);
    let dir = std::env::temp_dir().join(format!("tessera-cli-reqfile-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let f = dir.join("mix.txt");
    std::fs::write(&f, "# a weighted mix\n3 GET /\n1 GET /status/404\n").unwrap();
    let v = json(&[
        "-n",
        "80",
        "-c",
        "1",
        "-t",
        "1",
        "--request-file",
        f.to_str().unwrap(),
        "--json",
        &s.url("/"),
    ]);
    assert_eq!(
        (v["status"]["200"].as_u64(), v["status"]["404"].as_u64()),
        (Some(60), Some(20))
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn open_model_reports_both_latencies() {
    let s = TestServer::start().unwrap();
    let v = json(&[
        "--rate",
        "400",
        "-n",
        "100",
        "-c",
        "4",
        "-t",
        "1",
        "--json",
        &s.url("/"),
    ]);
    assert_eq!(v["settings"]["model"], "open");
    assert_eq!(v["requests"], 100);
    assert_eq!(v["correction"], "intended-send-time");
    let (u, c) = (&v["latency_ms"], &v["corrected_latency_ms"]);
    // Measured from the earlier intended time, corrected latency is never lower.
    assert!(c["max"].as_f64().unwrap() >= u["max"].as_f64().unwrap());
    assert!(c["p50"].as_f64().unwrap() >= u["p50"].as_f64().unwrap());
}

#[test]
fn compare_mode_alternates_and_reports_ratios() {
    let a = TestServer::start().unwrap();
    let b = TestServer::start().unwrap();
    let v = json(&[
        "--compare",
        &a.url("/"),
        &b.url("/delay/5"),
        "-d",
        "250ms",
        "--rounds",
        "2",
        "-c",
        "2",
        "-t",
        "1",
        "--json",
    ]);
    assert_eq!(v["a"]["rounds"].as_array().unwrap().len(), 2);
    assert_eq!(v["runs"].as_array().unwrap().len(), 4);
    assert!(v["ratio_rps"]["median"].as_f64().unwrap() < 1.0);
}

#[test]
fn find_max_reports_steps_and_a_confirming_run() {
    let s = TestServer::start().unwrap();
    let v = json(&[
        "--find-max",
        "--slo",
        "p99<100ms",
        "--rate",
        "100",
        "--step",
        "300ms",
        "--max-steps",
        "3",
        "-c",
        "4",
        "-t",
        "1",
        "--json",
        &s.url("/delay/10"),
    ]);
    let steps = v["steps"].as_array().unwrap();
    assert!(!steps.is_empty() && steps.len() <= 3);
    assert_eq!(v["slo"][0]["metric"], "p99");
    assert!(v["max_rate"].as_f64().unwrap() > 0.0);
    assert!(v["confirm"]["requests"].as_u64().unwrap() > 0);
}

#[test]
fn refuses_bad_input_with_a_message() {
    for args in [
        vec!["-n", "1", "ftp://127.0.0.1/"],
        vec!["-n", "1", "--streams", "4", "http://127.0.0.1:1/"],
        vec![
            "-n",
            "1",
            "--http2",
            "--pipeline",
            "4",
            "http://127.0.0.1:1/",
        ],
        vec![
            "-n",
            "1",
            "--http2",
            "--streams",
            "0",
            "http://127.0.0.1:1/",
        ],
        vec!["-n", "1", "--insecure", "http://127.0.0.1:1/"],
        vec!["-n", "1", "--http3", "http://127.0.0.1:1/"],
        vec![
            "-n",
            "1",
            "--http3",
            "--pipeline",
            "2",
            "https://127.0.0.1:1/",
        ],
        vec!["-n", "1", "--http3", "--http2", "https://127.0.0.1:1/"],
        vec![
            "-n",
            "1",
            "--ca",
            "/nonexistent.pem",
            "https://127.0.0.1:1/",
        ],
        vec!["--find-max", "--slo", "p99>1ms", "http://127.0.0.1:1/"],
        vec!["-n", "1", "-H", "no colon", "http://127.0.0.1:1/"],
        vec!["-n", "1"],
    ] {
        let out = tessera(&args);
        assert!(!out.status.success(), "{args:?} succeeded");
        assert!(!out.stderr.is_empty(), "{args:?} gave no message");
    }
}

#[test]
fn ctrl_c_ends_the_run_with_a_report() {
    let s = TestServer::start().unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_tessera"))
        .args([
            "bench",
            "-d",
            "60s",
            "-c",
            "2",
            "-t",
            "1",
            "--json",
            &s.url("/"),
        ])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // The handler is installed before the first request is sent.
    let waited = std::time::Instant::now();
    while s.requests() == 0 {
        assert!(waited.elapsed().as_secs() < 30, "the run never started");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let status = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(v["requests"].as_u64().unwrap() > 0);
    assert!(v["duration_s"].as_f64().unwrap() < 60.0);
}
