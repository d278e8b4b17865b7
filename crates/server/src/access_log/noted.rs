//! The fields a handler notes for the log (`handler::LogNotes`): each upstream attempt,
//! the cache's result and an ESI page's includes; the first two written in the shapes
//! nginx gives `$upstream_addr`, `$upstream_status`, `$upstream_*_time` and
//! `$upstream_cache_status`, so that what reads nginx's logs (`tessera logs`, GoAccess)
//! reads these.

use std::time::{Duration, Instant};

use handler::{Noted, UpstreamAttempt};

use super::style::{digits, escape, json_escape, number, Style};

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
    /// `%{esi_fragments}x`: how many includes an assembled page had, at every level.
    EsiFragments,
    /// `%{esi_failed}x`: the `src` of each include that failed, `, ` between them.
    EsiFailed,
    /// `%{upstream_not_retried}x`: why a failed attempt was not tried on another peer
    /// (`body_sent`), `-` otherwise.
    NotRetried,
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
            "esi_fragments" => Field::EsiFragments,
            "esi_failed" => Field::EsiFailed,
            "upstream_not_retried" => Field::NotRetried,
            _ => return None,
        })
    }
}

/// Writes `field` from `noted` (`-`, or JSON's `null`, when there is nothing); `now`
/// ends the time of an attempt whose response is being sent.
pub(super) fn write(
    line: &mut Vec<u8>,
    style: Style,
    field: Field,
    (noted, now): (Option<&Noted>, Instant),
) {
    let Some(noted) = noted else {
        return style.none(line);
    };
    let quoted = style == Style::Json;
    match field {
        Field::Cache => {
            return match noted.cache {
                Some(result) => style.plain(line, result.as_str().as_bytes()),
                None => style.none(line),
            }
        }
        Field::EsiFragments if noted.esi_fragments > 0 => {
            return number(line, noted.esi_fragments as u64);
        }
        Field::EsiFailed if !noted.esi_failed.is_empty() => {
            if quoted {
                line.push(b'"');
            }
            for (i, src) in noted.esi_failed.iter().enumerate() {
                if i > 0 {
                    line.extend_from_slice(b", ");
                }
                match quoted {
                    true => json_escape(line, src.as_bytes()),
                    false => escape(line, src.as_bytes()),
                }
            }
            if quoted {
                line.push(b'"');
            }
            return;
        }
        Field::EsiFragments | Field::EsiFailed => return style.none(line),
        Field::NotRetried => {
            return match noted.not_retried {
                Some(why) => style.string(line, why.as_bytes()),
                None => style.none(line),
            }
        }
        _ if noted.attempts.is_empty() => return style.none(line),
        _ => {}
    }
    if quoted {
        line.push(b'"');
    }
    for (i, attempt) in noted.attempts.iter().enumerate() {
        if i > 0 {
            line.extend_from_slice(b", ");
        }
        item(line, quoted, field, (attempt, now));
    }
    if quoted {
        line.push(b'"');
    }
}

fn item(
    line: &mut Vec<u8>,
    quoted: bool,
    field: Field,
    (attempt, now): (&UpstreamAttempt, Instant),
) {
    match field {
        Field::Addr if quoted => json_escape(line, attempt.peer.as_bytes()),
        Field::Addr => escape(line, attempt.peer.as_bytes()),
        Field::Status => {
            let status = attempt
                .status
                .unwrap_or(if attempt.timed_out { 504 } else { 502 });
            number(line, status.into());
        }
        Field::ConnectTime => seconds(line, attempt.connect),
        Field::HeaderTime => seconds(line, attempt.header),
        Field::ResponseTime => seconds(
            line,
            Some(
                attempt
                    .total
                    .unwrap_or_else(|| now.saturating_duration_since(attempt.started)),
            ),
        ),
        Field::Cache | Field::EsiFragments | Field::EsiFailed | Field::NotRetried => {}
    }
}

/// Seconds with milliseconds (`0.012`), as nginx writes its times; `-` for none.
fn seconds(line: &mut Vec<u8>, time: Option<Duration>) {
    let Some(time) = time else {
        return line.push(b'-');
    };
    let millis = time.as_millis() as u64;
    number(line, millis / 1000);
    line.push(b'.');
    digits::<3>(line, millis % 1000);
}

#[cfg(test)]
mod tests {
    use super::*;

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
            esi_fragments: 3,
            esi_failed: vec!["http://a.test/x".into(), "http://a.test/\"y\"".into()],
            not_retried: Some("body_sent"),
            vars: Vec::new(),
        };
        let written = |style, field| {
            let mut line = Vec::new();
            write(&mut line, style, field, (Some(&noted), Instant::now()));
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
        assert_eq!(written(Style::Json, Field::NotRetried), "\"body_sent\"");
        assert_eq!(written(Style::Text, Field::NotRetried), "body_sent");
        assert_eq!(written(Style::Text, Field::EsiFragments), "3");
        assert_eq!(
            written(Style::Text, Field::EsiFailed),
            r#"http://a.test/x, http://a.test/\"y\""#
        );
        assert_eq!(
            written(Style::Json, Field::EsiFailed),
            r#""http://a.test/x, http://a.test/\"y\"""#
        );
        let mut line = Vec::new();
        write(&mut line, Style::Json, Field::Addr, (None, Instant::now()));
        assert_eq!(line, b"null");
    }
}
