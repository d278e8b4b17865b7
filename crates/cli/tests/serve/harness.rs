//! Starts the real `tessera` binary on an ephemeral loopback port and talks to it over
//! raw TCP, so what is tested is what users run.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct Server {
    pub child: Child,
    pub addr: SocketAddr,
    /// Everything the server printed on stderr so far.
    pub stderr: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl Server {
    /// `tessera serve --root ROOT --listen 127.0.0.1:0 --workers 1 EXTRA...`
    pub fn start(root: &Path, extra: &[&str]) -> Server {
        let mut args: Vec<String> = vec![
            "serve".into(),
            "--root".into(),
            root.display().to_string(),
            "--workers".into(),
            "1".into(),
        ];
        if !extra.contains(&"--listen") {
            args.push("--listen".into());
            args.push("127.0.0.1:0".into());
        }
        args.extend(extra.iter().map(|s| s.to_string()));
        Server::start_args(&args)
    }

    pub fn start_args(args: &[String]) -> Server {
        Server::start_args_in(Path::new("."), args)
    }

    /// `tessera ARGS` run in the directory `dir` (relative paths in ARGS are from there).
    pub fn start_args_in(dir: &Path, args: &[String]) -> Server {
        Server::start_program(Path::new(env!("CARGO_BIN_EXE_tessera")), dir, args, &[])
    }

    /// [`Server::start_args_in`] with these environment variables set (`RUST_LOG`).
    pub fn start_args_env(dir: &Path, args: &[String], env: &[(&str, &str)]) -> Server {
        Server::start_program(Path::new(env!("CARGO_BIN_EXE_tessera")), dir, args, env)
    }

    /// `PROGRAM ARGS` (a copy or link of tessera) run in the directory `dir`, with
    /// these environment variables set.
    pub fn start_program(
        program: &Path,
        dir: &Path,
        args: &[String],
        env: &[(&str, &str)],
    ) -> Server {
        let mut child = Command::new(program)
            .current_dir(dir)
            .envs(env.iter().copied())
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start tessera");
        let stderr = child.stderr.take().unwrap();
        let mut lines = BufReader::new(stderr).lines();
        // The lines before the address (warnings at start) are kept too.
        let mut early = Vec::new();
        let addr = loop {
            let line = match lines.next() {
                Some(Ok(line)) => line,
                _ => {
                    let status = child.wait().unwrap();
                    panic!("tessera exited before listening: {status}: {early:?}");
                }
            };
            if let Some(rest) = line.rsplit_once("http://").map(|(_, rest)| rest) {
                let addr = rest.split('/').next().unwrap();
                break addr.parse().expect("listen address");
            }
            early.push(line);
        };
        // Keep draining stderr so the server never blocks on a full pipe.
        let stderr = std::sync::Arc::new(std::sync::Mutex::new(early));
        let sink = stderr.clone();
        std::thread::spawn(move || {
            for line in lines.map_while(Result::ok) {
                sink.lock().unwrap().push(line);
            }
        });
        Server {
            child,
            addr,
            stderr,
        }
    }

    pub fn connect(&self) -> TcpStream {
        let stream = TcpStream::connect(self.addr).expect("connect");
        stream
            .set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        stream
    }

    /// Sends `raw` on a new connection and returns everything until the server closes.
    pub fn exchange(&self, raw: &[u8]) -> Vec<u8> {
        let mut stream = self.connect();
        stream.write_all(raw).unwrap();
        read_to_close(&mut stream)
    }

    /// One `GET path` on a new connection; the parsed response.
    pub fn get(&self, path: &str) -> Response {
        let mut stream = self.connect();
        write!(
            stream,
            "GET {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        read_response(&mut stream, false)
    }

    /// Resident memory of the server process, in KiB (VmRSS).
    pub fn rss_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .expect("VmRSS")
    }

    pub fn signal(&self, signal: i32) {
        // SAFETY: plain kill(2) on our own child.
        unsafe { libc::kill(self.child.id() as i32, signal) };
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What a test origin reads of one request: the path of the request line and the header
/// lines (line ends trimmed), or `None` once the client has hung up.
pub fn read_request_head(reader: &mut impl BufRead) -> Option<(String, Vec<String>)> {
    let mut line = String::new();
    if reader.read_line(&mut line).unwrap_or(0) == 0 {
        return None;
    }
    let path = line.split(' ').nth(1).unwrap_or("/").to_string();
    let mut fields = Vec::new();
    loop {
        let mut field = String::new();
        if reader.read_line(&mut field).unwrap_or(0) == 0 {
            return None;
        }
        let field = field.trim_end().to_string();
        if field.is_empty() {
            return Some((path, fields));
        }
        fields.push(field);
    }
}

pub fn read_to_close(stream: &mut TcpStream) -> Vec<u8> {
    let mut all = Vec::new();
    let mut buf = [0u8; 65536];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return all,
            Ok(n) => all.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return all,
            Err(e) => panic!("read failed after {} bytes: {e}", all.len()),
        }
    }
}

#[derive(Debug)]
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Response {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// Reads exactly one response (head plus Content-Length body; no body if `head_only` or
/// the status has none) from the stream, byte by byte for the head so nothing of the next
/// response is consumed.
pub fn read_response(stream: &mut TcpStream, head_only: bool) -> Response {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        // A read with a timeout is not restarted after a signal (a stopped and continued
        // test process sees EINTR): read again.
        let n = loop {
            match stream.read(&mut byte) {
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                read => break read.expect("read head"),
            }
        };
        assert!(
            n == 1,
            "connection closed inside a head: {:?}",
            String::from_utf8_lossy(&head)
        );
        head.push(byte[0]);
    }
    let mut response = parse_head(std::str::from_utf8(&head).expect("utf-8 head"));
    let status = response.status;
    if head_only || status == 204 || status == 304 || status / 100 == 1 {
        return response;
    }
    if response.header("transfer-encoding") == Some("chunked") {
        response.body = read_chunked(stream);
        return response;
    }
    let len: usize = response
        .header("content-length")
        .expect("content-length")
        .parse()
        .unwrap();
    response.body = vec![0; len];
    stream.read_exact(&mut response.body).expect("read body");
    response
}

/// Reads and decodes a chunked body (no trailers), byte by byte for the size lines.
fn read_chunked(stream: &mut TcpStream) -> Vec<u8> {
    let mut body = Vec::new();
    loop {
        let mut line = Vec::new();
        let mut byte = [0u8; 1];
        while !line.ends_with(b"\r\n") {
            stream.read_exact(&mut byte).expect("chunk size line");
            line.push(byte[0]);
        }
        let size = usize::from_str_radix(std::str::from_utf8(&line[..line.len() - 2]).unwrap(), 16)
            .expect("hex chunk size");
        let mut chunk = vec![0u8; size + 2];
        stream.read_exact(&mut chunk).expect("chunk");
        assert!(chunk.ends_with(b"\r\n"), "chunk without CRLF");
        if size == 0 {
            return body;
        }
        body.extend_from_slice(&chunk[..size]);
    }
}

/// A response head (status line and fields, CRLF-separated) as a body-less [`Response`].
fn parse_head(text: &str) -> Response {
    let mut lines = text.split("\r\n");
    let status_line = lines.next().unwrap();
    assert!(status_line.starts_with("HTTP/1.1 "), "{status_line}");
    Response {
        status: status_line[9..12].parse().unwrap(),
        headers: lines
            .filter(|l| !l.is_empty())
            .map(|l| {
                let (n, v) = l.split_once(':').expect("header colon");
                (n.to_string(), v.trim().to_string())
            })
            .collect(),
        body: Vec::new(),
    }
}

/// Asserts the server closed the connection (after whatever it already sent).
pub fn assert_closed(stream: &mut TcpStream) {
    let mut buf = [0u8; 1024];
    match stream.read(&mut buf) {
        Ok(0) => {}
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
        Ok(n) => panic!(
            "expected close, got {:?}",
            String::from_utf8_lossy(&buf[..n])
        ),
        Err(e) => panic!("expected close, got error {e}"),
    }
}

/// A temporary site: a root directory with a few files, and a sibling directory outside
/// the root holding a secret that must never be served.
pub struct Site {
    pub dir: tempfile::TempDir,
}

pub const SECRET: &[u8] = b"TOP-SECRET-OUTSIDE-ROOT";

impl Site {
    pub fn new() -> Site {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        std::fs::create_dir_all(root.join("docs")).unwrap();
        std::fs::create_dir_all(root.join("empty")).unwrap();
        std::fs::write(root.join("index.html"), b"<h1>home</h1>\n").unwrap();
        std::fs::write(root.join("hello.txt"), b"hello world\n").unwrap();
        std::fs::write(root.join("docs/index.html"), b"<h1>docs</h1>\n").unwrap();
        std::fs::write(root.join("style.css"), b"body{}\n").unwrap();
        std::fs::write(dir.path().join("secret.txt"), SECRET).unwrap();
        std::os::unix::fs::symlink(dir.path().join("secret.txt"), root.join("escape.txt")).unwrap();
        std::os::unix::fs::symlink("../secret.txt", root.join("escape-relative.txt")).unwrap();
        std::os::unix::fs::symlink("hello.txt", root.join("inside.txt")).unwrap();
        Site { dir }
    }

    pub fn root(&self) -> PathBuf {
        self.dir.path().join("root")
    }

    pub fn write(&self, name: &str, contents: &[u8]) {
        std::fs::write(self.root().join(name), contents).unwrap();
    }

    pub fn serve(&self) -> Server {
        Server::start(&self.root(), &[])
    }

    /// Serves with a config file holding `toml` (one worker, an ephemeral port).
    pub fn serve_with(&self, toml: &str) -> Server {
        let config = self.dir.path().join("tessera.toml");
        std::fs::write(&config, toml).unwrap();
        Server::start(&self.root(), &["--config", config.to_str().unwrap()])
    }
}

/// Sent after every attack on the same connection, in the same write. A refused attack
/// must leave it unanswered; its `Connection: close` makes a wrongly answered follow-up
/// end the exchange at once instead of hanging the test.
pub const FOLLOW_UP: &[u8] = b"GET /canary.txt HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n";
/// The body of `/canary.txt`, the follow-up's answer.
pub const CANARY: &[u8] = b"CANARY: the follow-up request was answered";
/// The body of `/smuggled.txt`, which attacks try to request from inside a body.
pub const SMUGGLED: &[u8] = b"SMUGGLED: a request hidden in another one was answered";

impl Site {
    /// A site with the canary and smuggled files the attack tests look for.
    pub fn hostile() -> Site {
        let site = Site::new();
        site.write("canary.txt", CANARY);
        site.write("smuggled.txt", SMUGGLED);
        site
    }
}

pub fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// Splits everything a server sent into responses (each framed by Content-Length, or
/// bodiless for 1xx, 204 and 304). Panics on bytes that are not whole responses.
pub fn parse_responses(mut bytes: &[u8]) -> Vec<Response> {
    let mut responses = Vec::new();
    while !bytes.is_empty() {
        let head_end = bytes
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .unwrap_or_else(|| {
                panic!(
                    "partial response head: {:?}",
                    String::from_utf8_lossy(bytes)
                )
            })
            + 4;
        let mut response = parse_head(std::str::from_utf8(&bytes[..head_end]).expect("utf-8 head"));
        let status = response.status;
        bytes = &bytes[head_end..];
        if !(status == 204 || status == 304 || status / 100 == 1) {
            let len: usize = response
                .header("content-length")
                .expect("content-length")
                .parse()
                .unwrap();
            assert!(
                bytes.len() >= len,
                "truncated body after {:?}",
                response.headers
            );
            response.body = bytes[..len].to_vec();
            bytes = &bytes[len..];
        }
        responses.push(response);
    }
    responses
}

/// Polls `check` every 20 ms for up to 30 s (a loaded machine is slow, never wrong).
pub fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let start = std::time::Instant::now();
    while !check() {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "timed out waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The address in a `serving ... on SCHEME://ADDR/` line that contains `marker`, among
/// the lines kept (every one but the first `http://` line, which gave `Server::addr`).
pub fn printed_addr(server: &Server, marker: &str) -> SocketAddr {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let lines = server.stderr.lock().unwrap().clone();
        if let Some(addr) = lines.iter().filter(|l| l.contains(marker)).find_map(|l| {
            let rest = l.split_once("://")?.1;
            rest.split('/').next()?.parse().ok()
        }) {
            return addr;
        }
        assert!(Instant::now() < deadline, "no {marker:?} line in {lines:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Whether the server has printed a line containing `needle` on stderr.
pub fn stderr_has(server: &Server, needle: &str) -> bool {
    server
        .stderr
        .lock()
        .unwrap()
        .iter()
        .any(|l| l.contains(needle))
}

/// A load loop for tests that change a running server (reload, upgrade): threads that
/// request `path` until stopped, some on a new connection per request and some on
/// keep-alive connections (reconnecting when the server closes one after a complete
/// response), counting every request that did not get a whole `200` with `body`.
pub struct Load {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    threads: Vec<std::thread::JoinHandle<LoadCount>>,
}

#[derive(Debug, Default)]
pub struct LoadCount {
    pub ok: u64,
    pub failed: u64,
    /// The first few failures, described.
    pub errors: Vec<String>,
}

impl Load {
    pub fn start(addr: SocketAddr, path: &str, body: &'static [u8]) -> Load {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let threads = [false, true, false, true]
            .into_iter()
            .map(|keep_alive| {
                let stop = stop.clone();
                let path = path.to_string();
                std::thread::spawn(move || load_loop(addr, &path, body, keep_alive, &stop))
            })
            .collect();
        Load { stop, threads }
    }

    /// Stops the loop (bounded anyway: every request has a 10 s timeout) and sums up.
    pub fn stop(self) -> LoadCount {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let mut all = LoadCount::default();
        for thread in self.threads {
            let c = thread.join().unwrap();
            all.ok += c.ok;
            all.failed += c.failed;
            all.errors.extend(c.errors);
        }
        all.errors.truncate(5);
        all
    }
}

fn load_loop(
    addr: SocketAddr,
    path: &str,
    body: &[u8],
    keep_alive: bool,
    stop: &std::sync::atomic::AtomicBool,
) -> LoadCount {
    let mut count = LoadCount::default();
    let mut held: Option<BufReader<TcpStream>> = None;
    let started = std::time::Instant::now();
    // At most 5 minutes, whatever the test does.
    while !stop.load(std::sync::atomic::Ordering::Relaxed)
        && started.elapsed() < Duration::from_secs(300)
    {
        let result = (|| -> Result<bool, String> {
            if held.is_none() {
                let stream = TcpStream::connect(addr).map_err(|e| format!("connect: {e}"))?;
                stream
                    .set_read_timeout(Some(Duration::from_secs(10)))
                    .unwrap();
                held = Some(BufReader::new(stream));
            }
            let reader = held.as_mut().unwrap();
            let connection = if keep_alive { "keep-alive" } else { "close" };
            write!(
                reader.get_mut(),
                "GET {path} HTTP/1.1\r\nHost: test\r\nConnection: {connection}\r\n\r\n"
            )
            .map_err(|e| format!("write: {e}"))?;
            let mut status = String::new();
            reader
                .read_line(&mut status)
                .map_err(|e| format!("read: {e}"))?;
            if !status.starts_with("HTTP/1.1 200 ") {
                return Err(format!("status line {status:?}"));
            }
            let mut len = None;
            let mut closes = !keep_alive;
            loop {
                let mut line = String::new();
                reader
                    .read_line(&mut line)
                    .map_err(|e| format!("read: {e}"))?;
                let line = line.trim_end();
                if line.is_empty() {
                    break;
                }
                let (name, value) = line.split_once(':').ok_or("bad field")?;
                let value = value.trim();
                if name.eq_ignore_ascii_case("content-length") {
                    len = value.parse::<usize>().ok();
                }
                if name.eq_ignore_ascii_case("connection") && value.eq_ignore_ascii_case("close") {
                    closes = true;
                }
            }
            let mut got = vec![0; len.ok_or("no content-length")?];
            reader
                .read_exact(&mut got)
                .map_err(|e| format!("read body: {e}"))?;
            if got != body {
                return Err(format!("body {:?}", String::from_utf8_lossy(&got)));
            }
            Ok(closes)
        })();
        match result {
            Ok(closes) => {
                count.ok += 1;
                if closes {
                    held = None;
                }
            }
            Err(e) => {
                count.failed += 1;
                if count.errors.len() < 5 {
                    count.errors.push(e);
                }
                held = None;
            }
        }
    }
    count
}

/// An origin on an ephemeral loopback port that answers each request with its target and
/// its fields, one per line, then closes the connection.
pub fn echo_origin() -> std::net::SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut reader = std::io::BufReader::new(stream.try_clone().unwrap());
            if let Some((target, fields)) = read_request_head(&mut reader) {
                let body = format!("{target}\n{}\n", fields.join("\n"));
                let _ = write!(
                    stream,
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
            }
        }
    });
    addr
}

/// `tessera logs report --json LOG`, which must succeed: its report.
pub fn logs_report_json(log: &Path) -> serde_json::Value {
    let out = Command::new(env!("CARGO_BIN_EXE_tessera"))
        .args(["logs", "report", "--json"])
        .arg(log)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// A Python `script` run on `path` (its `sys.argv[1]`), which must succeed: what it
/// printed.
pub fn python_on(script: &str, path: &Path) -> String {
    let out = Command::new("python3")
        .args(["-c", script])
        .arg(path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// `tessera check-config --config PATH`: its exit code and its standard error.
pub fn check_config_output(path: &Path) -> (Option<i32>, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_tessera"))
        .args(["check-config", "--config"])
        .arg(path)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    (out.status.code(), stderr)
}

/// Serves each connection `listener` accepts with `serve` on a thread of its own, from
/// a thread that accepts for as long as the test runs (a test origin's accept loop).
pub fn thread_per_connection(
    listener: std::net::TcpListener,
    serve: impl Fn(std::net::TcpStream) + Clone + Send + 'static,
) {
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let serve = serve.clone();
            std::thread::spawn(move || serve(stream));
        }
    });
}

/// Copies `from` to `to` on a thread of its own until either ends, then shuts `to`
/// down: one direction of a test's TCP relay.
pub fn pump(mut from: TcpStream, mut to: TcpStream) {
    std::thread::spawn(move || {
        let mut buf = [0u8; 16 * 1024];
        while let Ok(n) = from.read(&mut buf) {
            if n == 0 || to.write_all(&buf[..n]).is_err() {
                break;
            }
        }
        let _ = to.shutdown(Shutdown::Both);
    });
}
