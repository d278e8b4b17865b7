//! The fields a handler notes for the log (`handler::LogNotes`): each upstream attempt
//! and the cache's result, written in the shapes nginx gives `$upstream_addr`,
//! `$upstream_status`, `$upstream_*_time` and `$upstream_cache_status`, so that what reads
//! nginx's logs (`tessera logs`, GoAccess) reads these.

use std::time::Duration;

use handler::{Noted, UpstreamAttempt};

use super::style::{escape, json_escape, Style};

/// One noted field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Field {
    /// `%{upstream_addr}x`: each attempt's peer, `, ` between them.
    Addr,
    /// `%{upstream_status}x`: each attempt's status; 502 for an attempt that got no
    /// response, 504 for one that ran out of time (as nginx).
    Status,
    /// `%{upstream_connect_time}x`: seconds to connect (0.000 on a pooled connection),
    /// `-` for an attempt that did not connect.
    ConnectTime,
    /// `%{upstream_header_time}x`: seconds to the response head, `-` without one.
    HeaderTime,
    /// `%{upstream_response_time}x`: each attempt's seconds, the last one's until its
    /// response was sent.
    ResponseTime,
    /// `%{cache}x`: `hit`, `miss`, `stale`, `pass`, `collapsed`, `revalidated`.
    Cache,
}

impl Field {
    /// The field of a `%{name}x` directive or a JSON field's name.
    pub(super) fn named(name: &str) -> Option<Field> {
        Some(match name {
            "upstream_addr" => Field::Addr,
            "upstream_status" => Field::Status,
            "upstream_connect_time" => Field::ConnectTime,
            "upstream_header_time" => Field::HeaderTime,
            "upstream_response_time" => Field::ResponseTime,
            "cache" => Field::Cache,
            _ => return None,
        })
    }
}

/// Writes `field` from `noted` (`-`, or JSON's `null`, when there is nothing).
pub(super) fn write(line: &mut Vec<u8>, style: Style, field: Field, noted: Option<&Noted>) {
    let Some(noted) = noted else {
        return style.none(line);
    };
    if field == Field::Cache {
        return match noted.cache {
            Some(result) => style.string(line, result.as_str().as_bytes()),
            None => style.none(line),
        };
    }
    if noted.attempts.is_empty() {
        return style.none(line);
    }
    let quoted = style == Style::Json;
    if quoted {
        line.push(b'"');
    }
    for (i, attempt) in noted.attempts.iter().enumerate() {
        if i > 0 {
            line.extend_from_slice(b", ");
        }
        item(line, quoted, field, attempt);
    }
    if quoted {
        line.push(b'"');
    }
}

fn item(line: &mut Vec<u8>, quoted: bool, field: Field, attempt: &UpstreamAttempt) {
    match field {
        Field::Addr if quoted => json_escape(line, attempt.peer.as_bytes()),
        Field::Addr => escape(line, attempt.peer.as_bytes()),
        Field::Status => {
            let status = attempt
                .status
                .unwrap_or(if attempt.timed_out { 504 } else { 502 });
            line.extend_from_slice(itoa::Buffer::new().format(status).as_bytes());
        }
        Field::ConnectTime => seconds(line, attempt.connect),
        Field::HeaderTime => seconds(line, attempt.header),
        Field::ResponseTime => seconds(
            line,
            Some(attempt.total.unwrap_or_else(|| attempt.started.elapsed())),
        ),
        Field::Cache => {}
    }
}

/// Seconds with milliseconds (`0.012`), as nginx writes its times; `-` for none.
fn seconds(line: &mut Vec<u8>, time: Option<Duration>) {
    let Some(time) = time else {
        return line.push(b'-');
    };
    let millis = time.as_millis() as u64;
    line.extend_from_slice(itoa::Buffer::new().format(millis / 1000).as_bytes());
    line.push(b'.');
    let fraction = millis % 1000 + 1000;
    line.extend_from_slice(&itoa::Buffer::new().format(fraction).as_bytes()[1..]);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    #[test]
    fn writes_each_attempt_as_nginx_lists_them() {
        let attempt = |peer: &str, status, connect, header, total| UpstreamAttempt {
            peer: peer.into(),
            status,
            timed_out: false,
            connect,
            header,
            started: Instant::now(),
            total,
        };
        let ms = Duration::from_millis;
        let noted = Noted {
            attempts: vec![
                attempt("127.0.0.1:1", None, None, None, Some(ms(1))),
                attempt(
                    "127.0.0.1:2",
                    Some(200),
                    Some(ms(0)),
                    Some(ms(12)),
                    Some(ms(1234)),
                ),
            ],
            cache: Some(handler::CacheResult::Miss),
        };
        let written = |style, field| {
            let mut line = Vec::new();
            write(&mut line, style, field, Some(&noted));
            String::from_utf8(line).unwrap()
        };
        assert_eq!(
            written(Style::Text, Field::Addr),
            "127.0.0.1:1, 127.0.0.1:2"
        );
        assert_eq!(written(Style::Text, Field::Status), "502, 200");
        assert_eq!(written(Style::Text, Field::ConnectTime), "-, 0.000");
        assert_eq!(written(Style::Text, Field::HeaderTime), "-, 0.012");
        assert_eq!(
            written(Style::Json, Field::ResponseTime),
            "\"0.001, 1.234\""
        );
        assert_eq!(written(Style::Json, Field::Cache), "\"miss\"");
        let mut line = Vec::new();
        write(&mut line, Style::Json, Field::Addr, None);
        assert_eq!(line, b"null");
    }
}
