//! Request heads: read and answered, malformed ones reset, CONTINUATION, the head
//! budget, bodies against their content-length.

use super::*;

#[test]
fn the_server_preface_is_its_settings_and_the_connection_window() {
    let conn = Conn::new(Config::default());
    let out = frames(conn.output());
    assert_eq!(out[0].0, SETTINGS);
    let params: Vec<(u16, u32)> = out[0]
        .3
        .chunks(6)
        .map(|c| {
            (
                u16::from_be_bytes([c[0], c[1]]),
                u32::from_be_bytes(c[2..].try_into().unwrap()),
            )
        })
        .collect();
    assert!(params.contains(&(0x3, 128)), "{params:?}");
    assert!(params.contains(&(0x6, 16_384)), "{params:?}");
    assert_eq!(out[1].0, WINDOW_UPDATE);
    assert_eq!(
        u32::from_be_bytes(out[1].3[..4].try_into().unwrap()),
        (1 << 20) - 65_535
    );
}

#[test]
fn a_wrong_preface_or_a_first_frame_other_than_settings_ends_the_connection() {
    let mut c = Client {
        conn: Conn::new(Config::default()),
        buf: BytesMut::from(&b"GET / HTTP/1.1\r\n\r\n"[..]),
    };
    assert_eq!(c.events(), fails(Reason::PROTOCOL_ERROR));
    let mut c = Client {
        conn: Conn::new(Config::default()),
        buf: BytesMut::from(PREFACE),
    };
    assert_eq!(
        c.send(&frame(PING, 0, 0, &[0; 8])),
        fails(Reason::PROTOCOL_ERROR)
    );
    assert_eq!(c.goaway(), Some(0x1));
}

#[test]
fn a_request_is_read_and_answered() {
    let mut c = client();
    let events = c
        .send(&frame(HEADERS, END_HEADERS | END_STREAM, 1, &get("/a?b")))
        .unwrap();
    assert_eq!(events, opened(1, true));
    let r = c.conn.request();
    assert_eq!(r.method(), b"GET");
    assert_eq!(r.path(), Some(&b"/a?b"[..]));
    assert_eq!(r.authority(), Some(&b"example.com"[..]));
    assert_eq!(r.scheme(), Some(&b"https"[..]));
    assert_eq!(r.field_count(), 0);
    let fields: [(&[u8], &[u8]); 2] = [(b"Content-Type", b"text/plain"), (b"content-length", b"5")];
    c.conn.send_headers(1, 200, fields, false).unwrap();
    assert_eq!(c.conn.send_data(1, b"hello", true), Ok(5));
    let out = c.output();
    assert_eq!(out.len(), 2);
    assert_eq!((out[0].0, out[0].1, out[0].2), (HEADERS, END_HEADERS, 1));
    let mut decoded = Vec::new();
    hpack::Decoder::new(4096)
        .decode(&out[0].3, 1 << 20, |n: &[u8], v: &[u8]| {
            decoded.push((n.to_vec(), v.to_vec()));
            Ok::<(), std::convert::Infallible>(())
        })
        .unwrap();
    assert_eq!(
        decoded,
        vec![
            (b":status".to_vec(), b"200".to_vec()),
            (b"content-type".to_vec(), b"text/plain".to_vec()),
            (b"content-length".to_vec(), b"5".to_vec()),
        ]
    );
    assert_eq!(
        (out[1].0, out[1].1, out[1].2, &out[1].3[..]),
        (DATA, END_STREAM, 1, &b"hello"[..])
    );
    assert_eq!(c.conn.active(), 0);
    assert_eq!(c.conn.send_data(1, b"more", true), Err(StreamGone));
}

#[test]
fn a_body_longer_or_shorter_than_its_content_length_is_malformed() {
    let mut c = client();
    let head = block(&[
        (":method", "POST"),
        (":scheme", "https"),
        (":path", "/"),
        ("content-length", "3"),
    ]);
    let mut bytes = frame(HEADERS, END_HEADERS, 1, &head);
    bytes.extend(frame(DATA, END_STREAM, 1, b"four"));
    let events = c.send(&bytes).unwrap();
    assert_eq!(
        events[1],
        Event::Reset {
            stream: 1,
            reason: Reason::PROTOCOL_ERROR
        }
    );
    assert_eq!(c.resets(), vec![(1, 0x1)]);
    let mut bytes = frame(HEADERS, END_HEADERS, 3, &head);
    bytes.extend(frame(DATA, END_STREAM, 3, b"tw"));
    let events = c.send(&bytes).unwrap();
    assert_eq!(
        events[1],
        Event::Reset {
            stream: 3,
            reason: Reason::PROTOCOL_ERROR
        }
    );
}

#[test]
fn malformed_requests_are_reset_and_never_reach_the_server() {
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("upper-case name", {
            let mut b = get("/");
            b.extend(block(&[("X-Up", "1")]));
            b
        }),
        (
            "pseudo after regular",
            block(&[
                (":method", "GET"),
                ("x", "1"),
                (":scheme", "https"),
                (":path", "/"),
            ]),
        ),
        (
            "no :path",
            block(&[(":method", "GET"), (":scheme", "https")]),
        ),
        (
            "empty :path",
            block(&[(":method", "GET"), (":scheme", "https"), (":path", "")]),
        ),
        (
            "two :method",
            block(&[
                (":method", "GET"),
                (":method", "GET"),
                (":scheme", "https"),
                (":path", "/"),
            ]),
        ),
        (
            "unknown pseudo",
            block(&[
                (":method", "GET"),
                (":scheme", "https"),
                (":path", "/"),
                (":foo", "x"),
            ]),
        ),
        (
            "response pseudo",
            block(&[
                (":method", "GET"),
                (":scheme", "https"),
                (":path", "/"),
                (":status", "200"),
            ]),
        ),
        ("connection field", {
            let mut b = get("/");
            b.extend(block(&[("connection", "close")]));
            b
        }),
        ("te: gzip", {
            let mut b = get("/");
            b.extend(block(&[("te", "gzip")]));
            b
        }),
        ("LF in a value", {
            let mut b = get("/");
            b.extend(block(&[("x", "a\nb")]));
            b
        }),
    ];
    for (name, head) in cases {
        let mut c = client();
        let events = c
            .send(&frame(HEADERS, END_HEADERS | END_STREAM, 1, &head))
            .unwrap();
        assert_eq!(events, vec![], "{name}");
        assert_eq!(c.resets(), vec![(1, 0x1)], "{name}");
        // The connection goes on.
        let events = c
            .send(&frame(HEADERS, END_HEADERS | END_STREAM, 3, &get("/")))
            .unwrap();
        assert_eq!(events, opened(3, true), "{name}");
    }
}

#[test]
fn te_trailers_and_a_connect_with_authority_alone_are_well_formed() {
    let mut c = client();
    let mut head = get("/");
    head.extend(block(&[("te", "trailers")]));
    let events = c
        .send(&frame(HEADERS, END_HEADERS | END_STREAM, 1, &head))
        .unwrap();
    assert_eq!(events, opened(1, true));
    let connect = block(&[(":method", "CONNECT"), (":authority", "example.com:443")]);
    let events = c.send(&frame(HEADERS, END_HEADERS, 3, &connect)).unwrap();
    assert_eq!(events, opened(3, false));
}

#[test]
fn a_header_block_continues_in_continuation_frames_and_nothing_may_come_between() {
    let head = get("/split");
    let mut c = client();
    let mut bytes = frame(HEADERS, END_STREAM, 1, &head[..5]);
    bytes.extend(frame(CONTINUATION, 0, 1, &head[5..20]));
    bytes.extend(frame(CONTINUATION, END_HEADERS, 1, &head[20..]));
    let events = c.send(&bytes).unwrap();
    assert_eq!(events, opened(1, true));
    assert_eq!(c.conn.request().path(), Some(&b"/split"[..]));
    for between in [
        frame(PING, 0, 0, &[0; 8]),
        frame(CONTINUATION, END_HEADERS, 5, &head[5..]),
        frame(0xfa, 0, 0, b"x"),
    ] {
        let mut c = client();
        let mut bytes = frame(HEADERS, END_STREAM, 3, &head[..5]);
        bytes.extend(between);
        assert_eq!(c.send(&bytes), fails(Reason::PROTOCOL_ERROR));
    }
    let mut c = client();
    assert_eq!(
        c.send(&frame(CONTINUATION, END_HEADERS, 1, &head)),
        fails(Reason::PROTOCOL_ERROR)
    );
}

#[test]
fn an_endless_continuation_ends_the_connection_at_four_times_the_head_budget() {
    let mut c = Client::new(Config {
        max_header_list_size: 8192,
        ..Config::default()
    });
    let mut bytes = frame(HEADERS, 0, 1, &get("/"));
    let filler = block(&[("x", &"y".repeat(100))]);
    let mut result = Ok(vec![]);
    for _ in 0..1000 {
        bytes.extend(frame(CONTINUATION, 0, 1, &filler));
        result = c.send(&bytes);
        bytes.clear();
        if result.is_err() {
            break;
        }
    }
    assert_eq!(result, fails(Reason::ENHANCE_YOUR_CALM));
    assert!(c.conn.block.len() <= 4 * 8192 + filler.len() + 9);
}

#[test]
fn a_head_over_the_budget_is_still_decoded_and_marked() {
    let mut c = Client::new(Config {
        max_header_list_size: 200,
        ..Config::default()
    });
    let mut head = get("/");
    head.extend(block(&[("x-big", &"z".repeat(120))]));
    let events = c
        .send(&frame(HEADERS, END_HEADERS | END_STREAM, 1, &head))
        .unwrap();
    assert_eq!(events, opened(1, true));
    assert!(c.conn.request().oversize());
}

#[test]
fn push_promise_from_a_client_is_a_connection_error() {
    let mut c = client();
    let mut payload = 2u32.to_be_bytes().to_vec();
    payload.extend(get("/"));
    assert_eq!(
        c.send(&frame(0x5, END_HEADERS, 1, &payload)),
        fails(Reason::PROTOCOL_ERROR)
    );
}
