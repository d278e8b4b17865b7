//! `[compression]`: what is compressed, with what, how hard. The TOML shape (serde) and
//! the policy built from it once at start.

use serde::Deserialize;

use super::Coding;

/// `[compression]` (and `[host.compression]`): on-the-fly compression of the responses
/// handlers make (proxied, ESI-assembled, Lua). Every key has a default; docs/config.md
/// and docs/compression.md say why each is what it is.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CompressionConfig {
    /// Compress responses of the listed types. Default true.
    pub enabled: bool,
    /// Media types compressed (the part before `;`, case-insensitive). Default: the text
    /// types of the web, JSON, XML, SVG and WebAssembly; images, video, fonts and
    /// archives are compressed already.
    pub types: Vec<String>,
    /// Responses shorter than this (when their length is known) go out as they are.
    /// Default 1024: below about a packet the coding's header and the client's work
    /// cost more than the bytes saved.
    pub min_length: u64,
    /// The codings offered, in order of preference (`zstd`, `br`, `gzip`); a client's
    /// higher q-value beats the order. Default `["zstd", "br", "gzip"]`.
    pub algorithms: Vec<String>,
    /// Bytes of compressed forms of static files (those without a precompressed sibling)
    /// kept in each site's open-file cache. Default 64 MiB ([`DEFAULT_FILE_CACHE_BYTES`]);
    /// 0 compresses no file. `None` when the table leaves it out, so that a route's table
    /// (whose responses are not files) can refuse it.
    pub file_cache_bytes: Option<u64>,
    /// The removed `max_streams` (a limit per site), read only to say what replaced it:
    /// the top-level `compression_memory`.
    #[serde(rename = "max_streams")]
    pub removed_max_streams: Option<serde::de::IgnoredAny>,
    /// `[compression.level]`: per coding. Defaults measured for edge use
    /// (docs/compression.md): gzip 2, br 2, zstd 3.
    pub level: Levels,
}

/// The default `file_cache_bytes`: 64 MiB per site.
pub const DEFAULT_FILE_CACHE_BYTES: u64 = 64 << 20;

/// `[compression.level]`.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Levels {
    /// 1-9. Default 2: zlib-rs's level 1 is its fast "quick" strategy, about a quarter
    /// larger for little less time; above 3 each level costs far more than it saves.
    pub gzip: u32,
    /// 0-11. Default 2: gzip's ratio for about twice its time; 5 and up cost 3x.
    pub br: u32,
    /// 1-19. Default 3.
    pub zstd: i32,
}

impl Default for Levels {
    fn default() -> Levels {
        Levels {
            gzip: 2,
            br: 2,
            zstd: 3,
        }
    }
}

/// The default `types`.
pub const DEFAULT_TYPES: &[&str] = &[
    "text/html",
    "text/css",
    "text/plain",
    "text/xml",
    "text/javascript",
    "application/javascript",
    "application/json",
    "application/xml",
    "image/svg+xml",
    "application/wasm",
];

impl Default for CompressionConfig {
    fn default() -> CompressionConfig {
        CompressionConfig {
            enabled: true,
            types: DEFAULT_TYPES.iter().map(|t| t.to_string()).collect(),
            min_length: 1024,
            algorithms: vec!["zstd".into(), "br".into(), "gzip".into()],
            file_cache_bytes: None,
            removed_max_streams: None,
            level: Levels::default(),
        }
    }
}

/// Why a `[compression]` table was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CompressionConfigError {
    #[error("unknown algorithm {0:?} (known: zstd, br, gzip)")]
    UnknownAlgorithm(String),
    #[error("`max_streams` was replaced by the top-level `compression_memory` (bytes for all the streams compressing at once, docs/compression.md)")]
    MaxStreamsRemoved,
    #[error("level.{coding} = {level} is out of range ({range})")]
    Level {
        coding: &'static str,
        level: i64,
        range: &'static str,
    },
}

/// A validated `[compression]`: what the filter reads per response.
#[derive(Debug, Clone)]
pub struct Compression {
    /// The codings offered, in order of preference.
    pub order: Vec<Coding>,
    pub levels: Levels,
    pub min_length: u64,
    /// `file_cache_bytes`.
    pub file_cache_bytes: u64,
    /// Lower-case media types.
    types: Vec<Vec<u8>>,
}

impl CompressionConfig {
    /// Checks the table; `Ok(None)` when compression is off.
    pub fn build(&self) -> Result<Option<Compression>, CompressionConfigError> {
        if self.removed_max_streams.is_some() {
            return Err(CompressionConfigError::MaxStreamsRemoved);
        }
        let mut order = Vec::new();
        for name in &self.algorithms {
            let coding = Coding::from_token(name.as_bytes())
                .filter(|c| *c != Coding::Identity)
                .ok_or_else(|| CompressionConfigError::UnknownAlgorithm(name.clone()))?;
            if !order.contains(&coding) {
                order.push(coding);
            }
        }
        let l = self.level;
        let check = |coding, level: i64, lo: i64, hi: i64, range| {
            if level < lo || level > hi {
                return Err(CompressionConfigError::Level {
                    coding,
                    level,
                    range,
                });
            }
            Ok(())
        };
        check("gzip", l.gzip as i64, 1, 9, "1-9")?;
        check("br", l.br as i64, 0, 11, "0-11")?;
        check("zstd", l.zstd as i64, 1, 19, "1-19")?;
        if !self.enabled || order.is_empty() {
            return Ok(None);
        }
        Ok(Some(Compression {
            order,
            levels: l,
            min_length: self.min_length,
            file_cache_bytes: self.file_cache_bytes.unwrap_or(DEFAULT_FILE_CACHE_BYTES),
            types: self
                .types
                .iter()
                .map(|t| t.trim().to_ascii_lowercase().into_bytes())
                .collect(),
        }))
    }
}

impl Compression {
    /// Whether a response of this Content-Type is compressed (its media type, without
    /// parameters, is listed).
    pub fn compresses_type(&self, content_type: &[u8]) -> bool {
        let media = content_type
            .split(|&b| b == b';')
            .next()
            .unwrap_or_default();
        let media = wire::trim_ows(media);
        self.types.iter().any(|t| media.eq_ignore_ascii_case(t))
    }

    /// The level for `coding`, as its library takes it.
    pub fn level(&self, coding: Coding) -> i32 {
        match coding {
            Coding::Gzip => self.levels.gzip as i32,
            Coding::Brotli => self.levels.br as i32,
            Coding::Zstd => self.levels.zstd,
            Coding::Identity => 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_build_and_types_match_without_parameters() {
        let c = CompressionConfig::default().build().unwrap().unwrap();
        assert_eq!(c.order, Coding::COMPRESSED);
        assert!(c.compresses_type(b"text/html; charset=utf-8"));
        assert!(c.compresses_type(b"Application/JSON"));
        assert!(!c.compresses_type(b"image/png"));
        assert!(!c.compresses_type(b"text/html-ish"));
    }

    #[test]
    fn refuses_unknown_algorithms_and_levels_out_of_range() {
        let mut c = CompressionConfig {
            algorithms: vec!["deflate".into()],
            ..CompressionConfig::default()
        };
        assert!(matches!(
            c.build(),
            Err(CompressionConfigError::UnknownAlgorithm(_))
        ));
        c.algorithms = vec!["gzip".into()];
        c.level.gzip = 10;
        assert!(matches!(
            c.build(),
            Err(CompressionConfigError::Level { .. })
        ));
        c.level.gzip = 1;
        c.enabled = false;
        assert!(c.build().unwrap().is_none());
    }
}
