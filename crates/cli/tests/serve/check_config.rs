//! `tessera check-config` (and `serve --check`): every problem named with its file, line
//! and key, nothing started.

use std::process::Command;

use crate::harness::Site;

/// Runs `tessera ARGS... --config FILE` on `toml`; (exit code, stdout, stderr).
fn check(site: &Site, args: &[&str], toml: &str) -> (i32, String, String) {
    let config = site.dir.path().join("check.toml");
    std::fs::write(&config, toml).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_tessera"))
        .args(args)
        .arg("--root")
        .arg(site.root())
        .arg("--config")
        .arg(&config)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_valid_configuration_is_ok() {
    let site = Site::new();
    let toml = format!(
        "listen = [\"127.0.0.1:0\"]\n\n[[upstream]]\nname = \"app\"\naddresses = [\"127.0.0.1:9\"]\n\n\
         [[host]]\nnames = [\"a.test\"]\nroot = \"{}\"\n[[host.route]]\nprefix = \"/api\"\nupstream = \"app\"\n",
        site.root().display()
    );
    for args in [&["check-config"][..], &["serve", "--check"][..]] {
        let (code, stdout, stderr) = check(&site, args, &toml);
        assert_eq!(
            (code, stdout.as_str()),
            (0, "configuration OK\n"),
            "{stderr}"
        );
    }
}

#[test]
fn each_broken_file_fails_naming_file_line_and_key() {
    let site = Site::new();
    std::fs::write(site.dir.path().join("bad.lua"), "local M = {\nreturn M\n").unwrap();
    let bad_lua = site.dir.path().join("bad.lua");
    let cases: Vec<(String, &str)> = vec![
        ("rot = \"/srv\"\n".into(), "check.toml:1: "),
        ("listen = [\n".into(), "check.toml:1: "),
        ("[[host]]\nnames = [\"a.test\"]\nroot = \"/nonexistent/x\"\n".into(),
            "check.toml:3: host[0].root: /nonexistent/x is not a directory"),
        ("[[host]]\nnames = [\"a.test\"]\n\n[[host]]\nnames = [\"A.TEST\"]\n".into(),
            "check.toml:5: host[1].names: \"a.test\" is claimed by host[0] too"),
        ("[[host]]\nnames = [\"a b\"]\n".into(), "check.toml:2: host[0].names:"),
        ("[[host]]\nnames = [\"a.test\"]\ndefault = true\n[[host]]\nnames = [\"b.test\"]\ndefault = true\n".into(),
            "check.toml:6: host[1].default: host[0] is the default host already"),
        ("[[upstream]]\nname = \"app\"\naddresses = [\"127.0.0.1:9\"]\n\n[[route]]\nprefix = \"/\"\nupstream = \"ap\"\n".into(),
            "check.toml:6: "),
        (format!("[[script]]\nprefix = \"/x\"\npath = \"{}\"\n", bad_lua.display()),
            "bad.lua"),
        ("[limits]\nmax_head_size = 10\n".into(), "check.toml:2: limits.max_head_size:"),
        ("[timeouts]\nidle = -1.0\n".into(), "check.toml:2: timeouts.idle:"),
        ("[[cache_control]]\nprefix = \"assets\"\nvalue = \"max-age=1\"\n".into(),
            "check.toml:1: cache_control:"),
        ("access_log = \"/nonexistent/dir/access.log\"\n".into(), "check.toml:1: access_log:"),
        ("index = \"a/b\"\n".into(), "check.toml:1: index: must be a file name"),
        ("pid_file = \"/nonexistent/dir/t.pid\"\n".into(), "check.toml:1: pid_file:"),
        ("[[host]]\nnames = [\"a.test\"]\n[host.tls]\nredirect_https = true\n".into(),
            "check.toml:4: host[0].tls.redirect_https: only `[tls]` has it, for every host"),
        ("[http3]\nmax_streams = 0\n".into(), "check.toml:2: http3.max_streams:"),
        ("[http3]\nidle_timeout = \"30\"\n".into(), "check.toml:2: http3.idle_timeout:"),
        ("[http3]\nstream_window = 10\n".into(), "check.toml:2: http3.stream_window:"),
        ("[http3]\nmax_stream = 10\n".into(), "max_streams"),
        ("quic_listen = [\"127.0.0.1:0\"]\n".into(), "check.toml:1: quic_listen:"),
        ("listen = [\"127.0.0.1:8443\"]\nh2c_listen = [\"127.0.0.1:8443\"]\nquic_listen = [\"127.0.0.1:8443\"]\n".into(),
            "h2c_listen"),
    ];
    for (toml, expected) in &cases {
        let (code, stdout, stderr) = check(&site, &["check-config"], toml);
        assert_eq!(code, 1, "{toml} passed: {stdout}");
        assert!(
            stderr.contains(expected),
            "{toml}: expected {expected:?} in {stderr}"
        );
        assert!(!stdout.contains("configuration OK"), "{toml}");
    }
}

#[test]
fn every_problem_is_listed_not_only_the_first() {
    let site = Site::new();
    let (code, _, stderr) = check(
        &site,
        &["check-config"],
        "workers = 5000\n[limits]\nmax_headers = 0\n[[host]]\nnames = [\"a.test\", \"a.test\"]\n",
    );
    assert_eq!(code, 1);
    for expected in [
        "check.toml:1: workers:",
        "check.toml:3: limits.max_headers:",
        "check.toml:5: host[0].names:",
    ] {
        assert!(
            stderr.contains(expected),
            "expected {expected:?} in {stderr}"
        );
    }
}

/// An unknown key is refused with every key valid where it was written, tables included
/// (the proxy's and the scripts' too, which another crate reads), and the nearest one,
/// or the table it belongs in; by `check-config` at its line, and by `serve` at start.
#[test]
fn an_unknown_key_lists_every_valid_key_at_its_level_and_the_nearest() {
    let site = Site::new();
    let top_level_tables = [
        "`tls`",
        "`limits`",
        "`timeouts`",
        "`compression`",
        "`http2`",
        "`host`",
        "`cache_control`",
        "`upstream`",
        "`route`",
        "`esi`",
        "`cache`",
        "`script`",
        "`shared_dict`",
    ];
    let cases: [(&str, &str, &[&str]); 6] = [
        (
            "listen = [\"127.0.0.1:0\"]\nrot = \"/srv\"\n",
            "check.toml:2: invalid config file",
            &["unknown field `rot` at the top level, did you mean `root`? Valid keys at the top level: `listen`,"],
        ),
        (
            "upstreams = []\n",
            "check.toml:1:",
            &["unknown field `upstreams` at the top level, did you mean `upstream`?"],
        ),
        (
            "max_body_size = 10\n",
            "check.toml:1:",
            &["unknown field `max_body_size` at the top level: it is a key of `[limits]`. Valid keys at the top level:"],
        ),
        (
            "[[host]]\nnames = [\"a.test\"]\nrout = 1\n",
            "check.toml:3:",
            &["unknown field `rout` in `[[host]]`, did you mean `root`? Valid keys in `[[host]]`: `names`,", "`route`, `script`"],
        ),
        (
            "[[host]]\nnames = [\"a.test\"]\n[[host.route]]\nprefx = \"/\"\n",
            "check.toml:4:",
            &["host[0]: unknown field `prefx` in `[[host.route]]`, did you mean `prefix`? Valid keys in `[[host.route]]`: `prefix`, `upstream`,"],
        ),
        (
            "[cache.redis]\nurls = \"redis://127.0.0.1\"\n",
            "check.toml:2:",
            &["unknown field `urls` in `[cache.redis]`, did you mean `url`? Valid keys in `[cache.redis]`: `url`, `cluster`,"],
        ),
    ];
    for (toml, at, expected) in cases {
        let (code, _, stderr) = check(&site, &["check-config"], toml);
        assert_eq!(code, 1, "{toml}");
        assert!(stderr.contains(at), "{toml}: expected {at:?} in {stderr}");
        for e in expected {
            assert!(stderr.contains(e), "{toml}: expected {e:?} in {stderr}");
        }
        if toml.starts_with("listen") {
            for table in top_level_tables {
                assert!(stderr.contains(table), "{table} not listed: {stderr}");
            }
        }
    }
    // `serve` refuses the file at start with the same account.
    let (code, _, stderr) = check(&site, &["serve"], "workrs = 2\n");
    assert_eq!(code, 1);
    assert!(
        stderr.contains("unknown field `workrs` at the top level, did you mean `workers`?"),
        "{stderr}"
    );
}
