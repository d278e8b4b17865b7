//! An origin server for tests: real sockets on loopback, its own thread and runtime, and
//! per-path behaviour the test controls (body, delay, status, ESI marking, reset, hang).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// What the origin does for one path.
#[derive(Clone, Debug)]
pub enum Reply {
    /// Answers after `delay` with `status` and `body`; `esi` adds
    /// `Surrogate-Control: content="ESI/1.0"`; `headers` are extra response headers.
    Ok {
        body: String,
        delay: Duration,
        status: u16,
        esi: bool,
        headers: Vec<(String, String)>,
    },
    /// Answers 200 with a chunked body, the parts `gap` apart.
    Chunked {
        parts: Vec<String>,
        gap: Duration,
        esi: bool,
    },
    /// Reads the request, then closes the connection without answering.
    Reset,
    /// Reads the request and never answers (the connection stays open).
    Hang,
}

pub fn page(body: &str) -> Reply {
    Reply::Ok {
        body: body.into(),
        delay: Duration::ZERO,
        status: 200,
        esi: true,
        headers: Vec::new(),
    }
}

pub fn frag(body: &str, delay_ms: u64) -> Reply {
    Reply::Ok {
        body: body.into(),
        delay: Duration::from_millis(delay_ms),
        status: 200,
        esi: false,
        headers: Vec::new(),
    }
}

pub fn status(code: u16, delay_ms: u64) -> Reply {
    Reply::Ok {
        body: format!("error {code}"),
        delay: Duration::from_millis(delay_ms),
        status: code,
        esi: false,
        headers: Vec::new(),
    }
}

/// One request the origin received.
#[derive(Clone, Debug)]
pub struct Seen {
    pub path: String,
    /// The request target as received (path and query).
    pub target: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Seen {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

#[derive(Default)]
struct State {
    replies: HashMap<String, Reply>,
    seen: Vec<Seen>,
    connections: usize,
}

#[derive(Clone)]
pub struct Origin {
    pub addr: SocketAddr,
    state: Arc<Mutex<State>>,
}

impl Origin {
    /// Starts an origin on an ephemeral loopback port with these replies (by path,
    /// without the query); other paths answer 404.
    pub fn start(replies: &[(&str, Reply)]) -> Origin {
        let std_listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        std_listener.set_nonblocking(true).unwrap();
        let addr = std_listener.local_addr().unwrap();
        let state = Arc::new(Mutex::new(State::default()));
        for (path, reply) in replies {
            state
                .lock()
                .unwrap()
                .replies
                .insert(path.to_string(), reply.clone());
        }
        let shared = state.clone();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let listener = TcpListener::from_std(std_listener).unwrap();
                loop {
                    let Ok((stream, _)) = listener.accept().await else {
                        continue;
                    };
                    shared.lock().unwrap().connections += 1;
                    tokio::spawn(serve(stream, shared.clone()));
                }
            });
        });
        Origin { addr, state }
    }

    pub fn set(&self, path: &str, reply: Reply) {
        self.state
            .lock()
            .unwrap()
            .replies
            .insert(path.into(), reply);
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.state.lock().unwrap().seen.clone()
    }

    pub fn hits(&self, path: &str) -> usize {
        self.seen().iter().filter(|s| s.path == path).count()
    }

    pub fn connections(&self) -> usize {
        self.state.lock().unwrap().connections
    }
}

async fn serve(mut stream: TcpStream, state: Arc<Mutex<State>>) {
    let mut buf = Vec::new();
    loop {
        let head_end = loop {
            if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break i + 4;
            }
            let mut chunk = [0u8; 4096];
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        };
        let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
        let mut lines = head.split("\r\n");
        let target = lines
            .next()
            .and_then(|l| l.split(' ').nth(1))
            .unwrap_or("/")
            .to_string();
        let headers: Vec<(String, String)> = lines
            .filter_map(|l| l.split_once(':'))
            .map(|(n, v)| (n.trim().to_string(), v.trim().to_string()))
            .collect();
        let body_len: usize = headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case("content-length"))
            .and_then(|(_, v)| v.parse().ok())
            .unwrap_or(0);
        while buf.len() < head_end + body_len {
            let mut chunk = [0u8; 4096];
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
        let body = buf[head_end..head_end + body_len].to_vec();
        buf.drain(..head_end + body_len);
        let path = target.split('?').next().unwrap_or("/").to_string();
        let reply = {
            let mut s = state.lock().unwrap();
            s.seen.push(Seen {
                path: path.clone(),
                target: target.to_string(),
                headers,
                body,
            });
            s.replies.get(&path).cloned()
        };
        match reply {
            None => {
                let _ = stream
                    .write_all(b"HTTP/1.1 404 Not Found\r\ncontent-length: 9\r\n\r\nnot found")
                    .await;
            }
            Some(Reply::Reset) => return,
            Some(Reply::Chunked { parts, gap, esi }) => {
                let mut head = String::from("HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n");
                if esi {
                    head.push_str("surrogate-control: content=\"ESI/1.0\"\r\n");
                }
                head.push_str("\r\n");
                if stream.write_all(head.as_bytes()).await.is_err() {
                    return;
                }
                for (i, part) in parts.iter().enumerate() {
                    if i > 0 {
                        tokio::time::sleep(gap).await;
                    }
                    let chunk = format!("{:x}\r\n{part}\r\n", part.len());
                    if stream.write_all(chunk.as_bytes()).await.is_err() {
                        return;
                    }
                }
                if stream.write_all(b"0\r\n\r\n").await.is_err() {
                    return;
                }
            }
            Some(Reply::Hang) => {
                tokio::time::sleep(Duration::from_secs(3600)).await;
                return;
            }
            Some(Reply::Ok {
                body,
                delay,
                status,
                esi,
                headers,
            }) => {
                tokio::time::sleep(delay).await;
                let mut out = format!(
                    "HTTP/1.1 {status} X\r\ncontent-type: text/html\r\ncontent-length: {}\r\n",
                    body.len()
                );
                if esi {
                    out.push_str("surrogate-control: max-age=60, content=\"ESI/1.0\"\r\n");
                }
                for (n, v) in headers {
                    out.push_str(&format!("{n}: {v}\r\n"));
                }
                out.push_str("\r\n");
                out.push_str(&body);
                if stream.write_all(out.as_bytes()).await.is_err() {
                    return;
                }
            }
        }
    }
}

/// A server that accepts connections and never reads or answers.
pub fn black_hole() -> SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for s in listener.incoming().flatten() {
            held.push(s);
        }
    });
    addr
}

/// An address nothing listens on.
pub fn closed_port() -> SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap()
}
