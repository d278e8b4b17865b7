//! Each format parses the lines it should, field by field, and refuses the rest.

use logs::{LogFormat, Record};

fn combined() -> LogFormat {
    LogFormat::new("combined").unwrap()
}

fn hour_of(text: &str) -> i64 {
    // 2026-11-21 is day 20_778 since 1970-01-01.
    let (day, hour) = text.split_once(' ').unwrap();
    let day: i64 = day.parse().unwrap();
    day * 24 + hour.parse::<i64>().unwrap()
}

#[test]
fn combined_line_fields() {
    let line = br#"192.0.2.7 - frank [21/Nov/2026:13:55:36 -0700] "GET /a/b?c=d HTTP/1.1" 200 2326 "https://example.com/x" "Mozilla/5.0 (X11)""#;
    let r = combined().parse_line(line).unwrap();
    assert_eq!(
        r,
        Record {
            client: b"192.0.2.7",
            hour: Some(hour_of("20778 13")),
            time: b"[21/Nov/2026:13:55:36 -0700]",
            method: b"GET",
            path: b"/a/b?c=d",
            status: 200,
            bytes: 2326,
            referer: b"https://example.com/x",
            user_agent: b"Mozilla/5.0 (X11)",
            ..Record::default()
        }
    );
}

#[test]
fn escaped_quotes_dash_size_ipv6_and_host_names() {
    let line = br#"2001:db8::1 - - [21/Nov/2026:00:00:00 +0000] "GET /q=\"x\" HTTP/1.1" 304 - "-" "bot \"quoted\" \\ end\\""#;
    let r = combined().parse_line(line).unwrap();
    assert_eq!(r.client, b"2001:db8::1");
    assert_eq!(r.path, br#"/q=\"x\""#);
    assert_eq!(r.bytes, 0);
    assert_eq!(r.status, 304);
    assert_eq!(r.user_agent, br#"bot \"quoted\" \\ end\\"#);

    let line = br#"crawl-66-249-66-1.googlebot.com - - [01/Jan/2026:23:59:59 +0000] "HEAD / HTTP/1.0" 200 0 "-" "Googlebot""#;
    let r = combined().parse_line(line).unwrap();
    assert_eq!(r.client, b"crawl-66-249-66-1.googlebot.com");
    assert_eq!(r.method, b"HEAD");
    assert_eq!(r.path, b"/");
}

#[test]
fn request_lines_that_are_not_requests_have_no_path() {
    let dash = br#"10.0.0.1 - - [21/Nov/2026:00:00:00 +0000] "-" 408 - "-" "-""#;
    let r = combined().parse_line(dash).unwrap();
    assert_eq!((r.status, r.path, r.method), (408, &b""[..], &b""[..]));
    let http09 = br#"10.0.0.1 - - [21/Nov/2026:00:00:00 +0000] "GET /old" 200 7 "-" "-""#;
    assert_eq!(combined().parse_line(http09).unwrap().path, b"/old");
}

#[test]
fn common_vcombined_nginx_and_custom_formats() {
    let common = LogFormat::new("common").unwrap();
    let r = common
        .parse_line(br#"h - - [21/Nov/2026:01:00:00 +0000] "GET /c HTTP/1.1" 404 12"#)
        .unwrap();
    assert_eq!(
        (r.client, r.path, r.status, r.bytes),
        (&b"h"[..], &b"/c"[..], 404, 12)
    );

    // Text after the last field of the format is ignored: common reads combined lines.
    let r = common
        .parse_line(br#"h - - [21/Nov/2026:01:00:00 +0000] "GET /c HTTP/1.1" 404 12 "-" "ua""#)
        .unwrap();
    assert_eq!((r.status, r.bytes), (404, 12));

    let vcombined = LogFormat::new("vcombined").unwrap();
    let r = vcombined
        .parse_line(br#"www.example.com:443 ::1 - - [21/Nov/2026:02:00:00 +0000] "GET /v HTTP/2.0" 200 5 "https://www.example.com/" "ua""#)
        .unwrap();
    assert_eq!(
        (r.vhost, r.client, r.path),
        (&b"www.example.com"[..], &b"::1"[..], &b"/v"[..])
    );

    let nginx = LogFormat::new("nginx").unwrap();
    let r = nginx
        .parse_line(br#"203.0.113.9 - - [21/Nov/2026:03:04:05 +0000] "POST /n HTTP/1.1" 201 0 "-" "curl/8.0""#)
        .unwrap();
    assert_eq!(
        (r.method, r.status, r.user_agent),
        (&b"POST"[..], 201, &b"curl/8.0"[..])
    );
    assert_eq!(r.hour, Some(hour_of("20778 3")));

    let custom = LogFormat::new(
        r#"$remote_addr [$time_iso8601] "$request" $status $bytes_sent $request_time $host"#,
    )
    .unwrap();
    let r = custom
        .parse_line(br#"198.51.100.2 [2026-11-21T04:05:06+00:00] "GET /i HTTP/1.1" 200 99 0.004 example.org"#)
        .unwrap();
    assert_eq!(
        (r.path, r.bytes, r.vhost),
        (&b"/i"[..], 99, &b"example.org"[..])
    );
    assert_eq!(r.hour, Some(hour_of("20778 4")));

    let apache = LogFormat::new(r#"%a %t \"%r\" %>s %B %D \"%{User-agent}i\""#).unwrap();
    let r = apache
        .parse_line(br#"10.1.1.1 [21/Nov/2026:05:00:00 +0100] "GET /d HTTP/1.1" 500 0 1234 "ua x""#)
        .unwrap();
    assert_eq!((r.status, r.user_agent), (500, &b"ua x"[..]));
}

#[test]
fn malformed_lines_are_refused() {
    let bad: &[&[u8]] = &[
        b"",
        b"this is not a log line at all",
        br#"10.0.0.3 - - [21/Nov/2026:00:00:00 +0000] "GET / HTTP/1.1" 2OO 512 "-" "bad status""#,
        br#"10.0.0.3 - - [21/Nov/2026:00:00:00 +0000] "GET / HTTP/1.1" 200 5x "-" "bad size""#,
        br#"10.0.0.3 - - [21/Nov/2026:00:00:00 +0000] "GET / HTTP/1.1" 200 12"#,
        br#"10.0.0.5 - - [21/Nov/2026:00:00:00 +0000] "GET / HTTP/1.1 200 12 "-" "unclosed"#,
        br#"10.0.0.6 - - [21/Smarch/2026:00:00:00 +0000] "GET / HTTP/1.1" 200 1 "-" "-""#,
        br#"10.0.0.6 - - 21/Nov/2026:00:00:00 +0000 "GET / HTTP/1.1" 200 1 "-" "-""#,
    ];
    for line in bad {
        assert_eq!(
            combined().parse_line(line),
            None,
            "{}",
            String::from_utf8_lossy(line)
        );
    }
}

#[test]
fn auto_detection_picks_the_most_specific_format() {
    let spec = |line: &[u8]| LogFormat::detect(line).map(|f| f.spec().to_string());
    assert_eq!(
        spec(br#"h - - [21/Nov/2026:00:00:00 +0000] "GET / HTTP/1.1" 200 1 "-" "-""#),
        Some(logs::format::COMBINED.to_string())
    );
    assert_eq!(
        spec(br#"h - - [21/Nov/2026:00:00:00 +0000] "GET / HTTP/1.1" 200 1"#),
        Some(logs::format::COMMON.to_string())
    );
    assert_eq!(
        spec(
            br#"example.com:80 h - - [21/Nov/2026:00:00:00 +0000] "GET / HTTP/1.1" 200 1 "-" "-""#
        ),
        Some(logs::format::VCOMBINED.to_string())
    );
    assert_eq!(spec(b"garbage"), None);
}
