//! How a connection closes after its last response, on real sockets against the server
//! running in this process: at once when the client has nothing more in flight (no
//! half-close and drain, so no second read), lingering when it might (an unread body,
//! pipelined bytes), so that the client still gets its whole response and no reset.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};

struct Server {
    running: server::Running,
    addr: SocketAddr,
    _dir: tempfile::TempDir,
}

fn start() -> Server {
    let (dir, addr, running) = common::serve_hello();
    Server {
        running,
        addr,
        _dir: dir,
    }
}

/// Reads to end-of-file; a reset is an error (it would have destroyed the response).
fn read_to_eof(stream: &mut TcpStream) -> String {
    let mut response = Vec::new();
    stream
        .read_to_end(&mut response)
        .expect("the connection ended with an error, not end-of-file");
    String::from_utf8(response).unwrap()
}

fn responses(text: &str) -> usize {
    text.matches("HTTP/1.1 ").count()
}

#[test]
fn a_request_read_completely_closes_at_once_without_lingering() {
    let server = start();
    for request in [
        &b"GET /hello.txt HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"[..],
        // HTTP/1.0 without keep-alive closes after its response too.
        b"GET /hello.txt HTTP/1.0\r\n\r\n",
        // A body sent whole is read whole: nothing is left to drain.
        b"POST /hello.txt HTTP/1.1\r\nHost: t\r\nConnection: close\r\nContent-Length: 5\r\n\r\nhello",
    ] {
        let mut stream = TcpStream::connect(server.addr).unwrap();
        stream.write_all(request).unwrap();
        let response = read_to_eof(&mut stream);
        assert_eq!(responses(&response), 1, "{response}");
        assert!(response.contains("Connection: close"), "{response}");
    }
    // The plain GETs got their file.
    let mut stream = TcpStream::connect(server.addr).unwrap();
    stream
        .write_all(b"GET /hello.txt HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
        .unwrap();
    assert!(read_to_eof(&mut stream).ends_with("\r\n\r\nhello world\n"));
    // The end-of-file came from close(2), not from a half-close followed by a drain.
    assert_eq!(server.running.lingering_closes(), 0);
    server.running.shutdown();
    server.running.join();
}

#[test]
fn an_unread_body_or_pipelined_bytes_linger_and_the_response_arrives_whole() {
    let server = start();

    // A body much larger than what is sent before the response: the server answers
    // without reading it (a static file refuses POST) and closes.
    let mut stream = TcpStream::connect(server.addr).unwrap();
    stream
        .write_all(
            b"POST /hello.txt HTTP/1.1\r\nHost: t\r\nConnection: close\r\nContent-Length: 1000000\r\n\r\n",
        )
        .unwrap();
    stream.write_all(&[b'x'; 64 * 1024]).unwrap();
    let mut head = [0u8; 12];
    stream.read_exact(&mut head).unwrap();
    assert_eq!(&head, b"HTTP/1.1 405");
    // The client goes on sending its body after the response started: a server that
    // closed at once would answer these bytes with a reset.
    stream.write_all(&[b'x'; 64 * 1024]).unwrap();
    let rest = read_to_eof(&mut stream);
    assert!(rest.contains("Connection: close"), "{rest}");
    assert_eq!(server.running.lingering_closes(), 1);

    // Two requests in one write, the first asking to close: the second is never
    // answered, and lies unread in the buffer when the first's response goes out.
    let mut stream = TcpStream::connect(server.addr).unwrap();
    stream
        .write_all(
            b"GET /hello.txt HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n\
              GET /hello.txt HTTP/1.1\r\nHost: t\r\n\r\n",
        )
        .unwrap();
    let response = read_to_eof(&mut stream);
    assert_eq!(responses(&response), 1, "{response}");
    assert!(response.ends_with("\r\n\r\nhello world\n"), "{response}");
    assert_eq!(server.running.lingering_closes(), 2);

    // A refused request: what follows its bad head may still be on its way.
    let mut stream = TcpStream::connect(server.addr).unwrap();
    stream
        .write_all(b"GET /hello.txt HTTP/1.1\r\nHost: t\r\nBad Header\r\n\r\n")
        .unwrap();
    let response = read_to_eof(&mut stream);
    assert!(response.starts_with("HTTP/1.1 400 "), "{response}");
    assert_eq!(server.running.lingering_closes(), 3);

    server.running.shutdown();
    server.running.join();
}
