//! A small scripted HTTP/1.1 server for tests and demos of the load generator:
//! one thread per connection, behaviour chosen by the request path. It is not
//! for production and not fast; it exists so the generator's counting,
//! classification and latency figures can be checked against known behaviour.
//!
//! Paths:
//! - `/delay/MS` answers 200 after MS milliseconds;
//! - `/status/CODE` answers with that status;
//! - `/chunked` answers 200 with a chunked body;
//! - `/close` closes the connection without answering;
//! - `/garbage` answers with bytes that are not HTTP;
//! - `/hang` never answers (until the client closes);
//! - anything else answers 200 with a short body.
//!
//! [`TestServer::stall_after`] makes the whole server freeze once, for a given
//! time, after it has seen a number of requests (to test coordinated-omission
//! correction).

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[derive(Debug, Default)]
struct Shared {
    requests: AtomicU64,
    connections: AtomicU64,
    max_pipelined: AtomicU64,
    stop: AtomicBool,
    stall: Mutex<Option<Stall>>,
}

#[derive(Debug, Clone, Copy)]
struct Stall {
    after: u64,
    length: Duration,
    until: Option<Instant>,
}

/// A running test server; stops when dropped.
#[derive(Debug)]
pub struct TestServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    unix: Option<std::path::PathBuf>,
}

impl TestServer {
    /// Starts on an ephemeral port of 127.0.0.1.
    pub fn start() -> io::Result<TestServer> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared::default());
        accept_in_thread(
            shared.clone(),
            listener,
            |l| l.accept().map(|(conn, _)| conn),
            |conn| {
                let _ = conn.set_nodelay(true);
            },
        )?;
        Ok(TestServer {
            addr,
            shared,
            unix: None,
        })
    }

    /// Starts on a unix socket at `path` (which must not exist yet).
    pub fn start_unix(path: &std::path::Path) -> io::Result<TestServer> {
        let listener = std::os::unix::net::UnixListener::bind(path)?;
        let shared = Arc::new(Shared::default());
        accept_in_thread(
            shared.clone(),
            listener,
            |l| l.accept().map(|(conn, _)| conn),
            |_| {},
        )?;
        Ok(TestServer {
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            shared,
            unix: Some(path.to_path_buf()),
        })
    }

    /// Freeze every connection for `length` once `after` requests have been seen.
    pub fn stall_after(&self, after: u64, length: Duration) {
        *self.shared.stall.lock().expect("stall lock") = Some(Stall {
            after,
            length,
            until: None,
        });
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT` followed by `path`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }

    /// Requests received so far.
    pub fn requests(&self) -> u64 {
        self.shared.requests.load(Ordering::Relaxed)
    }

    /// Connections accepted so far.
    pub fn connections(&self) -> u64 {
        self.shared.connections.load(Ordering::Relaxed)
    }

    /// The most complete requests that arrived together in one read.
    pub fn max_pipelined(&self) -> u64 {
        self.shared.max_pipelined.load(Ordering::Relaxed)
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        // Wake the accept loop so it sees the flag.
        match &self.unix {
            Some(p) => {
                let _ = std::os::unix::net::UnixStream::connect(p);
                let _ = std::fs::remove_file(p);
            }
            None => {
                let _ = TcpStream::connect(self.addr);
            }
        }
    }
}

/// Length of the complete request at the start of `buf`, if there is one.
fn request_len(buf: &[u8]) -> Option<Result<(usize, String, bool), ()>> {
    let mut headers = [httparse::EMPTY_HEADER; 32];
    let mut req = httparse::Request::new(&mut headers);
    match req.parse(buf) {
        Ok(httparse::Status::Complete(head)) => {
            let mut body = 0usize;
            let mut close = false;
            for h in req.headers.iter() {
                if h.name.eq_ignore_ascii_case("content-length") {
                    body = std::str::from_utf8(h.value).ok()?.trim().parse().ok()?;
                }
                if h.name.eq_ignore_ascii_case("connection")
                    && h.value.eq_ignore_ascii_case(b"close")
                {
                    close = true;
                }
            }
            if buf.len() < head + body {
                return None;
            }
            Some(Ok((
                head + body,
                req.path.unwrap_or("/").to_string(),
                close,
            )))
        }
        Ok(httparse::Status::Partial) => None,
        Err(_) => Some(Err(())),
    }
}

trait Conn: Read + Write {
    fn close(&mut self);
}

impl Conn for TcpStream {
    fn close(&mut self) {
        let _ = self.shutdown(Shutdown::Both);
    }
}

impl Conn for std::os::unix::net::UnixStream {
    fn close(&mut self) {
        let _ = self.shutdown(Shutdown::Both);
    }
}

fn serve(mut conn: impl Conn, s: &Shared) -> io::Result<()> {
    let mut buf = Vec::with_capacity(8192);
    let mut chunk = [0u8; 8192];
    loop {
        let n = conn.read(&mut chunk)?;
        if n == 0 || s.stop.load(Ordering::Relaxed) {
            return Ok(());
        }
        buf.extend_from_slice(&chunk[..n]);
        // Count how many complete requests arrived together (pipelining depth).
        let mut ready = 0;
        let mut off = 0;
        while let Some(Ok((len, _, _))) = request_len(&buf[off..]) {
            ready += 1;
            off += len;
        }
        s.max_pipelined.fetch_max(ready, Ordering::Relaxed);
        loop {
            let (len, path, close) = match request_len(&buf) {
                None => break,
                Some(Err(())) => {
                    conn.write_all(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")?;
                    return Ok(());
                }
                Some(Ok(r)) => r,
            };
            buf.drain(..len);
            let seen = s.requests.fetch_add(1, Ordering::Relaxed) + 1;
            stall(s, seen);
            if !respond(&mut conn, &path, close)? {
                conn.close();
                return Ok(());
            }
        }
    }
}

fn stall(s: &Shared, seen: u64) {
    let until = {
        let mut g = s.stall.lock().expect("stall lock");
        match g.as_mut() {
            Some(st) if st.until.is_none() && seen >= st.after => {
                let u = Instant::now() + st.length;
                st.until = Some(u);
                Some(u)
            }
            Some(st) => st.until,
            None => None,
        }
    };
    if let Some(u) = until {
        let now = Instant::now();
        if now < u {
            std::thread::sleep(u - now);
        }
    }
}

/// Writes the scripted answer; false means the connection must close now.
fn respond(conn: &mut impl Conn, path: &str, close: bool) -> io::Result<bool> {
    let conn_header = if close { "Connection: close\r\n" } else { "" };
    let simple = |status: u16, reason: &str, body: &str| {
        format!(
            "HTTP/1.1 {status} {reason}\r\nContent-Length: {}\r\n{conn_header}\r\n{body}",
            body.len()
        )
    };
    let response = if let Some(ms) = path.strip_prefix("/delay/") {
        let ms: u64 = ms.parse().unwrap_or(0);
        std::thread::sleep(Duration::from_millis(ms));
        simple(200, "OK", "delayed")
    } else if let Some(code) = path.strip_prefix("/status/") {
        let code: u16 = code.parse().unwrap_or(500);
        simple(code, "Scripted", "status")
    } else if path == "/chunked" {
        format!("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n{conn_header}\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n")
    } else if path == "/close" {
        return Ok(false);
    } else if path == "/garbage" {
        "this is not http\r\n\r\n".to_string()
    } else if path == "/hang" {
        // Never answer; wait until the client gives up and closes.
        let mut sink = [0u8; 1024];
        while matches!(conn.read(&mut sink), Ok(n) if n > 0) {}
        return Ok(false);
    } else {
        simple(200, "OK", "hello from the test server\n")
    };
    conn.write_all(response.as_bytes())?;
    Ok(!close)
}

/// Accepts connections on a thread of its own (the listener moves into it) and serves
/// each on a thread; `prepare` adjusts a connection before it is served.
fn accept_in_thread<L, C>(
    shared: Arc<Shared>,
    listener: L,
    accept: fn(&L) -> io::Result<C>,
    prepare: fn(&C),
) -> io::Result<()>
where
    L: Send + 'static,
    C: Conn + Send + 'static,
{
    std::thread::Builder::new()
        .name("testserver-accept".into())
        .spawn(move || loop {
            let conn = accept(&listener);
            if shared.stop.load(Ordering::Relaxed) {
                break;
            }
            let Ok(conn) = conn else { continue };
            shared.connections.fetch_add(1, Ordering::Relaxed);
            let s = shared.clone();
            let _ = std::thread::Builder::new()
                .name("testserver-conn".into())
                .spawn(move || {
                    prepare(&conn);
                    let _ = serve(conn, &s);
                });
        })?;
    Ok(())
}
