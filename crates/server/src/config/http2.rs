//! `[http2]`: whether HTTP/2 is spoken and its limits (docs/http2.md).

use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::Deserialize;

/// `http2 = true | false`, or an `[http2]` table with these keys. Each limit is a
/// SETTINGS value the server announces (and enforces) or a bound of its own.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Http2Config {
    /// HTTP/2 over TLS (ALPN `h2`, preferred to `http/1.1`) and in cleartext with prior
    /// knowledge (a connection that starts with the HTTP/2 preface). Default true;
    /// `http2 = false` turns both off (TLS then offers only `http/1.1`).
    pub enabled: bool,
    /// SETTINGS_MAX_CONCURRENT_STREAMS. Default 128, as nginx and h2o announce; a client
    /// that opens more has them refused (RST_STREAM REFUSED_STREAM).
    pub max_concurrent_streams: u32,
    /// SETTINGS_INITIAL_WINDOW_SIZE: bytes of request body a client may send on one
    /// stream before the server reads them. Default 65535 (the protocol's default).
    pub initial_stream_window: u32,
    /// Bytes of request bodies a client may send on one connection, all streams
    /// together, before the server reads them. Default 1048576.
    pub initial_connection_window: u32,
    /// SETTINGS_MAX_FRAME_SIZE: the largest frame the server accepts. Default 16384.
    pub max_frame_size: u32,
    /// SETTINGS_HEADER_TABLE_SIZE: the HPACK dynamic table the client may make the
    /// server keep. Default 4096 (the protocol's default).
    pub hpack_table_size: u32,
    /// Bytes of response body queued per stream ahead of the socket. Default 65536:
    /// enough to keep a loopback or LAN link full, small enough that 128 streams of one
    /// connection queue at most 8 MiB.
    pub max_send_buffer: u32,
    /// Rapid Reset (CVE-2023-44487): a client that has cancelled more than this many
    /// streams before their responses finished, beyond the streams it let finish, is sent
    /// GOAWAY (ENHANCE_YOUR_CALM) and closed. Default 1000.
    pub max_reset_streams: u32,
}

impl Default for Http2Config {
    fn default() -> Self {
        Http2Config {
            enabled: true,
            max_concurrent_streams: 128,
            initial_stream_window: 65_535,
            initial_connection_window: 1 << 20,
            max_frame_size: 16_384,
            hpack_table_size: 4096,
            max_send_buffer: 65_536,
            max_reset_streams: 1000,
        }
    }
}

impl Http2Config {
    /// What is wrong with the values (the protocol's bounds, RFC 9113 section 6.5.2).
    pub(crate) fn problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        let max_window = (1u32 << 31) - 1;
        if self.max_concurrent_streams == 0 {
            problems.push("`http2.max_concurrent_streams` must be at least 1".into());
        }
        for (key, value) in [
            ("initial_stream_window", self.initial_stream_window),
            ("initial_connection_window", self.initial_connection_window),
        ] {
            if !(1024..=max_window).contains(&value) {
                problems.push(format!(
                    "`http2.{key}` must be between 1024 and {max_window}"
                ));
            }
        }
        if !(16_384..=16_777_215).contains(&self.max_frame_size) {
            problems.push("`http2.max_frame_size` must be between 16384 and 16777215".into());
        }
        if self.hpack_table_size > 1 << 20 {
            problems.push("`http2.hpack_table_size` must be at most 1048576".into());
        }
        if self.max_reset_streams == 0 {
            // 0 would make the first stream a browser cancels (leaving a page) an attack.
            problems.push("`http2.max_reset_streams` must be at least 1".into());
        }
        if self.max_send_buffer < 1024 {
            problems.push("`http2.max_send_buffer` must be at least 1024".into());
        }
        problems
    }
}

/// `http2 = false` or `[http2] ...`: either form, so that the common switch is one key.
pub(crate) fn bool_or_table<'de, D: Deserializer<'de>>(d: D) -> Result<Http2Config, D::Error> {
    struct Either;
    impl<'de> Visitor<'de> for Either {
        type Value = Http2Config;

        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("true, false or an [http2] table")
        }

        fn visit_bool<E: de::Error>(self, enabled: bool) -> Result<Http2Config, E> {
            Ok(Http2Config {
                enabled,
                ..Http2Config::default()
            })
        }

        fn visit_map<M: MapAccess<'de>>(self, map: M) -> Result<Http2Config, M::Error> {
            Http2Config::deserialize(de::value::MapAccessDeserializer::new(map))
        }
    }
    d.deserialize_any(Either)
}
