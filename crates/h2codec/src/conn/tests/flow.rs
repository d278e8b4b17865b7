//! Flow control both ways: send windows, SETTINGS deltas, overflow, request bodies
//! and padding given back.

use super::*;

#[test]
fn a_request_body_arrives_in_order_and_its_window_is_given_back() {
    let mut c = Client::new(Config {
        initial_connection_window: 65_535,
        ..Config::default()
    });
    let head = block(&[
        (":method", "POST"),
        (":scheme", "https"),
        (":path", "/up"),
        ("content-length", "40000"),
    ]);
    let mut bytes = frame(HEADERS, END_HEADERS, 1, &head);
    bytes.extend(frame(DATA, 0, 1, &[b'a'; 16_000]));
    bytes.extend(frame(DATA, 0, 1, &[b'b'; 16_000]));
    // Padded: 8,000 bytes of data, 99 of padding and its length byte.
    let mut padded = vec![99];
    padded.extend([b'c'; 8000]);
    padded.extend([0; 99]);
    bytes.extend(frame(DATA, END_STREAM | 0x8, 1, &padded));
    let events = c.send(&bytes).unwrap();
    assert_eq!(
        events[0],
        Event::Request {
            stream: 1,
            end_stream: false
        }
    );
    let body: Vec<u8> = events[1..]
        .iter()
        .flat_map(|e| match e {
            Event::Data { data, .. } => data.to_vec(),
            e => panic!("{e:?}"),
        })
        .collect();
    assert_eq!(body.len(), 40_000);
    assert!(matches!(
        events.last(),
        Some(Event::Data {
            end_stream: true,
            ..
        })
    ));
    c.output();
    c.conn.release(1, 40_000);
    // The stream has ended on the client's side: only the connection's window is
    // given back (its half is used), with the padding given back on arrival.
    let updates = |c: &mut Client| -> Vec<(u32, u32)> {
        c.output()
            .into_iter()
            .filter(|f| f.0 == WINDOW_UPDATE)
            .map(|f| (f.2, u32::from_be_bytes(f.3[..4].try_into().unwrap())))
            .collect()
    };
    assert_eq!(updates(&mut c), vec![(0, 40_100)]);
    // A stream still sending gets its own window back, in batches of half of it.
    let mut bytes = frame(HEADERS, END_HEADERS, 3, &head);
    bytes.extend(frame(DATA, 0, 3, &[b'd'; 16_000]));
    c.send(&bytes).unwrap();
    c.conn.release(3, 16_000);
    assert_eq!(updates(&mut c), vec![]);
    let mut bytes = frame(DATA, 0, 3, &[b'e'; 8_400]);
    bytes.extend(frame(DATA, 0, 3, &[b'f'; 8_400]));
    c.send(&bytes).unwrap();
    c.conn.release(3, 16_800);
    assert_eq!(updates(&mut c), vec![(0, 32_800), (3, 32_800)]);
}

#[test]
fn send_windows_hold_data_back_until_the_client_opens_them() {
    let mut c = client();
    c.request(1);
    c.conn.send_headers(1, 200, [], false).unwrap();
    let body = vec![7u8; 100_000];
    assert_eq!(c.conn.send_data(1, &body, true), Ok(65_535));
    assert_eq!(c.conn.capacity(1), 0);
    let out = c.output();
    let sizes: Vec<usize> = out
        .iter()
        .filter(|f| f.0 == DATA)
        .map(|f| f.3.len())
        .collect();
    assert_eq!(sizes, vec![16_384, 16_384, 16_384, 16_383]);
    // The stream's window alone is not enough: the connection's is spent too.
    let events = c
        .send(&frame(WINDOW_UPDATE, 0, 1, &50_000u32.to_be_bytes()))
        .unwrap();
    assert_eq!(events, vec![Event::Window]);
    assert_eq!(c.conn.capacity(1), 0);
    c.send(&frame(WINDOW_UPDATE, 0, 0, &50_000u32.to_be_bytes()))
        .unwrap();
    assert_eq!(c.conn.capacity(1), 50_000);
    assert_eq!(c.conn.send_data(1, &body[65_535..], true), Ok(34_465));
    let out = c.output();
    assert_eq!(out.last().map(|f| f.1), Some(END_STREAM));
    assert_eq!(c.conn.active(), 0);
}

#[test]
fn a_payload_appended_in_place_is_framed_within_the_windows() {
    let mut c = client();
    c.request(1);
    c.conn.send_headers(1, 200, [], false).unwrap();
    c.output();
    let mut sent = 0;
    while sent < 70_000 {
        let n = c.conn.begin_data(1, 70_000 - sent).unwrap();
        if n == 0 {
            break;
        }
        assert!(n <= 16_384);
        c.conn.payload().extend(std::iter::repeat_n(9u8, n));
        sent += n;
        c.conn.finish_data(sent == 70_000);
    }
    // The windows (65,535) stop it short of 70,000.
    assert_eq!(sent, 65_535);
    let out = c.output();
    assert!(out.iter().all(|f| f.0 == DATA && f.1 == 0 && f.2 == 1));
    assert_eq!(out.iter().map(|f| f.3.len()).sum::<usize>(), 65_535);
    c.send(&frame(WINDOW_UPDATE, 0, 0, &10_000u32.to_be_bytes()))
        .unwrap();
    c.send(&frame(WINDOW_UPDATE, 0, 1, &10_000u32.to_be_bytes()))
        .unwrap();
    let n = c.conn.begin_data(1, 4_465).unwrap();
    assert_eq!(n, 4_465);
    c.conn.payload().extend(std::iter::repeat_n(9u8, 4_000));
    c.conn.finish_data(false);
    let n = c.conn.begin_data(1, 465).unwrap();
    c.conn.payload().extend(std::iter::repeat_n(9u8, n));
    c.conn.finish_data(true);
    let out = c.output();
    assert_eq!(
        out.iter().map(|f| (f.1, f.3.len())).collect::<Vec<_>>(),
        vec![(0, 4_000), (END_STREAM, 465)]
    );
    assert_eq!(c.conn.active(), 0);
    assert_eq!(c.conn.begin_data(1, 1), Err(StreamGone));
}

#[test]
fn settings_move_open_windows_and_frame_sizes() {
    let mut c = client();
    c.request(1);
    c.conn.send_headers(1, 200, [], false).unwrap();
    assert_eq!(c.conn.send_data(1, &[1; 1000], false), Ok(1000));
    // INITIAL_WINDOW_SIZE 100: the open stream's window is now 100 - 1000 < 0.
    let mut params = vec![0, 4, 0, 0, 0, 100];
    params.extend([0, 5, 0, 0, 0x80, 0]); // MAX_FRAME_SIZE 32768
    c.send(&frame(SETTINGS, 0, 0, &params)).unwrap();
    let out = c.output();
    assert!(out.iter().any(|f| f.0 == SETTINGS && f.1 == ACK));
    assert_eq!(c.conn.capacity(1), 0);
    c.send(&frame(WINDOW_UPDATE, 0, 1, &100_000u32.to_be_bytes()))
        .unwrap();
    assert_eq!(c.conn.capacity(1), 64_535);
    assert_eq!(c.conn.send_data(1, &vec![2; 40_000], false), Ok(40_000));
    let sizes: Vec<usize> = c.output().iter().map(|f| f.3.len()).collect();
    assert_eq!(sizes, vec![32_768, 7_232]);
}

#[test]
fn windows_may_not_pass_two_to_the_thirty_one() {
    let mut c = client();
    assert_eq!(
        c.send(&frame(WINDOW_UPDATE, 0, 0, &0x7fff_ffffu32.to_be_bytes())),
        fails(Reason::FLOW_CONTROL_ERROR)
    );
    let mut c = client();
    c.request(1);
    let events = c
        .send(&frame(WINDOW_UPDATE, 0, 1, &0x7fff_ffffu32.to_be_bytes()))
        .unwrap();
    assert_eq!(
        events,
        vec![Event::Reset {
            stream: 1,
            reason: Reason::FLOW_CONTROL_ERROR
        }]
    );
    let mut c = client();
    c.request(1);
    c.send(&frame(WINDOW_UPDATE, 0, 1, &0x7fff_0000u32.to_be_bytes()))
        .unwrap();
    assert_eq!(
        c.send(&frame(SETTINGS, 0, 0, &[0, 4, 0, 1, 0, 0])),
        fails(Reason::FLOW_CONTROL_ERROR)
    );
}

#[test]
fn a_client_that_overruns_its_window_is_stopped() {
    let mut c = Client::new(Config {
        initial_stream_window: 16_384,
        ..Config::default()
    });
    let head = block(&[(":method", "POST"), (":scheme", "https"), (":path", "/")]);
    let mut bytes = frame(HEADERS, END_HEADERS, 1, &head);
    bytes.extend(frame(DATA, 0, 1, &[0; 16_384]));
    bytes.extend(frame(DATA, 0, 1, &[0; 1]));
    let events = c.send(&bytes).unwrap();
    assert_eq!(
        events.last(),
        Some(&Event::Reset {
            stream: 1,
            reason: Reason::FLOW_CONTROL_ERROR
        })
    );
}

#[test]
fn padding_goes_back_to_the_stream_window_and_is_announced() {
    let mut c = Client::new(Config {
        initial_stream_window: 16_384,
        ..Config::default()
    });
    let head = block(&[(":method", "POST"), (":scheme", "https"), (":path", "/")]);
    let mut padded = vec![200];
    padded.extend([b'x'; 100]);
    padded.extend([0; 200]);
    let mut bytes = frame(HEADERS, END_HEADERS, 1, &head);
    for _ in 0..30 {
        bytes.extend(frame(DATA, 0x8, 1, &padded));
    }
    // 30 frames of 301 bytes: 9,030 against a window of 16,384; 6,030 of it padding.
    c.send(&bytes).unwrap();
    let updates: Vec<(u32, u32)> = c
        .output()
        .into_iter()
        .filter(|f| f.0 == WINDOW_UPDATE)
        .map(|f| (f.2, u32::from_be_bytes(f.3[..4].try_into().unwrap())))
        .collect();
    assert_eq!(updates, vec![]);
    let mut more = Vec::new();
    for _ in 0..30 {
        more.extend(frame(DATA, 0x8, 1, &padded));
    }
    // Without the padding given back this would overrun the window.
    let events = c.send(&more).unwrap();
    assert!(
        events.iter().all(|e| matches!(e, Event::Data { .. })),
        "{events:?}"
    );
    let updates: Vec<(u32, u32)> = c
        .output()
        .into_iter()
        .filter(|f| f.0 == WINDOW_UPDATE && f.2 == 1)
        .map(|f| (f.2, u32::from_be_bytes(f.3[..4].try_into().unwrap())))
        .collect();
    assert_eq!(updates, vec![(1, 8_241)]);
}
