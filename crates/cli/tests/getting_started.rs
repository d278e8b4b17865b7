//! docs/getting-started.md, run as a newcomer would: its commands in two bash sessions
//! (the page's first and second terminals), in a scratch home directory, with the
//! binary under test on the PATH, and what they print compared with the page.
//!
//! The page's blocks say what to do (an HTML comment at its top says so too):
//!
//! - ```` ```sh ````: commands for the first terminal. A block whose last line is
//!   `tessera serve ...` leaves the server in the foreground there.
//! - ```` ```sh terminal-2 ````: commands for the second terminal.
//! - ```` ```text ```` right after a command block: what it printed (the server's first
//!   lines, for a block that starts one); no text block: it prints nothing.
//! - ```` ```text terminal-1 ````: what the first terminal printed since its last block
//!   (a server's log line after a reload).
//! - ```` ```text ctrl-c ````: Ctrl-C (SIGINT) to the first terminal's server, then what
//!   the terminal printed until it exited.
//!
//! A line ending in `← varies` is not compared (it must be there); in one ending in
//! `← the time varies` the first word (a log line's time) is not compared. `cargo`
//! commands are skipped: the build is this test's. The page's ports (18080, 19000,
//! 16379) are replaced by free ones, in commands and output alike, so the test runs
//! beside anything else. The home directory's `.curlrc` turns curl's progress meter off,
//! as a terminal does. `GETTING_STARTED_PRINT=1` prints what each block printed, to
//! paste into the page after a change.
//!
//! Needs python3, curl, redis-server and redis-cli (scripts/test.sh installs them).

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const VARIES: &str = "← varies";
const TIME_VARIES: &str = "← the time varies";

fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A block of the page: its info string's words and its lines.
struct Block {
    kind: String,
    tag: String,
    lines: Vec<String>,
    /// The page's line where the block starts, for messages.
    at: usize,
}

fn blocks(page: &str) -> Vec<Block> {
    let mut out = Vec::new();
    let mut open: Option<Block> = None;
    for (n, line) in page.lines().enumerate() {
        match (line.strip_prefix("```"), open.take()) {
            (Some(_), Some(block)) => out.push(block),
            (Some(info), None) => {
                let mut words = info.split_whitespace();
                open = Some(Block {
                    kind: words.next().unwrap_or("").to_string(),
                    tag: words.next().unwrap_or("").to_string(),
                    lines: Vec::new(),
                    at: n + 1,
                });
            }
            (None, Some(mut block)) => {
                block.lines.push(line.to_string());
                open = Some(block);
            }
            (None, None) => {}
        }
    }
    assert!(open.is_none(), "an unclosed code block");
    out
}

/// A bash session whose output (stdout and stderr, its children's too) is collected.
struct Shell {
    child: Child,
    stdin: ChildStdin,
    output: Arc<Mutex<Vec<u8>>>,
    /// How much of `output` has been compared already.
    seen: usize,
    markers: usize,
}

impl Shell {
    fn start(dir: &Path, home: &Path, path: &str) -> Shell {
        use std::os::unix::process::CommandExt;
        let mut child = Command::new("bash")
            .args(["--norc", "--noprofile"])
            .current_dir(dir)
            .env("HOME", home)
            .env("PATH", path)
            .env("LC_ALL", "C.UTF-8")
            .env_remove("RUST_LOG")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            // Its own process group, killed whole at the end.
            .process_group(0)
            .spawn()
            .expect("run bash");
        let mut stdout = child.stdout.take().unwrap();
        let output = Arc::new(Mutex::new(Vec::new()));
        let sink = output.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 8192];
            while let Ok(n) = stdout.read(&mut buf) {
                if n == 0 {
                    break;
                }
                sink.lock().unwrap().extend_from_slice(&buf[..n]);
            }
        });
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(b"exec 2>&1\n").unwrap();
        Shell {
            child,
            stdin,
            output,
            seen: 0,
            markers: 0,
        }
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.output.lock().unwrap()).into_owned()
    }

    /// Sends the lines, then a marker printed once they have run.
    fn send(&mut self, lines: &[String]) -> String {
        self.markers += 1;
        let marker = format!("@@getting-started {}@@", self.markers);
        for line in lines {
            writeln!(self.stdin, "{line}").unwrap();
        }
        writeln!(self.stdin, "echo '{marker}'").unwrap();
        marker
    }

    /// Waits until `done` holds for the output, then until it has been quiet a while.
    fn wait(&self, what: &str, done: impl Fn(&str) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while !done(&self.text()) {
            assert!(
                Instant::now() < deadline,
                "{what}: waited 60 s; printed:\n{}",
                self.text()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        self.settle();
    }

    /// Until nothing more has been printed for 400 ms.
    fn settle(&self) {
        let mut last = self.output.lock().unwrap().len();
        let mut quiet = Instant::now();
        while quiet.elapsed() < Duration::from_millis(400) {
            std::thread::sleep(Duration::from_millis(20));
            let now = self.output.lock().unwrap().len();
            if now != last {
                last = now;
                quiet = Instant::now();
            }
        }
    }

    /// What was printed since the last call, without the markers.
    fn new_output(&mut self) -> Vec<String> {
        let all = self.output.lock().unwrap().clone();
        let fresh = String::from_utf8_lossy(&all[self.seen..]).into_owned();
        self.seen = all.len();
        fresh
            .lines()
            .filter(|l| !l.starts_with("@@getting-started "))
            .map(String::from)
            .collect()
    }

    /// The pid of the `tessera` this session runs in the foreground.
    fn server_pid(&self) -> i32 {
        let pid = self.child.id();
        let children =
            std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap_or_default();
        children
            .split_whitespace()
            .map(|p| p.parse::<i32>().unwrap())
            .find(|p| {
                std::fs::read_to_string(format!("/proc/{p}/comm"))
                    .is_ok_and(|comm| comm.trim() == "tessera")
            })
            .expect("a tessera server in the first terminal")
    }
}

impl Drop for Shell {
    fn drop(&mut self) {
        // SAFETY: kill(2) on the process group this session leads.
        unsafe { libc::kill(-(self.child.id() as i32), libc::SIGKILL) };
        let _ = self.child.wait();
    }
}

/// Compares what a block printed with what the page shows after it.
fn compare(block: &Block, expected: &[String], actual: &[String]) {
    if std::env::var_os("GETTING_STARTED_PRINT").is_some() {
        eprintln!("--- line {}:\n{}", block.at, actual.join("\n"));
        return;
    }
    let shown = || {
        format!(
            "the page (line {}) shows:\n{}\nit printed:\n{}",
            block.at,
            expected.join("\n"),
            actual.join("\n")
        )
    };
    assert_eq!(expected.len(), actual.len(), "{}", shown());
    for (want, got) in expected.iter().zip(actual) {
        if want.ends_with(VARIES) {
            continue;
        }
        let (want, got) = match want.strip_suffix(TIME_VARIES) {
            Some(want) => (
                want.trim_end().split_once(' ').map_or("", |(_, rest)| rest),
                got.split_once(' ').map_or("", |(_, rest)| rest),
            ),
            None => (want.as_str(), got.as_str()),
        };
        assert_eq!(want.trim_end(), got.trim_end(), "{}", shown());
    }
}

/// Shuts down the Redis on this port when dropped (a failed test included).
struct RedisShutdown(u16);

impl Drop for RedisShutdown {
    fn drop(&mut self) {
        let _ = Command::new("redis-cli")
            .args(["-p", &self.0.to_string(), "shutdown", "nosave"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

/// A port no one listens on now.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[test]
fn getting_started_runs_as_written() {
    let mut page = std::fs::read_to_string(repository().join("docs/getting-started.md")).unwrap();
    let ports: Vec<u16> = (0..3).map(|_| free_port()).collect();
    for (port, free) in ["18080", "19000", "16379"].iter().zip(&ports) {
        page = page.replace(port, &free.to_string());
    }
    // The page's Redis runs as a daemon, outside the sessions' process groups: stopped
    // here too, should the page not get to its own shutdown.
    let _redis = RedisShutdown(ports[2]);
    let blocks = blocks(&page);

    // A clone whose target/release holds the binary under test, and a home directory.
    let scratch = tempfile::tempdir().unwrap();
    let clone = scratch.path().join("tessera");
    let release = clone.join("target/release");
    std::fs::create_dir_all(&release).unwrap();
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_tessera"), release.join("tessera")).unwrap();
    let home = scratch.path().join("home");
    std::fs::create_dir(&home).unwrap();
    // curl draws a progress meter when its output is not a terminal, as here, and none
    // in the terminal the page is read beside.
    std::fs::write(home.join(".curlrc"), "no-progress-meter\n").unwrap();
    let path = std::env::var("PATH").unwrap_or_default();

    let mut first = Shell::start(&clone, &home, &path);
    let mut second: Option<Shell> = None;
    // Whether the first terminal runs a server in the foreground.
    let mut serving = false;
    let mut i = 0;
    while i < blocks.len() {
        let block = &blocks[i];
        let next_text = blocks
            .get(i + 1)
            .filter(|b| b.kind == "text" && b.tag.is_empty());
        let expected = next_text.map_or(Vec::new(), |b| b.lines.clone());
        match (block.kind.as_str(), block.tag.as_str()) {
            ("sh", "") => {
                assert!(
                    !serving,
                    "line {}: the first terminal runs a server",
                    block.at
                );
                let lines: Vec<String> = block
                    .lines
                    .iter()
                    .filter(|l| !l.starts_with("cargo "))
                    .cloned()
                    .collect();
                let server = lines
                    .last()
                    .is_some_and(|l| l.starts_with("tessera serve "));
                let marker = first.send(&lines);
                if server {
                    serving = true;
                    first.wait("the server's start", |t| t.contains("tessera: serving"));
                } else {
                    first.wait(&format!("line {}", block.at), |t| t.contains(&marker));
                }
                compare(block, &expected, &first.new_output());
            }
            ("sh", "terminal-2") => {
                let shell =
                    second.get_or_insert_with(|| Shell::start(scratch.path(), &home, &path));
                let marker = shell.send(&block.lines);
                shell.wait(&format!("line {}", block.at), |t| t.contains(&marker));
                compare(block, &expected, &shell.new_output());
            }
            ("text", "terminal-1") => {
                let before = first.seen;
                first.wait("the first terminal", |t| t.len() > before);
                compare(block, &block.lines, &first.new_output());
            }
            ("text", "ctrl-c") => {
                assert!(serving, "line {}: no server to stop", block.at);
                // SAFETY: kill(2) on the server the first terminal started.
                unsafe { libc::kill(first.server_pid(), libc::SIGINT) };
                let marker = format!("@@getting-started {}@@", first.markers);
                first.wait("the server's exit", |t| t.contains(&marker));
                serving = false;
                compare(block, &block.lines, &first.new_output());
            }
            ("text", "") => panic!("line {}: output after no command", block.at),
            ("sh" | "text", tag) => panic!("line {}: an unknown block tag {tag:?}", block.at),
            // Another language (a config shown on its own): nothing to run.
            _ => {}
        }
        i += if next_text.is_some() { 2 } else { 1 };
    }
    assert!(!serving, "the page ends with a server running");
}
