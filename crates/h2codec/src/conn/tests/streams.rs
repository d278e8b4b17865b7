//! Stream states and identifiers, the concurrency limit, resets, GOAWAY, and the
//! output's back-pressure.

use super::*;

#[test]
fn stream_identifiers_must_be_odd_and_grow() {
    let mut c = client();
    assert_eq!(
        c.send(&frame(HEADERS, END_HEADERS | END_STREAM, 2, &get("/"))),
        fails(Reason::PROTOCOL_ERROR)
    );
    let mut c = client();
    c.request(5);
    assert_eq!(
        c.send(&frame(HEADERS, END_HEADERS | END_STREAM, 3, &get("/"))),
        fails(Reason::PROTOCOL_ERROR)
    );
    assert_eq!(c.goaway(), Some(0x1));
}

#[test]
fn frames_on_idle_half_closed_and_closed_streams() {
    // DATA, WINDOW_UPDATE and RST_STREAM on a stream never opened: connection errors.
    for bytes in [
        frame(DATA, 0, 1, b"x"),
        frame(WINDOW_UPDATE, 0, 1, &1u32.to_be_bytes()),
        frame(RST_STREAM, 0, 1, &8u32.to_be_bytes()),
    ] {
        let mut c = client();
        assert_eq!(c.send(&bytes), fails(Reason::PROTOCOL_ERROR));
    }
    // DATA after the client's END_STREAM: STREAM_CLOSED.
    let mut c = client();
    c.request(1);
    let events = c.send(&frame(DATA, 0, 1, b"x")).unwrap();
    assert_eq!(
        events,
        vec![Event::Reset {
            stream: 1,
            reason: Reason::STREAM_CLOSED
        }]
    );
    assert_eq!(c.resets(), vec![(1, 0x5)]);
    // A stream closed both ways: late WINDOW_UPDATE and RST_STREAM are ignored, DATA
    // and HEADERS get STREAM_CLOSED.
    let mut c = client();
    c.request(1);
    c.conn.send_headers(1, 204, [], true).unwrap();
    c.output();
    let late = [
        frame(WINDOW_UPDATE, 0, 1, &1u32.to_be_bytes()),
        frame(RST_STREAM, 0, 1, &8u32.to_be_bytes()),
        frame(PRIORITY, 0, 1, &[0, 0, 0, 0, 16]),
    ]
    .concat();
    assert_eq!(c.send(&late), Ok(vec![]));
    assert_eq!(c.output(), vec![]);
    assert_eq!(c.send(&frame(DATA, 0, 1, b"x")), Ok(vec![]));
    assert_eq!(c.resets(), vec![(1, 0x5)]);
    // The server has reset it now: what the client sent before it knew is ignored.
    assert_eq!(c.send(&frame(DATA, 0, 1, b"y")), Ok(vec![]));
    assert_eq!(
        c.send(&frame(HEADERS, END_HEADERS | END_STREAM, 1, &get("/"))),
        Ok(vec![])
    );
    assert_eq!(c.output(), vec![]);
    // HEADERS on a stream both sides ended: a connection error.
    c.request(3);
    c.conn.send_headers(3, 204, [], true).unwrap();
    assert_eq!(
        c.send(&frame(HEADERS, END_HEADERS | END_STREAM, 3, &get("/"))),
        fails(Reason::STREAM_CLOSED)
    );
}

#[test]
fn streams_beyond_the_limit_are_refused() {
    let mut c = Client::new(Config {
        max_concurrent_streams: 2,
        ..Config::default()
    });
    let mut bytes = Vec::new();
    for id in [1, 3, 5] {
        bytes.extend(frame(HEADERS, END_HEADERS, id, &get("/")));
    }
    let events = c.send(&bytes).unwrap();
    assert_eq!(events.len(), 2);
    assert_eq!(c.resets(), vec![(5, 0x7)]);
    // Once one ends, another may open.
    c.conn.reset(1, Reason::CANCEL);
    let events = c.send(&frame(HEADERS, END_HEADERS, 7, &get("/"))).unwrap();
    assert_eq!(events, opened(7, false));
}

#[test]
fn a_client_reset_reaches_the_server_and_goaway_refuses_new_streams() {
    let mut c = client();
    c.request(1);
    let events = c
        .send(&frame(RST_STREAM, 0, 1, &8u32.to_be_bytes()))
        .unwrap();
    assert_eq!(
        events,
        vec![Event::Reset {
            stream: 1,
            reason: Reason::CANCEL
        }]
    );
    assert_eq!(c.conn.send_headers(1, 200, [], true), Err(StreamGone));
    c.request(3);
    c.conn.go_away(Reason::NO_ERROR);
    assert_eq!(c.goaway(), Some(0));
    assert!(c.conn.is_going_away());
    let events = c
        .send(&frame(HEADERS, END_HEADERS | END_STREAM, 5, &get("/")))
        .unwrap();
    assert_eq!(events, vec![]);
    assert_eq!(c.resets(), vec![(5, 0x7)]);
    // The stream it let in is still answered.
    assert_eq!(c.conn.send_headers(3, 204, [], true), Ok(()));
}

#[test]
fn a_complete_response_to_a_request_still_sending_tells_it_to_stop() {
    let mut c = client();
    let head = block(&[(":method", "POST"), (":scheme", "https"), (":path", "/")]);
    c.send(&frame(HEADERS, END_HEADERS, 1, &head)).unwrap();
    c.output();
    c.conn.send_headers(1, 413, [], true).unwrap();
    assert_eq!(c.resets(), vec![(1, 0x0)]);
    assert_eq!(c.conn.active(), 0);
    // What the client sent before it knew is ignored.
    assert_eq!(c.send(&frame(DATA, END_STREAM, 1, b"late")), Ok(vec![]));
    assert_eq!(c.output(), vec![]);
}

#[test]
fn pings_are_answered_and_an_unread_output_stops_the_reading() {
    let mut c = client();
    let pings: Vec<u8> = frame(PING, 0, 0, b"12345678").repeat(10_000);
    c.buf.extend_from_slice(&pings);
    assert_eq!(c.events(), Ok(vec![]));
    // Stopped with the output just past its bound, the rest of the pings unread.
    assert!(c.conn.output().len() <= OUTPUT_HIGH + 17);
    assert!(c.buf.len() > 100_000);
    let out = c.output();
    assert!(out
        .iter()
        .all(|f| f.0 == PING && f.1 == ACK && f.3 == b"12345678"));
    assert_eq!(c.events(), Ok(vec![]));
    assert!(!c.conn.output().is_empty());
}

#[test]
fn output_written_a_little_at_a_time_comes_out_whole_and_in_order() {
    let mut c = client();
    let mut expected = Vec::new();
    let mut got = Vec::new();
    for i in 0..200u8 {
        c.send(&frame(PING, 0, 0, &[i; 8])).unwrap();
        expected.extend(frame(PING, ACK, 0, &[i; 8]));
        // Writes of 1 to 23 bytes, never all of the output at once.
        let n = (usize::from(i) % 23 + 1).min(c.conn.output().len());
        got.extend_from_slice(&c.conn.output()[..n]);
        c.conn.written(n);
    }
    got.extend_from_slice(c.conn.output());
    assert_eq!(got, expected);
}
