//! WebSocket through the proxy (docs/upstreams.md, "Upgrades"): a real WebSocket echo
//! origin started by the test (RFC 6455 handshake and framing, written here), the real
//! binary in between, text and binary frames both ways, a 1 MiB message, the close
//! handshake, and an idle tunnel closed at its timeout.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use crate::harness::Site;

/// SHA-1 (RFC 3174), for the handshake's Sec-WebSocket-Accept only.
fn sha1(data: &[u8]) -> [u8; 20] {
    let mut h: [u32; 5] = [0x67452301, 0xEFCDAB89, 0x98BADCFE, 0x10325476, 0xC3D2E1F0];
    let mut msg = data.to_vec();
    msg.push(0x80);
    while msg.len() % 64 != 56 {
        msg.push(0);
    }
    msg.extend_from_slice(&((data.len() as u64) * 8).to_be_bytes());
    for block in msg.chunks(64) {
        let mut w = [0u32; 80];
        for i in 0..16 {
            w[i] = u32::from_be_bytes(block[i * 4..i * 4 + 4].try_into().unwrap());
        }
        for i in 16..80 {
            w[i] = (w[i - 3] ^ w[i - 8] ^ w[i - 14] ^ w[i - 16]).rotate_left(1);
        }
        let [mut a, mut b, mut c, mut d, mut e] = h;
        for (i, wi) in w.iter().enumerate() {
            let (f, k) = match i {
                0..=19 => ((b & c) | (!b & d), 0x5A827999),
                20..=39 => (b ^ c ^ d, 0x6ED9EBA1),
                40..=59 => ((b & c) | (b & d) | (c & d), 0x8F1BBCDC),
                _ => (b ^ c ^ d, 0xCA62C1D6),
            };
            let t = a
                .rotate_left(5)
                .wrapping_add(f)
                .wrapping_add(e)
                .wrapping_add(k)
                .wrapping_add(*wi);
            (e, d, c, b, a) = (d, c, b.rotate_left(30), a, t);
        }
        for (x, y) in h.iter_mut().zip([a, b, c, d, e]) {
            *x = x.wrapping_add(y);
        }
    }
    let mut out = [0u8; 20];
    for (i, x) in h.iter().enumerate() {
        out[i * 4..i * 4 + 4].copy_from_slice(&x.to_be_bytes());
    }
    out
}

fn base64(data: &[u8]) -> String {
    const ABC: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in data.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, &b)| n | (b as u32) << (16 - 8 * i));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ABC[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

fn accept_key(key: &str) -> String {
    base64(&sha1(
        format!("{key}258EAFA5-E914-47DA-95CA-C5AB0DC85B11").as_bytes(),
    ))
}

/// Reads up to the end of an HTTP head, byte by byte (nothing after it is consumed).
fn read_head(stream: &mut TcpStream) -> String {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if stream.read(&mut byte).unwrap() == 0 {
            break;
        }
        head.push(byte[0]);
    }
    String::from_utf8(head).unwrap()
}

/// One frame: (opcode, payload), unmasked. `None` at end of stream.
fn read_frame(stream: &mut TcpStream) -> Option<(u8, Vec<u8>)> {
    let mut b = [0u8; 2];
    stream.read_exact(&mut b).ok()?;
    assert_eq!(b[0] & 0x80, 0x80, "unfragmented frames only");
    let masked = b[1] & 0x80 != 0;
    let len = match b[1] & 0x7f {
        126 => {
            let mut l = [0u8; 2];
            stream.read_exact(&mut l).ok()?;
            u16::from_be_bytes(l) as usize
        }
        127 => {
            let mut l = [0u8; 8];
            stream.read_exact(&mut l).ok()?;
            u64::from_be_bytes(l) as usize
        }
        n => n as usize,
    };
    let mut mask = [0u8; 4];
    if masked {
        stream.read_exact(&mut mask).ok()?;
    }
    let mut payload = vec![0u8; len];
    stream.read_exact(&mut payload).ok()?;
    if masked {
        for (i, p) in payload.iter_mut().enumerate() {
            *p ^= mask[i % 4];
        }
    }
    Some((b[0] & 0x0f, payload))
}

/// Writes one final frame, masked (as a client must) when `mask` is given.
fn write_frame(
    stream: &mut TcpStream,
    opcode: u8,
    payload: &[u8],
    mask: Option<[u8; 4]>,
) -> std::io::Result<()> {
    let mut frame = vec![0x80 | opcode];
    let m = if mask.is_some() { 0x80 } else { 0 };
    match payload.len() {
        n if n < 126 => frame.push(m | n as u8),
        n if n < 65536 => {
            frame.push(m | 126);
            frame.extend_from_slice(&(n as u16).to_be_bytes());
        }
        n => {
            frame.push(m | 127);
            frame.extend_from_slice(&(n as u64).to_be_bytes());
        }
    }
    match mask {
        Some(mask) => {
            frame.extend_from_slice(&mask);
            frame.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
        }
        None => frame.extend_from_slice(payload),
    }
    stream.write_all(&frame)
}

/// A WebSocket echo server: every data frame comes back with its opcode; a close frame
/// is answered with a close frame, then the connection is closed.
fn echo_origin() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            std::thread::spawn(move || {
                let mut stream = stream;
                let head = read_head(&mut stream);
                let key = head
                    .lines()
                    .find_map(|l| {
                        let (name, value) = l.split_once(':')?;
                        name.eq_ignore_ascii_case("sec-websocket-key")
                            .then(|| value.trim().to_string())
                    })
                    .expect("Sec-WebSocket-Key");
                let lower = head.to_ascii_lowercase();
                assert!(lower.contains("upgrade: websocket"), "{head}");
                assert!(lower.contains("connection: upgrade"), "{head}");
                let response = format!(
                    "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\
                     Connection: Upgrade\r\nSec-WebSocket-Accept: {}\r\n\r\n",
                    accept_key(&key)
                );
                stream.write_all(response.as_bytes()).unwrap();
                while let Some((opcode, payload)) = read_frame(&mut stream) {
                    if write_frame(&mut stream, opcode, &payload, None).is_err() || opcode == 8 {
                        return;
                    }
                }
            });
        }
    });
    addr
}

/// Opens a WebSocket through the proxy; the stream after the 101 head.
fn open(server_addr: SocketAddr) -> TcpStream {
    let mut stream = TcpStream::connect(server_addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    stream
        .write_all(
            b"GET /chat HTTP/1.1\r\nHost: test\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
              Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n",
        )
        .unwrap();
    let head = read_head(&mut stream);
    assert!(head.starts_with("HTTP/1.1 101 "), "{head}");
    let lower = head.to_ascii_lowercase();
    // RFC 6455's own example key and answer.
    assert!(
        lower.contains("sec-websocket-accept: s3pplmbitxaq9kygzzhzrbk+xoo="),
        "{head}"
    );
    assert!(lower.contains("upgrade: websocket"), "{head}");
    assert!(lower.contains("connection: upgrade"), "{head}");
    stream
}

fn serve(site: &Site, origin: SocketAddr, extra: &str) -> crate::harness::Server {
    site.serve_with(&format!(
        "[[upstream]]\naddresses = [\"{origin}\"]\n{extra}\n[[route]]\nupstream = \"origin\"\n"
    ))
}

#[test]
fn websocket_echo_through_the_proxy_text_binary_1_mib_and_close() {
    assert_eq!(
        accept_key("dGhlIHNhbXBsZSBub25jZQ=="),
        "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
    );
    let site = Site::new();
    let server = serve(&site, echo_origin(), "");
    let mut ws = open(server.addr);
    let mask = Some([0x12, 0x34, 0x56, 0x78]);
    write_frame(&mut ws, 1, b"hello, tunnel", mask).unwrap();
    assert_eq!(read_frame(&mut ws), Some((1, b"hello, tunnel".to_vec())));
    let binary: Vec<u8> = (0..300u32).map(|i| (i * 7) as u8).collect();
    write_frame(&mut ws, 2, &binary, mask).unwrap();
    assert_eq!(read_frame(&mut ws), Some((2, binary)));
    let big: Vec<u8> = (0..1u32 << 20).map(|i| (i ^ (i >> 8)) as u8).collect();
    write_frame(&mut ws, 2, &big, mask).unwrap();
    let (opcode, echoed) = read_frame(&mut ws).unwrap();
    assert_eq!((opcode, echoed.len()), (2, big.len()));
    assert!(echoed == big, "the 1 MiB message came back changed");
    // The close handshake: code 1000 each way, then the connection ends.
    write_frame(&mut ws, 8, &1000u16.to_be_bytes(), mask).unwrap();
    assert_eq!(
        read_frame(&mut ws),
        Some((8, 1000u16.to_be_bytes().to_vec()))
    );
    let mut rest = [0u8; 16];
    assert_eq!(
        ws.read(&mut rest).unwrap(),
        0,
        "closed after the close handshake"
    );
    // The next one works as well.
    let mut again = open(server.addr);
    write_frame(&mut again, 1, b"again", mask).unwrap();
    assert_eq!(read_frame(&mut again), Some((1, b"again".to_vec())));
}

#[test]
fn an_idle_tunnel_is_closed_at_its_timeout() {
    let site = Site::new();
    let server = serve(&site, echo_origin(), "tunnel_idle_timeout = 0.5");
    let mut ws = open(server.addr);
    write_frame(&mut ws, 1, b"ping", Some([1, 2, 3, 4])).unwrap();
    assert_eq!(read_frame(&mut ws), Some((1, b"ping".to_vec())));
    let idle = Instant::now();
    let mut rest = [0u8; 16];
    let n = ws.read(&mut rest).unwrap_or(0);
    let took = idle.elapsed();
    assert_eq!(n, 0, "closed, nothing sent");
    assert!(
        took >= Duration::from_millis(450) && took < Duration::from_millis(3000),
        "closed after {took:?}"
    );
}

#[test]
fn a_busy_tunnel_is_closed_at_its_maximum_duration() {
    let site = Site::new();
    let server = serve(
        &site,
        echo_origin(),
        "tunnel_idle_timeout = 10\ntunnel_max_duration = 0.6",
    );
    let mut ws = open(server.addr);
    let opened = Instant::now();
    // A frame every 50 ms: never idle, yet closed at 0.6 s.
    loop {
        let sent = write_frame(&mut ws, 1, b"tick", Some([9, 8, 7, 6]));
        if sent.is_err() || read_frame(&mut ws).is_none() {
            break;
        }
        assert!(opened.elapsed() < Duration::from_secs(5), "never closed");
        std::thread::sleep(Duration::from_millis(50));
    }
    let took = opened.elapsed();
    assert!(
        took >= Duration::from_millis(550) && took < Duration::from_millis(2500),
        "closed after {took:?}"
    );
}
