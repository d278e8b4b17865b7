//! `quic_listen` and `[http3]`: HTTP/3 over QUIC and its limits (docs/http3.md).

use std::time::Duration;

use serde::Deserialize;

/// `[http3]`: the limits of HTTP/3 connections, which `quic_listen` addresses accept.
/// Each is a QUIC transport parameter the server announces (and enforces) or a bound of
/// its own.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Http3Config {
    /// Request streams (bidirectional) a client may have open at once on one connection
    /// (`initial_max_streams_bidi`). Default 100. QUIC gives a client the credit for
    /// this many; one that opens more breaks the protocol (STREAM_LIMIT_ERROR) and its
    /// connection is closed.
    pub max_streams: u32,
    /// How long a connection with nothing sent or received lives (`max_idle_timeout`),
    /// with a unit: `30s`, `2m`, `500ms`. Default `30s`.
    pub idle_timeout: String,
    /// 0-RTT: a resuming client may send requests in its first flight, before the
    /// handshake ends, which an attacker who recorded that flight can replay. Default
    /// false. When true, only requests with safe methods (GET, HEAD, OPTIONS) are
    /// answered from early data; any other waits for the handshake to finish.
    pub zero_rtt: bool,
    /// Bytes of request body a client may send on one stream before the server reads
    /// them (the stream's flow-control window). Default 1048576.
    pub stream_window: u32,
    /// Bytes of request bodies a client may send on one connection, all streams
    /// together, before the server reads them. Default 4194304.
    pub connection_window: u32,
    /// New connections a second, per worker, above which each new one must first prove
    /// it owns its address (a stateless Retry, RFC 9000 section 8.1.2): a flood of
    /// spoofed Initial packets then costs the server one small packet each, and no state.
    /// Default 100; 0 retries every new connection.
    pub retry_threshold: u32,
}

impl Default for Http3Config {
    fn default() -> Self {
        Http3Config {
            max_streams: 100,
            idle_timeout: "30s".into(),
            zero_rtt: false,
            stream_window: 1 << 20,
            connection_window: 4 << 20,
            retry_threshold: 100,
        }
    }
}

impl Http3Config {
    /// `idle_timeout` as a duration (checked by [`Http3Config::problems`]; 30 s if not
    /// valid).
    pub fn idle(&self) -> Duration {
        duration(&self.idle_timeout).unwrap_or(Duration::from_secs(30))
    }

    /// What is wrong with the values.
    pub(crate) fn problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        if self.max_streams == 0 {
            problems.push("`http3.max_streams` must be at least 1".into());
        }
        match duration(&self.idle_timeout) {
            Some(d) if d <= Duration::from_secs(600) => {}
            _ => problems.push(format!(
                "`http3.idle_timeout`: `{}` is not a duration between 1ms and 10m (`30s`, `2m`, `500ms`)",
                self.idle_timeout
            )),
        }
        for (key, value) in [
            ("stream_window", self.stream_window),
            ("connection_window", self.connection_window),
        ] {
            if value < 1024 {
                problems.push(format!("`http3.{key}` must be at least 1024"));
            }
        }
        problems
    }
}

/// `10s`, `2m`, `500ms`, `1h` (also `forward_auth`'s cache durations).
pub(crate) fn duration(text: &str) -> Option<Duration> {
    let split = text.find(|c: char| !c.is_ascii_digit())?;
    let (number, unit) = text.split_at(split);
    let n: u64 = number.parse().ok()?;
    let ms = match unit {
        "ms" => n,
        "s" => n.checked_mul(1000)?,
        "m" => n.checked_mul(60_000)?,
        "h" => n.checked_mul(3_600_000)?,
        _ => return None,
    };
    (ms > 0).then(|| Duration::from_millis(ms))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idle_timeouts_take_a_unit() {
        let with = |t: &str| Http3Config {
            idle_timeout: t.into(),
            ..Default::default()
        };
        assert_eq!(with("2m").idle(), Duration::from_secs(120));
        assert_eq!(with("500ms").idle(), Duration::from_millis(500));
        for bad in ["30", "0s", "1h", "ten"] {
            let problems = with(bad).problems();
            assert!(problems[0].starts_with("`http3.idle_timeout`"), "{bad}");
        }
        assert!(Http3Config::default().problems().is_empty());
    }
}
