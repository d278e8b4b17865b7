//! What `--help` tells a newcomer: one line per command in `tessera --help`; `serve` and
//! `check-config` end with examples that run and the docs pages to read, as `bench` does;
//! `check-config` shows only the options that shape the configuration it checks; the
//! admin listener's paths named in `serve --help` are the ones it answers.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};

fn repository() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
}

/// `tessera ARGS` run in `dir`: (success, stdout, stderr).
fn tessera_in(dir: &Path, args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_tessera"))
        .current_dir(dir)
        .args(args)
        .output()
        .expect("run tessera");
    (
        out.status.success(),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

fn help(args: &[&str]) -> String {
    let (ok, stdout, stderr) = tessera_in(repository(), args);
    assert!(ok, "tessera {args:?}: {stderr}");
    stdout
}

/// The long option names a help text lists (`--config`, `--root`, ...).
fn options(help: &str) -> Vec<String> {
    help.lines()
        .filter_map(|l| l.trim_start().strip_prefix("-h, ").or(Some(l.trim_start())))
        .filter(|l| l.starts_with("--"))
        .map(|l| l.split([' ', '<']).next().unwrap().to_string())
        .collect()
}

/// The command lines under `Examples:`.
fn examples(help: &str) -> Vec<String> {
    help.split("Examples:\n")
        .nth(1)
        .expect("an Examples: section")
        .lines()
        .take_while(|l| l.starts_with("  "))
        .map(|l| l.trim().to_string())
        .collect()
}

#[test]
fn every_command_is_summed_up_in_one_line() {
    let text = help(&["--help"]);
    let commands: Vec<&str> = text
        .split("Commands:\n")
        .nth(1)
        .unwrap()
        .lines()
        .take_while(|l| !l.is_empty())
        .collect();
    let names: Vec<&str> = commands
        .iter()
        .map(|l| l.split_whitespace().next().unwrap())
        .collect();
    // A summary running onto a second line would show as a line without a name.
    assert_eq!(
        names,
        ["serve", "check-config", "esi", "logs", "bench", "help"],
        "{text}"
    );
    for line in commands {
        assert!(
            line.len() <= 100,
            "wider than a 100-column terminal: {line}"
        );
    }
}

#[test]
fn serve_and_check_config_end_with_examples_and_the_docs_pages_as_bench_does() {
    for command in ["serve", "check-config", "bench"] {
        let text = help(&[command, "--help"]);
        let examples = examples(&text);
        assert!(!examples.is_empty(), "{command}: {text}");
        for example in &examples {
            assert!(
                example.starts_with(&format!("tessera {command}")),
                "{command}: {example}"
            );
        }
        let last = text.trim_end().lines().last().unwrap();
        let pages = last
            .strip_prefix("Documentation: ")
            .unwrap_or_else(|| panic!("{command} --help does not end with the docs: {last}"));
        for page in pages.split(", ") {
            let file = page.split(' ').next().unwrap();
            assert!(
                repository().join(file).is_file(),
                "{command} --help names {file}, which is missing"
            );
        }
    }
}

/// Every example of `serve --help` and `check-config --help` is a valid command: run in a
/// directory holding the files they name, each checks `configuration OK` (`serve`'s with
/// `--check`, so nothing is bound).
#[test]
fn the_examples_of_serve_and_check_config_are_valid_configurations() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    std::fs::create_dir(dir.join("site")).unwrap();
    std::fs::write(
        dir.join("api.lua"),
        "return { content = function(r) return 'hi' end }",
    )
    .unwrap();
    std::fs::write(
        dir.join("tessera.toml"),
        "listen = [\"127.0.0.1:8080\"]\nroot = \"site\"\n",
    )
    .unwrap();
    for command in ["serve", "check-config"] {
        for example in examples(&help(&[command, "--help"])) {
            let mut args: Vec<&str> = example.split_whitespace().skip(1).collect();
            if command == "serve" {
                args.push("--check");
            }
            let (ok, stdout, stderr) = tessera_in(dir, &args);
            assert!(
                ok && stdout == "configuration OK\n",
                "{example}: {stdout}{stderr}"
            );
        }
    }
}

/// `check-config` lists the options that change the configuration it checks, and not
/// those that only matter to a running server (`--pid-file`, `--backlog`) nor `--check`;
/// `serve` has them all.
#[test]
fn check_config_shows_only_the_options_that_apply_to_checking() {
    let check = options(&help(&["check-config", "--help"]));
    let serve = options(&help(&["serve", "--help"]));
    for shaping in [
        "--config",
        "--root",
        "--listen",
        "--tls-listen",
        "--h2c-listen",
        "--cert",
        "--key",
        "--workers",
        "--proxy",
        "--script",
        "--access-log",
        "--admin-listen",
    ] {
        assert!(
            check.iter().any(|o| o == shaping),
            "check-config: {shaping}"
        );
        assert!(serve.iter().any(|o| o == shaping), "serve: {shaping}");
    }
    for running in ["--check", "--pid-file", "--backlog"] {
        assert!(
            !check.iter().any(|o| o == running),
            "check-config: {running}"
        );
        assert!(serve.iter().any(|o| o == running), "serve: {running}");
    }
    let (ok, _, stderr) = tessera_in(repository(), &["check-config", "--pid-file", "x"]);
    assert!(
        !ok && stderr.contains("unexpected argument '--pid-file'"),
        "{stderr}"
    );
}

/// The paths `serve --help` gives for `--admin-listen` are those the admin listener
/// answers: each 200 from a real server, and a path beside them 404.
#[test]
fn serve_help_names_every_path_of_the_admin_listener() {
    let text = help(&["serve", "--help"]);
    let line = text
        .lines()
        .find(|l| l.trim_start().starts_with("--admin-listen"))
        .unwrap();
    let paths: Vec<&str> = line
        .split('`')
        .skip(1)
        .step_by(2)
        .filter(|p| p.starts_with('/'))
        .collect();
    assert_eq!(
        paths,
        ["/metrics", "/healthz", "/status", "/status.json"],
        "{line}"
    );

    let site = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_tessera"))
        .args(["serve", "--listen", "127.0.0.1:0", "--workers", "1"])
        .args(["--admin-listen", "127.0.0.1:0", "--root"])
        .arg(site.path())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let admin = loop {
        let mut line = String::new();
        assert!(stderr.read_line(&mut line).unwrap() > 0, "no admin line");
        if let Some(rest) = line.strip_prefix("tessera: admin on http://") {
            break rest.split('/').next().unwrap().to_string();
        }
    };
    let status = |path: &str| {
        let mut stream = std::net::TcpStream::connect(&admin).unwrap();
        write!(
            stream,
            "GET {path} HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).unwrap();
        response[9..12].to_string()
    };
    for path in paths {
        assert_eq!(status(path), "200", "{path}");
    }
    assert_eq!(status("/status.html"), "404");
    let _ = child.kill();
    let _ = child.wait();
}
